// The CUDA recurrent kernels (runtime/cuda/recurrent/: LSTM, GRU, RNN and LSTMGrad, GRUGrad,
// RNNGrad) against the CPU runtime as the oracle, one node at a time (cuda_node_case.h), for
// every variant the CPU kernel handles: directions forward, reverse and bidirectional,
// sequence_lens (entries of length 0 and full length), initial_h and initial_c, layout 0 and
// 1, peepholes, clip, input_forget, GRU linear_before_reset 0 and 1, activations other than
// the defaults with alpha and beta, and the gradient ops with and without the forward's Y and
// with some output gradients absent. The per-element cell math is
// runtime/ops/math/rnn_cell_math.h's, checked on the CPU by rnn_cell_math_test; these tests
// check the launches, the indexing and the GEMMs around it. Every test skips, with the reason,
// on a machine without a usable CUDA device.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "graph/op_domains.h"
#include "tests/cuda/cuda_node_case.h"
#include "tests/cuda/cuda_test_util.h"

namespace ot {
namespace {

using namespace cuda_case;  // NOLINT: RandomTensor, NodeSpec, ExpectSameOnCuda, RunOn

class CudaRecurrent : public ::testing::Test {
 protected:
  void SetUp() override { OT_REQUIRE_GPU(); }
};

struct Case {
  std::string op = "LSTM";  // LSTM, GRU or RNN
  int64_t seq = 5, batch = 3, input = 4, hidden = 6;
  std::string direction = "forward";
  int64_t layout = 0;
  std::vector<int32_t> lens;  // empty: no sequence_lens
  bool bias = true, init = false, peepholes = false, input_forget = false;
  int64_t linear_before_reset = 0;
  float clip = 0.f;  // 0: none
  std::vector<std::string> acts;
  std::vector<float> alphas, betas;
  int64_t opset = 14;

  int64_t Gates() const { return op == "LSTM" ? 4 : op == "GRU" ? 3 : 1; }
  int64_t Dirs() const { return direction == "bidirectional" ? 2 : 1; }
  int NumInputs() const { return op == "LSTM" ? 8 : 6; }
  int NumOutputs() const { return op == "LSTM" ? 3 : 2; }
  Ints State() const { return layout == 0 ? Ints{Dirs(), batch, hidden} : Ints{batch, Dirs(), hidden}; }
  Ints YShape() const {
    return layout == 0 ? Ints{seq, Dirs(), batch, hidden} : Ints{batch, seq, Dirs(), hidden};
  }

  void Attrs(Node& n) const {
    n.SetInt("hidden_size", hidden);
    n.SetString("direction", direction);
    if (layout) n.SetInt("layout", layout);
    if (clip > 0.f) n.SetFloat("clip", clip);
    if (op == "LSTM" && input_forget) n.SetInt("input_forget", 1);
    if (op == "GRU") n.SetInt("linear_before_reset", linear_before_reset);
    if (!acts.empty()) {
      Attribute a;
      a.kind = Attribute::Kind::kStrings;
      a.strings = acts;
      n.attrs["activations"] = a;
    }
    if (!alphas.empty()) n.SetFloats("activation_alpha", alphas);
    if (!betas.empty()) n.SetFloats("activation_beta", betas);
  }

