// Finite-difference tests of the nn gradient rules and their kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "graph/autodiff/autodiff.h"
#include "runtime/executor/executor.h"
#include "tests/common/grad_check.h"

namespace ot {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using testing::ModelBuilder;
using testing::TrainWithWeightedSumLoss;

// --- LayerNormalization ---------------------------------------------------------------

struct LayerNormCase {
  int64_t axis;
  std::vector<int64_t> scale, bias;  // bias empty: no B input
  int outputs;                       // 1: Y; 3: Y, Mean, InvStdDev
};

TrainingGraph LayerNormModel(const LayerNormCase& c, std::vector<int64_t> xdims = {2, 3, 5}) {
  ModelBuilder b;
  b.Opset(17);
  b.Param("x", xdims, -1.f, 1.f).Param("scale", c.scale, 0.5f, 1.5f);
  std::vector<std::string> ins = {"x", "scale"};
  if (!c.bias.empty()) {
    b.Param("bias", c.bias, -0.5f, 0.5f);
    ins.push_back("bias");
  }
  Node& ln = b.Op("LayerNormalization", ins, "y");
  ln.SetInt("axis", c.axis);
  ln.SetFloat("epsilon", 1e-3f);
  if (c.outputs == 3) ln.outputs = {"y", "mean", "inv_std"};
  return TrainWithWeightedSumLoss(b, "y", xdims);
}

TEST(GradNn, LayerNormalizationMatchesFiniteDifferences) {
  const std::vector<LayerNormCase> cases = {
      {-1, {5}, {5}, 1},       {-2, {3, 5}, {3, 5}, 3}, {-2, {5}, {1, 5}, 1},
      {1, {3, 1}, {}, 1},      {0, {2, 3, 5}, {3, 5}, 3}, {2, {1}, {5}, 1},
  };
  for (const LayerNormCase& c : cases) {
    SCOPED_TRACE("axis " + std::to_string(c.axis) + " scale " + ShapeString(c.scale) + " bias " + ShapeString(c.bias));
    TrainingGraph tg = LayerNormModel(c);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  }
}

TEST(GradNn, LayerNormalizationRank4AndOddSizes) {
  TrainingGraph tg = LayerNormModel({-1, {7}, {7}, 1}, {3, 1, 2, 7});
  ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
}

// The forward against a direct computation: Y, Mean and InvStdDev over axis -2 of [2,3,5].
TEST(GradNn, LayerNormalizationForwardOutputs) {
  ModelBuilder b;
  b.Opset(17);
  b.Input("x", DType::kFloat32, {2, 3, 5});
  b.Param("scale", {3, 5}, 0.5f, 1.5f).Param("bias", {5}, -0.5f, 0.5f);
  Node& ln = b.Op("LayerNormalization", {"x", "scale", "bias"}, "y");
  ln.SetInt("axis", -2);
  ln.SetFloat("epsilon", 1e-2f);
  ln.outputs = {"y", "mean", "inv_std"};
  b.Output("y", {2, 3, 5}).Output("mean", {2, 1, 1}).Output("inv_std", {2, 1, 1});
  Model m = b.Build();
  HostTensor x(DType::kFloat32, {2, 3, 5});
  for (int64_t i = 0; i < 30; ++i) x.Data<float>()[i] = std::sin(0.7f * static_cast<float>(i)) + 0.1f * static_cast<float>(i);
  const float* scale = m.graph.initializers[0].Data<float>();
  const float* bias = m.graph.initializers[1].Data<float>();
  Executor exec(m);
  auto out = exec.Run({{"x", Tensor::FromHost(x)}}, {"y", "mean", "inv_std"});
  ASSERT_EQ(out[1].shape(), (Shape{2, 1, 1}));
  for (int r = 0; r < 2; ++r) {
    double mu = 0, var = 0;
    for (int j = 0; j < 15; ++j) mu += x.Data<float>()[r * 15 + j];
    mu /= 15;
    for (int j = 0; j < 15; ++j) var += std::pow(x.Data<float>()[r * 15 + j] - mu, 2);
    var /= 15;
    const double inv = 1 / std::sqrt(var + 1e-2);
    EXPECT_NEAR(out[1].ToHost().Data<float>()[r], mu, 1e-5);
    EXPECT_NEAR(out[2].ToHost().Data<float>()[r], inv, 1e-4);
    for (int j = 0; j < 15; ++j) {
      const double want = (x.Data<float>()[r * 15 + j] - mu) * inv * scale[j] + bias[j % 5];
      EXPECT_NEAR(out[0].ToHost().Data<float>()[r * 15 + j], want, 1e-4) << r << "," << j;
    }
  }
}

// --- Reductions whose gradient depends on the values ----------------------------------

struct ReduceCase {
  std::string op;
  int64_t opset;
  std::vector<int64_t> axes;  // empty: all (attribute or input omitted)
  int64_t keepdims;
  bool axes_as_input;
};

std::vector<int64_t> ReducedDims(const std::vector<int64_t>& in, const std::vector<int64_t>& axes, bool keep) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < in.size(); ++d) {
    bool r = axes.empty();
    for (int64_t a : axes) r = r || (a < 0 ? a + static_cast<int64_t>(in.size()) : a) == static_cast<int64_t>(d);
    if (!r) out.push_back(in[d]);
    else if (keep) out.push_back(1);
  }
  return out;
}

