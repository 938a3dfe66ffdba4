// Element-wise sums and scaling for the host collectives (see reduction.h).
#include "comm/reduction.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ot {
namespace {

template <typename T>
void SumPlain(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void SumSixteenBit(void* out, const void* a, const void* b, size_t n) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = FromFloat(ToFloat(x[i]) + ToFloat(y[i]));
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void ScaleSixteenBit(void* data, size_t n, float factor) {
  uint16_t* d = static_cast<uint16_t*>(data);
  for (size_t i = 0; i < n; ++i) d[i] = FromFloat(ToFloat(d[i]) * factor);
}

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0x1f) return BitsFloat(sign | 0x7f800000 | (mantissa << 13));  // inf, nan
  if (exponent == 0) {                                                           // subnormal
    float value = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -value : value;
  }
  return BitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t FloatToHalf(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const float magnitude = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (magnitude >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (magnitude < 6.103515625e-05f) {               // subnormal half: multiples of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(magnitude * 16777216.0f));
  }
  // Normal: round the 23-bit mantissa to 10 bits, nearest even.
  uint32_t bits = FloatBits(magnitude);
  bits += 0xfff + ((bits >> 13) & 1);
  return sign | static_cast<uint16_t>((bits >> 13) - (112u << 10));
}

float BFloat16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBFloat16(float f) {
  uint32_t u = FloatBits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

SumFunction SumFunctionFor(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return &SumPlain<float>;
    case DType::kFloat64: return &SumPlain<double>;
    case DType::kFloat16: return &SumSixteenBit<HalfToFloat, FloatToHalf>;
    case DType::kBFloat16: return &SumSixteenBit<BFloat16ToFloat, FloatToBFloat16>;
    default: return nullptr;
  }
}

void ScaleInPlace(void* data, size_t n, DType dtype, double factor) {
  switch (dtype) {
    case DType::kFloat32: {
      float* d = static_cast<float*>(data);
      const float f = static_cast<float>(factor);
      for (size_t i = 0; i < n; ++i) d[i] *= f;
      return;
    }
    case DType::kFloat64: {
      double* d = static_cast<double*>(data);
      for (size_t i = 0; i < n; ++i) d[i] *= factor;
      return;
    }
    case DType::kFloat16:
      return ScaleSixteenBit<HalfToFloat, FloatToHalf>(data, n, static_cast<float>(factor));
    case DType::kBFloat16:
      return ScaleSixteenBit<BFloat16ToFloat, FloatToBFloat16>(data, n,
                                                              static_cast<float>(factor));
    default: return;
  }
}

}  // namespace ot
