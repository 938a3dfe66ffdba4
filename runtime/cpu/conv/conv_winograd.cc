// WinogradConv: see conv_winograd.h.
#include "runtime/cpu/conv/conv_winograd.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "runtime/cpu/layout/dnnl_cast.h"
#include "runtime/cpu/norm/channel_statistics.h"
#include "runtime/cpu/elementwise/vector_loops.h"

namespace ot {
namespace cpu {
namespace {

// ScratchBuffer slots (ScratchFloats): the caller's (0-4) and each thread's chunk buffers (5-6).
constexpr int kInputScratch = 0, kWeightScratch = 1, kGradScratch = 2, kZeroScratch = 3, kOutputScratch = 4;
constexpr int kTileScratch = 5, kProductScratch = 6, kTapsScratch = 7;
// Under bfloat16 products: each thread's rounded tiles and output-gradient tiles, the caller's weights.
constexpr int kTile16Scratch = 12, kProduct16Scratch = 13, kWeight16Scratch = 14;

// Where a transform writes tiles from element `offset` on: the float32 buffer, or under
// bfloat16 products the bfloat16 one.
void* Tiles(float* f32, uint16_t* bf16, int64_t offset) {
  return bf16 ? static_cast<void*>(bf16 + offset) : static_cast<void*>(f32 + offset);
}

uint16_t* ScratchBf16(int slot, int64_t count) {
  return static_cast<uint16_t*>(ScratchBuffer(slot, static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(uint16_t)));
}

// The weight transform of F(m, 3) as one matrix: U = G g G^T of a 3x3 kernel g is
// U[i][j] = sum over a, b of G[i][a] G[j][b] g[a][b], so with the kernel's 9 taps as a
// column, U's t * t values are kron(G, G) (t*t x 9) times it, and the weight gradient's
// fold dg = G^T dU G is kron(G, G)^T times dU's column. `flipped` takes the kernel turned
// by 180 degrees (tap k read as tap 8 - k). G (t x 3) of F(2, 3): Lavin and Gray's matrix
// with points 0, 1, -1 (t = 4); of F(4, 3): points 0, 1, -1, 2, -2 (t = 6); on 2-pixel
// maps (t = 3; see OT_WINO22_INPUT): w1, w2 - w1, w0 - w1. Products formed in double,
// rounded once.
const float* KronG(int64_t t, bool flipped) {
  struct Matrices {
    float f22[2][9 * 9], f2[2][16 * 9], f4[2][36 * 9];
  };
  static const Matrices matrices = [] {
    const double g22[3][3] = {{0, 1, 0}, {0, -1, 1}, {1, -1, 0}};
    const double g2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    const double g4[6][3] = {{1. / 4, 0, 0},           {-1. / 6, -1. / 6, -1. / 6}, {-1. / 6, 1. / 6, -1. / 6},
                             {1. / 24, 1. / 12, 1. / 6}, {1. / 24, -1. / 12, 1. / 6}, {0, 0, 1}};
    Matrices k{};
    auto fill = [](const auto& g, int t, float* plain, float* turned) {
      for (int i = 0; i < t; ++i)
        for (int j = 0; j < t; ++j)
          for (int a = 0; a < 3; ++a)
            for (int b = 0; b < 3; ++b) {
              const float v = static_cast<float>(g[i][a] * g[j][b]);
              plain[(i * t + j) * 9 + a * 3 + b] = v;
              turned[(i * t + j) * 9 + 8 - (a * 3 + b)] = v;
            }
    };
    fill(g22, 3, k.f22[0], k.f22[1]);
    fill(g2, 4, k.f2[0], k.f2[1]);
    fill(g4, 6, k.f4[0], k.f4[1]);
    return k;
  }();
  return t == 3 ? matrices.f22[flipped] : t == 6 ? matrices.f4[flipped] : matrices.f2[flipped];
}

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

// The channels of one block: LANES where the caller fixed them at compile time (8 and 16:
// one or two vectors, no loop left), else L.block.
template <int LANES>
inline __attribute__((always_inline)) int64_t Lanes(const MapLayout& L) {
  return LANES ? LANES : L.block;
}

// The body of a transform's clone-compiled entry point: `impl` with the lane count fixed at
// 8 or 16 where the layout L's block is, else taken at run time.
#define OT_BY_LANES(impl, ...)                       \
  do {                                               \
    if (L.block == 8) return impl<8>(__VA_ARGS__);   \
    if (L.block == 16) return impl<16>(__VA_ARGS__); \
    impl<0>(__VA_ARGS__);                            \
  } while (0)

// An input value as float32: float32 as it is, bfloat16 (raw bits, --amp bf16's inputs) widened.
inline __attribute__((always_inline)) float Wide(float v) { return v; }
inline __attribute__((always_inline)) float Wide(uint16_t v) {
  const uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// A transformed value's place in a bfloat16 operand of the products: stores the float it
// is given rounded (Bf16Bits), so the transforms write bfloat16 through the same code.
struct Bf16Slot {
  uint16_t bits;
  inline __attribute__((always_inline)) void operator=(float f) { bits = Bf16Bits(f); }
};

// The body of a tile transform's entry point: `impl` reading `in` (float32, or bfloat16
// where in_bf16) and writing `out` (float32, or bfloat16 where out_bf16).
#define OT_BY_TYPES(impl, g, L, in, in_bf16, zeros, t0, t1, chunk, out, out_bf16) \
  do {                                                                            \
    const auto* in16 = static_cast<const uint16_t*>(in);                          \
    const auto* in32 = static_cast<const float*>(in);                             \
    const auto* zeros16 = reinterpret_cast<const uint16_t*>(zeros);               \
    auto* out16 = static_cast<Bf16Slot*>(out);                                    \
    auto* out32 = static_cast<float*>(out);                                       \
    if (in_bf16 && out_bf16)                                                      \
      OT_BY_LANES(impl, g, L, in16, zeros16, t0, t1, chunk, out16);               \
    else if (in_bf16)                                                             \
      OT_BY_LANES(impl, g, L, in16, zeros16, t0, t1, chunk, out32);               \
    else if (out_bf16)                                                            \
      OT_BY_LANES(impl, g, L, in32, zeros, t0, t1, chunk, out16);                 \
    else                                                                          \
      OT_BY_LANES(impl, g, L, in32, zeros, t0, t1, chunk, out32);                 \
  } while (0)

// The pointers to a tile's t x t input pixels (pad 1; their first channel block), or to
// `zeros` outside the map (an image of zeros, so that every block's offset lands on zeros).
template <int T, typename In>
inline __attribute__((always_inline)) void TilePixels(const TileGrid& g, const MapLayout& L, const In* in,
                                                      const In* zeros, int64_t n, int64_t y, int64_t x,
                                                      const In* (&p)[T][T]) {
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < T; ++j) {
      const int64_t iy = y - 1 + i, ix = x - 1 + j;
      p[i][j] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w ? L.Pixel(in, n, iy * g.w + ix, 0) : zeros;
    }
}

// The same for a tile's m x m output pixels (to `spill`, an image's worth, outside the map).
template <int M, typename P>
inline __attribute__((always_inline)) void OutputPixels(const TileGrid& g, const MapLayout& L, P* out, P* spill,
                                                        int64_t n, int64_t y, int64_t x, P* (&q)[M][M]) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < M; ++j)
      q[i][j] = y + i < g.h && x + j < g.w ? L.Pixel(out, n, (y + i) * g.w + x + j, 0) : spill;
}

// The 1D transforms on scalars (the vectoriser keeps scalars in registers; arrays passed
// to helpers stopped it): F(2, 3) ...
#define OT_WINO2_INPUT(d0, d1, d2, d3, r0, r1, r2, r3) \
  do {                                                 \
    r0 = d0 - d2;                                      \
    r1 = d1 + d2;                                      \
    r2 = d2 - d1;                                      \
    r3 = d1 - d3;                                      \
  } while (0)
#define OT_WINO2_OUTPUT(m0, m1, m2, m3, y0, y1) \
  do {                                          \
    y0 = m0 + m1 + m2;                          \
    y1 = m1 - m2 - m3;                          \
  } while (0)
#define OT_WINO2_GRAD(g0, g1, a0, a1, a2, a3) \
  do {                                        \
    a0 = g0;                                  \
    a1 = g0 + g1;                             \
    a2 = g0 - g1;                             \
    a3 = -g1;                                 \
  } while (0)
// ... and F(4, 3).
#define OT_WINO4_INPUT(d0, d1, d2, d3, d4, d5, r0, r1, r2, r3, r4, r5) \
  do {                                                                 \
    r0 = 4.f * d0 - 5.f * d2 + d4;                                     \
    r1 = -4.f * (d1 + d2) + d3 + d4;                                   \
    r2 = 4.f * (d1 - d2) - d3 + d4;                                    \
    r3 = 2.f * (d3 - d1) - d2 + d4;                                    \
    r4 = 2.f * (d1 - d3) - d2 + d4;                                    \
    r5 = 4.f * d1 - 5.f * d3 + d5;                                     \
  } while (0)
#define OT_WINO4_OUTPUT(m0, m1, m2, m3, m4, m5, y0, y1, y2, y3)             \
  do {                                                                      \
    const float p1_ = m1 + m2, q1_ = m1 - m2, p2_ = m3 + m4, q2_ = m3 - m4; \
    y0 = m0 + p1_ + p2_;                                                    \
    y1 = q1_ + 2.f * q2_;                                                   \
    y2 = p1_ + 4.f * p2_;                                                   \
    y3 = q1_ + 8.f * q2_ + m5;                                              \
  } while (0)
#define OT_WINO4_GRAD(g0, g1, g2, g3, a0, a1, a2, a3, a4, a5) \
  do {                                                        \
    const float p1_ = g0 + g2, q1_ = g1 + g3;                 \
    a0 = g0;                                                  \
    a1 = p1_ + q1_;                                           \
    a2 = p1_ - q1_;                                           \
    a3 = g0 + 2.f * g1 + 4.f * g2 + 8.f * g3;                 \
    a4 = g0 - 2.f * g1 + 4.f * g2 - 8.f * g3;                 \
    a5 = g3;                                                  \
  } while (0)

// v[xi][t - t0][c] = (B^T d B)[xi] of the input tile (pad 1) of each tile t in [t0, t1).
template <int LANES, typename In, typename Out>
inline __attribute__((always_inline)) void InputTiles2Impl(const TileGrid& g, const MapLayout& L, const In* in,
                                                           const In* zeros, int64_t t0, int64_t t1, int64_t chunk,
                                                           Out* v) {
  const int64_t step = chunk * L.channels;
  for (int64_t t = t0; t < t1; ++t) {
    int64_t n, y, x;
    g.Locate(t, &n, &y, &x);
    const In* p[4][4];
    TilePixels<4>(g, L, in, zeros, n, y, x, p);
    for (int64_t cb = 0; cb < L.channels; cb += L.block) {
      const int64_t off = (cb / L.block) * L.block_stride;
      Out* dst = v + (t - t0) * L.channels + cb;
#pragma omp simd
      for (int64_t c = 0; c < Lanes<LANES>(L); ++c) {
        float r[4][4];  // B^T d, by column
        for (int j = 0; j < 4; ++j) {
          const float d0 = Wide(p[0][j][off + c]), d1 = Wide(p[1][j][off + c]), d2 = Wide(p[2][j][off + c]),
                      d3 = Wide(p[3][j][off + c]);
          OT_WINO2_INPUT(d0, d1, d2, d3, r[0][j], r[1][j], r[2][j], r[3][j]);
        }
        for (int i = 0; i < 4; ++i) {  // (B^T d) B
          OT_WINO2_INPUT(r[i][0], r[i][1], r[i][2], r[i][3], dst[(i * 4 + 0) * step + c], dst[(i * 4 + 1) * step + c],
                         dst[(i * 4 + 2) * step + c], dst[(i * 4 + 3) * step + c]);
        }
      }
    }
  }
}

OT_VECTOR_CLONES void InputTiles2(const TileGrid& g, const MapLayout& L, const void* in, bool in_bf16, const float* zeros,
                                  int64_t t0, int64_t t1, int64_t chunk, void* v, bool out_bf16) {
  OT_BY_TYPES(InputTiles2Impl, g, L, in, in_bf16, zeros, t0, t1, chunk, v, out_bf16);
}

template <int LANES, typename In, typename Out>
inline __attribute__((always_inline)) void InputTiles4Impl(const TileGrid& g, const MapLayout& L, const In* in,
                                                           const In* zeros, int64_t t0, int64_t t1, int64_t chunk,
                                                           Out* v) {
  const int64_t step = chunk * L.channels;
  for (int64_t t = t0; t < t1; ++t) {
    int64_t n, y, x;
    g.Locate(t, &n, &y, &x);
    const In* p[6][6];
    TilePixels<6>(g, L, in, zeros, n, y, x, p);
    for (int64_t cb = 0; cb < L.channels; cb += L.block) {
      const int64_t off = (cb / L.block) * L.block_stride;
      Out* dst = v + (t - t0) * L.channels + cb;
#pragma omp simd
      for (int64_t c = 0; c < Lanes<LANES>(L); ++c) {
        float r[6][6];
#pragma GCC unroll 6
        for (int j = 0; j < 6; ++j) {
          const float d0 = Wide(p[0][j][off + c]), d1 = Wide(p[1][j][off + c]), d2 = Wide(p[2][j][off + c]),
                      d3 = Wide(p[3][j][off + c]), d4 = Wide(p[4][j][off + c]), d5 = Wide(p[5][j][off + c]);
          OT_WINO4_INPUT(d0, d1, d2, d3, d4, d5, r[0][j], r[1][j], r[2][j], r[3][j], r[4][j], r[5][j]);
        }
#pragma GCC unroll 6
        for (int i = 0; i < 6; ++i) {
          Out* o = dst + i * 6 * step + c;
          OT_WINO4_INPUT(r[i][0], r[i][1], r[i][2], r[i][3], r[i][4], r[i][5], o[0], o[step], o[2 * step], o[3 * step],
                         o[4 * step], o[5 * step]);
        }
      }
    }
  }
}

OT_VECTOR_CLONES void InputTiles4(const TileGrid& g, const MapLayout& L, const void* in, bool in_bf16, const float* zeros,
                                  int64_t t0, int64_t t1, int64_t chunk, void* v, bool out_bf16) {
  OT_BY_TYPES(InputTiles4Impl, g, L, in, in_bf16, zeros, t0, t1, chunk, v, out_bf16);
}

// The output tiles y = A^T M A (+ bias) of m[xi][t - t0][o], written where inside the map
// (values outside go to `spill`, L.block floats); bias: L.channels floats (zeros for none).
template <int LANES>
inline __attribute__((always_inline)) void OutputTiles2Impl(const TileGrid& g, const MapLayout& L, const float* m,
                                                            const float* bias, float* spill, int64_t t0, int64_t t1,
                                                            int64_t chunk, float* out) {
  const int64_t step = chunk * L.channels;
  for (int64_t t = t0; t < t1; ++t) {
    int64_t n, y, x;
    g.Locate(t, &n, &y, &x);
    float* q[2][2];
    OutputPixels<2>(g, L, out, spill, n, y, x, q);
    for (int64_t cb = 0; cb < L.channels; cb += L.block) {
      const int64_t off = (cb / L.block) * L.block_stride;
      const float* src = m + (t - t0) * L.channels + cb;
#pragma omp simd
      for (int64_t o = 0; o < Lanes<LANES>(L); ++o) {
        float r[2][4];  // A^T M
        for (int j = 0; j < 4; ++j) {
          OT_WINO2_OUTPUT(src[j * step + o], src[(4 + j) * step + o], src[(8 + j) * step + o], src[(12 + j) * step + o],
                          r[0][j], r[1][j]);
        }
        const float b = bias[cb + o];
        for (int i = 0; i < 2; ++i) {
          float y0, y1;
          OT_WINO2_OUTPUT(r[i][0], r[i][1], r[i][2], r[i][3], y0, y1);
          q[i][0][off + o] = y0 + b;
          q[i][1][off + o] = y1 + b;
        }
      }
    }
  }
}

OT_VECTOR_CLONES void OutputTiles2(const TileGrid& g, const MapLayout& L, const float* m, const float* bias,
                                   float* spill, int64_t t0, int64_t t1, int64_t chunk, float* out) {
  OT_BY_LANES(OutputTiles2Impl, g, L, m, bias, spill, t0, t1, chunk, out);
}

template <int LANES>
inline __attribute__((always_inline)) void OutputTiles4Impl(const TileGrid& g, const MapLayout& L, const float* m,
                                                            const float* bias, float* spill, int64_t t0, int64_t t1,
                                                            int64_t chunk, float* out) {
  const int64_t step = chunk * L.channels;
  for (int64_t t = t0; t < t1; ++t) {
    int64_t n, y, x;
    g.Locate(t, &n, &y, &x);
    float* q[4][4];
    OutputPixels<4>(g, L, out, spill, n, y, x, q);
    for (int64_t cb = 0; cb < L.channels; cb += L.block) {
      const int64_t off = (cb / L.block) * L.block_stride;
      const float* src = m + (t - t0) * L.channels + cb;
#pragma omp simd
      for (int64_t o = 0; o < Lanes<LANES>(L); ++o) {
        float r[4][6];
        for (int j = 0; j < 6; ++j) {
          const float* s = src + j * step + o;
          OT_WINO4_OUTPUT(s[0], s[6 * step], s[12 * step], s[18 * step], s[24 * step], s[30 * step], r[0][j], r[1][j],
                          r[2][j], r[3][j]);
        }
        const float b = bias[cb + o];
        for (int i = 0; i < 4; ++i) {
          float y0, y1, y2, y3;
          OT_WINO4_OUTPUT(r[i][0], r[i][1], r[i][2], r[i][3], r[i][4], r[i][5], y0, y1, y2, y3);
          q[i][0][off + o] = y0 + b;
          q[i][1][off + o] = y1 + b;
          q[i][2][off + o] = y2 + b;
          q[i][3][off + o] = y3 + b;
        }
      }
    }
  }
}

OT_VECTOR_CLONES void OutputTiles4(const TileGrid& g, const MapLayout& L, const float* m, const float* bias,
                                   float* spill, int64_t t0, int64_t t1, int64_t chunk, float* out) {
  OT_BY_LANES(OutputTiles4Impl, g, L, m, bias, spill, t0, t1, chunk, out);
}

// dm[xi][t - t0][o] = (A g A^T)[xi] of each output-gradient tile g (zero outside the map).
template <int LANES, typename In, typename Out>
inline __attribute__((always_inline)) void GradTiles2Impl(const TileGrid& g, const MapLayout& L, const In* dy,
                                                          const In* zeros, int64_t t0, int64_t t1, int64_t chunk,
                                                          Out* dm) {
  const int64_t step = chunk * L.channels;
  for (int64_t t = t0; t < t1; ++t) {
    int64_t n, y, x;
    g.Locate(t, &n, &y, &x);
    const In* p[2][2];
    OutputPixels<2>(g, L, dy, zeros, n, y, x, p);
    for (int64_t cb = 0; cb < L.channels; cb += L.block) {
      const int64_t off = (cb / L.block) * L.block_stride;
      Out* dst = dm + (t - t0) * L.channels + cb;
#pragma omp simd
      for (int64_t o = 0; o < Lanes<LANES>(L); ++o) {
        float r[4][2];  // A g
        for (int j = 0; j < 2; ++j) {
          const float g0 = Wide(p[0][j][off + o]), g1 = Wide(p[1][j][off + o]);
          OT_WINO2_GRAD(g0, g1, r[0][j], r[1][j], r[2][j], r[3][j]);
        }
        for (int i = 0; i < 4; ++i) {
          Out* d = dst + i * 4 * step + o;
          OT_WINO2_GRAD(r[i][0], r[i][1], d[0], d[step], d[2 * step], d[3 * step]);
        }
      }
    }
  }
}

OT_VECTOR_CLONES void GradTiles2(const TileGrid& g, const MapLayout& L, const void* dy, bool in_bf16, const float* zeros,
                                  int64_t t0, int64_t t1, int64_t chunk, void* dm, bool out_bf16) {
  OT_BY_TYPES(GradTiles2Impl, g, L, dy, in_bf16, zeros, t0, t1, chunk, dm, out_bf16);
}

template <int LANES, typename In, typename Out>
inline __attribute__((always_inline)) void GradTiles4Impl(const TileGrid& g, const MapLayout& L, const In* dy,
                                                          const In* zeros, int64_t t0, int64_t t1, int64_t chunk,
                                                          Out* dm) {
  const int64_t step = chunk * L.channels;
  for (int64_t t = t0; t < t1; ++t) {
    int64_t n, y, x;
    g.Locate(t, &n, &y, &x);
    const In* p[4][4];
    OutputPixels<4>(g, L, dy, zeros, n, y, x, p);
    for (int64_t cb = 0; cb < L.channels; cb += L.block) {
      const int64_t off = (cb / L.block) * L.block_stride;
      Out* dst = dm + (t - t0) * L.channels + cb;
#pragma omp simd
      for (int64_t o = 0; o < Lanes<LANES>(L); ++o) {
        float r[6][4];
        for (int j = 0; j < 4; ++j) {
          const float g0 = Wide(p[0][j][off + o]), g1 = Wide(p[1][j][off + o]), g2 = Wide(p[2][j][off + o]),
                      g3 = Wide(p[3][j][off + o]);
          OT_WINO4_GRAD(g0, g1, g2, g3, r[0][j], r[1][j], r[2][j], r[3][j], r[4][j], r[5][j]);
        }
        for (int i = 0; i < 6; ++i) {
          Out* d = dst + i * 6 * step + o;
          OT_WINO4_GRAD(r[i][0], r[i][1], r[i][2], r[i][3], d[0], d[step], d[2 * step], d[3 * step], d[4 * step],
                        d[5 * step]);
        }
      }
    }
  }
}

OT_VECTOR_CLONES void GradTiles4(const TileGrid& g, const MapLayout& L, const void* dy, bool in_bf16, const float* zeros,
                                  int64_t t0, int64_t t1, int64_t chunk, void* dm, bool out_bf16) {
  OT_BY_TYPES(GradTiles4Impl, g, L, dy, in_bf16, zeros, t0, t1, chunk, dm, out_bf16);
}

#undef OT_WINO2_INPUT
#undef OT_WINO2_OUTPUT
#undef OT_WINO2_GRAD
#undef OT_WINO4_INPUT
#undef OT_WINO4_OUTPUT
#undef OT_WINO4_GRAD

// Maps of 2x2 pixels (pad 1): in each direction the third point of F(2, 3)'s window is
// always padding, so y0 = w1 a + w2 b and y1 = w0 a + w1 b of the row (a, b) take 3
// products, w1 (a + b), (w2 - w1) b and (w0 - w1) a: 9 per (image, input, output channel)
// instead of the 16 of taps or F(2x2, 3x3). One tile per image, t = 3.
#define OT_WINO22_INPUT(d0, d1, r0, r1, r2) \
  do {                                      \
    r0 = d0 + d1;                           \
    r1 = d1;                                \
    r2 = d0;                                \
  } while (0)
#define OT_WINO22_OUTPUT(m0, m1, m2, y0, y1) \
  do {                                       \
    y0 = m0 + m1;                            \
    y1 = m0 + m2;                            \
  } while (0)
#define OT_WINO22_GRAD(g0, g1, a0, a1, a2) \
  do {                                     \
    a0 = g0 + g1;                          \
    a1 = g0;                               \
    a2 = g1;                               \
  } while (0)

// The input transform D d D^T (GRAD false) or the output gradient's A g A^T (GRAD true)
// of each image's 2x2 map: dst[xi][t - t0][c], xi of 3 x 3.
template <int LANES, bool GRAD, typename In, typename Out>
inline __attribute__((always_inline)) void MapTiles22Impl(const MapLayout& L, const In* in, int64_t t0, int64_t t1,
                                                          int64_t chunk, Out* v) {
  const int64_t step = chunk * L.channels;
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t cb = 0; cb < L.channels; cb += L.block) {
      const In *p0 = L.Pixel(in, t, 0, cb), *p1 = L.Pixel(in, t, 1, cb), *p2 = L.Pixel(in, t, 2, cb),
               *p3 = L.Pixel(in, t, 3, cb);
      Out* dst = v + (t - t0) * L.channels + cb;
#pragma omp simd
      for (int64_t c = 0; c < Lanes<LANES>(L); ++c) {
        float r[3][2];  // by column
        const float d0 = Wide(p0[c]), d1 = Wide(p1[c]), d2 = Wide(p2[c]), d3 = Wide(p3[c]);
        if constexpr (GRAD) {
          OT_WINO22_GRAD(d0, d2, r[0][0], r[1][0], r[2][0]);
          OT_WINO22_GRAD(d1, d3, r[0][1], r[1][1], r[2][1]);
          for (int i = 0; i < 3; ++i)
            OT_WINO22_GRAD(r[i][0], r[i][1], dst[(i * 3 + 0) * step + c], dst[(i * 3 + 1) * step + c],
                           dst[(i * 3 + 2) * step + c]);
        } else {
          OT_WINO22_INPUT(d0, d2, r[0][0], r[1][0], r[2][0]);
          OT_WINO22_INPUT(d1, d3, r[0][1], r[1][1], r[2][1]);
          for (int i = 0; i < 3; ++i)
            OT_WINO22_INPUT(r[i][0], r[i][1], dst[(i * 3 + 0) * step + c], dst[(i * 3 + 1) * step + c],
                            dst[(i * 3 + 2) * step + c]);
        }
      }
    }
}

