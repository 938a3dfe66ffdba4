// WinogradConv: see conv_winograd.h.
#include "runtime/cpu/conv_winograd.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "runtime/cpu/vector_loops.h"

namespace ot {
namespace cpu {
namespace {

// ScratchBuffer slots (ScratchFloats): the caller's (0-4) and each thread's chunk buffers (5-6).
constexpr int kInputScratch = 0, kWeightScratch = 1, kGradScratch = 2, kZeroScratch = 3, kOutputScratch = 4;
constexpr int kTileScratch = 5, kProductScratch = 6;

// The weight transform G g of F(M, 3) (input tile T = M + 2) on one column of a kernel;
// the other transforms are macros below. F(2, 3): Lavin and Gray's matrices with points 0,
// 1, -1; F(4, 3): points 0, 1, -1, 2, -2.
template <int M>
struct Winograd;

template <>
struct Winograd<2> {
  static constexpr int T = 4;
  static inline void Weights(const float* g, float* u) {
    u[0] = g[0];
    u[1] = 0.5f * (g[0] + g[1] + g[2]);
    u[2] = 0.5f * (g[0] - g[1] + g[2]);
    u[3] = g[2];
  }
};

template <>
struct Winograd<4> {
  static constexpr int T = 6;
  static inline void Weights(const float* g, float* u) {
    u[0] = 0.25f * g[0];
    u[1] = (-1.f / 6.f) * (g[0] + g[1] + g[2]);
    u[2] = (-1.f / 6.f) * (g[0] - g[1] + g[2]);
    u[3] = (1.f / 24.f) * g[0] + (1.f / 12.f) * g[1] + (1.f / 6.f) * g[2];
    u[4] = (1.f / 24.f) * g[0] - (1.f / 12.f) * g[1] + (1.f / 6.f) * g[2];
    u[5] = g[2];
  }
};

// U[xi][rows][cols] = G g G^T of each 3x3 kernel g; g of (row r, col q) is
// w[(q * rows + r) * 9] (plain [O, C, 3, 3] with rows = C, cols = O), or, `flipped`, the
// kernel of w[(r * cols + q) * 9] turned by 180 degrees (the input gradient's: rows = O,
// cols = C).
template <int M>
void TransformWeights(const float* w, int64_t rows, int64_t cols, bool flipped, float* u) {
  using W = Winograd<M>;
  constexpr int T = W::T;
  const int64_t step = rows * cols;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t q = 0; q < cols; ++q) {
      const float* src = flipped ? w + (r * cols + q) * 9 : w + (q * rows + r) * 9;
      float g[3][3];
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) g[i][j] = flipped ? src[(2 - i) * 3 + (2 - j)] : src[i * 3 + j];
      float t[T][3];  // G g, by column
      for (int j = 0; j < 3; ++j) {
        const float col[3] = {g[0][j], g[1][j], g[2][j]};
        float out[T];
        W::Weights(col, out);
        for (int i = 0; i < T; ++i) t[i][j] = out[i];
      }
      float* dst = u + r * cols + q;
      for (int i = 0; i < T; ++i) {  // (G g) G^T
        float out[T];
        W::Weights(t[i], out);
        for (int j = 0; j < T; ++j) dst[(i * T + j) * step] = out[j];
      }
    }
}

struct Folded {
  float w0, w1, w2;
};

// dw[3][3][C][O] = G^T dU G of du[xi][C][O]; `fold(d, stride)` is G^T on t values.
template <int T, typename Fold>
inline __attribute__((always_inline)) void FoldWeightGradient(const float* du, int64_t c_count, int64_t o_count,
                                                              float* dw, Fold fold) {
  const int64_t step = c_count * o_count;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < c_count; ++c) {
    const float* src = du + c * o_count;
    float* dst = dw + c * o_count;
#pragma omp simd
    for (int64_t o = 0; o < o_count; ++o) {
      float t[3][T];  // G^T dU, by column
#pragma GCC unroll 6
      for (int j = 0; j < T; ++j) {
        const Folded f = fold(src + j * step + o, T * step);
        t[0][j] = f.w0;
        t[1][j] = f.w1;
        t[2][j] = f.w2;
      }
#pragma GCC unroll 3
      for (int i = 0; i < 3; ++i) {  // (G^T dU) G
        const Folded f = fold(t[i], 1);
        dst[(i * 3 + 0) * step + o] = f.w0;
        dst[(i * 3 + 1) * step + o] = f.w1;
        dst[(i * 3 + 2) * step + o] = f.w2;
      }
    }
  }
}

