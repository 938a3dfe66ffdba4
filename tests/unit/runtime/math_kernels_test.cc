// Tests of the CPU elementwise-math, reduction and softmax kernels (runtime/cpu/elementwise/binary.cc,
// unary_math.cc, reduce.cc, softmax.cc) on the corners ONNX's conformance data misses:
// both operands broadcast, scalar against tensor, rank mismatch, zero-size dimensions,
// variadic broadcasting, legacy (opset < 7) broadcasting, integer types. Expected values
// come from a naive double-precision reference that indexes every element from scratch.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/autodiff/gradient_registry.h"
#include "runtime/executor/executor.h"

namespace ot {
namespace {

// A model of one node whose inputs are graph inputs named in0, in1, ... and whose output is "y".
Model OneNodeModel(const std::string& op, int num_inputs, int64_t opset, std::map<std::string, Attribute> attrs = {}) {
  Model m;
  m.opsets[""] = opset;
  Node n;
  n.name = "node";
  n.op_type = op;
  n.attrs = std::move(attrs);
  for (int i = 0; i < num_inputs; ++i) {
    ValueInfo v;
    v.name = "in" + std::to_string(i);
    m.graph.inputs.push_back(v);
    n.inputs.push_back(v.name);
  }
  n.outputs = {"y"};
  ValueInfo y;
  y.name = "y";
  m.graph.outputs.push_back(y);
  m.graph.nodes.push_back(n);
  return m;
}

Attribute IntAttr(int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  return a;
}

Attribute IntsAttr(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Kind::kInts;
  a.ints = std::move(v);
  return a;
}

// Deterministic, distinct, sign-mixed values (never zero, so they can divide).
template <typename T>
Tensor Filled(const Shape& shape, int seed) {
  Tensor t = Tensor::Empty(DTypeOf<T>::value, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t k = (i * 7 + seed * 13) % 11 - 5;
    double v =
        std::is_integral<T>::value ? static_cast<double>(k == 0 ? 6 : k) : (k == 0 ? 0.75 : k * 0.5 + 0.125 * seed);
    t.data<T>()[i] = static_cast<T>(v);
  }
  return t;
}

template <typename T>
Tensor FromValues(const Shape& shape, const std::vector<T>& values) {
  Tensor t = Tensor::Empty(DTypeOf<T>::value, shape);
  EXPECT_EQ(static_cast<size_t>(t.numel()), values.size());
  for (size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = values[i];
  return t;
}

template <typename T>
double ValueAt(const Tensor& t, int64_t i) {
  return static_cast<double>(t.data<T>()[i]);
}

// The element of `t` (shape right-aligned to `out_shape`, size-1 dims broadcast) that
// output index `flat` reads, computed by decomposing the index digit by digit.
template <typename T>
double BroadcastRead(const Tensor& t, const Shape& out_shape, int64_t flat) {
  const size_t offset = out_shape.size() - t.shape().size();
  int64_t in_index = 0, in_stride = 1;
  for (size_t d = out_shape.size(); d-- > 0;) {
    int64_t digit = flat % out_shape[d];
    flat /= out_shape[d];
    if (d < offset) continue;
    int64_t size = t.shape()[d - offset];
    in_index += (size == 1 ? 0 : digit) * in_stride;
    in_stride *= size;
  }
  return ValueAt<T>(t, in_index);
}

using Fold = std::function<double(double, double)>;

// Reference for a (variadic) broadcast op: folds the inputs left to right in double.
template <typename T>
std::vector<double> ReferenceFold(const std::vector<Tensor>& inputs, const Shape& out_shape, const Fold& fold) {
  std::vector<double> out(static_cast<size_t>(NumElements(out_shape)));
  for (size_t i = 0; i < out.size(); ++i) {
    double acc = BroadcastRead<T>(inputs[0], out_shape, static_cast<int64_t>(i));
    for (size_t k = 1; k < inputs.size(); ++k)
      acc = fold(acc, BroadcastRead<T>(inputs[k], out_shape, static_cast<int64_t>(i)));
    out[i] = acc;
  }
  return out;
}

Tensor RunOne(const Model& model, const std::vector<Tensor>& inputs) {
  Executor exec(model);
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) feeds["in" + std::to_string(i)] = inputs[i];
  std::vector<Tensor> out = exec.Run(feeds);
  EXPECT_EQ(out.size(), 1u);
  return out[0];
}

template <typename T>
void ExpectValues(const std::vector<double>& expected, const Tensor& actual, double rtol, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(expected.size()), actual.numel()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    double got = ValueAt<T>(actual, static_cast<int64_t>(i));
    ASSERT_NEAR(expected[i], got, rtol * (1 + std::abs(expected[i]))) << what << " at element " << i;
  }
}

double Trunc(double v) { return std::trunc(v); }

const std::map<std::string, Fold>& FloatFolds() {
  static const std::map<std::string, Fold> folds = {
      {"Add", [](double a, double b) { return a + b; }},
      {"Sub", [](double a, double b) { return a - b; }},
      {"Mul", [](double a, double b) { return a * b; }},
      {"Div", [](double a, double b) { return a / b; }},
      {"Max", [](double a, double b) { return std::max(a, b); }},
      {"Min", [](double a, double b) { return std::min(a, b); }},
      {"Pow", [](double a, double b) { return std::pow(std::abs(a), b); }}};
  return folds;
}

struct ShapePair {
  Shape a, b, out;
};

// Shapes where oneDNN cannot take the op as is (both broadcast, only A broadcast), where
// it can (only B broadcast), scalars, rank mismatch and zero-size dimensions.
const std::vector<ShapePair>& BroadcastCorners() {
  static const std::vector<ShapePair> pairs = {{{3, 1}, {1, 4}, {3, 4}},
                                               {{1, 4}, {3, 1}, {3, 4}},
                                               {{}, {2, 3}, {2, 3}},
                                               {{2, 3}, {}, {2, 3}},
                                               {{}, {}, {}},
                                               {{4}, {2, 3, 4}, {2, 3, 4}},
                                               {{2, 3, 4}, {4}, {2, 3, 4}},
                                               {{3, 1}, {2, 1, 4}, {2, 3, 4}},
                                               {{2, 1, 4}, {3, 1}, {2, 3, 4}},
                                               {{2, 3, 1, 5}, {3, 4, 1}, {2, 3, 4, 5}},
                                               {{0, 3}, {1, 3}, {0, 3}},
                                               {{1, 3}, {0, 1}, {0, 3}},
                                               {{2, 0}, {2, 1}, {2, 0}},
                                               {{1}, {5}, {5}},
                                               {{5}, {1}, {5}}};
  return pairs;
}

TEST(BinaryBroadcast, Float32MatchesReferenceOnEveryCorner) {
  for (const std::string op : {"Add", "Sub", "Mul", "Div", "Max", "Min"}) {
    for (const ShapePair& p : BroadcastCorners()) {
      std::vector<Tensor> in = {Filled<float>(p.a, 1), Filled<float>(p.b, 2)};
      Tensor y = RunOne(OneNodeModel(op, 2, 14), in);
      const std::string what = op + " " + ShapeString(p.a) + " x " + ShapeString(p.b);
      EXPECT_EQ(y.shape(), p.out) << what;
      ExpectValues<float>(ReferenceFold<float>(in, p.out, FloatFolds().at(op)), y, 1e-6, what);
    }
  }
}

TEST(BinaryBroadcast, PowWithPositiveBaseMatchesReference) {
  for (const ShapePair& p : BroadcastCorners()) {
    Tensor base = Filled<float>(p.a, 1);
    for (int64_t i = 0; i < base.numel(); ++i) base.data<float>()[i] = std::abs(base.data<float>()[i]);
    std::vector<Tensor> in = {base, Filled<float>(p.b, 2)};
    Tensor y = RunOne(OneNodeModel("Pow", 2, 15), in);
    ExpectValues<float>(ReferenceFold<float>(in, p.out, FloatFolds().at("Pow")), y, 1e-5,
                        "Pow " + ShapeString(p.a) + " x " + ShapeString(p.b));
  }
}

TEST(BinaryBroadcast, DoubleAndIntegersMatchReference) {
  for (const ShapePair& p : BroadcastCorners()) {
    const std::string shapes = ShapeString(p.a) + " x " + ShapeString(p.b);
    std::vector<Tensor> d = {Filled<double>(p.a, 1), Filled<double>(p.b, 2)};
    ExpectValues<double>(ReferenceFold<double>(d, p.out, FloatFolds().at("Sub")), RunOne(OneNodeModel("Sub", 2, 14), d),
                         1e-12, "double Sub " + shapes);
    std::vector<Tensor> i64 = {Filled<int64_t>(p.a, 1), Filled<int64_t>(p.b, 2)};
    ExpectValues<int64_t>(ReferenceFold<int64_t>(i64, p.out, [](double a, double b) { return a * b; }),
                          RunOne(OneNodeModel("Mul", 2, 14), i64), 0, "int64 Mul " + shapes);
    std::vector<Tensor> i32 = {Filled<int32_t>(p.a, 1), Filled<int32_t>(p.b, 2)};
    ExpectValues<int32_t>(ReferenceFold<int32_t>(i32, p.out, [](double a, double b) { return Trunc(a / b); }),
                          RunOne(OneNodeModel("Div", 2, 14), i32), 0, "int32 Div " + shapes);
  }
}

TEST(BinaryBroadcast, IntegerDivisionTruncatesTowardZero) {
  Tensor a = FromValues<int64_t>({4}, {-7, 7, -7, 7});
  Tensor b = FromValues<int64_t>({4}, {2, 2, -2, -2});
  ExpectValues<int64_t>({-3, 3, 3, -3}, RunOne(OneNodeModel("Div", 2, 14), {a, b}), 0, "int64 Div");
}

TEST(BinaryBroadcast, IntegerDivisionByZeroIsAnError) {
  Tensor a = FromValues<int32_t>({2}, {1, 2});
  Tensor b = FromValues<int32_t>({1}, {0});
  EXPECT_THROW(RunOne(OneNodeModel("Div", 2, 14), {a, b}), Error);
}

TEST(BinaryBroadcast, IncompatibleShapesAreAnError) {
  EXPECT_THROW(RunOne(OneNodeModel("Add", 2, 14), {Filled<float>({2, 3}, 1), Filled<float>({4}, 2)}), Error);
}

TEST(BinaryBroadcast, ComparisonsGiveBool) {
  Tensor a = FromValues<float>({3, 1}, {1.f, 2.f, 3.f});
  Tensor b = FromValues<float>({1, 2}, {2.f, 3.f});
  const std::map<std::string, std::vector<double>> expected = {{"Equal", {0, 0, 1, 0, 0, 1}},
                                                               {"Less", {1, 1, 0, 1, 0, 0}},
                                                               {"Greater", {0, 0, 0, 0, 1, 0}},
                                                               {"LessOrEqual", {1, 1, 1, 1, 0, 1}},
                                                               {"GreaterOrEqual", {0, 0, 1, 0, 1, 1}}};
  for (const auto& [op, want] : expected) {
    Tensor y = RunOne(OneNodeModel(op, 2, 16), {a, b});
    EXPECT_EQ(y.dtype(), DType::kBool) << op;
    EXPECT_EQ(y.shape(), (Shape{3, 2})) << op;
    ExpectValues<bool>(want, y, 0, op);
  }
}

TEST(VariadicBroadcast, SumMeanMaxMinMatchReference) {
  const std::vector<std::vector<Shape>> shape_sets = {{{3, 1}, {1, 4}, {4}},     // no input has the output shape
                                                      {{3, 4}, {1, 4}, {3, 1}},  // the first does
                                                      {{1, 4}, {3, 4}, {}},      // a later one does
                                                      {{2, 3}},                  // a single input
                                                      {{0, 2}, {2}, {1, 1}},     // zero-size
                                                      {{2, 1, 3}, {4, 1}, {2, 4, 3}, {3}}};
  const std::map<std::string, Fold> folds = {{"Sum", FloatFolds().at("Add")},
                                             {"Mean", FloatFolds().at("Add")},
                                             {"Max", FloatFolds().at("Max")},
                                             {"Min", FloatFolds().at("Min")}};
  for (const auto& shapes : shape_sets) {
    std::vector<Tensor> in;
    Shape out_shape;
    for (size_t i = 0; i < shapes.size(); ++i) {
      in.push_back(Filled<float>(shapes[i], static_cast<int>(i) + 1));
      if (shapes[i].size() > out_shape.size())
        out_shape.insert(out_shape.begin(), shapes[i].size() - out_shape.size(), 1);
      for (size_t d = 0; d < shapes[i].size(); ++d) {
        int64_t& o = out_shape[out_shape.size() - shapes[i].size() + d];
        if (o == 1) o = shapes[i][d];
      }
    }
    for (const auto& [op, fold] : folds) {
      std::vector<double> want = ReferenceFold<float>(in, out_shape, fold);
      if (op == "Mean")
        for (double& v : want) v /= static_cast<double>(in.size());
      Tensor y = RunOne(OneNodeModel(op, static_cast<int>(in.size()), 13), in);
      EXPECT_EQ(y.shape(), out_shape) << op;
      ExpectValues<float>(want, y, 1e-6,
                          op + " over " + std::to_string(in.size()) + " inputs to " + ShapeString(out_shape));
    }
  }
}

TEST(LegacyBroadcast, OpsetSixAlignsBAtAxis) {
  // A [2,3,4], B [3] with broadcast=1, axis=1: B runs along dimension 1.
  Tensor a = Filled<float>({2, 3, 4}, 1);
  Tensor b = FromValues<float>({3}, {10.f, 20.f, 30.f});
  Tensor y = RunOne(OneNodeModel("Sub", 2, 6, {{"broadcast", IntAttr(1)}, {"axis", IntAttr(1)}}), {a, b});
  std::vector<double> want;
  for (int64_t i = 0; i < 24; ++i) want.push_back(ValueAt<float>(a, i) - 10.0 * (1 + (i / 4) % 3));
  ExpectValues<float>(want, y, 1e-6, "legacy Sub axis=1");
  // Without broadcast=1 the shapes must match.
  EXPECT_THROW(RunOne(OneNodeModel("Sub", 2, 6), {a, b}), Error);
}

TEST(UnaryMath, NegReciprocalClipFloorCeil) {
  Tensor x = FromValues<float>({5}, {-2.5f, -0.5f, 0.5f, 1.5f, 4.f});
  ExpectValues<float>({2.5, 0.5, -0.5, -1.5, -4}, RunOne(OneNodeModel("Neg", 1, 13), {x}), 0, "Neg");
  ExpectValues<float>({-0.4, -2, 2, 1 / 1.5, 0.25}, RunOne(OneNodeModel("Reciprocal", 1, 13), {x}), 1e-6, "Reciprocal");
  ExpectValues<float>({-3, -1, 0, 1, 4}, RunOne(OneNodeModel("Floor", 1, 13), {x}), 0, "Floor");
  ExpectValues<float>({-2, -0, 1, 2, 4}, RunOne(OneNodeModel("Ceil", 1, 13), {x}), 0, "Ceil");
  Tensor lo = FromValues<float>({}, {-1.f});
  Tensor hi = FromValues<float>({}, {1.f});
  Model clip = OneNodeModel("Clip", 3, 13);
  Executor exec(clip);
  ExpectValues<float>({-1, -0.5, 0.5, 1, 1}, exec.Run({{"in0", x}, {"in1", lo}, {"in2", hi}})[0], 0, "Clip");
  // Same shapes, new bounds: the kernel must not keep the first run's bounds.
  Tensor hi2 = FromValues<float>({}, {0.f});
  ExpectValues<float>({-1, -0.5, 0, 0, 0}, exec.Run({{"in0", x}, {"in1", lo}, {"in2", hi2}})[0], 0, "Clip rebound");
  // min > max: every value becomes max.
  ExpectValues<float>({-1, -1, -1, -1, -1}, exec.Run({{"in0", x}, {"in1", hi}, {"in2", lo}})[0], 0, "Clip min>max");
  Tensor xi = FromValues<int64_t>({3}, {-5, 0, 5});
  ExpectValues<int64_t>({5, 0, -5}, RunOne(OneNodeModel("Neg", 1, 13), {xi}), 0, "int64 Neg");
}

// Reference reduction: for every output element, visit the input elements that map to it.
std::vector<double> ReferenceReduce(const Tensor& x, const std::vector<bool>& reduced, const Fold& fold, double init) {
  const Shape& s = x.shape();
  Shape kept;
  for (size_t d = 0; d < s.size(); ++d) kept.push_back(reduced[d] ? 1 : s[d]);
  std::vector<double> out(static_cast<size_t>(NumElements(kept)), init);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rest = i, o = 0, o_stride = 1;
    for (size_t d = s.size(); d-- > 0;) {
      int64_t digit = rest % s[d];
      rest /= s[d];
      if (!reduced[d]) {
        o += digit * o_stride;
        o_stride *= s[d];
      }
    }
    out[static_cast<size_t>(o)] = fold(out[static_cast<size_t>(o)], ValueAt<float>(x, i));
  }
  return out;
}

