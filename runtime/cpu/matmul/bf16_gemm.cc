// BFloat16Gemm (bf16_gemm.h): operands packed as bfloat16 pairs along k, then tiles of up to
// 4 rows x 64 columns of float32 sums, each step one broadcast pair of A against 16 pairs of B
// per vdpbf16ps. The functions that use AVX-512 are compiled for it alone (target attribute)
// and run only where HasBFloat16Gemm() says so; the rest of the build stays baseline x86-64.
#include "runtime/cpu/matmul/bf16_gemm.h"

#include <immintrin.h>

#include <algorithm>

#include "runtime/cpu/layout/dnnl_util.h"

#define OT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace ot {
namespace cpu {
namespace {

// Lanes 0..n-1 of 16.
inline __mmask16 FirstLanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << std::max<int64_t>(n, 0)) - 1);
}

// Pairs along k where k runs down the rows of src (element (kk, c) at src[kk * ld + c]):
// out[p * out_ld + c] = bf16(kk = 2p) | bf16(kk = 2p + 1) << 16, for c < cols; an odd k
// pairs its last row with 0.
OT_BF16_TARGET void PackKRows(const float* src, int64_t ld, int64_t k, int64_t cols, uint32_t* out, int64_t out_ld) {
  // Word 2l of a pair vector is word l of the conversion (row 2p), word 2l + 1 is word 16 + l (row 2p + 1).
  alignas(64) static const uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                       8,  24, 9,  25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  for (int64_t p = 0; 2 * p < k; ++p) {
    const float* r0 = src + 2 * p * ld;
    const bool odd_end = 2 * p + 1 == k;
    uint32_t* o = out + p * out_ld;
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 m = FirstLanes(cols - c);
      const __m512 x0 = _mm512_maskz_loadu_ps(m, r0 + c);
      const __m512 x1 = odd_end ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, r0 + ld + c);
      const __m512i words = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(x1, x0));  // x0 low, x1 high
      _mm512_mask_storeu_epi32(o + c, m, _mm512_permutexvar_epi16(interleave, words));
    }
  }
}

// Pairs along k where k runs along the rows of src (element (kk, c) at src[c * ld + kk]): the
// conversion of a row is already in pair order; it is written down a column of out.
OT_BF16_TARGET void PackKColumns(const float* src, int64_t ld, int64_t k, int64_t cols, uint32_t* out,
                                 int64_t out_ld) {
  const int64_t pairs = (k + 1) / 2;
  alignas(64) uint32_t tmp[16];
  for (int64_t c = 0; c < cols; ++c) {
    const float* s = src + c * ld;
    for (int64_t kk = 0; kk < k; kk += 32) {
      const __m512 x0 = _mm512_maskz_loadu_ps(FirstLanes(k - kk), s + kk);
      const __m512 x1 = _mm512_maskz_loadu_ps(FirstLanes(k - kk - 16), s + kk + 16);
      _mm512_store_si512(tmp, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(x1, x0)));
      const int64_t p0 = kk / 2, n = std::min<int64_t>(16, pairs - p0);
      for (int64_t q = 0; q < n; ++q) out[(p0 + q) * out_ld + c] = tmp[q];
    }
  }
}

// Pairs along k where k runs along the rows of src, kept by row: out[c * pairs + p] (the
// conversion of a row is already in pair order: a straight copy).
OT_BF16_TARGET void PackRowsAsPairs(const float* src, int64_t ld, int64_t k, int64_t cols, uint32_t* out) {
  const int64_t pairs = (k + 1) / 2;
  for (int64_t c = 0; c < cols; ++c) {
    const float* s = src + c * ld;
    uint32_t* o = out + c * pairs;
    for (int64_t kk = 0; kk < k; kk += 32) {
      const __m512 x0 = _mm512_maskz_loadu_ps(FirstLanes(k - kk), s + kk);
      const __m512 x1 = _mm512_maskz_loadu_ps(FirstLanes(k - kk - 16), s + kk + 16);
      _mm512_mask_storeu_epi32(o + kk / 2, FirstLanes(pairs - kk / 2),
                               reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(x1, x0)));
    }
  }
}

