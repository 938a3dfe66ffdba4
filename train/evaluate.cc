// Test accuracy.
#include "train/evaluate.h"

#include "graph/error.h"

namespace ot {

std::vector<int64_t> ArgMaxRows(const Tensor& logits) {
  HostTensor h = logits.ToHost();
  OT_CHECK(h.dtype == DType::kFloat32 && h.dims.size() == 2, "expected float logits [N, K], got %s",
           logits.Describe().c_str());
  const int64_t n = h.dims[0], k = h.dims[1];
  std::vector<int64_t> out(static_cast<size_t>(n), 0);
  const float* p = h.Data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 1; j < k; ++j)
      if (p[i * k + j] > p[i * k + out[static_cast<size_t>(i)]]) out[static_cast<size_t>(i)] = j;
  return out;
}

int64_t CountCorrect(const Tensor& logits, const HostTensor& labels) {
  std::vector<int64_t> pred = ArgMaxRows(logits);
  std::vector<int64_t> truth = labels.AsInt64s();
  OT_CHECK(pred.size() == truth.size(), "%zu predictions for %zu labels", pred.size(), truth.size());
  int64_t correct = 0;
  for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == truth[i];
  return correct;
}

Accuracy EvaluateAccuracy(const std::function<Tensor(const Tensor&)>& forward, const ImageDataset& data,
                          int64_t batch, Device device) {
  Accuracy acc;
  for (int64_t start = 0; start < data.count; start += batch) {
    std::vector<int64_t> idx;
    for (int64_t i = start; i < std::min(data.count, start + batch); ++i) idx.push_back(i);
    Tensor logits = forward(Tensor::FromHost(data.Images(idx), device));
    acc.correct += CountCorrect(logits, data.Labels(idx));
    acc.total += static_cast<int64_t>(idx.size());
  }
  return acc;
}

}  // namespace ot