// G^T of F(2, 3) and F(4, 3) on the t values d[0], d[stride], ...
struct FoldF2 {
  inline __attribute__((always_inline)) Folded operator()(const float* d, int64_t stride) const {
    const float d0 = d[0], d1 = d[stride], d2 = d[2 * stride], d3 = d[3 * stride];
    return {d0 + 0.5f * (d1 + d2), 0.5f * (d1 - d2), 0.5f * (d1 + d2) + d3};
  }
};
struct FoldF4 {
  inline __attribute__((always_inline)) Folded operator()(const float* d, int64_t stride) const {
    const float d0 = d[0], d1 = d[stride], d2 = d[2 * stride], d3 = d[3 * stride], d4 = d[4 * stride],
                d5 = d[5 * stride];
    return {0.25f * d0 - (1.f / 6.f) * (d1 + d2) + (1.f / 24.f) * (d3 + d4),
            (1.f / 6.f) * (d2 - d1) + (1.f / 12.f) * (d3 - d4), (1.f / 6.f) * (d3 + d4 - d1 - d2) + d5};
  }
};

OT_VECTOR_CLONES void AddTo(const float* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

struct TileGrid {
  int64_t h, w, tiles_h, tiles_w, m;  // m x m output tiles
  // The image and top-left output pixel of tile t.
  void Locate(int64_t t, int64_t* n, int64_t* y, int64_t* x) const {
    *n = t / (tiles_h * tiles_w);
    const int64_t r = t % (tiles_h * tiles_w);
    *y = m * (r / tiles_w);
    *x = m * (r % tiles_w);
  }
};

// The pointers to the rows (channels-last) of a tile's t x t input pixels (pad 1), or to
// `zeros` outside the map.
template <int T>
inline __attribute__((always_inline)) void TilePixels(const TileGrid& g, const float* in, int64_t channels,
                                                      const float* zeros, int64_t n, int64_t y, int64_t x,
                                                      const float* (&p)[T][T]) {
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < T; ++j) {
      const int64_t iy = y - 1 + i, ix = x - 1 + j;
      p[i][j] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w ? in + ((n * g.h + iy) * g.w + ix) * channels : zeros;
    }
}

// The same for a tile's m x m output pixels (to `spill` outside the map).
template <int M, typename P>
inline __attribute__((always_inline)) void OutputPixels(const TileGrid& g, P* out, int64_t channels, P* spill,
                                                        int64_t n, int64_t y, int64_t x, P* (&q)[M][M]) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < M; ++j)
      q[i][j] = y + i < g.h && x + j < g.w ? out + ((n * g.h + y + i) * g.w + x + j) * channels : spill;
}

// The 1D transforms on scalars (the vectoriser keeps scalars in registers; arrays passed
// to helpers stopped it): F(2, 3) ...
#define OT_WINO2_INPUT(d0, d1, d2, d3, r0, r1, r2, r3) \
  do {                                                \
    r0 = d0 - d2;                                     \
    r1 = d1 + d2;                                     \
    r2 = d2 - d1;                                     \
    r3 = d1 - d3;                                     \
  } while (0)
#define OT_WINO2_OUTPUT(m0, m1, m2, m3, y0, y1) \
  do {                                         \
    y0 = m0 + m1 + m2;                         \
    y1 = m1 - m2 - m3;                         \
  } while (0)
