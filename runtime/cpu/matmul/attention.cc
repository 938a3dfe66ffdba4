// ONNX Attention (opset 23, 24) and its gradient AttentionGrad (org.onnxtrain) on the CPU:
// per (batch, head) the scores Q.K^T on oneDNN's sgemm, the mask, causal and padding terms,
// softcap and a row softmax in float32, then P.V on sgemm. Multi-head, grouped-query and
// multi-query heads, 3D and 4D inputs, bool and additive masks (shorter than the keys:
// padded as masked), past_key/past_value caches and the qk_matmul_output modes, as ONNX's
// reference does.
//
//   AttentionGrad(dY, Q, K, V[, attn_mask][, nonpad_kv_seqlen][, Y, logsumexp]) -> dQ, dK, dV, dScores
//     with the forward node's attributes. It recomputes the probabilities from Q and K (no
//     [q_len, total_len] matrix is kept between forward and backward) and applies
//     dV = P^T.dY, dP = dY.V^T, dS = P * (dP - rowsum(P * dP)) (times the softcap's
//     derivative), dQ = scale dS.K, dK = scale dS^T.Q. dScores, the gradient of the
//     additive mask's broadcast [batch, q_heads, q_len, mask_len] form, is optional.
//     Query heads that share a key/value head (grouped-query) run in one task, so their
//     dK and dV sums have one writer. Past caches are not differentiated (the rule refuses).
//     Given the forward's Y and row logsumexp (org.onnxtrain Attention's output 4, fused
//     by graph/passes/fusion.h), it takes the flash path below instead: tiles, no row max or sum;
//     given also the forward's probabilities (output 5, kept where q_len and total_len are at
//     most one tile, 128), it reads them instead of recomputing Q.K^T and the exponentials.
//   Under --amp bf16 (attribute bf16_products) the flash path's products take bfloat16
//     operands with float32 sums (bf16_gemm.h); everything else stays float32.
#include <dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "graph/op_domains.h"
#include "runtime/ops/math/activation_math.h"
#include "runtime/ops/math/attention_math.h"
#include "runtime/ops/shapes/attention_shapes.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/cpu/elementwise/vector_loops.h"  // OT_VECTOR_CLONES
#include "runtime/cpu/matmul/bf16_gemm.h"

namespace ot {
namespace cpu {
namespace {

// Row-major C[m x n] = alpha op(A) op(B) + beta C on oneDNN's sgemm.
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // sgemm leaves C untouched for k = 0 in some builds: scale it here
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    return;
  }
  const dnnl_status_t s = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (s != dnnl_success) throw Error("oneDNN sgemm failed in Attention (status " + std::to_string(static_cast<int>(s)) + ")");
}

constexpr float kMasked = -std::numeric_limits<float>::infinity();

// The row loops of the softmax and its gradient, compiled for AVX-512, AVX2 and the baseline
// (vector_loops.h; this file is built with -fno-trapping-math, runtime/CMakeLists.txt). The
// reductions are `omp simd` ones: without them GCC keeps a float sum or max scalar (its order
// is part of the result), and at T = 65 the scalar loops took as long as the products.
OT_VECTOR_CLONES __attribute__((noinline)) float RowMax(const float* x, int64_t n) {
  float m = kMasked;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

// x[j] = exp(x[j] - shift) (activation_math.h's FastExp); returns their sum.
OT_VECTOR_CLONES __attribute__((noinline)) float ExpShiftSum(float* x, int64_t n, float shift) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    const float e = unary_detail::FastExp(x[j] - shift);
    x[j] = e;
    sum += e;
  }
  return sum;
}

OT_VECTOR_CLONES __attribute__((noinline)) void ExpShift(float* x, int64_t n, float shift) {
  for (int64_t j = 0; j < n; ++j) x[j] = unary_detail::FastExp(x[j] - shift);
}

OT_VECTOR_CLONES __attribute__((noinline)) void ScaleRow(float* x, int64_t n, float c) {
  for (int64_t j = 0; j < n; ++j) x[j] *= c;
}

OT_VECTOR_CLONES __attribute__((noinline)) float Dot(const float* a, const float* b, int64_t n) {
  float dot = 0.f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < n; ++j) dot += a[j] * b[j];
  return dot;
}

// dp[j] = p[j] * (dp[j] - row_dot).
OT_VECTOR_CLONES __attribute__((noinline)) void SoftmaxGradRow(const float* p, float* dp, int64_t n, float row_dot) {
  for (int64_t j = 0; j < n; ++j) dp[j] = SoftmaxInputGrad(p[j], dp[j], row_dot);
}

// The inputs of one kernel call, with K and V as the kernel reads them: the inputs, or the
// present caches (past and new positions, 4D) when past_key/past_value are given.
struct AttentionOperands {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  HeadStrides ks, vs;
  const void* mask = nullptr;
  const int64_t* nonpad = nullptr;
};

