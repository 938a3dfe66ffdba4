// ONNX Attention (opset 23) on the CPU: the forward against float64 loops written here
// (3D and 4D, grouped-query heads, causal, bool and additive masks shorter than the keys,
// softcap, past caches and the qk_matmul_output modes), and AttentionGrad against central
// finite differences of Q, K, V and a learned additive mask. The fused flash kernel's
// products in bfloat16 (--amp bf16, runtime/cpu/matmul/bf16_gemm.h) against float64 loops,
// and those products alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "graph/autodiff/autodiff.h"
#include "graph/op_domains.h"
#include "graph/passes/amp_pass.h"
#include "runtime/cpu/matmul/bf16_gemm.h"
#include "runtime/executor/executor.h"
#include "tests/common/grad_check.h"

namespace ot {
namespace {

using testing::AddWeightedSumLoss;
using testing::ExpectGradientsMatchFiniteDifferences;
using testing::ModelBuilder;
using testing::TrainWithWeightedSumLoss;

struct AttentionCase {
  std::string name;
  bool three_d = false;
  int64_t batch = 2, q_heads = 2, kv_heads = 2, q_len = 3, kv_len = 3, head = 4, v_head = 4;
  bool causal = false;
  float scale = 0.f;    // 0: default 1/sqrt(head)
  float softcap = 0.f;  // 0: none
  int mask = 0;         // 0 none, 1 float [q_len, mask_len], 2 bool [batch, 1, q_len, mask_len]
  int64_t mask_len = 0;  // 0: kv_len
};

std::vector<int64_t> QShape(const AttentionCase& c) {
  return c.three_d ? std::vector<int64_t>{c.batch, c.q_len, c.q_heads * c.head}
                   : std::vector<int64_t>{c.batch, c.q_heads, c.q_len, c.head};
}
std::vector<int64_t> KShape(const AttentionCase& c, int64_t size) {
  return c.three_d ? std::vector<int64_t>{c.batch, c.kv_len, c.kv_heads * size}
                   : std::vector<int64_t>{c.batch, c.kv_heads, c.kv_len, size};
}
std::vector<int64_t> YShape(const AttentionCase& c) {
  return c.three_d ? std::vector<int64_t>{c.batch, c.q_len, c.q_heads * c.v_head}
                   : std::vector<int64_t>{c.batch, c.q_heads, c.q_len, c.v_head};
}
int64_t MaskLen(const AttentionCase& c) { return c.mask_len ? c.mask_len : c.kv_len; }

// A bool mask that leaves every row at least one key.
HostTensor BoolMask(const AttentionCase& c) {
  HostTensor m(DType::kBool, {c.batch, 1, c.q_len, MaskLen(c)}, "mask");
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < c.q_len; ++i)
      for (int64_t j = 0; j < MaskLen(c); ++j)
        m.Data<uint8_t>()[(b * c.q_len + i) * MaskLen(c) + j] = j == 0 || (i + j + b) % 3 != 1;
  return m;
}

Node& AddAttention(ModelBuilder& b, const AttentionCase& c, std::vector<std::string> ins) {
  Node& n = b.Op("Attention", std::move(ins), "y");
  if (c.three_d) {
    n.SetInt("q_num_heads", c.q_heads);
    n.SetInt("kv_num_heads", c.kv_heads);
  }
  if (c.causal) n.SetInt("is_causal", 1);
  if (c.scale != 0.f) n.SetFloat("scale", c.scale);
  if (c.softcap != 0.f) n.SetFloat("softcap", c.softcap);
  return n;
}

// Y in float64 from the same Q, K, V and mask, head by head, as ONNX's reference writes it.
std::vector<double> ReferenceY(const AttentionCase& c, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                               const HostTensor* mask) {
  auto at = [&](const HostTensor& t, int64_t heads, int64_t len, int64_t size, int64_t b, int64_t h, int64_t p,
                int64_t d) -> double {
    const int64_t idx = c.three_d ? ((b * len + p) * heads + h) * size + d : ((b * heads + h) * len + p) * size + d;
    return t.Data<float>()[idx];
  };
  const double scale = c.scale != 0.f ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.head));
  std::vector<int64_t> ys = YShape(c);
  std::vector<double> y(static_cast<size_t>(NumElements(ys)));
  const int64_t group = c.q_heads / c.kv_heads;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.q_heads; ++h)
      for (int64_t i = 0; i < c.q_len; ++i) {
        std::vector<double> s(static_cast<size_t>(c.kv_len));
        for (int64_t j = 0; j < c.kv_len; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < c.head; ++d)
            dot += at(q, c.q_heads, c.q_len, c.head, b, h, i, d) * at(k, c.kv_heads, c.kv_len, c.head, b, h / group, j, d);
          double bias = 0;
          if (mask && j >= MaskLen(c)) bias = -INFINITY;
          else if (c.mask == 1) bias = mask->Data<float>()[i * MaskLen(c) + j];
          else if (c.mask == 2 && !mask->Data<uint8_t>()[(b * c.q_len + i) * MaskLen(c) + j]) bias = -INFINITY;
          if (c.causal && j > i) bias = -INFINITY;
          double x = dot * scale + bias;
          if (c.softcap > 0) x = c.softcap * std::tanh(x / c.softcap);
          s[static_cast<size_t>(j)] = x;
        }
        double mx = -INFINITY, sum = 0;
        for (double x : s) mx = std::max(mx, x);
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t d = 0; d < c.v_head; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < c.kv_len; ++j)
            acc += s[static_cast<size_t>(j)] / sum * at(v, c.kv_heads, c.kv_len, c.v_head, b, h / group, j, d);
          const int64_t idx = c.three_d ? ((b * c.q_len + i) * c.q_heads + h) * c.v_head + d
                                        : ((b * c.q_heads + h) * c.q_len + i) * c.v_head + d;
          y[static_cast<size_t>(idx)] = acc;
        }
      }
  return y;
}