#define OT_WINO2_GRAD(g0, g1, a0, a1, a2, a3) \
  do {                                       \
    a0 = g0;                                 \
    a1 = g0 + g1;                            \
    a2 = g0 - g1;                            \
    a3 = -g1;                                \
  } while (0)
// ... and F(4, 3).
#define OT_WINO4_INPUT(d0, d1, d2, d3, d4, d5, r0, r1, r2, r3, r4, r5) \
  do {                                                                \
    r0 = 4.f * d0 - 5.f * d2 + d4;                                    \
    r1 = -4.f * (d1 + d2) + d3 + d4;                                  \
    r2 = 4.f * (d1 - d2) - d3 + d4;                                   \
    r3 = 2.f * (d3 - d1) - d2 + d4;                                   \
    r4 = 2.f * (d1 - d3) - d2 + d4;                                   \
    r5 = 4.f * d1 - 5.f * d3 + d5;                                    \
  } while (0)
#define OT_WINO4_OUTPUT(m0, m1, m2, m3, m4, m5, y0, y1, y2, y3)              \
  do {                                                                      \
    const float p1_ = m1 + m2, q1_ = m1 - m2, p2_ = m3 + m4, q2_ = m3 - m4; \
    y0 = m0 + p1_ + p2_;                                                    \
    y1 = q1_ + 2.f * q2_;                                                   \
    y2 = p1_ + 4.f * p2_;                                                   \
    y3 = q1_ + 8.f * q2_ + m5;                                              \
  } while (0)
#define OT_WINO4_GRAD(g0, g1, g2, g3, a0, a1, a2, a3, a4, a5) \
  do {                                                       \
    const float p1_ = g0 + g2, q1_ = g1 + g3;                \
    a0 = g0;                                                 \
    a1 = p1_ + q1_;                                          \
    a2 = p1_ - q1_;                                          \
    a3 = g0 + 2.f * g1 + 4.f * g2 + 8.f * g3;                \
    a4 = g0 - 2.f * g1 + 4.f * g2 - 8.f * g3;                \
    a5 = g3;                                                 \
  } while (0)

// v[xi][t - t0][c] = (B^T d B)[xi] of the input tile (pad 1) of each tile t in [t0, t1).
OT_VECTOR_CLONES void InputTiles2(const TileGrid& g, const float* in, int64_t channels, const float* zeros,
                                  int64_t t0, int64_t t1, int64_t chunk, float* v) {
  const int64_t step = chunk * channels;
  for (int64_t t = t0; t < t1; ++t) {
    int64_t n, y, x;
    g.Locate(t, &n, &y, &x);
    const float* p[4][4];
    TilePixels<4>(g, in, channels, zeros, n, y, x, p);
    float* dst = v + (t - t0) * channels;
#pragma omp simd
    for (int64_t c = 0; c < channels; ++c) {
      float r[4][4];  // B^T d, by column
      for (int j = 0; j < 4; ++j) {
        const float d0 = p[0][j][c], d1 = p[1][j][c], d2 = p[2][j][c], d3 = p[3][j][c];
        OT_WINO2_INPUT(d0, d1, d2, d3, r[0][j], r[1][j], r[2][j], r[3][j]);
      }
      for (int i = 0; i < 4; ++i) {  // (B^T d) B
        OT_WINO2_INPUT(r[i][0], r[i][1], r[i][2], r[i][3], dst[(i * 4 + 0) * step + c], dst[(i * 4 + 1) * step + c],
                       dst[(i * 4 + 2) * step + c], dst[(i * 4 + 3) * step + c]);
      }
    }
  }
}