// Adds the mask, causal and padding terms of query head h of batch b to the tile s (leading
// dimension ld) of the scores of queries [i0, i0 + rows) and keys [j0, j0 + cols).
void AddBias(const AttentionGeometry& g, const AttentionOperands& op, int64_t b, int64_t h, int64_t i0, int64_t rows,
             int64_t j0, int64_t cols, float* s, int64_t ld) {
  const int64_t tt = g.total_len;
  const int64_t valid = op.nonpad ? std::clamp<int64_t>(op.nonpad[b], 0, tt) : tt;
  const int64_t j1 = j0 + cols;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    float* row = s + r * ld - j0;  // row[j] for j in [j0, j1)
    if (g.has_mask) {
      const int64_t base = b * g.mask_strides[0] + h * g.mask_strides[1] + i * g.mask_strides[2];
      const int64_t js = g.mask_strides[3];
      const int64_t mask_end = std::min(j1, g.mask_len);
      if (g.mask_bool) {
        const uint8_t* m = static_cast<const uint8_t*>(op.mask) + base;
        for (int64_t j = j0; j < mask_end; ++j)
          if (!m[j * js]) row[j] = kMasked;
      } else {
        const float* m = static_cast<const float*>(op.mask) + base;
        for (int64_t j = j0; j < mask_end; ++j) row[j] += m[j * js];
      }
      for (int64_t j = std::max(j0, g.mask_len); j < j1; ++j) row[j] = kMasked;
    }
    if (g.causal)
      for (int64_t j = std::max(i + g.past_len + 1, j0); j < j1; ++j) row[j] = kMasked;
    for (int64_t j = std::max(valid, j0); j < j1; ++j) row[j] = kMasked;
  }
}

// Scores of query head h of batch b: S[i, j] = scale Q_i.K_j + bias (mask, causal, padding),
// optionally recorded before (mode 0) and after (mode 1) the bias, then softcapped (mode 2).
// `record` is the [q_len, total_len] block of qk_matmul_output for (b, h), or null.
void Scores(const AttentionGeometry& g, const AttentionOperands& op, int64_t b, int64_t h, float* s, float* record) {
  const int64_t kvh = h / g.GroupSize();
  const int64_t tq = g.q_len, tt = g.total_len;
  Gemm(false, true, tq, tt, g.head_size, g.scale, op.q + b * g.q.batch + h * g.q.head, g.q.pos,
       op.k + b * op.ks.batch + kvh * op.ks.head, op.ks.pos, 0.f, s, tt);
  if (record && g.qk_output_mode == 0) std::memcpy(record, s, sizeof(float) * static_cast<size_t>(tq * tt));
  AddBias(g, op, b, h, 0, tq, 0, tt, s, tt);
  if (record && g.qk_output_mode == 1) std::memcpy(record, s, sizeof(float) * static_cast<size_t>(tq * tt));
  if (g.softcap > 0) {
    const float c = g.softcap, inv = 1.f / g.softcap;
    for (int64_t e = 0; e < tq * tt; ++e) s[e] = SoftcapScore(s[e], c, inv);
  }
  if (record && g.qk_output_mode == 2) std::memcpy(record, s, sizeof(float) * static_cast<size_t>(tq * tt));
}

// Row softmax in place (a row masked everywhere becomes NaN, as ONNX's reference and
// PyTorch's math path give).
void SoftmaxRows(float* s, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = s + i * cols;
    float mx = kMasked;
    for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, row[j]);
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < cols; ++j) row[j] *= inv;
  }
}

// The flash path (FlashAttention-2's schedule, on sgemm tiles): queries in tiles of
// kQueryTile, keys in tiles of kKeyTile. The forward keeps a running row maximum and sum
// (online softmax) and leaves only the row logsumexp [batch, q_heads, q_len]; the backward
// recomputes each probability tile as exp(S - logsumexp) and uses rowsum(dY * Y) in place
// of rowsum(P * dP). Under is_causal the key tiles wholly above the diagonal are skipped.
// The tiles' exponentials are activation_math.h's FastExp (plain arithmetic that
// vectorises; the C library's expf made the fused kernel slower than the unfused ops at T=32).
constexpr int64_t kQueryTile = 128, kKeyTile = 128;

// Keys [0, end) that query rows [i0, i1) can see (all of them unless causal).
int64_t VisibleKeys(const AttentionGeometry& g, int64_t i1) {
  return g.causal ? std::clamp<int64_t>(i1 + g.past_len, 0, g.total_len) : g.total_len;
}

// A head's rows as the products read them: `ld` floats from one position to the next.
struct HeadRows {
  const float* p;
  int64_t ld;
};

