// Training-mode normalization statistics (runtime/cpu/norm/channel_statistics.h) against
// exact ones in double, in every layout a normalization sees on the CPU: plain nchw,
// channels-last, channel-blocked nChw8c / nChw16c (channels not a multiple of the block),
// 2-D and 5-D. The data sit on a large offset with a small spread, where float32
// accumulation (oneDNN's own statistics) loses digits: mean and variance must be the
// exact values rounded to float32, give or take an ulp. Then the same through the
// kernels: BatchNormalization after a Conv (which hands it a blocked layout) and
// InstanceNormalization.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/cpu/norm/channel_statistics.h"
#include "runtime/executor/executor.h"
#include "tests/common/test_util.h"

namespace ot {
namespace {

using Ints = std::vector<int64_t>;
using tag = dnnl::memory::format_tag;

// offset + spread * U(-1, 1), per channel a different offset.
std::vector<float> OffsetData(const Ints& shape, uint32_t seed, float offset, float spread) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  const int64_t channels = shape[1], inner = count / (shape[0] * channels);
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t c = (i / inner) % channels;
    v[static_cast<size_t>(i)] = offset * (1.f + 0.01f * static_cast<float>(c)) + spread * u(gen);
  }
  return v;
}

// Exact per-channel mean and population variance of plain N x C x ... data.
void ExactStatistics(const std::vector<float>& x, const Ints& shape, std::vector<double>& mean,
                     std::vector<double>& var) {
  const int64_t channels = shape[1], inner = static_cast<int64_t>(x.size()) / (shape[0] * channels);
  mean.assign(static_cast<size_t>(channels), 0.0);
  var.assign(static_cast<size_t>(channels), 0.0);
  const double count = static_cast<double>(shape[0] * inner);
  for (int64_t c = 0; c < channels; ++c) {
    long double sum = 0, sq = 0;
    for (int64_t n = 0; n < shape[0]; ++n)
      for (int64_t i = 0; i < inner; ++i) sum += x[static_cast<size_t>((n * channels + c) * inner + i)];
    const long double mu = sum / count;
    for (int64_t n = 0; n < shape[0]; ++n)
      for (int64_t i = 0; i < inner; ++i) {
        const long double d = x[static_cast<size_t>((n * channels + c) * inner + i)] - mu;
        sq += d * d;
      }
    mean[static_cast<size_t>(c)] = static_cast<double>(mu);
    var[static_cast<size_t>(c)] = static_cast<double>(sq / count);
  }
}

// |got - exact| within `ulps` float32 ulps of exact.
void ExpectWithinUlps(const std::vector<double>& exact, const float* got, double ulps, const std::string& what) {
  for (size_t c = 0; c < exact.size(); ++c) {
    const double ulp = std::ldexp(1.0, std::ilogb(exact[c]) - 23);
    EXPECT_LE(std::abs(got[c] - exact[c]), ulps * ulp)
        << what << " channel " << c << ": " << got[c] << " vs exact " << exact[c];
  }
}

struct LayoutCase {
  Ints shape;
  tag layout;
  const char* name;
};