// MapTiles22Impl (In, Out: as OT_BY_TYPES).
template <bool GRAD, typename In, typename Out>
inline __attribute__((always_inline)) void MapTiles22(const MapLayout& L, const In* in, int64_t t0, int64_t t1,
                                                      int64_t chunk, Out* v) {
  if (L.block == 8) return MapTiles22Impl<8, GRAD>(L, in, t0, t1, chunk, v);
  if (L.block == 16) return MapTiles22Impl<16, GRAD>(L, in, t0, t1, chunk, v);
  MapTiles22Impl<0, GRAD>(L, in, t0, t1, chunk, v);
}

// MapTiles22 of the element types (as OT_BY_TYPES).
template <bool GRAD>
inline __attribute__((always_inline)) void MapTiles22Typed(const MapLayout& L, const void* in, bool in_bf16,
                                                           int64_t t0, int64_t t1, int64_t chunk, void* v,
                                                           bool out_bf16) {
  const auto* in16 = static_cast<const uint16_t*>(in);
  const auto* in32 = static_cast<const float*>(in);
  auto* out16 = static_cast<Bf16Slot*>(v);
  auto* out32 = static_cast<float*>(v);
  if (in_bf16 && out_bf16) return MapTiles22<GRAD>(L, in16, t0, t1, chunk, out16);
  if (in_bf16) return MapTiles22<GRAD>(L, in16, t0, t1, chunk, out32);
  if (out_bf16) return MapTiles22<GRAD>(L, in32, t0, t1, chunk, out16);
  MapTiles22<GRAD>(L, in32, t0, t1, chunk, out32);
}

