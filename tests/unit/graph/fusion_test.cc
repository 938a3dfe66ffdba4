// Fusion of PyTorch's decomposed GELU and LayerNorm before differentiation
// (graph/passes/fusion.h), BatchNorm+ReLU in the training graph (graph/passes/fusion.h), and
// rank inference through run-time shapes (graph/passes/rank_inference.h): which graphs are
// rewritten and which are left alone, finite differences through the fused kernels, and
// the fused training graph against the unfused one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "graph/autodiff/autodiff.h"
#include "graph/passes/amp_pass.h"
#include "graph/passes/fusion.h"
#include "graph/autodiff/gradient_registry.h"
#include "graph/passes/rank_inference.h"
#include "runtime/executor/executor.h"
#include "tests/common/grad_check.h"

namespace ot {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using testing::ExpectSameLossAndGradients;
using testing::ModelBuilder;

// x * 0.5 * (1 + erf(x * (1 / sqrt2))), as hand-written GELUs export.
void HalfFirstGelu(ModelBuilder& b, const std::string& x, const std::string& y) {
  b.ScalarConstant(y + "/rsqrt2", 0.70710678f);
  b.ScalarConstant(y + "/one", 1.f);
  b.ScalarConstant(y + "/half", 0.5f);
  b.Op("Mul", {y + "/half", x}, y + "/h");
  b.Op("Mul", {x, y + "/rsqrt2"}, y + "/scaled");
  b.Op("Erf", {y + "/scaled"}, y + "/erf");
  b.Op("Add", {y + "/one", y + "/erf"}, y + "/add");
  b.Op("Mul", {y + "/h", y + "/add"}, y);
}

// torch.onnx's layer_norm before opset 17, over the last `axes` axes.
void TorchLayerNorm(ModelBuilder& b, const std::string& x, const std::string& y, std::vector<int64_t> axes,
                    const std::string& gamma, const std::string& beta) {
  b.ScalarConstant(y + "/two", 2.f);
  b.ScalarConstant(y + "/eps", 1e-5f);
  b.Op("ReduceMean", {x}, y + "/mean").SetInts("axes", axes);
  b.Op("Sub", {x, y + "/mean"}, y + "/d");
  b.Op("Pow", {y + "/d", y + "/two"}, y + "/sq");
  b.Op("ReduceMean", {y + "/sq"}, y + "/var").SetInts("axes", axes);
  b.Op("Add", {y + "/var", y + "/eps"}, y + "/ve");
  b.Op("Sqrt", {y + "/ve"}, y + "/std");
  b.Op("Div", {y + "/d", y + "/std"}, y + "/n");
  b.Op("Mul", {y + "/n", gamma}, beta.empty() ? y : y + "/scaled");
  if (!beta.empty()) b.Op("Add", {y + "/scaled", beta}, y);
}

// loss = ReduceSum(y * w), w fixed (frozen by Train).
Model WithLoss(ModelBuilder& b, const std::string& y, std::vector<int64_t> dims) {
  testing::AddWeightedSumLoss(b, y, std::move(dims));
  return b.Build();
}

TrainingGraph Train(const Model& m, bool fuse) { return testing::TrainFrozenLossWeights(m, fuse); }

int Count(const Model& m, const std::string& op, const std::string& domain = "") {
  int n = 0;
  for (const auto& node : m.graph.nodes) n += node.op_type == op && node.domain == domain;
  return n;
}

// The fused and the unfused training graphs: same loss and gradients within float32
// rounding.
void ExpectSameAsUnfused(const Model& m, const TrainingGraph& fused) {
  const TrainingGraph plain = Train(m, false);
  ExpectSameLossAndGradients(fused, plain, 2e-5);
}

TEST(Fusion, TorchLayerNormAndBothGeluFormsFuseAndMatchFiniteDifferences) {
  for (std::vector<int64_t> axes : {std::vector<int64_t>{-1}, std::vector<int64_t>{-2, -1}}) {
    SCOPED_TRACE("LayerNorm over " + std::to_string(axes.size()) + " axes");
    ModelBuilder b;
    b.Param("x", {2, 3, 8}, -2.f, 2.f);
    b.Param("gamma", axes.size() == 1 ? std::vector<int64_t>{8} : std::vector<int64_t>{3, 8}, 0.5f, 1.5f);
    b.Param("beta", {8}, -0.5f, 0.5f);
    TorchLayerNorm(b, "x", "ln", axes, "gamma", "beta");
    b.TorchGelu("ln", "g1");
    HalfFirstGelu(b, "g1", "g2");
    const Model m = WithLoss(b, "g2", {2, 3, 8});
    const TrainingGraph tg = Train(m, true);
    EXPECT_EQ(Count(tg.model, "Gelu", kGradDomain), 2);
    EXPECT_EQ(Count(tg.model, "LayerNormalization", kGradDomain), 1);
    EXPECT_EQ(Count(tg.model, "Erf"), 0);
    EXPECT_EQ(Count(tg.model, "Sqrt"), 0);
    ASSERT_EQ(tg.params.size(), 3u);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
    ExpectSameAsUnfused(m, tg);
  }
}

TEST(Fusion, LayerNormWithoutBiasFusesWithScaleOnly) {
  ModelBuilder b;
  b.Param("x", {4, 6}, -1.f, 1.f).Param("gamma", {6}, 0.5f, 1.5f);
  TorchLayerNorm(b, "x", "ln", {-1}, "gamma", "");
  const Model m = WithLoss(b, "ln", {4, 6});
  const TrainingGraph tg = Train(m, true);
  EXPECT_EQ(Count(tg.model, "LayerNormalization", kGradDomain), 1);
  ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  ExpectSameAsUnfused(m, tg);
}

// A pattern whose intermediate value is read elsewhere, or whose constants or axes differ,
// stays as it is (and still trains right).
TEST(Fusion, PatternsWithOtherReadersOrOtherConstantsAreLeftAlone) {
  {
    SCOPED_TRACE("erf output also read by another node");
    ModelBuilder b;
    b.Param("x", {3, 5}, -2.f, 2.f);
    b.TorchGelu("x", "g");
    b.Op("Add", {"g", "g/erf"}, "y");
    const TrainingGraph tg = Train(WithLoss(b, "y", {3, 5}), true);
    EXPECT_EQ(Count(tg.model, "Gelu", kGradDomain), 0);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  }
  {
    SCOPED_TRACE("Div by 2 is not GELU");
    ModelBuilder b;
    b.Param("x", {3, 5}, -2.f, 2.f);
    b.ScalarConstant("two", 2.f);
    b.ScalarConstant("one", 1.f);
    b.ScalarConstant("half", 0.5f);
    b.Op("Div", {"x", "two"}, "d");
    b.Op("Erf", {"d"}, "e");
    b.Op("Add", {"e", "one"}, "a");
    b.Op("Mul", {"x", "a"}, "m");
    b.Op("Mul", {"m", "half"}, "y");
    const TrainingGraph tg = Train(WithLoss(b, "y", {3, 5}), true);
    EXPECT_EQ(Count(tg.model, "Gelu", kGradDomain), 0);
  }
  {
    SCOPED_TRACE("LayerNorm-like statistics over a middle axis");
    ModelBuilder b;
    b.Param("x", {2, 3, 4}, -1.f, 1.f).Param("gamma", {4}, 0.5f, 1.5f);
    TorchLayerNorm(b, "x", "ln", {1}, "gamma", "");
    const TrainingGraph tg = Train(WithLoss(b, "ln", {2, 3, 4}), true);
    EXPECT_EQ(Count(tg.model, "LayerNormalization", kGradDomain), 0);
    EXPECT_EQ(Count(tg.model, "Sqrt"), 1);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  }
  {
    SCOPED_TRACE("the centred value is a graph output");
    ModelBuilder b;
    b.Param("x", {2, 6}, -1.f, 1.f).Param("gamma", {6}, 0.5f, 1.5f);
    TorchLayerNorm(b, "x", "ln", {-1}, "gamma", "");
    b.Output("ln/d", {2, 6});
    const TrainingGraph tg = Train(WithLoss(b, "ln", {2, 6}), true);
    EXPECT_EQ(Count(tg.model, "LayerNormalization", kGradDomain), 0);
  }
}

// Attention written out as ops (graph/passes/fusion.h). Masks: none, an additive parameter (a
// learned bias: its gradient flows through the fused node), a causal constant (becomes
// is_causal) and a bool one through Where(cond, scores, -inf).
enum class AttnMask { kNone, kLearnedBias, kCausalConstant, kBoolWhere };

HostTensor CausalMask(int64_t t, bool as_bool) {
  HostTensor m(as_bool ? DType::kBool : DType::kFloat32, {t, t});
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j) {
      if (as_bool) m.Data<uint8_t>()[i * t + j] = j <= i;
      else m.Data<float>()[i * t + j] = j <= i ? 0.f : -std::numeric_limits<float>::infinity();
    }
  return m;
}

