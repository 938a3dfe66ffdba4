// Tests of the CPU matrix-product and loss kernels (runtime/cpu/matmul/matmul.cc, loss.cc): Gemm
// and MatMul against naive double-precision references over every transpose, C-broadcast
// and batch-broadcast case; the losses' label checks and ignore_index handling.
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graph/error.h"
#include "runtime/cpu/training/softmax_rows.h"
#include "runtime/executor/executor.h"

namespace ot {
namespace {

// A model of one node whose inputs are graph inputs (type and shape taken from the feeds).
Model OneNodeModel(const Node& node, int64_t opset) {
  Model m;
  m.opsets[""] = opset;
  for (const auto& name : node.inputs) {
    if (name.empty()) continue;
    ValueInfo v;
    v.name = name;
    m.graph.inputs.push_back(v);
  }
  for (const auto& name : node.outputs) {
    ValueInfo v;
    v.name = name;
    m.graph.outputs.push_back(v);
  }
  m.graph.nodes.push_back(node);
  return m;
}

Node MakeNode(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs) {
  Node n;
  n.name = "node";
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

template <typename T> Tensor RandomTensor(const Shape& shape, std::mt19937& rng) {
  Tensor t = Tensor::Empty(DTypeOf<T>::value, shape);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<T>()[i] = static_cast<T>(std::is_integral<T>::value ? std::round(dist(rng) * 5) : dist(rng));
  return t;
}

template <typename T> Tensor MakeTensor(const Shape& shape, const std::vector<T>& values) {
  Tensor t = Tensor::Empty(DTypeOf<T>::value, shape);
  for (size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = values[i];
  return t;
}

template <typename T> double At(const Tensor& t, int64_t i) { return static_cast<double>(t.data<T>()[i]); }

template <typename T> void ExpectNear(const std::vector<double>& expected, const Tensor& actual, double tol,
                                      const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(expected.size()), actual.numel()) << what;
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(expected[i], At<T>(actual, static_cast<int64_t>(i)), tol * (1 + std::abs(expected[i])))
        << what << " at element " << i;
}

// ---------------------------------------------------------------- Gemm

struct GemmCase {
  bool trans_a, trans_b;
  Shape c_shape;  // {-1}: no C
  float alpha, beta;
};

std::string Describe(const GemmCase& g) {
  return "transA=" + std::to_string(g.trans_a) + " transB=" + std::to_string(g.trans_b) + " C=" +
         (g.c_shape == Shape{-1} ? std::string("none") : ShapeString(g.c_shape)) +
         " alpha=" + std::to_string(g.alpha) + " beta=" + std::to_string(g.beta);
}

// Y = alpha * op(A) * op(B) + beta * C in double, C broadcast unidirectionally.
template <typename T>
std::vector<double> ReferenceGemm(const GemmCase& g, const Tensor& a, const Tensor& b, const Tensor* c, int64_t M,
                                  int64_t K, int64_t N) {
  std::vector<double> y(static_cast<size_t>(M * N));
  int64_t c_rows = 1, c_cols = 1;
  if (c && c->rank() == 1) c_cols = c->dim(0);
  if (c && c->rank() == 2) c_rows = c->dim(0), c_cols = c->dim(1);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k)
        sum += At<T>(a, g.trans_a ? k * M + m : m * K + k) * At<T>(b, g.trans_b ? n * K + k : k * N + n);
      double cv = c ? At<T>(*c, (c_rows == 1 ? 0 : m) * c_cols + (c_cols == 1 ? 0 : n)) : 0.0;
      y[static_cast<size_t>(m * N + n)] = g.alpha * sum + g.beta * cv;
    }
  }
  return y;
}

template <typename T> void CheckGemm(const GemmCase& g, int64_t M, int64_t K, int64_t N, std::mt19937& rng) {
  bool has_c = g.c_shape != Shape{-1};
  Node node = MakeNode("Gemm", has_c ? std::vector<std::string>{"a", "b", "c"} : std::vector<std::string>{"a", "b"},
                       {"y"});
  node.SetInt("transA", g.trans_a);
  node.SetInt("transB", g.trans_b);
  node.SetFloat("alpha", g.alpha);
  node.SetFloat("beta", g.beta);
  Executor exec(OneNodeModel(node, 13));
  Tensor a = RandomTensor<T>(g.trans_a ? Shape{K, M} : Shape{M, K}, rng);
  Tensor b = RandomTensor<T>(g.trans_b ? Shape{N, K} : Shape{K, N}, rng);
  // Two runs on one plan with different C: the kernel's copy of beta * C must follow.
  for (int run = 0; run < 2; ++run) {
    std::map<std::string, Tensor> feeds = {{"a", a}, {"b", b}};
    Tensor c;
    if (has_c) feeds["c"] = c = RandomTensor<T>(g.c_shape, rng);
    Tensor y = exec.Run(feeds)[0];
    ASSERT_EQ(y.shape(), (Shape{M, N})) << Describe(g);
    ExpectNear<T>(ReferenceGemm<T>(g, a, b, has_c ? &c : nullptr, M, K, N), y, 1e-5, Describe(g));
  }
}