HostTensor Filled(std::vector<int64_t> dims, float phase, const std::string& name) {
  HostTensor t(DType::kFloat32, std::move(dims), name);
  for (int64_t i = 0; i < t.NumElements(); ++i)
    t.Data<float>()[i] = std::sin(0.37f * static_cast<float>(i) + phase) * 1.3f;
  return t;
}

const std::vector<AttentionCase>& Cases() {
  static const std::vector<AttentionCase> cases = [] {
    std::vector<AttentionCase> v;
    AttentionCase c;
    c.name = "4d_mha";
    v.push_back(c);
    c = {};
    c.name = "3d_gqa_causal_batch3";
    c.three_d = true, c.batch = 3, c.q_heads = 4, c.kv_heads = 2, c.q_len = 5, c.kv_len = 5, c.head = 3, c.v_head = 5;
    c.causal = true;
    v.push_back(c);
    c = {};
    c.name = "4d_cross_mqa_scale_softcap_batch1";
    c.batch = 1, c.q_heads = 3, c.kv_heads = 1, c.q_len = 2, c.kv_len = 6, c.head = 5, c.v_head = 2;
    c.scale = 0.7f, c.softcap = 1.5f;
    v.push_back(c);
    c = {};
    c.name = "4d_float_mask_short";
    c.q_len = 4, c.kv_len = 5, c.mask = 1, c.mask_len = 4;
    v.push_back(c);
    c = {};
    c.name = "3d_bool_mask_causal";
    c.three_d = true, c.q_len = 4, c.kv_len = 4, c.mask = 2, c.causal = true;
    v.push_back(c);
    return v;
  }();
  return cases;
}

