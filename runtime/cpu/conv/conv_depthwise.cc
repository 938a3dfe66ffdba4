#include "runtime/cpu/conv/conv_depthwise.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "runtime/cpu/elementwise/vector_loops.h"

namespace ot {
namespace cpu {
namespace {

// acc[t * B + lane] += sum over the output rows and columns that tap t = (kh, kw) joins to
// data, of dy * x, for one image and one channel block of B lanes.
template <int B>
OT_VECTOR_CLONES void ImageBlock(const DepthwiseGeometry& g, const float* x, const float* dy, float* acc,
                                 float* bias) {
  const int64_t kh_n = g.kernel_h, kw_n = g.kernel_w;
  for (int64_t kh = 0; kh < kh_n; ++kh) {
    const int64_t off_h = kh * g.dilation_h - g.pad_top;
    // oh with 0 <= oh*sh + off_h < in_h
    const int64_t oh0 = off_h >= 0 ? 0 : (-off_h + g.stride_h - 1) / g.stride_h;
    const int64_t oh1 = std::min(g.out_h, (g.in_h - off_h + g.stride_h - 1) / g.stride_h);
    for (int64_t kw = 0; kw < kw_n; ++kw) {
      const int64_t off_w = kw * g.dilation_w - g.pad_left;
      const int64_t ow0 = off_w >= 0 ? 0 : (-off_w + g.stride_w - 1) / g.stride_w;
      const int64_t ow1 = std::min(g.out_w, (g.in_w - off_w + g.stride_w - 1) / g.stride_w);
      float sum[B] = {};
      for (int64_t oh = oh0; oh < oh1; ++oh) {
        const float* drow = dy + oh * g.out_w * B;
        const float* xrow = x + (oh * g.stride_h + off_h) * g.in_w * B;
        for (int64_t ow = ow0; ow < ow1; ++ow) {
          const float* d = drow + ow * B;
          const float* v = xrow + (ow * g.stride_w + off_w) * B;
          for (int l = 0; l < B; ++l) sum[l] += d[l] * v[l];
        }
      }
      float* a = acc + (kh * kw_n + kw) * B;
      for (int l = 0; l < B; ++l) a[l] += sum[l];
    }
  }
  if (bias) {
    float sum[B] = {};
    for (int64_t p = 0; p < g.out_h * g.out_w; ++p)
      for (int l = 0; l < B; ++l) sum[l] += dy[p * B + l];
    for (int l = 0; l < B; ++l) bias[l] += sum[l];
  }
}

template <int B>
void Run(const DepthwiseGeometry& g, const float* x, const float* dy, float* dw, float* db) {
  const int64_t blocks = (g.channels + B - 1) / B, taps = g.kernel_h * g.kernel_w;
  const int64_t x_image = blocks * g.in_h * g.in_w * B, dy_image = blocks * g.out_h * g.out_w * B;
  const int64_t x_block = g.in_h * g.in_w * B, dy_block = g.out_h * g.out_w * B;
#pragma omp parallel
  {
    std::vector<float> acc(static_cast<size_t>(taps * B)), bias(B);
    std::vector<double> total(static_cast<size_t>(taps * B)), total_bias(B);
#pragma omp for schedule(static)
    for (int64_t cb = 0; cb < blocks; ++cb) {
      std::fill(total.begin(), total.end(), 0.0);
      std::fill(total_bias.begin(), total_bias.end(), 0.0);
      for (int64_t n = 0; n < g.batch; ++n) {
        std::fill(acc.begin(), acc.end(), 0.f);
        std::fill(bias.begin(), bias.end(), 0.f);
        ImageBlock<B>(g, x + n * x_image + cb * x_block, dy + n * dy_image + cb * dy_block, acc.data(),
                      db ? bias.data() : nullptr);
        for (size_t i = 0; i < acc.size(); ++i) total[i] += acc[i];
        for (int l = 0; l < B; ++l) total_bias[static_cast<size_t>(l)] += bias[static_cast<size_t>(l)];
      }
      for (int l = 0; l < B; ++l) {
        const int64_t c = cb * B + l;
        if (c >= g.channels) break;
        if (dw)
          for (int64_t t = 0; t < taps; ++t) dw[c * taps + t] = static_cast<float>(total[static_cast<size_t>(t * B + l)]);
        if (db) db[c] = static_cast<float>(total_bias[static_cast<size_t>(l)]);
      }
    }
  }
}

}  // namespace

void DepthwiseWeightGradient(const DepthwiseGeometry& g, const float* x, const float* dy, float* dw, float* db) {
  if (g.block == 8) return Run<8>(g, x, dy, dw, db);
  Run<16>(g, x, dy, dw, db);
}

}  // namespace cpu
}  // namespace ot