// The rows of one head of a 3D or sequence-first input lie a whole [batch x heads x size]
// row apart (ViT's q, k and v: 24 KiB), every row in another page and, at multiples of
// 4 KiB, in the same L1 sets: sgemm ran its 65 x 65 x 64 products at half the rate it has on
// packed rows (14 against 7 us a product, one Zen 4 core). So a head whose rows are not
// adjacent is copied into `buf` first: the products read each row several times, the copy once.
HeadRows Packed(const float* src, int64_t ld, int64_t rows, int64_t size, std::vector<float>& buf) {
  if (ld == size || rows <= 1) return {src, ld};
  buf.resize(static_cast<size_t>(rows * size));
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(buf.data() + r * size, src + r * ld, sizeof(float) * static_cast<size_t>(size));
  return {buf.data(), size};
}

// Adds (or, with add false, copies) packed rows [rows x size] into rows `ld` floats apart.
void UnpackRows(const float* src, int64_t rows, int64_t size, float* dst, int64_t ld, bool add) {
  for (int64_t r = 0; r < rows; ++r) {
    float* out = dst + r * ld;
    const float* in = src + r * size;
    if (add)
      for (int64_t c = 0; c < size; ++c) out[c] += in[c];
    else
      std::memcpy(out, in, sizeof(float) * static_cast<size_t>(size));
  }
}

struct FlashScratch {
  std::vector<float> s, dp, acc, row_max, row_sum, delta;
  std::vector<float> q, k, v, dy, dq, dk, dv;  // packed heads (Packed), grown on first use
  bool bf16 = false;                           // the tiles' products in bfloat16 (BFloat16Products)
  BFloat16GemmScratch pairs;
  FlashScratch(const AttentionGeometry& g, bool backward, bool bf16_products)
      : s(static_cast<size_t>(kQueryTile * kKeyTile)),
        dp(backward ? static_cast<size_t>(kQueryTile * kKeyTile) : 0),
        acc(static_cast<size_t>(kQueryTile * g.v_head_size)),
        row_max(static_cast<size_t>(kQueryTile)),
        row_sum(static_cast<size_t>(kQueryTile)),
        delta(backward ? static_cast<size_t>(g.q_len) : 0),
        bf16(bf16_products) {}

  // A product of the tile loops: sgemm, or bfloat16 operands with float32 sums.
  void Product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    if (bf16) BFloat16Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pairs);
    else Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
};

// Y and the row logsumexp (lse: [q_len]) of query head h of batch b.
// Whether the forward keeps the probabilities for the backward (org.onnxtrain Attention's
// output 5): where every row's keys fit one tile (q_len and total_len at most 128), the
// forward has the whole [q_len, total_len] block of P in hand anyway, and keeping it spares
// the backward the product Q.K^T and the exponentials (one of its five products). Larger
// sequences keep only the logsumexp: no [T, T] matrix outlives a tile.
bool KeepsProbabilities(const AttentionGeometry& g) { return g.q_len <= kQueryTile && g.total_len <= kKeyTile; }

