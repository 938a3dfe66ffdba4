// Ops that PyTorch 2.x's exporter writes at opsets 18-23: ai.onnx Gelu (both
// approximations), GroupNormalization (opset 18 per group, 21 per channel), RMSNormalization
// and the SplitToSequence/SequenceAt pattern of torch.split (graph/passes/sequence_rewrite.h).
// Forward values against float64 loops written here, gradients against finite differences.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "graph/autodiff/autodiff.h"
#include "graph/error.h"
#include "graph/autodiff/gradient_registry.h"
#include "graph/onnx_io.h"
#include "graph/passes/sequence_rewrite.h"
#include "runtime/executor/executor.h"
#include "tests/common/grad_check.h"

namespace ot {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using testing::ModelBuilder;
using testing::TrainWithWeightedSumLoss;

// Deterministic, varied input values in about [-2.5, 2.5].
HostTensor Wavy(std::vector<int64_t> dims, float phase = 0.f) {
  HostTensor x(DType::kFloat32, dims);
  for (int64_t i = 0; i < x.NumElements(); ++i) {
    const float f = static_cast<float>(i);
    x.Data<float>()[i] = 2.f * std::sin(0.61f * f + phase) + 0.3f * std::cos(1.7f * f);
  }
  return x;
}

std::vector<float> RunOne(const Model& m, const HostTensor& x, const std::string& out) {
  Executor exec(m);
  HostTensor y = exec.Run({{"x", Tensor::FromHost(x)}}, {out})[0].ToHost();
  return std::vector<float>(y.Data<float>(), y.Data<float>() + y.NumElements());
}

int64_t Prod(const std::vector<int64_t>& d, size_t from = 0) {
  int64_t p = 1;
  for (size_t i = from; i < d.size(); ++i) p *= d[i];
  return p;
}

// --- Gelu (opset 20) --------------------------------------------------------------------

double GeluRef(double x, bool tanh_form) {
  if (tanh_form) return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

TEST(Opset23, GeluForwardBothApproximations) {
  for (int64_t opset : {20, 23}) {
    for (const char* form : {"", "none", "tanh"}) {
      SCOPED_TRACE(std::string("opset ") + std::to_string(opset) + " approximate '" + form + "'");
      const std::vector<int64_t> dims = {3, 7, 5};
      ModelBuilder b;
      b.Opset(opset);
      b.Input("x", DType::kFloat32, dims);
      Node& n = b.Op("Gelu", {"x"}, "y");
      if (*form) n.SetString("approximate", form);
      b.Output("y", dims);
      HostTensor x = Wavy(dims);
      x.Data<float>()[0] = 0.f;
      x.Data<float>()[1] = -6.f;
      x.Data<float>()[2] = 6.f;
      const std::vector<float> y = RunOne(b.Build(), x, "y");
      const bool tanh_form = std::string(form) == "tanh";
      for (int64_t i = 0; i < x.NumElements(); ++i)
        EXPECT_NEAR(y[static_cast<size_t>(i)], GeluRef(x.Data<float>()[i], tanh_form), 2e-6) << i;
    }
  }
  // The two forms differ by about 1.5e-4 at x = 1: the attribute is honoured.
  EXPECT_GT(std::fabs(GeluRef(1, true) - GeluRef(1, false)), 1e-4);
}

TEST(Opset23, GeluRejectsUnknownApproximation) {
  ModelBuilder b;
  b.Opset(20);
  b.Input("x", DType::kFloat32, {2});
  b.Op("Gelu", {"x"}, "y").SetString("approximate", "fast");
  b.Output("y", {2});
  try {
    RunOne(b.Build(), Wavy({2}), "y");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 'Gelu_0' (Gelu): Gelu's approximate must be"), std::string::npos)
        << e.what();
  }
}

TEST(Opset23, GeluGradientsMatchFiniteDifferences) {
  for (const char* form : {"none", "tanh"}) {
    SCOPED_TRACE(form);
    ModelBuilder b;
    b.Opset(20);
    b.Param("x", {3, 5}, -3.f, 3.f);
    b.Op("Gelu", {"x"}, "y").SetString("approximate", form);
    TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", {3, 5});
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-3f);
  }
}

// Mish (opset 18+) already has its rule (ActivationGrad); checked here at opset 23 too.
TEST(Opset23, MishHasAGradient) {
  EXPECT_NE(GradientRegistry::Global().Find("", "Mish", 23), nullptr);
  ModelBuilder b;
  b.Opset(23);
  b.Param("x", {1, 7}, -3.f, 3.f);
  b.Op("Mish", {"x"}, "y");
  TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", {1, 7});
  ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-3f);
}

