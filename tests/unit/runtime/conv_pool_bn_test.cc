// Conv, pooling and normalisation kernels checked against naive double-precision
// references written here, for the variants ONNX's conformance cases leave out:
// SAME_LOWER and asymmetric pads, grouped dilated convs, ceil_mode with pads and
// dilations, BatchNormalization in training mode (running-stat update, saved stats).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "graph/error.h"
#include "runtime/executor/executor.h"
#include "tests/common/test_util.h"

namespace ot {
namespace {

using Ints = std::vector<int64_t>;

HostTensor RandomTensor(const Ints& shape, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  HostTensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.Data<float>()[i] = dist(gen);
  return t;
}

HostTensor FromDoubles(const std::vector<double>& v, const Ints& shape) {
  HostTensor t(DType::kFloat32, shape);
  for (size_t i = 0; i < v.size(); ++i) t.Data<float>()[i] = static_cast<float>(v[i]);
  return t;
}

// Runs a one-node model: inputs "in0", "in1", ... fed from `inputs` (an empty HostTensor
// leaves that optional input out), outputs "out0".."out{num_outputs-1}".
std::vector<HostTensor> RunNode(const std::string& op, int64_t opset, const std::function<void(Node&)>& set_attrs,
                                const std::vector<HostTensor>& inputs, int num_outputs = 1) {
  Model m;
  m.opsets[""] = opset;
  Node n;
  n.name = "under_test";
  n.op_type = op;
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dtype == DType::kUndefined) {
      n.inputs.push_back("");
      continue;
    }
    ValueInfo v;
    v.name = "in" + std::to_string(i);
    v.dtype = inputs[i].dtype;
    v.has_shape = true;
    for (int64_t d : inputs[i].dims) v.dims.push_back(Dim{d, ""});
    m.graph.inputs.push_back(v);
    n.inputs.push_back(v.name);
    feeds[v.name] = Tensor::FromHost(inputs[i]);
  }
  for (int i = 0; i < num_outputs; ++i) {
    ValueInfo v;
    v.name = "out" + std::to_string(i);
    v.dtype = DType::kFloat32;
    n.outputs.push_back(v.name);
    m.graph.outputs.push_back(v);
  }
  set_attrs(n);
  m.graph.nodes.push_back(n);
  Executor exec(m);
  std::vector<HostTensor> out;
  for (const Tensor& t : exec.Run(feeds)) out.push_back(t.ToHost());
  return out;
}

void ExpectClose(const HostTensor& expected, const HostTensor& actual) {
  ASSERT_EQ(expected.dims, actual.dims);
  EXPECT_EQ(testing::CompareTensors(expected, actual, 1e-4, 1e-5), "");
}

