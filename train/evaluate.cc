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

double TokenLoss::Perplexity() const { return std::exp(Loss()); }

namespace {

// Per-token arg-max hits and, with `loss`, the summed cross-entropy of scores against labels.
void ScoreTokens(const HostTensor& h, const HostTensor& labels, bool loss, TokenLoss* acc) {
  OT_CHECK(h.dtype == DType::kFloat32, "expected float per-token scores, got %s", DTypeName(h.dtype).c_str());
  OT_CHECK(labels.dims.size() == 2 && h.dims.size() == 3 && h.dims[0] == labels.dims[0] && h.dims[1] == labels.dims[1],
           "per-token scores should be [N, T, V] for labels [N, T] = %s, they are %s", ShapeString(labels.dims).c_str(),
           ShapeString(h.dims).c_str());
  const int64_t n = labels.dims[0], t = labels.dims[1], v = h.dims[2];
  const int64_t ps = v, cs = 1;  // element (i, position, class) at i*T*V + position*ps + class*cs
  const float* p = h.Data<float>();
  const std::vector<int64_t> y = labels.AsInt64s();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < t; ++k) {
      const int64_t label = y[static_cast<size_t>(i * t + k)];
      if (label == -100) continue;
      OT_CHECK(label >= 0 && label < v, "label %lld of sample %lld position %lld is outside the %lld scores",
               (long long)label, (long long)i, (long long)k, (long long)v);
      const float* row = p + i * t * v + k * ps;
      int64_t best = 0;
      for (int64_t c = 1; c < v; ++c)
        if (row[c * cs] > row[best * cs]) best = c;
      acc->correct += best == label;
      acc->tokens++;
      if (!loss) continue;
      double sum = 0;
      const double top = row[best * cs];
      for (int64_t c = 0; c < v; ++c) sum += std::exp(static_cast<double>(row[c * cs]) - top);
      acc->loss_sum += top + std::log(sum) - static_cast<double>(row[label * cs]);
    }
  }
}

}  // namespace

TokenLoss EvaluateTokens(const std::function<Tensor(const Tensor&)>& forward, const ImageDataset& data, int64_t batch,
                         Device device, bool pad_last) {
  TokenLoss acc;
  for (int64_t start = 0; start < data.count; start += batch) {
    std::vector<int64_t> idx;
    for (int64_t i = start; i < std::min(data.count, start + batch); ++i) idx.push_back(i);
    const HostTensor truth = data.Labels(idx);
    const size_t real = idx.size();
    while (pad_last && static_cast<int64_t>(idx.size()) < batch) idx.push_back(idx.back());
    HostTensor scores = forward(Tensor::FromHost(data.Images(idx), device)).ToHost();
    if (idx.size() > real) {  // padding rows: keep the real ones
      const int64_t row = scores.NumElements() / scores.dims[0];
      HostTensor cut(scores.dtype, {static_cast<int64_t>(real), scores.dims[1], scores.dims[2]}, scores.name);
      std::copy_n(scores.Data<float>(), static_cast<int64_t>(real) * row, cut.Data<float>());
      scores = std::move(cut);
    }
    ScoreTokens(scores, truth, true, &acc);
  }
  return acc;
}

int64_t CountCorrect(const Tensor& logits, const HostTensor& labels) {
  if (labels.dims.size() == 2) {  // per-token labels [N, T]
    TokenLoss acc;
    ScoreTokens(logits.ToHost(), labels, false, &acc);
    return acc.correct;
  }
  std::vector<int64_t> pred = ArgMaxRows(logits);
  std::vector<int64_t> truth = labels.AsInt64s();
  OT_CHECK(pred.size() == truth.size(), "%zu predictions for %zu labels", pred.size(), truth.size());
  int64_t correct = 0;
  for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == truth[i];
  return correct;
}

Accuracy EvaluateAccuracy(const std::function<Tensor(const Tensor&)>& forward, const ImageDataset& data,
                          int64_t batch, Device device, bool pad_last) {
  Accuracy acc;
  if (!data.label_dims.empty()) {  // per-token labels: the tokens' arg-max hits (no per-class counts)
    const TokenLoss tokens = EvaluateTokens(forward, data, batch, device, pad_last);
    acc.correct = tokens.correct;
    acc.total = tokens.tokens;
    return acc;
  }
  for (int64_t start = 0; start < data.count; start += batch) {
    std::vector<int64_t> idx;
    for (int64_t i = start; i < std::min(data.count, start + batch); ++i) idx.push_back(i);
    const std::vector<int64_t> truth = data.Labels(idx).AsInt64s();
    while (pad_last && static_cast<int64_t>(idx.size()) < batch) idx.push_back(idx.back());
    Tensor logits = forward(Tensor::FromHost(data.Images(idx), device));
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
