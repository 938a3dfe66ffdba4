// DenseConv: see conv_dense.h.
#include "runtime/cpu/conv/conv_dense.h"

#include <cstring>

#include "runtime/cpu/layout/dnnl_layout.h"

namespace ot {
namespace cpu {
namespace {

constexpr size_t kMaxMatrixBytes = size_t{64} << 20;
constexpr int kMatrixScratch = 5, kBiasScratch = 6;  // ScratchBuffer slots (conv.cc's reorders use 0-3)

dnnl::memory::desc Matrix(int64_t rows, int64_t cols, bool transposed, DType dtype = DType::kFloat32) {
  // transposed: the [rows, cols] view of a row-major [cols, rows] buffer.
  return dnnl::memory::desc({rows, cols}, ToDnnl(dtype),
                            transposed ? dnnl::memory::dims{1, rows} : dnnl::memory::dims{cols, 1});
}

}  // namespace

std::unique_ptr<DenseConv> DenseConv::Make(const Shape& x, const Shape& w, const Shape& y,
                                           const std::vector<int64_t>& strides,
                                           const std::vector<int64_t>& dilations,
                                           const std::vector<int64_t>& pads_begin, int64_t in_block,
                                           int64_t out_block, DType compute) {
  if (x.size() != 4 || w.size() != 4 || y.size() != 4 || strides.size() != 2 || dilations.size() != 2 ||
      pads_begin.size() != 2 || x[1] != w[1] || y[1] != w[0] || x[0] != y[0])
    return nullptr;
  if ((in_block && x[1] % in_block) || (out_block && y[1] % out_block)) return nullptr;
  const int64_t ih = x[2], iw = x[3], oh = y[2], ow = y[3], kh = w[2], kw = w[3];
  const int64_t p_count = oh * ow, q_count = ih * iw;
  if (p_count <= 0 || q_count <= 0 || 4 * q_count >= 3 * kh * kw) return nullptr;
  const size_t bytes = static_cast<size_t>(y[1] * p_count) * static_cast<size_t>(x[1] * q_count) * sizeof(float);
  if (bytes > kMaxMatrixBytes) return nullptr;
  std::unique_ptr<DenseConv> d(new DenseConv());
  d->tap_.assign(static_cast<size_t>(p_count * q_count), -1);
  for (int64_t oy = 0; oy < oh; ++oy)
    for (int64_t ox = 0; ox < ow; ++ox)
      for (int64_t iy = 0; iy < ih; ++iy)
        for (int64_t ix = 0; ix < iw; ++ix) {
          const int64_t dy = iy + pads_begin[0] - oy * strides[0], dx = ix + pads_begin[1] - ox * strides[1];
          if (dy < 0 || dx < 0 || dy % dilations[0] || dx % dilations[1]) return nullptr;
          const int64_t ky = dy / dilations[0], kx = dx / dilations[1];
          if (ky >= kh || kx >= kw) return nullptr;  // an output that does not see this input
          d->tap_[static_cast<size_t>((oy * ow + ox) * q_count + iy * iw + ix)] = static_cast<int32_t>(ky * kw + kx);
        }
  d->n_ = x[0];
  d->c_ = x[1];
  d->o_ = y[1];
  d->p_ = p_count;
  d->q_ = q_count;
  d->taps_ = kh * kw;
  d->in_block_ = in_block;
  d->out_block_ = out_block;
  d->rows_ = d->o_ * p_count;
  d->cols_ = d->c_ * q_count;
  d->compute_ = compute;
  d->x_md_ = Matrix(d->n_, d->cols_, false, compute);
  d->x_out_md_ = Matrix(d->n_, d->cols_, false);
  d->y_md_ = Matrix(d->n_, d->rows_, false);
  d->dy_md_ = Matrix(d->n_, d->rows_, false, compute);
  d->m_md_ = Matrix(d->rows_, d->cols_, false, compute);
  d->dm_md_ = Matrix(d->rows_, d->cols_, false);
  d->mt_md_ = Matrix(d->cols_, d->rows_, true, compute);
  d->bias_md_ = Matrix(1, d->rows_, false);
  d->dyt_md_ = Matrix(d->rows_, d->n_, true, compute);
  return d;
}

int64_t DenseConv::InOffset(int64_t c, int64_t q) const {
  if (!in_block_) return c * q_ + q;
  return (c / in_block_) * q_ * in_block_ + q * in_block_ + c % in_block_;
}

int64_t DenseConv::OutOffset(int64_t o, int64_t p) const {
  if (!out_block_) return o * p_ + p;
  return (o / out_block_) * p_ * out_block_ + p * out_block_ + o % out_block_;
}

template <typename T> void DenseConv::BuildMatrix(const T* w, T* m) const {
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < o_; ++o)
    for (int64_t p = 0; p < p_; ++p) {
      T* row = m + OutOffset(o, p) * cols_;
      const int32_t* taps = tap_.data() + p * q_;
      for (int64_t c = 0; c < c_; ++c) {
        const T* wc = w + (o * c_ + c) * taps_;
        for (int64_t q = 0; q < q_; ++q) row[InOffset(c, q)] = wc[taps[q]];
      }
    }
}

// The matrix of weights `w` (of the compute type) in scratch buffer kMatrixScratch.
void* DenseConv::WeightMatrix(const void* w) const {
  void* m = ScratchBuffer(kMatrixScratch, matrix_bytes());
  if (compute_ == DType::kFloat32) BuildMatrix(static_cast<const float*>(w), static_cast<float*>(m));
  else BuildMatrix(static_cast<const uint16_t*>(w), static_cast<uint16_t*>(m));  // bfloat16 bits, copied
  return m;
}

float DenseConv::DyAt(const void* dy, int64_t i) const {
  if (compute_ == DType::kFloat32) return static_cast<const float*>(dy)[i];
  const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(dy)[i]) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void DenseConv::Forward(const void* x, const void* w, const float* b, float* y) {
  if (!forward_) {  // made on first use (whether there is a bias is known then)
    auto desc = b ? dnnl::matmul::desc(x_md_, mt_md_, bias_md_, y_md_) : dnnl::matmul::desc(x_md_, mt_md_, y_md_);
    forward_ = dnnl::matmul(dnnl::matmul::primitive_desc(desc, Engine()));
  }
  void* m = WeightMatrix(w);
  std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, dnnl::memory(x_md_, Engine(), const_cast<void*>(x))},
                                                {DNNL_ARG_WEIGHTS, dnnl::memory(mt_md_, Engine(), m)},
                                                {DNNL_ARG_DST, dnnl::memory(y_md_, Engine(), y)}};
  if (b) {
    float* big = static_cast<float*>(ScratchBuffer(kBiasScratch, static_cast<size_t>(rows_) * sizeof(float)));
    for (int64_t o = 0; o < o_; ++o)
      for (int64_t p = 0; p < p_; ++p) big[OutOffset(o, p)] = b[o];
    args[DNNL_ARG_BIAS] = dnnl::memory(bias_md_, Engine(), big);
  }
  forward_.execute(Stream(), args);
}

