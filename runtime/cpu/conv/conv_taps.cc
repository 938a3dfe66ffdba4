// TapConv: see conv_taps.h.
#include "runtime/cpu/conv/conv_taps.h"

#include <algorithm>
#include <cstring>

#include "graph/error.h"
#include "runtime/cpu/elementwise/vector_loops.h"

namespace ot {
namespace cpu {
namespace {

// ScratchBuffer slots (one Compute runs either TapConv or conv.cc's primitives).
constexpr int kInputScratch = 0, kWeightScratch = 1, kGradScratch = 2, kOutputScratch = 4, kGatherScratch = 7;

}  // namespace

dnnl::memory::desc ChannelsLast4(const Shape& s) {
  return dnnl::memory::desc(ToDims(s), dnnl::memory::data_type::f32, dnnl::memory::format_tag::nhwc);
}

float* ScratchFloats(int slot, int64_t floats) {
  return static_cast<float*>(ScratchBuffer(slot, static_cast<size_t>(std::max<int64_t>(floats, 1)) * sizeof(float)));
}

void Sgemm(bool a_transposed, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
           int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  const dnnl_status_t s = dnnl_sgemm(a_transposed ? 'T' : 'N', 'N', m, n, k, 1.f, a, lda, b, ldb,
                                     accumulate ? 1.f : 0.f, c, ldc);
  if (s != dnnl_success) throw Error("oneDNN sgemm failed (status " + std::to_string(static_cast<int>(s)) + ")");
}

}  // namespace cpu
}  // namespace ot

// oneDNN exports its bfloat16 gemm (row-major, as dnnl_sgemm) without declaring it in its
// public headers; bfloat16_t is a struct of one uint16_t.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t m, dnnl_dim_t n, dnnl_dim_t k,
                                                float alpha, const uint16_t* a, dnnl_dim_t lda, const uint16_t* b,
                                                dnnl_dim_t ldb, float beta, float* c, dnnl_dim_t ldc);

namespace ot {
namespace cpu {

void GemmBf16(bool a_transposed, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
              int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  const dnnl_status_t s = dnnl_gemm_bf16bf16f32(a_transposed ? 'T' : 'N', 'N', m, n, k, 1.f, a, lda, b, ldb,
                                                accumulate ? 1.f : 0.f, c, ldc);
  if (s != dnnl_success)
    throw Error("oneDNN gemm_bf16bf16f32 failed (status " + std::to_string(static_cast<int>(s)) + ")");
}

OT_VECTOR_CLONES void ToBf16(const float* src, int64_t n, uint16_t* dst) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16Bits(src[i]);
}

void ChannelSums(const float* rows, int64_t count, int64_t channels, float* sums) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0;
    for (int64_t r = 0; r < count; ++r) sum += rows[r * channels + c];
    sums[c] = static_cast<float>(sum);
  }
}

namespace {

// The first output o >= 0 with o * stride >= offset (offset = pad - tap: where a tap's
// input coordinate o * stride - offset reaches 0, or, with offset = size + pad - tap, leaves
// the map).
int64_t FirstOnData(int64_t offset, int64_t stride) {
  return offset <= 0 ? 0 : (offset + stride - 1) / stride;
}

}  // namespace

