// Gradient rules, Recurrent layers: LSTM, GRU and RNN. Each emits one recurrent gradient
// op of kGradDomain (LSTMGrad, GRUGrad, RNNGrad) that takes the forward node's inputs (in
// ONNX order, absent ones as "") and the gradients of its outputs Y, Y_h[, Y_c] ("" where
// none flows: zeros) and then its output Y ("" when it has none), carries the forward node's attributes, and writes the gradients of
// X, W, R, B, initial_h[, initial_c, P] that are needed. sequence_lens is a stop input.
#include "graph/autodiff/gradient_rules_common.h"

#include "graph/error.h"

namespace ot {
namespace {

using B = GradientBuilder;

// num_inputs: LSTM 8, GRU and RNN 6; num_outputs: LSTM 3, GRU and RNN 2.
void RecurrentGrad(B& b, const char* grad_op, int num_inputs, int num_outputs) {
  const Node& n = b.node();
  std::vector<std::string> ins;
  for (int i = 0; i < num_inputs; ++i) ins.push_back(n.HasInput(i) ? b.I(i) : "");
  for (int i = 0; i < num_outputs; ++i) ins.push_back(b.GO(i));
  // The forward's Y, when it has one, spares the gradient op the sequential recompute.
  ins.push_back(n.outputs.empty() || n.outputs[0].empty() ? "" : b.O(0));
  while (ins.back().empty()) ins.pop_back();
  // Gradient outputs: dX, dW, dR, dB, then (skipping sequence_lens) dinitial_h[, dinitial_c, dP].
  std::vector<std::string> outs;
  for (int i = 0; i < num_inputs; ++i) {
    if (i == 4) continue;
    outs.push_back(n.HasInput(i) && b.NeedGI(i) ? b.GI(i) : "");
  }
  while (!outs.empty() && outs.back().empty()) outs.pop_back();
  if (outs.empty()) return;
  b.Emit(grad_op, ins, outs, kGradDomain, n.attrs);
}

}  // namespace

void RegisterSequenceGradientRules(GradientRegistry& r) {
  RegisterRule(r, "LSTM", 7, kLatestOpset, [](B& b) { RecurrentGrad(b, "LSTMGrad", 8, 3); }, {4});
  RegisterRule(r, "GRU", 7, kLatestOpset, [](B& b) { RecurrentGrad(b, "GRUGrad", 6, 2); }, {4});
  RegisterRule(r, "RNN", 7, kLatestOpset, [](B& b) { RecurrentGrad(b, "RNNGrad", 6, 2); }, {4});
}

}  // namespace ot