void DenseConv::BackwardData(const void* dy, const void* w, float* dx) {
  if (!backward_data_)
    backward_data_ =
        dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(dy_md_, m_md_, x_out_md_), Engine()));
  void* m = WeightMatrix(w);
  backward_data_.execute(Stream(), {{DNNL_ARG_SRC, dnnl::memory(dy_md_, Engine(), const_cast<void*>(dy))},
                                    {DNNL_ARG_WEIGHTS, dnnl::memory(m_md_, Engine(), m)},
                                    {DNNL_ARG_DST, dnnl::memory(x_out_md_, Engine(), dx)}});
}

void DenseConv::BackwardWeights(const void* dy, const void* x, float* dw, float* db) {
  if (!backward_weights_)
    backward_weights_ =
        dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(dyt_md_, x_md_, dm_md_), Engine()));
  // The float32 gradient matrix, whatever the compute type.
  float* dm = static_cast<float*>(
      ScratchBuffer(kMatrixScratch, static_cast<size_t>(rows_ * cols_) * sizeof(float)));
  backward_weights_.execute(Stream(), {{DNNL_ARG_SRC, dnnl::memory(dyt_md_, Engine(), const_cast<void*>(dy))},
                                       {DNNL_ARG_WEIGHTS, dnnl::memory(x_md_, Engine(), const_cast<void*>(x))},
                                       {DNNL_ARG_DST, dnnl::memory(dm_md_, Engine(), dm)}});
  // Fold the matrix back into the taps: each weight is the sum of the entries it filled.
  if (dw) {
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < o_; ++o) {
      float* wo = dw + o * c_ * taps_;
      std::memset(wo, 0, static_cast<size_t>(c_ * taps_) * sizeof(float));
      for (int64_t p = 0; p < p_; ++p) {
        const float* row = dm + OutOffset(o, p) * cols_;
        const int32_t* taps = tap_.data() + p * q_;
        for (int64_t c = 0; c < c_; ++c) {
          float* wc = wo + c * taps_;
          for (int64_t q = 0; q < q_; ++q) wc[taps[q]] += row[InOffset(c, q)];
        }
      }
    }
  }
  if (db) {
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < o_; ++o) {
      double sum = 0;
      for (int64_t n = 0; n < n_; ++n)
        for (int64_t p = 0; p < p_; ++p) sum += DyAt(dy, n * rows_ + OutOffset(o, p));
      db[o] = static_cast<float>(sum);
    }
  }
}

}  // namespace cpu
}  // namespace ot
