// Test accuracy of a classifier over a data set split, in batches.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/tensor.h"
#include "train/image_dataset.h"

namespace ot {

// Index of the largest logit of each row of a [N, K] float tensor.
std::vector<int64_t> ArgMaxRows(const Tensor& logits);
// Number of rows whose arg-max equals the label; for per-token scores [N, T, V] (classes
// last, as the per-token cross-entropy reads them) against labels [N, T] the number of
// tokens (label -100 left out).
int64_t CountCorrect(const Tensor& logits, const HostTensor& labels);

// Language-model figures over tokens: the summed cross-entropy (natural log), the tokens
// counted (labels -100 left out, PyTorch's ignore_index) and those whose arg-max is right.
struct TokenLoss {
  double loss_sum = 0;
  int64_t tokens = 0, correct = 0;
  double Loss() const { return tokens ? loss_sum / static_cast<double>(tokens) : 0.0; }
  double Perplexity() const;  // exp(Loss())
  double Accuracy() const { return tokens ? static_cast<double>(correct) / static_cast<double>(tokens) : 0.0; }
};
// Runs `forward` (token ids [n, T] -> scores) over the whole data set (batches of `batch`,
// the last padded to it with pad_last) and sums the figures against its labels.
TokenLoss EvaluateTokens(const std::function<Tensor(const Tensor&)>& forward, const ImageDataset& data,
                         int64_t batch, Device device, bool pad_last = false);

struct Accuracy {
  int64_t correct = 0;
  int64_t total = 0;
  // Per true class (index = label): how many samples, and how many predicted right.
  std::vector<int64_t> class_total, class_correct;
  double Fraction() const { return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0; }
};

// Runs `forward` (images [n,C,H,W] -> logits [n,K]) over the whole data set; fills the
// per-class counts too.
// pad_last: the last batch is filled up to `batch` samples (repeating its last one) and
// only its real rows are counted, for models that run one batch size only.
Accuracy EvaluateAccuracy(const std::function<Tensor(const Tensor&)>& forward, const ImageDataset& data,
                          int64_t batch, Device device, bool pad_last = false);

// Regression (mse, l1, smooth-l1: mean absolute error, root mean square error over every
// output value) and multi-label (bce-with-logits: a label is on when its logit > 0 and its
// target > 0.5; exact match = every label of a sample right; F1 per label, averaged over
// the labels) figures, summed batch by batch.
struct TaskTally {
  bool multilabel = false;
  double abs_sum = 0, sq_sum = 0;
  int64_t values = 0, samples = 0, exact = 0;
  std::vector<double> tp, fp, fn;  // per label
  // outputs [n, ...] float32 against targets of the same element count.
  void Add(const Tensor& outputs, const HostTensor& targets);
  double Mae() const { return values ? abs_sum / static_cast<double>(values) : 0.0; }
  double Rmse() const;
  double ExactMatch() const { return samples ? static_cast<double>(exact) / static_cast<double>(samples) : 0.0; }
  double MeanF1() const;
};
// Runs `forward` (a batch and the further inputs by name -> outputs) over the whole data set.
TaskTally EvaluateTask(const std::function<Tensor(const Tensor&, const std::map<std::string, Tensor>&)>& forward,
                       const ImageDataset& data, int64_t batch, Device device, bool multilabel, bool pad_last = false);

// The same with the model's further inputs (ImageDataset::extra_inputs) fed by name.
Accuracy EvaluateAccuracy(const std::function<Tensor(const Tensor&, const std::map<std::string, Tensor>&)>& forward,
                          const ImageDataset& data, int64_t batch, Device device, bool pad_last = false);

// The per-class table of `eval --per-class`: one line per class with samples, its name
// (names[k] when there is one), accuracy and counts.
std::string PerClassTable(const Accuracy& acc, const std::vector<std::string>& names);

}  // namespace ot
