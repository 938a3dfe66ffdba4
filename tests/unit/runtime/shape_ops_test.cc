// Tests of the shape and data-movement kernels (runtime/cpu/tensor/shape_ops.cc,
// transpose_concat.cc) for what the ONNX conformance cases miss: Dropout in training mode
// (seeded determinism, mask/scale consistency, statistics), a Reshape whose target shape
// is computed in the graph the way PyTorch exports it, zero-size tensors, float16 rounding
// and the non-float paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "graph/error.h"
#include "runtime/executor/executor.h"
#include "runtime/ops/shapes/index_shapes.h"

namespace ot {
namespace {

using AttrSetter = std::function<void(Node&)>;

// A model of one node whose inputs are graph inputs "in0", "in1", ... (an input with an
// undefined dtype is left absent) and whose outputs are "out0", "out1", ...
Model SingleNodeModel(const std::string& op, const std::vector<HostTensor>& inputs, int num_outputs,
                      const AttrSetter& set_attrs, int64_t opset) {
  Model m;
  m.opsets[""] = opset;
  Node n;
  n.name = "node";
  n.op_type = op;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dtype == DType::kUndefined) {
      n.inputs.push_back("");
      continue;
    }
    ValueInfo v;
    v.name = "in" + std::to_string(i);
    v.dtype = inputs[i].dtype;
    m.graph.inputs.push_back(v);
    n.inputs.push_back(v.name);
  }
  for (int i = 0; i < num_outputs; ++i) {
    n.outputs.push_back("out" + std::to_string(i));
    ValueInfo v;
    v.name = n.outputs.back();
    m.graph.outputs.push_back(v);
  }
  if (set_attrs) set_attrs(n);
  m.graph.nodes.push_back(n);
  return m;
}

std::map<std::string, Tensor> Feeds(const std::vector<HostTensor>& inputs) {
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].dtype != DType::kUndefined) feeds["in" + std::to_string(i)] = Tensor::FromHost(inputs[i]);
  return feeds;
}

std::vector<HostTensor> RunNode(const std::string& op, const std::vector<HostTensor>& inputs, int num_outputs = 1,
                                const AttrSetter& set_attrs = {}, int64_t opset = 17) {
  Executor exec(SingleNodeModel(op, inputs, num_outputs, set_attrs, opset));
  std::vector<HostTensor> out;
  for (const Tensor& t : exec.Run(Feeds(inputs))) out.push_back(t.ToHost());
  return out;
}

template <typename T> std::vector<T> Values(const HostTensor& t) {
  return std::vector<T>(t.Data<T>(), t.Data<T>() + t.NumElements());
}

HostTensor Floats(std::vector<float> v, Shape shape) { return HostTensor::FromVector(v, std::move(shape)); }
HostTensor Ints(std::vector<int64_t> v) {
  Shape shape = {static_cast<int64_t>(v.size())};
  return HostTensor::FromVector(v, shape);
}
HostTensor Scalar(float v) { return HostTensor::FromVector(std::vector<float>{v}, {}); }
HostTensor Bool(bool v) {
  HostTensor t(DType::kBool, {});
  t.bytes[0] = v;
  return t;
}

// ---------------------------------------------------------------------------------------
// Dropout in training mode.

HostTensor RandomInput(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(1.f, 2.f);  // never 0, so a drop is visible
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return Floats(v, {n});
}

AttrSetter Seed(int64_t seed) {
  return [seed](Node& n) { n.SetInt("seed", seed); };
}

TEST(Dropout, TrainingMaskAndScaleAreConsistent) {
  const int64_t n = 200000;
  const float ratio = 0.3f;
  HostTensor x = RandomInput(n, 7);
  auto out = RunNode("Dropout", {x, Scalar(ratio), Bool(true)}, 2, Seed(42), 13);
  ASSERT_EQ(out[1].dtype, DType::kBool);
  const float scale = 1.f / (1.f - ratio);
  int64_t kept = 0;
  double in_sum = 0, out_sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x.Data<float>()[i], yi = out[0].Data<float>()[i];
    const bool mask = out[1].Data<uint8_t>()[i] != 0;
    if (mask) {
      EXPECT_FLOAT_EQ(yi, xi * scale) << i;
      ++kept;
    } else {
      EXPECT_EQ(yi, 0.f) << i;
    }
    in_sum += xi;
    out_sum += yi;
  }
  // Kept fraction ~ 1 - ratio (std ~ 0.001 here) and the mean is preserved.
  EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - ratio, 0.01);
  EXPECT_NEAR(out_sum / in_sum, 1.0, 0.01);
}