TEST(Gemm, MatchesReferenceForEveryTransposeAndBroadcast) {
  std::mt19937 rng(7);
  const int64_t M = 5, K = 7, N = 3;
  const std::vector<Shape> c_shapes = {{-1}, {}, {1}, {N}, {1, N}, {M, 1}, {1, 1}, {M, N}};
  for (bool trans_a : {false, true})
    for (bool trans_b : {false, true})
      for (const Shape& c_shape : c_shapes)
        for (auto [alpha, beta] : std::vector<std::pair<float, float>>{{1.f, 1.f}, {0.7f, -0.4f}, {0.f, 2.f}}) {
          GemmCase g{trans_a, trans_b, c_shape, alpha, beta};
          CheckGemm<float>(g, M, K, N, rng);
          CheckGemm<double>(g, M, K, N, rng);
        }
}

TEST(Gemm, ModelShapesMatchReference) {
  std::mt19937 rng(11);
  CheckGemm<float>(GemmCase{false, true, {10}, 1.f, 1.f}, 32, 784, 10, rng);   // SimpleNN fc
  CheckGemm<float>(GemmCase{false, true, {10}, 1.f, 1.f}, 128, 512, 10, rng);  // ResNet34 fc
  CheckGemm<float>(GemmCase{true, false, {}, 1.f, 0.f}, 16, 0, 4, rng);        // K == 0
}

// Products of 2^22 multiply-adds and more without C run on dnnl_sgemm (matmul.cc): every
// transpose, alpha, and a C of beta 0 (not read), against the double loop; with C they
// stay on the primitive.
TEST(Gemm, LargeProductsWithoutCMatchReference) {
  std::mt19937 rng(13);
  const int64_t M = 260, K = 130, N = 131;  // 4.4 million multiply-adds
  for (bool trans_a : {false, true})
    for (bool trans_b : {false, true}) {
      CheckGemm<float>(GemmCase{trans_a, trans_b, {-1}, 1.f, 1.f}, M, K, N, rng);
      CheckGemm<float>(GemmCase{trans_a, trans_b, {N}, 0.5f, 0.f}, M, K, N, rng);
      CheckGemm<float>(GemmCase{trans_a, trans_b, {N}, 1.f, 1.f}, M, K, N, rng);
    }
}

TEST(Gemm, BroadcastAttributeOfOldOpsetsIsHonoured) {
  Node node = MakeNode("Gemm", {"a", "b", "c"}, {"y"});
  std::mt19937 rng(3);
  std::map<std::string, Tensor> feeds = {{"a", RandomTensor<float>({2, 3}, rng)},
                                         {"b", RandomTensor<float>({3, 4}, rng)},
                                         {"c", RandomTensor<float>({4}, rng)}};
  {
    Executor exec(OneNodeModel(node, 6));  // broadcast defaults to 0: C must be [M, N]
    EXPECT_THROW(exec.Run(feeds), Error);
  }
  node.SetInt("broadcast", 1);
  Executor exec(OneNodeModel(node, 6));
  EXPECT_EQ(exec.Run(feeds)[0].shape(), (Shape{2, 4}));
}

TEST(Gemm, RejectsMismatchedShapes) {
  Executor exec(OneNodeModel(MakeNode("Gemm", {"a", "b", "c"}, {"y"}), 13));
  std::mt19937 rng(5);
  EXPECT_THROW(exec.Run({{"a", RandomTensor<float>({2, 3}, rng)}, {"b", RandomTensor<float>({4, 4}, rng)},
                         {"c", RandomTensor<float>({4}, rng)}}),
               Error);
  EXPECT_THROW(exec.Run({{"a", RandomTensor<float>({2, 3}, rng)}, {"b", RandomTensor<float>({3, 4}, rng)},
                         {"c", RandomTensor<float>({3}, rng)}}),
               Error);
}

// ---------------------------------------------------------------- MatMul

