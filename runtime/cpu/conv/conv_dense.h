// Convolutions on maps no larger than their kernel's window, as one matrix product each.
//
// When every output position of a 2D convolution sees every input position (a 3x3 padded
// convolution on a 2x2 or 1x1 map: ResNet's last stage on 32x32 or 28x28 images), the
// convolution is a fully connected layer from C*IH*IW to O*OH*OW values per image, whose
// (O*OH*OW) x (C*IH*IW) matrix holds each weight tap where it connects an output to an
// input. oneDNN's direct kernels compute the whole 3x3 window at each output, padding
// included (9 taps where 4 touch data on a 2x2 map), and its Winograd tiles are 4x4; the
// product spends its multiplications only on data. Forward, backward-data and
// backward-weights are one oneDNN matmul each, with the matrix built from (or folded back
// into) the plain weights per run.
//
// Under --amp bf16 (`compute` bfloat16) the activations and weights it reads are bfloat16
// and what it writes (outputs, gradients) float32: the matrix is built in bfloat16 and the
// products run on oneDNN's bfloat16 matmul.
//
// Activations are read and written in their own layout, plain NCHW or channel-blocked
// (nChw16c / nChw8c): an image's values are one contiguous vector in either, and the
// matrix's rows and columns are laid out in that order, so no activation is reordered.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/cpu/layout/dnnl_util.h"

namespace ot {
namespace cpu {

class DenseConv {
 public:
  // The convolution in ONNX terms (plain weights [O, C, KH, KW], dilations >= 1): null
  // unless it is 2D, ungrouped, every (output, input) position pair is joined by exactly
  // one tap, the taps that touch data are fewer than 3/4 of the window's at each output,
  // and the matrix stays under 64 MiB. `in_block` / `out_block`: the channel block of the
  // input and output activations (0: plain NCHW); a block must divide the channel count.
  static std::unique_ptr<DenseConv> Make(const Shape& x, const Shape& w, const Shape& y,
                                         const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                                         const std::vector<int64_t>& pads_begin, int64_t in_block, int64_t out_block,
                                         DType compute = DType::kFloat32);

  // y = conv(x, w) + b (b may be null); activations in the layouts given to Make. x, w
  // (and dy below) are of the compute type, the rest float32.
  void Forward(const void* x, const void* w, const float* b, float* y);
  // dx = the input gradient of dy.
  void BackwardData(const void* dy, const void* w, float* dx);
  // dw (plain [O, C, KH, KW]) and db ([O], may be null) of dy and x.
  void BackwardWeights(const void* dy, const void* x, float* dw, float* db);

  // Bytes of the matrix (built in a per-thread scratch buffer each run).
  size_t matrix_bytes() const { return static_cast<size_t>(rows_ * cols_) * DTypeSize(compute_); }

 private:
  DenseConv() = default;
  int64_t InOffset(int64_t c, int64_t q) const;   // column of input channel c at position q
  int64_t OutOffset(int64_t o, int64_t p) const;  // row of output channel o at position p
  template <typename T> void BuildMatrix(const T* w, T* m) const;
  void* WeightMatrix(const void* w) const;  // in scratch, of the compute type
  float DyAt(const void* dy, int64_t i) const;  // element i of dy as float

  int64_t n_ = 0, c_ = 0, o_ = 0, p_ = 0, q_ = 0, taps_ = 0;
  int64_t in_block_ = 0, out_block_ = 0;
  int64_t rows_ = 0, cols_ = 0;  // O*P, C*Q
  std::vector<int32_t> tap_;     // [P * Q]: the weight tap joining output p to input q
  dnnl::matmul forward_, backward_data_, backward_weights_;
  DType compute_ = DType::kFloat32;
  // x_md_, dy_md_, m_md_, mt_md_, dyt_md_ in the compute type; x_out_md_, y_md_, dm_md_ float32.
  dnnl::memory::desc x_md_, y_md_, m_md_, mt_md_, bias_md_, dyt_md_, dy_md_, x_out_md_, dm_md_;
};

}  // namespace cpu
}  // namespace ot
