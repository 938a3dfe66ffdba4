// The autodiff pass: forward model -> training model (forward, loss, backward) that is
// itself a valid ONNX model. Reachability first (nodes on a path from a trainable
// initializer to the loss), then one reverse walk that asks the GradientRegistry for each
// node's gradient nodes and sums gradients at fan-out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace ot {

// The loss attached to the model's output, PyTorch's names and meanings (mean reduction):
//   kCrossEntropy   CrossEntropyLoss: logits [N, K] with labels [N]; per token [N, T, V]
//                   (classes last, as PyTorch's models write them) with labels [N, T]; per
//                   pixel [N, C, H, W] (classes on axis 1) with labels [N, H, W]
//   kNll            NLLLoss on log-probabilities, shaped as for kCrossEntropy
//   kMse, kL1, kSmoothL1, kBceWithLogits  MSELoss, L1Loss, SmoothL1Loss(beta),
//                   BCEWithLogitsLoss: float32 targets shaped as the output
//   kModel          a scalar output of the model is the loss (no labels)
//   kAuto           kModel when the first output is a float scalar or loss_output is set,
//                   else kCrossEntropy
enum class LossKind { kAuto, kCrossEntropy, kNll, kMse, kL1, kSmoothL1, kBceWithLogits, kModel };
// "cross-entropy", "nll", "mse", "l1", "smooth-l1", "bce-with-logits", "model" (as --loss
// takes them); throws ot::Error listing them for another name.
LossKind ParseLossKind(const std::string& name);
const char* LossKindName(LossKind kind);
// True for the losses over class indices (cross-entropy, nll).
inline bool IsClassIndexLoss(LossKind kind) {
  return kind == LossKind::kCrossEntropy || kind == LossKind::kNll || kind == LossKind::kAuto;
}

struct AutodiffOptions {
  // Initializers that stay fixed: names or glob patterns (graph/passes/param_patterns.h); each
  // must match at least one initializer.
  std::vector<std::string> freeze;
  // When not empty, only initializers matching one of these patterns train (--train-only);
  // `freeze` still applies to them.
  std::vector<std::string> train_only;
  LossKind loss = LossKind::kAuto;  // --loss
  std::string loss_output;          // an existing scalar loss output; "" = detect or attach
  // Class-index losses: positions whose label is this contribute nothing and the mean is
  // over the others (PyTorch's ignore_index, default -100).
  int64_t ignore_index = -100;
  float smooth_l1_beta = 1.f;       // kSmoothL1: PyTorch's SmoothL1Loss(beta=), >= 0
  std::string logits_output;        // where to attach the loss; "" = the first graph output
  std::string labels_name = "labels";
  // Label smoothing of the attached loss, as PyTorch's CrossEntropyLoss(label_smoothing=):
  // (1 - eps) * NLL + eps * mean over samples of (-sum_c log p_c / C). In [0, 1).
  float label_smoothing = 0.f;
  // Mixup/CutMix: the loss is lambda * CE(labels) + (1 - lambda) * CE(kMixLabelsInput), the
  // second labels and lambda (a float scalar) being inputs of the training graph.
  bool mixed_targets = false;
  // Fuse PyTorch's decompositions of GELU and LayerNorm into one op each before
  // differentiating (graph/passes/fusion.h).
  bool fuse = true;
  // With fuse: also attention chains into org.onnxtrain Attention (false: the unfused ops,
  // for benchmarks/op_step.py's fused-against-unfused sweep).
  bool fuse_attention = true;
};

constexpr const char* kMixLabelsInput = "labels_mixed";
constexpr const char* kMixLambdaInput = "mix_lambda";

struct TrainingGraph {
  Model model;                      // graph outputs: loss, the forward outputs, then grads
  std::string loss;                 // scalar loss value
  std::string labels;               // the labels input added for the loss ("" if the model had a loss)
  LossKind loss_kind = LossKind::kModel;  // the loss attached (kModel: the model's own)
  std::string loss_input;           // the model value the attached loss reads ("" for kModel)
  std::vector<std::string> params;  // trainable initializers, in initializer order
  std::vector<std::string> grads;   // gradient value of each param
  // (value, state): after each run the runtime copies value into the initializer state
  // (BatchNorm running statistics, updated weights and optimizer state).
  std::vector<std::pair<std::string, std::string>> state_updates;
};

// Name of the graph output that carries the new value of a state tensor.
std::string StateUpdateName(const std::string& state);
// The (value, state) pairs of a training model, found by that naming convention: graph
// outputs "S/new" where S is an initializer.
std::vector<std::pair<std::string, std::string>> FindStateUpdates(const Model& model);

// The model for evaluation and export: BatchNormalization in inference mode (running
// statistics), Dropout off.
Model DeriveEvalModel(const Model& model);

// Float initializers except BatchNormalization running statistics and tensors holding an
// infinity or NaN (constants such as PyTorch's causal attention-mask buffer, -inf above the
// diagonal, which torch.onnx.export writes as initializers like parameters: a gradient step
// would turn -inf into NaN, and PyTorch never trains buffers), minus those matching a
// `freeze` pattern and, when `train_only` is not empty, those matching none of its
// patterns. Throws ot::Error for a pattern that matches no initializer.
std::vector<std::string> DefaultTrainableParams(const Model& model, const std::vector<std::string>& freeze,
                                                const std::vector<std::string>& train_only = {});
// True for a scalar constant that PyTorch 2.x's optimizing dynamo exporter wrote as an
// initializer (val_<n>, <name>_cast): part of the graph, not a parameter; never trained.
bool IsExporterConstant(const Model& model, const HostTensor& t);

// Throws ot::Error, one line naming the labels input, the loss and both shapes, when labels
// of `dtype` and `dims` do not fit the training graph's attached loss (class indices:
// int64 or int32; the regression and multi-label losses: float32 shaped as the output).
void CheckLabelsFit(const TrainingGraph& tg, DType dtype, const std::vector<int64_t>& dims);

// Throws ot::Error for: no trainable initializers, a loss output that does not exist,
// a missing gradient rule (one message naming every op and node without one).
TrainingGraph BuildTrainingGraph(const Model& forward, const AutodiffOptions& options = {});

}  // namespace ot