TEST(Reduce, SumWithAxesInputAndKeepdims) {
  Tensor x = Filled<float>({2, 3, 4}, 1);
  Tensor axes = FromValues<int64_t>({2}, {0, -1});
  std::vector<double> want = ReferenceReduce(x, {true, false, true}, FloatFolds().at("Add"), 0);
  Tensor kept = RunOne(OneNodeModel("ReduceSum", 2, 13), {x, axes});
  EXPECT_EQ(kept.shape(), (Shape{1, 3, 1}));
  ExpectValues<float>(want, kept, 1e-6, "ReduceSum keepdims");
  Tensor dropped = RunOne(OneNodeModel("ReduceSum", 2, 13, {{"keepdims", IntAttr(0)}}), {x, axes});
  EXPECT_EQ(dropped.shape(), (Shape{3}));
  ExpectValues<float>(want, dropped, 1e-6, "ReduceSum no keepdims");
}

TEST(Reduce, EmptyAxesReduceAllUnlessNoop) {
  Tensor x = Filled<float>({2, 3}, 1);
  Tensor none = Tensor::Empty(DType::kInt64, {0});
  double total = 0;
  for (int64_t i = 0; i < x.numel(); ++i) total += ValueAt<float>(x, i);
  ExpectValues<float>({total}, RunOne(OneNodeModel("ReduceSum", 2, 13), {x, none}), 1e-6, "reduce all");
  Tensor same = RunOne(OneNodeModel("ReduceSum", 2, 13, {{"noop_with_empty_axes", IntAttr(1)}}), {x, none});
  EXPECT_EQ(same.shape(), x.shape());
  ExpectValues<float>(ReferenceReduce(x, {false, false}, FloatFolds().at("Add"), 0), same, 0, "noop");
}

