// Tasks and their figures (see task.h).
#include "train/task.h"

#include <algorithm>
#include <cmath>

#include "graph/exports/class_head.h"
#include "graph/error.h"

namespace ot {

namespace {

constexpr size_t kScalarSums = 9;  // the sums before the per-class lists in Pack()

double Div(double a, double b) { return b > 0 ? a / b : 0.0; }

// Where class c of position p of sample i lies in a score tensor: i * sample + p * pos + c * cls.
struct ScoreLayout {
  int64_t samples = 0, positions = 1, classes = 0;
  int64_t sample_stride = 0, position_stride = 0, class_stride = 1;
};

ScoreLayout LayoutFor(const TaskSpec& spec, const HostTensor& scores, const HostTensor& targets) {
  const std::vector<int64_t>& s = scores.dims;
  const std::vector<int64_t>& t = targets.dims;
  ScoreLayout l;
  bool fits = !s.empty() && !t.empty() && s[0] == t[0];
  if (spec.kind == TaskKind::kClasses) {
    for (size_t d = 2; d < s.size(); ++d) fits = fits && s[d] == 1;
    fits = fits && s.size() >= 2 && t.size() == 1;
    if (fits) l.classes = s[1];
    l.class_stride = 1;
  } else if (spec.kind == TaskKind::kTokens) {  // [N, T..., V] against [N, T...]
    fits = fits && s.size() == t.size() + 1 && std::equal(t.begin(), t.end(), s.begin());
    if (fits) {
      l.classes = s.back();
      for (size_t d = 1; d < t.size(); ++d) l.positions *= t[d];
      l.position_stride = l.classes;
    }
  } else {  // kDense: [N, C, d1...] against [N, d1...]
    fits = fits && s.size() == t.size() + 1 && std::equal(t.begin() + 1, t.end(), s.begin() + 2);
    if (fits) {
      l.classes = s[1];
      for (size_t d = 1; d < t.size(); ++d) l.positions *= t[d];
      l.position_stride = 1;
      l.class_stride = l.positions;
    }
  }
  const char* want = spec.kind == TaskKind::kClasses  ? "scores [N, K] for class labels [N]"
                     : spec.kind == TaskKind::kTokens ? "scores [N, T, V] (classes last) for labels [N, T]"
                                                      : "scores [N, C, H, W] (classes on axis 1) for labels [N, H, W]";
  OT_CHECK(fits && scores.dtype == DType::kFloat32, "the model's scores are %s%s but the labels are %s%s; the task wants %s",
           DTypeName(scores.dtype).c_str(), ShapeString(s).c_str(), DTypeName(targets.dtype).c_str(),
           ShapeString(t).c_str(), want);
  l.samples = s[0];
  l.sample_stride = l.positions * l.classes;
  return l;
}

void ScoreClasses(const TaskSpec& spec, const HostTensor& scores, const HostTensor& targets, bool with_loss,
                  TaskFigures* f) {
  const ScoreLayout l = LayoutFor(spec, scores, targets);
  const bool confusion = spec.kind == TaskKind::kDense;
  if (confusion && f->tp.size() < static_cast<size_t>(l.classes)) {
    f->tp.resize(static_cast<size_t>(l.classes), 0);
    f->fp.resize(static_cast<size_t>(l.classes), 0);
    f->fn.resize(static_cast<size_t>(l.classes), 0);
  }
  f->samples += static_cast<double>(l.samples);
  const float* p = scores.Data<float>();
  const std::vector<int64_t> y = targets.AsInt64s();
  for (int64_t i = 0; i < l.samples; ++i)
    for (int64_t q = 0; q < l.positions; ++q) {
      const int64_t label = y[static_cast<size_t>(i * l.positions + q)];
      if (label == spec.ignore_index) continue;
      OT_CHECK(label >= 0 && label < l.classes,
               "label %lld of sample %lld%s is outside the model's %lld classes (and is not the ignore index %lld); "
               "check the labels or --ignore-index",
               (long long)label, (long long)i,
               l.positions > 1 ? StrFormat(" position %lld", (long long)q).c_str() : "", (long long)l.classes,
               (long long)spec.ignore_index);
      const float* row = p + i * l.sample_stride + q * l.position_stride;
      int64_t best = 0;
      for (int64_t c = 1; c < l.classes; ++c)
        if (row[c * l.class_stride] > row[best * l.class_stride]) best = c;
      f->correct += best == label;
      f->counted += 1;
      if (confusion) {
        if (best == label) {
          f->tp[static_cast<size_t>(label)] += 1;
        } else {
          f->fp[static_cast<size_t>(best)] += 1;
          f->fn[static_cast<size_t>(label)] += 1;
        }
      }
      if (!with_loss) continue;
      const double top = row[best * l.class_stride];
      double sum = 0;
      for (int64_t c = 0; c < l.classes; ++c) sum += std::exp(static_cast<double>(row[c * l.class_stride]) - top);
      f->loss_sum += top + std::log(sum) - static_cast<double>(row[label * l.class_stride]);
      f->loss_count += 1;
    }
}

void ScoreFloats(const TaskSpec& spec, const HostTensor& outputs, const HostTensor& targets, TaskFigures* f) {
  OT_CHECK(outputs.dtype == DType::kFloat32 && targets.dtype == DType::kFloat32 &&
               outputs.NumElements() == targets.NumElements(),
           "the model's output %s%s does not match the float targets %s%s", DTypeName(outputs.dtype).c_str(),
           ShapeString(outputs.dims).c_str(), DTypeName(targets.dtype).c_str(), ShapeString(targets.dims).c_str());
  const float* y = outputs.Data<float>();
  const float* t = targets.Data<float>();
  const int64_t n = targets.dims.empty() ? 1 : targets.dims[0], total = targets.NumElements();
  const int64_t per = n > 0 ? total / n : 0;
  f->samples += static_cast<double>(n);
  f->values += static_cast<double>(total);
  if (spec.kind == TaskKind::kRegression) {
    for (int64_t i = 0; i < total; ++i) {
      const double d = static_cast<double>(y[i]) - static_cast<double>(t[i]);
      f->abs_sum += std::fabs(d);
      f->sq_sum += d * d;
    }
    return;
  }
  if (f->tp.size() < static_cast<size_t>(per)) {
    f->tp.resize(static_cast<size_t>(per), 0);
    f->fp.resize(static_cast<size_t>(per), 0);
    f->fn.resize(static_cast<size_t>(per), 0);
  }
  for (int64_t i = 0; i < n; ++i) {
    bool all = true;
    for (int64_t k = 0; k < per; ++k) {
      const bool predicted = y[i * per + k] > 0.f, actual = t[i * per + k] > 0.5f;
      all = all && predicted == actual;
      if (predicted && actual) f->tp[static_cast<size_t>(k)] += 1;
      else if (predicted) f->fp[static_cast<size_t>(k)] += 1;
      else if (actual) f->fn[static_cast<size_t>(k)] += 1;
    }
    f->exact += all ? 1 : 0;
  }
}

}  // namespace

void TaskFigures::Add(const TaskFigures& o) {
  loss_sum += o.loss_sum, loss_count += o.loss_count, correct += o.correct, counted += o.counted;
  abs_sum += o.abs_sum, sq_sum += o.sq_sum, values += o.values, exact += o.exact, samples += o.samples;
  const size_t k = std::max(tp.size(), o.tp.size());
  tp.resize(k, 0), fp.resize(k, 0), fn.resize(k, 0);
  for (size_t c = 0; c < o.tp.size(); ++c) tp[c] += o.tp[c], fp[c] += o.fp[c], fn[c] += o.fn[c];
}

std::vector<double> TaskFigures::Pack() const {
  std::vector<double> v = {loss_sum, loss_count, correct, counted, abs_sum, sq_sum, values, exact, samples};
  for (const std::vector<double>* part : {&tp, &fp, &fn}) v.insert(v.end(), part->begin(), part->end());
  return v;
}

TaskFigures TaskFigures::Unpack(const std::vector<double>& v) {
  OT_CHECK(v.size() >= kScalarSums && (v.size() - kScalarSums) % 3 == 0,
           "a packed tally of %zu values is not %zu sums and three per-class lists", v.size(), kScalarSums);
  TaskFigures f;
  f.loss_sum = v[0], f.loss_count = v[1], f.correct = v[2], f.counted = v[3], f.abs_sum = v[4], f.sq_sum = v[5],
  f.values = v[6], f.exact = v[7], f.samples = v[8];
  const size_t k = (v.size() - kScalarSums) / 3;
  const auto at = v.begin() + kScalarSums;
  f.tp.assign(at, at + static_cast<long>(k));
  f.fp.assign(at + static_cast<long>(k), at + static_cast<long>(2 * k));
  f.fn.assign(at + static_cast<long>(2 * k), at + static_cast<long>(3 * k));
  return f;
}

double TaskFigures::Rmse() const { return std::sqrt(Div(sq_sum, values)); }

double TaskFigures::MeanF1() const {
  if (tp.empty()) return 0.0;
  double sum = 0;
  for (size_t k = 0; k < tp.size(); ++k) {
    const double denom = 2 * tp[k] + fp[k] + fn[k];
    sum += denom > 0 ? 2 * tp[k] / denom : 1.0;  // a label never on, never predicted: all right
  }
  return sum / static_cast<double>(tp.size());
}

double TaskFigures::MeanIoU() const {
  double sum = 0;
  int64_t present = 0;
  for (size_t k = 0; k < tp.size(); ++k) {
    const double denom = tp[k] + fp[k] + fn[k];
    if (denom <= 0) continue;  // a class neither in the targets nor predicted
    sum += tp[k] / denom;
    present++;
  }
  return present ? sum / static_cast<double>(present) : 0.0;
}

TaskFigures EmptyFigures(const TaskSpec& spec) {
  TaskFigures f;
  if (spec.kind == TaskKind::kDense) {
    f.tp.assign(static_cast<size_t>(spec.classes), 0);
    f.fp = f.fn = f.tp;
  }
  return f;
}

std::string TaskName(TaskKind kind) {
  switch (kind) {
    case TaskKind::kClasses: return "classification";
    case TaskKind::kTokens: return "per-token classification (language model)";
    case TaskKind::kDense: return "per-pixel classification (segmentation)";
    case TaskKind::kRegression: return "regression";
    case TaskKind::kMultiLabel: return "multi-label classification";
    case TaskKind::kModelLoss: return "the model's own loss";
  }
  return "?";
}

TaskSpec TaskFor(LossKind loss, const Model& model, const ValueInfo& scores, const ImageDataset& data,
                 int64_t ignore_index) {
  TaskSpec spec;
  spec.ignore_index = ignore_index;
  if (loss == LossKind::kModel) {
    spec.kind = TaskKind::kModelLoss;
  } else if (loss == LossKind::kBceWithLogits) {
    spec.kind = TaskKind::kMultiLabel;
  } else if (!IsClassIndexLoss(loss)) {
    spec.kind = TaskKind::kRegression;
  } else if (data.label_dims.empty()) {
    spec.kind = TaskKind::kClasses;
  } else {
    // Labels [N, T] against [N, T, V] made by a language model: classes last; anything else
    // ([N, C, H, W] against [N, H, W], a Conv1d's [N, C, L] against [N, L]): axis 1.
    const bool last = data.label_dims.size() == 1 && scores.has_shape && scores.dims.size() == 3 &&
                      ScoresHaveClassesLast(model, scores);
    spec.kind = last ? TaskKind::kTokens : TaskKind::kDense;
  }
  if (scores.has_shape && scores.dims.size() >= 2) {
    const size_t axis = spec.kind == TaskKind::kTokens ? scores.dims.size() - 1 : 1;
    if (scores.dims[axis].IsStatic()) spec.classes = scores.dims[axis].value;
  }
  if (spec.classes == 0) spec.classes = data.classes;
  return spec;
}

void ScoreBatch(const TaskSpec& spec, const HostTensor& scores, const HostTensor& targets, bool with_loss,
                TaskFigures* figures) {
  switch (spec.kind) {
    case TaskKind::kModelLoss: return;
    case TaskKind::kRegression:
    case TaskKind::kMultiLabel: return ScoreFloats(spec, scores, targets, figures);
    default: return ScoreClasses(spec, scores, targets, with_loss, figures);
  }
}

TaskFigures EvaluateSplit(const TaskSpec& spec, const ForwardFn& forward, const ImageDataset& data, int64_t batch,
                          Device device, bool pad_last) {
  TaskFigures f = EmptyFigures(spec);
  for (int64_t start = 0; start < data.count; start += batch) {
    const int64_t real = std::min(batch, data.count - start);
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < real; ++i) idx.push_back(start + i);
    const HostTensor targets = data.Labels(idx);
    while (pad_last && static_cast<int64_t>(idx.size()) < batch) idx.push_back(idx.back());
    std::map<std::string, Tensor> extra;  // the model's further inputs
    for (auto& [name, t] : data.ExtraInputs(idx)) extra.emplace(name, Tensor::FromHost(t, device));
    HostTensor out = forward(Tensor::FromHost(data.Images(idx), device), extra).ToHost();
    if (real < static_cast<int64_t>(idx.size()) && !out.dims.empty()) {  // padding rows: keep the real ones
      out.dims[0] = real;
      out.bytes.resize(static_cast<size_t>(out.NumElements()) * DTypeSize(out.dtype));
    }
    ScoreBatch(spec, out, targets, true, &f);
  }
  return f;
}