// --- GroupNormalization ---------------------------------------------------------------

struct GroupNormCase {
  int64_t opset;  // 18: scale/bias [G]; 21: [C]
  std::vector<int64_t> x;
  int64_t groups;
};

std::string Describe(const GroupNormCase& c) {
  return "opset " + std::to_string(c.opset) + " X " + ShapeString(c.x) + " groups " + std::to_string(c.groups);
}

// Y by float64 loops over (n, group) blocks.
std::vector<double> GroupNormRef(const GroupNormCase& c, const float* x, const float* scale, const float* bias,
                                 double eps) {
  const int64_t n = c.x[0], ch = c.x[1], s = Prod(c.x, 2), cg = ch / c.groups;
  std::vector<double> y(static_cast<size_t>(Prod(c.x)));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < c.groups; ++g) {
      const int64_t base = (i * ch + g * cg) * s, m = cg * s;
      double mean = 0, var = 0;
      for (int64_t j = 0; j < m; ++j) mean += x[base + j];
      mean /= static_cast<double>(m);
      for (int64_t j = 0; j < m; ++j) var += (x[base + j] - mean) * (x[base + j] - mean);
      var /= static_cast<double>(m);
      for (int64_t j = 0; j < m; ++j) {
        const int64_t channel = g * cg + j / s, p = c.opset >= 21 ? channel : g;
        y[static_cast<size_t>(base + j)] = (x[base + j] - mean) / std::sqrt(var + eps) * scale[p] + bias[p];
      }
    }
  return y;
}

const std::vector<GroupNormCase>& GroupNormCases() {
  static const std::vector<GroupNormCase> cases = {
      {21, {1, 6, 5}, 1},    {21, {1, 6, 5}, 6},       {21, {3, 6, 2, 3}, 3}, {21, {3, 10, 3, 3}, 5},
      {21, {3, 6}, 2},       {18, {1, 6, 5}, 3},       {18, {3, 10, 3, 3}, 5}, {18, {3, 5, 2, 2}, 5},
      {18, {3, 4, 3}, 1},    {23, {3, 7, 2, 1, 3}, 7},
  };
  return cases;
}

TEST(Opset23, GroupNormalizationForward) {
  std::vector<GroupNormCase> cases = GroupNormCases();
  cases.push_back({21, {2, 12, 40, 40}, 4});  // large enough for the threaded loop
  for (const GroupNormCase& c : cases) {
    SCOPED_TRACE(Describe(c));
    const int64_t params = c.opset >= 21 ? c.x[1] : c.groups;
    ModelBuilder b;
    b.Opset(c.opset);
    b.Input("x", DType::kFloat32, c.x);
    b.Param("scale", {params}, 0.5f, 1.5f).Param("bias", {params}, -0.5f, 0.5f);
    Node& n = b.Op("GroupNormalization", {"x", "scale", "bias"}, "y");
    n.SetInt("num_groups", c.groups);
    n.SetFloat("epsilon", 1e-3f);
    b.Output("y", c.x);
    Model m = b.Build();
    HostTensor x = Wavy(c.x, 0.3f);
    const std::vector<double> want = GroupNormRef(c, x.Data<float>(), m.graph.FindInitializer("scale")->Data<float>(),
                                                  m.graph.FindInitializer("bias")->Data<float>(), 1e-3);
    const std::vector<float> y = RunOne(m, x, "y");
    ASSERT_EQ(y.size(), want.size());
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 2e-5) << i;
  }
}