OT_VECTOR_CLONES void InputTiles22(const TileGrid&, const MapLayout& L, const void* in, bool in_bf16, const float*,
                                   int64_t t0, int64_t t1, int64_t chunk, void* v, bool out_bf16) {
  MapTiles22Typed<false>(L, in, in_bf16, t0, t1, chunk, v, out_bf16);
}

OT_VECTOR_CLONES void GradTiles22(const TileGrid&, const MapLayout& L, const void* dy, bool in_bf16, const float*,
                                  int64_t t0, int64_t t1, int64_t chunk, void* dm, bool out_bf16) {
  MapTiles22Typed<true>(L, dy, in_bf16, t0, t1, chunk, dm, out_bf16);
}

template <int LANES>
inline __attribute__((always_inline)) void OutputTiles22Impl(const TileGrid& g, const MapLayout& L, const float* m,
                                                             const float* bias, float* spill, int64_t t0, int64_t t1,
                                                             int64_t chunk, float* out) {
  const int64_t step = chunk * L.channels;
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t cb = 0; cb < L.channels; cb += L.block) {
      const float* src = m + (t - t0) * L.channels + cb;
      float *q0 = L.Pixel(out, t, 0, cb), *q1 = L.Pixel(out, t, 1, cb), *q2 = L.Pixel(out, t, 2, cb),
            *q3 = L.Pixel(out, t, 3, cb);
#pragma omp simd
      for (int64_t c = 0; c < Lanes<LANES>(L); ++c) {
        float s[3][2];  // rows of M A
        for (int i = 0; i < 3; ++i)
          OT_WINO22_OUTPUT(src[(i * 3 + 0) * step + c], src[(i * 3 + 1) * step + c], src[(i * 3 + 2) * step + c],
                           s[i][0], s[i][1]);
        const float b = bias[cb + c];
        float y0, y1;
        OT_WINO22_OUTPUT(s[0][0], s[1][0], s[2][0], y0, y1);
        q0[c] = y0 + b;
        q2[c] = y1 + b;
        OT_WINO22_OUTPUT(s[0][1], s[1][1], s[2][1], y0, y1);
        q1[c] = y0 + b;
        q3[c] = y1 + b;
      }
    }
}