TrainingGraph ReduceModel(const ReduceCase& c) {
  const std::vector<int64_t> xdims = {3, 4, 5};
  ModelBuilder b;
  b.Opset(c.opset);
  // Values away from 0 and (for Max/Min) from ties: |p| in [0.3, 1.3) with fixed signs,
  // positive for Prod and LogSum.
  // Distinct magnitudes 1/60 apart, shuffled, so no two are within the difference step.
  b.Param("p", xdims, 0.f, 1.f);
  std::vector<int> perm(60);
  for (int i = 0; i < 60; ++i) perm[static_cast<size_t>(i)] = i;
  std::shuffle(perm.begin(), perm.end(), b.rng());
  float* pv = b.model().graph.initializers.back().Data<float>();
  for (int i = 0; i < 60; ++i) pv[i] = 0.3f + static_cast<float>(perm[static_cast<size_t>(i)]) / 60.f;
  const bool positive = c.op == "ReduceProd" || c.op == "ReduceLogSum";
  HostTensor signs(DType::kFloat32, xdims, "signs");
  for (int64_t i = 0; i < signs.NumElements(); ++i) signs.Data<float>()[i] = positive || (i * 7) % 3 ? 1.f : -1.f;
  b.Const(signs);
  b.Op("Mul", {"p", "signs"}, "x");
  std::vector<std::string> ins = {"x"};
  if (c.axes_as_input && !c.axes.empty()) {
    b.Const(HostTensor::FromVector<int64_t>(c.axes, {static_cast<int64_t>(c.axes.size())}, "axes"));
    ins.push_back("axes");
  }
  Node& n = b.Op(c.op, ins, "y");
  n.SetInt("keepdims", c.keepdims);
  if (!c.axes_as_input && !c.axes.empty()) n.SetInts("axes", c.axes);
  return TrainWithWeightedSumLoss(b, "y", ReducedDims(xdims, c.axes, c.keepdims != 0), {"signs"});
}

TEST(GradNn, ValueReductionsMatchFiniteDifferences) {
  for (const char* op : {"ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                         "ReduceLogSumExp"}) {
    for (const ReduceCase& c : {ReduceCase{op, 13, {1}, 1, false}, ReduceCase{op, 13, {0, -1}, 0, false},
                                ReduceCase{op, 11, {}, 0, false}, ReduceCase{op, 17, {2}, 0, false},
                                ReduceCase{op, 18, {0, 2}, 1, true}, ReduceCase{op, 18, {}, 0, true}}) {
      SCOPED_TRACE(c.op + " opset " + std::to_string(c.opset) + " axes " + ShapeString(c.axes) + " keepdims " +
                   std::to_string(c.keepdims));
      TrainingGraph tg = ReduceModel(c);
      ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-3f);
    }
  }
}


// --- ConvTranspose --------------------------------------------------------------------

struct ConvTransposeCase {
  std::string name;
  std::vector<int64_t> x, w;  // X: N x C x ..., W: C x M/group x k...
  int64_t group;
  bool bias;
  std::function<void(Node&)> attrs;
};

std::vector<ConvTransposeCase> ConvTransposeCases() {
  return {
      {"1d stride 2 pads", {2, 3, 5}, {3, 2, 3}, 1, true,
       [](Node& n) {
         n.SetInts("strides", {2});
         n.SetInts("pads", {1, 0});
       }},
      {"2d stride, output_padding, pads", {1, 2, 3, 4}, {2, 3, 3, 2}, 1, true,
       [](Node& n) {
         n.SetInts("strides", {3, 2});
         n.SetInts("output_padding", {1, 1});
         n.SetInts("pads", {1, 0, 0, 1});
       }},
      {"2d groups 2, dilations", {2, 4, 3, 3}, {4, 1, 2, 3}, 2, true,
       [](Node& n) {
         n.SetInt("group", 2);
         n.SetInts("dilations", {2, 1});
       }},
      {"2d depthwise-like groups 3, no bias", {1, 3, 4, 3}, {3, 2, 3, 3}, 3, false,
       [](Node& n) {
         n.SetInt("group", 3);
         n.SetInts("strides", {2, 2});
         n.SetInts("output_padding", {1, 0});
       }},
      {"2d SAME_UPPER", {1, 2, 3, 3}, {2, 2, 3, 3}, 1, true,
       [](Node& n) {
         n.SetString("auto_pad", "SAME_UPPER");
         n.SetInts("strides", {2, 2});
       }},
      {"2d SAME_LOWER", {1, 2, 3, 3}, {2, 2, 2, 3}, 1, false,
       [](Node& n) {
         n.SetString("auto_pad", "SAME_LOWER");
         n.SetInts("strides", {2, 1});
       }},
      {"2d VALID", {1, 2, 2, 3}, {2, 2, 2, 2}, 1, true, [](Node& n) { n.SetString("auto_pad", "VALID"); }},
      {"2d output_shape larger than natural", {1, 1, 3, 3}, {1, 2, 3, 3}, 1, true,
       [](Node& n) {
         n.SetInts("strides", {3, 2});
         n.SetInts("output_shape", {10, 8});
       }},
      {"3d stride 2, output_padding", {1, 2, 2, 3, 2}, {2, 2, 2, 2, 3}, 1, true,
       [](Node& n) {
         n.SetInts("strides", {2, 1, 2});
         n.SetInts("output_padding", {1, 0, 1});
         n.SetInts("pads", {0, 1, 0, 1, 0, 0});
       }},
  };
}