// Row-major index helpers over a spatial shape.
Ints Unflatten(int64_t flat, const Ints& shape) {
  Ints idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

// Window geometry in the reference's own terms (ONNX conventions).
struct RefWindow {
  Ints kernel, strides, dilations, pads_begin, out;
};

// Input position of kernel tap `k` of output position `o`, or -1 when it lies in padding
// (or past the input). `limit` is the input size.
int64_t Tap(const RefWindow& w, size_t d, int64_t o, int64_t k, int64_t limit) {
  int64_t p = o * w.strides[d] - w.pads_begin[d] + k * w.dilations[d];
  return p >= 0 && p < limit ? p : -1;
}

// Naive grouped convolution; x is N x C x spatial, w is M x C/G x kernel.
std::vector<double> RefConv(const HostTensor& x, const HostTensor& w, const HostTensor* bias, int64_t group,
                            const RefWindow& win) {
  const int64_t n_batch = x.dims[0], c_in = x.dims[1], m_out = w.dims[0];
  const Ints in_sp(x.dims.begin() + 2, x.dims.end());
  const int64_t in_size = NumElements(in_sp), out_size = NumElements(win.out), k_size = NumElements(win.kernel);
  const int64_t c_per_group = c_in / group, m_per_group = m_out / group;
  std::vector<double> y(static_cast<size_t>(n_batch * m_out * out_size));
  for (int64_t n = 0; n < n_batch; ++n)
    for (int64_t m = 0; m < m_out; ++m)
      for (int64_t o = 0; o < out_size; ++o) {
        const Ints oi = Unflatten(o, win.out);
        double sum = bias ? bias->Data<float>()[m] : 0.0;
        for (int64_t c = 0; c < c_per_group; ++c)
          for (int64_t k = 0; k < k_size; ++k) {
            const Ints ki = Unflatten(k, win.kernel);
            int64_t in_flat = 0;
            bool inside = true;
            for (size_t d = 0; d < in_sp.size() && inside; ++d) {
              int64_t p = Tap(win, d, oi[d], ki[d], in_sp[d]);
              inside = p >= 0;
              in_flat = in_flat * in_sp[d] + p;
            }
            if (!inside) continue;
            const int64_t cx = (m / m_per_group) * c_per_group + c;
            sum += static_cast<double>(x.Data<float>()[(n * c_in + cx) * in_size + in_flat]) *
                   w.Data<float>()[(m * c_per_group + c) * k_size + k];
          }
        y[static_cast<size_t>((n * m_out + m) * out_size + o)] = sum;
      }
  return y;
}

enum class RefPool { kMax, kAvgExcludePad, kAvgIncludePad };

// Naive pooling. For kAvgIncludePad the divisor counts the taps inside input + ONNX pads
// (`pads_end` only matters there).
std::vector<double> RefPooling(const HostTensor& x, const RefWindow& win, const Ints& pads_end, RefPool kind) {
  const int64_t planes = x.dims[0] * x.dims[1];
  const Ints in_sp(x.dims.begin() + 2, x.dims.end());
  const int64_t in_size = NumElements(in_sp), out_size = NumElements(win.out), k_size = NumElements(win.kernel);
  std::vector<double> y(static_cast<size_t>(planes * out_size));
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t o = 0; o < out_size; ++o) {
      const Ints oi = Unflatten(o, win.out);
      double acc = kind == RefPool::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
      int64_t valid = 0, padded_count = 0;
      for (int64_t k = 0; k < k_size; ++k) {
        const Ints ki = Unflatten(k, win.kernel);
        int64_t in_flat = 0;
        bool inside = true, inside_padded = true;
        for (size_t d = 0; d < in_sp.size(); ++d) {
          int64_t raw = oi[d] * win.strides[d] - win.pads_begin[d] + ki[d] * win.dilations[d];
          inside_padded = inside_padded && raw >= -win.pads_begin[d] && raw < in_sp[d] + pads_end[d];
          int64_t q = Tap(win, d, oi[d], ki[d], in_sp[d]);
          inside = inside && q >= 0;
          in_flat = in_flat * in_sp[d] + std::max<int64_t>(q, 0);
        }
        padded_count += inside_padded;
        if (!inside) continue;
        ++valid;
        double v = x.Data<float>()[p * in_size + in_flat];
        acc = kind == RefPool::kMax ? std::max(acc, v) : acc + v;
      }
      if (kind == RefPool::kAvgExcludePad) acc /= static_cast<double>(valid);
      if (kind == RefPool::kAvgIncludePad) acc /= static_cast<double>(padded_count);
      y[static_cast<size_t>(p * out_size + o)] = acc;
    }
  return y;
}