OT_VECTOR_CLONES void OutputTiles22(const TileGrid& g, const MapLayout& L, const float* m, const float* bias,
                                    float* spill, int64_t t0, int64_t t1, int64_t chunk, float* out) {
  OT_BY_LANES(OutputTiles22Impl, g, L, m, bias, spill, t0, t1, chunk, out);
}

// This thread's zero region (`zero_count` floats of zeros: input pixels outside the map, in
// every channel block's place, and the bias where there is none), then `spill_count`
// floats that output pixels outside the map are written to.
float* ZeroRegion(int64_t zero_count, int64_t spill_count) {
  float* zeros = ScratchFloats(kZeroScratch, zero_count + spill_count);
  std::memset(zeros, 0, static_cast<size_t>(zero_count) * sizeof(float));
  return zeros;
}

struct TileLoops {
  decltype(&InputTiles2) input;
  decltype(&OutputTiles2) output;
  decltype(&GradTiles2) grad;
};

// By input tile size t.
const TileLoops& Loops(int64_t t) {
  static const TileLoops two_by_two{InputTiles22, OutputTiles22, GradTiles22};
  static const TileLoops two{InputTiles2, OutputTiles2, GradTiles2};
  static const TileLoops four{InputTiles4, OutputTiles4, GradTiles4};
  return t == 3 ? two_by_two : t == 6 ? four : two;
}

}  // namespace