TEST(Dropout, SeedMakesMasksReproducibleAcrossExecutors) {
  HostTensor x = RandomInput(1000, 1);
  std::vector<HostTensor> inputs = {x, Scalar(0.5f), Bool(true)};
  auto a = RunNode("Dropout", inputs, 2, Seed(5), 13);
  auto b = RunNode("Dropout", inputs, 2, Seed(5), 13);
  auto c = RunNode("Dropout", inputs, 2, Seed(6), 13);
  EXPECT_EQ(a[1].bytes, b[1].bytes);
  EXPECT_EQ(a[0].bytes, b[0].bytes);
  EXPECT_NE(a[1].bytes, c[1].bytes);
}

TEST(Dropout, SuccessiveRunsDrawNewMasks) {
  HostTensor x = RandomInput(1000, 2);
  std::vector<HostTensor> inputs = {x, Scalar(0.5f), Bool(true)};
  Executor exec(SingleNodeModel("Dropout", inputs, 2, Seed(3), 13));
  HostTensor first = exec.Run(Feeds(inputs))[1].ToHost();
  HostTensor second = exec.Run(Feeds(inputs))[1].ToHost();
  EXPECT_NE(first.bytes, second.bytes);
}

TEST(Dropout, WithoutSeedFollowsTheExecutorSeed) {
  HostTensor x = RandomInput(1000, 3);
  std::vector<HostTensor> inputs = {x, Scalar(0.5f), Bool(true)};
  auto run = [&](uint64_t seed) {
    ExecutorOptions opts;
    opts.seed = seed;
    Executor exec(SingleNodeModel("Dropout", inputs, 2, {}, 13), opts);
    return exec.Run(Feeds(inputs))[1].ToHost().bytes;
  };
  EXPECT_EQ(run(11), run(11));
  EXPECT_NE(run(11), run(12));
}

TEST(Dropout, InferenceModeIsIdentityWithFullMask) {
  HostTensor x = RandomInput(100, 4);
  for (bool given_mode : {false, true}) {
    std::vector<HostTensor> inputs = {x, Scalar(0.5f)};
    if (given_mode) inputs.push_back(Bool(false));
    auto out = RunNode("Dropout", inputs, 2, Seed(1), 13);
    EXPECT_EQ(out[0].bytes, x.bytes);
    for (uint8_t m : Values<uint8_t>(out[1])) EXPECT_EQ(m, 1);
  }
}

TEST(Dropout, RatioOfOneIsRejectedInTraining) {
  EXPECT_THROW(RunNode("Dropout", {RandomInput(10, 5), Scalar(1.f), Bool(true)}, 1, {}, 13), Error);
}

// ---------------------------------------------------------------------------------------
// Reshape to a shape computed in the graph: x[batch, 3, 4] -> Shape -> Gather(0) ->
// Unsqueeze -> Concat with [-1] -> Reshape, giving [batch, 12] (torch's x.view(x.size(0), -1)).

Model FlattenByShapeChainModel() {
  Model m;
  m.opsets[""] = 13;
  ValueInfo x;
  x.name = "x";
  x.dtype = DType::kFloat32;
  x.has_shape = true;
  x.dims = {Dim{-1, "batch"}, Dim{3, ""}, Dim{4, ""}};
  m.graph.inputs.push_back(x);
  m.graph.initializers.push_back(HostTensor::FromVector(std::vector<int64_t>{0}, {}, "zero"));
  m.graph.initializers.push_back(HostTensor::FromVector(std::vector<int64_t>{0}, {1}, "axes0"));
  m.graph.initializers.push_back(HostTensor::FromVector(std::vector<int64_t>{-1}, {1}, "minus_one"));
  auto add = [&](const std::string& op, std::vector<std::string> ins, const std::string& out) -> Node& {
    Node n;
    n.name = out;
    n.op_type = op;
    n.inputs = std::move(ins);
    n.outputs = {out};
    m.graph.nodes.push_back(n);
    return m.graph.nodes.back();
  };
  add("Shape", {"x"}, "shape");
  add("Gather", {"shape", "zero"}, "batch").SetInt("axis", 0);
  add("Unsqueeze", {"batch", "axes0"}, "batch1");
  add("Concat", {"batch1", "minus_one"}, "target").SetInt("axis", 0);
  add("Reshape", {"x", "target"}, "y");
  ValueInfo y;
  y.name = "y";
  m.graph.outputs.push_back(y);
  return m;
}