// Direct loops over ONNX's definition: every input pixel scatters its weighted kernel
// into the full output, which is then cropped by pads_begin (output_padding and
// output_shape only change how far the crop reaches).
HostTensor ReferenceConvTranspose(const HostTensor& x, const HostTensor& w, const float* bias, int64_t group,
                                  const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                                  const std::vector<int64_t>& pads_begin, const Shape& out_shape) {
  const size_t sr = x.dims.size() - 2;
  const int64_t n_batch = x.dims[0], c_in = x.dims[1], m_per_g = w.dims[1], c_per_g = c_in / group;
  HostTensor y(DType::kFloat32, out_shape);
  Shape in_sp(x.dims.begin() + 2, x.dims.end()), k_sp(w.dims.begin() + 2, w.dims.end()),
      out_sp(out_shape.begin() + 2, out_shape.end());
  const int64_t in_n = NumElements(in_sp), k_n = NumElements(k_sp), out_n = NumElements(out_sp);
  for (int64_t b = 0; b < n_batch; ++b)
    for (int64_t m = 0; m < out_shape[1]; ++m)
      for (int64_t o = 0; o < out_n; ++o) y.Data<float>()[(b * out_shape[1] + m) * out_n + o] = bias ? bias[m] : 0.f;
  std::vector<int64_t> ip(sr), kp(sr);
  for (int64_t b = 0; b < n_batch; ++b)
    for (int64_t c = 0; c < c_in; ++c)
      for (int64_t i = 0; i < in_n; ++i)
        for (int64_t k = 0; k < k_n; ++k) {
          int64_t rem = i, remk = k, off = 0;
          bool inside = true;
          for (size_t d = sr; d-- > 0;) {
            ip[d] = rem % in_sp[d];
            rem /= in_sp[d];
            kp[d] = remk % k_sp[d];
            remk /= k_sp[d];
          }
          for (size_t d = 0; d < sr; ++d) {
            const int64_t pos = ip[d] * strides[d] + kp[d] * dilations[d] - pads_begin[d];
            if (pos < 0 || pos >= out_sp[d]) inside = false;
            off = off * out_sp[d] + pos;
          }
          if (!inside) continue;
          const int64_t g = c / c_per_g;
          for (int64_t mg = 0; mg < m_per_g; ++mg) {
            const int64_t m = g * m_per_g + mg;
            y.Data<float>()[(b * out_shape[1] + m) * out_n + off] +=
                x.Data<float>()[(b * c_in + c) * in_n + i] * w.Data<float>()[(c * m_per_g + mg) * k_n + k];
          }
        }
  return y;
}

TEST(GradNn, ConvTransposeGroupsAndAttributesForwardMatchesDirectLoops) {
  // Only the explicit-pads cases: the reference takes pads_begin as given.
  for (const ConvTransposeCase& c : ConvTransposeCases()) {
    ModelBuilder b;
    b.Input("x", DType::kFloat32, c.x);
    b.Param("w", c.w, -1.f, 1.f);
    std::vector<std::string> ins = {"x", "w"};
    const int64_t m = c.w[1] * c.group;
    if (c.bias) {
      b.Param("b", {m}, -1.f, 1.f);
      ins.push_back("b");
    }
    Node& n = b.Op("ConvTranspose", ins, "y");
    c.attrs(n);
    if (n.HasAttr("auto_pad") || n.HasAttr("output_shape")) continue;
    SCOPED_TRACE(c.name);
    const size_t sr = c.x.size() - 2;
    std::vector<int64_t> strides = n.GetInts("strides", std::vector<int64_t>(sr, 1));
    std::vector<int64_t> dil = n.GetInts("dilations", std::vector<int64_t>(sr, 1));
    std::vector<int64_t> pads = n.GetInts("pads", std::vector<int64_t>(2 * sr, 0));
    std::vector<int64_t> op = n.GetInts("output_padding", std::vector<int64_t>(sr, 0));
    Shape out = {c.x[0], m};
    for (size_t d = 0; d < sr; ++d)
      out.push_back((c.x[d + 2] - 1) * strides[d] + (c.w[d + 2] - 1) * dil[d] + 1 + op[d] - pads[d] - pads[d + sr]);
    b.Output("y", out);
    Model model = b.Build();
    HostTensor x(DType::kFloat32, c.x);
    for (int64_t i = 0; i < x.NumElements(); ++i) x.Data<float>()[i] = std::sin(1.3f * static_cast<float>(i));
    Executor exec(model);
    HostTensor got = exec.Run({{"x", Tensor::FromHost(x)}}, {"y"})[0].ToHost();
    ASSERT_EQ(got.dims, out);
    HostTensor want = ReferenceConvTranspose(x, model.graph.initializers[0],
                                             c.bias ? model.graph.initializers[1].Data<float>() : nullptr, c.group,
                                             strides, dil, std::vector<int64_t>(pads.begin(), pads.begin() + sr), out);
    for (int64_t i = 0; i < want.NumElements(); ++i)
      ASSERT_NEAR(got.Data<float>()[i], want.Data<float>()[i], 1e-4) << "element " << i;
  }
}

