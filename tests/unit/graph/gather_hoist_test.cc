// HoistPositionGathers (graph/passes/gather_hoist.h): a Gather of the first or last position
// moves above the position-wise ops of a transformer block (LayerNorm, products with a
// weight matrix, bias and residual sums, GELU); the training graph then gives the loss and
// gradients of the unhoisted one and of finite differences. Other positions, values read
// elsewhere and ops that mix positions stop it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "graph/autodiff/autodiff.h"
#include "graph/passes/gather_hoist.h"
#include "runtime/executor/executor.h"
#include "tests/common/grad_check.h"

namespace ot {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using testing::ExpectSameLossAndGradients;
using testing::ModelBuilder;

struct BlockOptions {
  int64_t batch = 2;
  int64_t index = 0;           // the position the head reads
  bool index_vector = false;   // indices [1] instead of a scalar
  bool hidden_read_twice = false;  // the MLP's hidden activation also feeds the loss
  bool mixing_op = false;          // a Softmax over the positions before the Gather
};

// x [batch, 5, 8] -> LayerNorm -> MatMul [8, 12] + bias -> GELU (torch's Div, Erf, Add, Mul,
// Mul) -> MatMul [12, 8] + bias -> + x (residual) + a broadcast [batch, 1, 8] term + a
// Transpose of a sequence-first [5, batch, 8] -> LayerNorm -> Gather(axis 1) -> loss. Opset 17
// (LayerNormalization).
Model TransformerTail(const BlockOptions& o, std::vector<int64_t>* picked_dims) {
  ModelBuilder b;
  b.Opset(17);
  const int64_t t = 5, e = 8, f = 12;
  b.Param("x", {o.batch, t, e}, -1.f, 1.f).Param("g1", {e}, 0.5f, 1.5f).Param("b1", {e}, -0.5f, 0.5f);
  b.Param("w1", {e, f}, -0.5f, 0.5f).Param("c1", {f}, -0.5f, 0.5f);
  b.Param("w2", {f, e}, -0.5f, 0.5f).Param("c2", {e}, -0.5f, 0.5f);
  b.Param("cls", {o.batch, 1, e}, -0.5f, 0.5f).Param("g2", {e}, 0.5f, 1.5f).Param("b2", {e}, -0.5f, 0.5f);
  b.Param("seq", {t, o.batch, e}, -1.f, 1.f);  // a sequence-first branch, as an attention's output
  std::string in = "x";
  if (o.mixing_op) {
    b.Op("Softmax", {"x"}, "mixed").SetInt("axis", 1);
    in = "mixed";
  }
  b.Op("LayerNormalization", {in, "g1", "b1"}, "ln1").SetInt("axis", -1);
  b.Op("MatMul", {"ln1", "w1"}, "h0");
  b.Op("Add", {"c1", "h0"}, "h1");
  b.TorchGelu("h1", "hidden");
  b.Op("MatMul", {"hidden", "w2"}, "o0");
  b.Op("Add", {"o0", "c2"}, "o1");
  b.Op("Add", {in, "o1"}, "res");
  b.Op("Add", {"res", "cls"}, "res1");
  b.Op("Transpose", {"seq"}, "seq_t").SetInts("perm", {1, 0, 2});
  b.Op("Add", {"res1", "seq_t"}, "res2");
  b.Op("LayerNormalization", {"res2", "g2", "b2"}, "ln2").SetInt("axis", 2);
  b.Op("Constant", {}, "idx")
      .SetTensor("value", o.index_vector ? HostTensor::FromVector<int64_t>({o.index}, {1})
                                         : HostTensor::FromVector<int64_t>({o.index}, {}));
  b.Op("Gather", {"ln2", "idx"}, "picked").SetInt("axis", 1);
  *picked_dims = o.index_vector ? std::vector<int64_t>{o.batch, 1, e} : std::vector<int64_t>{o.batch, e};
  std::string head = "picked";
  if (o.hidden_read_twice) {
    // the loss reads picked and ReduceMean(hidden): hidden must stay whole.
    b.Op("ReduceMean", {"hidden"}, "hidden_sum").SetInt("keepdims", 0);
    b.Op("Add", {"picked", "hidden_sum"}, "head");
    head = "head";
  }
  testing::AddWeightedSumLoss(b, head, *picked_dims);
  return b.Build();
}

TrainingGraph Train(const Model& m, bool fuse) { return testing::TrainFrozenLossWeights(m, fuse); }

const Node* ProducerOf(const Model& m, const std::string& value) {
  for (const auto& n : m.graph.nodes)
    for (const auto& o : n.outputs)
      if (o == value) return &n;
  return nullptr;
}

// Loss and gradients of the hoisted training graph against the unhoisted one's.
void ExpectSameAsUnhoisted(const Model& m, const TrainingGraph& hoisted) {
  const TrainingGraph plain = Train(m, false);
  ExpectSameLossAndGradients(hoisted, plain, 2e-5);
}

TEST(GatherHoist, FirstAndLastPositionMoveAboveTheBlockAndTrainAsBefore) {
  for (int64_t batch : {1, 3}) {
    for (int64_t index : {0, -1}) {
      for (bool vector : {false, true}) {
        SCOPED_TRACE("batch " + std::to_string(batch) + " index " + std::to_string(index) +
                     (vector ? " [1]" : " scalar"));
        BlockOptions o;
        o.batch = batch;
        o.index = index;
        o.index_vector = vector;
        std::vector<int64_t> dims;
        const Model m = TransformerTail(o, &dims);
        Model hoisted = m;
        // The whole block: both LayerNorms, the four sums, both products and their biases,
        // GELU's five ops, the Transpose; x (the residual's and the first LayerNorm's input,
        // gathered once), cls and seq (at its axis 0) are what is left to gather.
        EXPECT_EQ(HoistPositionGathers(hoisted), 15);
        const Node* ln2 = ProducerOf(hoisted, "picked");
        ASSERT_NE(ln2, nullptr);
        EXPECT_EQ(ln2->op_type, "LayerNormalization");
        EXPECT_EQ(ln2->GetInt("axis", 0), vector ? 2 : 1);  // the positive axis follows the dropped one
        // The products read gathered rows.
        for (const auto& n : hoisted.graph.nodes) {
          if (n.op_type == "Gather") {
            EXPECT_TRUE(n.inputs[0] == "x" || n.inputs[0] == "cls" || n.inputs[0] == "seq") << n.inputs[0];
            EXPECT_EQ(n.GetInt("axis", -9), n.inputs[0] == "seq" ? 0 : 1);
          }
          if (n.op_type == "MatMul") {
            EXPECT_TRUE(n.inputs[0] != "ln1" && n.inputs[0] != "hidden") << n.inputs[0];
          }
        }
        const TrainingGraph tg = Train(m, true);
        ExpectGradientsMatchFiniteDifferences(tg, {}, 3e-3f);
        ExpectSameAsUnhoisted(m, tg);
      }
    }
  }
}

TEST(GatherHoist, OtherPositionsValuesReadElsewhereAndMixingOpsStopIt) {
  {
    SCOPED_TRACE("position 2");
    BlockOptions o;
    o.index = 2;
    std::vector<int64_t> dims;
    Model m = TransformerTail(o, &dims);
    EXPECT_EQ(HoistPositionGathers(m), 0);
    EXPECT_EQ(ProducerOf(m, "picked")->op_type, "Gather");
  }
  {
    SCOPED_TRACE("hidden activation read twice");
    BlockOptions o;
    o.hidden_read_twice = true;
    std::vector<int64_t> dims;
    const Model m = TransformerTail(o, &dims);
    Model hoisted = m;
    // LayerNorm, the Transpose and Add (seq), Add (cls), Add (residual), Add (bias) and the
    // second product: its input is the hidden activation, which the loss also reads whole.
    EXPECT_EQ(HoistPositionGathers(hoisted), 7);
    for (const auto& n : hoisted.graph.nodes)
      if (n.op_type == "Gather") {
        EXPECT_TRUE(n.inputs[0] == "x" || n.inputs[0] == "cls" || n.inputs[0] == "seq" || n.inputs[0] == "hidden")
            << n.inputs[0];
      }
    const TrainingGraph tg = Train(m, true);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 6e-3f);  // a larger loss: float32 noise over eps
    ExpectSameAsUnhoisted(m, tg);
  }
  {
    SCOPED_TRACE("softmax over the positions");
    BlockOptions o;
    o.mixing_op = true;
    std::vector<int64_t> dims;
    const Model m = TransformerTail(o, &dims);
    Model hoisted = m;
    EXPECT_EQ(HoistPositionGathers(hoisted), 15);
    for (const auto& n : hoisted.graph.nodes)
      if (n.op_type == "Gather") {
        EXPECT_TRUE(n.inputs[0] == "mixed" || n.inputs[0] == "cls" || n.inputs[0] == "seq") << n.inputs[0];
      }
    const TrainingGraph tg = Train(m, true);
    ExpectGradientsMatchFiniteDifferences(tg, {}, 3e-3f);
    ExpectSameAsUnhoisted(m, tg);
  }
}

}  // namespace
}  // namespace ot