TEST(Reshape, TargetShapeComputedByShapeGatherConcat) {
  Executor exec(FlattenByShapeChainModel());
  for (int64_t batch : {2, 5, 2}) {
    HostTensor x(DType::kFloat32, {batch, 3, 4});
    for (int64_t i = 0; i < x.NumElements(); ++i) x.Data<float>()[i] = static_cast<float>(i);
    HostTensor y = exec.Run({{"x", Tensor::FromHost(x)}})[0].ToHost();
    EXPECT_EQ(y.dims, (Shape{batch, 12}));
    EXPECT_EQ(y.bytes, x.bytes);
  }
  EXPECT_EQ(exec.NumPlans(), 2u);
}

TEST(Reshape, ZeroCopiesAndAllowZeroKeeps) {
  HostTensor x(DType::kFloat32, {2, 0, 3});
  EXPECT_EQ(RunNode("Reshape", {x, Ints({0, -1})}, 1, {}, 14)[0].dims, (Shape{2, 0}));
  auto allow_zero = [](Node& n) { n.SetInt("allowzero", 1); };
  EXPECT_EQ(RunNode("Reshape", {x, Ints({3, 0, 7})}, 1, allow_zero, 14)[0].dims, (Shape{3, 0, 7}));
  EXPECT_THROW(RunNode("Reshape", {x, Ints({0, -1})}, 1, allow_zero, 14), Error);  // -1 with a zero-size input
}

TEST(Reshape, ChangedTargetValuesWithSameShapesAreAnErrorNotAStaleShape) {
  // Nine entries: too long for the executor's plan key, so both runs share one plan.
  HostTensor x(DType::kFloat32, {6});
  std::vector<HostTensor> first = {x, Ints({1, 1, 1, 1, 1, 1, 1, 2, 3})};
  std::vector<HostTensor> second = {x, Ints({1, 1, 1, 1, 1, 1, 1, 3, 2})};
  Executor exec(SingleNodeModel("Reshape", first, 1, {}, 14));
  EXPECT_EQ(exec.Run(Feeds(first))[0].shape().back(), 3);
  EXPECT_THROW(exec.Run(Feeds(second)), Error);
}

// ---------------------------------------------------------------------------------------
// Zero-size tensors through every data-movement op.

TEST(ZeroSize, DataMovementOpsHandleEmptyTensors) {
  HostTensor empty(DType::kFloat32, {0, 3});
  HostTensor x = Floats({1, 2, 3, 4, 5, 6}, {2, 3});
  auto axis = [](int64_t a) { return [a](Node& n) { n.SetInt("axis", a); }; };

  auto cat = RunNode("Concat", {empty, x, empty}, 1, axis(0))[0];
  EXPECT_EQ(cat.dims, (Shape{2, 3}));
  EXPECT_EQ(cat.bytes, x.bytes);
  EXPECT_EQ(RunNode("Concat", {empty, empty}, 1, axis(0))[0].dims, (Shape{0, 3}));
  EXPECT_EQ(RunNode("Transpose", {empty})[0].dims, (Shape{3, 0}));
  EXPECT_EQ(RunNode("Slice", {x, Ints({1}), Ints({1}), Ints({1})})[0].dims, (Shape{2, 0}));
  EXPECT_EQ(RunNode("Gather", {x, HostTensor(DType::kInt64, {0})})[0].dims, (Shape{0, 3}));
  EXPECT_EQ(RunNode("Tile", {x, Ints({0, 2})})[0].dims, (Shape{0, 6}));
  EXPECT_EQ(RunNode("Expand", {x, Ints({0, 1, 1})})[0].dims, (Shape{0, 2, 3}));
  auto split = RunNode("Split", {x, Ints({0, 3})}, 2, axis(1));
  EXPECT_EQ(split[0].dims, (Shape{2, 0}));
  EXPECT_EQ(split[1].bytes, x.bytes);
  HostTensor cond(DType::kBool, {0, 1});
  EXPECT_EQ(RunNode("Where", {cond, empty, Scalar(1.f)})[0].dims, (Shape{0, 3}));
  // Padding an empty tensor gives a tensor made only of the constant (zero by default).
  HostTensor padded = RunNode("Pad", {empty, Ints({1, 0, 1, 0}), Scalar(2.5f)})[0];
  EXPECT_EQ(padded.dims, (Shape{2, 3}));
  EXPECT_EQ(Values<float>(padded), std::vector<float>(6, 2.5f));
  HostTensor zero_padded = RunNode("Pad", {empty, Ints({1, 0, 1, 0})})[0];
  EXPECT_EQ(zero_padded.dims, (Shape{2, 3}));
  EXPECT_EQ(Values<float>(zero_padded), std::vector<float>(6, 0.f));
  EXPECT_EQ(RunNode("Flatten", {empty})[0].dims, (Shape{0, 3}));
  EXPECT_EQ(RunNode("Cast", {empty}, 1, [](Node& n) { n.SetInt("to", 7); })[0].dims, (Shape{0, 3}));
  EXPECT_EQ(RunNode("ConstantOfShape", {Ints({0, 4})})[0].dims, (Shape{0, 4}));
  EXPECT_EQ(Values<int64_t>(RunNode("Size", {empty})[0]), std::vector<int64_t>{0});
}