// numpy.matmul in double.
template <typename T> std::vector<double> ReferenceMatMul(const Tensor& a, const Tensor& b, const Shape& out_shape) {
  Shape as = a.rank() == 1 ? Shape{1, a.dim(0)} : a.shape();
  Shape bs = b.rank() == 1 ? Shape{b.dim(0), 1} : b.shape();
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const size_t batch_rank = std::max(as.size(), bs.size()) - 2;
  // Batch dims right-aligned, 1 where missing.
  auto batch_dim = [&](const Shape& s, size_t i) {
    size_t missing = batch_rank - (s.size() - 2);
    return i < missing ? int64_t{1} : s[i - missing];
  };
  auto out_dim = [&](size_t i) { return batch_dim(as, i) == 1 ? batch_dim(bs, i) : batch_dim(as, i); };
  int64_t batches = 1;
  for (size_t i = 0; i < batch_rank; ++i) batches *= out_dim(i);
  std::vector<double> y;
  for (int64_t p = 0; p < batches; ++p) {
    // Decompose p over the output batch dims; index each operand, 0 where it is 1.
    int64_t a_index = 0, b_index = 0, a_stride = 1, b_stride = 1, rest = p;
    for (size_t i = batch_rank; i-- > 0;) {
      int64_t ad = batch_dim(as, i), bd = batch_dim(bs, i), od = out_dim(i);
      int64_t idx = rest % od;
      rest /= od;
      a_index += (ad == 1 ? 0 : idx) * a_stride;
      b_index += (bd == 1 ? 0 : idx) * b_stride;
      a_stride *= ad;
      b_stride *= bd;
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double sum = 0;
        for (int64_t k = 0; k < K; ++k)
          sum += At<T>(a, a_index * M * K + m * K + k) * At<T>(b, b_index * K * N + k * N + n);
        y.push_back(sum);
      }
  }
  EXPECT_EQ(static_cast<int64_t>(y.size()), NumElements(out_shape));
  return y;
}

template <typename T> void CheckMatMul(const Shape& a_shape, const Shape& b_shape, const Shape& out_shape) {
  std::mt19937 rng(13);
  Executor exec(OneNodeModel(MakeNode("MatMul", {"a", "b"}, {"y"}), 13));
  Tensor a = RandomTensor<T>(a_shape, rng), b = RandomTensor<T>(b_shape, rng);
  Tensor y = exec.Run({{"a", a}, {"b", b}})[0];
  std::string what = DTypeName(DTypeOf<T>::value) + ShapeString(a_shape) + " x " + ShapeString(b_shape);
  ASSERT_EQ(y.shape(), out_shape) << what;
  ASSERT_EQ(y.dtype(), DTypeOf<T>::value) << what;
  ExpectNear<T>(ReferenceMatMul<T>(a, b, out_shape), y, 1e-5, what);
}

template <typename T> void CheckAllMatMulShapes() {
  CheckMatMul<T>({3, 4}, {4, 5}, {3, 5});
  CheckMatMul<T>({4}, {4, 5}, {5});               // 1-D A: prepended 1 dropped
  CheckMatMul<T>({3, 4}, {4}, {3});               // 1-D B: appended 1 dropped
  CheckMatMul<T>({4}, {4}, {});                   // dot product
  CheckMatMul<T>({4}, {2, 4, 3}, {2, 3});         // 1-D A against a batch
  CheckMatMul<T>({2, 3, 4}, {4}, {2, 3});         // batch against 1-D B
  CheckMatMul<T>({2, 3, 4}, {2, 4, 5}, {2, 3, 5});
  CheckMatMul<T>({2, 3, 4}, {4, 5}, {2, 3, 5});   // shared B
  CheckMatMul<T>({2, 3, 4}, {1, 4, 5}, {2, 3, 5});
  CheckMatMul<T>({3, 4}, {2, 4, 5}, {2, 3, 5});   // shared A
  CheckMatMul<T>({2, 1, 3, 4}, {5, 4, 6}, {2, 5, 3, 6});      // both operands broadcast
  CheckMatMul<T>({1, 5, 3, 4}, {2, 1, 4, 6}, {2, 5, 3, 6});
  CheckMatMul<T>({2, 0, 3, 4}, {4, 6}, {2, 0, 3, 6});         // empty batch
  CheckMatMul<T>({2, 3, 0}, {0, 5}, {2, 3, 5});               // K == 0: zeros
}

TEST(MatMul, BatchedWithBroadcastingMatchesNumpySemantics) {
  CheckAllMatMulShapes<float>();
  CheckAllMatMulShapes<double>();
  CheckAllMatMulShapes<int64_t>();
  CheckAllMatMulShapes<int32_t>();
}

