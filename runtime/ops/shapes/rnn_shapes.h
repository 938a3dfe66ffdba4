// Device-neutral Prepare logic of the recurrent ops LSTM, GRU and RNN and of their
// gradient ops LSTMGrad, GRUGrad and RNNGrad (org.onnxtrain): attribute reading, input
// shape and type checks with errors naming the node, output shapes. The forward inputs
// are read at positions 0.. of the context in ONNX order (X, W, R, B, sequence_lens,
// initial_h[, initial_c, P]); the gradient ops take the same inputs first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "runtime/core/kernel.h"
#include "runtime/core/tensor.h"
#include "runtime/ops/math/rnn_steps.h"

namespace ot {

enum class RnnCell { kLSTM, kGRU, kRNN };

// RnnActivationKind and RnnActivation: runtime/ops/math/rnn_cell_math.h.

struct RnnSpec {
  RnnCell cell = RnnCell::kLSTM;
  int64_t seq = 0, batch = 0, input = 0, hidden = 0;
  int64_t dirs = 1;      // num_directions: 2 for bidirectional
  bool reverse = false;  // direction "reverse" (one direction, walked backwards)
  int64_t gates = 4;     // 4 (LSTM, iofc), 3 (GRU, zrh), 1 (RNN)
  int64_t layout = 0;    // 0: X [seq, batch, input]; 1: X [batch, seq, input]
  bool has_clip = false;
  float clip = 0.f;
  bool linear_before_reset = false;  // GRU
  bool input_forget = false;         // LSTM: the forget gate is 1 - the input gate
  // Per direction `acts_per_dir` functions: LSTM f, g, h; GRU f, g; RNN f.
  std::vector<RnnActivation> acts;
  int acts_per_dir = 3;
  bool has_bias = false, has_seq_lens = false, has_init_h = false, has_init_c = false, has_peephole = false;
  Shape y, y_h;  // output shapes (Y_c is shaped like Y_h)

  // Whether direction d walks the sequence backwards.
  bool Backward(int64_t d) const { return reverse || d == 1; }
  // Row of X (seen as [seq*batch, input]) that holds step t of batch entry b.
  int64_t Row(int64_t t, int64_t b) const { return layout == 0 ? t * batch + b : b * seq + t; }
  // Offsets (in elements) of Y[t, d, b, :] and of Y_h / initial_h / initial_c [d, b, :].
  int64_t YOffset(int64_t t, int64_t d, int64_t b) const {
    return (layout == 0 ? (t * dirs + d) * batch + b : (b * seq + t) * dirs + d) * hidden;
  }
  int64_t StateOffset(int64_t d, int64_t b) const { return (layout == 0 ? d * batch + b : b * dirs + d) * hidden; }
};

// Number of forward inputs of a cell in ONNX order (LSTM 8, GRU and RNN 6).
int RnnNumForwardInputs(RnnCell cell);

// Reads the node's attributes and checks the forward inputs held by ctx; throws ot::Error
// (shapes) or ot::UnsupportedError (types, input_forget, unknown activations).
RnnSpec PlanRnn(const Node& node, RnnCell cell, int64_t opset, const KernelContext& ctx);

// LSTMGrad/GRUGrad/RNNGrad (inputs: the forward's, then dY, dY_h[, dY_c] and the forward's
// Y): plans the node as PlanRnn does, checks the gradient inputs' types and shapes, and
// declares the outputs (dX, dW, dR, dB, d initial_h[, d initial_c, dP]); the CPU and CUDA
// kernels share it.
RnnSpec PrepareRnnGradOutputs(const Node& node, RnnCell cell, int64_t opset, KernelContext& ctx);

// The length of each batch entry's sequence: sequence_lens (int32 or int64) checked to lie
// in [0, seq], or seq for every entry when the input is absent.
std::vector<int64_t> ReadSequenceLens(const Node& node, const RnnSpec& spec, const KernelContext& ctx);
// Direction d of the node as the step loop of runtime/ops/math/rnn_steps.h sees it.
RnnStepGeometry RnnDirectionGeometry(const RnnSpec& spec, int64_t d);

// The same check of sequence_lens values already read (a device's copy on the host).
std::vector<int64_t> CheckSequenceLens(const Node& node, const RnnSpec& spec, const std::vector<int64_t>& values);

}  // namespace ot