Ints Concat(Ints a, const Ints& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// --- Conv ---------------------------------------------------------------------------

TEST(Conv, AutoPadSameLowerPutsTheOddPadFirst) {
  // 7 wide, stride 2, kernel 4: output 4, total pad (4-1)*2+4-7 = 3 -> 2 before, 1 after.
  HostTensor x = RandomTensor({2, 3, 7, 6}, 1), w = RandomTensor({4, 3, 4, 3}, 2), b = RandomTensor({4}, 3);
  auto out = RunNode("Conv", 11, [](Node& n) {
    n.SetString("auto_pad", "SAME_LOWER");
    n.SetInts("strides", {2, 2});
  }, {x, w, b});
  RefWindow win{{4, 3}, {2, 2}, {1, 1}, {2, 1}, {4, 3}};  // width 6: total pad 2*2+3-6=1 -> 1 before
  ExpectClose(FromDoubles(RefConv(x, w, &b, 1, win), {2, 4, 4, 3}), out[0]);
}

TEST(Conv, AutoPadSameUpperPutsTheOddPadLast) {
  HostTensor x = RandomTensor({1, 2, 7, 6}, 4), w = RandomTensor({3, 2, 4, 3}, 5);
  auto out = RunNode("Conv", 11, [](Node& n) {
    n.SetString("auto_pad", "SAME_UPPER");
    n.SetInts("strides", {2, 2});
  }, {x, w});
  RefWindow win{{4, 3}, {2, 2}, {1, 1}, {1, 0}, {4, 3}};
  ExpectClose(FromDoubles(RefConv(x, w, nullptr, 1, win), {1, 3, 4, 3}), out[0]);
}

TEST(Conv, AsymmetricPadsGroupsAndDilations) {
  // 2 groups, dilation (2, 1), pads top 0 / left 2 / bottom 1 / right 0.
  HostTensor x = RandomTensor({2, 4, 9, 8}, 6), w = RandomTensor({6, 2, 3, 2}, 7), b = RandomTensor({6}, 8);
  auto out = RunNode("Conv", 11, [](Node& n) {
    n.SetInts("pads", {0, 2, 1, 0});
    n.SetInts("dilations", {2, 1});
    n.SetInts("strides", {1, 2});
    n.SetInt("group", 2);
    n.SetInts("kernel_shape", {3, 2});
  }, {x, w, b});
  // height: 9 + 0 + 1 - 5 + 1 = 6; width: (8 + 2 - 2) / 2 + 1 = 5
  RefWindow win{{3, 2}, {1, 2}, {2, 1}, {0, 2}, {6, 5}};
  ExpectClose(FromDoubles(RefConv(x, w, &b, 2, win), {2, 6, 6, 5}), out[0]);
}

TEST(Conv, DepthwiseThreeDimensionalWithStridesAndPads) {
  HostTensor x = RandomTensor({1, 3, 5, 6, 4}, 9), w = RandomTensor({3, 1, 3, 3, 2}, 10);
  auto out = RunNode("Conv", 11, [](Node& n) {
    n.SetInts("pads", {1, 0, 1, 1, 2, 0});
    n.SetInts("strides", {2, 1, 2});
    n.SetInt("group", 3);
  }, {x, w});
  // depth (5+2-3)/2+1 = 3, height 6+2-3+1 = 6, width (4+1-2)/2+1 = 2
  RefWindow win{{3, 3, 2}, {2, 1, 2}, {1, 1, 1}, {1, 0, 1}, {3, 6, 2}};
  ExpectClose(FromDoubles(RefConv(x, w, nullptr, 3, win), {1, 3, 3, 6, 2}), out[0]);
}

TEST(Conv, ValidPaddingDropsTheRemainder) {
  HostTensor x = RandomTensor({1, 1, 10}, 11), w = RandomTensor({2, 1, 3}, 12);
  auto out = RunNode("Conv", 11, [](Node& n) {
    n.SetString("auto_pad", "VALID");
    n.SetInts("strides", {3});
  }, {x, w});
  RefWindow win{{3}, {3}, {1}, {0}, {3}};
  ExpectClose(FromDoubles(RefConv(x, w, nullptr, 1, win), {1, 2, 3}), out[0]);
}

TEST(Conv, RejectsMismatchedKernelShapeAndChannels) {
  HostTensor x = RandomTensor({1, 4, 5, 5}, 13), w = RandomTensor({2, 4, 3, 3}, 14);
  EXPECT_THROW(RunNode("Conv", 11, [](Node& n) { n.SetInts("kernel_shape", {2, 2}); }, {x, w}), Error);
  EXPECT_THROW(RunNode("Conv", 11, [](Node& n) { n.SetInt("group", 2); }, {x, w}), Error);
  EXPECT_THROW(RunNode("Conv", 11, [](Node& n) {
    n.SetString("auto_pad", "VALID");
    n.SetInts("pads", {1, 1, 1, 1});
  }, {x, w}), Error);
}

// --- Pooling ------------------------------------------------------------------------

TEST(Pool, MaxPoolCeilModeWithPadsAndDilations) {
  HostTensor x = RandomTensor({2, 3, 11, 10}, 20);
  auto out = RunNode("MaxPool", 12, [](Node& n) {
    n.SetInts("kernel_shape", {3, 2});
    n.SetInts("strides", {2, 3});
    n.SetInts("dilations", {2, 1});
    n.SetInts("pads", {1, 0, 0, 0});
    n.SetInt("ceil_mode", 1);
  }, {x});
  // height: ceil((11+1-5)/2)+1 = 5; width: ceil((10-2)/3)+1 = 4; both last windows
  // reach one past the input.
  RefWindow win{{3, 2}, {2, 3}, {2, 1}, {1, 0}, {5, 4}};
  ExpectClose(FromDoubles(RefPooling(x, win, {0, 0}, RefPool::kMax), {2, 3, 5, 4}), out[0]);
}

TEST(Pool, CeilModeNeverStartsAWindowInTheEndPadding) {
  // 5 wide, kernel 2, stride 2, pads 1/1: ceil((5+2-2)/2)+1 = 4, but the 4th window would
  // start at 6 = input + begin pad, wholly in padding, so the output is 3 (as PyTorch).
  HostTensor x = RandomTensor({1, 1, 5}, 21);
  auto out = RunNode("MaxPool", 12, [](Node& n) {
    n.SetInts("kernel_shape", {2});
    n.SetInts("strides", {2});
    n.SetInts("pads", {1, 1});
    n.SetInt("ceil_mode", 1);
  }, {x});
  RefWindow win{{2}, {2}, {1}, {1}, {3}};
  ExpectClose(FromDoubles(RefPooling(x, win, {1}, RefPool::kMax), {1, 1, 3}), out[0]);
}

TEST(Pool, AveragePoolCeilModeExcludesPadding) {
  HostTensor x = RandomTensor({1, 2, 7, 8}, 22);
  auto out = RunNode("AveragePool", 11, [](Node& n) {
    n.SetInts("kernel_shape", {3, 3});
    n.SetInts("strides", {2, 2});
    n.SetInts("pads", {1, 0, 0, 1});
    n.SetInt("ceil_mode", 1);
  }, {x});
  // height ceil((7+1-3)/2)+1 = 4, width ceil((8+1-3)/2)+1 = 4
  RefWindow win{{3, 3}, {2, 2}, {1, 1}, {1, 0}, {4, 4}};
  ExpectClose(FromDoubles(RefPooling(x, win, {0, 1}, RefPool::kAvgExcludePad), {1, 2, 4, 4}), out[0]);
}

TEST(Pool, AveragePoolCountIncludePadAsymmetric) {
  HostTensor x = RandomTensor({1, 2, 6, 5}, 23);
  auto out = RunNode("AveragePool", 11, [](Node& n) {
    n.SetInts("kernel_shape", {3, 2});
    n.SetInts("pads", {2, 0, 0, 1});
    n.SetInt("count_include_pad", 1);
  }, {x});
  RefWindow win{{3, 2}, {1, 1}, {1, 1}, {2, 0}, {6, 5}};
  ExpectClose(FromDoubles(RefPooling(x, win, {0, 1}, RefPool::kAvgIncludePad), {1, 2, 6, 5}), out[0]);
}

TEST(Pool, IncludePadWithCeilOverhangIsUnsupported) {
  HostTensor x = RandomTensor({1, 1, 4, 4}, 24);
  EXPECT_THROW(RunNode("AveragePool", 11, [](Node& n) {
    n.SetInts("kernel_shape", {3, 3});
    n.SetInts("strides", {2, 2});
    n.SetInt("ceil_mode", 1);
    n.SetInt("count_include_pad", 1);
  }, {x}), UnsupportedError);
}

TEST(Pool, AveragePoolSameLower) {
  HostTensor x = RandomTensor({1, 1, 5, 5}, 25);
  auto out = RunNode("AveragePool", 11, [](Node& n) {
    n.SetInts("kernel_shape", {2, 2});
    n.SetInts("strides", {2, 2});
    n.SetString("auto_pad", "SAME_LOWER");
  }, {x});
  // output 3, total pad 1 -> before
  RefWindow win{{2, 2}, {2, 2}, {1, 1}, {1, 1}, {3, 3}};
  ExpectClose(FromDoubles(RefPooling(x, win, {0, 0}, RefPool::kAvgExcludePad), {1, 1, 3, 3}), out[0]);
}

TEST(Pool, GlobalPoolsOverEverySpatialRank) {
  for (const Ints& shape : {Ints{2, 3, 7}, Ints{2, 3, 4, 5}, Ints{1, 2, 3, 4, 5}}) {
    HostTensor x = RandomTensor(shape, 26);
    const Ints spatial(shape.begin() + 2, shape.end());
    RefWindow win{spatial, Ints(spatial.size(), 1), Ints(spatial.size(), 1), Ints(spatial.size(), 0),
                  Ints(spatial.size(), 1)};
    const Ints out_shape = Concat({shape[0], shape[1]}, Ints(spatial.size(), 1));
    const Ints zeros(spatial.size(), 0);
    ExpectClose(FromDoubles(RefPooling(x, win, zeros, RefPool::kMax), out_shape),
                RunNode("GlobalMaxPool", 1, [](Node&) {}, {x})[0]);
    ExpectClose(FromDoubles(RefPooling(x, win, zeros, RefPool::kAvgExcludePad), out_shape),
                RunNode("GlobalAveragePool", 1, [](Node&) {}, {x})[0]);
  }
}

// The Indices output is computed on float32 (tested in grad_nn_test and the conformance
// cases); other types and GlobalMaxPool say so.
TEST(Pool, IndicesOutputOnOtherTypesIsUnsupported) {
  HostTensor x = RandomTensor({1, 1, 4, 4}, 27);
  EXPECT_NO_THROW(RunNode("MaxPool", 12, [](Node& n) {
    n.SetInts("kernel_shape", {2, 2});
    n.SetInt("storage_order", 1);
  }, {x}, 2));
  HostTensor x8(DType::kInt8, {1, 1, 4, 4});
  EXPECT_THROW(RunNode("MaxPool", 12, [](Node& n) { n.SetInts("kernel_shape", {2, 2}); }, {x8}, 2), UnsupportedError);
  EXPECT_THROW(RunNode("MaxPool", 12, [](Node& n) {
    n.SetInts("kernel_shape", {2, 2});
    n.SetInt("storage_order", 2);
  }, {x}), Error);
}

// --- BatchNormalization -------------------------------------------------------------

struct RefBatchNorm {
  std::vector<double> y, batch_mean, batch_var, running_mean, running_var;
};

// Training-mode batch norm in double: population variance for Y and the running update.
RefBatchNorm RefBatchNormTraining(const HostTensor& x, const HostTensor& scale, const HostTensor& bias,
                                  const HostTensor& mean, const HostTensor& var, double momentum, double epsilon) {
  const int64_t n_batch = x.dims[0], channels = x.dims[1], inner = x.NumElements() / (n_batch * channels);
  RefBatchNorm r;
  r.y.resize(static_cast<size_t>(x.NumElements()));
  auto at = [&](int64_t n, int64_t c, int64_t i) { return (n * channels + c) * inner + i; };
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0, sq = 0;
    for (int64_t n = 0; n < n_batch; ++n)
      for (int64_t i = 0; i < inner; ++i) sum += x.Data<float>()[at(n, c, i)];
    const double count = static_cast<double>(n_batch * inner), mu = sum / count;
    for (int64_t n = 0; n < n_batch; ++n)
      for (int64_t i = 0; i < inner; ++i) sq += std::pow(x.Data<float>()[at(n, c, i)] - mu, 2);
    const double v = sq / count;
    r.batch_mean.push_back(mu);
    r.batch_var.push_back(v);
    r.running_mean.push_back(mean.Data<float>()[c] * momentum + mu * (1 - momentum));
    r.running_var.push_back(var.Data<float>()[c] * momentum + v * (1 - momentum));
    for (int64_t n = 0; n < n_batch; ++n)
      for (int64_t i = 0; i < inner; ++i)
        r.y[static_cast<size_t>(at(n, c, i))] = (x.Data<float>()[at(n, c, i)] - mu) / std::sqrt(v + epsilon) *
                                                     scale.Data<float>()[c] +
                                                 bias.Data<float>()[c];
  }
  return r;
}

