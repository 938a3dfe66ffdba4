// WinogradConv: see conv_winograd.h.
#include "runtime/cpu/conv_winograd.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "graph/error.h"
#include "runtime/cpu/vector_loops.h"

namespace ot {
namespace cpu {
namespace {

// ScratchBuffer slots: the caller's (0-4) and each thread's chunk buffers (5-7).
constexpr int kInputScratch = 0, kWeightScratch = 1, kGradScratch = 2, kZeroScratch = 3, kOutputScratch = 4;
constexpr int kTileScratch = 5, kProductScratch = 6;

float* Scratch(int slot, int64_t floats) {
  return static_cast<float*>(ScratchBuffer(slot, static_cast<size_t>(std::max<int64_t>(floats, 1)) * sizeof(float)));
}

void Sgemm(bool a_transposed, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
           int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  const dnnl_status_t s = dnnl_sgemm(a_transposed ? 'T' : 'N', 'N', m, n, k, 1.f, a, lda, b, ldb,
                                     accumulate ? 1.f : 0.f, c, ldc);
  if (s != dnnl_success) throw Error("oneDNN sgemm failed (status " + std::to_string(static_cast<int>(s)) + ")");
}

// U[xi][rows][cols] = G g G^T of each 3x3 kernel g; g of (row r, col q) is
// w[(q * rows + r) * 9] (plain [O, C, 3, 3] with rows = C, cols = O), or, `flipped`, the
// kernel of w[(r * cols + q) * 9] turned by 180 degrees (the input gradient's: rows = O,
// cols = C).
void TransformWeights(const float* w, int64_t rows, int64_t cols, bool flipped, float* u) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t q = 0; q < cols; ++q) {
      const float* src = flipped ? w + (r * cols + q) * 9 : w + (q * rows + r) * 9;
      float g[3][3];
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) g[i][j] = flipped ? src[(2 - i) * 3 + (2 - j)] : src[i * 3 + j];
      float t[4][3];  // G g
      for (int j = 0; j < 3; ++j) {
        t[0][j] = g[0][j];
        t[1][j] = 0.5f * (g[0][j] + g[1][j] + g[2][j]);
        t[2][j] = 0.5f * (g[0][j] - g[1][j] + g[2][j]);
        t[3][j] = g[2][j];
      }
      for (int i = 0; i < 4; ++i) {  // (G g) G^T
        float* dst = u + (i * 4 * rows + r) * cols + q;
        const int64_t step = rows * cols;
        dst[0 * step] = t[i][0];
        dst[1 * step] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
        dst[2 * step] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
        dst[3 * step] = t[i][2];
      }
    }
}

// dw[3][3][C][O] = G^T dU G of du[xi][C][O].
OT_VECTOR_CLONES void FoldWeightGradient(const float* du, int64_t c_count, int64_t o_count, float* dw) {
  const int64_t step = c_count * o_count;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < c_count; ++c) {
    const float* src = du + c * o_count;
    float* dst = dw + c * o_count;
#pragma omp simd
    for (int64_t o = 0; o < o_count; ++o) {
      float t[3][4];  // G^T dU
      for (int j = 0; j < 4; ++j) {
        const float d0 = src[j * step + o], d1 = src[(4 + j) * step + o];
        const float d2 = src[(8 + j) * step + o], d3 = src[(12 + j) * step + o];
        t[0][j] = d0 + 0.5f * (d1 + d2);
        t[1][j] = 0.5f * (d1 - d2);
        t[2][j] = 0.5f * (d1 + d2) + d3;
      }
      for (int i = 0; i < 3; ++i) {  // (G^T dU) G
        dst[(i * 3 + 0) * step + o] = t[i][0] + 0.5f * (t[i][1] + t[i][2]);
        dst[(i * 3 + 1) * step + o] = 0.5f * (t[i][1] - t[i][2]);
        dst[(i * 3 + 2) * step + o] = 0.5f * (t[i][1] + t[i][2]) + t[i][3];
      }
    }
  }
}