void FillTrainingFigures(const TaskSpec& spec, const TaskFigures& f, EpochSummary* s) {
  switch (spec.kind) {
    case TaskKind::kClasses: s->accuracy = f.Accuracy(); break;
    case TaskKind::kTokens:
      s->accuracy = f.Accuracy();
      s->perplexity = std::exp(s->loss);
      break;
    case TaskKind::kDense:
      s->accuracy = f.Accuracy();
      s->miou = f.MeanIoU();
      break;
    case TaskKind::kRegression: s->mae = f.Mae(), s->rmse = f.Rmse(); break;
    case TaskKind::kMultiLabel: s->exact_match = f.ExactMatch(), s->f1 = f.MeanF1(); break;
    case TaskKind::kModelLoss: break;
  }
}

void FillTestFigures(const TaskSpec& spec, const TaskFigures& f, EpochSummary* s) {
  switch (spec.kind) {
    case TaskKind::kClasses: s->test_accuracy = f.Accuracy(); break;
    case TaskKind::kTokens:
      s->test_loss = f.Loss();
      s->test_accuracy = f.Accuracy();
      break;
    case TaskKind::kDense:
      s->test_loss = f.Loss();
      s->test_accuracy = f.Accuracy();
      s->test_miou = f.MeanIoU();
      break;
    case TaskKind::kRegression: s->test_mae = f.Mae(), s->test_rmse = f.Rmse(); break;
    case TaskKind::kMultiLabel: s->test_exact_match = f.ExactMatch(), s->test_f1 = f.MeanF1(); break;
    case TaskKind::kModelLoss: break;
  }
}

