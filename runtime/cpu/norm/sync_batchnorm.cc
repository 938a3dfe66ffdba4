// Synchronised batch normalization: see sync_batchnorm.h.
#include "runtime/cpu/norm/sync_batchnorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "graph/error.h"
#include "runtime/cpu/norm/channel_statistics.h"
#include "runtime/ops/math/sync_bn_math.h"

namespace ot {
namespace cpu {
namespace {

void SumOverReplicas(CrossReplicaSum* replicas, std::vector<double>& values) {
  if (replicas && replicas->replicas() > 1) replicas->SumInPlace(values.data(), values.size());
}

}  // namespace

void GlobalChannelStatistics(const dnnl::memory::desc& md, const float* x, CrossReplicaSum* replicas, float* mean,
                             float* var) {
  const size_t c = static_cast<size_t>(md.dims()[1]);
  // Pass 1: [sum of x per channel..., element count].
  std::vector<double> first(c + 1, 0.0);
  ChannelSums(md, x, nullptr, first.data(), nullptr);
  first[c] = static_cast<double>(ChannelCount(md));
  SumOverReplicas(replicas, first);
  const double count = first[c];
  OT_CHECK(count > 0, "synchronised batch normalization: the global batch is empty");
  std::vector<double> center(c);
  for (size_t i = 0; i < c; ++i) center[i] = first[i] / count;
  // Pass 2: [sum of (x - centre)..., sum of (x - centre)^2...]; the first corrects the
  // centre's own rounding (as ChannelStatistics does).
  std::vector<double> second(2 * c, 0.0);
  ChannelSums(md, x, center.data(), second.data(), second.data() + c);
  SumOverReplicas(replicas, second);
  for (size_t i = 0; i < c; ++i) MeanVarFromCenteredSums(center[i], second[i], second[c + i], count, &mean[i], &var[i]);
}

void GlobalBatchNormGrad(const dnnl::memory::desc& md, const float* dy, const float* x, const float* scale,
                         const float* mean, const float* var, float epsilon, CrossReplicaSum* replicas, float* dx,
                         float* dscale, float* dbias) {
  const size_t c = static_cast<size_t>(md.dims()[1]);
  std::vector<double> m(mean, mean + c), invstd(c);
  for (size_t i = 0; i < c; ++i) invstd[i] = 1.0 / std::sqrt(static_cast<double>(var[i]) + epsilon);
  // [sum of dy..., sum of dy * (x - mean)..., element count]
  std::vector<double> sums(2 * c + 1, 0.0);
  ChannelGradientSums(md, dy, x, m.data(), sums.data(), sums.data() + c);
  sums[2 * c] = static_cast<double>(ChannelCount(md));
  // This replica's own parameter gradients, before the sums go global.
  for (size_t i = 0; i < c; ++i) {
    dbias[i] = static_cast<float>(sums[i]);
    dscale[i] = static_cast<float>(sums[c + i] * invstd[i]);
  }
  SumOverReplicas(replicas, sums);
  const double count = sums[2 * c];
  // dx = scale * invstd * (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy (x - mean)))
  std::vector<double> a(c), b(c), k(c);
  for (size_t i = 0; i < c; ++i) {
    const BatchNormGradCoefficients co = BatchNormGradCoefficientsFor(scale[i], invstd[i], sums[i], sums[c + i], count);
    a[i] = co.a;
    b[i] = co.b;
    k[i] = co.k;
  }
  ChannelAffineCombination(md, dy, x, m.data(), a.data(), b.data(), k.data(), dx);
}

}  // namespace cpu
}  // namespace ot