OT_VECTOR_CLONES void AddTo(const float* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

struct TileGrid {
  int64_t h, w, tiles_h, tiles_w;
  // The image and top-left output pixel of tile t.
  void Locate(int64_t t, int64_t* n, int64_t* y, int64_t* x) const {
    *n = t / (tiles_h * tiles_w);
    const int64_t r = t % (tiles_h * tiles_w);
    *y = 2 * (r / tiles_w);
    *x = 2 * (r % tiles_w);
  }
};

// v[xi][t - t0][c] = (B^T d B)[xi] of the 4x4 input tile (pad 1) of each tile t in [t0, t1).
OT_VECTOR_CLONES void InputTiles(const TileGrid& g, const float* in, int64_t channels, const float* zeros, int64_t t0, int64_t t1,
                int64_t chunk, float* v) {
  for (int64_t t = t0; t < t1; ++t) {
    int64_t n, y, x;
    g.Locate(t, &n, &y, &x);
    const float* p[4][4];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        const int64_t iy = y - 1 + i, ix = x - 1 + j;
        p[i][j] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w ? in + ((n * g.h + iy) * g.w + ix) * channels : zeros;
      }
    float* dst = v + (t - t0) * channels;
    const int64_t step = chunk * channels;
#pragma omp simd
    for (int64_t c = 0; c < channels; ++c) {
      float r[4][4];  // B^T d, by column
      for (int j = 0; j < 4; ++j) {
        const float d0 = p[0][j][c], d1 = p[1][j][c], d2 = p[2][j][c], d3 = p[3][j][c];
        r[0][j] = d0 - d2;
        r[1][j] = d1 + d2;
        r[2][j] = d2 - d1;
        r[3][j] = d1 - d3;
      }
      for (int i = 0; i < 4; ++i) {  // (B^T d) B
        dst[(i * 4 + 0) * step + c] = r[i][0] - r[i][2];
        dst[(i * 4 + 1) * step + c] = r[i][1] + r[i][2];
        dst[(i * 4 + 2) * step + c] = r[i][2] - r[i][1];
        dst[(i * 4 + 3) * step + c] = r[i][1] - r[i][3];
      }
    }
  }
}

// The 2x2 output tiles y = A^T M A (+ bias) of m[xi][t - t0][o], written where inside the
// map (values outside go to `spill`, `channels` floats); bias: `channels` floats (zeros
// for none).
OT_VECTOR_CLONES void OutputTiles(const TileGrid& g, const float* m, int64_t channels, const float* bias,
                                  float* spill, int64_t t0, int64_t t1, int64_t chunk, float* out) {
  for (int64_t t = t0; t < t1; ++t) {
    int64_t n, y, x;
    g.Locate(t, &n, &y, &x);
    const bool right = x + 1 < g.w, below = y + 1 < g.h;
    float* q00 = out + ((n * g.h + y) * g.w + x) * channels;
    float* q01 = right ? q00 + channels : spill;
    float* q10 = below ? q00 + g.w * channels : spill;
    float* q11 = right && below ? q00 + (g.w + 1) * channels : spill;
    const float* src = m + (t - t0) * channels;
    const int64_t step = chunk * channels;
#pragma omp simd
    for (int64_t o = 0; o < channels; ++o) {
      float r[2][4];  // A^T M
      for (int j = 0; j < 4; ++j) {
        const float s0 = src[j * step + o], s1 = src[(4 + j) * step + o];
        const float s2 = src[(8 + j) * step + o], s3 = src[(12 + j) * step + o];
        r[0][j] = s0 + s1 + s2;
        r[1][j] = s1 - s2 - s3;
      }
      const float b = bias[o];
      q00[o] = r[0][0] + r[0][1] + r[0][2] + b;
      q01[o] = r[0][1] - r[0][2] - r[0][3] + b;
      q10[o] = r[1][0] + r[1][1] + r[1][2] + b;
      q11[o] = r[1][1] - r[1][2] - r[1][3] + b;
    }
  }
}

// dm[xi][t - t0][o] = (A g A^T)[xi] of each 2x2 output-gradient tile g (zero outside the map).
OT_VECTOR_CLONES void GradTiles(const TileGrid& g, const float* dy, int64_t channels, const float* zeros, int64_t t0, int64_t t1,
               int64_t chunk, float* dm) {
  for (int64_t t = t0; t < t1; ++t) {
    int64_t n, y, x;
    g.Locate(t, &n, &y, &x);
    const bool right = x + 1 < g.w, below = y + 1 < g.h;
    const float* p00 = dy + ((n * g.h + y) * g.w + x) * channels;
    const float* p01 = right ? p00 + channels : zeros;
    const float* p10 = below ? p00 + g.w * channels : zeros;
    const float* p11 = right && below ? p00 + (g.w + 1) * channels : zeros;
    float* dst = dm + (t - t0) * channels;
    const int64_t step = chunk * channels;
#pragma omp simd
    for (int64_t o = 0; o < channels; ++o) {
      const float g00 = p00[o], g01 = p01[o], g10 = p10[o], g11 = p11[o];
      float r[4][2];  // A g
      r[0][0] = g00, r[0][1] = g01;
      r[1][0] = g00 + g10, r[1][1] = g01 + g11;
      r[2][0] = g00 - g10, r[2][1] = g01 - g11;
      r[3][0] = -g10, r[3][1] = -g11;
      for (int i = 0; i < 4; ++i) {  // (A g) A^T
        dst[(i * 4 + 0) * step + o] = r[i][0];
        dst[(i * 4 + 1) * step + o] = r[i][0] + r[i][1];
        dst[(i * 4 + 2) * step + o] = r[i][0] - r[i][1];
        dst[(i * 4 + 3) * step + o] = -r[i][1];
      }
    }
  }
}