// Masks the scores `s` into `out` as `mask` says (no-op copy for kNone).
std::string MaskScores(ModelBuilder& b, const std::string& s, AttnMask mask, int64_t t) {
  switch (mask) {
    case AttnMask::kNone:
      return s;
    case AttnMask::kLearnedBias:
      b.Param("bias", {t, t}, -1.f, 1.f);
      b.Op("Add", {s, "bias"}, "masked");
      return "masked";
    case AttnMask::kCausalConstant:
      b.Op("Constant", {}, "causal").SetTensor("value", CausalMask(t, false));
      b.Op("Add", {s, "causal"}, "masked");
      return "masked";
    case AttnMask::kBoolWhere: {
      HostTensor m = CausalMask(t, true);
      m.Data<uint8_t>()[0] = 1;
      if (t > 2) m.Data<uint8_t>()[t + 1] = 0;  // not causal: a bool mask input
      b.Op("Constant", {}, "keep").SetTensor("value", m);
      b.ScalarConstant("neg_inf", -std::numeric_limits<float>::infinity());
      b.Op("Where", {"keep", s, "neg_inf"}, "masked");
      return "masked";
    }
  }
  return s;
}

// A hand-written attention on 4D [2, 3, t, 8]: Softmax(Q Transpose(K) / sqrt(8) [+ mask]) V.
Model HandWrittenAttention(int64_t t, AttnMask mask, int64_t softmax_axis = -1) {
  ModelBuilder b;
  b.Param("q", {2, 3, t, 8}, -1.f, 1.f).Param("k", {2, 3, t, 8}, -1.f, 1.f).Param("v", {2, 3, t, 8}, -1.f, 1.f);
  b.ScalarConstant("sqrt_d", std::sqrt(8.f));
  b.Op("Transpose", {"k"}, "kt").SetInts("perm", {0, 1, 3, 2});
  b.Op("MatMul", {"q", "kt"}, "qk");
  b.Op("Div", {"qk", "sqrt_d"}, "scores");
  b.Op("Softmax", {MaskScores(b, "scores", mask, t)}, "p").SetInt("axis", softmax_axis);
  b.Op("MatMul", {"p", "v"}, "y");
  return WithLoss(b, "y", {2, 3, t, 8});
}

// torch 1.13's nn.MultiheadAttention on [batch * heads = 6, t, 4]: the scale on Q, K^T from
// a sequence-first [t, 6, 4] by Transpose [1, 2, 0], baddbmm's Mul by Cast(1) and the mask
// Unsqueeze(mask, 0) * Cast(1).
// sequence_first: Q and V too come as [t, 6, 4] through Transpose [1, 0, 2], and Y goes back
// through one (as the real module has them; the fused node then reads and writes them so).
Model LegacyMultiheadAttention(int64_t t, AttnMask mask, bool sequence_first) {
  ModelBuilder b;
  if (sequence_first) {
    b.Param("q_sf", {t, 6, 4}, -1.f, 1.f).Param("v_sf", {t, 6, 4}, -1.f, 1.f);
    b.Op("Transpose", {"q_sf"}, "q").SetInts("perm", {1, 0, 2});
    b.Op("Transpose", {"v_sf"}, "v").SetInts("perm", {1, 0, 2});
  } else {
    b.Param("q", {6, t, 4}, -1.f, 1.f).Param("v", {6, t, 4}, -1.f, 1.f);
  }
  b.Param("k", {t, 6, 4}, -1.f, 1.f);
  b.ScalarConstant("sqrt_d", 2.f);
  b.Op("Constant", {}, "one_i").SetTensor("value", HostTensor::FromVector<int64_t>({1}, {}));
  b.Op("Cast", {"one_i"}, "one").SetInt("to", 1);
  b.Op("Div", {"q", "sqrt_d"}, "qs");
  b.Op("Transpose", {"k"}, "kt").SetInts("perm", {1, 2, 0});
  b.Op("MatMul", {"qs", "kt"}, "qk");
  b.Op("Mul", {"qk", "one"}, "beta_qk");
  std::string s = "beta_qk";
  if (mask != AttnMask::kNone) {
    if (mask == AttnMask::kCausalConstant) b.Op("Constant", {}, "m").SetTensor("value", CausalMask(t, false));
    else b.Param("m", {t, t}, -1.f, 1.f);
    b.Const(HostTensor::FromVector<int64_t>({0}, {1}, "axis0"));
    b.Op("Unsqueeze", {"m", "axis0"}, "m3");
    b.Op("Mul", {"m3", "one"}, "m3_alpha");
    b.Op("Add", {"beta_qk", "m3_alpha"}, "masked");
    s = "masked";
  }
  b.Op("Softmax", {s}, "p").SetInt("axis", -1);
  b.Op("MatMul", {"p", "v"}, "y");
  if (!sequence_first) return WithLoss(b, "y", {6, t, 4});
  b.Op("Transpose", {"y"}, "y_sf").SetInts("perm", {1, 0, 2});
  return WithLoss(b, "y_sf", {t, 6, 4});
}
Model LegacyBatchFirst(int64_t t, AttnMask mask) { return LegacyMultiheadAttention(t, mask, false); }
Model LegacySequenceFirst(int64_t t, AttnMask mask) { return LegacyMultiheadAttention(t, mask, true); }

