// Test accuracy of a classifier over a data set split, in batches.
#pragma once

#include <cstdint>
#include <functional>

#include "runtime/tensor.h"
#include "train/image_dataset.h"

namespace ot {

// Index of the largest logit of each row of a [N, K] float tensor.
std::vector<int64_t> ArgMaxRows(const Tensor& logits);
// Number of rows whose arg-max equals the label.
int64_t CountCorrect(const Tensor& logits, const HostTensor& labels);

struct Accuracy {
  int64_t correct = 0;
  int64_t total = 0;
  double Fraction() const { return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0; }
};

// Runs `forward` (images [n,C,H,W] -> logits [n,K]) over the whole data set.
Accuracy EvaluateAccuracy(const std::function<Tensor(const Tensor&)>& forward, const ImageDataset& data,
                          int64_t batch, Device device);

}  // namespace ot