TEST(Reduce, AttributeOpsMatchReference) {
  Tensor x = Filled<float>({3, 2, 5}, 2);
  const std::vector<bool> reduced = {true, false, true};
  const Fold add = FloatFolds().at("Add");
  auto map_then_add = [](std::function<double(double)> f) { return [f](double a, double v) { return a + f(v); }; };
  struct Case {
    std::string op;
    std::vector<double> want;
  };
  std::vector<double> sum = ReferenceReduce(x, reduced, add, 0);
  std::vector<double> mean = sum, l2 = ReferenceReduce(x, reduced, map_then_add([](double v) { return v * v; }), 0);
  std::vector<double> sum_square = l2,
                      log_sum_exp = ReferenceReduce(x, reduced, map_then_add([](double v) { return std::exp(v); }), 0);
  for (double& v : mean) v /= 15;
  for (double& v : l2) v = std::sqrt(v);
  for (double& v : log_sum_exp) v = std::log(v);
  std::vector<Case> cases = {
      {"ReduceMean", mean},
      {"ReduceMax", ReferenceReduce(x, reduced, FloatFolds().at("Max"), -1e300)},
      {"ReduceMin", ReferenceReduce(x, reduced, FloatFolds().at("Min"), 1e300)},
      {"ReduceProd", ReferenceReduce(x, reduced, FloatFolds().at("Mul"), 1)},
      {"ReduceL1", ReferenceReduce(x, reduced, map_then_add([](double v) { return std::abs(v); }), 0)},
      {"ReduceL2", l2},
      {"ReduceSumSquare", sum_square},
      {"ReduceLogSumExp", log_sum_exp}};
  for (const Case& c : cases) {
    Tensor y = RunOne(OneNodeModel(c.op, 1, 13, {{"axes", IntsAttr({0, 2})}}), {x});
    EXPECT_EQ(y.shape(), (Shape{1, 2, 1})) << c.op;
    ExpectValues<float>(c.want, y, 1e-5, c.op);
  }
  // LogSum of a positive input.
  Tensor pos = Filled<float>({3, 2, 5}, 2);
  for (int64_t i = 0; i < pos.numel(); ++i) pos.data<float>()[i] = std::abs(pos.data<float>()[i]);
  std::vector<double> want = ReferenceReduce(pos, reduced, add, 0);
  for (double& v : want) v = std::log(v);
  ExpectValues<float>(want, RunOne(OneNodeModel("ReduceLogSum", 1, 13, {{"axes", IntsAttr({0, 2})}}), {pos}), 1e-5,
                      "ReduceLogSum");
}