struct BatchNormInputs {
  HostTensor x, scale, bias, mean, var;
  std::vector<HostTensor> All() const { return {x, scale, bias, mean, var}; }
};

BatchNormInputs MakeBatchNormInputs(const Ints& shape, uint32_t seed) {
  const Ints c{shape[1]};
  // Offset and scaled data so the batch statistics differ clearly from the running ones.
  BatchNormInputs in{RandomTensor(shape, seed, -2.f, 3.f), RandomTensor(c, seed + 1), RandomTensor(c, seed + 2),
                     RandomTensor(c, seed + 3), RandomTensor(c, seed + 4, 0.5f, 1.5f)};
  return in;
}

TEST(BatchNorm, TrainingModeUpdatesRunningStats) {
  BatchNormInputs in = MakeBatchNormInputs({4, 3, 5, 2}, 30);
  auto out = RunNode("BatchNormalization", 15, [](Node& n) {
    n.SetInt("training_mode", 1);
    n.SetFloat("momentum", 0.7f);
    n.SetFloat("epsilon", 1e-3f);
  }, in.All(), 3);
  RefBatchNorm ref = RefBatchNormTraining(in.x, in.scale, in.bias, in.mean, in.var, 0.7, 1e-3);
  ExpectClose(FromDoubles(ref.y, in.x.dims), out[0]);
  ExpectClose(FromDoubles(ref.running_mean, {3}), out[1]);
  ExpectClose(FromDoubles(ref.running_var, {3}), out[2]);
}