TEST(MatMul, RejectsMismatchedShapes) {
  Executor exec(OneNodeModel(MakeNode("MatMul", {"a", "b"}, {"y"}), 13));
  std::mt19937 rng(1);
  EXPECT_THROW(exec.Run({{"a", RandomTensor<float>({3, 4}, rng)}, {"b", RandomTensor<float>({5, 6}, rng)}}), Error);
  EXPECT_THROW(exec.Run({{"a", RandomTensor<float>({2, 3, 4}, rng)}, {"b", RandomTensor<float>({3, 4, 6}, rng)}}),
               Error);
}

// ---------------------------------------------------------------- losses

Tensor RunLoss(const std::string& op, const std::map<std::string, std::string>& attrs, const Tensor& scores,
               const Tensor& labels, const Tensor* weight = nullptr, Tensor* log_prob = nullptr) {
  std::vector<std::string> inputs = {"x", "labels"};
  if (weight) inputs.push_back("w");
  std::vector<std::string> outputs = {"loss"};
  if (log_prob) outputs.push_back("log_prob");
  Node node = MakeNode(op, inputs, outputs);
  for (const auto& [key, value] : attrs) {
    if (key == "ignore_index") node.SetInt(key, std::stoll(value));
    else node.SetString(key, value);
  }
  Executor exec(OneNodeModel(node, 13));
  std::map<std::string, Tensor> feeds = {{"x", scores}, {"labels", labels}};
  if (weight) feeds["w"] = *weight;
  std::vector<Tensor> out = exec.Run(feeds);
  if (log_prob) *log_prob = out[1];
  return out[0];
}

TEST(Loss, LabelOutsideClassesNamesBatchIndexAndValue) {
  std::mt19937 rng(2);
  Tensor scores = RandomTensor<float>({6, 10}, rng);
  Tensor labels = MakeTensor<int64_t>({6}, {0, 1, 2, 3, 4, 12});
  for (const char* op : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"}) {
    try {
      RunLoss(op, {}, scores, labels);
      FAIL() << op << ": expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("label 12 at batch index 5 is outside [0, 10)"), std::string::npos)
          << e.what();
    }
  }
  // Negative labels too, and the position within a spatial label map; int32 labels.
  Tensor scores_2d = RandomTensor<float>({2, 3, 2, 2}, rng);
  Tensor labels_2d = MakeTensor<int32_t>({2, 2, 2}, {0, 1, 2, 0, 1, 2, -1, 0});
  try {
    RunLoss("SoftmaxCrossEntropyLoss", {{"reduction", "sum"}}, scores_2d, labels_2d);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label -1 at batch index 1, position [1, 0] is outside [0, 3)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Loss, AllLabelsIgnoredWithMeanIsNaNLikeOnnxReference) {
  // ONNX's reference (onnx/backend/test/case/node/softmaxcrossentropy.py and
  // negativeloglikelihoodloss.py) divides the summed loss by the summed weights of the
  // positions not ignored: 0 / 0 = NaN when every label is ignored (PyTorch agrees).
  std::mt19937 rng(4);
  Tensor scores = RandomTensor<float>({3, 5}, rng);
  Tensor labels = MakeTensor<int64_t>({3}, {1, 1, 1});
  Tensor weight = MakeTensor<float>({5}, {1, 2, 3, 4, 5});
  for (const char* op : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"}) {
    Tensor mean = RunLoss(op, {{"reduction", "mean"}, {"ignore_index", "1"}}, scores, labels);
    EXPECT_EQ(mean.shape(), Shape{});
    EXPECT_TRUE(std::isnan(mean.data<float>()[0])) << op;
    Tensor weighted = RunLoss(op, {{"reduction", "mean"}, {"ignore_index", "1"}}, scores, labels, &weight);
    EXPECT_TRUE(std::isnan(weighted.data<float>()[0])) << op;
    // With sum there is nothing to divide: 0.
    Tensor sum = RunLoss(op, {{"reduction", "sum"}, {"ignore_index", "1"}}, scores, labels);
    EXPECT_EQ(sum.data<float>()[0], 0.f) << op;
  }
}

TEST(Loss, SoftmaxCrossEntropyMatchesReference) {
  std::mt19937 rng(6);
  const int64_t N = 4, C = 5, D = 3;
  Tensor scores = RandomTensor<float>({N, C, D}, rng);
  for (int64_t i = 0; i < scores.numel(); ++i) scores.data<float>()[i] *= 40.f;  // large logits: needs the max shift
  Tensor labels = MakeTensor<int64_t>({N, D}, {0, 1, 2, 3, 4, 2, 2, 2, 1, 0, 4, 3});
  Tensor weight = MakeTensor<float>({C}, {0.5f, 1.f, 1.5f, 2.f, 2.5f});
  // Reference: log_softmax over C, weighted mean over labels != 2.
  std::vector<double> log_prob(static_cast<size_t>(N * C * D)), losses;
  double loss_sum = 0, weight_sum = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      double mx = -1e300, s = 0;
      for (int64_t c = 0; c < C; ++c) mx = std::max(mx, At<float>(scores, (n * C + c) * D + d));
      for (int64_t c = 0; c < C; ++c) s += std::exp(At<float>(scores, (n * C + c) * D + d) - mx);
      for (int64_t c = 0; c < C; ++c)
        log_prob[static_cast<size_t>((n * C + c) * D + d)] = At<float>(scores, (n * C + c) * D + d) - mx - std::log(s);
      int64_t label = labels.data<int64_t>()[n * D + d];
      if (label == 2) continue;
      double w = weight.data<float>()[label];
      loss_sum += -w * log_prob[static_cast<size_t>((n * C + label) * D + d)];
      weight_sum += w;
    }
  Tensor log_prob_out;
  Tensor loss = RunLoss("SoftmaxCrossEntropyLoss", {{"reduction", "mean"}, {"ignore_index", "2"}}, scores, labels,
                        &weight, &log_prob_out);
  ExpectNear<float>({loss_sum / weight_sum}, loss, 1e-5, "mean loss");
  ExpectNear<float>(log_prob, log_prob_out, 1e-5, "log_prob");
  // reduction none: per-position losses, 0 where ignored.
  Tensor per_position = RunLoss("SoftmaxCrossEntropyLoss", {{"reduction", "none"}, {"ignore_index", "2"}}, scores,
                                labels, &weight);
  ASSERT_EQ(per_position.shape(), (Shape{N, D}));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      int64_t label = labels.data<int64_t>()[n * D + d];
      double expected = label == 2 ? 0.0
                                   : -weight.data<float>()[label] * log_prob[static_cast<size_t>((n * C + label) * D + d)];
      EXPECT_NEAR(expected, At<float>(per_position, n * D + d), 1e-4 * (1 + std::abs(expected)));
    }
}

