// Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions on sgemm, for CPUs where oneDNN has none.
//
// oneDNN 2.6's Winograd convolutions (F(4x4, 3x3)) exist for AVX-512 only; on AVX2 its
// direct kernels multiply all 9 taps for every output. Winograd's minimal filtering
// F(2x2, 3x3) computes each 2x2 output tile from a 4x4 input tile with 16 products per
// (input, output) channel pair instead of 36 (2.25x fewer), exactly in exact arithmetic;
// its transforms add and halve only (coefficients 0, +-1, +-1/2), so it rounds much like
// the direct sum. F(4x4, 3x3) takes 36 products for 4x4 outputs (4x fewer than direct) but
// its transforms scale values by up to 8 and 1/24 and round more (oneDNN's F(4x4, 3x3)
// forward: 5-9x PyTorch float32's distance from float64; see conv.cc), so auto offers it
// for the backward primitives only. For each chunk of tiles (cache-sized, one chunk per
// thread at a time; t = m + 2 for m x m output tiles):
//   V[xi] = B^T d B (t x t input tiles, channels-last rows), M[xi] = V[xi] . U[xi] (t*t
//   sgemm calls, U[xi] = G g G^T the transformed weights), y = A^T M A (output tiles).
// Where one point's weights fill half an L2 or more (256+ channels), all tiles are
// transformed first and each point's product is one sgemm over all of them. The weight
// transform and the weight gradient's fold are each one sgemm with kron(G, G). On maps of
// 2x2 pixels, F(2x2, 3x3)'s third point a side always meets padding: 3 points a side
// (9 products) do there.
// The input gradient is the same convolution of dy with the kernel flipped and
// transposed; the weight gradient accumulates dU[xi] = (A dy A^T)[xi]^T . V[xi] ([O][C]) over
// the tiles and folds it back with G^T dU G, written straight in the plain layout.
//
// Under --amp bf16 the inputs x, w and dy come as bfloat16 (layouts.x and layouts.dy say so):
// the transforms read them as they are (widening each value as they load it, no float32
// copies) and compute in float32. The products may run in bfloat16 too (`bf16_products`:
// V, U, dM rounded to bfloat16 after their float32 transforms, GemmBf16 accumulating in
// float32; F(2x2, 3x3) only: F(4x4, 3x3)'s transforms amplify that rounding to 15-30x the
// distance of PyTorch's autocast from float64, against up to 3.5x for F(2x2, 3x3), measured
// in conv_sgemm_test); the sums over tiles and threads stay float32.
// Takes 2D 3x3 convolutions with stride 1, dilation 1, pads 1 (outputs the size of the
// inputs), ungrouped; activations channels-last or channel-blocked (nChw8c, nChw16c) are
// read and written where they are (MapLayout), others through channels-last copies;
// weights plain [O, C, 3, 3].
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/cpu/conv/conv_taps.h"

namespace ot {
namespace cpu {

// An activation as the tile transforms read and write it: channels [cb, cb + block) of
// pixel `pix` (row-major in the map) of image n at base + n * image + (cb / block) *
// block_stride + pix * block: channels-last (one block of all channels) or channel-blocked
// (nChw8c, nChw16c: blocks of 8 or 16).
struct MapLayout {
  int64_t channels, block, block_stride, image;
  // Floats from a pixel's first channel to its last.
  int64_t Span() const { return (channels / block - 1) * block_stride + block; }
  template <typename P>
  P* Pixel(P* base, int64_t n, int64_t pix, int64_t cb) const {
    return base + n * image + (cb / block) * block_stride + pix * block;
  }
};

class WinogradConv final : public SgemmConv {
 public:
  // Null unless the convolution is one this class takes (see above) and `tile` (m) is 2, or
  // 4 without bfloat16 products.
  static std::unique_ptr<WinogradConv> Make(const Shape& x, const Shape& w, const Shape& y,
                                            const std::vector<int64_t>& strides,
                                            const std::vector<int64_t>& dilations,
                                            const std::vector<int64_t>& pads_begin, const TapConv::Layouts& layouts,
                                            int tile = 2, bool bf16_products = false);
  // Whether this is F(2x2, 3x3) on maps of 2x2 pixels (3 points a side; see conv_winograd.cc).
  bool two_by_two_map() const { return t_ == 3; }

  void Forward(const void* x, const void* w, const float* b, float* y) override;
  void Backward(const void* dy, const void* x, const void* w, float* dx, float* dw, float* db) override;
  bool ReadsBf16() const override { return true; }

 private:
  WinogradConv() = default;
  // A product's operand: float32 values, or under bfloat16 products bfloat16 ones.
  struct Operand {
    const float* f32;
    const uint16_t* bf16;
  };
  // c = a . b (Sgemm, or under bfloat16 products GemmBf16), a and b from `a_offset` and
  // `b_offset` elements on.
  void Multiply(bool a_transposed, int64_t m, int64_t n, int64_t k, Operand a, int64_t a_offset, int64_t lda,
                Operand b, int64_t b_offset, int64_t ldb, bool accumulate, float* c, int64_t ldc) const;
  // out (out_map) = conv(in (in_map; bfloat16 where in_bf16)) through transformed weights u.
  void Convolve(const void* in, bool in_bf16, const MapLayout& in_map, Operand u, const MapLayout& out_map,
                const float* bias, float* out) const;
  // Tiles per chunk for rows of `channels` values.
  int64_t ChunkTiles(int64_t channels) const;
  // Whether to transform all tiles before multiplying (see Convolve) in a convolution of
  // in_c to out_c channels.
  bool Whole(int64_t in_c, int64_t out_c) const;
  struct Block {
    int64_t xi, c0, c1;  // point, column range
  };
  std::vector<Block> Blocks(int64_t columns) const;
  // U[xi][C][O] of w (plain [O, C, 3, 3]), or, `flipped`, U[xi][O][C] of the input
  // gradient's kernels; in a scratch buffer.
  Operand TransformWeights(const void* w, bool flipped) const;
  // dw (plain [O, C, 3, 3]) of dU[xi][O][C].
  void FoldWeightGradient(const float* du, float* dw) const;

  int64_t m_ = 2, t_ = 4;  // output tile m x m, input tile t x t
  bool bf16_ = false;      // products in bfloat16
  bool x_bf16_ = false, dy_bf16_ = false;  // x (and w), dy: bfloat16 inputs
  int64_t n_ = 0, c_ = 0, o_ = 0, h_ = 0, w_ = 0, tiles_h_ = 0, tiles_w_ = 0, tiles_ = 0;
  Reorder x_in_, y_out_, dy_in_, dx_out_;  // where the activations' layouts are not the transforms' own
  Reorder dy_wide_;                        // a bfloat16 dy to float32 for the bias gradient
  MapLayout x_map_{}, y_map_{}, dy_map_{}, dx_map_{};
  Reorder w_forward_, w_backward_;  // plain to [3, 3, C, O] and [3, 3, O, C]
};

}  // namespace cpu
}  // namespace ot