TEST(Attention, ForwardMatchesFloat64Loops) {
  for (const AttentionCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    ModelBuilder b;
    b.Opset(23);
    b.Input("q", DType::kFloat32, QShape(c)).Input("k", DType::kFloat32, KShape(c, c.head));
    b.Input("v", DType::kFloat32, KShape(c, c.v_head));
    std::vector<std::string> ins = {"q", "k", "v"};
    HostTensor mask;
    if (c.mask == 1) {
      mask = Filled({c.q_len, MaskLen(c)}, 2.f, "mask");
      b.Const(mask);
      ins.push_back("mask");
    } else if (c.mask == 2) {
      mask = BoolMask(c);
      b.Const(mask);
      ins.push_back("mask");
    }
    AddAttention(b, c, ins);
    b.Output("y", YShape(c));
    Model m = b.Build();
    HostTensor q = Filled(QShape(c), 0.f, "q"), k = Filled(KShape(c, c.head), 1.f, "k");
    HostTensor v = Filled(KShape(c, c.v_head), 0.5f, "v");
    Executor exec(m);
    HostTensor y = exec.Run({{"q", Tensor::FromHost(q)}, {"k", Tensor::FromHost(k)}, {"v", Tensor::FromHost(v)}},
                            {"y"})[0]
                       .ToHost();
    ASSERT_EQ(y.dims, YShape(c));
    std::vector<double> want = ReferenceY(c, q, k, v, c.mask ? &mask : nullptr);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(y.Data<float>()[i], want[i], 2e-5) << i;
  }
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  for (const AttentionCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    ModelBuilder b;
    b.Opset(23);
    b.Param("q", QShape(c), -1.f, 1.f).Param("k", KShape(c, c.head), -1.f, 1.f).Param("v", KShape(c, c.v_head), -1.f, 1.f);
    std::vector<std::string> ins = {"q", "k", "v"};
    if (c.mask == 1) {
      b.Param("mask", {c.q_len, MaskLen(c)}, -0.5f, 0.5f);  // a learned additive bias
      ins.push_back("mask");
    } else if (c.mask == 2) {
      b.Const(BoolMask(c));
      ins.push_back("mask");
    }
    AddAttention(b, c, ins);
    TrainingGraph tg = TrainWithWeightedSumLoss(b, "y", YShape(c));
    ExpectGradientsMatchFiniteDifferences(tg, {}, 1e-2f);
  }
}

// past_key/past_value: the present caches are past then new positions, and the new
// queries see every past key (causal shifts by the past length).
TEST(Attention, PastCachesAndScoresOutput) {
  ModelBuilder b;
  b.Opset(23);
  b.Input("q", DType::kFloat32, {1, 2, 2, 3}).Input("k", DType::kFloat32, {1, 1, 2, 3});
  b.Input("v", DType::kFloat32, {1, 1, 2, 3}).Input("pk", DType::kFloat32, {1, 1, 3, 3});
  b.Input("pv", DType::kFloat32, {1, 1, 3, 3});
  Node& n = b.Op("Attention", {"q", "k", "v", "", "pk", "pv"}, "y");
  n.outputs = {"y", "present_k", "present_v", "scores"};
  n.SetInt("is_causal", 1);
  n.SetInt("qk_matmul_output_mode", 3);
  b.Output("y", {1, 2, 2, 3}).Output("present_k", {1, 1, 5, 3}).Output("present_v", {1, 1, 5, 3});
  b.Output("scores", {1, 2, 2, 5});
  Model m = b.Build();
  HostTensor q = Filled({1, 2, 2, 3}, 0.f, "q"), k = Filled({1, 1, 2, 3}, 1.f, "k"), v = Filled({1, 1, 2, 3}, 2.f, "v");
  HostTensor pk = Filled({1, 1, 3, 3}, 3.f, "pk"), pv = Filled({1, 1, 3, 3}, 4.f, "pv");
  Executor exec(m);
  auto out = exec.Run({{"q", Tensor::FromHost(q)}, {"k", Tensor::FromHost(k)}, {"v", Tensor::FromHost(v)},
                       {"pk", Tensor::FromHost(pk)}, {"pv", Tensor::FromHost(pv)}},
                      {"y", "present_k", "present_v", "scores"});
  HostTensor present_k = out[1].ToHost(), present_v = out[2].ToHost(), probs = out[3].ToHost();
  for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(present_k.Data<float>()[i], pk.Data<float>()[i]);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(present_k.Data<float>()[9 + i], k.Data<float>()[i]);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(present_v.Data<float>()[9 + i], v.Data<float>()[i]);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 2; ++i) {
      const float* row = probs.Data<float>() + (h * 2 + i) * 5;
      double sum = 0;
      for (int64_t j = 0; j < 5; ++j) {
        const double s = [&] {  // the reference score of (h, i, j)
          double dot = 0;
          for (int d = 0; d < 3; ++d)
            dot += q.Data<float>()[(h * 2 + i) * 3 + d] *
                   (j < 3 ? pk.Data<float>()[j * 3 + d] : k.Data<float>()[(j - 3) * 3 + d]);
          return dot / std::sqrt(3.0);
        }();
        sum += j <= i + 3 ? std::exp(s) : 0.0;
        if (j > i + 3) {
          EXPECT_EQ(row[j], 0.f) << "causal with a past of 3: query " << i << " key " << j;
        }
      }
      for (int64_t j = 0; j <= i + 3; ++j) {
        double dot = 0;
        for (int d = 0; d < 3; ++d)
          dot += q.Data<float>()[(h * 2 + i) * 3 + d] *
                 (j < 3 ? pk.Data<float>()[j * 3 + d] : k.Data<float>()[(j - 3) * 3 + d]);
        EXPECT_NEAR(row[j], std::exp(dot / std::sqrt(3.0)) / sum, 1e-6);
      }
    }
}