  // X, W, R, B, sequence_lens, initial_h[, initial_c, P] (undefined where absent).
  std::vector<HostTensor> Inputs() const {
    const int64_t gh = Gates() * hidden, d = Dirs();
    std::vector<HostTensor> in;
    in.push_back(RandomTensor(layout == 0 ? Ints{seq, batch, input} : Ints{batch, seq, input}, 1));
    in.push_back(RandomTensor({d, gh, input}, 2, -0.6f, 0.6f));
    in.push_back(RandomTensor({d, gh, hidden}, 3, -0.6f, 0.6f));
    in.push_back(bias ? RandomTensor({d, 2 * gh}, 4, -0.5f, 0.5f) : HostTensor());
    in.push_back(lens.empty() ? HostTensor()
                              : HostTensor::FromVector(lens, {static_cast<int64_t>(lens.size())}));
    in.push_back(init ? RandomTensor(State(), 5) : HostTensor());
    if (op == "LSTM") {
      in.push_back(init ? RandomTensor(State(), 6) : HostTensor());
      in.push_back(peepholes ? RandomTensor({d, 3 * hidden}, 7) : HostTensor());
    }
    while (in.back().dtype == DType::kUndefined) in.pop_back();
    return in;
  }
};

void CheckForward(const Case& c) {
  NodeSpec s{c.op, c.opset, [c](Node& n) { c.Attrs(n); }, std::vector<bool>(static_cast<size_t>(c.NumOutputs()), true)};
  ExpectSameOnCuda(s, c.Inputs(), 1e-4, 2e-5);
}

// The gradient op with random output gradients (dY_c absent when drop_c; the forward's Y
// passed when with_y, as the autodiff pass does).
void CheckGrad(const Case& c, bool with_y = true, bool drop_c = false) {
  std::vector<HostTensor> in = c.Inputs();
  while (static_cast<int>(in.size()) < c.NumInputs()) in.push_back(HostTensor());
  std::vector<HostTensor> y;
  if (with_y) {
    NodeSpec fwd{c.op, c.opset, [c](Node& n) { c.Attrs(n); }, {true}};
    y = RunOn(Device::CPU(), fwd, c.Inputs());
  }
  in.push_back(RandomTensor(c.YShape(), 21));
  in.push_back(RandomTensor(c.State(), 22));
  if (c.op == "LSTM") in.push_back(drop_c ? HostTensor() : RandomTensor(c.State(), 23));
  in.push_back(with_y ? y[0] : HostTensor());
  while (in.back().dtype == DType::kUndefined) in.pop_back();
  const int n_out = c.op == "LSTM" ? 7 : 5;
  NodeSpec s{c.op + "Grad", c.opset, [c](Node& n) { c.Attrs(n); }, std::vector<bool>(static_cast<size_t>(n_out), true),
             kGradDomain};
  ExpectSameOnCuda(s, in, 1e-3, 1e-4);
}

void CheckBoth(const Case& c) {
  CheckForward(c);
  CheckGrad(c);
}

TEST_F(CudaRecurrent, LstmDefault) {
  Case c;
  CheckBoth(c);
  CheckGrad(c, false, true);
}

TEST_F(CudaRecurrent, LstmBidirectionalInitialStatesPeepholes) {
  Case c;
  c.direction = "bidirectional";
  c.init = true;
  c.peepholes = true;
  CheckBoth(c);
}

TEST_F(CudaRecurrent, LstmReverseSequenceLensLayout1) {
  Case c;
  c.direction = "reverse";
  c.lens = {5, 0, 3};
  c.layout = 1;
  c.init = true;
  CheckBoth(c);
  c.direction = "bidirectional";
  CheckBoth(c);
}

TEST_F(CudaRecurrent, LstmClipInputForgetOtherActivations) {
  Case c;
  c.clip = 0.7f;
  c.input_forget = true;
  c.peepholes = true;
  c.acts = {"HardSigmoid", "ScaledTanh", "Softsign"};
  c.alphas = {0.3f, 1.2f};
  c.betas = {0.45f, 0.8f};
  c.opset = 7;
  CheckBoth(c);
  c.acts = {"Sigmoid", "Elu", "LeakyRelu", "Sigmoid", "Tanh", "Tanh"};
  c.alphas = {0.7f, 0.2f};
  c.betas = {};
  c.direction = "bidirectional";
  c.input_forget = false;
  CheckBoth(c);
}

TEST_F(CudaRecurrent, GruLinearBeforeReset0And1) {
  for (int64_t lbr : {0, 1}) {
    Case c;
    c.op = "GRU";
    c.linear_before_reset = lbr;
    CheckBoth(c);
    c.direction = "bidirectional";
    c.init = true;
    c.lens = {2, 5, 0};
    CheckBoth(c);
    c.layout = 1;
    c.direction = "reverse";
    c.bias = false;
    CheckBoth(c);
    CheckGrad(c, false);
  }
}

TEST_F(CudaRecurrent, GruClipAndOtherActivations) {
  for (int64_t lbr : {0, 1}) {
    Case c;
    c.op = "GRU";
    c.linear_before_reset = lbr;
    c.clip = 0.8f;
    c.acts = {"HardSigmoid", "Softplus"};
    c.alphas = {0.25f};
    c.betas = {0.5f};
    CheckBoth(c);
  }
}

TEST_F(CudaRecurrent, RnnVariants) {
  Case c;
  c.op = "RNN";
  CheckBoth(c);
  c.direction = "bidirectional";
  c.init = true;
  c.lens = {4, 0, 5};
  c.acts = {"Relu", "Affine"};  // alpha and beta list only the functions that take them
  c.alphas = {0.5f};
  c.betas = {0.1f};
  CheckBoth(c);
  c.layout = 1;
  c.clip = 0.9f;
  c.acts = {"Tanh", "ThresholdedRelu"};
  c.alphas = {0.2f};
  c.betas = {};
  CheckBoth(c);
  CheckGrad(c, false);
}

TEST_F(CudaRecurrent, LongerSequenceAndWiderHidden) {
  // More than one block of threads per step, and many steps.
  Case c;
  c.seq = 17;
  c.batch = 9;
  c.input = 33;
  c.hidden = 40;
  c.direction = "bidirectional";
  CheckBoth(c);
  c.op = "GRU";
  CheckBoth(c);
}

TEST_F(CudaRecurrent, BadSequenceLensIsOneClearError) {
  Case c;
  c.lens = {5, 9, 1};
  NodeSpec s{c.op, c.opset, [c](Node& n) { c.Attrs(n); }, {true}};
  try {
    RunOn(kCuda, s, c.Inputs());
    FAIL() << "sequence_lens 9 > seq 5 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence_lens[1] = 9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("under_test"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ot