// ---------------------------------------------------------------------------------------
// Element types the float conformance cases do not reach.

TEST(DataMovement, Int64AndBoolTakeTheGenericPaths) {
  HostTensor x = HostTensor::FromVector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(Values<int64_t>(RunNode("Transpose", {x})[0]), (std::vector<int64_t>{1, 4, 2, 5, 3, 6}));
  auto axis1 = [](Node& n) { n.SetInt("axis", 1); };
  EXPECT_EQ(Values<int64_t>(RunNode("Concat", {x, x}, 1, axis1)[0]),
            (std::vector<int64_t>{1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}));
  EXPECT_EQ(Values<int64_t>(RunNode("Slice", {x, Ints({-1}), Ints({-100}), Ints({1}), Ints({-1})})[0]),
            (std::vector<int64_t>{3, 2, 1, 6, 5, 4}));
  HostTensor idx = HostTensor::FromVector(std::vector<int32_t>{-1, 0}, {2});
  EXPECT_EQ(Values<int64_t>(RunNode("Gather", {x, idx}, 1, axis1)[0]), (std::vector<int64_t>{3, 1, 6, 4}));
  HostTensor flags(DType::kBool, {2, 1});
  flags.bytes = {1, 0};
  HostTensor zeros = HostTensor::FromVector(std::vector<int64_t>{0}, {});
  EXPECT_EQ(Values<int64_t>(RunNode("Where", {flags, x, zeros})[0]), (std::vector<int64_t>{1, 2, 3, 0, 0, 0}));
  EXPECT_EQ(Values<uint8_t>(RunNode("Transpose", {flags})[0]), (std::vector<uint8_t>{1, 0}));
}

TEST(DataMovement, GatherRejectsOutOfRangeIndices) {
  HostTensor x = Floats({1, 2, 3}, {3});
  EXPECT_THROW(RunNode("Gather", {x, Ints({3})}), Error);
  EXPECT_THROW(RunNode("Gather", {x, Ints({-4})}), Error);
}

uint16_t CastToHalf(double v) {
  HostTensor x = HostTensor::FromVector(std::vector<double>{v}, {1});
  HostTensor y = RunNode("Cast", {x}, 1, [](Node& n) { n.SetInt("to", static_cast<int64_t>(DType::kFloat16)); })[0];
  return y.Data<uint16_t>()[0];
}