TEST(Reduce, ZeroSizeAxisGivesIdentities) {
  Tensor x = Tensor::Empty(DType::kFloat32, {2, 0, 3});
  Tensor sum = RunOne(OneNodeModel("ReduceSum", 2, 13, {{"keepdims", IntAttr(0)}}), {x, FromValues<int64_t>({1}, {1})});
  EXPECT_EQ(sum.shape(), (Shape{2, 3}));
  ExpectValues<float>(std::vector<double>(6, 0.0), sum, 0, "sum over empty");
  Tensor prod = RunOne(OneNodeModel("ReduceProd", 1, 13, {{"axes", IntsAttr({1})}}), {x});
  ExpectValues<float>(std::vector<double>(6, 1.0), prod, 0, "prod over empty");
}

TEST(Reduce, Int64SumAndMaxAreExact) {
  const int64_t big = int64_t{1} << 53;  // big + 1 is not representable in double
  Tensor x = FromValues<int64_t>({2, 2}, {big, 1, -3, 2});
  Tensor sum = RunOne(OneNodeModel("ReduceSum", 2, 13, {{"keepdims", IntAttr(0)}}), {x, FromValues<int64_t>({1}, {1})});
  EXPECT_EQ(sum.data<int64_t>()[0], big + 1);
  EXPECT_EQ(sum.data<int64_t>()[1], -1);
  const int64_t lowest = std::numeric_limits<int64_t>::min();
  Tensor y = FromValues<int64_t>({2, 2}, {big, 1, lowest, lowest});
  Tensor max = RunOne(OneNodeModel("ReduceMax", 1, 13, {{"axes", IntsAttr({1})}}), {y});
  EXPECT_EQ(max.data<int64_t>()[0], big);
  EXPECT_EQ(max.data<int64_t>()[1], lowest);
}