TEST(GradNn, ConvTransposeMatchesFiniteDifferences) {
  for (const ConvTransposeCase& c : ConvTransposeCases()) {
    SCOPED_TRACE(c.name);
    ModelBuilder b;
    b.Param("x", c.x, -1.f, 1.f).Param("w", c.w, -1.f, 1.f);
    std::vector<std::string> ins = {"x", "w"};
    if (c.bias) {
      b.Param("b", {c.w[1] * c.group}, -1.f, 1.f);
      ins.push_back("b");
    }
    Node& n = b.Op("ConvTranspose", ins, "y");
    c.attrs(n);
    // The output shape, from a forward run.
    Model fwd = b.model();
    fwd.graph.outputs.clear();
    ValueInfo yv;
    yv.name = "y";
    yv.dtype = DType::kFloat32;
    fwd.graph.outputs.push_back(yv);
    Shape ydims = Executor(fwd).Run({}, {"y"})[0].shape();
    TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", ydims);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  }
}


// --- InstanceNormalization --------------------------------------------------------------

TEST(GradNn, InstanceNormalizationMatchesFiniteDifferences) {
  const std::vector<std::pair<std::vector<int64_t>, float>> cases = {
      {{2, 3, 5}, 1e-5f}, {{1, 2, 3, 4}, 1e-3f}, {{2, 1, 2, 3, 2}, 1e-2f}, {{3, 2, 7}, 0.5f}};
  for (const auto& [dims, eps] : cases) {
    SCOPED_TRACE("x " + ShapeString(dims) + " epsilon " + std::to_string(eps));
    ModelBuilder b;
    b.Opset(9);
    b.Param("x", dims, -1.f, 1.f).Param("scale", {dims[1]}, 0.5f, 1.5f).Param("bias", {dims[1]}, -0.5f, 0.5f);
    b.Op("InstanceNormalization", {"x", "scale", "bias"}, "y").SetFloat("epsilon", eps);
    TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", dims);
    ASSERT_EQ(tg.params.size(), 3u);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  }
}

// torch.nn.GroupNorm as torch.onnx.export writes it before opset 18: Reshape to
// [N, groups, -1], InstanceNormalization with constant ones and zeros, Reshape back, then
// the per-channel affine as Mul and Add.
TEST(GradNn, GroupNormAsExportedByTorchMatchesFiniteDifferences) {
  for (int64_t opset : {13, 17}) {
    SCOPED_TRACE("opset " + std::to_string(opset));
    const std::vector<int64_t> dims = {2, 6, 3, 2};
    const int64_t groups = 3;
    ModelBuilder b;
    b.Opset(opset);
    b.Param("x", dims, -1.f, 1.f).Param("weight", {6, 1, 1}, 0.5f, 1.5f).Param("bias", {6, 1, 1}, -0.5f, 0.5f);
    b.Const(HostTensor::FromVector<int64_t>({2, groups, -1}, {3}, "grouped_shape"));
    b.Const(HostTensor::FromVector<float>(std::vector<float>(groups, 1.f), {groups}, "ones"));
    b.Const(HostTensor::FromVector<float>(std::vector<float>(groups, 0.f), {groups}, "zeros"));
    b.Op("Reshape", {"x", "grouped_shape"}, "grouped");
    b.Op("InstanceNormalization", {"grouped", "ones", "zeros"}, "normed").SetFloat("epsilon", 1e-5f);
    b.Op("Shape", {"x"}, "x_shape");
    b.Op("Reshape", {"normed", "x_shape"}, "back");
    b.Op("Mul", {"back", "weight"}, "scaled");
    b.Op("Add", {"scaled", "bias"}, "y");
    TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", dims, {"ones", "zeros"});
    ASSERT_EQ(tg.params.size(), 3u);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  }
}


// --- MatMul: 1-D operands and batch broadcasting ----------------------------------------

TEST(GradNn, MatMulOneDimensionalAndBroadcastMatchesFiniteDifferences) {
  struct Case {
    std::vector<int64_t> a, b, y;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4, 5}, {5, 3}, {2, 3, 4, 3}},  // [B, H, T, D] x [D, E]
      {{4}, {2, 4, 3}, {2, 3}},              // [T] x [B, T, E]
      {{2, 3, 4}, {4}, {2, 3}},              // batched matrix x vector
      {{5}, {5}, {}},                        // dot product
      {{5}, {5, 3}, {3}},                    // vector x matrix
      {{2, 5}, {5}, {2}},                    // matrix x vector
      {{3, 1, 2, 4}, {2, 4, 5}, {3, 2, 2, 5}},  // batch dims broadcast on both sides
      {{1, 3, 2}, {4, 1, 2, 3}, {4, 1, 3, 3}},
  };
  for (int64_t opset : {9, 13}) {
    for (const Case& c : cases) {
      SCOPED_TRACE("opset " + std::to_string(opset) + ": " + ShapeString(c.a) + " x " + ShapeString(c.b));
      ModelBuilder b;
      b.Opset(opset);
      b.Param("a", c.a, -1.f, 1.f).Param("b", c.b, -1.f, 1.f);
      b.Op("MatMul", {"a", "b"}, "y");
      TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", c.y);
      ASSERT_EQ(tg.params.size(), 2u);
      ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
    }
  }
}


