// Mixup and CutMix.
#include "train/recipe/mix_batch.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "graph/error.h"
#include "train/readers/data_random.h"

namespace ot {

namespace {

// Uniform in (0, 1): 53 random bits, never 0.
double Uniform01(std::mt19937_64& rng) { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; }

double StandardNormal(std::mt19937_64& rng) {  // Box-Muller, one of the pair
  const double u1 = Uniform01(rng), u2 = Uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// Gamma(shape, 1) by Marsaglia and Tsang; shape < 1 through Gamma(shape + 1) * U^(1/shape).
double SampleGamma(double shape, std::mt19937_64& rng) {
  if (shape < 1.0) return SampleGamma(shape + 1.0, rng) * std::pow(Uniform01(rng), 1.0 / shape);
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = StandardNormal(rng);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = Uniform01(rng);
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

double Beta(double a, double b, std::mt19937_64& rng) {
  const double x = SampleGamma(a, rng), y = SampleGamma(b, rng);
  return x + y > 0 ? x / (x + y) : 0.5;
}

}  // namespace

MixDraw DrawMix(const MixOptions& o, int64_t height, int64_t width, int64_t epoch, int64_t batch_index) {
  OT_CHECK(o.mixup_alpha >= 0 && o.cutmix_alpha >= 0, "mixup and cutmix alphas must not be negative");
  std::mt19937_64 rng(StreamSeed(MixBits(o.seed ^ 0x6d69787570ull), static_cast<uint64_t>(epoch),
                                 static_cast<uint64_t>(batch_index)));
  MixDraw d;
  if (!o.Enabled()) return d;
  d.cutmix = o.mixup_alpha > 0 && o.cutmix_alpha > 0 ? UniformBelow(rng, 2) == 1 : o.cutmix_alpha > 0;
  const double alpha = d.cutmix ? o.cutmix_alpha : o.mixup_alpha;
  d.lambda = Beta(alpha, alpha, rng);
  if (d.cutmix) {
    const int64_t rx = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(width)));
    const int64_t ry = static_cast<int64_t>(UniformBelow(rng, static_cast<uint64_t>(height)));
    const double r = 0.5 * std::sqrt(1.0 - d.lambda);
    const int64_t w_half = static_cast<int64_t>(r * static_cast<double>(width));
    const int64_t h_half = static_cast<int64_t>(r * static_cast<double>(height));
    d.x1 = std::max<int64_t>(rx - w_half, 0);
    d.y1 = std::max<int64_t>(ry - h_half, 0);
    d.x2 = std::min<int64_t>(rx + w_half, width);
    d.y2 = std::min<int64_t>(ry + h_half, height);
    d.lambda = 1.0 - static_cast<double>((d.x2 - d.x1) * (d.y2 - d.y1)) / static_cast<double>(width * height);
  }
  return d;
}

HostTensor MixBatch(HostTensor& images, const HostTensor& labels, const MixDraw& draw) {
  OT_CHECK(images.dims.size() == 4 && images.dtype == DType::kFloat32,
           "mixup and cutmix need a float image batch [n, C, H, W], got %s %s; leave out --mixup-alpha and "
           "--cutmix-alpha for this data",
           DTypeName(images.dtype).c_str(), ShapeString(images.dims).c_str());
  OT_CHECK(labels.dtype == DType::kInt64 && labels.dims.size() == 1 && labels.dims[0] == images.dims[0],
           "mixup and cutmix need one class index per image");
  const int64_t n = images.dims[0], c = images.dims[1], h = images.dims[2], w = images.dims[3], size = c * h * w;
  HostTensor rolled_labels = labels;
  for (int64_t i = 0; i < n; ++i) rolled_labels.Data<int64_t>()[i] = labels.Data<int64_t>()[(i + n - 1) % n];
  const std::vector<float> original(images.Data<float>(), images.Data<float>() + n * size);
  float* x = images.Data<float>();
  const float lam = static_cast<float>(draw.lambda), rest = static_cast<float>(1.0 - draw.lambda);
  for (int64_t i = 0; i < n; ++i) {
    const float* other = original.data() + ((i + n - 1) % n) * size;
    float* mine = x + i * size;
    if (!draw.cutmix) {
      for (int64_t k = 0; k < size; ++k) mine[k] = mine[k] * lam + other[k] * rest;  // torch's order of operations
      continue;
    }
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = draw.y1; y < draw.y2; ++y)
        for (int64_t xx = draw.x1; xx < draw.x2; ++xx) mine[(ch * h + y) * w + xx] = other[(ch * h + y) * w + xx];
  }
  return rolled_labels;
}

std::string MixDrawJson(const MixDraw& d) {
  return StrFormat(",\"mix\":\"%s\",\"mix_lambda\":%.17g,\"mix_box\":[%lld,%lld,%lld,%lld]", d.cutmix ? "cutmix" : "mixup",
                   d.lambda, (long long)d.y1, (long long)d.y2, (long long)d.x1, (long long)d.x2);
}

}  // namespace ot