OT_VECTOR_CLONES void InputTiles4(const TileGrid& g, const float* in, int64_t channels, const float* zeros,
                                  int64_t t0, int64_t t1, int64_t chunk, float* v) {
  const int64_t step = chunk * channels;
  for (int64_t t = t0; t < t1; ++t) {
    int64_t n, y, x;
    g.Locate(t, &n, &y, &x);
    const float* p[6][6];
    TilePixels<6>(g, in, channels, zeros, n, y, x, p);
    float* dst = v + (t - t0) * channels;
#pragma omp simd
    for (int64_t c = 0; c < channels; ++c) {
      float r[6][6];
#pragma GCC unroll 6
      for (int j = 0; j < 6; ++j) {
        const float d0 = p[0][j][c], d1 = p[1][j][c], d2 = p[2][j][c], d3 = p[3][j][c], d4 = p[4][j][c],
                    d5 = p[5][j][c];
        OT_WINO4_INPUT(d0, d1, d2, d3, d4, d5, r[0][j], r[1][j], r[2][j], r[3][j], r[4][j], r[5][j]);
      }
#pragma GCC unroll 6
      for (int i = 0; i < 6; ++i) {
        float* o = dst + i * 6 * step + c;
        OT_WINO4_INPUT(r[i][0], r[i][1], r[i][2], r[i][3], r[i][4], r[i][5], o[0], o[step], o[2 * step], o[3 * step],
                       o[4 * step], o[5 * step]);
      }
    }
  }
}

// The output tiles y = A^T M A (+ bias) of m[xi][t - t0][o], written where inside the map
// (values outside go to `spill`, `channels` floats); bias: `channels` floats (zeros for none).
OT_VECTOR_CLONES void OutputTiles2(const TileGrid& g, const float* m, int64_t channels, const float* bias,
                                   float* spill, int64_t t0, int64_t t1, int64_t chunk, float* out) {
  const int64_t step = chunk * channels;
  for (int64_t t = t0; t < t1; ++t) {
    int64_t n, y, x;
    g.Locate(t, &n, &y, &x);
    float* q[2][2];
    OutputPixels<2>(g, out, channels, spill, n, y, x, q);
    const float* src = m + (t - t0) * channels;
#pragma omp simd
    for (int64_t o = 0; o < channels; ++o) {
      float r[2][4];  // A^T M
      for (int j = 0; j < 4; ++j) {
        OT_WINO2_OUTPUT(src[j * step + o], src[(4 + j) * step + o], src[(8 + j) * step + o],
                        src[(12 + j) * step + o], r[0][j], r[1][j]);
      }
      const float b = bias[o];
      for (int i = 0; i < 2; ++i) {
        float y0, y1;
        OT_WINO2_OUTPUT(r[i][0], r[i][1], r[i][2], r[i][3], y0, y1);
        q[i][0][o] = y0 + b;
        q[i][1][o] = y1 + b;
      }
    }
  }
}

OT_VECTOR_CLONES void OutputTiles4(const TileGrid& g, const float* m, int64_t channels, const float* bias,
                                   float* spill, int64_t t0, int64_t t1, int64_t chunk, float* out) {
  const int64_t step = chunk * channels;
  for (int64_t t = t0; t < t1; ++t) {
    int64_t n, y, x;
    g.Locate(t, &n, &y, &x);
    float* q[4][4];
    OutputPixels<4>(g, out, channels, spill, n, y, x, q);
    const float* src = m + (t - t0) * channels;
#pragma omp simd
    for (int64_t o = 0; o < channels; ++o) {
      float r[4][6];
      for (int j = 0; j < 6; ++j) {
        const float* s = src + j * step + o;
        OT_WINO4_OUTPUT(s[0], s[6 * step], s[12 * step], s[18 * step], s[24 * step], s[30 * step], r[0][j], r[1][j],
                        r[2][j], r[3][j]);
      }
      const float b = bias[o];
      for (int i = 0; i < 4; ++i) {
        float y0, y1, y2, y3;
        OT_WINO4_OUTPUT(r[i][0], r[i][1], r[i][2], r[i][3], r[i][4], r[i][5], y0, y1, y2, y3);
        q[i][0][o] = y0 + b;
        q[i][1][o] = y1 + b;
        q[i][2][o] = y2 + b;
        q[i][3][o] = y3 + b;
      }
    }
  }
}

