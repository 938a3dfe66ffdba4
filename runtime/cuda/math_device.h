// The per-element logic of our own CUDA math kernels as __host__ __device__ functions:
// broadcast and reduction indexing, unary math, Pow and Cast, one reduction output, one loss position and one loss
// gradient element, one optimizer update. The kernels in elementwise.cu, reduce.cu and
// loss_optimizer.cu call these; tests/cuda/cuda_math_test.cc calls the same functions on the
// host and compares them with the CPU runtime, so the logic is checked on machines
// without a GPU too.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "runtime/cuda/math_kernels.h"
#include "runtime/ops/math/integer_pow.h"

namespace ot::cuda::math {

// Blocks for a grid-stride loop over `work` items with `threads` per block (capped; the
// loop covers the rest).
inline unsigned GridBlocks(int64_t work, int threads) {
  const int64_t b = (work + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : b > (int64_t{1} << 20) ? (int64_t{1} << 20) : b);
}

// for (i = this thread's first index; i < n; i += all threads of the grid)
#define OT_GRID_LOOP(i, n)                                                                  \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// Offsets of the first N operands of `ix` for row-major output index i.
template <int N>
__host__ __device__ inline void BroadcastOffsets(const BroadcastIndexer& ix, int64_t i, int64_t (&off)[N]) {
  if (ix.rank <= 1) {
    for (int k = 0; k < N; ++k) off[k] = i * ix.strides[k][0];
    return;
  }
  for (int k = 0; k < N; ++k) off[k] = 0;
  int64_t rem = i;
  for (int d = ix.rank - 1; d >= 0; --d) {
    const int64_t q = rem / ix.dims[d];
    const int64_t idx = rem - q * ix.dims[d];
    rem = q;
    for (int k = 0; k < N; ++k) off[k] += idx * ix.strides[k][d];
  }
}

// Offset of row-major index i over `dims` with per-dimension `strides`.
__host__ __device__ inline int64_t DecomposeOffset(int64_t i, int rank, const int64_t* dims, const int64_t* strides) {
  int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t q = i / dims[d];
    off += (i - q * dims[d]) * strides[d];
    i = q;
  }
  return off;
}

// Records the first error value (0 means none); atomic on the device.
__host__ __device__ inline void SetErrorFlag(long long* flag, long long value) {
  if (!flag) return;
#ifdef __CUDA_ARCH__
  atomicCAS(reinterpret_cast<unsigned long long*>(flag), 0ULL, static_cast<unsigned long long>(value));
#else
  if (*flag == 0) *flag = value;
#endif
}

// ---------------------------------------------------------------------------------------
// Elementwise math. Float math calls the float C functions (expf, ...) so the host and
// the device compute the same thing.
#define OT_FLOAT_OR_DOUBLE(T, fn, v) \
  (std::is_same_v<T, float> ? fn##f(static_cast<float>(v)) : fn(static_cast<double>(v)))

template <typename T>
__host__ __device__ inline T UnaryValue(UnaryOp op, T v, float alpha) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case UnaryOp::kAbs: return v < T(0) ? -v : v;
      case UnaryOp::kNeg: return -v;
      case UnaryOp::kExp: return static_cast<T>(OT_FLOAT_OR_DOUBLE(T, exp, v));
      case UnaryOp::kLog: return static_cast<T>(OT_FLOAT_OR_DOUBLE(T, log, v));
      case UnaryOp::kSqrt: return static_cast<T>(OT_FLOAT_OR_DOUBLE(T, sqrt, v));
      case UnaryOp::kReciprocal: return T(1) / v;
      case UnaryOp::kCeil: return static_cast<T>(OT_FLOAT_OR_DOUBLE(T, ceil, v));
      case UnaryOp::kFloor: return static_cast<T>(OT_FLOAT_OR_DOUBLE(T, floor, v));
      case UnaryOp::kRound: return static_cast<T>(OT_FLOAT_OR_DOUBLE(T, rint, v));  // halves to even
      case UnaryOp::kLeakyRelu: return v > T(0) ? v : static_cast<T>(alpha) * v;
      case UnaryOp::kSoftplus: {  // log(1 + exp(v)) = max(v, 0) + log1p(exp(-|v|)), never overflowing
        const T m = v > T(0) ? v : T(0);
        const T e = static_cast<T>(OT_FLOAT_OR_DOUBLE(T, exp, v < T(0) ? v : -v));
        return static_cast<T>(m + OT_FLOAT_OR_DOUBLE(T, log1p, e));
      }
    }
    return v;
  } else {
    switch (op) {
      case UnaryOp::kAbs: return v < T(0) ? static_cast<T>(-v) : v;
      case UnaryOp::kNeg: return static_cast<T>(-v);
      default: return v;
    }
  }
}
#undef OT_FLOAT_OR_DOUBLE

