// Test accuracy.
#include "train/evaluate.h"

#include <algorithm>
#include <cmath>

#include "graph/error.h"

namespace ot {

std::vector<int64_t> ArgMaxRows(const Tensor& logits) {
  HostTensor h = logits.ToHost();
  // Scores [N, K, 1, 1] (a 1x1-conv head, SqueezeNet's) are [N, K].
  bool unit_trailing = h.dims.size() >= 2;
  for (size_t d = 2; d < h.dims.size(); ++d) unit_trailing = unit_trailing && h.dims[d] == 1;
  OT_CHECK(h.dtype == DType::kFloat32 && unit_trailing, "expected float logits [N, K] (or [N, K, 1, 1]), got %s",
           logits.Describe().c_str());
  const int64_t n = h.dims[0], k = h.dims[1];
  std::vector<int64_t> out(static_cast<size_t>(n), 0);
  const float* p = h.Data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 1; j < k; ++j)
      if (p[i * k + j] > p[i * k + out[static_cast<size_t>(i)]]) out[static_cast<size_t>(i)] = j;
  return out;
}

Accuracy EvaluateAccuracy(const std::function<Tensor(const Tensor&)>& forward, const ImageDataset& data,
                          int64_t batch, Device device, bool pad_last) {
  return EvaluateAccuracy([&](const Tensor& x, const std::map<std::string, Tensor>&) { return forward(x); }, data, batch,
                          device, pad_last);
}

Accuracy EvaluateAccuracy(const std::function<Tensor(const Tensor&, const std::map<std::string, Tensor>&)>& forward,
                          const ImageDataset& data, int64_t batch, Device device, bool pad_last) {
  Accuracy acc;
  OT_CHECK(data.label_dims.empty(), "per-class accuracy is for one class label per sample; the labels are %s per sample",
           ShapeString(data.label_dims).c_str());
  for (int64_t start = 0; start < data.count; start += batch) {
    std::vector<int64_t> idx;
    for (int64_t i = start; i < std::min(data.count, start + batch); ++i) idx.push_back(i);
    const std::vector<int64_t> truth = data.Labels(idx).AsInt64s();
    while (pad_last && static_cast<int64_t>(idx.size()) < batch) idx.push_back(idx.back());
    std::map<std::string, Tensor> extra;  // the model's further inputs
    for (auto& [name, t] : data.ExtraInputs(idx)) extra.emplace(name, Tensor::FromHost(t, device));
    Tensor logits = forward(Tensor::FromHost(data.Images(idx), device), extra);
    std::vector<int64_t> pred = ArgMaxRows(logits);
    if (pred.size() > truth.size()) pred.resize(truth.size());  // padding rows
    idx.resize(truth.size());
    OT_CHECK(pred.size() == truth.size(), "%zu predictions for %zu labels", pred.size(), truth.size());
    for (size_t i = 0; i < pred.size(); ++i) {
      const int64_t label = truth[i];
      OT_CHECK(label >= 0 && label < (int64_t{1} << 24), "label %lld of sample %lld is out of range", (long long)label,
               (long long)idx[i]);
      if (static_cast<size_t>(label) >= acc.class_total.size()) {
        acc.class_total.resize(static_cast<size_t>(label) + 1, 0);
        acc.class_correct.resize(static_cast<size_t>(label) + 1, 0);
      }
      acc.class_total[static_cast<size_t>(label)]++;
      acc.class_correct[static_cast<size_t>(label)] += pred[i] == label;
      acc.correct += pred[i] == label;
    }
    acc.total += static_cast<int64_t>(idx.size());
  }
  return acc;
}

std::string PerClassTable(const Accuracy& acc, const std::vector<std::string>& names) {
  size_t width = 5;  // "class"
  for (size_t k = 0; k < acc.class_total.size(); ++k)
    width = std::max(width, std::to_string(k).size() + (k < names.size() ? names[k].size() + 1 : 0));
  std::string out = StrFormat("%-*s  %8s  %s\n", static_cast<int>(width), "class", "accuracy", "correct / total");
  for (size_t k = 0; k < acc.class_total.size(); ++k) {
    const std::string label = std::to_string(k) + (k < names.size() ? " " + names[k] : "");
    const int64_t total = acc.class_total[k], correct = acc.class_correct[k];
    const std::string pct = total ? StrFormat("%.2f%%", 100.0 * static_cast<double>(correct) / static_cast<double>(total))
                                  : std::string("-");
    out += StrFormat("%-*s  %8s  %lld / %lld\n", static_cast<int>(width), label.c_str(), pct.c_str(), (long long)correct,
                     (long long)total);
  }
  return out;
}

}  // namespace ot