// probs: null, or the [q_len, total_len] block of P of (b, h) to write (KeepsProbabilities).
void FlashForward(const AttentionGeometry& g, const AttentionOperands& op, int64_t b, int64_t h, float* y, float* lse,
                  float* probs, FlashScratch& w) {
  const int64_t kvh = h / g.GroupSize(), dv = g.v_head_size;
  const HeadRows q = Packed(op.q + b * g.q.batch + h * g.q.head, g.q.pos, g.q_len, g.head_size, w.q);
  const HeadRows k = Packed(op.k + b * op.ks.batch + kvh * op.ks.head, op.ks.pos, g.total_len, g.head_size, w.k);
  const HeadRows v = Packed(op.v + b * op.vs.batch + kvh * op.vs.head, op.vs.pos, g.total_len, dv, w.v);
  float* y_bh = y + b * g.y.batch + h * g.y.head;
  float* s = w.s.data();
  float* acc = w.acc.data();
  float* mx = w.row_max.data();
  float* sum = w.row_sum.data();
  for (int64_t i0 = 0; i0 < g.q_len; i0 += kQueryTile) {
    const int64_t rows = std::min(kQueryTile, g.q_len - i0);
    std::fill(mx, mx + rows, kMasked);
    std::fill(sum, sum + rows, 0.f);
    std::fill(acc, acc + rows * dv, 0.f);
    const int64_t end = VisibleKeys(g, i0 + rows);
    for (int64_t j0 = 0; j0 < end; j0 += kKeyTile) {
      const int64_t cols = std::min(kKeyTile, end - j0);
      w.Product(false, true, rows, cols, g.head_size, g.scale, q.p + i0 * q.ld, q.ld, k.p + j0 * k.ld, k.ld, 0.f, s, cols);
      AddBias(g, op, b, h, i0, rows, j0, cols, s, cols);
      for (int64_t r = 0; r < rows; ++r) {
        float* row = s + r * cols;
        const float m = std::max(mx[r], RowMax(row, cols));
        if (m == kMasked) {  // nothing visible to this row yet
          std::fill(row, row + cols, 0.f);
          continue;
        }
        const float tile_sum = ExpShiftSum(row, cols, m);
        if (mx[r] != m && j0 > 0) {  // 0 while the row had seen nothing
          const float correction = std::exp(mx[r] - m);
          ScaleRow(acc + r * dv, dv, correction);
          sum[r] *= correction;
        }
        sum[r] += tile_sum;
        mx[r] = m;
      }
      if (!probs) w.Product(false, false, rows, dv, cols, 1.f, s, cols, v.p + j0 * v.ld, v.ld, 1.f, acc, dv);
    }
    if (probs) {  // one tile of keys (KeepsProbabilities): P = s / sum, Y = P.V, P kept
      const int64_t tt = g.total_len;
      for (int64_t r = 0; r < rows; ++r) {  // a row masked everywhere: 0 / 0 = NaN, as the softmax gives
        float* pr = probs + (i0 + r) * tt;
        std::memcpy(pr, s + r * end, sizeof(float) * static_cast<size_t>(end));
        ScaleRow(pr, end, 1.f / sum[r]);
        std::fill(pr + end, pr + tt, 0.f);  // keys no row of this tile sees (causal)
        lse[i0 + r] = mx[r] + std::log(sum[r]);
      }
      w.Product(false, false, rows, dv, end, 1.f, probs + i0 * tt, tt, v.p, v.ld, 0.f, acc, dv);  // Y's rows, packed
      UnpackRows(acc, rows, dv, y_bh + i0 * g.y.pos, g.y.pos, false);
      continue;
    }
    for (int64_t r = 0; r < rows; ++r) {  // a row masked everywhere: 0 / 0 = NaN, as the softmax gives
      const float inv = 1.f / sum[r];
      float* out = y_bh + (i0 + r) * g.y.pos;
      for (int64_t c = 0; c < dv; ++c) out[c] = acc[r * dv + c] * inv;
      lse[i0 + r] = mx[r] + std::log(sum[r]);
    }
  }
}

// The gradient contributions of query head h of batch b: dQ (written), dK and dV (added to).
struct FlashGradient {
  const float* dy;
  const float* y;
  const float* lse;  // [batch, q_heads, q_len]
  float* dq;
  float* dk_bh;
  float* dv_bh;
  float* dscores;  // null, or [batch, q_heads, q_len, cols]
  const float* probs;  // null, or the forward's P [batch, q_heads, q_len, total_len] (KeepsProbabilities)
};