TEST(Attention, RefusesToDifferentiateAKvCache) {
  ModelBuilder b;
  b.Opset(23);
  b.Param("q", {1, 1, 2, 3}, -1.f, 1.f).Param("k", {1, 1, 2, 3}, -1.f, 1.f).Param("v", {1, 1, 2, 3}, -1.f, 1.f);
  b.Param("pk", {1, 1, 1, 3}, -1.f, 1.f).Param("pv", {1, 1, 1, 3}, -1.f, 1.f);
  b.Op("Attention", {"q", "k", "v", "", "pk", "pv"}, "y");
  try {
    TrainWithWeightedSumLoss(b, "y", {1, 1, 2, 3});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV cache"), std::string::npos) << e.what();
  }
}


// ---------------------------------------------------------------------------------------
// The flash kernel's products in bfloat16 (attribute bf16_products, set by --amp bf16).

// bfloat16 keeps 8 significant bits (7 stored): rounding to nearest moves an operand by at
// most 2^-8 of itself (its unit roundoff), a product of two rounded operands by at most about
// 2^-7 of |a b|.
constexpr double kBf16Unit = 1.0 / 256;

float RoundToBFloat16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

// BFloat16Gemm against double sums of the bfloat16-rounded operands (only the float32
// summation differs: relative 1e-6 of sum |a b|) and of the float32 ones (the rounding: 2^-7
// of sum |a b|), every transpose, odd and one-element sizes, leading dimensions past the
// rows, alpha and beta.
TEST(Attention, BFloat16ProductsMatchDoubleSumsOfRoundedOperands) {
  if (!cpu::HasBFloat16Gemm()) GTEST_SKIP() << "no avx512_bf16 (or ONEDNN_MAX_CPU_ISA below it)";
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t sizes[][3] = {{1, 1, 1},    {5, 3, 7},    {4, 16, 2},    {19, 33, 1},
                              {65, 65, 64}, {65, 64, 65}, {130, 17, 129}};
  cpu::BFloat16GemmScratch w;
  for (const auto& mnk : sizes)
    for (int t = 0; t < 4; ++t) {
      const int64_t m = mnk[0], n = mnk[1], k = mnk[2];
      const bool ta = t & 1, tb = t & 2;
      const float alpha = 0.75f, beta = t == 3 ? 0.f : 0.5f;
      SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + (ta ? " A^T" : "") +
                   (tb ? " B^T" : ""));
      const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
      std::vector<float> a(static_cast<size_t>((ta ? k : m) * lda)), b(static_cast<size_t>((tb ? n : k) * ldb));
      std::vector<float> c(static_cast<size_t>(m * ldc));
      for (auto* v : {&a, &b, &c})
        for (float& x : *v) x = u(rng);
      const std::vector<float> c0 = c;
      cpu::BFloat16Gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc, w);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double rounded = 0, exact = 0, magnitude = 0;
          for (int64_t kk = 0; kk < k; ++kk) {
            const float x = ta ? a[kk * lda + i] : a[i * lda + kk];
            const float y = tb ? b[j * ldb + kk] : b[kk * ldb + j];
            rounded += static_cast<double>(RoundToBFloat16(x)) * RoundToBFloat16(y);
            exact += static_cast<double>(x) * y;
            magnitude += std::fabs(static_cast<double>(x) * y);
          }
          const double base = beta * static_cast<double>(c0[i * ldc + j]);
          const double got = c[i * ldc + j];
          EXPECT_NEAR(got, alpha * rounded + base, 1e-6 * (alpha * magnitude + std::fabs(base)) + 1e-7);
          EXPECT_NEAR(got, alpha * exact + base, 2.01 * kBf16Unit * alpha * magnitude + 1e-6);
        }
        for (int64_t j = n; j < ldc; ++j) EXPECT_EQ(c[i * ldc + j], c0[i * ldc + j]);  // past n: untouched
      }
    }
}