std::unique_ptr<WinogradConv> WinogradConv::Make(const Shape& x, const Shape& w, const Shape& y,
                                                 const std::vector<int64_t>& strides,
                                                 const std::vector<int64_t>& dilations,
                                                 const std::vector<int64_t>& pads_begin,
                                                 const TapConv::Layouts& layouts, int tile, bool bf16_products) {
  if ((tile != 2 && tile != 4) || (tile == 4 && bf16_products)) return nullptr;
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
  c->bf16_ = bf16_products;
  c->t_ = tile == 2 && x[2] == 2 && x[3] == 2 ? 3 : tile + 2;  // 2x2 maps: 3 points (OT_WINO22_INPUT)
  c->n_ = x[0];
  c->c_ = x[1];
  c->o_ = y[1];
  c->h_ = x[2];
  c->w_ = x[3];
  c->tiles_h_ = (c->h_ + tile - 1) / tile;
  c->tiles_w_ = (c->w_ + tile - 1) / tile;
  c->tiles_ = c->n_ * c->tiles_h_ * c->tiles_w_;
  // Activations channels-last or channel-blocked stay where they are (the transforms read
  // and write them); others go through channels-last copies.
  // (Of their element type: float32, or bfloat16 for the inputs under --amp bf16.)
  const auto bf16 = dnnl::memory::data_type::bf16;
  c->x_bf16_ = layouts.x.data_type() == bf16;
  c->dy_bf16_ = layouts.dy.data_type() == bf16;
  auto map = [](const dnnl::memory::desc& md, const Shape& s, Reorder* in, Reorder* out, MapLayout* l) {
    const int64_t channels = s[1], pixels = s[2] * s[3];
    const dnnl::memory::desc nhwc(ToDims(s), md.data_type(), dnnl::memory::format_tag::nhwc);
    dnnl::memory::desc own = nhwc;
    *l = {channels, channels, 0, pixels * channels};
    for (int64_t block : {8, 16})
      if (channels % block == 0 &&
          md == dnnl::memory::desc(ToDims(s), md.data_type(),
                                   block == 8 ? dnnl::memory::format_tag::nChw8c : dnnl::memory::format_tag::nChw16c)) {
        own = md;
        *l = {channels, block, pixels * block, pixels * channels};
      }
    if (in) *in = Reorder(md, own);
    if (out) *out = Reorder(own, md);
  };
  map(layouts.x, x, &c->x_in_, nullptr, &c->x_map_);
  map(layouts.y, y, nullptr, &c->y_out_, &c->y_map_);
  map(layouts.dy, y, &c->dy_in_, nullptr, &c->dy_map_);
  map(layouts.dx, x, nullptr, &c->dx_out_, &c->dx_map_);
  if (c->dy_bf16_) c->dy_wide_ = Reorder(c->dy_in_.to(), WithDataType(c->dy_in_.to(), DType::kFloat32));
  // Weights: plain [O, C, 3, 3] to taps-major [3, 3, C, O] (forward), [3, 3, O, C] (input
  // gradient; KronG turns the kernel). The weight gradient is folded straight into plain
  // (FoldWeightGradient).
  const dnnl::memory::desc plain = PlainDesc(w, c->x_bf16_ ? DType::kBFloat16 : DType::kFloat32);
  const dnnl::memory::desc hwio(ToDims(w), dnnl::memory::data_type::f32, dnnl::memory::format_tag::hwio);
  const dnnl::memory::desc hwoi(ToDims(w), dnnl::memory::data_type::f32, {c->c_, 1, 3 * c->o_ * c->c_, c->o_ * c->c_});
  c->w_forward_ = Reorder(plain, hwio);
  c->w_backward_ = Reorder(plain, hwoi);
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

bool WinogradConv::Whole(int64_t in_c, int64_t out_c) const {
  // Where one point's weights (in_c x out_c) fill half of a 512 KiB L2 or more, chunked
  // sgemm calls reread them for every few tiles; all tiles at once read them once (AVX2,
  // ResNet34 b128: 256 and 512 channels 10-15% faster this way, 64 and 128 slower), while
  // the transformed tiles stay under 16 MiB.
  return in_c * out_c >= 65536 && tiles_ * t_ * t_ * std::max(in_c, out_c) <= (int64_t{4} << 20);
}

std::vector<WinogradConv::Block> WinogradConv::Blocks(int64_t columns) const {
  // Enough (point, column range) blocks to keep every thread busy: the points alone when
  // they divide evenly among the threads or outnumber them 4 to 1, else columns split in up
  // to 8 ranges (multiples of 16).
  const int64_t points = t_ * t_, threads = std::max(1, omp_get_max_threads());
  int64_t split = 1;
  while (split < 8 && (points * split) % threads != 0 && points * split < 4 * threads) ++split;
  const int64_t width = std::max<int64_t>(16, (columns + split - 1) / split + 15) / 16 * 16;
  std::vector<Block> blocks;
  for (int64_t xi = 0; xi < points; ++xi)
    for (int64_t c0 = 0; c0 < columns; c0 += width) blocks.push_back({xi, c0, std::min(columns, c0 + width)});
  return blocks;
}

void WinogradConv::Multiply(bool a_transposed, int64_t m, int64_t n, int64_t k, Operand a, int64_t a_offset,
                            int64_t lda, Operand b, int64_t b_offset, int64_t ldb, bool accumulate, float* c,
                            int64_t ldc) const {
  if (bf16_)
    GemmBf16(a_transposed, m, n, k, a.bf16 + a_offset, lda, b.bf16 + b_offset, ldb, accumulate, c, ldc);
  else
    Sgemm(a_transposed, m, n, k, a.f32 + a_offset, lda, b.f32 + b_offset, ldb, accumulate, c, ldc);
}

void WinogradConv::Convolve(const void* in, bool in_bf16, const MapLayout& in_map, Operand u,
                            const MapLayout& out_map, const float* bias, float* out) const {
  const int64_t in_c = in_map.channels, out_c = out_map.channels;
  const TileLoops& loops = Loops(t_);
  const TileGrid grid{h_, w_, tiles_h_, tiles_w_, m_};
  const int64_t points = t_ * t_;
  const int64_t widest = std::max(in_c, out_c);
  const int64_t zero_count = std::max(in_map.Span(), out_c);  // ZeroRegion
  if (Whole(in_c, out_c)) {
    // Every tile transformed at once, then one sgemm per (point, column range) over all the
    // tiles (chunks of few tiles made short sgemm calls on wide layers), then the outputs.
    float* v = bf16_ ? nullptr : ScratchFloats(kTileScratch, points * tiles_ * in_c);
    uint16_t* v16 = bf16_ ? ScratchBf16(kTile16Scratch, points * tiles_ * in_c) : nullptr;
    float* m = ScratchFloats(kProductScratch, points * tiles_ * out_c);
    const std::vector<Block> blocks = Blocks(out_c);
    const int64_t threads = std::max(1, omp_get_max_threads());
    const int64_t share = (tiles_ + threads - 1) / threads;
#pragma omp parallel
    {
      float* zeros = ZeroRegion(zero_count, out_map.Span());
      float* spill = zeros + zero_count;
#pragma omp for schedule(static)
      for (int64_t k = 0; k < threads; ++k) {
        const int64_t t0 = std::min(tiles_, k * share), t1 = std::min(tiles_, t0 + share);
        if (t0 >= t1) continue;
        loops.input(grid, in_map, in, in_bf16, zeros, t0, t1, tiles_, Tiles(v, v16, t0 * in_c), bf16_);
      }
#pragma omp for schedule(static)
      for (size_t i = 0; i < blocks.size(); ++i) {
        const Block& b = blocks[i];
        Multiply(false, tiles_, b.c1 - b.c0, in_c, {v, v16}, b.xi * tiles_ * in_c, in_c, u, b.xi * in_c * out_c + b.c0,
                 out_c, false, m + b.xi * tiles_ * out_c + b.c0, out_c);
      }
#pragma omp for schedule(static)
      for (int64_t k = 0; k < threads; ++k) {
        const int64_t t0 = std::min(tiles_, k * share), t1 = std::min(tiles_, t0 + share);
        if (t0 < t1) loops.output(grid, out_map, m + t0 * out_c, bias ? bias : zeros, spill, t0, t1, tiles_, out);
      }
    }
    return;
  }
  const int64_t chunk = ChunkTiles(widest);
  const int64_t chunks = (tiles_ + chunk - 1) / chunk;
#pragma omp parallel
  {
    float* v = bf16_ ? nullptr : ScratchFloats(kTileScratch, points * chunk * in_c);
    uint16_t* v16 = bf16_ ? ScratchBf16(kTile16Scratch, points * chunk * in_c) : nullptr;
    float* m = ScratchFloats(kProductScratch, points * chunk * out_c);
    float* zeros = ZeroRegion(zero_count, out_map.Span());
    float* spill = zeros + zero_count;
#pragma omp for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t t0 = k * chunk, t1 = std::min(tiles_, t0 + chunk);
      loops.input(grid, in_map, in, in_bf16, zeros, t0, t1, chunk, Tiles(v, v16, 0), bf16_);
      for (int64_t xi = 0; xi < points; ++xi)
        Multiply(false, t1 - t0, out_c, in_c, {v, v16}, xi * chunk * in_c, in_c, u, xi * in_c * out_c, out_c, false,
                 m + xi * chunk * out_c, out_c);
      loops.output(grid, out_map, m, bias ? bias : zeros, spill, t0, t1, chunk, out);
    }
  }
}