// The vectorised row loops of the loss and its gradient (runtime/cpu/training/softmax_rows.h)
// against float64: log-sum-exp of rows of 50,257 scores within 1e-6 absolute (the float sums
// of 512 classes), NaN and infinities as the plain loop gives them; the gradient's e^x * s
// within 1.5 float32 ulp of float64 (two roundings) over x in [-110, 5] (0 below float32's
// range).
TEST(Loss, SoftmaxRowLoopsMatchFloat64) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 4.f);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{513}, int64_t{50257}}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    double m = -INFINITY, sum = 0;
    for (float v : x) m = std::max(m, static_cast<double>(v));
    for (float v : x) sum += std::exp(static_cast<double>(v) - m);
    EXPECT_NEAR(cpu::RowLogSumExp(x.data(), n), m + std::log(sum), 1e-6) << n << " classes";
    std::vector<float> out(x.size());
    const double lse = cpu::RowLogSumExp(x.data(), n);
    cpu::RowShifted(x.data(), n, lse, out.data());
    for (int64_t c = 0; c < n; ++c) ASSERT_EQ(out[static_cast<size_t>(c)], static_cast<float>(x[static_cast<size_t>(c)] - lse));
  }
  std::vector<float> nan_row = {1.f, NAN, 2.f}, inf_row = {1.f, INFINITY, 2.f}, masked = {-INFINITY, -INFINITY};
  EXPECT_TRUE(std::isnan(cpu::RowLogSumExp(nan_row.data(), 3)));
  EXPECT_EQ(cpu::RowLogSumExp(inf_row.data(), 3), INFINITY);
  EXPECT_EQ(cpu::RowLogSumExp(masked.data(), 2), -INFINITY);

  std::vector<float> lp;
  for (float v = -110.f; v <= 5.f; v += 0.0137f) lp.push_back(v);
  lp.push_back(-INFINITY);
  lp.push_back(0.f);
  std::vector<float> got(lp.size());
  cpu::RowExpScaled(lp.data(), static_cast<int64_t>(lp.size()), 0.75f, got.data());
  for (size_t i = 0; i < lp.size(); ++i) {
    const double want = std::exp(static_cast<double>(lp[i])) * 0.75;
    const float rounded = static_cast<float>(want);
    const float ulp = std::nextafter(rounded, INFINITY) - rounded;
    // Two roundings: e^x to float32, then the product by s.
    EXPECT_LE(std::fabs(got[i] - want), rounded < 1.2e-38f ? 3e-45 : 1.5 * static_cast<double>(ulp)) << "x = " << lp[i];
  }
}

}  // namespace
}  // namespace ot