// torch 2.x's dynamo exporter of scaled_dot_product_attention below opset 23: Q and K^T
// each scaled by sqrt(scale) before the product, K^T a value of its own (here a parameter).
Model DynamoAttention(int64_t t, AttnMask mask) {
  ModelBuilder b;
  b.Param("q", {2, 2, t, 8}, -1.f, 1.f).Param("kt", {2, 2, 8, t}, -1.f, 1.f).Param("v", {2, 2, t, 8}, -1.f, 1.f);
  b.ScalarConstant("root_scale", std::sqrt(1.f / std::sqrt(8.f)));
  b.Op("Mul", {"q", "root_scale"}, "qs");
  b.Op("Mul", {"kt", "root_scale"}, "kts");
  b.Op("MatMul", {"qs", "kts"}, "scores");
  b.Op("Softmax", {MaskScores(b, "scores", mask, t)}, "p").SetInt("axis", -1);
  b.Op("MatMul", {"p", "v"}, "y");
  return WithLoss(b, "y", {2, 2, t, 8});
}

// The forms of PyTorch's exporters fuse into one Attention each, at odd lengths and T = 1,
// with every mask kind, and train as the unfused graph does (finite differences too); a
// causal constant becomes is_causal.
// SiLU as torch.nn.SiLU exports it (Sigmoid then Mul, either operand order) fuses into one
// org.onnxtrain Silu; a squeeze-excitation gate (Mul of other features by a Sigmoid) and a
// Sigmoid read twice stay. Gradients against finite differences and the unfused graph.
TEST(Fusion, SiluFusesBothOperandOrdersAndLeavesGatesAlone) {
  ModelBuilder b;
  b.Param("x", {2, 3, 4, 5}, -4.f, 4.f).Param("f", {2, 3, 4, 5}, -1.f, 1.f);
  b.Op("Sigmoid", {"x"}, "s1");
  b.Op("Mul", {"x", "s1"}, "y1");  // x * sigmoid(x)
  b.Op("Sigmoid", {"y1"}, "s2");
  b.Op("Mul", {"s2", "y1"}, "y2");  // sigmoid(y) * y
  b.Op("Sigmoid", {"y2"}, "gate");
  b.Op("Mul", {"f", "gate"}, "y3");  // a gate: not SiLU
  b.Op("Sigmoid", {"y3"}, "s4");
  b.Op("Mul", {"y3", "s4"}, "y4");
  b.Op("Add", {"y4", "s4"}, "y5");  // s4 read twice: not fused
  const Model m = WithLoss(b, "y5", {2, 3, 4, 5});
  const TrainingGraph tg = Train(m, true);
  EXPECT_EQ(Count(tg.model, "Silu", kGradDomain), 2);
  EXPECT_EQ(Count(tg.model, "Sigmoid"), 2);
  ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  ExpectSameAsUnfused(m, tg);
  const TrainingGraph plain = Train(m, false);
  EXPECT_EQ(Count(plain.model, "Silu", kGradDomain), 0);
}

TEST(Fusion, AttentionFormsOfBothExportersFuseAndTrainAsUnfused) {
  struct Case {
    const char* name;
    Model (*make)(int64_t, AttnMask);
    AttnMask mask;
  };
  const Case cases[] = {
      {"hand-written, no mask", [](int64_t t, AttnMask m) { return HandWrittenAttention(t, m); }, AttnMask::kNone},
      {"hand-written, learned bias", [](int64_t t, AttnMask m) { return HandWrittenAttention(t, m); },
       AttnMask::kLearnedBias},
      {"hand-written, causal", [](int64_t t, AttnMask m) { return HandWrittenAttention(t, m); },
       AttnMask::kCausalConstant},
      {"hand-written, bool Where", [](int64_t t, AttnMask m) { return HandWrittenAttention(t, m); },
       AttnMask::kBoolWhere},
      {"torch 1.13 MHA, no mask", LegacyBatchFirst, AttnMask::kNone},
      {"torch 1.13 MHA, learned mask", LegacyBatchFirst, AttnMask::kLearnedBias},
      {"torch 1.13 MHA, causal", LegacyBatchFirst, AttnMask::kCausalConstant},
      {"torch 1.13 MHA sequence-first, learned mask", LegacySequenceFirst, AttnMask::kLearnedBias},
      {"torch 1.13 MHA sequence-first, causal", LegacySequenceFirst, AttnMask::kCausalConstant},
      {"dynamo, no mask", DynamoAttention, AttnMask::kNone},
      {"dynamo, causal", DynamoAttention, AttnMask::kCausalConstant},
  };
  for (const Case& c : cases)
    for (int64_t t : {int64_t{1}, int64_t{5}, int64_t{19}, int64_t{150}}) {  // 150: two 128-wide tiles
      SCOPED_TRACE(std::string(c.name) + ", T " + std::to_string(t));
      const Model m = c.make(t, c.mask);
      const TrainingGraph tg = Train(m, true);
      EXPECT_EQ(Count(tg.model, "Attention", kGradDomain), 1);
      EXPECT_EQ(Count(tg.model, "AttentionGrad", kGradDomain), 1);
      EXPECT_EQ(Count(tg.model, "Softmax"), 0);
      if (c.make == LegacySequenceFirst) {
        EXPECT_EQ(Count(tg.model, "Transpose"), 0);  // all absorbed
      }
      for (const auto& n : tg.model.graph.nodes) {
        if (n.op_type != "Attention") continue;  // (a 1 x 1 bool mask of true is causal too)
        EXPECT_EQ(n.GetInt("is_causal", 0),
                  c.mask == AttnMask::kCausalConstant || (c.mask == AttnMask::kBoolWhere && t == 1));
      }
      if (t < 19) ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
      ExpectSameAsUnfused(m, tg);
      // The CPU kernel keeps the probabilities (output 5) for the backward where the keys fit
      // one 128-wide tile, and leaves the output empty (flash: logsumexp only) beyond.
      for (const auto& n : tg.model.graph.nodes)
        if (n.op_type == "Attention" && n.HasOutput(5)) {
          Executor e(tg.model);
          const std::vector<Tensor> kept = e.Run({}, {n.outputs[5]});
          EXPECT_EQ(kept[0].numel() > 0, t <= 128);
        }
    }
}