WinogradConv::Operand WinogradConv::TransformWeights(const void* w, bool flipped) const {
  // The kernels' taps as rows (Reorder), then U[xi] = kron(G, G) . taps in one sgemm.
  const int64_t n = c_ * o_;
  float* taps = ScratchFloats(kTapsScratch, 9 * n);
  (flipped ? w_backward_ : w_forward_).Run(const_cast<void*>(w), taps);
  float* u = ScratchFloats(kWeightScratch, t_ * t_ * n);
  Sgemm(false, t_ * t_, n, 9, KronG(t_, flipped), 9, taps, n, false, u, n);
  if (!bf16_) return {u, nullptr};
  uint16_t* u16 = ScratchBf16(kWeight16Scratch, t_ * t_ * n);
  ToBf16(u, t_ * t_ * n, u16);
  return {nullptr, u16};
}

void WinogradConv::FoldWeightGradient(const float* du, float* dw) const {
  // dw = dU^T . kron(G, G): dU's columns are (o, c) pairs, so each row of the product is one
  // kernel's 9 taps, written in the plain [O, C, 3, 3] layout. (Before: kron(G, G)^T . dU
  // into [3, 3, C, O], then oneDNN's reorder to plain: 512 x 512 x 3 x 3, 2 threads, 1.6 ms
  // against 0.54 ms for this one sgemm; F(4x4, 3x3)'s 36 points on 256 x 256: 0.51 -> 0.46 ms.)
  Sgemm(true, c_ * o_, 9, t_ * t_, du, c_ * o_, KronG(t_, false), 9, false, dw, 9);
}