TEST(Opset23, GroupNormalizationGradientsMatchFiniteDifferences) {
  for (const GroupNormCase& c : GroupNormCases()) {
    SCOPED_TRACE(Describe(c));
    const int64_t params = c.opset >= 21 ? c.x[1] : c.groups;
    ModelBuilder b;
    b.Opset(c.opset);
    b.Param("x", c.x, -1.f, 1.f).Param("scale", {params}, 0.5f, 1.5f).Param("bias", {params}, -0.5f, 0.5f);
    Node& n = b.Op("GroupNormalization", {"x", "scale", "bias"}, "y");
    n.SetInt("num_groups", c.groups);
    n.SetFloat("epsilon", 1e-3f);
    TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", c.x);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  }
}

TEST(Opset23, GroupNormalizationRefusesWrongScaleShapeAndGroups) {
  auto error_of = [](int64_t opset, int64_t params, int64_t groups) {
    ModelBuilder b;
    b.Opset(opset);
    b.Input("x", DType::kFloat32, {2, 6, 3});
    b.Param("scale", {params}, 0.5f, 1.5f).Param("bias", {params}, -0.5f, 0.5f);
    b.Op("GroupNormalization", {"x", "scale", "bias"}, "y").SetInt("num_groups", groups);
    b.Output("y", {2, 6, 3});
    try {
      RunOne(b.Build(), Wavy({2, 6, 3}), "y");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string e = error_of(18, 6, 3);
  EXPECT_NE(e.find("(GroupNormalization): scale"), std::string::npos) << e;
  EXPECT_NE(e.find("must have shape [3] (one value per group before opset 21)"), std::string::npos) << e;
  e = error_of(21, 3, 3);
  EXPECT_NE(e.find("must have shape [6] (one value per channel from opset 21)"), std::string::npos) << e;
  e = error_of(21, 6, 4);
  EXPECT_NE(e.find("num_groups 4 does not divide the 6 channels"), std::string::npos) << e;
}

// --- RMSNormalization -----------------------------------------------------------------

struct RmsCase {
  std::vector<int64_t> x;
  int64_t axis;
  std::vector<int64_t> scale;
};

TEST(Opset23, RMSNormalizationForward) {
  for (const RmsCase& c : {RmsCase{{1, 7}, -1, {7}}, RmsCase{{3, 4, 5}, -1, {5}}, RmsCase{{3, 4, 5}, 1, {4, 5}},
                           RmsCase{{3, 4, 5}, 1, {1, 5}}, RmsCase{{3, 2, 3}, 0, {3}},
                           RmsCase{{3, 200, 96}, -1, {96}}}) {
    SCOPED_TRACE("X " + ShapeString(c.x) + " axis " + std::to_string(c.axis) + " scale " + ShapeString(c.scale));
    ModelBuilder b;
    b.Opset(23);
    b.Input("x", DType::kFloat32, c.x);
    b.Param("scale", c.scale, 0.5f, 1.5f);
    Node& n = b.Op("RMSNormalization", {"x", "scale"}, "y");
    n.SetInt("axis", c.axis);
    n.SetFloat("epsilon", 1e-4f);
    b.Output("y", c.x);
    Model m = b.Build();
    HostTensor x = Wavy(c.x);
    const float* scale = m.graph.FindInitializer("scale")->Data<float>();
    const std::vector<float> y = RunOne(m, x, "y");
    const int64_t rank = static_cast<int64_t>(c.x.size());
    const size_t axis = static_cast<size_t>(c.axis < 0 ? c.axis + rank : c.axis);
    const int64_t inner = Prod(c.x, axis), outer = Prod(c.x) / inner;
    const std::vector<int64_t> tail(c.x.begin() + static_cast<int64_t>(axis), c.x.end());
    for (int64_t r = 0; r < outer; ++r) {
      double sq = 0;
      for (int64_t j = 0; j < inner; ++j) sq += std::pow(x.Data<float>()[r * inner + j], 2);
      const double inv = 1 / std::sqrt(sq / static_cast<double>(inner) + 1e-4);
      for (int64_t j = 0; j < inner; ++j) {
        // scale broadcast over the tail (numpy rules, aligned at the end)
        int64_t off = 0, stride = 1, rest = j;
        for (size_t d = tail.size(); d-- > 0;) {
          const int64_t idx = rest % tail[d];
          rest /= tail[d];
          const size_t sd = d + c.scale.size() - tail.size();
          if (d + c.scale.size() >= tail.size()) {
            if (c.scale[sd] != 1) off += idx * stride;
            stride *= c.scale[sd];
          }
        }
        const double want = x.Data<float>()[r * inner + j] * inv * scale[off];
        EXPECT_NEAR(y[static_cast<size_t>(r * inner + j)], want, 1e-5) << r << "," << j;
      }
    }
  }
}

TEST(Opset23, RMSNormalizationGradientsMatchFiniteDifferences) {
  for (const RmsCase& c : {RmsCase{{1, 7}, -1, {7}}, RmsCase{{3, 4, 5}, -1, {5}}, RmsCase{{3, 2, 3}, 1, {2, 3}},
                           RmsCase{{3, 2, 3}, -2, {1, 3}}}) {
    SCOPED_TRACE("X " + ShapeString(c.x) + " axis " + std::to_string(c.axis) + " scale " + ShapeString(c.scale));
    ModelBuilder b;
    b.Opset(23);
    b.Param("x", c.x, -1.f, 1.f).Param("scale", c.scale, 0.5f, 1.5f);
    Node& n = b.Op("RMSNormalization", {"x", "scale"}, "y");
    n.SetInt("axis", c.axis);
    n.SetFloat("epsilon", 1e-3f);
    TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", c.x);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  }
}

// --- SplitToSequence + SequenceAt (torch.split / torch.chunk) -------------------------

int CountOps(const Model& m, const std::string& op) {
  int k = 0;
  for (const Node& n : m.graph.nodes) k += n.op_type == op;
  return k;
}

// x [3, 7, 2] (batch symbolic in `dynamic`), split along axis 1 as torch.split(x, 3, 1):
// chunks of 3, 3, 1. Reads chunk 0 and chunk -1 (the last), and their concatenation.
Model SplitModel(int64_t opset, bool with_concat, bool with_length) {
  ModelBuilder b;
  b.Opset(opset);
  b.Input("x", DType::kFloat32, {3, 7, 2});
  b.model().graph.inputs.back().dims[0] = Dim{-1, "batch"};
  b.Const(HostTensor::FromVector<int64_t>({3}, {}, "chunk"));
  b.Const(HostTensor::FromVector<int64_t>({0}, {}, "p0"));
  b.Const(HostTensor::FromVector<int64_t>({-1}, {}, "plast"));
  Node& s = b.Op("SplitToSequence", {"x", "chunk"}, "seq");
  s.SetInt("axis", 1);
  b.Op("SequenceAt", {"seq", "p0"}, "first");
  b.Op("SequenceAt", {"seq", "plast"}, "last");
  b.Output("first", {3, 3, 2}).Output("last", {3, 1, 2});
  if (with_concat) {
    b.Op("ConcatFromSequence", {"seq"}, "all").SetInt("axis", 1);
    b.Output("all", {3, 7, 2});
  }
  if (with_length) {
    b.Op("SequenceLength", {"seq"}, "len");
    b.model().graph.outputs.push_back(ValueInfo{"len", DType::kInt64, true, {}});
  }
  return b.Build();
}

TEST(Opset23, SplitToSequenceBecomesSplit) {
  for (int64_t opset : {11, 18, 23}) {
    SCOPED_TRACE("opset " + std::to_string(opset));
    Model m = SplitModel(opset, true, true);
    EXPECT_EQ(RewriteSequenceOps(m), 5);
    EXPECT_EQ(CountOps(m, "Split"), 1);
    EXPECT_EQ(CountOps(m, "Concat"), 1);
    EXPECT_EQ(CountOps(m, "SplitToSequence") + CountOps(m, "SequenceAt") + CountOps(m, "ConcatFromSequence") +
                  CountOps(m, "SequenceLength"),
              0);
    EXPECT_NO_THROW(CheckModel(m));
    HostTensor x = Wavy({3, 7, 2});
    Executor exec(m);
    auto out = exec.Run({{"x", Tensor::FromHost(x)}}, {"first", "last", "all", "len"});
    ASSERT_EQ(out[0].shape(), (Shape{3, 3, 2}));
    ASSERT_EQ(out[1].shape(), (Shape{3, 1, 2}));
    ASSERT_EQ(out[2].shape(), (Shape{3, 7, 2}));
    EXPECT_EQ(out[3].ToHost().Data<int64_t>()[0], 3);
    const HostTensor first = out[0].ToHost(), last = out[1].ToHost(), all = out[2].ToHost();
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t c = 0; c < 7; ++c)
        for (int64_t k = 0; k < 2; ++k) {
          const float v = x.Data<float>()[(i * 7 + c) * 2 + k];
          EXPECT_EQ(all.Data<float>()[(i * 7 + c) * 2 + k], v);
          if (c < 3) { EXPECT_EQ(first.Data<float>()[(i * 3 + c) * 2 + k], v); }
          if (c == 6) { EXPECT_EQ(last.Data<float>()[i * 2 + k], v); }
        }
  }
}

// keepdims 0 without split: chunks of one, squeezed (torch.unbind); a list of lengths; both
// through the ONNX loader (LoadModelFromBytes rewrites before the checker runs).
TEST(Opset23, SplitToSequenceSqueezedAndListFormsThroughTheLoader) {
  ModelBuilder b;
  b.Opset(18);
  b.Input("x", DType::kFloat32, {3, 4, 5});
  b.Const(HostTensor::FromVector<int64_t>({1, 2, 2}, {3}, "lengths"));
  b.Const(HostTensor::FromVector<int64_t>({2}, {}, "p2"));
  b.Const(HostTensor::FromVector<int64_t>({1}, {}, "p1"));
  Node& u = b.Op("SplitToSequence", {"x"}, "rows");
  u.SetInt("axis", -2);
  u.SetInt("keepdims", 0);
  b.Op("SequenceAt", {"rows", "p2"}, "row2");
  b.Op("SequenceAt", {"rows", "p2"}, "row2_again");
  Node& l = b.Op("SplitToSequence", {"x", "lengths"}, "parts");
  l.SetInt("axis", 2);
  b.Op("SequenceAt", {"parts", "p1"}, "part1");
  b.Op("ConcatFromSequence", {"rows"}, "stacked").SetInt("axis", 1);
  b.model().graph.nodes.back().SetInt("new_axis", 1);
  b.Output("row2", {3, 5}).Output("row2_again", {3, 5}).Output("part1", {3, 4, 2}).Output("stacked", {3, 4, 5});
  onnx::ModelProto proto;
  ModelToProto(b.Build(), &proto);
  std::string bytes;
  ASSERT_TRUE(proto.SerializeToString(&bytes));
  Model m = LoadModelFromBytes(bytes, "test model", ".");
  EXPECT_EQ(CountOps(m, "Split"), 2);
  EXPECT_EQ(CountOps(m, "Squeeze"), 4);
  EXPECT_EQ(CountOps(m, "Unsqueeze"), 4);
  HostTensor x = Wavy({3, 4, 5});
  Executor exec(m);
  auto out = exec.Run({{"x", Tensor::FromHost(x)}}, {"row2", "row2_again", "part1", "stacked"});
  ASSERT_EQ(out[0].shape(), (Shape{3, 5}));
  ASSERT_EQ(out[2].shape(), (Shape{3, 4, 2}));
  ASSERT_EQ(out[3].shape(), (Shape{3, 4, 5}));
  const HostTensor row2 = out[0].ToHost(), again = out[1].ToHost(), part1 = out[2].ToHost(), st = out[3].ToHost();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t k = 0; k < 5; ++k) {
        const float v = x.Data<float>()[(i * 4 + r) * 5 + k];
        EXPECT_EQ(st.Data<float>()[(i * 4 + r) * 5 + k], v);
        if (r == 2) { EXPECT_EQ(row2.Data<float>()[i * 5 + k], v); }
        if (r == 2) { EXPECT_EQ(again.Data<float>()[i * 5 + k], v); }
        if (k == 1 || k == 2) { EXPECT_EQ(part1.Data<float>()[(i * 4 + r) * 2 + k - 1], v); }
      }
}

// The split value has no recorded shape: the chunk count comes from ONNX shape inference.
TEST(Opset23, SplitToSequenceAxisLengthFromShapeInference) {
  ModelBuilder b;
  b.Opset(18);
  b.Input("x", DType::kFloat32, {2, 6});
  b.Const(HostTensor::FromVector<int64_t>({4}, {}, "chunk"));
  b.Const(HostTensor::FromVector<int64_t>({-1}, {}, "plast"));
  b.Op("Neg", {"x"}, "negx");
  b.Op("SplitToSequence", {"negx", "chunk"}, "seq").SetInt("axis", 1);
  b.Op("SequenceAt", {"seq", "plast"}, "tail");
  b.Output("tail", {2, 2});
  Model m = b.Build();
  ASSERT_EQ(m.graph.value_info.count("negx"), 0u);
  EXPECT_EQ(RewriteSequenceOps(m), 2);
  HostTensor x = Wavy({2, 6});
  const std::vector<float> tail = RunOne(m, x, "tail");
  ASSERT_EQ(tail.size(), 4u);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 2; ++k) EXPECT_EQ(tail[static_cast<size_t>(i * 2 + k)], -x.Data<float>()[i * 6 + 4 + k]);
}

TEST(Opset23, SplitToSequenceGradientsMatchFiniteDifferences) {
  ModelBuilder b;
  b.Opset(18);
  b.Param("x", {3, 7}, -1.f, 1.f);
  b.Const(HostTensor::FromVector<int64_t>({3}, {}, "chunk"));
  b.Const(HostTensor::FromVector<int64_t>({0}, {}, "p0"));
  b.Const(HostTensor::FromVector<int64_t>({2}, {}, "p2"));
  b.Op("SplitToSequence", {"x", "chunk"}, "seq").SetInt("axis", 1);
  b.Op("SequenceAt", {"seq", "p0"}, "a");
  b.Op("SequenceAt", {"seq", "p2"}, "c");
  b.Op("Tanh", {"a"}, "ta");
  b.Op("Concat", {"ta", "c", "a"}, "y").SetInt("axis", 1);
  ASSERT_EQ(RewriteSequenceOps(b.model()), 3);
  TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", {3, 7});
  ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
}

TEST(Opset23, OtherSequenceUsesAreRefusedByName) {
  auto error_of = [](const std::function<void(ModelBuilder&)>& build) {
    ModelBuilder b;
    b.Opset(18);
    b.Input("x", DType::kFloat32, {2, 6});
    b.Const(HostTensor::FromVector<int64_t>({0}, {}, "p0"));
    build(b);
    Model m = b.Build();
    try {
      RewriteSequenceOps(m);
    } catch (const UnsupportedError& e) {
      return std::string(e.what());
    }
    return std::string("no UnsupportedError");
  };
  // A position that is not a constant.
  std::string e = error_of([](ModelBuilder& b) {
    b.Op("SplitToSequence", {"x"}, "seq").SetInt("axis", 1);
    b.Op("Shape", {"x"}, "shape");
    b.Op("ReduceMin", {"shape"}, "pos").SetInt("keepdims", 0);
    b.Op("SequenceAt", {"seq", "pos"}, "y");
  });
  EXPECT_NE(e.find("node 'SequenceAt_3' (SequenceAt): its position 'pos'"), std::string::npos) << e;
  EXPECT_NE(e.find("is not a constant integer"), std::string::npos) << e;
  // A sequence built another way.
  e = error_of([](ModelBuilder& b) {
    b.Op("SequenceConstruct", {"x", "x"}, "seq");
    b.Op("SequenceAt", {"seq", "p0"}, "y");
  });
  EXPECT_NE(e.find("node 'SequenceConstruct_0' (SequenceConstruct): sequences are not supported"), std::string::npos)
      << e;
  // A reader that is neither SequenceAt, ConcatFromSequence nor SequenceLength.
  e = error_of([](ModelBuilder& b) {
    b.Op("SplitToSequence", {"x"}, "seq").SetInt("axis", 1);
    b.Op("SequenceInsert", {"seq", "x"}, "seq2");
  });
  EXPECT_NE(e.find("node 'SequenceInsert_1' (SequenceInsert): reads the sequence 'seq'"), std::string::npos) << e;
  // A chunk size with the axis length unknown.
  e = error_of([](ModelBuilder& b) {
    b.model().graph.inputs.back().dims[1] = Dim{-1, "len"};
    b.Const(HostTensor::FromVector<int64_t>({2}, {}, "chunk"));
    b.Op("SplitToSequence", {"x", "chunk"}, "seq").SetInt("axis", 1);
    b.Op("SequenceAt", {"seq", "p0"}, "y");
  });
  EXPECT_NE(e.find("the length of axis 1 of its input 'x' is not static"), std::string::npos) << e;
}

}  // namespace
}  // namespace ot