// --amp bf16 on the CPU: the Cast to bfloat16 of a fused GELU's output (2D: read by the Linear's
// Gemm directly; 3D: through the Flatten of its Gemm form) goes into the Gelu, which writes
// bfloat16 rounded as the Cast rounds: loss and gradients bitwise those of the graph with the
// Cast. A GELU output read by another node as well keeps its Cast.
TEST(Fusion, BFloat16CastOfGeluOutputFoldsIntoTheGelu) {
  for (int form = 0; form < 3; ++form) {
    SCOPED_TRACE(form == 0 ? "2D" : form == 1 ? "3D" : "read twice");
    ModelBuilder b;
    const std::vector<int64_t> x_dims = form == 0 ? std::vector<int64_t>{6, 8} : std::vector<int64_t>{3, 4, 8};
    b.Param("x", x_dims, -3.f, 3.f).Param("w", {5, 8}, -1.f, 1.f);
    b.TorchGelu("x", "g");
    b.Op("Transpose", {"w"}, "wt").SetInts("perm", {1, 0});  // a Linear layer as torch exports it
    b.Op("MatMul", {"g", "wt"}, "y");
    std::vector<int64_t> y_dims = x_dims;
    y_dims.back() = 5;
    std::string out = "y";
    if (form == 2) {
      b.Op("ReduceSum", {"g"}, "gs").SetInt("keepdims", 1);  // [1, 1, 1]: g read twice
      b.Op("Add", {"y", "gs"}, "y2");
      out = "y2";
    }
    const TrainingGraph plain = Train(WithLoss(b, out, y_dims), true);
    ASSERT_EQ(Count(plain.model, "Gelu", kGradDomain), 1);
    TrainingGraph cast = plain;
    InsertAmpCasts(cast.model, AmpMode::kBFloat16);
    TrainingGraph folded = cast;
    const int n = FoldBFloat16CastsIntoActivations(folded.model);
    EXPECT_EQ(n, form == 2 ? 0 : 1);
    EXPECT_EQ(Count(folded.model, "Cast"), Count(cast.model, "Cast") - n);
    for (const auto& node : folded.model.graph.nodes) {
      if (node.op_type == "Gelu") {
        EXPECT_EQ(node.HasAttr("to"), n == 1);
      }
    }
    std::vector<std::string> fetch = {cast.loss};
    fetch.insert(fetch.end(), cast.grads.begin(), cast.grads.end());
    Executor a(cast.model), c(folded.model);
    const std::vector<Tensor> want = a.Run({}, fetch), got = c.Run({}, fetch);
    for (size_t i = 0; i < want.size(); ++i) {
      const HostTensor tw = want[i].ToHost(), tg = got[i].ToHost();
      ASSERT_EQ(tw.dims, tg.dims) << fetch[i];
      for (int64_t k = 0; k < tw.NumElements(); ++k)
        EXPECT_EQ(tw.Data<float>()[k], tg.Data<float>()[k]) << fetch[i] << "[" << k << "]";
    }
  }
}

// Near misses stay as they are: Softmax over another axis, scores read elsewhere, a scale
// after the mask, a Where that fills with a finite value.
TEST(Fusion, AttentionNearMissesAreLeftAlone) {
  {
    SCOPED_TRACE("Softmax over the query axis");
    const TrainingGraph tg = Train(HandWrittenAttention(5, AttnMask::kNone, 2), true);
    EXPECT_EQ(Count(tg.model, "Attention", kGradDomain), 0);
    EXPECT_EQ(Count(tg.model, "Softmax"), 1);
  }
  {
    SCOPED_TRACE("the scores are also an output");
    ModelBuilder b;
    b.Param("q", {2, 5, 4}, -1.f, 1.f).Param("kt", {2, 4, 5}, -1.f, 1.f).Param("v", {2, 5, 4}, -1.f, 1.f);
    b.Op("MatMul", {"q", "kt"}, "s");
    b.Op("Softmax", {"s"}, "p").SetInt("axis", -1);
    b.Op("MatMul", {"p", "v"}, "y");
    b.Output("s", {2, 5, 5});
    const TrainingGraph tg = Train(WithLoss(b, "y", {2, 5, 4}), true);
    EXPECT_EQ(Count(tg.model, "Attention", kGradDomain), 0);
  }
  {
    SCOPED_TRACE("scaled after the mask");
    ModelBuilder b;
    b.Param("q", {2, 5, 4}, -1.f, 1.f).Param("kt", {2, 4, 5}, -1.f, 1.f).Param("v", {2, 5, 4}, -1.f, 1.f);
    b.Param("bias", {5, 5}, -1.f, 1.f);
    b.ScalarConstant("two", 2.f);
    b.Op("MatMul", {"q", "kt"}, "s");
    b.Op("Add", {"s", "bias"}, "sb");
    b.Op("Div", {"sb", "two"}, "sd");
    b.Op("Softmax", {"sd"}, "p").SetInt("axis", -1);
    b.Op("MatMul", {"p", "v"}, "y");
    const TrainingGraph tg = Train(WithLoss(b, "y", {2, 5, 4}), true);
    EXPECT_EQ(Count(tg.model, "Attention", kGradDomain), 0);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  }
  {
    SCOPED_TRACE("Where filling with -1e4");
    ModelBuilder b;
    b.Param("q", {2, 5, 4}, -1.f, 1.f).Param("kt", {2, 4, 5}, -1.f, 1.f).Param("v", {2, 5, 4}, -1.f, 1.f);
    b.Op("Constant", {}, "keep").SetTensor("value", CausalMask(5, true));
    b.ScalarConstant("fill", -1e4f);
    b.Op("MatMul", {"q", "kt"}, "s");
    b.Op("Where", {"keep", "s", "fill"}, "sm");
    b.Op("Softmax", {"sm"}, "p").SetInt("axis", -1);
    b.Op("MatMul", {"p", "v"}, "y");
    const TrainingGraph tg = Train(WithLoss(b, "y", {2, 5, 4}), true);
    EXPECT_EQ(Count(tg.model, "Attention", kGradDomain), 0);
  }
}

// Conv -> BatchNormalization -> Relu, `blocks` times, on [n, c, h, w]; the convolutions keep
// c channels (so a runtime may run them and the normalisations in a channel-blocked
// layout). first_conv=false starts with the normalisation of the input itself (plain).
Model ConvBnReluModel(int64_t n, int64_t c, int64_t h, int64_t w, int blocks, bool first_conv) {
  ModelBuilder b;
  b.Param("x", {n, c, h, w}, -1.f, 1.f);
  std::string cur = "x";
  for (int k = 0; k < blocks; ++k) {
    const std::string p = "b" + std::to_string(k) + "/";
    if (k > 0 || first_conv) {
      b.Param(p + "w", {c, c, 3, 3}, -0.3f, 0.3f);
      b.Op("Conv", {cur, p + "w"}, p + "conv").SetInts("pads", {1, 1, 1, 1});
      cur = p + "conv";
    }
    b.Param(p + "scale", {c}, 0.5f, 1.5f).Param(p + "bias", {c}, -0.3f, 0.3f);
    b.Param(p + "mean", {c}, -0.2f, 0.2f).Param(p + "var", {c}, 0.5f, 1.5f);
    b.Op("BatchNormalization", {cur, p + "scale", p + "bias", p + "mean", p + "var"}, p + "bn");
    b.Op("Relu", {p + "bn"}, p + "relu");
    cur = p + "relu";
  }
  return WithLoss(b, cur, {n, c, h, w});
}