std::string EvalLine(const TaskSpec& spec, const TaskFigures& f, const std::string& what) {
  const long long counted = static_cast<long long>(f.counted), correct = static_cast<long long>(f.correct);
  switch (spec.kind) {
    case TaskKind::kClasses:
      return StrFormat("%s accuracy: %.2f%% (%lld of %lld)", what.c_str(), 100.0 * f.Accuracy(), correct, counted);
    case TaskKind::kTokens:
      return StrFormat("%s loss: %.4f, perplexity %.3f, token accuracy %.2f%% (%lld of %lld)", what.c_str(), f.Loss(),
                       std::exp(f.Loss()), 100.0 * f.Accuracy(), correct, counted);
    case TaskKind::kDense:
      return StrFormat("%s loss: %.4f, pixel accuracy %.2f%% (%lld of %lld), mean IoU %.4f", what.c_str(), f.Loss(),
                       100.0 * f.Accuracy(), correct, counted, f.MeanIoU());
    case TaskKind::kRegression:
      return StrFormat("%s MAE: %.4g, RMSE: %.4g (%lld values)", what.c_str(), f.Mae(), f.Rmse(),
                       static_cast<long long>(f.values));
    case TaskKind::kMultiLabel:
      return StrFormat("%s exact match: %.2f%% (%lld of %lld), mean F1 %.4f", what.c_str(), 100.0 * f.ExactMatch(),
                       static_cast<long long>(f.exact), static_cast<long long>(f.samples), f.MeanF1());
    case TaskKind::kModelLoss: return what + ": the model computes its own loss; no task figure to report";
  }
  return what;
}

}  // namespace ot
