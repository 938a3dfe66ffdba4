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
  return EvaluateAccuracy([&](const Tensor& x, const std::map<std::string, Tensor>&) { return forward(x); }, data, batch,
                          device, pad_last);
}

Accuracy EvaluateAccuracy(const std::function<Tensor(const Tensor&, const std::map<std::string, Tensor>&)>& forward,
                          const ImageDataset& data, int64_t batch, Device device, bool pad_last) {
  Accuracy acc;
  if (!data.label_dims.empty()) {  // per-token labels: the tokens' arg-max hits (no per-class counts)
    const TokenLoss tokens =
        EvaluateTokens([&](const Tensor& x) { return forward(x, {}); }, data, batch, device, pad_last);
    acc.correct = tokens.correct;
    acc.total = tokens.tokens;
    return acc;
  }
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

void TaskTally::Add(const Tensor& outputs, const HostTensor& targets) {
  const HostTensor h = outputs.ToHost();
  OT_CHECK(h.dtype == DType::kFloat32 && targets.dtype == DType::kFloat32 && h.NumElements() == targets.NumElements(),
           "the model's output %s does not match the float targets %s%s", outputs.Describe().c_str(),
           DTypeName(targets.dtype).c_str(), ShapeString(targets.dims).c_str());
  const float* y = h.Data<float>();
  const float* t = targets.Data<float>();
  const int64_t n = targets.dims.empty() ? 1 : targets.dims[0], total = targets.NumElements();
  const int64_t per = n > 0 ? total / n : 0;
  if (!multilabel) {
    for (int64_t i = 0; i < total; ++i) {
      const double d = static_cast<double>(y[i]) - static_cast<double>(t[i]);
      abs_sum += std::fabs(d);
      sq_sum += d * d;
    }
    values += total;
    samples += n;
    return;
  }
  if (tp.size() < static_cast<size_t>(per)) tp.resize(per), fp.resize(per), fn.resize(per);
  for (int64_t i = 0; i < n; ++i) {
    bool all = true;
    for (int64_t k = 0; k < per; ++k) {
      const bool predicted = y[i * per + k] > 0.f, actual = t[i * per + k] > 0.5f;
      all = all && predicted == actual;
      if (predicted && actual) tp[k] += 1;
      else if (predicted) fp[k] += 1;
      else if (actual) fn[k] += 1;
    }
    exact += all ? 1 : 0;
  }
  samples += n;
  values += total;
}

double TaskTally::Rmse() const { return values ? std::sqrt(sq_sum / static_cast<double>(values)) : 0.0; }

double TaskTally::MeanF1() const {
  if (tp.empty()) return 0.0;
  double sum = 0;
  for (size_t k = 0; k < tp.size(); ++k) {
    const double denom = 2 * tp[k] + fp[k] + fn[k];
    sum += denom > 0 ? 2 * tp[k] / denom : 1.0;  // a label never on, never predicted: all right
  }
  return sum / static_cast<double>(tp.size());
}

TaskTally EvaluateTask(const std::function<Tensor(const Tensor&, const std::map<std::string, Tensor>&)>& forward,
                       const ImageDataset& data, int64_t batch, Device device, bool multilabel, bool pad_last) {
  TaskTally tally;
  tally.multilabel = multilabel;
  for (int64_t start = 0; start < data.count; start += batch) {
    const int64_t real = std::min(batch, data.count - start);
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < real; ++i) idx.push_back(start + i);
    while (pad_last && static_cast<int64_t>(idx.size()) < batch) idx.push_back(idx.back());
    HostTensor x = data.source ? data.source->Inputs(idx, nullptr, 0, 0) : data.Images(idx);
    std::map<std::string, Tensor> extra;
    for (auto& [name, t] : data.ExtraInputs(idx)) extra.emplace(name, Tensor::FromHost(t, device));
    HostTensor out = forward(Tensor::FromHost(x, device), extra).ToHost();
    HostTensor labels = data.Labels(std::vector<int64_t>(idx.begin(), idx.begin() + real));
    if (real < static_cast<int64_t>(idx.size()))  // only the real rows
      out.dims[0] = real, out.bytes.resize(static_cast<size_t>(out.NumElements()) * DTypeSize(out.dtype));
    tally.Add(Tensor::FromHost(out, Device{}), labels);
  }
  return tally;
}

}  // namespace ot