// dm[xi][t - t0][o] = (A g A^T)[xi] of each output-gradient tile g (zero outside the map).
OT_VECTOR_CLONES void GradTiles2(const TileGrid& g, const float* dy, int64_t channels, const float* zeros,
                                 int64_t t0, int64_t t1, int64_t chunk, float* dm) {
  const int64_t step = chunk * channels;
  for (int64_t t = t0; t < t1; ++t) {
    int64_t n, y, x;
    g.Locate(t, &n, &y, &x);
    const float* p[2][2];
    OutputPixels<2>(g, dy, channels, zeros, n, y, x, p);
    float* dst = dm + (t - t0) * channels;
#pragma omp simd
    for (int64_t o = 0; o < channels; ++o) {
      float r[4][2];  // A g
      for (int j = 0; j < 2; ++j) {
        OT_WINO2_GRAD(p[0][j][o], p[1][j][o], r[0][j], r[1][j], r[2][j], r[3][j]);
      }
      for (int i = 0; i < 4; ++i) {
        float* d = dst + i * 4 * step + o;
        OT_WINO2_GRAD(r[i][0], r[i][1], d[0], d[step], d[2 * step], d[3 * step]);
      }
    }
  }
}

OT_VECTOR_CLONES void GradTiles4(const TileGrid& g, const float* dy, int64_t channels, const float* zeros,
                                 int64_t t0, int64_t t1, int64_t chunk, float* dm) {
  const int64_t step = chunk * channels;
  for (int64_t t = t0; t < t1; ++t) {
    int64_t n, y, x;
    g.Locate(t, &n, &y, &x);
    const float* p[4][4];
    OutputPixels<4>(g, dy, channels, zeros, n, y, x, p);
    float* dst = dm + (t - t0) * channels;
#pragma omp simd
    for (int64_t o = 0; o < channels; ++o) {
      float r[6][4];
      for (int j = 0; j < 4; ++j) {
        OT_WINO4_GRAD(p[0][j][o], p[1][j][o], p[2][j][o], p[3][j][o], r[0][j], r[1][j], r[2][j], r[3][j], r[4][j],
                      r[5][j]);
      }
      for (int i = 0; i < 6; ++i) {
        float* d = dst + i * 6 * step + o;
        OT_WINO4_GRAD(r[i][0], r[i][1], r[i][2], r[i][3], d[0], d[step], d[2 * step], d[3 * step], d[4 * step],
                      d[5 * step]);
      }
    }
  }
}

#undef OT_WINO2_INPUT
#undef OT_WINO2_OUTPUT
#undef OT_WINO2_GRAD
#undef OT_WINO4_INPUT
#undef OT_WINO4_OUTPUT
#undef OT_WINO4_GRAD

OT_VECTOR_CLONES void FoldWeightGradient2(const float* du, int64_t c_count, int64_t o_count, float* dw) {
  FoldWeightGradient<4>(du, c_count, o_count, dw, FoldF2());
}
OT_VECTOR_CLONES void FoldWeightGradient4(const float* du, int64_t c_count, int64_t o_count, float* dw) {
  FoldWeightGradient<6>(du, c_count, o_count, dw, FoldF4());
}

struct TileLoops {
  decltype(&InputTiles2) input;
  decltype(&OutputTiles2) output;
  decltype(&GradTiles2) grad;
  decltype(&FoldWeightGradient2) fold;
  decltype(&TransformWeights<2>) weights;
};

const TileLoops& Loops(int m) {
  static const TileLoops two{InputTiles2, OutputTiles2, GradTiles2, FoldWeightGradient2, TransformWeights<2>};
  static const TileLoops four{InputTiles4, OutputTiles4, GradTiles4, FoldWeightGradient4, TransformWeights<4>};
  return m == 4 ? four : two;
}


}  // namespace

