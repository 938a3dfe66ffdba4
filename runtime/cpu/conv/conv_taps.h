// Convolutions on small maps as matrix products over the taps that touch data.
//
// oneDNN's direct kernels compute a convolution's whole window at every output, padding
// included: a 3x3 padded convolution on a 4x4 map multiplies 9 taps at each of its 16
// output positions (144) where 100 touch data (on 8x8: 576 where 484 do). In channels-last data the
// taps of one kernel row that touch data at one output are adjacent pixels, so
//   Y[:, p, :] += X[:, pixels of row kh, :] (batch x taps*C) . W[kh, taps, C, O]
// is one matrix product per output position and kernel row (batch rows, leading dimension
// one image), and only data is multiplied; with a stride the same holds (the row's taps
// still read adjacent pixels). The input gradient is the same with the kernel flipped along
// its width and transposed (with a stride, each input pixel takes one kernel column per
// product: the columns that reach it skip by the stride); the weight gradient is one product
// per tap over the output positions it joins to data (gathered into contiguous rows). Every
// product is oneDNN's sgemm.
//
// Activations come and go in any layout (oneDNN reorders to and from channels-last
// scratch; none where they are channels-last already); weights are plain [O, C, KH, KW].
// Whether this beats oneDNN's own primitive depends on the shape and the CPU: under
// --conv-algo auto, conv.cc takes it for the forward pass where at most 3/4 of the window
// touches data (and no Winograd applies), and times it against oneDNN's backward primitives.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "runtime/cpu/layout/dnnl_layout.h"

namespace ot {
namespace cpu {

// Helpers of our convolutions: the channels-last descriptor of a 4D shape; per-thread
// scratch (ScratchBuffer) of `floats` floats; the per-channel sums (in double) of `count`
// channels-last rows (a bias gradient); row-major C[m x n] = A[m x k] . B[k x n] (+ C when
// `accumulate`; A stored [k x m] when `a_transposed`) on oneDNN's sgemm.
dnnl::memory::desc ChannelsLast4(const Shape& s);
float* ScratchFloats(int slot, int64_t floats);
void ChannelSums(const float* rows, int64_t count, int64_t channels, float* sums);
void Sgemm(bool a_transposed, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
           int64_t ldb, bool accumulate, float* c, int64_t ldc);
// The same with bfloat16 A and B (raw bits, uint16_t) and float32 C, accumulated in float32,
// on oneDNN's gemm_bf16bf16f32 (avx512_core_bf16's dot products where the CPU has them).
void GemmBf16(bool a_transposed, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
              int64_t ldb, bool accumulate, float* c, int64_t ldc);
// The bfloat16 of a float (raw bits), rounded to nearest even; NaN stays NaN.
inline uint16_t Bf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
}
// dst[i] = Bf16Bits(src[i]), i < n.
void ToBf16(const float* src, int64_t n, uint16_t* dst);

// A convolution of ours on sgemm (TapConv here, WinogradConv in conv_winograd.h): what the
// Conv and ConvGrad kernels call.
class SgemmConv {
 public:
  // Layouts of the activations: x and dy as they come, y and dx as they are to be written.
  struct Layouts {
    dnnl::memory::desc x, y, dy, dx;
  };
  virtual ~SgemmConv() = default;
  // y = conv(x, w) + b (b may be null). x and w are of layouts.x's element type (float32;
  // WinogradConv also reads bfloat16), b and y float32.
  virtual void Forward(const void* x, const void* w, const float* b, float* y) = 0;
  // The gradients of dy: dx (the input's, in layouts.dx), dw (plain [O, C, KH, KW]) and
  // db ([O]); each may be null (x is read only for dw, w only for dx). dy is of layouts.dy's
  // element type, x and w of layouts.x's; the gradients float32.
  virtual void Backward(const void* dy, const void* x, const void* w, float* dx, float* dw, float* db) = 0;
  // Whether it reads bfloat16 inputs as they are (else the caller widens them to float32).
  virtual bool ReadsBf16() const { return false; }
};

class TapConv final : public SgemmConv {
 public:
  // The convolution in ONNX terms (dilations >= 1): null unless it is 2D, ungrouped,
  // dilation 1, every output sees an input and every input an output (any stride).
  static std::unique_ptr<TapConv> Make(const Shape& x, const Shape& w, const Shape& y,
                                       const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                                       const std::vector<int64_t>& pads_begin, const Layouts& layouts);

  // The share of the window's multiplications that touch data (1 where nothing is padding).
  double data_share() const { return data_share_; }

  void Forward(const void* x, const void* w, const float* b, float* y) override;
  void Backward(const void* dy, const void* x, const void* w, float* dx, float* dw, float* db) override;

 private:
  TapConv() = default;
  // One tap row's product: its first and last kernel column, and the pixel (in the map
  // the product reads) where its first column reads.
  struct Span {
    int64_t kh = 0, k_first = 0, k_last = 0, pixel = 0;
  };
  // The spans of each output position (or, `flip`, of each input position: the input
  // gradient's case, the kernel columns running backwards).
  std::vector<std::vector<Span>> Spans(bool flip) const;
  // out[:, p, :] = sum over p's spans of in[:, span pixels, :] . wt[span taps] (channels-
  // last data of `batch` images with `in_pixels` x in_c and `out_pixels` x out_c values).
  void Products(const std::vector<std::vector<Span>>& spans, const float* in, int64_t in_c, int64_t in_pixels,
                const float* wt, int64_t out_c, int64_t out_pixels, float* out) const;

  int64_t n_ = 0, c_ = 0, o_ = 0, ih_ = 0, iw_ = 0, oh_ = 0, ow_ = 0, kh_ = 0, kw_ = 0, pad_h_ = 0, pad_w_ = 0;
  int64_t stride_h_ = 1, stride_w_ = 1;
  double data_share_ = 1;
  std::vector<std::vector<Span>> forward_spans_, backward_spans_;
  Reorder x_in_, y_out_, dy_in_, dx_out_;  // activations to and from channels-last
  Reorder w_forward_, dw_out_;             // plain weights to [KH, KW, C, O] and back
  std::vector<Reorder> w_backward_;        // plain weights to [KH, KW reversed, O, C], by column
};

}  // namespace cpu
}  // namespace ot