// softmax(Q K^T / sqrt(d) [+ bias | causal]) V as PyTorch writes it, 4D [batch, heads, t, d]:
// the fusion pass (graph/passes/fusion.h) makes it one org.onnxtrain Attention.
struct FlashCase {
  int64_t batch = 1, heads = 1, t = 1, d = 16;
  int mask = 0;  // 0 none, 1 a learned additive bias [t, t], 2 causal (a constant of -inf)
};

Model HandWrittenAttention(const FlashCase& c) {
  ModelBuilder b;
  const std::vector<int64_t> dims = {c.batch, c.heads, c.t, c.d};
  b.Param("q", dims, -1.f, 1.f).Param("k", dims, -1.f, 1.f).Param("v", dims, -1.f, 1.f);
  b.Op("Constant", {}, "sqrt_d").SetTensor("value", HostTensor::FromVector<float>({std::sqrt(float(c.d))}, {}));
  b.Op("Transpose", {"k"}, "kt").SetInts("perm", {0, 1, 3, 2});
  b.Op("MatMul", {"q", "kt"}, "qk");
  b.Op("Div", {"qk", "sqrt_d"}, "scores");
  std::string s = "scores";
  if (c.mask == 1) {
    b.Param("bias", {c.t, c.t}, -1.f, 1.f);
  } else if (c.mask == 2) {
    HostTensor m(DType::kFloat32, {c.t, c.t});
    for (int64_t i = 0; i < c.t; ++i)
      for (int64_t j = 0; j < c.t; ++j) m.Data<float>()[i * c.t + j] = j <= i ? 0.f : -INFINITY;
    b.Op("Constant", {}, "bias").SetTensor("value", m);
  }
  if (c.mask) {
    b.Op("Add", {s, "bias"}, "masked");
    s = "masked";
  }
  b.Op("Softmax", {s}, "p").SetInt("axis", -1);
  b.Op("MatMul", {"p", "v"}, "y");
  AddWeightedSumLoss(b, "y", dims);
  return b.Build();
}