TEST(Softmax, OldOpsetsCoerceTo2DNewOnesUseOneAxis) {
  Tensor x = Filled<float>({2, 3, 4}, 1);
  // Opset 11, axis 1: softmax over each row of the [2, 12] view.
  Tensor old_y = RunOne(OneNodeModel("Softmax", 1, 11, {{"axis", IntAttr(1)}}), {x});
  // Opset 13, axis 1: softmax over dimension 1 only.
  Tensor new_y = RunOne(OneNodeModel("Softmax", 1, 13, {{"axis", IntAttr(1)}}), {x});
  std::vector<double> want_old(24), want_new(24);
  for (int64_t n = 0; n < 2; ++n) {
    double denom = 0;
    for (int64_t j = 0; j < 12; ++j) denom += std::exp(ValueAt<float>(x, n * 12 + j));
    for (int64_t j = 0; j < 12; ++j)
      want_old[static_cast<size_t>(n * 12 + j)] = std::exp(ValueAt<float>(x, n * 12 + j)) / denom;
    for (int64_t k = 0; k < 4; ++k) {
      double d = 0;
      for (int64_t c = 0; c < 3; ++c) d += std::exp(ValueAt<float>(x, n * 12 + c * 4 + k));
      for (int64_t c = 0; c < 3; ++c)
        want_new[static_cast<size_t>(n * 12 + c * 4 + k)] = std::exp(ValueAt<float>(x, n * 12 + c * 4 + k)) / d;
    }
  }
  ExpectValues<float>(want_old, old_y, 1e-5, "Softmax opset 11");
  ExpectValues<float>(want_new, new_y, 1e-5, "Softmax opset 13");
  std::vector<double> log_new = want_new;
  for (double& v : log_new) v = std::log(v);
  ExpectValues<float>(log_new, RunOne(OneNodeModel("LogSoftmax", 1, 13, {{"axis", IntAttr(1)}}), {x}), 1e-5,
                      "LogSoftmax opset 13");
}