// --- Einsum -------------------------------------------------------------------------------

struct EinsumCase {
  std::string equation;                     // as given to the node
  std::string letters;                      // the same with every "..." spelled out (for the reference)
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> out;
};

std::vector<EinsumCase> EinsumCases() {
  return {
      {"bhid,bhjd->bhij", "bhid,bhjd->bhij", {{2, 2, 3, 4}, {2, 2, 5, 4}}, {2, 2, 3, 5}},
      {"bij,bjk->bik", "bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}, {2, 3, 5}},
      {"i,j->ij", "i,j->ij", {{3}, {4}}, {3, 4}},
      {"ij->ji", "ij->ji", {{3, 4}}, {4, 3}},
      {"ij->i", "ij->i", {{3, 5}}, {3}},
      {"ij", "ij->ij", {{3, 4}}, {3, 4}},                    // implicit: identity
      {"ji", "ji->ij", {{3, 4}}, {4, 3}},                    // implicit: sorted labels, a transpose
      {"i,i", "i,i->", {{5}, {5}}, {}},                  // implicit: inner product
      {"bij , bkj -> bik", "bij,bkj->bik", {{2, 3, 4}, {2, 5, 4}}, {2, 3, 5}},
      {"ij,jk,kl->il", "ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 2}}, {2, 2}},
      {"ijk,ik->j", "ijk,ik->j", {{2, 3, 4}, {2, 4}}, {3}},     // batch label summed away
      {"ij,kl->jk", "ij,kl->jk", {{2, 3}, {4, 5}}, {3, 4}},     // i and l summed in one operand only
      {"...ij,...jk->...ik", "abij,abjk->abik", {{2, 1, 3, 4}, {2, 3, 4, 2}}, {2, 3, 3, 2}},  // ellipsis broadcast
      {"...ij,jk->...ik", "aij,jk->aik", {{2, 3, 4}, {4, 5}}, {2, 3, 5}},
      {"i...->i", "iab->i", {{3, 2, 2}}, {3}},
      {"b...d,d->b...", "bxd,d->bx", {{2, 3, 4}, {4}}, {2, 3}},
      {"...i,...i->...", "abi,abi->ab", {{2, 3, 4}, {1, 3, 4}}, {2, 3}},
  };
}

// Direct evaluation over every assignment of the letter labels of a letters-only
// equation (size-1 axes broadcast).
HostTensor ReferenceEinsum(const std::string& letters, const std::vector<HostTensor>& xs) {
  const size_t arrow = letters.find("->");
  std::vector<std::string> terms;
  std::string lhs = letters.substr(0, arrow), out = letters.substr(arrow + 2);
  for (size_t st = 0;;) {
    size_t c = lhs.find(',', st);
    terms.push_back(lhs.substr(st, c == std::string::npos ? std::string::npos : c - st));
    if (c == std::string::npos) break;
    st = c + 1;
  }
  std::map<char, int64_t> size;
  for (size_t t = 0; t < terms.size(); ++t)
    for (size_t a = 0; a < terms[t].size(); ++a) size[terms[t][a]] = std::max(size[terms[t][a]], xs[t].dims[a]);
  std::vector<char> labels;
  for (const auto& [c, n] : size) labels.push_back(c);
  Shape out_dims;
  for (char c : out) out_dims.push_back(size[c]);
  HostTensor y(DType::kFloat32, out_dims);
  std::vector<double> acc(static_cast<size_t>(NumElements(out_dims)), 0.0);
  std::map<char, int64_t> v;
  int64_t total = 1;
  for (char c : labels) total *= size[c];
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t r = flat;
    for (size_t i = labels.size(); i-- > 0;) {
      v[labels[i]] = r % size[labels[i]];
      r /= size[labels[i]];
    }
    double prod = 1;
    for (size_t t = 0; t < terms.size(); ++t) {
      int64_t off = 0;
      for (size_t a = 0; a < terms[t].size(); ++a)
        off = off * xs[t].dims[a] + (xs[t].dims[a] == 1 ? 0 : v[terms[t][a]]);
      prod *= xs[t].Data<float>()[off];
    }
    int64_t o = 0;
    for (char c : out) o = o * size[c] + v[c];
    acc[static_cast<size_t>(o)] += prod;
  }
  for (size_t i = 0; i < acc.size(); ++i) y.Data<float>()[i] = static_cast<float>(acc[i]);
  return y;
}

TEST(GradNn, EinsumForwardMatchesDirectEvaluation) {
  for (const EinsumCase& c : EinsumCases()) {
    SCOPED_TRACE(c.equation);
    ModelBuilder b;
    std::vector<std::string> ins;
    std::map<std::string, Tensor> feeds;
    std::vector<HostTensor> xs;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      const std::string name = "x" + std::to_string(i);
      b.Input(name, DType::kFloat32, c.shapes[i]);
      ins.push_back(name);
      HostTensor x(DType::kFloat32, c.shapes[i]);
      for (int64_t e = 0; e < x.NumElements(); ++e)
        x.Data<float>()[e] = std::sin(0.37f * static_cast<float>(e + 11 * static_cast<int64_t>(i)));
      feeds[name] = Tensor::FromHost(x);
      xs.push_back(x);
    }
    b.Op("Einsum", ins, "y").SetString("equation", c.equation);
    b.Output("y", c.out);
    Executor exec(b.Build());
    HostTensor got = exec.Run(feeds, {"y"})[0].ToHost();
    ASSERT_EQ(got.dims, c.out);
    HostTensor want = ReferenceEinsum(c.letters, xs);
    for (int64_t i = 0; i < want.NumElements(); ++i)
      ASSERT_NEAR(got.Data<float>()[i], want.Data<float>()[i], 1e-4) << "element " << i;
  }
}