std::unique_ptr<TapConv> TapConv::Make(const Shape& x, const Shape& w, const Shape& y,
                                       const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                                       const std::vector<int64_t>& pads_begin, const Layouts& layouts) {
  if (x.size() != 4 || w.size() != 4 || y.size() != 4 || strides.size() != 2 || dilations.size() != 2 ||
      pads_begin.size() != 2 || x[1] != w[1] || y[1] != w[0] || x[0] != y[0])
    return nullptr;
  if (strides[0] < 1 || strides[1] < 1 || dilations[0] != 1 || dilations[1] != 1) return nullptr;
  for (int64_t d : {x[0], x[1], x[2], x[3], y[1], y[2], y[3]})
    if (d <= 0) return nullptr;
  std::unique_ptr<TapConv> t(new TapConv());
  t->n_ = x[0];
  t->c_ = x[1];
  t->ih_ = x[2];
  t->iw_ = x[3];
  t->o_ = y[1];
  t->oh_ = y[2];
  t->ow_ = y[3];
  t->kh_ = w[2];
  t->kw_ = w[3];
  t->pad_h_ = pads_begin[0];
  t->pad_w_ = pads_begin[1];
  t->stride_h_ = strides[0];
  t->stride_w_ = strides[1];
  t->forward_spans_ = t->Spans(false);
  t->backward_spans_ = t->Spans(true);
  int64_t taps = 0;
  for (const auto& spans : t->forward_spans_) {
    if (spans.empty()) return nullptr;  // an output of bias alone: not this class's business
    for (const Span& s : spans) taps += s.k_last - s.k_first + 1;
  }
  for (const auto& spans : t->backward_spans_)
    if (spans.empty()) return nullptr;  // an input no output reads
  t->data_share_ = static_cast<double>(taps) / static_cast<double>(t->oh_ * t->ow_ * t->kh_ * t->kw_);
  // Weights: plain [O, C, KH, KW] to [KH, KW, C, O] (forward) and back (weight gradient);
  // to [KH, KW reversed, O, C] (input gradient) one kernel column at a time.
  const dnnl::memory::desc plain = PlainDesc(w, DType::kFloat32);
  const dnnl::memory::desc hwio(ToDims(w), dnnl::memory::data_type::f32, dnnl::memory::format_tag::hwio);
  t->w_forward_ = Reorder(plain, hwio);
  t->dw_out_ = Reorder(hwio, plain);
  const int64_t o = w[0], c = w[1], kh = w[2], kw = w[3];
  const dnnl::memory::desc flipped(ToDims(w), dnnl::memory::data_type::f32, {c, 1, kw * o * c, o * c});
  for (int64_t k = 0; k < kw; ++k)
    t->w_backward_.emplace_back(plain.submemory_desc({o, c, kh, 1}, {0, 0, 0, k}),
                                flipped.submemory_desc({o, c, kh, 1}, {0, 0, 0, kw - 1 - k}));
  const dnnl::memory::desc x_nhwc = ChannelsLast4(x), y_nhwc = ChannelsLast4(y);
  t->x_in_ = Reorder(layouts.x, x_nhwc);
  t->y_out_ = Reorder(y_nhwc, layouts.y);
  t->dy_in_ = Reorder(layouts.dy, y_nhwc);
  t->dx_out_ = Reorder(x_nhwc, layouts.dx);
  return t;
}

std::vector<std::vector<TapConv::Span>> TapConv::Spans(bool flip) const {
  // Forward: output (oy, ox) reads input (oy * sh + r - pad_h, ox * sw + c - pad_w) through
  // tap (r, c): for each kernel row, the columns that land on data are adjacent pixels.
  // Input gradient (flip): input (iy, ix) takes output ((iy + pad_h - r) / sh, (ix + pad_w
  // - c) / sw) where those divide: with stride 1 adjacent columns take adjacent outputs (in
  // flipped column order); with larger strides every column is a span of its own.
  const int64_t rows = flip ? ih_ : oh_, cols = flip ? iw_ : ow_;
  std::vector<std::vector<Span>> all(static_cast<size_t>(rows * cols));
  for (int64_t y = 0; y < rows; ++y)
    for (int64_t x = 0; x < cols; ++x)
      for (int64_t r = 0; r < kh_; ++r) {
        std::vector<Span>& spans = all[static_cast<size_t>(y * cols + x)];
        if (!flip) {
          const int64_t ry = y * stride_h_ + r - pad_h_;
          if (ry < 0 || ry >= ih_) continue;
          const int64_t base = x * stride_w_ - pad_w_;  // input column of kernel column 0
          const int64_t lo = std::max<int64_t>(0, -base), hi = std::min(kw_ - 1, iw_ - 1 - base);
          if (lo > hi) continue;
          spans.push_back({r, lo, hi, ry * iw_ + base + lo});
          continue;
        }
        const int64_t ty = y + pad_h_ - r;
        if (ty < 0 || ty % stride_h_ != 0 || ty / stride_h_ >= oh_) continue;
        const int64_t oy = ty / stride_h_;
        if (stride_w_ == 1) {
          // Columns c in [lo, hi] take outputs x + pad_w - c: ascending outputs are
          // descending c, i.e. ascending flipped columns kw - 1 - c.
          const int64_t lo = std::max<int64_t>(0, x + pad_w_ - (ow_ - 1)), hi = std::min(kw_ - 1, x + pad_w_);
          if (lo > hi) continue;
          spans.push_back({r, kw_ - 1 - hi, kw_ - 1 - lo, oy * ow_ + x + pad_w_ - hi});
          continue;
        }
        for (int64_t c = 0; c < kw_; ++c) {
          const int64_t tx = x + pad_w_ - c;
          if (tx < 0 || tx % stride_w_ != 0 || tx / stride_w_ >= ow_) continue;
          spans.push_back({r, kw_ - 1 - c, kw_ - 1 - c, oy * ow_ + tx / stride_w_});
        }
      }
  return all;
}

void TapConv::Products(const std::vector<std::vector<Span>>& spans, const float* in, int64_t in_c, int64_t in_pixels,
                       const float* wt, int64_t out_c, int64_t out_pixels, float* out) const {
  for (size_t p = 0; p < spans.size(); ++p) {
    bool first = true;
    for (const Span& s : spans[p]) {
      const int64_t taps = s.k_last - s.k_first + 1;
      Sgemm(false, n_, out_c, taps * in_c, in + s.pixel * in_c, in_pixels * in_c,
            wt + (s.kh * kw_ + s.k_first) * in_c * out_c, out_c, !first, out + static_cast<int64_t>(p) * out_c,
            out_pixels * out_c);
      first = false;
    }
  }
}