TEST(ArgMax, KeepdimsAndSelectLastIndex) {
  Tensor x = FromValues<float>({2, 3}, {1.f, 5.f, 5.f, 7.f, 2.f, 7.f});
  Tensor first = RunOne(OneNodeModel("ArgMax", 1, 13, {{"axis", IntAttr(1)}}), {x});
  EXPECT_EQ(first.shape(), (Shape{2, 1}));
  ExpectValues<int64_t>({1, 0}, first, 0, "ArgMax first");
  Tensor last =
      RunOne(OneNodeModel("ArgMax", 1, 13,
                          {{"axis", IntAttr(-1)}, {"keepdims", IntAttr(0)}, {"select_last_index", IntAttr(1)}}),
             {x});
  EXPECT_EQ(last.shape(), (Shape{2}));
  ExpectValues<int64_t>({2, 2}, last, 0, "ArgMax last");
  ExpectValues<int64_t>({0, 1},
                        RunOne(OneNodeModel("ArgMin", 1, 13, {{"axis", IntAttr(1)}, {"keepdims", IntAttr(0)}}), {x}), 0,
                        "ArgMin");
}

// SumToShape(g, shape) against a plain double sum over the broadcast axes, for the
// shapes its fast paths take (summed prefix, suffix or both around one kept run, many
// rows) and for those they leave to the general loop (kept axes apart, all summed).
TEST(SumToShape, MatchesADoubleSumOverBroadcastAxes) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{4, 65, 19}, {19}},        {{300, 17}, {1, 17}},     {{2, 3, 5, 7}, {3, 1, 1}}, {{2, 3, 5, 7}, {1, 3, 5, 7}},
      {{6, 9}, {6, 1}},           {{2, 3, 4}, {2, 1, 4}},   {{5, 7}, {}},              {{3, 1, 8}, {1, 1, 8}},
      {{1, 129, 3}, {3}},         {{70, 1, 2, 33}, {1, 2, 1}}, {{0, 4}, {4}}};
  for (const auto& [gs, target] : cases) {
    SCOPED_TRACE(ShapeString(gs) + " -> " + ShapeString(target));
    Model m = OneNodeModel("SumToShape", 2, 17);
    m.graph.nodes[0].domain = kGradDomain;
    m.opsets[kGradDomain] = 1;
    Tensor g = Filled<float>(gs, 3);
    HostTensor t(DType::kInt64, {static_cast<int64_t>(target.size())});
    for (size_t i = 0; i < target.size(); ++i) t.Data<int64_t>()[i] = target[i];
    Tensor y = RunOne(m, {g, Tensor::FromHost(t)});
    ASSERT_EQ(y.shape(), target);
    // Reference: each element of g added to the output element it broadcasts from.
    const size_t lead = gs.size() - target.size();
    std::vector<double> expected(static_cast<size_t>(ot::NumElements(target)), 0.0);
    HostTensor gh = g.ToHost();
    std::vector<int64_t> idx(gs.size(), 0);
    for (int64_t i = 0; i < g.numel(); ++i) {
      int64_t o = 0;
      for (size_t d = lead; d < gs.size(); ++d) o = o * target[d - lead] + (target[d - lead] == 1 ? 0 : idx[d]);
      expected[static_cast<size_t>(o)] += gh.Data<float>()[i];
      for (size_t d = gs.size(); d-- > 0;) {
        if (++idx[d] < gs[d]) break;
        idx[d] = 0;
      }
    }
    ExpectValues<float>(expected, y, 1e-5, "SumToShape");
  }
}

}  // namespace
}  // namespace ot