// Pow as the CPU computes it: integers by squaring, float^float in float, else in double.
template <typename T, typename E>
__host__ __device__ inline T PowValue(T a, E b) {
  if constexpr (std::is_integral_v<T> && std::is_integral_v<E>)
    return IntegerPow(a, b);
  else if constexpr (std::is_same_v<T, float> && std::is_same_v<E, float>)
    return powf(a, b);
  else
    return static_cast<T>(pow(static_cast<double>(a), static_cast<double>(b)));
}

// Cast, with the CPU's rules: float -> integer saturates (NaN -> 0), bool is v != 0.
// bool travels as uint8 0/1; BoolTag keeps its rules apart from uint8's.
struct BoolTag {};
template <typename T>
struct CastElem {
  using Storage = T;
  __host__ __device__ static T Load(T v) { return v; }
  template <typename V>
  __host__ __device__ static T Store(V v, T lowest, T highest) {
    if constexpr (std::is_floating_point_v<V> && std::is_integral_v<T>) {
      if (v != v) return 0;
      if (v <= static_cast<V>(lowest)) return lowest;
      if (v >= static_cast<V>(highest)) return highest;
    }
    return static_cast<T>(v);
  }
};
template <>
struct CastElem<BoolTag> {
  using Storage = uint8_t;
  __host__ __device__ static uint8_t Load(uint8_t v) { return v != 0; }
  template <typename V>
  __host__ __device__ static uint8_t Store(V v, uint8_t, uint8_t) {
    return v != V(0);
  }
};
// float16 (--amp fp16's casts) travels as its bits in uint16; float -> float16 rounds to
// nearest even as the CPU's Cast and __float2half_rn do (65520 and above: infinity), written
// with integers so the host tests run the same code. A double input is rounded to float first.
struct HalfTag {};
__host__ __device__ inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  float f;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    f = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  const uint32_t bits = exponent == 0x1f ? (sign | 0x7f800000u | (mantissa << 13))
                                         : (sign | ((exponent + 112u) << 23) | (mantissa << 13));
  memcpy(&f, &bits, sizeof f);
  return f;
}
__host__ __device__ inline uint16_t FloatToHalfBits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and above (and infinity)
  if (a < 0x38800000u) {                        // below 2^-14: a float16 subnormal or zero
    if (a <= 0x33000000u) return sign;          // at most 2^-25: rounds to 0 (the tie to even)
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - (a >> 23);     // 14 .. 24: units of 2^-24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = (a >> 13) - (112u << 10);  // exponent rebased, the top 10 mantissa bits
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return static_cast<uint16_t>(sign | h);
}
template <>
struct CastElem<HalfTag> {
  using Storage = uint16_t;
  __host__ __device__ static float Load(uint16_t v) { return HalfBitsToFloat(v); }
  template <typename V>
  __host__ __device__ static uint16_t Store(V v, uint16_t, uint16_t) {
    return FloatToHalfBits(static_cast<float>(v));
  }
};
// Converts one stored S to a stored D; lowest/highest are D's limits (unused for bool).
template <typename S, typename D>
__host__ __device__ inline typename CastElem<D>::Storage CastValue(typename CastElem<S>::Storage v,
                                                                   typename CastElem<D>::Storage lowest,
                                                                   typename CastElem<D>::Storage highest) {
  return CastElem<D>::Store(CastElem<S>::Load(v), lowest, highest);
}

// ---------------------------------------------------------------------------------------
// Reductions. Floating types accumulate in double, integers in their own type.
template <typename T>
using ReduceAcc = std::conditional_t<std::is_floating_point_v<T>, double, T>;

template <typename Acc>
struct ReduceCombine {
  ReduceOp op;
  __host__ __device__ Acc operator()(Acc a, Acc v) const {
    switch (op) {
      case ReduceOp::kProd: return static_cast<Acc>(a * v);
      case ReduceOp::kMax: case ReduceOp::kLogSumExp: return a < v ? v : a;
      case ReduceOp::kMin: return v < a ? v : a;
      default: return static_cast<Acc>(a + v);
    }
  }
};

// Identities the host computes (numeric_limits is host-only).
template <typename Acc>
struct ReduceIdentities {
  Acc zero, one, lowest, highest;
};
// Infinities for floating types, the type's limits for integers.
template <typename T>
ReduceIdentities<ReduceAcc<T>> MakeReduceIdentities() {
  using Acc = ReduceAcc<T>;
  using Limits = std::numeric_limits<Acc>;
  return {Acc(0), Acc(1), Limits::has_infinity ? -Limits::infinity() : Limits::lowest(),
          Limits::has_infinity ? Limits::infinity() : Limits::max()};
}