// BatchNormTraining + Relu and ReluGrad + BatchNormalizationGrad become one node each; the
// fused graph trains like the unfused one, in channel-blocked layouts (8 and 16 channels,
// after convolutions) and plain ones (the input's own normalisation), at batch 1 and odd
// sizes.
TEST(TrainingFusion, BatchNormReluFusesForwardAndBackwardAndTrainsAsUnfused) {
  struct Case {
    int64_t n, c, h, w;
    int blocks;
    bool first_conv;
  };
  for (const Case& k : {Case{2, 8, 5, 6, 2, true}, Case{1, 16, 3, 7, 2, true}, Case{3, 5, 4, 3, 1, false},
                        Case{4, 16, 2, 2, 3, false}}) {
    SCOPED_TRACE(std::to_string(k.n) + "x" + std::to_string(k.c) + "x" + std::to_string(k.h) + "x" +
                 std::to_string(k.w) + " blocks " + std::to_string(k.blocks));
    const Model m = ConvBnReluModel(k.n, k.c, k.h, k.w, k.blocks, k.first_conv);
    const TrainingGraph plain = Train(m, false);
    TrainingGraph fused = plain;
    const BatchNormReluFusion f = FuseBatchNormRelu(fused.model);
    EXPECT_EQ(f.forward, k.blocks);
    EXPECT_EQ(f.backward, k.blocks);
    EXPECT_EQ(Count(fused.model, "Relu"), 0);
    EXPECT_EQ(Count(fused.model, "ReluGrad", kGradDomain), 0);
    for (const auto& n : fused.model.graph.nodes)
      if (n.op_type == "BatchNormTraining" || n.op_type == "BatchNormalizationGrad") {
        EXPECT_EQ(n.GetInt("relu", 0), 1) << n.Describe();
        EXPECT_EQ(n.op_type == "BatchNormTraining" ? n.outputs.size() : n.inputs.size(), 6u) << n.Describe();
      }
    // The unfused graph is held to PyTorch float64 by torch_grad_parity_test (which, through
    // `onnx-train grad`, also runs the fused one); finite differences in float32 drown in
    // the rounding of a sum over every activation here.
    ExpectSameLossAndGradients(fused, plain, 1e-5);
    // A second pass finds nothing left to fuse.
    const BatchNormReluFusion again = FuseBatchNormRelu(fused.model);
    EXPECT_EQ(again.forward + again.backward, 0);
  }
}