// The loss and the gradients of q, k, v (and the bias) in float64 loops; beside each, under
// "mag:" + name, the same sums taken over the terms' magnitudes (the scale that rounding errors
// of the operands are relative to), and under "scores" the largest scale * sum |q| |k|.
std::map<std::string, std::vector<double>> ReferenceLossAndGradients(const FlashCase& c,
                                                                     const std::map<std::string, HostTensor>& in) {
  const int64_t t = c.t, d = c.d;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const size_t n = static_cast<size_t>(c.batch * c.heads * t * d);
  std::map<std::string, std::vector<double>> out;
  for (const char* name : {"q", "k", "v"}) {
    out[name].assign(n, 0.0);
    out[std::string("mag:") + name].assign(n, 0.0);
  }
  out["loss"] = out["mag:loss"] = out["scores"] = {0.0};
  if (c.mask == 1) out["bias"] = out["mag:bias"] = std::vector<double>(static_cast<size_t>(t * t), 0.0);
  const float* q = in.at("q").Data<float>();
  const float* k = in.at("k").Data<float>();
  const float* v = in.at("v").Data<float>();
  const float* w = in.at("loss_w").Data<float>();
  std::vector<double> p(static_cast<size_t>(t * t)), ds(static_cast<size_t>(t * t)), dsm(static_cast<size_t>(t * t));
  for (int64_t bh = 0; bh < c.batch * c.heads; ++bh) {
    const int64_t o = bh * t * d;
    for (int64_t i = 0; i < t; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < t; ++j) {
        double s = 0, sm = 0;
        for (int64_t e = 0; e < d; ++e) {
          s += static_cast<double>(q[o + i * d + e]) * k[o + j * d + e];
          sm += std::fabs(static_cast<double>(q[o + i * d + e]) * k[o + j * d + e]);
        }
        out["scores"][0] = std::max(out["scores"][0], scale * sm);
        s *= scale;
        if (c.mask == 1) s += in.at("bias").Data<float>()[i * t + j];
        if (c.mask == 2 && j > i) s = -INFINITY;
        p[i * t + j] = s;
        mx = std::max(mx, s);
      }
      double sum = 0;
      for (int64_t j = 0; j < t; ++j) sum += p[i * t + j] = std::exp(p[i * t + j] - mx);
      for (int64_t j = 0; j < t; ++j) p[i * t + j] /= sum;
    }
    // dY = loss_w; dV = P^T dY; dP = dY V^T; dS = P (dP - rowsum(P dP)); dQ = scale dS K; dK = scale dS^T Q.
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t e = 0; e < d; ++e) {
        double y = 0, ym = 0;
        for (int64_t j = 0; j < t; ++j) {
          y += p[i * t + j] * v[o + j * d + e];
          ym += p[i * t + j] * std::fabs(v[o + j * d + e]);
        }
        out["loss"][0] += y * w[o + i * d + e];
        out["mag:loss"][0] += ym * std::fabs(w[o + i * d + e]);
      }
      double dot = 0, dotm = 0;
      for (int64_t j = 0; j < t; ++j) {
        double dp = 0, dpm = 0;
        for (int64_t e = 0; e < d; ++e) {
          dp += static_cast<double>(w[o + i * d + e]) * v[o + j * d + e];
          dpm += std::fabs(static_cast<double>(w[o + i * d + e]) * v[o + j * d + e]);
        }
        ds[i * t + j] = dp;
        dsm[i * t + j] = dpm;
        dot += p[i * t + j] * dp;
        dotm += p[i * t + j] * dpm;
      }
      for (int64_t j = 0; j < t; ++j) {
        ds[i * t + j] = p[i * t + j] * (ds[i * t + j] - dot);
        dsm[i * t + j] = p[i * t + j] * (dsm[i * t + j] + dotm);
      }
    }
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < t; ++j) {
        for (int64_t e = 0; e < d; ++e) {
          out["v"][o + j * d + e] += p[i * t + j] * w[o + i * d + e];
          out["q"][o + i * d + e] += scale * ds[i * t + j] * k[o + j * d + e];
          out["k"][o + j * d + e] += scale * ds[i * t + j] * q[o + i * d + e];
          out["mag:v"][o + j * d + e] += p[i * t + j] * std::fabs(w[o + i * d + e]);
          out["mag:q"][o + i * d + e] += scale * dsm[i * t + j] * std::fabs(k[o + j * d + e]);
          out["mag:k"][o + j * d + e] += scale * dsm[i * t + j] * std::fabs(q[o + i * d + e]);
        }
        if (c.mask == 1) {
          out["bias"][i * t + j] += ds[i * t + j];
          out["mag:bias"][i * t + j] += dsm[i * t + j];
        }
      }
  }
  return out;
}