TEST(BatchNorm, TrainingModeCanAlsoWriteSavedStats) {
  // Opset 9 spells training mode as extra outputs: Y, mean, var, saved_mean, saved_var.
  // At opset 15 a training graph may request the same two saved outputs.
  for (int64_t opset : {9, 15}) {
    BatchNormInputs in = MakeBatchNormInputs({3, 4, 6}, 40);
    auto out = RunNode("BatchNormalization", opset, [opset](Node& n) {
      if (opset >= 14) n.SetInt("training_mode", 1);
    }, in.All(), 5);
    RefBatchNorm ref = RefBatchNormTraining(in.x, in.scale, in.bias, in.mean, in.var, 0.9, 1e-5);
    ExpectClose(FromDoubles(ref.y, in.x.dims), out[0]);
    ExpectClose(FromDoubles(ref.running_mean, {4}), out[1]);
    ExpectClose(FromDoubles(ref.running_var, {4}), out[2]);
    ExpectClose(FromDoubles(ref.batch_mean, {4}), out[3]);
    ExpectClose(FromDoubles(ref.batch_var, {4}), out[4]);
  }
}

TEST(BatchNorm, TrainingModeWithOnlyY) {
  // Opset 6 with is_test=0 normalises with batch statistics even when only Y is asked for.
  BatchNormInputs in = MakeBatchNormInputs({5, 2}, 50);
  auto out = RunNode("BatchNormalization", 6, [](Node& n) { n.SetInt("is_test", 0); }, in.All(), 1);
  ExpectClose(FromDoubles(RefBatchNormTraining(in.x, in.scale, in.bias, in.mean, in.var, 0.9, 1e-5).y, in.x.dims),
              out[0]);
}

