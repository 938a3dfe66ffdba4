// What a model learns and how its outputs are scored: one image class per sample, a class
// per token (language models), a class per pixel (segmentation), float values (regression),
// several labels per sample (multi-label), or the model's own loss. The trainer, `eval` and
// the tests score every task the same way; the figures are sums, so that micro-batches,
// data-parallel ranks and a resumed snapshot add up to the whole epoch's.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "graph/autodiff/autodiff.h"
#include "graph/host_tensor.h"
#include "graph/ir.h"
#include "runtime/core/tensor.h"
#include "train/data/image_dataset.h"
#include "train/progress.h"

namespace ot {

enum class TaskKind {
  kClasses,     // scores [N, K] (or [N, K, 1, 1]) against class indices [N]
  kTokens,      // scores [N, T, V], classes last, against [N, T] (a language model)
  kDense,       // scores [N, C, d1, ...], classes on axis 1, against [N, d1, ...] (segmentation)
  kRegression,  // float outputs against float targets of the same size (mse, l1, smooth-l1)
  kMultiLabel,  // logits [N, L] against 0/1 targets [N, L] (bce-with-logits)
  kModelLoss,   // --loss model: the model's own scalar loss; no other figure
};

// The figures of a split or an epoch, as sums.
struct TaskFigures {
  double loss_sum = 0, loss_count = 0;  // training: each step's mean loss x its targets; eval: per target
  double correct = 0, counted = 0;      // arg-max hits, and the class targets scored (ignored ones left out)
  double abs_sum = 0, sq_sum = 0, values = 0;  // regression: |error|, error^2 over every value
  double exact = 0;    // multi-label: samples whose labels are all right
  double samples = 0;  // samples scored
  // Per class (segmentation: true positives, false positives, false negatives of each class)
  // or per label (multi-label).
  std::vector<double> tp, fp, fn;

  void Add(const TaskFigures& other);
  // Every sum in one vector (to sum over ranks or keep in a snapshot): the nine sums above,
  // then tp, fp and fn; and back.
  std::vector<double> Pack() const;
  static TaskFigures Unpack(const std::vector<double>& packed);

  double Loss() const { return loss_count > 0 ? loss_sum / loss_count : 0.0; }
  double Accuracy() const { return counted > 0 ? correct / counted : 0.0; }
  double Mae() const { return values > 0 ? abs_sum / values : 0.0; }
  double Rmse() const;
  double ExactMatch() const { return samples > 0 ? exact / samples : 0.0; }
  double MeanF1() const;
  // Segmentation: the mean over classes of tp / (tp + fp + fn), over the classes that occur
  // in the targets or the predictions (torchmetrics' and the VOC benchmark's convention).
  double MeanIoU() const;
};

struct TaskSpec {
  TaskKind kind = TaskKind::kClasses;
  int64_t classes = 0;        // K (0: not known before the first batch)
  int64_t ignore_index = -100;  // class targets with this value are not scored
};

// No figures yet, with the per-class counts of a segmentation task sized to its classes, so
// that tallies of every rank and split pack to the same length.
TaskFigures EmptyFigures(const TaskSpec& spec);

// Which task a loss and a data set make for the model output `scores` (the loss's input):
// the loss kind (kAuto: class indices), the labels' per-sample shape and float-ness.
TaskSpec TaskFor(LossKind loss, const Model& model, const ValueInfo& scores, const ImageDataset& data,
                 int64_t ignore_index);
std::string TaskName(TaskKind kind);  // "image classification", "language model", ...

// Adds one batch's scores (outputs of the model's loss input, on the host) against its
// targets to `figures`; with_loss also sums the loss per target where the task has a
// per-target loss (classes, tokens, pixels: cross-entropy; regression: none). Throws
// ot::Error naming both shapes when the targets do not fit the scores, and a class target
// outside [0, K) that is not the ignore index.
void ScoreBatch(const TaskSpec& spec, const HostTensor& scores, const HostTensor& targets, bool with_loss,
                TaskFigures* figures);

// Runs `forward` (the batch's first input and the further inputs by name -> the scores)
// over the whole split in batches of `batch` (the last padded to it with pad_last, only its
// real rows scored) and scores it.
using ForwardFn = std::function<Tensor(const Tensor&, const std::map<std::string, Tensor>&)>;
TaskFigures EvaluateSplit(const TaskSpec& spec, const ForwardFn& forward, const ImageDataset& data, int64_t batch,
                          Device device, bool pad_last);

// The training figures of an epoch into its summary (accuracy, perplexity, MAE/RMSE, exact
// match and F1, pixel accuracy and mean IoU), and the test split's (test_*).
void FillTrainingFigures(const TaskSpec& spec, const TaskFigures& f, EpochSummary* s);
void FillTestFigures(const TaskSpec& spec, const TaskFigures& f, EpochSummary* s);
// `eval`'s line: "SPEC SPLIT accuracy: 91.20% (912 of 1000)", "... loss: 1.23, perplexity
// 3.42, token accuracy ...", "... pixel accuracy 93.1%, mean IoU 0.712 ...", ...
std::string EvalLine(const TaskSpec& spec, const TaskFigures& f, const std::string& what);

}  // namespace ot