void WinogradConv::Forward(const void* x, const void* w, const float* b, float* y) {
  const Operand u = TransformWeights(w, false);
  const void* xr = x_in_.Apply(const_cast<void*>(x), kInputScratch).get_data_handle();
  float* yr = y_out_.needed() ? ScratchFloats(kOutputScratch, n_ * h_ * w_ * o_) : y;
  Convolve(xr, x_bf16_, x_map_, u, y_map_, b, yr);
  if (y_out_.needed()) y_out_.Run(yr, y);
}

void WinogradConv::Backward(const void* dy, const void* x, const void* w, float* dx, float* dw, float* db) {
  const TileLoops& loops = Loops(t_);
  const int64_t points = t_ * t_;
  const void* dyr = dy_in_.Apply(const_cast<void*>(dy), kGradScratch).get_data_handle();
  if (dx) {
    const Operand u = TransformWeights(w, true);
    float* dxr = dx_out_.needed() ? ScratchFloats(kOutputScratch, n_ * h_ * w_ * c_) : dx;
    Convolve(dyr, dy_bf16_, dy_map_, u, dx_map_, nullptr, dxr);
    if (dx_out_.needed()) dx_out_.Run(dxr, dx);
  }
  if (db) {  // in dy's layout as the transforms read it (widened where bfloat16)
    std::vector<double> sums(static_cast<size_t>(o_));
    const void* wide = dy_bf16_ ? dy_wide_.Apply(const_cast<void*>(dyr), kTapsScratch).get_data_handle() : dyr;
    ChannelSums(dy_wide_.needed() ? dy_wide_.to() : dy_in_.to(), static_cast<const float*>(wide), nullptr,
                sums.data(), nullptr);
    for (int64_t o = 0; o < o_; ++o) db[o] = static_cast<float>(sums[static_cast<size_t>(o)]);
  }
  if (!dw) return;
  const void* xr = x_in_.Apply(const_cast<void*>(x), kInputScratch).get_data_handle();
  const TileGrid grid{h_, w_, tiles_h_, tiles_w_, m_};
  const int64_t zero_count = std::max(x_map_.Span(), dy_map_.Span());  // pixels outside the maps
  if (Whole(c_, o_)) {
    // As in Convolve: all tiles transformed, then dU[xi] = dM[xi]^T . V[xi] ([O][C]) over all
    // of them by (point, range of O), each written once (no per-thread partial sums).
    float* v = bf16_ ? nullptr : ScratchFloats(kTileScratch, points * tiles_ * c_);
    float* dm = bf16_ ? nullptr : ScratchFloats(kProductScratch, points * tiles_ * o_);
    uint16_t* v16 = bf16_ ? ScratchBf16(kTile16Scratch, points * tiles_ * c_) : nullptr;
    uint16_t* dm16 = bf16_ ? ScratchBf16(kProduct16Scratch, points * tiles_ * o_) : nullptr;
    float* du = ScratchFloats(kOutputScratch, points * c_ * o_);
    const std::vector<Block> blocks = Blocks(o_);
    const int64_t threads = std::max(1, omp_get_max_threads());
    const int64_t share = (tiles_ + threads - 1) / threads;
#pragma omp parallel
    {
      const float* zeros = ZeroRegion(zero_count, 0);
#pragma omp for schedule(static)
      for (int64_t k = 0; k < threads; ++k) {
        const int64_t t0 = std::min(tiles_, k * share), t1 = std::min(tiles_, t0 + share);
        if (t0 >= t1) continue;
        loops.input(grid, x_map_, xr, x_bf16_, zeros, t0, t1, tiles_, Tiles(v, v16, t0 * c_), bf16_);
        loops.grad(grid, dy_map_, dyr, dy_bf16_, zeros, t0, t1, tiles_, Tiles(dm, dm16, t0 * o_), bf16_);
      }
#pragma omp for schedule(static)
      for (size_t i = 0; i < blocks.size(); ++i) {
        const Block& b = blocks[i];
        Multiply(true, b.c1 - b.c0, c_, tiles_, {dm, dm16}, b.xi * tiles_ * o_ + b.c0, o_, {v, v16},
                 b.xi * tiles_ * c_, c_, false, du + (b.xi * o_ + b.c0) * c_, c_);
      }
    }
    FoldWeightGradient(du, dw);
    return;
  }
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
    float* v = bf16_ ? nullptr : ScratchFloats(kTileScratch, points * chunk * c_);
    float* dm = bf16_ ? nullptr : ScratchFloats(kProductScratch, points * chunk * o_);
    uint16_t* v16 = bf16_ ? ScratchBf16(kTile16Scratch, points * chunk * c_) : nullptr;
    uint16_t* dm16 = bf16_ ? ScratchBf16(kProduct16Scratch, points * chunk * o_) : nullptr;
    const float* zeros = ZeroRegion(zero_count, 0);
    float* partial = partials + me * du_size;
#pragma omp for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t t0 = k * chunk, t1 = std::min(tiles_, t0 + chunk);
      loops.input(grid, x_map_, xr, x_bf16_, zeros, t0, t1, chunk, Tiles(v, v16, 0), bf16_);
      loops.grad(grid, dy_map_, dyr, dy_bf16_, zeros, t0, t1, chunk, Tiles(dm, dm16, 0), bf16_);
      for (int64_t xi = 0; xi < points; ++xi) {
        Multiply(true, o_, c_, t1 - t0, {dm, dm16}, xi * chunk * o_, o_, {v, v16}, xi * chunk * c_, c_, used[me] != 0,
                 partial + xi * o_ * c_, c_);
      }
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
  FoldWeightGradient(du, dw);
}

}  // namespace cpu
}  // namespace ot
