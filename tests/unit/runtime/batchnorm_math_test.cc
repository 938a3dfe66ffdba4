// runtime/ops/math/batchnorm_math.h, the statistics bookkeeping the CPU and CUDA BatchNorm
// kernels share: the batch variance taken from an unbiased one keeps its digits when it
// is far below epsilon (the CUDA kernel used to rebuild it as 1/inv_std^2 - eps in float,
// which gives noise there), a single value has variance 0, and the running update is
// ONNX's momentum formula.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/ops/math/batchnorm_math.h"

namespace ot {
namespace {

// Population and unbiased variance of `x`, in double.
void Variances(const std::vector<double>& x, double* population, double* unbiased) {
  double mean = 0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  double squares = 0;
  for (double v : x) squares += (v - mean) * (v - mean);
  *population = squares / static_cast<double>(x.size());
  *unbiased = squares / static_cast<double>(x.size() - 1);
}

TEST(BatchNormMath, VarianceFarBelowEpsilonKeepsItsDigits) {
  const float epsilon = 1e-5f;
  for (double spread : {1e-7, 1e-5, 1e-3, 1.0}) {
    std::vector<double> x;
    for (int i = 0; i < 64; ++i) x.push_back(1.0 + spread * ((i * 37) % 11 - 5));
    double population = 0, unbiased = 0;
    Variances(x, &population, &unbiased);
    const float got = PopulationVariance(static_cast<float>(unbiased), static_cast<double>(x.size()));
    EXPECT_NEAR(got, population, 1e-6 * population) << "spread " << spread;
    // What rebuilding it from cuDNN's 1/sqrt(var + eps) in float gives, for the record:
    // at variances of 1e-12 it is off by about the variance itself.
    const float inv_std = 1.f / std::sqrt(static_cast<float>(population) + epsilon);
    const float rebuilt = 1.f / (inv_std * inv_std) - epsilon;
    if (population < 1e-11) {
      EXPECT_GT(std::fabs(rebuilt - population), 0.5 * population) << "spread " << spread;
    }
  }
}

TEST(BatchNormMath, OneValuePerChannelHasNoVariance) {
  EXPECT_EQ(PopulationVariance(123.f, 1), 0.f);
  EXPECT_EQ(PopulationVariance(std::nanf(""), 1), 0.f);  // cuDNN's unbiased variance of one value
}

TEST(BatchNormMath, PopulationFromUnbiasedScalesByCount) {
  EXPECT_FLOAT_EQ(PopulationVariance(2.f, 2), 1.f);
  EXPECT_FLOAT_EQ(PopulationVariance(4.f, 4), 3.f);
}

TEST(BatchNormMath, RunningStatIsOnnxMomentum) {
  EXPECT_FLOAT_EQ(RunningStatistic(1.f, 3.f, 1.0, 0.9f), 1.f * 0.9f + 3.f * 0.1f);
  EXPECT_FLOAT_EQ(RunningStatistic(5.f, -1.f, 1.0, 0.f), -1.f);
  EXPECT_FLOAT_EQ(RunningStatistic(5.f, -1.f, 1.0, 1.f), 5.f);
}

}  // namespace
}  // namespace ot