// The identity of the first pass (LogSumExp's first pass takes the maximum).
template <typename Acc>
__host__ __device__ inline Acc ReduceFirstIdentity(ReduceOp op, const ReduceIdentities<Acc>& id) {
  switch (op) {
    case ReduceOp::kProd: return id.one;
    case ReduceOp::kMax: case ReduceOp::kLogSumExp: return id.lowest;
    case ReduceOp::kMin: return id.highest;
    default: return id.zero;
  }
}

// What one element adds in the first pass.
template <typename Acc>
__host__ __device__ inline Acc ReduceContribution(ReduceOp op, Acc v) {
  switch (op) {
    case ReduceOp::kL1: return v < Acc(0) ? static_cast<Acc>(-v) : v;
    case ReduceOp::kL2: case ReduceOp::kSumSquare: return static_cast<Acc>(v * v);
    default: return v;
  }
}

// exp(v - shift) for LogSumExp's second pass.
template <typename Acc>
__host__ __device__ inline Acc ReduceShiftedExp(Acc v, Acc shift) {
  if constexpr (std::is_floating_point_v<Acc>) return exp(v - shift);
  return v;
}

template <typename Acc>
__host__ __device__ inline Acc ReduceLogPlus(Acc sum, Acc shift) {
  if constexpr (std::is_floating_point_v<Acc>) return log(sum) + shift;
  return sum;
}

// The final value from the accumulated one (mean, square root, log).
template <typename Acc>
__host__ __device__ inline Acc ReduceFinish(ReduceOp op, Acc v, int64_t count) {
  switch (op) {
    case ReduceOp::kMean: return static_cast<Acc>(v / static_cast<Acc>(count));
    case ReduceOp::kL2:
      if constexpr (std::is_floating_point_v<Acc>) return sqrt(v);
      return v;
    case ReduceOp::kLogSum:
      if constexpr (std::is_floating_point_v<Acc>) return log(v);
      return v;
    default: return v;
  }
}

// Output o of a reduction, computed by one thread.
template <typename T>
__host__ __device__ inline T ReduceOutput(ReduceOp op, const T* x, int64_t o, int64_t count, const ReduceIndexer& ix,
                                          const ReduceIdentities<ReduceAcc<T>>& id) {
  using Acc = ReduceAcc<T>;
  const T* base = x + DecomposeOffset(o, ix.kept_rank, ix.kept_dims, ix.kept_strides);
  const ReduceCombine<Acc> combine{op};
  Acc acc = ReduceFirstIdentity(op, id);
  for (int64_t r = 0; r < count; ++r) {
    const Acc v = static_cast<Acc>(base[DecomposeOffset(r, ix.reduced_rank, ix.reduced_dims, ix.reduced_strides)]);
    acc = combine(acc, ReduceContribution(op, v));
  }
  if (op == ReduceOp::kLogSumExp) {
    Acc sum = id.zero;
    for (int64_t r = 0; r < count; ++r) {
      const Acc v = static_cast<Acc>(base[DecomposeOffset(r, ix.reduced_rank, ix.reduced_dims, ix.reduced_strides)]);
      sum = static_cast<Acc>(sum + ReduceShiftedExp(v, acc));
    }
    acc = ReduceLogPlus(sum, acc);
  }
  return static_cast<T>(ReduceFinish(op, acc, count));
}

// ---------------------------------------------------------------------------------------
// Classification losses on scores [N, C, D].

// Whether the label at `pos` counts: not ignore_index and inside [0, C). An out-of-range
// one raises the flag with 1 + its position.
template <typename Label>
__host__ __device__ inline bool LossLabelCounts(const LossParams& p, const Label* labels, int64_t pos, int64_t* label,
                                                long long* flag) {
  const int64_t l = static_cast<int64_t>(labels[pos]);
  *label = l;
  if (p.has_ignore_index && l == p.ignore_index) return false;
  if (l < 0 || l >= p.c) {
    SetErrorFlag(flag, 1 + pos);
    return false;
  }
  return true;
}