TEST(GradNn, EinsumMatchesFiniteDifferences) {
  for (const EinsumCase& c : EinsumCases()) {
    SCOPED_TRACE(c.equation);
    ModelBuilder b;
    std::vector<std::string> ins;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      ins.push_back("x" + std::to_string(i));
      b.Param(ins.back(), c.shapes[i], -1.f, 1.f);
    }
    b.Op("Einsum", ins, "y").SetString("equation", c.equation);
    TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", c.out);
    ASSERT_EQ(tg.params.size(), c.shapes.size());
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  }
}

TEST(GradNn, EinsumDiagonalHasAClearErrorInsteadOfAGradient) {
  ModelBuilder b;
  b.Param("x", {3, 3}, -1.f, 1.f);
  b.Op("Einsum", {"x"}, "y").SetString("equation", "ii->i");
  try {
    TrainWithWeightedSumLoss(b, "y", {3});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("repeats within input 0"), std::string::npos) << e.what();
  }
}


// --- MaxPool with its Indices output -------------------------------------------------------

TEST(GradNn, MaxPoolWithIndicesOutputTrainsThroughY) {
  ModelBuilder b;
  b.Param("x", {2, 2, 5, 4}, 0.f, 1.f);
  // Distinct values, so no window has a tie within the difference step.
  float* xv = b.model().graph.initializers.back().Data<float>();
  std::vector<int> perm(80);
  for (int i = 0; i < 80; ++i) perm[static_cast<size_t>(i)] = i;
  std::shuffle(perm.begin(), perm.end(), b.rng());
  std::vector<float> xs(80);
  for (int i = 0; i < 80; ++i) xv[i] = xs[static_cast<size_t>(i)] = static_cast<float>(perm[static_cast<size_t>(i)]) / 40.f;
  Node& n = b.Op("MaxPool", {"x"}, "y");
  n.outputs = {"y", "indices"};
  n.SetInts("kernel_shape", {3, 2});
  n.SetInts("strides", {2, 1});
  n.SetInts("pads", {1, 0, 1, 1});
  n.SetInt("storage_order", 1);
  TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", {2, 2, 3, 4});
  ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-3f);
  // The indices: the first maximum of each window, as a flat column-major position.
  Executor exec(tg.model);
  HostTensor idx = exec.Run({}, {"indices"})[0].ToHost();
  ASSERT_EQ(idx.dtype, DType::kInt64);
  for (int64_t plane = 0; plane < 4; ++plane)
    for (int64_t oh = 0; oh < 3; ++oh)
      for (int64_t ow = 0; ow < 4; ++ow) {
        float best = -1;
        int64_t at = -1;
        for (int64_t kh = 0; kh < 3; ++kh)
          for (int64_t kw = 0; kw < 2; ++kw) {
            const int64_t h = oh * 2 - 1 + kh, w = ow + kw;
            if (h < 0 || h >= 5 || w >= 4) continue;
            const float v = xs[static_cast<size_t>(plane * 20 + h * 4 + w)];
            if (v > best) {
              best = v;
              at = plane * 20 + w * 5 + h;
            }
          }
        EXPECT_EQ(idx.Data<int64_t>()[(plane * 3 + oh) * 4 + ow], at) << plane << "," << oh << "," << ow;
      }
}


// --- Softmax and LogSoftmax at every axis -------------------------------------------------