TEST(Cast, Float16RoundsToNearestEvenFromDouble) {
  EXPECT_EQ(CastToHalf(1.0), 0x3c00);
  EXPECT_EQ(CastToHalf(1.0 + std::ldexp(1.0, -11)), 0x3c00);      // tie -> even
  EXPECT_EQ(CastToHalf(1.0 + 3 * std::ldexp(1.0, -11)), 0x3c02);  // tie -> even (up)
  // Just above a tie: rounding through float32 first would lose the excess and round down.
  EXPECT_EQ(CastToHalf(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3c01);
  EXPECT_EQ(CastToHalf(65504.0), 0x7bff);
  EXPECT_EQ(CastToHalf(65519.0), 0x7bff);
  EXPECT_EQ(CastToHalf(65520.0), 0x7c00);
  EXPECT_EQ(CastToHalf(-INFINITY), 0xfc00);
  EXPECT_EQ(CastToHalf(std::ldexp(1.0, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(CastToHalf(std::ldexp(1.0, -25)), 0x0000);     // tie -> even (zero)
  EXPECT_EQ(CastToHalf(3 * std::ldexp(1.0, -25)), 0x0002);
  EXPECT_EQ(CastToHalf(std::ldexp(1023.0, -24) + std::ldexp(1.0, -25)), 0x0400);  // up into normals
  EXPECT_EQ(CastToHalf(-0.0), 0x8000);
  EXPECT_EQ(CastToHalf(NAN) & 0x7c00, 0x7c00);
  EXPECT_NE(CastToHalf(NAN) & 0x03ff, 0);
}

// float32 -> bfloat16 (--amp bf16's casts): nearest even, a NaN stays a NaN, infinities
// kept, zeros zero; subnormal inputs flush to zero of their sign where the CPU converts with
// vcvtne2ps2bf16 (our own pass there, oneDNN's reorder elsewhere, which may keep them). A
// tensor of 200,003 elements: split over the threads, with a partial vector at the end.
TEST(Cast, Float32ToBFloat16RoundsToNearestEven) {
  const int64_t n = 200003;  // 800 KB: above the executor's one-thread bound
  HostTensor x(DType::kFloat32, {n});
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1e4f, 1e4f);
  float* v = x.Data<float>();
  for (int64_t i = 0; i < n; ++i) v[i] = u(rng);
  const float specials[] = {1.f,  1.f + std::ldexp(1.f, -8),      1.f + 3 * std::ldexp(1.f, -8),
                            -0.f, 1.f + std::ldexp(1.f, -8) + std::ldexp(1.f, -20), INFINITY,
                            -INFINITY, NAN, std::ldexp(1.f, -130), -std::ldexp(1.f, -140), 3.3895314e38f};
  for (size_t i = 0; i < std::size(specials); ++i) v[n - 1 - static_cast<int64_t>(i)] = specials[i];
  HostTensor y = RunNode("Cast", {x}, 1, [](Node& node) { node.SetInt("to", static_cast<int64_t>(DType::kBFloat16)); })[0];
  ASSERT_EQ(y.dtype, DType::kBFloat16);
  const uint16_t* bits = y.Data<uint16_t>();
  for (int64_t i = 0; i < n; ++i) {
    const double d = v[i];
    if (std::isnan(d)) {
      EXPECT_EQ(bits[i] & 0x7f80, 0x7f80) << i;
      EXPECT_NE(bits[i] & 0x007f, 0) << i;
      continue;
    }
    uint32_t f;
    std::memcpy(&f, &v[i], sizeof f);
    if (d == 0) {  // a zero (oneDNN's reorder without avx512_bf16 writes -0 as +0)
      EXPECT_EQ(bits[i] & 0x7fff, 0) << i;
      continue;
    }
    if ((f & 0x7f800000u) == 0 && (f & 0x7fffffu) != 0) {  // subnormal: zero of its sign, or rounded
      EXPECT_TRUE(bits[i] == ((f >> 16) & 0x8000u) || bits[i] == (f >> 16)) << i;
      continue;
    }
    // The two bfloat16 neighbours of d and the one nearer (ties: the even one), in double.
    const uint16_t low = static_cast<uint16_t>(f >> 16), high = static_cast<uint16_t>(low + 1);
    auto value = [](uint16_t b) {
      const uint32_t w = static_cast<uint32_t>(b) << 16;
      float r;
      std::memcpy(&r, &w, sizeof r);
      return static_cast<double>(r);
    };
    uint16_t want = low;
    if ((f & 0xffffu) != 0 && !std::isinf(d)) {
      const double dl = std::fabs(d - value(low)), dh = std::fabs(value(high) - d);
      want = dh < dl || (dh == dl && (high & 1) == 0) ? high : low;
    }
    ASSERT_EQ(bits[i], want) << "element " << i << " = " << v[i];
  }
}

TEST(Cast, IntegerAndBoolConversions) {
  HostTensor x = Floats({-1.5f, 0.f, 2.7f, 3e10f}, {4});
  auto to = [](DType t) { return [t](Node& n) { n.SetInt("to", static_cast<int64_t>(t)); }; };
  EXPECT_EQ(Values<int32_t>(RunNode("Cast", {x}, 1, to(DType::kInt32))[0]),
            (std::vector<int32_t>{-1, 0, 2, 2147483647}));
  EXPECT_EQ(Values<uint8_t>(RunNode("Cast", {x}, 1, to(DType::kBool))[0]), (std::vector<uint8_t>{1, 0, 1, 1}));
  HostTensor big = HostTensor::FromVector(std::vector<int64_t>{(int64_t{1} << 62) + 1}, {1});
  EXPECT_EQ(Values<int64_t>(RunNode("Cast", {big}, 1, to(DType::kInt64))[0])[0], (int64_t{1} << 62) + 1);
  EXPECT_THROW(RunNode("Cast", {x}, 1, to(DType::kString)), UnsupportedError);
}

TEST(Squeeze, AxesAsAttributeBeforeOpset13AndInputAfter) {
  HostTensor x(DType::kFloat32, {1, 3, 1});
  EXPECT_EQ(RunNode("Squeeze", {x}, 1, [](Node& n) { n.SetInts("axes", {0}); }, 11)[0].dims, (Shape{3, 1}));
  EXPECT_EQ(RunNode("Squeeze", {x, Ints({-1})}, 1, {}, 13)[0].dims, (Shape{1, 3}));
  EXPECT_EQ(RunNode("Squeeze", {x}, 1, {}, 13)[0].dims, (Shape{3}));
  EXPECT_THROW(RunNode("Squeeze", {x, Ints({1})}, 1, {}, 13), Error);
  EXPECT_EQ(RunNode("Unsqueeze", {x}, 1, [](Node& n) { n.SetInts("axes", {-1, 0}); }, 11)[0].dims,
            (Shape{1, 1, 3, 1, 1}));
}

// TransposeResizeTaps, the table the CUDA ResizeGrad gathers over (runtime/cuda/tensor/resize.cu):
// each input position lists exactly the taps that read it, in increasing order, and the
// gather it gives equals the scatter-add of the taps in float64.
TEST(ResizeTaps, TransposeListsEveryTapOfEachInputInOrder) {
  std::mt19937 gen(5);
  for (int taps : {1, 2, 4}) {
    ResizeAxis ax;
    ax.in = 7;
    ax.out = 11;
    ax.taps = taps;
    std::uniform_int_distribution<int64_t> pick(0, ax.in - 1);
    std::uniform_real_distribution<float> w(-1.f, 1.f);
    for (int64_t e = 0; e < ax.out * taps; ++e) {
      ax.index.push_back(e % 5 == 0 ? 3 : pick(gen));  // position 3 read often; some never
      ax.weight.push_back(w(gen));
    }
    std::vector<int64_t> starts, entries;
    TransposeResizeTaps(ax, &starts, &entries);
    ASSERT_EQ(starts.size(), static_cast<size_t>(ax.in + 1));
    ASSERT_EQ(entries.size(), ax.index.size());
    EXPECT_EQ(starts.front(), 0);
    EXPECT_EQ(starts.back(), static_cast<int64_t>(ax.index.size()));
    std::vector<double> dy(static_cast<size_t>(ax.out)), scatter(static_cast<size_t>(ax.in), 0.0);
    for (double& v : dy) v = w(gen);
    for (int64_t e = 0; e < ax.out * taps; ++e)
      scatter[static_cast<size_t>(ax.index[static_cast<size_t>(e)])] += ax.weight[static_cast<size_t>(e)] * dy[static_cast<size_t>(e / taps)];
    for (int64_t p = 0; p < ax.in; ++p) {
      std::vector<int64_t> want;
      for (int64_t e = 0; e < ax.out * taps; ++e)
        if (ax.index[static_cast<size_t>(e)] == p) want.push_back(e);
      const std::vector<int64_t> got(entries.begin() + starts[static_cast<size_t>(p)],
                                     entries.begin() + starts[static_cast<size_t>(p + 1)]);
      EXPECT_EQ(got, want) << "input " << p << ", " << taps << " taps";
      double gather = 0;
      for (int64_t e : got) gather += ax.weight[static_cast<size_t>(e)] * dy[static_cast<size_t>(e / taps)];
      EXPECT_NEAR(gather, scatter[static_cast<size_t>(p)], 1e-12) << "input " << p;
    }
  }
}

}  // namespace
}  // namespace ot