void FlashBackward(const AttentionGeometry& g, const AttentionOperands& op, int64_t b, int64_t h,
                   const FlashGradient& f, FlashScratch& w) {
  const int64_t kvh = h / g.GroupSize(), dv = g.v_head_size, d = g.head_size;
  const HeadRows q = Packed(op.q + b * g.q.batch + h * g.q.head, g.q.pos, g.q_len, d, w.q);
  const HeadRows k = Packed(op.k + b * op.ks.batch + kvh * op.ks.head, op.ks.pos, g.total_len, d, w.k);
  const HeadRows v = Packed(op.v + b * op.vs.batch + kvh * op.vs.head, op.vs.pos, g.total_len, dv, w.v);
  const float* dy_rows = f.dy + b * g.y.batch + h * g.y.head;
  const HeadRows dy = Packed(dy_rows, g.y.pos, g.q_len, dv, w.dy);
  const float* y = f.y + b * g.y.batch + h * g.y.head;
  const float* lse = f.lse + (b * g.q_heads + h) * g.q_len;
  // dQ, dK and dV accumulate in packed rows where their heads' rows are not adjacent
  // (Packed's reason), and are written out (dQ) or added to the group's sums (dK, dV) at the end.
  float* dq_out = f.dq + b * g.q.batch + h * g.q.head;
  auto accumulator = [](float* out, int64_t ld, int64_t rows, int64_t size, std::vector<float>& buf) -> float* {
    if (ld == size || rows <= 1) return out;
    buf.assign(static_cast<size_t>(rows * size), 0.f);
    return buf.data();
  };
  float* dqp = accumulator(dq_out, g.q.pos, g.q_len, d, w.dq);
  float* dkp = accumulator(f.dk_bh, g.k.pos, g.total_len, d, w.dk);
  float* dvp = accumulator(f.dv_bh, g.v.pos, g.total_len, dv, w.dv);
  const int64_t ldq = dqp == dq_out ? g.q.pos : d;
  const int64_t ldk = dkp == f.dk_bh ? g.k.pos : d;
  const int64_t ldv = dvp == f.dv_bh ? g.v.pos : dv;
  const int64_t score_cols = g.has_mask ? g.mask_len : g.total_len;
  float* dscores = f.dscores ? f.dscores + (b * g.q_heads + h) * g.q_len * score_cols : nullptr;
  if (dscores) std::fill(dscores, dscores + g.q_len * score_cols, 0.f);  // tiles skipped under is_causal
  float* s = w.s.data();
  float* dp = w.dp.data();
  float* delta = w.delta.data();
  for (int64_t i = 0; i < g.q_len; ++i) {
    delta[i] = Dot(dy_rows + i * g.y.pos, y + i * g.y.pos, dv);
    std::fill(dqp + i * ldq, dqp + i * ldq + d, 0.f);
  }
  for (int64_t i0 = 0; i0 < g.q_len; i0 += kQueryTile) {
    const int64_t rows = std::min(kQueryTile, g.q_len - i0);
    const int64_t end = VisibleKeys(g, i0 + rows);
    for (int64_t j0 = 0; j0 < end; j0 += kKeyTile) {
      const int64_t cols = std::min(kKeyTile, end - j0);
      const float* p = s;  // the probabilities of the tile, leading dimension ldp
      int64_t ldp = cols;
      if (f.probs) {
        p = f.probs + ((b * g.q_heads + h) * g.q_len + i0) * g.total_len + j0;
        ldp = g.total_len;
      } else {
        w.Product(false, true, rows, cols, d, g.scale, q.p + i0 * q.ld, q.ld, k.p + j0 * k.ld, k.ld, 0.f, s, cols);
        AddBias(g, op, b, h, i0, rows, j0, cols, s, cols);
        for (int64_t r = 0; r < rows; ++r) ExpShift(s + r * cols, cols, lse[i0 + r]);
      }
      w.Product(true, false, cols, dv, rows, 1.f, p, ldp, dy.p + i0 * dy.ld, dy.ld, 1.f, dvp + j0 * ldv, ldv);
      w.Product(false, true, rows, cols, dv, 1.f, dy.p + i0 * dy.ld, dy.ld, v.p + j0 * v.ld, v.ld, 0.f, dp, cols);
      for (int64_t r = 0; r < rows; ++r) {
        const float dl = delta[i0 + r];
        const float* pr = p + r * ldp;
        float* dr = dp + r * cols;
        SoftmaxGradRow(pr, dr, cols, dl);
        if (dscores && j0 < score_cols)
          std::memcpy(dscores + (i0 + r) * score_cols + j0, dr,
                      sizeof(float) * static_cast<size_t>(std::min(cols, score_cols - j0)));
      }
      w.Product(false, false, rows, d, cols, g.scale, dp, cols, k.p + j0 * k.ld, k.ld, 1.f, dqp + i0 * ldq, ldq);
      w.Product(true, false, cols, d, rows, g.scale, dp, cols, q.p + i0 * q.ld, q.ld, 1.f, dkp + j0 * ldk, ldk);
    }
  }
  if (dqp != dq_out) UnpackRows(dqp, g.q_len, d, dq_out, g.q.pos, false);
  if (dkp != f.dk_bh) UnpackRows(dkp, g.kv_len, d, f.dk_bh, g.k.pos, true);
  if (dvp != f.dv_bh) UnpackRows(dvp, g.kv_len, dv, f.dv_bh, g.v.pos, true);
}

// Copies a [batch, heads, length, size] view (3D or 4D input) into rows [offset, offset +
// length) of a 4D cache [batch, heads, total, size].
void CopyIntoCache(const float* src, const HeadStrides& st, int64_t batch, int64_t heads, int64_t length,
                   int64_t size, int64_t total, int64_t offset, float* cache) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < length; ++t)
        std::memcpy(cache + ((b * heads + h) * total + offset + t) * size, src + b * st.batch + h * st.head + t * st.pos,
                    sizeof(float) * static_cast<size_t>(size));
}

AttentionGeometry Plan(const Node& node, const KernelContext& ctx, bool grad) {
  // Attention: Q K V [mask] [past_key] [past_value] [nonpad]; AttentionGrad: dY Q K V [mask] [nonpad].
  const int first = grad ? 1 : 0;
  const Tensor* mask = ctx.OptionalInput(first + 3);
  if (grad) return PlanAttention(node, ctx.Input(1), ctx.Input(2), ctx.Input(3), mask, nullptr, nullptr, ctx.OptionalInput(5));
  return PlanAttention(node, ctx.Input(0), ctx.Input(1), ctx.Input(2), mask, ctx.OptionalInput(4),
                       ctx.OptionalInput(5), ctx.OptionalInput(6));
}

// Attribute bf16_products = 1 (org.onnxtrain Attention and AttentionGrad, set by --amp bf16 on
// the CPU: graph/passes/amp_pass.h UseBFloat16Attention): the flash path's products in
// bfloat16 with float32 sums (bf16_gemm.h) where the CPU has avx512_bf16, float32 elsewhere.
// Inputs, outputs, the softmax statistics and the kept probabilities stay float32.
bool BFloat16Products(const Node& node) { return node.GetInt("bf16_products", 0) != 0 && HasBFloat16Gemm(); }