dnnl::memory::desc ChannelsLast(const Shape& s) {
  return dnnl::memory::desc(ToDims(s), dnnl::memory::data_type::f32, dnnl::memory::format_tag::nhwc);
}

}  // namespace

std::unique_ptr<WinogradConv> WinogradConv::Make(const Shape& x, const Shape& w, const Shape& y,
                                                 const std::vector<int64_t>& strides,
                                                 const std::vector<int64_t>& dilations,
                                                 const std::vector<int64_t>& pads_begin,
                                                 const TapConv::Layouts& layouts) {
  if (x.size() != 4 || w.size() != 4 || y.size() != 4 || w[2] != 3 || w[3] != 3 || x[1] != w[1] || y[1] != w[0] ||
      x[0] != y[0] || x[2] != y[2] || x[3] != y[3])
    return nullptr;
  if (strides != std::vector<int64_t>{1, 1} || dilations != std::vector<int64_t>{1, 1} ||
      pads_begin != std::vector<int64_t>{1, 1})
    return nullptr;
  for (int64_t d : x)
    if (d <= 0) return nullptr;
  std::unique_ptr<WinogradConv> c(new WinogradConv());
  c->n_ = x[0];
  c->c_ = x[1];
  c->o_ = y[1];
  c->h_ = x[2];
  c->w_ = x[3];
  c->tiles_h_ = (c->h_ + 1) / 2;
  c->tiles_w_ = (c->w_ + 1) / 2;
  c->tiles_ = c->n_ * c->tiles_h_ * c->tiles_w_;
  const dnnl::memory::desc x_nhwc = ChannelsLast(x), y_nhwc = ChannelsLast(y);
  c->x_in_ = Reorder(layouts.x, x_nhwc);
  c->y_out_ = Reorder(y_nhwc, layouts.y);
  c->dy_in_ = Reorder(layouts.dy, y_nhwc);
  c->dx_out_ = Reorder(x_nhwc, layouts.dx);
  c->dw_out_ = Reorder(dnnl::memory::desc(ToDims(w), dnnl::memory::data_type::f32, dnnl::memory::format_tag::hwio),
                       PlainDesc(w, DType::kFloat32));
  return c;
}

int64_t WinogradConv::ChunkTiles(int64_t channels) const {
  // 16 transformed values per tile and channel: about 1 MiB of them per chunk.
  // (AVX2, ResNet34 b128: 8-11 ms a primitive for 64-256 channels; 4x larger chunks ran
  // 5-10% slower.)
  return std::clamp<int64_t>(16384 / std::max<int64_t>(channels, 1), 16, 1024);
}

void WinogradConv::Convolve(const float* in, int64_t in_c, const float* u, int64_t out_c, const float* bias,
                            float* out) const {
  const TileGrid grid{h_, w_, tiles_h_, tiles_w_};
  const int64_t chunk = ChunkTiles(std::max(in_c, out_c));
  const int64_t chunks = (tiles_ + chunk - 1) / chunk;
#pragma omp parallel
  {
    float* v = Scratch(kTileScratch, 16 * chunk * in_c);
    float* m = Scratch(kProductScratch, 16 * chunk * out_c);
    // Zeros (input pixels outside the map, and the bias where there is none), then a spill row.
    const int64_t widest = std::max(in_c, out_c);
    float* zeros = Scratch(kZeroScratch, 2 * widest);
    std::memset(zeros, 0, static_cast<size_t>(widest) * sizeof(float));
    float* spill = zeros + widest;
#pragma omp for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t t0 = k * chunk, t1 = std::min(tiles_, t0 + chunk);
      InputTiles(grid, in, in_c, zeros, t0, t1, chunk, v);
      for (int xi = 0; xi < 16; ++xi)
        Sgemm(false, t1 - t0, out_c, in_c, v + xi * chunk * in_c, in_c, u + xi * in_c * out_c, out_c, false,
              m + xi * chunk * out_c, out_c);
      OutputTiles(grid, m, out_c, bias ? bias : zeros, spill, t0, t1, chunk, out);
    }
  }
}