// Before opset 13 the input is coerced to 2-D at `axis` (one softmax over all the axes
// from `axis` on); from 13 it is one axis.
TEST(GradNn, SoftmaxFamilyAtAnyAxisMatchesFiniteDifferences) {
  const std::vector<int64_t> dims = {2, 3, 4};
  for (const char* op : {"Softmax", "LogSoftmax"})
    for (int64_t opset : {11, 13})
      for (int64_t axis : {0, 1, -1}) {
        SCOPED_TRACE(std::string(op) + " opset " + std::to_string(opset) + " axis " + std::to_string(axis));
        ModelBuilder b;
        b.Opset(opset);
        b.Param("x", dims, -2.f, 2.f);
        b.Op(op, {"x"}, "y").SetInt("axis", axis);
        TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", dims);
        ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
      }
}

// The forward at opset 11, axis 1 on [2, 3, 4]: one softmax over 12 values per sample.
TEST(GradNn, SoftmaxBeforeOpset13CoercesTo2D) {
  ModelBuilder b;
  b.Opset(11);
  b.Input("x", DType::kFloat32, {2, 3, 4});
  b.Op("Softmax", {"x"}, "y").SetInt("axis", 1);
  b.Output("y", {2, 3, 4});
  HostTensor x(DType::kFloat32, {2, 3, 4});
  for (int64_t i = 0; i < 24; ++i) x.Data<float>()[i] = std::sin(0.9f * static_cast<float>(i));
  Executor exec(b.Build());
  HostTensor y = exec.Run({{"x", Tensor::FromHost(x)}}, {"y"})[0].ToHost();
  for (int n = 0; n < 2; ++n) {
    double z = 0;
    for (int j = 0; j < 12; ++j) z += std::exp(x.Data<float>()[n * 12 + j]);
    for (int j = 0; j < 12; ++j)
      EXPECT_NEAR(y.Data<float>()[n * 12 + j], std::exp(x.Data<float>()[n * 12 + j]) / z, 1e-6);
  }
}


// --- LpNormalization -----------------------------------------------------------------------

TEST(GradNn, LpNormalizationForwardAndFiniteDifferences) {
  const std::vector<int64_t> dims = {2, 3, 4};
  for (int64_t p : {1, 2})
    for (int64_t axis : {-1, 0, 1}) {
      SCOPED_TRACE("p " + std::to_string(p) + " axis " + std::to_string(axis));
      ModelBuilder b;
      b.Param("x", dims, 0.2f, 1.f);
      // Fixed signs, so no element sits at |x|'s kink.
      HostTensor signs(DType::kFloat32, dims, "signs");
      for (int64_t i = 0; i < signs.NumElements(); ++i) signs.Data<float>()[i] = (i * 5) % 3 ? 1.f : -1.f;
      b.Const(signs);
      b.Op("Mul", {"x", "signs"}, "xs");
      Node& n = b.Op("LpNormalization", {"xs"}, "y");
      n.SetInt("p", p);
      n.SetInt("axis", axis);
      TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", dims, {"signs"});
      ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-3f);
      // Forward: every slice along the axis has unit p-norm and keeps its direction.
      Executor exec(tg.model);
      auto out = exec.Run({}, {"xs", "y"});
      HostTensor xv = out[0].ToHost(), yv = out[1].ToHost();
      const int64_t a = axis < 0 ? axis + 3 : axis;
      const std::vector<int64_t> strides = {12, 4, 1};
      for (int64_t base = 0; base < 24; ++base) {
        if ((base / strides[static_cast<size_t>(a)]) % dims[static_cast<size_t>(a)] != 0) continue;  // slice starts
        double norm = 0;
        for (int64_t k = 0; k < dims[static_cast<size_t>(a)]; ++k) {
          const double v = xv.Data<float>()[base + k * strides[static_cast<size_t>(a)]];
          norm += p == 1 ? std::fabs(v) : v * v;
        }
        if (p == 2) norm = std::sqrt(norm);
        for (int64_t k = 0; k < dims[static_cast<size_t>(a)]; ++k) {
          const int64_t at = base + k * strides[static_cast<size_t>(a)];
          EXPECT_NEAR(yv.Data<float>()[at], xv.Data<float>()[at] / norm, 1e-6);
        }
      }
    }
}


// --- Bad input: one clear error naming the node ------------------------------------------

