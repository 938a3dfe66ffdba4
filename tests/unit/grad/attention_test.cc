// ONNX Attention (opset 23) on the CPU: the forward against float64 loops written here
// (3D and 4D, grouped-query heads, causal, bool and additive masks shorter than the keys,
// softcap, past caches and the qk_matmul_output modes), and AttentionGrad against central
// finite differences of Q, K, V and a learned additive mask.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "graph/autodiff/autodiff.h"
#include "runtime/executor/executor.h"
#include "tests/common/grad_check.h"

namespace ot {
namespace {

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

}  // namespace
}  // namespace ot