class AttentionKernel final : public OpKernel {
 public:
  explicit AttentionKernel(const KernelInfo& info) : OpKernel(info), bf16_(BFloat16Products(node_)) {}

  void Prepare(KernelContext& ctx) override {
    g_ = Plan(node_, ctx, false);
    ctx.SetOutput(0, DType::kFloat32, g_.y_shape);
    ctx.SetOutput(1, DType::kFloat32, g_.present_k_shape);
    ctx.SetOutput(2, DType::kFloat32, g_.present_v_shape);
    ctx.SetOutput(3, DType::kFloat32, g_.scores_shape);
    // org.onnxtrain Attention's output 4: the row logsumexp for AttentionGrad's flash path.
    if (ctx.HasOutput(4) && !Flash(ctx))
      Fail("the logsumexp output needs the flash path (no softcap, no qk_matmul_output, keys)");
    ctx.SetOutput(4, DType::kFloat32, {g_.batch, g_.q_heads, g_.q_len});
    // Output 5: the probabilities where the flash path keeps them, else empty.
    keep_probs_ = ctx.HasOutput(5) && ctx.HasOutput(4) && KeepsProbabilities(g_);
    ctx.SetOutput(5, DType::kFloat32, keep_probs_ ? Shape{g_.batch, g_.q_heads, g_.q_len, g_.total_len} : Shape{0});
  }

  bool Flash(const KernelContext& ctx) const { return g_.softcap == 0 && !ctx.HasOutput(3) && g_.total_len > 0; }

  void Compute(KernelContext& ctx) override {
    AttentionOperands op;
    op.q = ctx.Input(0).data<float>();
    op.k = ctx.Input(1).data<float>();
    op.v = ctx.Input(2).data<float>();
    op.ks = g_.k;
    op.vs = g_.v;
    if (const Tensor* m = ctx.OptionalInput(3)) op.mask = m->data<void>();
    if (const Tensor* n = ctx.OptionalInput(6)) op.nonpad = n->data<int64_t>();
    // The present caches: past then new positions, 4D. Computed into the outputs when
    // requested; with a past, the kernel reads K and V from them (a scratch copy if not).
    std::vector<float> k_scratch, v_scratch;
    const Tensor* past_k = ctx.OptionalInput(4);
    const Tensor* past_v = ctx.OptionalInput(5);
    auto cache = [&](int out, const Tensor* past, const float* src, const HeadStrides& st, int64_t size,
                     std::vector<float>* scratch, const float** read, HeadStrides* read_strides) {
      const bool wanted = ctx.HasOutput(out);
      if (!wanted && !past) return;
      float* dst = nullptr;
      const int64_t n = g_.batch * g_.kv_heads * g_.total_len * size;
      if (wanted) dst = ctx.Output(out).data<float>();
      else {
        scratch->resize(static_cast<size_t>(n));
        dst = scratch->data();
      }
      if (past) {
        const HeadStrides ps = {g_.kv_heads * g_.past_len * size, g_.past_len * size, size};
        CopyIntoCache(past->data<float>(), ps, g_.batch, g_.kv_heads, g_.past_len, size, g_.total_len, 0, dst);
      }
      CopyIntoCache(src, st, g_.batch, g_.kv_heads, g_.kv_len, size, g_.total_len, g_.past_len, dst);
      if (past) {
        *read = dst;
        *read_strides = {g_.kv_heads * g_.total_len * size, g_.total_len * size, size};
      }
    };
    cache(1, past_k, op.k, g_.k, g_.head_size, &k_scratch, &op.k, &op.ks);
    cache(2, past_v, op.v, g_.v, g_.v_head_size, &v_scratch, &op.v, &op.vs);
    float* y = ctx.Output(0).data<float>();
    float* scores_out = ctx.HasOutput(3) ? ctx.Output(3).data<float>() : nullptr;
    const AttentionGeometry& g = g_;
    const int64_t block = g.q_len * g.total_len;
    const int64_t tasks = g.batch * g.q_heads;
    if (Flash(ctx)) {
      std::vector<float> lse_scratch;
      float* lse = nullptr;
      if (ctx.HasOutput(4)) {
        lse = ctx.Output(4).data<float>();
      } else {
        lse_scratch.resize(static_cast<size_t>(tasks * g.q_len));
        lse = lse_scratch.data();
      }
      float* probs = keep_probs_ ? ctx.Output(5).data<float>() : nullptr;
#pragma omp parallel
      {
        FlashScratch w(g, false, bf16_);
#pragma omp for schedule(static)
        for (int64_t task = 0; task < tasks; ++task)
          FlashForward(g, op, task / g.q_heads, task % g.q_heads, y, lse + task * g.q_len,
                       keep_probs_ ? probs + task * block : nullptr, w);
      }
      return;
    }
#pragma omp parallel
    {
      std::vector<float> s(static_cast<size_t>(block));
#pragma omp for schedule(static)
      for (int64_t task = 0; task < tasks; ++task) {
        const int64_t b = task / g.q_heads, h = task % g.q_heads, kvh = h / g.GroupSize();
        float* record = scores_out ? scores_out + task * block : nullptr;
        Scores(g, op, b, h, s.data(), record);
        SoftmaxRows(s.data(), g.q_len, g.total_len);
        if (record && g.qk_output_mode == 3) std::memcpy(record, s.data(), sizeof(float) * static_cast<size_t>(block));
        Gemm(false, false, g.q_len, g.v_head_size, g.total_len, 1.f, s.data(), g.total_len,
             op.v + b * op.vs.batch + kvh * op.vs.head, op.vs.pos, 0.f, y + b * g.y.batch + h * g.y.head, g.y.pos);
      }
    }
  }

