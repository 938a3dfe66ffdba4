// Test accuracy of a classifier over a data set split, in batches.
#pragma once

#include <cstdint>
#include <functional>
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

// The per-class table of `eval --per-class`: one line per class with samples, its name
// (names[k] when there is one), accuracy and counts.
std::string PerClassTable(const Accuracy& acc, const std::vector<std::string>& names);

}  // namespace ot