std::unique_ptr<WinogradConv> WinogradConv::Make(const Shape& x, const Shape& w, const Shape& y,
                                                 const std::vector<int64_t>& strides,
                                                 const std::vector<int64_t>& dilations,
                                                 const std::vector<int64_t>& pads_begin,
                                                 const TapConv::Layouts& layouts, int tile) {
  if (tile != 2 && tile != 4) return nullptr;
  if (x.size() != 4 || w.size() != 4 || y.size() != 4 || w[2] != 3 || w[3] != 3 || x[1] != w[1] || y[1] != w[0] ||
      x[0] != y[0] || x[2] != y[2] || x[3] != y[3])
    return nullptr;
  if (strides != std::vector<int64_t>{1, 1} || dilations != std::vector<int64_t>{1, 1} ||
      pads_begin != std::vector<int64_t>{1, 1})
    return nullptr;
  for (int64_t d : x)
    if (d <= 0) return nullptr;
  std::unique_ptr<WinogradConv> c(new WinogradConv());
  c->m_ = tile;
  c->t_ = tile + 2;
  c->n_ = x[0];
  c->c_ = x[1];
  c->o_ = y[1];
  c->h_ = x[2];
  c->w_ = x[3];
  c->tiles_h_ = (c->h_ + tile - 1) / tile;
  c->tiles_w_ = (c->w_ + tile - 1) / tile;
  c->tiles_ = c->n_ * c->tiles_h_ * c->tiles_w_;
  const dnnl::memory::desc x_nhwc = ChannelsLast4(x), y_nhwc = ChannelsLast4(y);
  c->x_in_ = Reorder(layouts.x, x_nhwc);
  c->y_out_ = Reorder(y_nhwc, layouts.y);
  c->dy_in_ = Reorder(layouts.dy, y_nhwc);
  c->dx_out_ = Reorder(x_nhwc, layouts.dx);
  c->dw_out_ = Reorder(dnnl::memory::desc(ToDims(w), dnnl::memory::data_type::f32, dnnl::memory::format_tag::hwio),
                       PlainDesc(w, DType::kFloat32));
  return c;
}

int64_t WinogradConv::ChunkTiles(int64_t channels) const {
  // About 1 MiB of transformed values (t x t per tile and channel) per chunk (AVX2, ResNet34
  // b128: 4x larger chunks ran 5-10% slower), then as many chunks as make every thread's
  // share equal (F(4x4, 3x3) on 4x4 maps has one tile per image).
  const int64_t cap = std::clamp<int64_t>(262144 / (t_ * t_ * std::max<int64_t>(channels, 1)), 16, 1024);
  const int64_t threads = std::max(1, omp_get_max_threads());
  int64_t chunks = (tiles_ + cap - 1) / cap;
  chunks = (chunks + threads - 1) / threads * threads;
  return std::max<int64_t>(1, (tiles_ + chunks - 1) / chunks);
}

void WinogradConv::Convolve(const float* in, int64_t in_c, const float* u, int64_t out_c, const float* bias,
                            float* out) const {
  const TileLoops& loops = Loops(m_);
  const TileGrid grid{h_, w_, tiles_h_, tiles_w_, m_};
  const int64_t points = t_ * t_;
  const int64_t chunk = ChunkTiles(std::max(in_c, out_c));
  const int64_t chunks = (tiles_ + chunk - 1) / chunk;
#pragma omp parallel
  {
    float* v = ScratchFloats(kTileScratch, points * chunk * in_c);
    float* m = ScratchFloats(kProductScratch, points * chunk * out_c);
    // Zeros (input pixels outside the map, and the bias where there is none), then a spill row.
    const int64_t widest = std::max(in_c, out_c);
    float* zeros = ScratchFloats(kZeroScratch, 2 * widest);
    std::memset(zeros, 0, static_cast<size_t>(widest) * sizeof(float));
    float* spill = zeros + widest;
#pragma omp for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t t0 = k * chunk, t1 = std::min(tiles_, t0 + chunk);
      loops.input(grid, in, in_c, zeros, t0, t1, chunk, v);
      for (int64_t xi = 0; xi < points; ++xi)
        Sgemm(false, t1 - t0, out_c, in_c, v + xi * chunk * in_c, in_c, u + xi * in_c * out_c, out_c, false,
              m + xi * chunk * out_c, out_c);
      loops.output(grid, m, out_c, bias ? bias : zeros, spill, t0, t1, chunk, out);
    }
  }
}