 private:
  AttentionGeometry g_;
  bool keep_probs_ = false;
  bool bf16_ = false;
};

class AttentionGradKernel final : public OpKernel {
 public:
  explicit AttentionGradKernel(const KernelInfo& info) : OpKernel(info), bf16_(BFloat16Products(node_)) {}

  void Prepare(KernelContext& ctx) override {
    g_ = Plan(node_, ctx, true);
    const Tensor& dy = ctx.Input(0);
    if (dy.dtype() != DType::kFloat32 || dy.shape() != g_.y_shape)
      Fail("dY " + dy.Describe() + " must be float " + ShapeString(g_.y_shape) + ", the shape of Attention's Y");
    for (int i = 0; i < 3; ++i) ctx.SetOutput(i, DType::kFloat32, ctx.Input(i + 1).shape());
    // dScores covers the mask's columns only (those past a shorter mask are masked out).
    ctx.SetOutput(3, DType::kFloat32, {g_.batch, g_.q_heads, g_.q_len, g_.has_mask ? g_.mask_len : g_.total_len});
  }

  void Compute(KernelContext& ctx) override {
    const AttentionGeometry& g = g_;
    AttentionOperands op;
    const float* dy = ctx.Input(0).data<float>();
    op.q = ctx.Input(1).data<float>();
    op.k = ctx.Input(2).data<float>();
    op.v = ctx.Input(3).data<float>();
    op.ks = g.k;
    op.vs = g.v;
    if (const Tensor* m = ctx.OptionalInput(4)) op.mask = m->data<void>();
    if (const Tensor* n = ctx.OptionalInput(5)) op.nonpad = n->data<int64_t>();
    // Every output is computed (dK and dV are sums over the group's query heads); the
    // ones not requested go to scratch.
    std::vector<float> scratch[3];
    float* out[3];
    for (int i = 0; i < 3; ++i) {
      if (ctx.HasOutput(i)) {
        out[i] = ctx.Output(i).data<float>();
      } else {
        scratch[i].resize(static_cast<size_t>(NumElements(ctx.Input(i + 1).shape())));
        out[i] = scratch[i].data();
      }
    }
    float* dq = out[0];
    float* dk = out[1];
    float* dv = out[2];
    float* dscores = ctx.HasOutput(3) ? ctx.Output(3).data<float>() : nullptr;
    const int64_t block = g.q_len * g.total_len;
    const int64_t tasks = g.batch * g.kv_heads;
    const Tensor* y = ctx.OptionalInput(6);
    const Tensor* lse = ctx.OptionalInput(7);
    if (y && lse && g.softcap == 0 && g.total_len > 0) {
      if (y->shape() != g.y_shape || lse->shape() != Shape{g.batch, g.q_heads, g.q_len})
        Fail("Y " + y->Describe() + " and logsumexp " + lse->Describe() + " must be Attention's outputs 0 and 4");
      // Input 8, the forward's probabilities (output 5): empty where the forward kept none.
      const Tensor* kept = ctx.OptionalInput(8);
      const float* probs = nullptr;
      if (kept && kept->numel() > 0) {
        if (kept->shape() != Shape{g.batch, g.q_heads, g.q_len, g.total_len} || !KeepsProbabilities(g))
          Fail("probabilities " + kept->Describe() + " must be Attention's output 5");
        probs = kept->data<float>();
      }
#pragma omp parallel
      {
        FlashScratch w(g, true, bf16_);
#pragma omp for schedule(static)
        for (int64_t task = 0; task < tasks; ++task) {
          const int64_t b = task / g.kv_heads, kvh = task % g.kv_heads;
          FlashGradient f{dy, y->data<float>(), lse->data<float>(), dq, dk + b * g.k.batch + kvh * g.k.head,
                          dv + b * g.v.batch + kvh * g.v.head, dscores, probs};
          for (int64_t t = 0; t < g.kv_len; ++t) {
            std::fill(f.dk_bh + t * g.k.pos, f.dk_bh + t * g.k.pos + g.head_size, 0.f);
            std::fill(f.dv_bh + t * g.v.pos, f.dv_bh + t * g.v.pos + g.v_head_size, 0.f);
          }
          for (int64_t h = kvh * g.GroupSize(); h < (kvh + 1) * g.GroupSize(); ++h) FlashBackward(g, op, b, h, f, w);
        }
      }
      return;
    }
#pragma omp parallel
    {
      std::vector<float> p(static_cast<size_t>(block)), dp(static_cast<size_t>(block));
      std::vector<float> capped(g.softcap > 0 ? static_cast<size_t>(block) : 0);  // for the softcap's derivative
#pragma omp for schedule(static)
      for (int64_t task = 0; task < tasks; ++task) {
        const int64_t b = task / g.kv_heads, kvh = task % g.kv_heads;
        float* dk_bh = dk + b * g.k.batch + kvh * g.k.head;
        float* dv_bh = dv + b * g.v.batch + kvh * g.v.head;
        const float* k_bh = op.k + b * g.k.batch + kvh * g.k.head;
        const float* v_bh = op.v + b * g.v.batch + kvh * g.v.head;
        for (int64_t t = 0; t < g.kv_len; ++t) {
          std::fill(dk_bh + t * g.k.pos, dk_bh + t * g.k.pos + g.head_size, 0.f);
          std::fill(dv_bh + t * g.v.pos, dv_bh + t * g.v.pos + g.v_head_size, 0.f);
        }
        for (int64_t h = kvh * g.GroupSize(); h < (kvh + 1) * g.GroupSize(); ++h) {
          const float* q_bh = op.q + b * g.q.batch + h * g.q.head;
          const float* dy_bh = dy + b * g.y.batch + h * g.y.head;
          Scores(g, op, b, h, p.data(), nullptr);
          if (g.softcap > 0) std::copy(p.begin(), p.end(), capped.begin());
          SoftmaxRows(p.data(), g.q_len, g.total_len);
          Gemm(true, false, g.total_len, g.v_head_size, g.q_len, 1.f, p.data(), g.total_len, dy_bh, g.y.pos, 1.f, dv_bh,
               g.v.pos);
          Gemm(false, true, g.q_len, g.total_len, g.v_head_size, 1.f, dy_bh, g.y.pos, v_bh, g.v.pos, 0.f, dp.data(),
               g.total_len);
          for (int64_t i = 0; i < g.q_len; ++i) {
            const float* pr = p.data() + i * g.total_len;
            float* dr = dp.data() + i * g.total_len;
            double dot = 0;
            for (int64_t j = 0; j < g.total_len; ++j) dot += static_cast<double>(pr[j]) * dr[j];
            const float d = static_cast<float>(dot);
            for (int64_t j = 0; j < g.total_len; ++j) dr[j] = SoftmaxInputGrad(pr[j], dr[j], d);
            if (g.softcap > 0) {  // d(c tanh(s / c))/ds = 1 - (capped / c)^2
              const float inv = 1.f / g.softcap;
              const float* cr = capped.data() + i * g.total_len;
              for (int64_t j = 0; j < g.total_len; ++j) dr[j] *= SoftcapDerivative(cr[j], inv);
            }
          }
          if (dscores) {
            const int64_t cols = g.has_mask ? g.mask_len : g.total_len;
            for (int64_t i = 0; i < g.q_len; ++i)
              std::memcpy(dscores + ((b * g.q_heads + h) * g.q_len + i) * cols, dp.data() + i * g.total_len,
                          sizeof(float) * static_cast<size_t>(cols));
          }
          Gemm(false, false, g.q_len, g.head_size, g.total_len, g.scale, dp.data(), g.total_len, k_bh, g.k.pos, 0.f,
               dq + b * g.q.batch + h * g.q.head, g.q.pos);
          Gemm(true, false, g.total_len, g.head_size, g.q_len, g.scale, dp.data(), g.total_len, q_bh, g.q.pos, 1.f, dk_bh,
               g.k.pos);
        }
      }
    }
  }

 private:
  AttentionGeometry g_;
  bool bf16_ = false;
};
OT_REGISTER_CPU_KERNEL("Attention", 23, kLatestOpset, AttentionKernel);
OT_REGISTER_KERNEL(kGradDomain, "Attention", 1, kLatestOpset, DeviceType::kCPU, AttentionKernel);  // graph/passes/fusion.h
OT_REGISTER_KERNEL(kGradDomain, "AttentionGrad", 1, kLatestOpset, DeviceType::kCPU, AttentionGradKernel);

}  // namespace
}  // namespace cpu
}  // namespace ot