void WinogradConv::Forward(const float* x, const float* w, const float* b, float* y) {
  float* u = Scratch(kWeightScratch, 16 * c_ * o_);
  TransformWeights(w, c_, o_, false, u);
  const float* xr = static_cast<const float*>(x_in_.Apply(const_cast<float*>(x), kInputScratch).get_data_handle());
  float* yr = y_out_.needed() ? Scratch(kOutputScratch, n_ * h_ * w_ * o_) : y;
  Convolve(xr, c_, u, o_, b, yr);
  if (y_out_.needed()) y_out_.Run(yr, y);
}

void WinogradConv::Backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db) {
  const float* dyr = static_cast<const float*>(dy_in_.Apply(const_cast<float*>(dy), kGradScratch).get_data_handle());
  if (dx) {
    float* u = Scratch(kWeightScratch, 16 * c_ * o_);
    TransformWeights(w, o_, c_, true, u);
    float* dxr = dx_out_.needed() ? Scratch(kOutputScratch, n_ * h_ * w_ * c_) : dx;
    Convolve(dyr, o_, u, c_, nullptr, dxr);
    if (dx_out_.needed()) dx_out_.Run(dxr, dx);
  }
  if (db) {
    const int64_t rows = n_ * h_ * w_;
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < o_; ++o) {
      double sum = 0;
      for (int64_t r = 0; r < rows; ++r) sum += dyr[r * o_ + o];
      db[o] = static_cast<float>(sum);
    }
  }
  if (!dw) return;
  const float* xr = static_cast<const float*>(x_in_.Apply(const_cast<float*>(x), kInputScratch).get_data_handle());
  const TileGrid grid{h_, w_, tiles_h_, tiles_w_};
  const int64_t chunk = ChunkTiles(std::max(c_, o_));
  const int64_t chunks = (tiles_ + chunk - 1) / chunk;
  // Each thread sums its chunks' products into its own dU, then the threads add those up
  // by ranges.
  const int64_t du_size = 16 * c_ * o_;
  const int threads = omp_get_max_threads();
  float* partials = Scratch(kWeightScratch, threads * du_size);
  float* du = Scratch(kOutputScratch, du_size);
  std::vector<char> used(static_cast<size_t>(threads), 0);
#pragma omp parallel num_threads(threads)
  {
    const int me = omp_get_thread_num();
    float* v = Scratch(kTileScratch, 16 * chunk * c_);
    float* dm = Scratch(kProductScratch, 16 * chunk * o_);
    float* zeros = Scratch(kZeroScratch, std::max(c_, o_));
    std::memset(zeros, 0, static_cast<size_t>(std::max(c_, o_)) * sizeof(float));
    float* partial = partials + me * du_size;
#pragma omp for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t t0 = k * chunk, t1 = std::min(tiles_, t0 + chunk);
      InputTiles(grid, xr, c_, zeros, t0, t1, chunk, v);
      GradTiles(grid, dyr, o_, zeros, t0, t1, chunk, dm);
      for (int xi = 0; xi < 16; ++xi)
        Sgemm(true, c_, o_, t1 - t0, v + xi * chunk * c_, c_, dm + xi * chunk * o_, o_, used[me] != 0,
              partial + xi * c_ * o_, o_);
      used[me] = 1;
    }
    constexpr int64_t kBlock = 4096;
#pragma omp for schedule(static)
    for (int64_t i0 = 0; i0 < du_size; i0 += kBlock) {
      const int64_t n = std::min(kBlock, du_size - i0);
      std::memset(du + i0, 0, static_cast<size_t>(n) * sizeof(float));
      for (int t = 0; t < threads; ++t)
        if (used[t]) AddTo(partials + t * du_size + i0, n, du + i0);
    }
  }
  float* hwio = Scratch(kInputScratch, 9 * c_ * o_);  // x's channels-last copy is no longer needed
  FoldWeightGradient(du, c_, o_, hwio);
  dw_out_.Run(hwio, dw);
}

}  // namespace cpu
}  // namespace ot