void TapConv::Forward(const void* x, const void* w, const float* b, float* y) {
  float* wt = ScratchFloats(kWeightScratch, kh_ * kw_ * c_ * o_);
  w_forward_.Run(const_cast<void*>(w), wt);
  const float* xr = static_cast<const float*>(x_in_.Apply(const_cast<void*>(x), kInputScratch).get_data_handle());
  float* yr = y_out_.needed() ? ScratchFloats(kOutputScratch, n_ * oh_ * ow_ * o_) : y;
  Products(forward_spans_, xr, c_, ih_ * iw_, wt, o_, oh_ * ow_, yr);
  if (b) {
    const int64_t rows = n_ * oh_ * ow_;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < o_; ++o) yr[r * o_ + o] += b[o];
  }
  if (y_out_.needed()) y_out_.Run(yr, y);
}

void TapConv::Backward(const void* dy, const void* x, const void* w, float* dx, float* dw, float* db) {
  const int64_t taps = kh_ * kw_;
  const int64_t in_pixels = ih_ * iw_, out_pixels = oh_ * ow_;
  const float* dyr = static_cast<const float*>(dy_in_.Apply(const_cast<void*>(dy), kGradScratch).get_data_handle());
  if (dx) {
    float* wf = ScratchFloats(kWeightScratch, taps * c_ * o_);
    for (const Reorder& column : w_backward_) column.Run(const_cast<void*>(w), wf);
    float* dxr = dx_out_.needed() ? ScratchFloats(kOutputScratch, n_ * in_pixels * c_) : dx;
    Products(backward_spans_, dyr, o_, out_pixels, wf, c_, in_pixels, dxr);
    if (dx_out_.needed()) dx_out_.Run(dxr, dx);
  }
  if (db) ChannelSums(dyr, n_ * out_pixels, o_, db);
  if (!dw) return;
  const float* xr = static_cast<const float*>(x_in_.Apply(const_cast<void*>(x), kInputScratch).get_data_handle());
  // dW by tap [KH, KW, C, O]: the products of x and dy rows over the outputs the tap joins to data.
  float* dwt = ScratchFloats(kWeightScratch, taps * c_ * o_);
  float* gathered = ScratchFloats(kOutputScratch, n_ * out_pixels * c_);
  float* gathered_dy = ScratchFloats(kGatherScratch, n_ * out_pixels * o_);
  for (int64_t r = 0; r < kh_; ++r)
    for (int64_t k = 0; k < kw_; ++k) {
      float* tap = dwt + (r * kw_ + k) * c_ * o_;
      // Outputs [y0, y1) x [x0, x1) read input (oy * sh + r - pad_h, ox * sw + k - pad_w) on data.
      const int64_t y0 = FirstOnData(pad_h_ - r, stride_h_), y1 = std::min(oh_, FirstOnData(ih_ + pad_h_ - r, stride_h_));
      const int64_t x0 = FirstOnData(pad_w_ - k, stride_w_), x1 = std::min(ow_, FirstOnData(iw_ + pad_w_ - k, stride_w_));
      if (y0 >= y1 || x0 >= x1) {
        std::memset(tap, 0, static_cast<size_t>(c_ * o_) * sizeof(float));
        continue;
      }
      const int64_t ny = y1 - y0, nx = x1 - x0, rows = n_ * ny * nx;
      const float* a = gathered;
      const float* d = gathered_dy;
      if (ny == oh_ && nx == ow_ && ny == ih_ && nx == iw_ && stride_h_ == 1 && stride_w_ == 1) {
        a = xr;  // every output reads the input pixel at its own position
        d = dyr;
      } else {
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < n_; ++n)
          for (int64_t oy = y0; oy < y1; ++oy) {
            const int64_t row = (n * ny + oy - y0) * nx;
            const float* src = xr + (n * in_pixels + (oy * stride_h_ + r - pad_h_) * iw_ + x0 * stride_w_ + k - pad_w_) * c_;
            if (stride_w_ == 1)
              std::memcpy(gathered + row * c_, src, static_cast<size_t>(nx * c_) * sizeof(float));
            else
              for (int64_t i = 0; i < nx; ++i)
                std::memcpy(gathered + (row + i) * c_, src + i * stride_w_ * c_, static_cast<size_t>(c_) * sizeof(float));
            std::memcpy(gathered_dy + row * o_, dyr + (n * out_pixels + oy * ow_ + x0) * o_,
                        static_cast<size_t>(nx * o_) * sizeof(float));
          }
      }
      Sgemm(true, c_, o_, rows, a, c_, d, o_, false, tap, o_);
    }
  dw_out_.Run(dwt, dw);
}

}  // namespace cpu
}  // namespace ot