TEST(BatchNorm, InferenceOnTwoAndSixDimensionalInputs) {
  for (const Ints& shape : {Ints{6, 3}, Ints{2, 3, 2, 2, 3, 2}}) {
    BatchNormInputs in = MakeBatchNormInputs(shape, 60);
    auto out = RunNode("BatchNormalization", 15, [](Node&) {}, in.All(), 1);
    const int64_t channels = shape[1], inner = in.x.NumElements() / (shape[0] * channels);
    std::vector<double> y(static_cast<size_t>(in.x.NumElements()));
    for (int64_t i = 0; i < in.x.NumElements(); ++i) {
      const int64_t c = (i / inner) % channels;
      y[static_cast<size_t>(i)] = (in.x.Data<float>()[i] - static_cast<double>(in.mean.Data<float>()[c])) /
                                      std::sqrt(in.var.Data<float>()[c] + 1e-5) * in.scale.Data<float>()[c] +
                                  in.bias.Data<float>()[c];
    }
    ExpectClose(FromDoubles(y, shape), out[0]);
  }
}

TEST(BatchNorm, StatOutputsInInferenceModeAreAnError) {
  BatchNormInputs in = MakeBatchNormInputs({2, 3, 4}, 70);
  EXPECT_THROW(RunNode("BatchNormalization", 15, [](Node&) {}, in.All(), 3), Error);
  EXPECT_THROW(RunNode("BatchNormalization", 6, [](Node& n) { n.SetInt("is_test", 1); }, in.All(), 5), Error);
  EXPECT_THROW(RunNode("BatchNormalization", 7, [](Node& n) { n.SetInt("spatial", 0); }, in.All(), 1),
               UnsupportedError);
}