// Loss and gradients by name (the loss under "loss").
std::map<std::string, HostTensor> LossAndGradients(const TrainingGraph& tg) {
  std::vector<std::string> fetch = {tg.loss};
  fetch.insert(fetch.end(), tg.grads.begin(), tg.grads.end());
  Executor e(tg.model);
  const std::vector<Tensor> got = e.Run({}, fetch);
  std::map<std::string, HostTensor> out = {{"loss", got[0].ToHost()}};
  for (size_t i = 0; i < tg.params.size(); ++i) out[tg.params[i]] = got[i + 1].ToHost();
  return out;
}

// The flash kernel, forward and backward, with bfloat16 products against float64 loops. Each
// value is held to C u of its terms' magnitudes (u = 2^-8, bfloat16's unit roundoff): the
// product that makes it rounds its two operands (2u) and so did the one before it (dP = dY V^T
// before dS K, 2u more); and each probability moves with the rounding of its scores, whose
// error is at most 2u of scale * sum |q| |k| (S, "scores"), a relative change of at most twice
// that in P: C = 4 + 4 S. The float32 kernel is held to 1e-5 of the same magnitudes, and the
// bfloat16 one must differ from it (the products did run in bfloat16). Without avx512_bf16 the
// attribute changes nothing (ONEDNN_MAX_CPU_ISA=AVX512_CORE checks that path on a CPU that has it).
TEST(Attention, FlashKernelWithBFloat16ProductsMatchesFloat64) {
  for (int64_t t : {1, 5, 19, 65, 150, 300})
    for (int64_t heads : {1, 3})
      for (int mask : {0, 1, 2}) {
        FlashCase c;
        c.t = t, c.heads = heads, c.mask = mask, c.batch = (t + heads + mask) % 2 ? 3 : 1;
        SCOPED_TRACE("T " + std::to_string(t) + ", heads " + std::to_string(heads) + ", batch " +
                     std::to_string(c.batch) + (mask == 1 ? ", learned bias" : mask == 2 ? ", causal" : ""));
        AutodiffOptions opts;
        opts.fuse = true;
        opts.freeze = {"loss_w"};
        const TrainingGraph f32 = BuildTrainingGraph(HandWrittenAttention(c), opts);
        TrainingGraph bf16 = f32;
        ASSERT_EQ(UseBFloat16Attention(bf16.model), 2);  // the fused Attention and its AttentionGrad
        std::map<std::string, HostTensor> inputs;
        {
          std::vector<std::string> names = {"q", "k", "v", "loss_w"};
          if (mask == 1) names.push_back("bias");
          Executor e(f32.model);
          const std::vector<Tensor> got = e.Run({}, names);
          for (size_t i = 0; i < names.size(); ++i) inputs[names[i]] = got[i].ToHost();
        }
        const auto ref = ReferenceLossAndGradients(c, inputs);
        const auto a = LossAndGradients(f32), b = LossAndGradients(bf16);
        const double c_bound = 4 + 4 * ref.at("scores")[0];
        for (const auto& [name, expect] : ref) {
          if (name.rfind("mag:", 0) == 0 || name == "scores") continue;
          SCOPED_TRACE(name);
          const std::vector<double>& mag = ref.at("mag:" + name);
          double f32_worst = 0, bf16_worst = 0, apart = 0, largest = 0;  // errors over their bounds
          for (size_t i = 0; i < expect.size(); ++i) {
            const double fa = a.at(name).Data<float>()[i], fb = b.at(name).Data<float>()[i];
            f32_worst = std::max(f32_worst, std::fabs(fa - expect[i]) / (1e-5 * mag[i] + 1e-6));
            bf16_worst = std::max(bf16_worst, std::fabs(fb - expect[i]) / (c_bound * kBf16Unit * mag[i] + 1e-6));
            apart = std::max(apart, std::fabs(fa - fb));
            largest = std::max(largest, mag[i]);
          }
          EXPECT_LE(f32_worst, 1.0);
          EXPECT_LE(bf16_worst, 1.0);
          if (cpu::HasBFloat16Gemm() && largest > 0) EXPECT_GT(apart, 0.0);
          else EXPECT_EQ(apart, 0.0);
        }
      }
}

}  // namespace
}  // namespace ot