// BatchNormTraining + Clip (ReLU6 and other bounds around 0, as Constant inputs) becomes
// one BatchNormTraining with clip_min/clip_max; the Clip's gradient reads the clipped value.
// Channel-blocked (after a convolution of 8 or 16 channels) and plain (the input's own
// normalisation); the bounds cut the normalised values on both sides.
TEST(TrainingFusion, BatchNormClipFusesAndTrainsAsUnfused) {
  struct Case {
    int64_t n, c, h, w;
    bool first_conv;
    float lo, hi;
  };
  for (const Case& k : {Case{2, 8, 5, 6, true, 0.f, 0.6f}, Case{3, 16, 3, 4, true, -0.4f, 0.5f},
                        Case{3, 5, 4, 3, false, 0.f, 6.f}, Case{2, 20, 3, 3, true, -0.3f, 0.f}}) {
    SCOPED_TRACE(std::to_string(k.n) + "x" + std::to_string(k.c) + "x" + std::to_string(k.h) + "x" +
                 std::to_string(k.w) + " clip " + std::to_string(k.lo) + ".." + std::to_string(k.hi));
    ModelBuilder b;
    b.Opset(13);
    b.Param("x", {k.n, k.c, k.h, k.w}, -1.f, 1.f);
    std::string cur = "x";
    if (k.first_conv) {
      b.Param("w", {k.c, k.c, 3, 3}, -0.3f, 0.3f);
      b.Op("Conv", {cur, "w"}, "conv").SetInts("pads", {1, 1, 1, 1});
      cur = "conv";
    }
    b.Param("scale", {k.c}, 0.5f, 1.5f).Param("bias", {k.c}, -0.3f, 0.3f);
    b.Param("mean", {k.c}, -0.2f, 0.2f).Param("var", {k.c}, 0.5f, 1.5f);
    b.Op("BatchNormalization", {cur, "scale", "bias", "mean", "var"}, "bn");
    b.ScalarConstant("lo", k.lo);
    b.ScalarConstant("hi", k.hi);
    b.Op("Clip", {"bn", "lo", "hi"}, "clip");
    b.Param("w2", {k.c, k.c, 1, 1}, -0.5f, 0.5f);
    b.Op("Conv", {"clip", "w2"}, "y");
    const Model m = WithLoss(b, "y", {k.n, k.c, k.h, k.w});
    const TrainingGraph plain = Train(m, false);
    TrainingGraph fused = plain;
    EXPECT_EQ(FuseBatchNormClip(fused.model), 1);
    EXPECT_EQ(Count(fused.model, "Clip"), 0);
    for (const auto& n : fused.model.graph.nodes)
      if (n.op_type == "BatchNormTraining") {
        EXPECT_FLOAT_EQ(n.GetFloat("clip_max", 0.f), k.hi) << n.Describe();
      }
    ExpectSameLossAndGradients(fused, plain, 1e-5);
    EXPECT_EQ(FuseBatchNormClip(fused.model), 0);
  }
  {
    SCOPED_TRACE("bounds above 0 and a second reader stay");
    ModelBuilder b;
    b.Opset(13);
    b.Param("x", {2, 4, 3, 3}, -1.f, 1.f).Param("scale", {4}, 0.5f, 1.5f).Param("bias", {4}, -0.3f, 0.3f);
    b.Param("mean", {4}, -0.2f, 0.2f).Param("var", {4}, 0.5f, 1.5f);
    b.Op("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, "bn");
    b.ScalarConstant("lo", 0.1f);
    b.ScalarConstant("hi", 6.f);
    b.Op("Clip", {"bn", "lo", "hi"}, "c1");
    b.Op("BatchNormalization", {"c1", "scale", "bias", "mean", "var"}, "bn2");
    b.ScalarConstant("zero", 0.f);
    b.Op("Clip", {"bn2", "zero", "hi"}, "c2");
    b.Op("Add", {"c2", "bn2"}, "y");
    const TrainingGraph plain = Train(WithLoss(b, "y", {2, 4, 3, 3}), false);
    TrainingGraph fused = plain;
    EXPECT_EQ(FuseBatchNormClip(fused.model), 0);
  }
}

// Where the normalised value has another reader, or is a graph output, the pair stays;
// where no gradient flows back through the normalisation (its input is data and its
// scale and bias are frozen), only the forward fuses and no mask is made.
TEST(TrainingFusion, BatchNormReluWithOtherReadersStaysAndForwardFusesAlone) {
  // bn = BatchNormalization(x), r = Relu(bn), x a [2, 4, 3, 3] parameter.
  auto bn_relu = [](ModelBuilder& b) {
    b.Param("x", {2, 4, 3, 3}, -1.f, 1.f);
    b.Param("s", {4}, 0.5f, 1.5f).Param("bi", {4}, -0.3f, 0.3f).Param("m", {4}, -0.2f, 0.2f).Param("v", {4}, 0.5f, 1.5f);
    b.Op("BatchNormalization", {"x", "s", "bi", "m", "v"}, "bn");
    b.Op("Relu", {"bn"}, "r");
  };
  {
    SCOPED_TRACE("normalised value read twice");
    ModelBuilder b;
    bn_relu(b);
    b.Op("Add", {"r", "bn"}, "y");
    const Model m = WithLoss(b, "y", {2, 4, 3, 3});
    TrainingGraph tg = Train(m, false);
    const BatchNormReluFusion f = FuseBatchNormRelu(tg.model);
    EXPECT_EQ(f.forward + f.backward, 0);
    EXPECT_EQ(Count(tg.model, "Relu"), 1);
  }
  {
    SCOPED_TRACE("normalised value is a graph output");
    ModelBuilder b;
    bn_relu(b);
    b.Output("bn", {2, 4, 3, 3});
    TrainingGraph tg = Train(WithLoss(b, "r", {2, 4, 3, 3}), false);
    EXPECT_EQ(FuseBatchNormRelu(tg.model).forward, 0);
  }
  {
    SCOPED_TRACE("no gradient through the normalisation");
    ModelBuilder b;
    b.Input("img", DType::kFloat32, {2, 8, 4, 4});
    b.Param("s", {8}, 0.5f, 1.5f).Param("bi", {8}, -0.3f, 0.3f).Param("m", {8}, -0.2f, 0.2f).Param("v", {8}, 0.5f, 1.5f);
    b.Param("w", {8, 8, 3, 3}, -0.3f, 0.3f);
    b.Op("BatchNormalization", {"img", "s", "bi", "m", "v"}, "bn");
    b.Op("Relu", {"bn"}, "r");
    b.Op("Conv", {"r", "w"}, "y").SetInts("pads", {1, 1, 1, 1});
    testing::AddWeightedSumLoss(b, "y", {2, 8, 4, 4});
    const Model m = b.Build();
    AutodiffOptions opts;
    opts.freeze = {"loss_w", "s", "bi"};
    const TrainingGraph plain = BuildTrainingGraph(m, opts);
    TrainingGraph fused = plain;
    const BatchNormReluFusion f = FuseBatchNormRelu(fused.model);
    EXPECT_EQ(f.forward, 1);
    EXPECT_EQ(f.backward, 0);
    for (const auto& n : fused.model.graph.nodes) {
      if (n.op_type == "BatchNormTraining") {
        EXPECT_FALSE(n.HasOutput(5)) << n.Describe();
      }
    }
    HostTensor img(DType::kFloat32, {2, 8, 4, 4}, "img");
    for (int64_t i = 0; i < img.NumElements(); ++i) img.Data<float>()[i] = std::sin(0.7f * static_cast<float>(i));
    const std::map<std::string, Tensor> feeds = {{"img", Tensor::FromHost(img)}};
    ASSERT_EQ(plain.params, fused.params);
    Executor ea(fused.model), eb(plain.model);
    std::vector<std::string> fetch = {fused.loss};
    fetch.insert(fetch.end(), fused.grads.begin(), fused.grads.end());
    const std::vector<Tensor> ya = ea.Run(feeds, fetch), yb = eb.Run(feeds, fetch);
    for (size_t i = 0; i < ya.size(); ++i) {
      const HostTensor ta = ya[i].ToHost(), tb = yb[i].ToHost();
      for (int64_t k = 0; k < ta.NumElements(); ++k)
        EXPECT_NEAR(ta.Data<float>()[k], tb.Data<float>()[k], 1e-5 * (1 + std::fabs(tb.Data<float>()[k]))) << fetch[i];
    }
  }
}

// Add + Relu (ResNet's residual sum, a broadcast bias either way round) becomes one
// AddRelu; with BatchNorm+ReLU fused too, the graph trains like the unfused one. An Add
// whose sum has another reader stays.
TEST(TrainingFusion, AddReluFusesResidualSumsAndBroadcastsAndTrainsAsUnfused) {
  for (int64_t c : {8, 5}) {
    SCOPED_TRACE("residual block, " + std::to_string(c) + " channels");
    ModelBuilder b;
    b.Param("x", {2, c, 5, 6}, -1.f, 1.f);
    b.Param("w1", {c, c, 3, 3}, -0.3f, 0.3f).Param("w2", {c, c, 3, 3}, -0.3f, 0.3f);
    for (const char* k : {"1", "2"}) {
      const std::string p = k;
      b.Param("s" + p, {c}, 0.5f, 1.5f).Param("bi" + p, {c}, -0.3f, 0.3f);
      b.Param("m" + p, {c}, -0.2f, 0.2f).Param("v" + p, {c}, 0.5f, 1.5f);
    }
    b.Op("Conv", {"x", "w1"}, "c1").SetInts("pads", {1, 1, 1, 1});
    b.Op("BatchNormalization", {"c1", "s1", "bi1", "m1", "v1"}, "n1");
    b.Op("Relu", {"n1"}, "r1");
    b.Op("Conv", {"r1", "w2"}, "c2").SetInts("pads", {1, 1, 1, 1});
    b.Op("BatchNormalization", {"c2", "s2", "bi2", "m2", "v2"}, "n2");
    b.Op("Add", {"n2", "x"}, "sum");
    b.Op("Relu", {"sum"}, "y");
    const TrainingGraph plain = Train(WithLoss(b, "y", {2, c, 5, 6}), false);
    TrainingGraph fused = plain;
    EXPECT_EQ(FuseBatchNormRelu(fused.model).backward, 1);
    EXPECT_EQ(FuseAddRelu(fused.model), 1);
    EXPECT_EQ(Count(fused.model, "AddRelu", kGradDomain), 1);
    EXPECT_EQ(Count(fused.model, "Relu"), 0);
    EXPECT_EQ(Count(fused.model, "ReluGrad", kGradDomain), 1);  // the sum's, which AddRelu keeps
    ExpectSameLossAndGradients(fused, plain, 1e-5);
  }
  for (bool bias_first : {false, true}) {
    SCOPED_TRACE(bias_first ? "bias + x" : "x + bias");
    ModelBuilder b;
    b.Param("x", {2, 3, 4}, -1.f, 1.f).Param("bias", {4}, -0.5f, 0.5f);
    b.Op("Add", bias_first ? std::vector<std::string>{"bias", "x"} : std::vector<std::string>{"x", "bias"}, "sum");
    b.Op("Relu", {"sum"}, "y");
    const Model m = WithLoss(b, "y", {2, 3, 4});
    const TrainingGraph plain = Train(m, false);
    TrainingGraph fused = plain;
    EXPECT_EQ(FuseAddRelu(fused.model), 1);
    ExpectSameLossAndGradients(fused, plain, 1e-6);
    ExpectGradientsMatchFiniteDifferences(fused, {}, 1e-3f);
  }
  {
    SCOPED_TRACE("sum read twice");
    ModelBuilder b;
    b.Param("x", {2, 3}, -1.f, 1.f).Param("z", {2, 3}, -1.f, 1.f);
    b.Op("Add", {"x", "z"}, "sum");
    b.Op("Relu", {"sum"}, "r");
    b.Op("Mul", {"r", "sum"}, "y");
    TrainingGraph tg = Train(WithLoss(b, "y", {2, 3}), false);
    EXPECT_EQ(FuseAddRelu(tg.model), 0);
  }
}

// MatMul(x, Transpose(W)) + bias (PyTorch's Linear on a 3D input) becomes one MatMulAdd and
// its weight transposes in the backward go (SimplifyWeightTransposes),
// the bias on either side of the Add and under a Cast of the weight; the gradients match the
// unfused graph's and finite differences. A product read by anything but the Add and Shape
// nodes, or a bias whose length is not the product's last dimension, stays.
TEST(TrainingFusion, MatMulBiasFusesLinearLayersAndTrainsAsUnfused) {
  for (int form = 0; form < 3; ++form) {
    SCOPED_TRACE("form " + std::to_string(form));
    ModelBuilder b;
    b.Param("x", {2, 3, 4}, -1.f, 1.f).Param("w", {5, 4}, -0.5f, 0.5f).Param("bias", {5}, -0.5f, 0.5f);
    std::string w = "w";
    if (form == 2) {
      b.Op("Cast", {"w"}, "w/cast").SetInt("to", static_cast<int64_t>(DType::kFloat32));
      w = "w/cast";
    }
    b.Op("Transpose", {w}, "wt").SetInts("perm", {1, 0});
    b.Op("MatMul", {"x", "wt"}, "xw");
    b.Op("Add", form == 1 ? std::vector<std::string>{"bias", "xw"} : std::vector<std::string>{"xw", "bias"}, "lin");
    b.Op("Tanh", {"lin"}, "y");
    const Model m = WithLoss(b, "y", {2, 3, 5});
    const TrainingGraph plain = Train(m, false);
    TrainingGraph fused = plain;
    EXPECT_EQ(FuseMatMulBias(fused.model), 1);
    EXPECT_EQ(Count(fused.model, "MatMulAdd", kGradDomain), 1);
    // MatMul's gradients through Transpose(W): dX reads W (no TransposeLastTwo), dW is one
    // Gemm (no Transpose of d(W^T)); the forward's Transpose stays.
    EXPECT_EQ(SimplifyWeightTransposes(fused.model), 2);
    EXPECT_EQ(Count(fused.model, "TransposeLastTwo", kGradDomain), 0);
    EXPECT_EQ(Count(fused.model, "Transpose"), 1);
    ExpectSameLossAndGradients(fused, plain, 1e-6);
    ExpectGradientsMatchFiniteDifferences(fused, {}, 1e-3f);
    // With the decompositions fused first, the Linear is Gemm(Flatten(x), W, transB=1) ->
    // Reshape (FoldTransposedWeights): the bias becomes the Gemm's C.
    TrainingGraph gemm = Train(m, true);
    EXPECT_EQ(Count(gemm.model, "Gemm"), 3);  // the forward's, dx's and dW's
    EXPECT_EQ(FuseMatMulBias(gemm.model), 1);
    EXPECT_EQ(Count(gemm.model, "Add"), 0);
    ExpectSameLossAndGradients(gemm, plain, 1e-6);
    ExpectGradientsMatchFiniteDifferences(gemm, {}, 1e-3f);
  }
  for (int64_t batch : {1, 3}) {
    SCOPED_TRACE("Linear and ReLU (a feed-forward layer's linear1), batch " + std::to_string(batch));
    ModelBuilder b;
    b.Param("x", {batch, 3, 4}, -1.f, 1.f).Param("w", {5, 4}, -0.5f, 0.5f).Param("bias", {5}, -0.5f, 0.5f);
    b.Op("Transpose", {"w"}, "wt").SetInts("perm", {1, 0});
    b.Op("MatMul", {"x", "wt"}, "xw");
    b.Op("Add", {"xw", "bias"}, "lin");
    b.Op("Relu", {"lin"}, "y");
    const Model m = WithLoss(b, "y", {batch, 3, 5});
    const TrainingGraph plain = Train(m, false);
    TrainingGraph fused = Train(m, true);
    EXPECT_EQ(FuseAddRelu(fused.model), 1);
    EXPECT_EQ(FuseMatMulBias(fused.model), 1);
    EXPECT_EQ(Count(fused.model, "AddRelu", kGradDomain), 0);
    EXPECT_EQ(Count(fused.model, "Relu"), 0);
    ASSERT_EQ(Count(fused.model, "Gemm", kGradDomain), 1);
    for (const auto& n : fused.model.graph.nodes)
      if (n.op_type == "Gemm" && n.domain == kGradDomain) {
        EXPECT_EQ(n.GetInt("relu", 0), 1);
      }
    ExpectSameLossAndGradients(fused, plain, 1e-6);
    ExpectGradientsMatchFiniteDifferences(fused, {}, 1e-3f);
  }
  {
    SCOPED_TRACE("product read twice");
    ModelBuilder b;
    b.Param("x", {3, 4}, -1.f, 1.f).Param("w", {4, 5}, -0.5f, 0.5f).Param("bias", {5}, -0.5f, 0.5f);
    b.Op("MatMul", {"x", "w"}, "xw");
    b.Op("Add", {"xw", "bias"}, "lin");
    b.Op("Mul", {"lin", "xw"}, "y");
    TrainingGraph tg = Train(WithLoss(b, "y", {3, 5}), false);
    EXPECT_EQ(FuseMatMulBias(tg.model), 0);
  }
  {
    SCOPED_TRACE("bias broadcast across a product of one column");
    ModelBuilder b;
    b.Param("x", {3, 4}, -1.f, 1.f).Param("w", {4, 1}, -0.5f, 0.5f).Param("bias", {5}, -0.5f, 0.5f);
    b.Op("MatMul", {"x", "w"}, "xw");
    b.Op("Add", {"xw", "bias"}, "y");
    TrainingGraph tg = Train(WithLoss(b, "y", {3, 5}), false);
    EXPECT_EQ(FuseMatMulBias(tg.model), 0);
  }
}

// x.view(n, t, e) with n read from x's shape at run time (as ViT's patch embedding):
// ranks flow through Shape, Gather, Unsqueeze, Concat and Reshape, so the weight of a
// following MatMul gets its gradient from one Gemm over the flattened batch, not from a
// batched product summed down.
TEST(RankInference, RanksFlowThroughRunTimeShapesToTheMatMulWeightGradient) {
  ModelBuilder b;
  b.Param("x", {2, 30}, -1.f, 1.f).Param("w", {6, 4}, -1.f, 1.f);
  b.Const(HostTensor::FromVector<int64_t>({0}, {}, "zero"));
  b.Const(HostTensor::FromVector<int64_t>({5, 6}, {2}, "te"));
  b.Const(HostTensor::FromVector<int64_t>({0}, {1}, "axes0"));
  b.Op("Shape", {"x"}, "shape");
  b.Op("Gather", {"shape", "zero"}, "n");
  b.Op("Unsqueeze", {"n", "axes0"}, "n1");
  b.Op("Concat", {"n1", "te"}, "target").SetInt("axis", 0);
  b.Op("Reshape", {"x", "target"}, "r");
  b.Op("Tanh", {"r"}, "a");
  b.Op("MatMul", {"a", "w"}, "y");
  const Model m = WithLoss(b, "y", {2, 5, 4});
  const std::map<std::string, int> ranks = InferRanks(m.graph, 13);
  EXPECT_EQ(ranks.at("shape"), 1);
  EXPECT_EQ(ranks.at("n"), 0);
  EXPECT_EQ(ranks.at("target"), 1);
  EXPECT_EQ(ranks.at("r"), 3);
  EXPECT_EQ(ranks.at("a"), 3);
  EXPECT_EQ(ranks.at("y"), 3);
  EXPECT_EQ(ranks.at("loss"), 0);

  const TrainingGraph tg = Train(m, true);
  const std::string wgrad = "w/grad";
  bool from_gemm = false;
  for (const auto& n : tg.model.graph.nodes)
    for (const auto& o : n.outputs)
      if (o == wgrad) from_gemm = n.op_type == "Gemm";
  EXPECT_TRUE(from_gemm) << "the weight gradient should be one Gemm over the flattened batch";
  ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
}

// Unknown stays unknown: a Reshape to a shape computed by an op rank inference does not
// follow, and a Squeeze without axes.
TEST(RankInference, LeavesUnknownWhatTheGraphDoesNotDetermine) {
  ModelBuilder b;
  b.Param("x", {2, 1, 3}, -1.f, 1.f);
  b.Op("Shape", {"x"}, "shape");
  b.Op("NonZero", {"shape"}, "nz");
  b.Op("Reshape", {"x", "nz"}, "r");
  b.Op("Squeeze", {"x"}, "s");
  b.Op("Relu", {"s"}, "t");
  const std::map<std::string, int> ranks = InferRanks(b.Build().graph, 13);
  EXPECT_EQ(ranks.count("r"), 0u);
  EXPECT_EQ(ranks.count("s"), 0u);
  EXPECT_EQ(ranks.count("t"), 0u);
  EXPECT_EQ(ranks.at("x"), 3);
}

// A product with a transposed weight matrix (torch 2.x's Linear, GPT-2's tied lm_head)
// becomes one Gemm with transB, A flattened to rows where its rank is above 2 and the
// product shaped back; training the result needs no transpose at all, and it trains as the
// unfused graph (finite differences too). A Transpose read by anything else stays.
TEST(Fusion, TransposedWeightProductsBecomeGemmAndTrainAsUnfused) {
  const std::vector<std::vector<int64_t>> a_shapes = {{6, 5}, {2, 3, 5}, {2, 1, 3, 5}};
  for (const auto& a_shape : a_shapes) {
    SCOPED_TRACE("A of rank " + std::to_string(a_shape.size()));
    ModelBuilder b;
    b.Param("a", a_shape, -1.f, 1.f);
    b.Param("w", {4, 5}, -1.f, 1.f);
    b.Op("Transpose", {"w"}, "wt").SetInts("perm", {1, 0});
    b.Op("MatMul", {"a", "wt"}, "y");
    std::vector<int64_t> y_shape = a_shape;
    y_shape.back() = 4;
    const Model m = WithLoss(b, "y", y_shape);
    const TrainingGraph tg = Train(m, true);
    EXPECT_EQ(Count(tg.model, "Transpose"), 0);
    EXPECT_EQ(Count(tg.model, "TransposeLastTwo", kGradDomain), 0);
    EXPECT_EQ(Count(tg.model, "MatMul"), 0);
    EXPECT_GE(Count(tg.model, "Gemm"), 3);  // the product and both gradients
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
    ExpectSameAsUnfused(m, tg);
  }
  {  // a tied weight: also gathered as an embedding; both gradients summed
    ModelBuilder b;
    b.Param("w", {7, 5}, -1.f, 1.f);
    b.Const(HostTensor::FromVector<int64_t>({3, 0, 6, 3, 1, 2}, {2, 3}, "ids"));
    b.Op("Gather", {"w", "ids"}, "emb");
    b.Op("Transpose", {"w"}, "wt").SetInts("perm", {1, 0});
    b.Op("MatMul", {"emb", "wt"}, "y");
    const Model m = WithLoss(b, "y", {2, 3, 7});
    const TrainingGraph tg = Train(m, true);
    EXPECT_EQ(Count(tg.model, "Transpose"), 0);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
    ExpectSameAsUnfused(m, tg);
  }
  {  // the transposed weight read by something else too: left alone
    ModelBuilder b;
    b.Param("a", {5, 5}, -1.f, 1.f);
    b.Param("w", {5, 5}, -1.f, 1.f);
    b.Op("Transpose", {"w"}, "wt").SetInts("perm", {1, 0});
    b.Op("MatMul", {"a", "wt"}, "p");
    b.Op("Add", {"p", "wt"}, "y");
    const Model m = WithLoss(b, "y", {5, 5});
    const TrainingGraph tg = Train(m, true);
    EXPECT_EQ(Count(tg.model, "Transpose"), 2);  // the forward one and its gradient
    ExpectSameAsUnfused(m, tg);
  }
}

}  // namespace
}  // namespace ot