TEST(ChannelStatistics, ExactToAnUlpInEveryLayout) {
  const std::vector<LayoutCase> cases = {
      {{8, 19, 9, 7}, tag::nchw, "nchw"},        {{8, 19, 9, 7}, tag::nhwc, "nhwc"},
      {{8, 19, 9, 7}, tag::nChw8c, "nChw8c"},    {{8, 19, 9, 7}, tag::nChw16c, "nChw16c"},
      {{6, 32, 5, 5}, tag::nChw16c, "nChw16c"},  {{3, 24, 2, 3, 5}, tag::nCdhw8c, "nCdhw8c"},
      {{3, 20, 2, 3, 5}, tag::ncdhw, "ncdhw"},   {{64, 21}, tag::nc, "nc"},
      {{5, 17, 33}, tag::ncw, "ncw"},            {{5, 17, 33}, tag::nCw16c, "nCw16c"},
      {{2, 3, 1, 1}, tag::nChw16c, "nChw16c"},
  };
  for (const LayoutCase& lc : cases) {
    SCOPED_TRACE(lc.name);
    const std::vector<float> plain = OffsetData(lc.shape, 7, 300.f, 0.05f);
    std::vector<double> mean, var;
    ExactStatistics(plain, lc.shape, mean, var);
    // The data in the layout under test, by oneDNN's own reorder.
    const dnnl::memory::dims dims(lc.shape.begin(), lc.shape.end());
    const dnnl::memory::desc from = cpu::PlainDesc(lc.shape, DType::kFloat32);
    const dnnl::memory::desc to(dims, dnnl::memory::data_type::f32, lc.layout);
    std::vector<float> laid(to.get_size() / sizeof(float), std::nanf(""));  // block padding is not data
    dnnl::memory src(from, cpu::Engine(), const_cast<float*>(plain.data())), dst(to, cpu::Engine(), laid.data());
    dnnl::reorder(src, dst).execute(cpu::Stream(), src, dst);
    cpu::Stream().wait();
    std::vector<float> got_mean(mean.size()), got_var(var.size());
    cpu::ChannelStatistics(to, laid.data(), got_mean.data(), got_var.data());
    ExpectWithinUlps(mean, got_mean.data(), 1.0, "mean");
    ExpectWithinUlps(var, got_var.data(), 2.0, "variance");
  }
}

TEST(ChannelStatistics, RejectsALayoutBlockedOnOtherDims) {
  const dnnl::memory::desc md({16, 16, 4, 4}, dnnl::memory::data_type::f32, tag::NChw16n16c);
  std::vector<float> data(md.get_size() / sizeof(float)), mean(16), var(16);
  EXPECT_THROW(cpu::ChannelStatistics(md, data.data(), mean.data(), var.data()), UnsupportedError);
}

HostTensor FromFloats(const std::vector<float>& v, const Ints& shape) {
  HostTensor t(DType::kFloat32, shape);
  std::copy(v.begin(), v.end(), t.Data<float>());
  return t;
}

ValueInfo Float32Value(const std::string& name, const Ints& shape) {
  ValueInfo v;
  v.name = name;
  v.dtype = DType::kFloat32;
  v.has_shape = !shape.empty();
  for (int64_t d : shape) v.dims.push_back(Dim{d, ""});
  return v;
}