std::string RunError(Model m, const std::map<std::string, Tensor>& feeds) {
  try {
    Executor exec(m);
    exec.Run(feeds, {m.graph.outputs[0].name});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GradNn, MalformedEinsumAndConvTransposeFailWithTheNodeNamed) {
  HostTensor x(DType::kFloat32, {2, 3});
  struct Case {
    std::string equation;
    int inputs;
    std::string expect;
  };
  for (const Case& c : {Case{"ij,jk->ik", 1, "has 2 terms but the node has 1 inputs"},
                        Case{"i1->i", 1, "has the character '1'"},
                        Case{"ij->ik", 1, "output label 'k' is in no input"},
                        Case{"ijk->i", 1, "does not match term 'ijk'"},
                        Case{"ij,ij->i", 2, "gives a label size"},
                        Case{"......ij->ij", 1, "two ellipses"}}) {
    SCOPED_TRACE(c.equation);
    ModelBuilder b;
    b.Opset(13);
    b.Input("a", DType::kFloat32, {2, 3});
    b.Input("b", DType::kFloat32, {3, 2});
    std::vector<std::string> ins = {"a"};
    if (c.inputs == 2) ins.push_back("b");
    b.Op("Einsum", ins, "y").SetString("equation", c.equation);
    b.Output("y", {});
    HostTensor bt(DType::kFloat32, {3, 2});
    const std::string err = RunError(b.Build(), {{"a", Tensor::FromHost(x)}, {"b", Tensor::FromHost(bt)}});
    EXPECT_NE(err.find("Einsum_0"), std::string::npos) << err;
    EXPECT_NE(err.find(c.expect), std::string::npos) << err;
  }
  ModelBuilder b;
  b.Input("x", DType::kFloat32, {1, 3, 4, 4});
  b.Param("w", {2, 2, 3, 3}, -1.f, 1.f);  // C = 2 rows, but X has 3 channels
  b.Op("ConvTranspose", {"x", "w"}, "y");
  b.Output("y", {});
  HostTensor xt(DType::kFloat32, {1, 3, 4, 4});
  const std::string err = RunError(b.Build(), {{"x", Tensor::FromHost(xt)}});
  EXPECT_NE(err.find("ConvTranspose_0"), std::string::npos) << err;
  EXPECT_NE(err.find("weight must be C x M/group x k"), std::string::npos) << err;
}


// --- MaxUnpool ------------------------------------------------------------------------------

// MaxPool with Indices, then MaxUnpool: overlapping windows (kernel 3, stride 1) put one
// value at one position several times, which must count once in the gradient.
TEST(GradNn, MaxUnpoolAfterMaxPoolMatchesFiniteDifferences) {
  struct Case {
    std::vector<int64_t> kernel, strides;
    std::vector<int64_t> output_shape;  // empty: the default
    std::vector<int64_t> y;
  };
  for (const Case& c : {Case{{2, 2}, {2, 2}, {}, {1, 2, 4, 6}}, Case{{3, 3}, {1, 1}, {}, {1, 2, 4, 6}},
                        Case{{2, 2}, {2, 2}, {1, 2, 5, 7}, {1, 2, 5, 7}}}) {
    SCOPED_TRACE("kernel " + ShapeString(c.kernel) + " output_shape " + ShapeString(c.output_shape));
    ModelBuilder b;
    b.Opset(11);
    b.Param("x", {1, 2, 4, 6}, 0.f, 1.f);
    float* xv = b.model().graph.initializers.back().Data<float>();
    std::vector<int> perm(48);
    for (int i = 0; i < 48; ++i) perm[static_cast<size_t>(i)] = i;
    std::shuffle(perm.begin(), perm.end(), b.rng());
    for (int i = 0; i < 48; ++i) xv[i] = static_cast<float>(perm[static_cast<size_t>(i)]) / 24.f;
    Node& pool = b.Op("MaxPool", {"x"}, "pooled");
    pool.outputs = {"pooled", "indices"};
    pool.SetInts("kernel_shape", c.kernel);
    pool.SetInts("strides", c.strides);
    std::vector<std::string> ins = {"pooled", "indices"};
    if (!c.output_shape.empty()) {
      b.Const(HostTensor::FromVector<int64_t>(c.output_shape, {4}, "output_shape"));
      ins.push_back("output_shape");
    }
    Node& un = b.Op("MaxUnpool", ins, "y");
    un.SetInts("kernel_shape", c.kernel);
    un.SetInts("strides", c.strides);
    TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", c.y);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-3f);
  }
}


// Only some of the gradient kernels' outputs requested: frozen weights (dX only) or a
// frozen input (dW and dB only).
TEST(GradNn, ConvTransposeAndInstanceNormWithFrozenInputsMatchFiniteDifferences) {
  for (const std::vector<std::string>& freeze :
       {std::vector<std::string>{"w", "b"}, std::vector<std::string>{"x"}, std::vector<std::string>{"x", "b"}}) {
    SCOPED_TRACE("frozen " + std::to_string(freeze.size()) + ": " + freeze[0]);
    ModelBuilder b;
    b.Param("x", {1, 2, 3, 3}, -1.f, 1.f).Param("w", {2, 3, 2, 2}, -1.f, 1.f).Param("b", {3}, -1.f, 1.f);
    Node& n = b.Op("ConvTranspose", {"x", "w", "b"}, "y");
    n.SetInts("strides", {2, 2});
    TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", {1, 3, 6, 6}, freeze);
    ASSERT_EQ(tg.params.size(), 3 - freeze.size());
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);

    ModelBuilder bi;
    bi.Opset(9);
    bi.Param("x", {2, 3, 4}, -1.f, 1.f).Param("w", {3}, 0.5f, 1.5f).Param("b", {3}, -0.5f, 0.5f);
    bi.Op("InstanceNormalization", {"x", "w", "b"}, "y");
    TrainingGraph ti = TrainWithWeightedSumLoss(bi, "y", {2, 3, 4}, freeze);
    ExpectGradientsMatchFiniteDifferences(ti, {}, 1e-2f);
  }
}

}  // namespace
}  // namespace ot