// Position pos = n * D + d: writes log_prob (softmax, when given) and returns the
// element's loss and weight (both 0 when the label does not count).
template <typename T, typename Label>
__host__ __device__ inline void LossAtPosition(const LossParams& p, const T* x, const Label* labels, const T* weight,
                                               T* log_prob, int64_t pos, double* element_loss, double* element_weight,
                                               long long* flag) {
  const int64_t n = pos / p.d, d = pos - n * p.d;
  const T* x_nd = x + n * p.c * p.d + d;  // class c at x_nd[c * D]
  const int64_t raw = static_cast<int64_t>(labels[pos]);
  const bool ignored = p.has_ignore_index && raw == p.ignore_index;
  double log_sum_exp = 0;
  if (p.softmax && (!ignored || log_prob)) {
    double max_value = -INFINITY;
    for (int64_t c = 0; c < p.c; ++c) {
      const double v = static_cast<double>(x_nd[c * p.d]);
      max_value = max_value < v ? v : max_value;
    }
    if (max_value == INFINITY || max_value == -INFINITY) {
      log_sum_exp = max_value;
    } else {
      double sum = 0;
      for (int64_t c = 0; c < p.c; ++c) sum += exp(static_cast<double>(x_nd[c * p.d]) - max_value);
      log_sum_exp = max_value + log(sum);
    }
    if (log_prob) {
      T* out = log_prob + n * p.c * p.d + d;
      for (int64_t c = 0; c < p.c; ++c) out[c * p.d] = static_cast<T>(x_nd[c * p.d] - log_sum_exp);
    }
  }
  *element_loss = 0;
  *element_weight = 0;
  int64_t label = 0;
  if (LossLabelCounts(p, labels, pos, &label, flag)) {
    const double w = weight ? static_cast<double>(weight[label]) : 1.0;
    *element_loss = -w * (static_cast<double>(x_nd[label * p.d]) - log_sum_exp);
    *element_weight = w;
  }
}

// The weight of position pos in the mean's denominator (0 when its label does not count).
template <typename Label>
__host__ __device__ inline double LossWeightAt(const LossParams& p, const Label* labels, const float* weight,
                                               int64_t pos, long long* flag) {
  int64_t label = 0;
  if (!LossLabelCounts(p, labels, pos, &label, flag)) return 0;
  return weight ? static_cast<double>(weight[label]) : 1.0;
}

// Element i of dScores: softmax (log_prob given) or NLL; weight_sum is the mean's
// denominator.
template <typename Label>
__host__ __device__ inline float LossGradAt(const LossParams& p, const float* dy, const float* log_prob,
                                            const Label* labels, const float* weight, double weight_sum, int64_t i) {
  const int64_t d = i % p.d;
  const int64_t k = (i / p.d) % p.c;
  const int64_t n = i / (p.c * p.d);
  const int64_t pos = n * p.d + d;
  const int64_t label = static_cast<int64_t>(labels[pos]);
  const bool counts = !(p.has_ignore_index && label == p.ignore_index) && label >= 0 && label < p.c;
  float scale = counts ? (weight ? weight[label] : 1.f) : 0.f;
  if (!p.reduce) {
    scale *= dy[pos];
  } else {
    float s = dy[0];
    if (p.mean) s = weight_sum == 0 ? 0.f : static_cast<float>(s / weight_sum);
    scale *= s;
  }
  if (log_prob) {
    const float onehot = label == k ? 1.f : 0.f;
    return scale == 0.f ? 0.f : (expf(log_prob[i]) - onehot) * scale;
  }
  return scale != 0.f && label == k ? -scale : 0.f;
}

// ---------------------------------------------------------------------------------------
// Optimizer updates of one element (unrequested outputs are null).
__host__ __device__ inline void MomentumUpdate(const MomentumParams& p, float r, int64_t t, float x, float g, float v,
                                               float* x_new, float* v_new) {
  const float beta = t > 0 ? p.beta : 1.f;
  const float gi = p.norm * x + g;
  const float vi = p.alpha * v + beta * gi;
  if (v_new) *v_new = vi;
  if (x_new) *x_new = p.nesterov ? x - r * (gi + p.alpha * vi) : x - r * vi;
}

__host__ __device__ inline float AdagradRate(const AdagradParams& p, float r, int64_t t) {
  return r / (1.f + static_cast<float>(t) * p.decay);
}

__host__ __device__ inline void AdagradUpdate(const AdagradParams& p, float rate, float x, float g, float h,
                                              float* x_new, float* h_new) {
  const float gi = p.norm * x + g;
  const float hi = h + gi * gi;
  if (h_new) *h_new = hi;
  if (x_new) *x_new = x - rate * gi / (sqrtf(hi) + p.epsilon);
}

// Adam's bias-corrected rate, in double as the CPU computes it.
__host__ __device__ inline float AdamRate(const AdamParams& p, float r, int64_t t) {
  if (t <= 0) return r;
  const double tt = static_cast<double>(t);
  return static_cast<float>(r * sqrt(1.0 - pow(static_cast<double>(p.beta), tt)) /
                            (1.0 - pow(static_cast<double>(p.alpha), tt)));
}

__host__ __device__ inline void AdamUpdate(const AdamParams& p, float rate, float x, float g, float v, float h,
                                           float* x_new, float* v_new, float* h_new) {
  const float gi = p.norm * x + g;
  const float vi = p.alpha * v + (1.f - p.alpha) * gi;
  const float hi = p.beta * h + (1.f - p.beta) * gi * gi;
  if (v_new) *v_new = vi;
  if (h_new) *h_new = hi;
  if (x_new) *x_new = (1.f - p.norm_post) * (x - rate * (vi / (sqrtf(hi) + p.epsilon)));
}

}  // namespace ot::cuda::math