// --- InstanceNormalization and LRN --------------------------------------------------

TEST(InstanceNorm, ThreeDimensionalInput) {
  HostTensor x = RandomTensor({2, 3, 2, 3, 4}, 80, -1.f, 4.f), scale = RandomTensor({3}, 81),
             bias = RandomTensor({3}, 82);
  auto out = RunNode("InstanceNormalization", 6, [](Node& n) { n.SetFloat("epsilon", 1e-3f); }, {x, scale, bias});
  const int64_t inner = 24;
  std::vector<double> y(static_cast<size_t>(x.NumElements()));
  for (int64_t inst = 0; inst < 6; ++inst) {
    const float* p = x.Data<float>() + inst * inner;
    double mu = 0, var = 0;
    for (int64_t i = 0; i < inner; ++i) mu += p[i] / static_cast<double>(inner);
    for (int64_t i = 0; i < inner; ++i) var += std::pow(p[i] - mu, 2) / static_cast<double>(inner);
    for (int64_t i = 0; i < inner; ++i)
      y[static_cast<size_t>(inst * inner + i)] =
          (p[i] - mu) / std::sqrt(var + 1e-3) * scale.Data<float>()[inst % 3] + bias.Data<float>()[inst % 3];
  }
  ExpectClose(FromDoubles(y, x.dims), out[0]);
}

TEST(Lrn, EvenSizeIsUnsupported) {
  HostTensor x = RandomTensor({1, 4, 3, 3}, 90);
  EXPECT_THROW(RunNode("LRN", 13, [](Node& n) { n.SetInt("size", 2); }, {x}), UnsupportedError);
}

}  // namespace
}  // namespace ot