// Rows [0, R) x vectors [0, V) of 16 columns: C = alpha sum_p A_p B_p + beta C, for the
// first `cols` columns (the packed B has V * 16 readable columns).
// A's pair p of row r is ap[p * a_ps + r * a_rs].
template <int R, int V>
OT_BF16_TARGET void Tile(const uint32_t* ap, int64_t a_rs, int64_t a_ps, const uint32_t* bp, int64_t b_ld, int64_t pairs, float alpha,
                         float beta, float* c, int64_t ldc, int64_t cols) {
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh b[V];
    for (int v = 0; v < V; ++v) b[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bp + p * b_ld + 16 * v));
    for (int r = 0; r < R; ++r) {
      const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(ap[p * a_ps + r * a_rs])));
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, b[v]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      const __mmask16 m = FirstLanes(cols - 16 * v);
      float* out = c + r * ldc + 16 * v;
      __m512 y = _mm512_mul_ps(acc[r][v], va);
      if (beta != 0.f) y = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, out), y);
      _mm512_mask_storeu_ps(out, m, y);
    }
}

template <int R>
OT_BF16_TARGET void RowTiles(const uint32_t* ap, int64_t a_rs, int64_t a_ps, const uint32_t* bp, int64_t b_ld,
                             int64_t pairs, int64_t n, float alpha, float beta, float* c, int64_t ldc) {
  for (int64_t j0 = 0; j0 < n;) {
    const int64_t left = n - j0;
    const uint32_t* b = bp + j0;
    float* cj = c + j0;
    switch (left > 48 ? 4 : (left + 15) / 16) {
      case 4: Tile<R, 4>(ap, a_rs, a_ps, b, b_ld, pairs, alpha, beta, cj, ldc, left); j0 += 64; break;
      case 3: Tile<R, 3>(ap, a_rs, a_ps, b, b_ld, pairs, alpha, beta, cj, ldc, left); j0 = n; break;
      case 2: Tile<R, 2>(ap, a_rs, a_ps, b, b_ld, pairs, alpha, beta, cj, ldc, left); j0 = n; break;
      default: Tile<R, 1>(ap, a_rs, a_ps, b, b_ld, pairs, alpha, beta, cj, ldc, left); j0 = n; break;
    }
  }
}

}  // namespace

bool HasBFloat16Gemm() {
  static const bool has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
                          CpuHasBFloat16Products();
  return has;
}

void BFloat16Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc, BFloat16GemmScratch& w) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    return;
  }
  const int64_t pairs = (k + 1) / 2, padded_n = (n + 15) / 16 * 16;
  if (w.a.size() < static_cast<size_t>(pairs * m)) w.a.resize(static_cast<size_t>(pairs * m));
  if (w.b.size() < static_cast<size_t>(pairs * padded_n)) w.b.resize(static_cast<size_t>(pairs * padded_n));
  // A(i, kk) is a[kk * lda + i] when transposed, else a[i * lda + kk]; B(kk, j) likewise. A's
  // pairs are kept by pair ([k / 2][m]) when transposed, by row ([m][k / 2]) otherwise: both
  // straight conversions. B's are always by pair, 16 columns to a vector.
  int64_t a_rs = pairs, a_ps = 1;
  if (ta) {
    PackKRows(a, lda, k, m, w.a.data(), m);
    a_rs = 1, a_ps = m;
  } else {
    PackRowsAsPairs(a, lda, k, m, w.a.data());
  }
  if (tb) PackKColumns(b, ldb, k, n, w.b.data(), padded_n);
  else PackKRows(b, ldb, k, n, w.b.data(), padded_n);
  for (int64_t i0 = 0; i0 < m; i0 += 4) {
    const uint32_t* ap = w.a.data() + i0 * a_rs;
    float* ci = c + i0 * ldc;
    switch (std::min<int64_t>(4, m - i0)) {
      case 4: RowTiles<4>(ap, a_rs, a_ps, w.b.data(), padded_n, pairs, n, alpha, beta, ci, ldc); break;
      case 3: RowTiles<3>(ap, a_rs, a_ps, w.b.data(), padded_n, pairs, n, alpha, beta, ci, ldc); break;
      case 2: RowTiles<2>(ap, a_rs, a_ps, w.b.data(), padded_n, pairs, n, alpha, beta, ci, ldc); break;
      default: RowTiles<1>(ap, a_rs, a_ps, w.b.data(), padded_n, pairs, n, alpha, beta, ci, ldc); break;
    }
  }
}

OT_BF16_TARGET void ConvertToBFloat16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 32) {
    const __m512 x0 = _mm512_maskz_loadu_ps(FirstLanes(n - i), in + i);
    const __m512 x1 = _mm512_maskz_loadu_ps(FirstLanes(n - i - 16), in + i + 16);
    const __mmask32 m = n - i >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << (n - i)) - 1);
    _mm512_mask_storeu_epi16(out + i, m, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(x1, x0)));
  }
}

}  // namespace cpu
}  // namespace ot
