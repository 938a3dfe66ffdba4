// Finite-difference tests of the tensor gradient rules and their kernels: gathers with
// duplicate and negative indices, scatters, Slice in every form, Split at each opset,
// Tile, Where, Expand, Pad, Trilu, CumSum, TopK, DepthToSpace/SpaceToDepth,
// ReverseSequence and the opset-13 shape ops.
#include <gtest/gtest.h>

#include "graph/autodiff/autodiff.h"
#include "runtime/executor/executor.h"
#include "tests/common/grad_check.h"

namespace ot {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using testing::ModelBuilder;
using testing::TrainWithWeightedSumLoss;

HostTensor Int64s(const std::string& name, std::vector<int64_t> v, std::vector<int64_t> dims) {
  return HostTensor::FromVector(v, std::move(dims), name);
}
HostTensor Bools(const std::string& name, std::vector<uint8_t> v, std::vector<int64_t> dims) {
  HostTensor t(DType::kBool, std::move(dims), name);
  for (size_t i = 0; i < v.size(); ++i) t.bytes[i] = v[i];
  return t;
}

// Every rule below is checked on the gradients of all float parameters of the model.
void Check(TrainingGraph tg, float eps = 1e-2f) {
  ASSERT_FALSE(tg.grads.empty());
  ExpectGradientsMatchFiniteDifferences(tg, {}, eps);
}

// --- Gathers ---------------------------------------------------------------------------

// An embedding lookup: rows 0 and -1 (= 4) repeat, so their gradients must add up.
TEST(GradTensor, GatherDuplicateAndNegativeIndices) {
  ModelBuilder b;
  b.Param("table", {5, 3}, -1.f, 1.f).Const(Int64s("ids", {0, 4, -1, 2, 0, 0, 3, -5}, {2, 4}));
  b.Op("Gather", {"table", "ids"}, "y");
  Check(TrainWithWeightedSumLoss(b, "y", {2, 4, 3}));
}

// int32 indices take the same paths as int64 (GatherGrad, GatherElementsGrad, GatherNDGrad).
HostTensor Int32s(const std::string& name, std::vector<int32_t> v, std::vector<int64_t> dims) {
  return HostTensor::FromVector(v, std::move(dims), name);
}

TEST(GradTensor, Int32Indices) {
  {
    ModelBuilder b;
    b.Param("x", {3, 2}, -1.f, 1.f).Const(Int32s("idx", {2, -1, 2, 0}, {4}));
    b.Op("Gather", {"x", "idx"}, "y");
    Check(TrainWithWeightedSumLoss(b, "y", {4, 2}));
  }
  {
    ModelBuilder b;
    b.Param("x", {3, 4}, -1.f, 1.f).Const(Int32s("idx", {1, -1, 0, -2}, {1, 4}));
    b.Op("GatherElements", {"x", "idx"}, "y").SetInt("axis", 1);
    Check(TrainWithWeightedSumLoss(b, "y", {1, 4}));
  }
  {
    ModelBuilder b;
    b.Param("x", {3, 2}, -1.f, 1.f).Const(Int32s("idx", {2, -1, 2, 0}, {4, 1}));
    b.Op("GatherND", {"x", "idx"}, "y");
    Check(TrainWithWeightedSumLoss(b, "y", {4, 2}));
  }
}

TEST(GradTensor, GatherEveryAxisAndScalarIndex) {
  for (int64_t axis : {0, 1, 2, -1}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    ModelBuilder b;
    b.Param("x", {3, 4, 5}, -1.f, 1.f).Const(Int64s("idx", {1, -1, 1}, {3}));
    b.Op("Gather", {"x", "idx"}, "y").SetInt("axis", axis);
    std::vector<int64_t> out = {3, 4, 5};
    out[static_cast<size_t>(axis < 0 ? axis + 3 : axis)] = 3;
    Check(TrainWithWeightedSumLoss(b, "y", out));
  }
  ModelBuilder b;  // scalar index drops the axis
  b.Param("x", {3, 4}, -1.f, 1.f).Const(HostTensor::FromVector(std::vector<int64_t>{2}, {}, "idx"));
  b.Op("Gather", {"x", "idx"}, "y").SetInt("axis", 1);
  Check(TrainWithWeightedSumLoss(b, "y", {3}));
}

TEST(GradTensor, GatherElementsDuplicateIndices) {
  for (int64_t axis : {0, 1, -1}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    ModelBuilder b;
    // indices [2, 3] smaller than data [3, 4] on the other axis; duplicates along the axis.
    b.Param("x", {3, 4}, -1.f, 1.f).Const(Int64s("idx", {0, 2, 2, 1, -1, 0}, {2, 3}));
    b.Op("GatherElements", {"x", "idx"}, "y").SetInt("axis", axis);
    Check(TrainWithWeightedSumLoss(b, "y", {2, 3}));
  }
}

TEST(GradTensor, GatherNDBatchDimsAndPartialTuples) {
  {  // k = 1 of rank-3 data: whole rows, with a duplicate.
    ModelBuilder b;
    b.Param("x", {3, 2, 4}, -1.f, 1.f).Const(Int64s("idx", {2, 0, 2}, {3, 1}));
    b.Op("GatherND", {"x", "idx"}, "y");
    Check(TrainWithWeightedSumLoss(b, "y", {3, 2, 4}));
  }
  {  // k = 2, tuples shaped [2, 2], negative index.
    ModelBuilder b;
    b.Param("x", {3, 2, 4}, -1.f, 1.f).Const(Int64s("idx", {0, 1, 2, 0, -1, 1, 0, 1}, {2, 2, 2}));
    b.Op("GatherND", {"x", "idx"}, "y");
    Check(TrainWithWeightedSumLoss(b, "y", {2, 2, 4}));
  }
  {  // batch_dims 1: one tuple list per batch entry.
    ModelBuilder b;
    b.Param("x", {2, 3, 4}, -1.f, 1.f).Const(Int64s("idx", {1, 2, 1, 1, 0, 3, 0, 3}, {2, 2, 2}));
    b.Op("GatherND", {"x", "idx"}, "y").SetInt("batch_dims", 1);
    Check(TrainWithWeightedSumLoss(b, "y", {2, 2}));
  }
}

TEST(GradTensor, ScatterNDDataAndUpdates) {
  ModelBuilder b;
  b.Param("data", {4, 3}, -1.f, 1.f).Param("upd", {2, 3}, -1.f, 1.f).Const(Int64s("idx", {3, 1}, {2, 1}));
  b.Op("ScatterND", {"data", "idx", "upd"}, "y");
  Check(TrainWithWeightedSumLoss(b, "y", {4, 3}));
}

TEST(GradTensor, ScatterElementsDataAndUpdates) {
  for (int64_t axis : {0, 1}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    ModelBuilder b;
    // Unique target positions along each axis.
    b.Param("data", {3, 4}, -1.f, 1.f).Param("upd", {2, 3}, -1.f, 1.f);
    b.Const(Int64s("idx", axis == 0 ? std::vector<int64_t>{2, 0, 1, 0, 1, -1} : std::vector<int64_t>{3, 0, 1, 1, -1, 2},
                   {2, 3}));
    b.Op("ScatterElements", {"data", "idx", "upd"}, "y").SetInt("axis", axis);
    Check(TrainWithWeightedSumLoss(b, "y", {3, 4}));
  }
}

// --- Slice and Split -------------------------------------------------------------------

struct SliceCase {
  std::vector<int64_t> starts, ends, axes, steps;  // axes/steps empty: input omitted
  std::vector<int64_t> out;
};

TEST(GradTensor, SliceOpset13StepsAxesClamping) {
  const std::vector<SliceCase> cases = {
      {{1}, {1000}, {1}, {}, {3, 4, 5}},                    // end clamped
      {{-1, 0}, {-1000, 5}, {2, 1}, {-2, 2}, {3, 3, 3}},    // negative step, clamped end
      {{0, 1, 1}, {2, 3, 1000}, {}, {}, {2, 2, 4}},         // axes omitted
      {{2, -2}, {0, -5}, {0, -1}, {-1, -1}, {2, 5, 3}},     // negative axes and steps
  };
  for (const SliceCase& c : cases) {
    SCOPED_TRACE("starts " + ShapeString(c.starts));
    ModelBuilder b;
    b.Param("x", {3, 5, 5}, -1.f, 1.f);
    const auto n = static_cast<int64_t>(c.starts.size());
    b.Const(Int64s("starts", c.starts, {n})).Const(Int64s("ends", c.ends, {n}));
    std::vector<std::string> ins = {"x", "starts", "ends"};
    if (!c.axes.empty()) {
      b.Const(Int64s("axes", c.axes, {n}));
      ins.push_back("axes");
    }
    if (!c.steps.empty()) {
      if (c.axes.empty()) ins.push_back("");
      b.Const(Int64s("steps", c.steps, {n}));
      ins.push_back("steps");
    }
    b.Op("Slice", ins, "y");
    Check(TrainWithWeightedSumLoss(b, "y", c.out));
  }
}

TEST(GradTensor, SliceOpset9Attributes) {
  ModelBuilder b;
  b.Opset(9);
  b.Param("x", {4, 5}, -1.f, 1.f);
  Node& s = b.Op("Slice", {"x"}, "y");
  s.SetInts("starts", {1, -4});
  s.SetInts("ends", {1000, 4});
  s.SetInts("axes", {0, 1});
  Check(TrainWithWeightedSumLoss(b, "y", {3, 3}));
}

TEST(GradTensor, SplitEveryOpsetFormWithUnusedOutputs) {
  struct Case {
    int64_t opset;
    std::vector<int64_t> split;  // empty: equal pieces (or num_outputs at 18)
    int outputs;
    std::vector<std::vector<int64_t>> dims;
  };
  const std::vector<Case> cases = {
      {11, {2, 3}, 2, {{3, 2}, {3, 3}}},           // attribute
      {11, {}, 5, {{3, 1}, {3, 1}, {3, 1}, {3, 1}, {3, 1}}},
      {13, {1, 4}, 2, {{3, 1}, {3, 4}}},           // input
      {13, {}, 5, {{3, 1}, {3, 1}, {3, 1}, {3, 1}, {3, 1}}},
      {18, {}, 3, {{3, 2}, {3, 2}, {3, 1}}},       // num_outputs, uneven
      {18, {3, 0, 2}, 3, {{3, 3}, {3, 0}, {3, 2}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("opset " + std::to_string(c.opset) + " outputs " + std::to_string(c.outputs));
    ModelBuilder b;
    b.Opset(c.opset);
    b.Param("x", {3, 5}, -1.f, 1.f);
    std::vector<std::string> ins = {"x"};
    if (c.opset >= 13 && !c.split.empty()) {
      b.Const(Int64s("split", c.split, {static_cast<int64_t>(c.split.size())}));
      ins.push_back("split");
    }
    Node& n = b.Op("Split", ins, "p0");
    n.SetInt("axis", -1);
    if (c.opset < 13 && !c.split.empty()) n.SetInts("split", c.split);
    if (c.opset >= 18 && c.split.empty()) n.SetInt("num_outputs", c.outputs);
    n.outputs.clear();
    for (int i = 0; i < c.outputs; ++i) n.outputs.push_back("p" + std::to_string(i));
    // Only the first and last pieces reach the loss; the others get zero gradients.
    b.Op("Concat", {"p0", "p" + std::to_string(c.outputs - 1)}, "y").SetInt("axis", 1);
    Check(TrainWithWeightedSumLoss(b, "y", {3, c.dims.front()[1] + c.dims.back()[1]}));
  }
}

// --- Tile, Where, Expand, Pad ---------------------------------------------------------

TEST(GradTensor, Tile) {
  ModelBuilder b;
  b.Param("x", {2, 1, 3}, -1.f, 1.f).Const(Int64s("reps", {2, 3, 1}, {3}));
  b.Op("Tile", {"x", "reps"}, "y");
  Check(TrainWithWeightedSumLoss(b, "y", {4, 3, 3}));
}

TEST(GradTensor, WhereBroadcastsAndStopsAtTheCondition) {
  ModelBuilder b;
  b.Param("x", {1, 4}, -1.f, 1.f).Param("y_in", {3, 4}, -1.f, 1.f);
  b.Const(Bools("cond", {1, 0, 1}, {3, 1}));
  b.Op("Where", {"cond", "x", "y_in"}, "y");
  Check(TrainWithWeightedSumLoss(b, "y", {3, 4}));
}

TEST(GradTensor, ExpandAndPad) {
  {
    ModelBuilder b;
    b.Param("x", {3, 1}, -1.f, 1.f).Const(Int64s("shape", {2, 1, 4}, {3}));
    b.Op("Expand", {"x", "shape"}, "y");
    Check(TrainWithWeightedSumLoss(b, "y", {2, 3, 4}));
  }
  {
    ModelBuilder b;
    b.Param("x", {2, 3}, -1.f, 1.f).Const(Int64s("pads", {1, -1, 0, 2}, {4}));
    b.Op("Pad", {"x", "pads"}, "y");
    Check(TrainWithWeightedSumLoss(b, "y", {3, 4}));
  }
}

// Reflect and edge read border elements several times: their gradients add up.
TEST(GradTensor, PadReflectAndEdge) {
  for (const char* mode : {"reflect", "edge"}) {
    SCOPED_TRACE(mode);
    {
      ModelBuilder b;
      b.Param("x", {2, 3, 4}, -1.f, 1.f).Const(Int64s("pads", {0, 2, 3, 1, 1, -1}, {6}));
      b.Op("Pad", {"x", "pads"}, "y").SetString("mode", mode);
      Check(TrainWithWeightedSumLoss(b, "y", {3, 6, 6}));
    }
    {
      ModelBuilder b;  // opset 2: pads as an attribute
      b.Opset(9);
      b.Param("x", {3, 4}, -1.f, 1.f);
      Node& n = b.Op("Pad", {"x"}, "y");
      n.SetString("mode", mode);
      n.SetInts("pads", {2, 3, 1, 0});
      Check(TrainWithWeightedSumLoss(b, "y", {6, 7}));
    }
  }
}

// Opset 18: pads for the named axes only; the same output as full pads at opset 13, and
// the gradient through it.
TEST(GradTensor, PadOpset18Axes) {
  for (const char* mode : {"constant", "reflect"}) {
    SCOPED_TRACE(mode);
    auto run = [&](int64_t opset, std::vector<int64_t> pads, std::vector<int64_t> axes) {
      ModelBuilder b;
      b.Opset(opset);
      b.Param("x", {2, 3, 4}, -1.f, 1.f).Const(Int64s("pads", pads, {static_cast<int64_t>(pads.size())}));
      std::vector<std::string> ins = {"x", "pads"};
      if (!axes.empty()) {
        b.Const(Int64s("axes", axes, {static_cast<int64_t>(axes.size())}));
        ins.insert(ins.end(), {"", "axes"});
      }
      b.Op("Pad", ins, "y").SetString("mode", mode);
      return b;
    };
    ModelBuilder full = run(13, {0, 2, 1, 0, 1, 2}, {});
    ModelBuilder ax = run(18, {1, 2, 2, 1}, {-1, 1});
    Executor e1(full.Build()), e2(ax.Build());
    HostTensor y1 = e1.Run({}, {"y"})[0].ToHost(), y2 = e2.Run({}, {"y"})[0].ToHost();
    ASSERT_EQ(y1.dims, (std::vector<int64_t>{2, 6, 7}));
    EXPECT_EQ(y2.dims, y1.dims);
    EXPECT_EQ(y2.bytes, y1.bytes);
    Check(TrainWithWeightedSumLoss(ax, "y", {2, 6, 7}));
  }
}

// --- Trilu, CumSum, TopK ---------------------------------------------------------------

TEST(GradTensor, TriluUpperLowerOffsets) {
  for (int64_t upper : {0, 1})
    for (int64_t k : {-1, 0, 2}) {
      SCOPED_TRACE("upper " + std::to_string(upper) + " k " + std::to_string(k));
      ModelBuilder b;
      b.Opset(14);
      b.Param("x", {2, 3, 4}, -1.f, 1.f).Const(HostTensor::FromVector(std::vector<int64_t>{k}, {}, "k"));
      b.Op("Trilu", {"x", "k"}, "y").SetInt("upper", upper);
      Check(TrainWithWeightedSumLoss(b, "y", {2, 3, 4}));
    }
}

TEST(GradTensor, CumSumExclusiveReverse) {
  for (int64_t exclusive : {0, 1})
    for (int64_t reverse : {0, 1})
      for (int64_t axis : {0, -1}) {
        SCOPED_TRACE("exclusive " + std::to_string(exclusive) + " reverse " + std::to_string(reverse));
        ModelBuilder b;
        b.Opset(14);
        b.Param("x", {3, 4}, -1.f, 1.f).Const(HostTensor::FromVector(std::vector<int64_t>{axis}, {}, "axis"));
        Node& n = b.Op("CumSum", {"x", "axis"}, "y");
        n.SetInt("exclusive", exclusive);
        n.SetInt("reverse", reverse);
        Check(TrainWithWeightedSumLoss(b, "y", {3, 4}));
      }
}

TEST(GradTensor, TopKLargestSmallestUnsorted) {
  for (int64_t largest : {0, 1})
    for (int64_t sorted : {0, 1}) {
      SCOPED_TRACE("largest " + std::to_string(largest) + " sorted " + std::to_string(sorted));
      ModelBuilder b;
      b.Opset(11);
      b.Param("x", {3, 5, 2}, -1.f, 1.f).Const(Int64s("k", {3}, {1}));
      Node& n = b.Op("TopK", {"x", "k"}, "values");
      n.outputs.push_back("indices");
      n.SetInt("axis", 1);
      n.SetInt("largest", largest);
      n.SetInt("sorted", sorted);
      Check(TrainWithWeightedSumLoss(b, "values", {3, 3, 2}), 2e-3f);
    }
}

// --- Permutations ----------------------------------------------------------------------

TEST(GradTensor, DepthToSpaceBothModesAndSpaceToDepth) {
  for (const char* mode : {"DCR", "CRD"}) {
    SCOPED_TRACE(mode);
    ModelBuilder b;
    b.Param("x", {1, 8, 2, 3}, -1.f, 1.f);
    Node& n = b.Op("DepthToSpace", {"x"}, "y");
    n.SetInt("blocksize", 2);
    n.SetString("mode", mode);
    Check(TrainWithWeightedSumLoss(b, "y", {1, 2, 4, 6}));
  }
  for (int64_t opset : {9, 13}) {  // before 11 DepthToSpace (the gradient) has no mode
    ModelBuilder b;
    b.Opset(opset);
    b.Param("x", {2, 2, 4, 6}, -1.f, 1.f);
    b.Op("SpaceToDepth", {"x"}, "y").SetInt("blocksize", 2);
    TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", {2, 8, 2, 3});
    for (const Node& n : tg.model.graph.nodes)
      if (n.op_type == "DepthToSpace") {
        EXPECT_EQ(n.HasAttr("mode"), opset >= 11);
      }
    Check(tg);
  }
}

TEST(GradTensor, ReverseSequenceBothLayouts) {
  for (int64_t batch_axis : {0, 1}) {
    SCOPED_TRACE("batch_axis " + std::to_string(batch_axis));
    ModelBuilder b;
    std::vector<int64_t> dims = batch_axis == 0 ? std::vector<int64_t>{3, 4, 2} : std::vector<int64_t>{4, 3, 2};
    b.Param("x", dims, -1.f, 1.f).Const(Int64s("lens", {4, 1, 2}, {3}));
    Node& n = b.Op("ReverseSequence", {"x", "lens"}, "y");
    n.SetInt("batch_axis", batch_axis);
    n.SetInt("time_axis", 1 - batch_axis);
    Check(TrainWithWeightedSumLoss(b, "y", dims));
  }
}

// --- Shape ops at opset 13 (axes as inputs) --------------------------------------------

TEST(GradTensor, SqueezeUnsqueezeFlattenOpset13) {
  ModelBuilder b;
  b.Param("x", {3, 1, 4}, -1.f, 1.f).Const(Int64s("sq", {1}, {1})).Const(Int64s("unsq", {0, -1}, {2}));
  b.Op("Squeeze", {"x", "sq"}, "a");
  b.Op("Unsqueeze", {"a", "unsq"}, "c");
  b.Op("Flatten", {"c"}, "y").SetInt("axis", 2);
  Check(TrainWithWeightedSumLoss(b, "y", {3, 4}));
}

TEST(GradTensor, TransposeAndIdentity) {
  ModelBuilder b;
  b.Param("x", {2, 3, 4}, -1.f, 1.f);
  b.Op("Transpose", {"x"}, "t").SetInts("perm", {2, 0, 1});
  b.Op("Identity", {"t"}, "y");
  Check(TrainWithWeightedSumLoss(b, "y", {4, 2, 3}));
}

// The int64 shape chain torch exports for x.view(x.size(0), -1): Shape, Gather, Unsqueeze,
// Concat and Reshape run, and the gradient flows only through Reshape's data input.
TEST(GradTensor, ShapeGatherConcatReshapeChain) {
  ModelBuilder b;
  b.Param("x", {2, 3, 4}, -1.f, 1.f);
  b.Const(HostTensor::FromVector(std::vector<int64_t>{0}, {}, "zero")).Const(Int64s("axes0", {0}, {1}));
  b.Const(Int64s("minus1", {-1}, {1}));
  b.Op("Shape", {"x"}, "s");
  b.Op("Gather", {"s", "zero"}, "n").SetInt("axis", 0);
  b.Op("Unsqueeze", {"n", "axes0"}, "n1");
  b.Op("Concat", {"n1", "minus1"}, "target").SetInt("axis", 0);
  b.Op("Reshape", {"x", "target"}, "y");
  Check(TrainWithWeightedSumLoss(b, "y", {2, 12}));
}

// --- Resize and Upsample ---------------------------------------------------------------

HostTensor Floats(const std::string& name, std::vector<float> v) {
  const auto n = static_cast<int64_t>(v.size());
  return HostTensor::FromVector(v, {n}, name);
}

struct ResizeCase {
  std::string mode, coord, nearest;
  bool sizes;  // sizes input instead of scales
};

TEST(GradTensor, ResizeEveryModeScalesAndSizes) {
  const std::vector<ResizeCase> cases = {
      {"nearest", "asymmetric", "floor", false},           {"nearest", "half_pixel", "round_prefer_floor", false},
      {"nearest", "align_corners", "round_prefer_ceil", true}, {"nearest", "tf_half_pixel_for_nn", "ceil", true},
      {"linear", "half_pixel", "", false},                 {"linear", "align_corners", "", true},
      {"linear", "asymmetric", "", false},                 {"linear", "pytorch_half_pixel", "", true},
      {"cubic", "half_pixel", "", false},                  {"cubic", "align_corners", "", true},
  };
  for (const ResizeCase& c : cases) {
    SCOPED_TRACE(c.mode + " " + c.coord + " " + c.nearest + (c.sizes ? " sizes" : " scales"));
    ModelBuilder b;
    b.Opset(c.coord == "tf_half_pixel_for_nn" ? 11 : 13);
    // Up on H (3 -> 7 or x2.5), down on W (5 -> 3 or x0.6).
    b.Param("x", {1, 2, 3, 5}, -1.f, 1.f).Const(Floats("roi", {}));
    std::vector<int64_t> out = {1, 2, 7, 3};
    if (c.sizes) {
      b.Const(Floats("scales", {})).Const(Int64s("sizes", out, {4}));
      b.Op("Resize", {"x", "roi", "scales", "sizes"}, "y");
    } else {
      b.Const(Floats("scales", {1.f, 1.f, 2.5f, 0.6f}));
      b.Op("Resize", {"x", "roi", "scales"}, "y");
    }
    Node& n = b.model().graph.nodes.back();
    n.SetString("mode", c.mode);
    n.SetString("coordinate_transformation_mode", c.coord);
    if (!c.nearest.empty()) n.SetString("nearest_mode", c.nearest);
    if (c.mode == "cubic") n.SetInt("exclude_outside", c.sizes ? 1 : 0);
    Check(TrainWithWeightedSumLoss(b, "y", out));
  }
}

// Linear half-pixel at scales that are exactly out/in (torch's bilinear upsampling): the
// kernels take oneDNN's resampling primitives here, rank 4 and rank 5.
TEST(GradTensor, ResizeLinearHalfPixelExactScales) {
  for (int rank : {4, 5}) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    ModelBuilder b;
    std::vector<int64_t> in = {2, 2, 3, 6}, out = {2, 2, 6, 3};
    std::vector<float> scales = {1.f, 1.f, 2.f, 0.5f};
    if (rank == 5) {
      in.push_back(2);
      out.push_back(4);
      scales.push_back(2.f);
    }
    b.Param("x", in, -1.f, 1.f).Const(Floats("roi", {})).Const(Floats("scales", scales));
    Node& n = b.Op("Resize", {"x", "roi", "scales"}, "y");
    n.SetString("mode", "linear");
    Check(TrainWithWeightedSumLoss(b, "y", out));
  }
}

// Opset 18: `axes` names the resized axes (roi, scales, sizes list only those), and
// keep_aspect_ratio_policy scales them all by the smallest or largest requested ratio.
HostTensor RunResize(int64_t opset, const std::vector<float>& roi, const std::vector<float>& scales,
                     const std::vector<int64_t>& sizes, const std::map<std::string, std::string>& strings,
                     const std::vector<int64_t>& axes) {
  ModelBuilder b;
  b.Opset(opset);
  b.Param("x", {1, 2, 4, 6}, -1.f, 1.f).Const(Floats("roi", roi)).Const(Floats("scales", scales));
  std::vector<std::string> ins = {"x", "roi", "scales"};
  if (!sizes.empty()) {
    b.Const(Int64s("sizes", sizes, {static_cast<int64_t>(sizes.size())}));
    ins.push_back("sizes");
  }
  Node& n = b.Op("Resize", ins, "y");
  for (const auto& [k, v] : strings) n.SetString(k, v);
  if (!axes.empty()) n.SetInts("axes", axes);
  Executor exec(b.Build());
  return exec.Run({}, {"y"})[0].ToHost();
}

TEST(GradTensor, ResizeOpset18AxesAndAspectRatio) {
  const std::map<std::string, std::string> linear = {{"mode", "linear"}};
  {  // axes [2, 3] (and [-1, 2], in another order) == full scales at opset 13
    HostTensor full = RunResize(13, {}, {1, 1, 1.5f, 0.5f}, {}, linear, {});
    HostTensor ax = RunResize(18, {}, {1.5f, 0.5f}, {}, linear, {2, 3});
    HostTensor rev = RunResize(18, {}, {0.5f, 1.5f}, {}, linear, {-1, 2});
    ASSERT_EQ(full.dims, (std::vector<int64_t>{1, 2, 6, 3}));
    EXPECT_EQ(ax.dims, full.dims);
    EXPECT_EQ(rev.dims, full.dims);
    EXPECT_EQ(ax.bytes, full.bytes);
    EXPECT_EQ(rev.bytes, full.bytes);
  }
  {  // crop roi on the named axes only
    const std::map<std::string, std::string> crop = {{"mode", "linear"}, {"coordinate_transformation_mode", "tf_crop_and_resize"}};
    HostTensor full = RunResize(13, {0, 0, 0.2f, 0.1f, 1, 1, 0.9f, 0.7f}, {}, {1, 2, 5, 4}, crop, {});
    HostTensor ax = RunResize(18, {0.2f, 0.1f, 0.9f, 0.7f}, {}, {5, 4}, crop, {2, 3});
    EXPECT_EQ(ax.dims, full.dims);
    EXPECT_EQ(ax.bytes, full.bytes);
  }
  // [4, 6] asked to become [6, 6]: not_larger keeps ratio 1 (4 x 6), not_smaller 1.5 (6 x 9).
  auto policy = [&](const char* p) {
    return RunResize(18, {}, {}, {6, 6}, {{"mode", "nearest"}, {"keep_aspect_ratio_policy", p}}, {2, 3}).dims;
  };
  EXPECT_EQ(policy("stretch"), (std::vector<int64_t>{1, 2, 6, 6}));
  EXPECT_EQ(policy("not_larger"), (std::vector<int64_t>{1, 2, 4, 6}));
  EXPECT_EQ(policy("not_smaller"), (std::vector<int64_t>{1, 2, 6, 9}));
  // And the gradient through the opset-18 form.
  ModelBuilder b;
  b.Opset(18);
  b.Param("x", {1, 2, 4, 6}, -1.f, 1.f).Const(Floats("roi", {})).Const(Floats("scales", {}));
  b.Const(Int64s("sizes", {7, 5}, {2}));
  Node& n = b.Op("Resize", {"x", "roi", "scales", "sizes"}, "y");
  n.SetString("mode", "cubic");
  n.SetString("keep_aspect_ratio_policy", "not_smaller");
  n.SetInts("axes", {2, 3});
  Check(TrainWithWeightedSumLoss(b, "y", {1, 2, 7, 11}));
}

// tf_crop_and_resize: outputs outside the crop take extrapolation_value and pass nothing back.
TEST(GradTensor, ResizeCropAndResizeExtrapolation) {
  ModelBuilder b;
  b.Param("x", {1, 1, 4, 4}, -1.f, 1.f).Const(Floats("roi", {0, 0, -0.2f, 0.3f, 1, 1, 0.8f, 1.4f}));
  b.Const(Floats("scales", {})).Const(Int64s("sizes", {1, 1, 3, 5}, {4}));
  Node& n = b.Op("Resize", {"x", "roi", "scales", "sizes"}, "y");
  n.SetString("mode", "linear");
  n.SetString("coordinate_transformation_mode", "tf_crop_and_resize");
  n.SetFloat("extrapolation_value", 0.5f);
  Check(TrainWithWeightedSumLoss(b, "y", {1, 1, 3, 5}));
}

// Opset 10 Resize (X, scales) and opset 7 Upsample (scales attribute): asymmetric, floor.
TEST(GradTensor, ResizeOpset10AndUpsampleOpset7) {
  for (const char* mode : {"nearest", "linear"}) {
    SCOPED_TRACE(mode);
    {
      ModelBuilder b;
      b.Opset(10);
      b.Param("x", {1, 1, 3, 4}, -1.f, 1.f).Const(Floats("scales", {1.f, 1.f, 1.5f, 0.75f}));
      b.Op("Resize", {"x", "scales"}, "y").SetString("mode", mode);
      Check(TrainWithWeightedSumLoss(b, "y", {1, 1, 4, 3}));
    }
    {
      ModelBuilder b;
      b.Opset(7);
      b.Param("x", {1, 2, 2, 3}, -1.f, 1.f);
      Node& n = b.Op("Upsample", {"x"}, "y");
      n.SetString("mode", mode);
      n.SetFloats("scales", {1.f, 1.f, 2.f, 2.f});
      Check(TrainWithWeightedSumLoss(b, "y", {1, 2, 4, 6}));
    }
  }
}

TEST(GradTensor, UpsampleOpset9) {
  for (const char* mode : {"nearest", "linear"}) {
    SCOPED_TRACE(mode);
    ModelBuilder b;
    b.Opset(9);
    b.Param("x", {1, 2, 2, 3}, -1.f, 1.f).Const(Floats("scales", {1.f, 1.f, 2.f, 1.5f}));
    b.Op("Upsample", {"x", "scales"}, "y").SetString("mode", mode);
    Check(TrainWithWeightedSumLoss(b, "y", {1, 2, 4, 4}));
  }
}

// --- GridSample ------------------------------------------------------------------------

// dX and dGrid in every mode, padding and alignment. The grid points sit at pixel
// coordinates at least 0.1 from where the sampling has kinks (integers, the clip and
// reflection borders, nearest's rounding points), so central differences are smooth.
TEST(GradTensor, GridSampleEveryModePaddingAlignment) {
  const int64_t h = 4, w = 5;
  const std::vector<double> xs = {-1.35, -0.7, 0.4, 1.6, 2.3, 3.65, 4.3, 5.4};
  const std::vector<double> ys = {-1.3, -0.65, 0.35, 1.6, 2.7, 3.3, 4.4};
  for (const char* mode : {"bilinear", "nearest", "bicubic"})
    for (const char* padding : {"zeros", "border", "reflection"})
      for (int64_t align : {0, 1}) {
        SCOPED_TRACE(std::string(mode) + " " + padding + " align " + std::to_string(align));
        ModelBuilder b;
        b.Opset(16);
        b.Param("x", {1, 2, h, w}, -1.f, 1.f).Param("grid", {1, 3, 4, 2}, -1.f, 1.f);
        for (HostTensor& t : b.model().graph.initializers) {
          if (t.name != "grid") continue;
          for (int64_t k = 0; k < 12; ++k) {  // pixel coordinates -> normalised grid values
            const double px = xs[static_cast<size_t>(k * 3 % 8)], py = ys[static_cast<size_t>(k * 5 % 7)];
            auto norm = [&](double p, int64_t size) {
              return align ? 2 * p / static_cast<double>(size - 1) - 1 : (2 * p + 1) / static_cast<double>(size) - 1;
            };
            t.Data<float>()[k * 2] = static_cast<float>(norm(px, w));
            t.Data<float>()[k * 2 + 1] = static_cast<float>(norm(py, h));
          }
        }
        Node& n = b.Op("GridSample", {"x", "grid"}, "y");
        n.SetString("mode", mode);
        n.SetString("padding_mode", padding);
        n.SetInt("align_corners", align);
        TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", {1, 2, 3, 4});
        ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-3f);
      }
}

// --- Bad input: one error naming the node, never a crash or a silent answer -------------

std::string RunError(Model m, const std::map<std::string, Tensor>& feeds, const std::string& fetch) {
  try {
    Executor exec(m);
    exec.Run(feeds, {fetch});
    exec.Run(feeds, {fetch});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GradTensor, BadInputErrorsNameTheNode) {
  {
    ModelBuilder b;
    b.Param("x", {3, 2}, -1.f, 1.f).Const(Int64s("idx", {0, 3}, {2}));
    b.Op("Gather", {"x", "idx"}, "y");
    const std::string e = RunError(b.Build(), {}, "y");
    EXPECT_NE(e.find("Gather_0"), std::string::npos) << e;
    EXPECT_NE(e.find("index 3 is out of range"), std::string::npos) << e;
  }
  {
    ModelBuilder b;
    b.Param("x", {2, 3}, -1.f, 1.f).Const(Int64s("idx", {0, 1, 2}, {1, 3}));
    b.Op("GatherND", {"x", "idx"}, "y");
    const std::string e = RunError(b.Build(), {}, "y");
    EXPECT_NE(e.find("GatherND_0"), std::string::npos) << e;
    EXPECT_NE(e.find("exceeds data rank"), std::string::npos) << e;
  }
  {
    ModelBuilder b;
    b.Param("x", {1, 1, 2, 2}, -1.f, 1.f).Const(Floats("roi", {})).Const(Floats("scales", {1, 1, 2, 2}));
    b.Op("Resize", {"x", "roi", "scales"}, "y").SetString("mode", "bicubic");
    const std::string e = RunError(b.Build(), {}, "y");
    EXPECT_NE(e.find("Resize_0"), std::string::npos) << e;
    EXPECT_NE(e.find("mode must be nearest, linear or cubic"), std::string::npos) << e;
  }
  {  // NonZero's output size is planned once per input shapes: a changed count is an error.
    ModelBuilder b;
    b.Input("x", DType::kFloat32, {4});
    b.Op("NonZero", {"x"}, "y");
    Executor exec(b.Build());
    auto feed = [](std::vector<float> v) { return std::map<std::string, Tensor>{{"x", Tensor::FromHost(HostTensor::FromVector(v, {4}))}}; };
    HostTensor first = exec.Run(feed({0, 2, 0, 3}), {"y"})[0].ToHost();
    EXPECT_EQ(first.AsInt64s(), (std::vector<int64_t>{1, 3}));
    EXPECT_EQ(exec.Run(feed({5, 0, 0, 1}), {"y"})[0].ToHost().AsInt64s(), (std::vector<int64_t>{0, 3}));
    try {
      exec.Run(feed({1, 1, 1, 0}), {"y"});
      ADD_FAILURE() << "a changed non-zero count was not reported";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("NonZero_0"), std::string::npos) << e.what();
    }
  }
  {  // The gradient of ScatterND with a reduction is refused when the training graph is built.
    ModelBuilder b;
    b.Opset(16);
    b.Param("data", {4, 3}, -1.f, 1.f).Param("upd", {2, 3}, -1.f, 1.f).Const(Int64s("idx", {3, 1}, {2, 1}));
    b.Op("ScatterND", {"data", "idx", "upd"}, "y").SetString("reduction", "add");
    try {
      TrainWithWeightedSumLoss(b, "y", {4, 3});
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("reduction 'add' is not supported"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ot