// Conv (1x1, identity weights: its output is its input exactly, in the blocked layout
// the convolution picks) -> BatchNormalization in training mode with saved statistics.
TEST(BatchNormTraining, StatisticsExactAfterAConvolution) {
  for (const Ints& shape : {Ints{8, 32, 6, 5}, Ints{2, 19, 7, 7}, Ints{5, 64, 3, 3}}) {
    const int64_t channels = shape[1];
    Model m;
    m.opsets[""] = 15;
    m.graph.inputs = {Float32Value("x", shape), Float32Value("w", {channels, channels, 1, 1}),
                      Float32Value("scale", {channels}), Float32Value("bias", {channels}),
                      Float32Value("mean", {channels}), Float32Value("var", {channels})};
    Node conv;
    conv.name = "conv";
    conv.op_type = "Conv";
    conv.inputs = {"x", "w"};
    conv.outputs = {"c"};
    Node bn;
    bn.name = "bn";
    bn.op_type = "BatchNormalization";
    bn.inputs = {"c", "scale", "bias", "mean", "var"};
    bn.outputs = {"y", "running_mean", "running_var", "saved_mean", "saved_var"};
    bn.SetInt("training_mode", 1);
    m.graph.nodes = {conv, bn};
    for (const std::string& name : bn.outputs) m.graph.outputs.push_back(Float32Value(name, {}));
    const std::vector<float> x = OffsetData(shape, 11, 100.f, 0.02f);
    std::vector<float> w(static_cast<size_t>(channels * channels), 0.f), ones(static_cast<size_t>(channels), 1.f),
        zeros(static_cast<size_t>(channels), 0.f);
    for (int64_t c = 0; c < channels; ++c) w[static_cast<size_t>(c * channels + c)] = 1.f;
    std::map<std::string, Tensor> feeds = {
        {"x", Tensor::FromHost(FromFloats(x, shape))},
        {"w", Tensor::FromHost(FromFloats(w, {channels, channels, 1, 1}))},
        {"scale", Tensor::FromHost(FromFloats(ones, {channels}))},
        {"bias", Tensor::FromHost(FromFloats(zeros, {channels}))},
        {"mean", Tensor::FromHost(FromFloats(zeros, {channels}))},
        {"var", Tensor::FromHost(FromFloats(ones, {channels}))}};
    Executor exec(m);
    std::vector<Tensor> out = exec.Run(feeds);
    std::vector<double> mean, var;
    ExactStatistics(x, shape, mean, var);
    const HostTensor saved_mean = out[3].ToHost(), saved_var = out[4].ToHost(), y = out[0].ToHost();
    ExpectWithinUlps(mean, saved_mean.Data<float>(), 1.0, "saved mean");
    ExpectWithinUlps(var, saved_var.Data<float>(), 2.0, "saved variance");
    // Y normalised with those statistics: with the mean rounded to float32 (as any float32
    // kernel has it), x - mean is exact (nearby values), so Y is good to float32 ulps.
    const int64_t inner = shape[2] * shape[3];
    double worst = 0;
    for (int64_t i = 0; i < y.NumElements(); ++i) {
      const size_t c = static_cast<size_t>((i / inner) % channels);
      const double ref = (x[static_cast<size_t>(i)] - static_cast<float>(mean[c])) / std::sqrt(var[c] + 1e-5);
      worst = std::max(worst, std::abs(y.Data<float>()[i] - ref));
    }
    EXPECT_LT(worst, 2e-6) << "Y against statistics in double";
  }
}

TEST(InstanceNorm, StatisticsExactOnAnOffset) {
  const Ints shape{3, 5, 17, 9};
  const int64_t channels = shape[1], inner = shape[2] * shape[3];
  Model m;
  m.opsets[""] = 6;
  m.graph.inputs = {Float32Value("x", shape), Float32Value("scale", {channels}), Float32Value("bias", {channels})};
  Node n;
  n.name = "in";
  n.op_type = "InstanceNormalization";
  n.inputs = {"x", "scale", "bias"};
  n.outputs = {"y"};
  m.graph.nodes = {n};
  m.graph.outputs = {Float32Value("y", {})};
  const std::vector<float> x = OffsetData(shape, 13, 200.f, 0.03f);
  std::vector<float> ones(static_cast<size_t>(channels), 1.f), zeros(static_cast<size_t>(channels), 0.f);
  Executor exec(m);
  const HostTensor y = exec.Run({{"x", Tensor::FromHost(FromFloats(x, shape))},
                                 {"scale", Tensor::FromHost(FromFloats(ones, {channels}))},
                                 {"bias", Tensor::FromHost(FromFloats(zeros, {channels}))}})[0]
                           .ToHost();
  // Each instance (n, c) is a channel of a batch of one.
  std::vector<double> mean, var;
  ExactStatistics(x, {1, shape[0] * channels, inner}, mean, var);
  double worst = 0;
  for (int64_t i = 0; i < y.NumElements(); ++i) {
    const size_t k = static_cast<size_t>(i / inner);
    worst = std::max(worst, std::abs(y.Data<float>()[i] - (x[static_cast<size_t>(i)] - static_cast<float>(mean[k])) / std::sqrt(var[k] + 1e-5)));
  }
  EXPECT_LT(worst, 2e-6);
}

}  // namespace
}  // namespace ot