void WinogradConv::Forward(const float* x, const float* w, const float* b, float* y) {
  float* u = ScratchFloats(kWeightScratch, t_ * t_ * c_ * o_);
  Loops(m_).weights(w, c_, o_, false, u);
  const float* xr = static_cast<const float*>(x_in_.Apply(const_cast<float*>(x), kInputScratch).get_data_handle());
  float* yr = y_out_.needed() ? ScratchFloats(kOutputScratch, n_ * h_ * w_ * o_) : y;
  Convolve(xr, c_, u, o_, b, yr);
  if (y_out_.needed()) y_out_.Run(yr, y);
}

void WinogradConv::Backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db) {
  const TileLoops& loops = Loops(m_);
  const int64_t points = t_ * t_;
  const float* dyr = static_cast<const float*>(dy_in_.Apply(const_cast<float*>(dy), kGradScratch).get_data_handle());
  if (dx) {
    float* u = ScratchFloats(kWeightScratch, points * c_ * o_);
    loops.weights(w, o_, c_, true, u);
    float* dxr = dx_out_.needed() ? ScratchFloats(kOutputScratch, n_ * h_ * w_ * c_) : dx;
    Convolve(dyr, o_, u, c_, nullptr, dxr);
    if (dx_out_.needed()) dx_out_.Run(dxr, dx);
  }
  if (db) ChannelSums(dyr, n_ * h_ * w_, o_, db);
  if (!dw) return;
  const float* xr = static_cast<const float*>(x_in_.Apply(const_cast<float*>(x), kInputScratch).get_data_handle());
  const TileGrid grid{h_, w_, tiles_h_, tiles_w_, m_};
  const int64_t chunk = ChunkTiles(std::max(c_, o_));
  const int64_t chunks = (tiles_ + chunk - 1) / chunk;
  // Each thread sums its chunks' products into its own dU, then the threads add those up
  // by ranges.
  const int64_t du_size = points * c_ * o_;
  const int threads = omp_get_max_threads();
  float* partials = ScratchFloats(kWeightScratch, threads * du_size);
  float* du = ScratchFloats(kOutputScratch, du_size);
  std::vector<char> used(static_cast<size_t>(threads), 0);
#pragma omp parallel num_threads(threads)
  {
    const int me = omp_get_thread_num();
    float* v = ScratchFloats(kTileScratch, points * chunk * c_);
    float* dm = ScratchFloats(kProductScratch, points * chunk * o_);
    float* zeros = ScratchFloats(kZeroScratch, std::max(c_, o_));
    std::memset(zeros, 0, static_cast<size_t>(std::max(c_, o_)) * sizeof(float));
    float* partial = partials + me * du_size;
#pragma omp for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t t0 = k * chunk, t1 = std::min(tiles_, t0 + chunk);
      loops.input(grid, xr, c_, zeros, t0, t1, chunk, v);
      loops.grad(grid, dyr, o_, zeros, t0, t1, chunk, dm);
      for (int64_t xi = 0; xi < points; ++xi)
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
  float* hwio = ScratchFloats(kInputScratch, 9 * c_ * o_);  // x's channels-last copy is no longer needed
  loops.fold(du, c_, o_, hwio);
  dw_out_.Run(hwio, dw);
}

}  // namespace cpu
}  // namespace ot
