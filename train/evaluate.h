// Test accuracy of a classifier over a data set split, in batches, with per-class counts
// (`eval --per-class`). Other tasks are scored by train/task.h.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"
#include "train/data/image_dataset.h"

namespace ot {

// Index of the largest logit of each row of a [N, K] float tensor.
std::vector<int64_t> ArgMaxRows(const Tensor& logits);
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

// The same with the model's further inputs (ImageDataset::extra_inputs) fed by name.
Accuracy EvaluateAccuracy(const std::function<Tensor(const Tensor&, const std::map<std::string, Tensor>&)>& forward,
                          const ImageDataset& data, int64_t batch, Device device, bool pad_last = false);

// The per-class table of `eval --per-class`: one line per class with samples, its name
// (names[k] when there is one), accuracy and counts.
std::string PerClassTable(const Accuracy& acc, const std::vector<std::string>& names);

}  // namespace ot
