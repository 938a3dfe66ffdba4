// Gradient accumulation and the step (see step_accumulator.h).
#include "train/step_accumulator.h"

#include <cmath>

#include "graph/autodiff/autodiff.h"
#include "graph/error.h"
#include "train/progress.h"

namespace ot {

namespace {

// Ends the run for a loss that is not finite: data that holds a NaN or an infinity is named
// (the sample and where), otherwise the learning rate is the likely cause.
[[noreturn]] void NonFiniteLoss(float loss, const Batch& batch, int64_t epoch, int64_t step) {
  const std::vector<std::pair<std::string, const HostTensor*>> inputs = [&] {
    std::vector<std::pair<std::string, const HostTensor*>> v = {{"the input", &batch.images}};
    for (const auto& [name, t] : batch.extra) v.emplace_back("input '" + name + "'", &t);
    v.emplace_back("the targets", &batch.labels);
    return v;
  }();
  for (const auto& [what, t] : inputs) {
    if (t->dtype != DType::kFloat32 || t->dims.empty() || t->dims[0] == 0) continue;
    const int64_t per = t->NumElements() / t->dims[0];
    const float* p = t->Data<float>();
    for (int64_t i = 0; i < t->NumElements(); ++i)
      if (!std::isfinite(p[i]))
        throw Error(StrFormat("the loss became %f at epoch %lld step %lld because %s of sample %lld (element %lld of "
                              "it) is %f; fix or leave out that sample in the data",
                              loss, (long long)epoch, (long long)step, what.c_str(),
                              (long long)batch.samples.at(static_cast<size_t>(i / per)), (long long)(i % per), p[i]));
  }
  throw Error(StrFormat("the loss became %f at epoch %lld step %lld (the batch's data is finite); lower the learning "
                        "rate",
                        loss, (long long)epoch, (long long)step));
}

// The batch's arrays as the step's inputs: on the CPU a view of the loader's buffers (the
// batch outlives the step; the executor reads feeds in place), elsewhere an upload.
Tensor Input(const HostTensor& h, Device device) {
  if (device.type != DeviceType::kCPU) return Tensor::FromHost(h, device);
  return Tensor::View(h.dtype, h.dims, const_cast<uint8_t*>(h.bytes.data()), device);
}

}  // namespace

StepOutcome StepAccumulator::Feed(Batch& batch, int64_t epoch, int64_t s, double lr, TaskFigures* tally,
                                  const std::function<void()>& between_kernels) {
  if (s % accumulate_ == 0) start_ = std::chrono::steady_clock::now();
  std::map<std::string, Tensor> extra;  // the further inputs; Mixup/CutMix: the paired labels and lambda
  for (const auto& [name, t] : batch.extra) extra.emplace(name, Input(t, device_));
  std::string mix_json;
  if (mix_.Enabled()) {
    OT_CHECK(batch.images.dims.size() == 4, "--mixup-alpha and --cutmix-alpha need image batches [n, C, H, W]");
    const MixDraw draw = DrawMix(mix_, batch.images.dims[2], batch.images.dims[3], epoch, batch.index);
    extra[kMixLabelsInput] = Tensor::FromHost(MixBatch(batch.images, batch.labels, draw), device_);
    extra[kMixLambdaInput] = Tensor::FromHost(HostTensor::FromVector<float>({static_cast<float>(draw.lambda)}, {}), device_);
    mix_json = MixDrawJson(draw);
  }
  CheckLabelsFit(session_.graph(), batch.labels.dtype, batch.labels.dims);
  const bool last = (s + 1) % accumulate_ == 0;  // the step's last micro-batch: allreduce and update
  const Tensor x = Input(batch.images, device_), y = Input(batch.labels, device_);
  RunOptions hooks = last ? dp_.Hooks() : RunOptions{};
  if (between_kernels) {
    hooks.before_node = [&between_kernels, reducer = std::move(hooks.before_node)](const Node& node) {
      between_kernels();
      if (reducer) reducer(node);
    };
  }
  const StepResult r = last ? session_.Step(x, y, static_cast<float>(lr), hooks, extra)
                            : session_.MicroStep(x, y, extra, hooks);
  if (last) dp_.FinishStep();
  if (!std::isfinite(r.loss)) NonFiniteLoss(r.loss, batch, epoch, s / accumulate_);
  const int64_t n = batch.labels.NumElements();
  tally->loss_sum += static_cast<double>(r.loss) * static_cast<double>(n);
  tally->loss_count += static_cast<double>(n);
  if (spec_.kind != TaskKind::kModelLoss) ScoreBatch(spec_, r.logits.ToHost(), batch.labels, false, tally);
  else tally->samples += static_cast<double>(batch.labels.dims.empty() ? 1 : batch.labels.dims[0]);
  StepOutcome out;
  if (!last) {
    group_loss_ += r.loss;
    group_n_ += n;
    return out;
  }
  out.stepped = true;
  out.loss = static_cast<float>((group_loss_ + r.loss) / static_cast<double>(accumulate_));
  out.targets = group_n_ + n;
  group_loss_ = 0;
  group_n_ = 0;
  // Step time (forward, backward, update, allreduce waits) and the reducer's overlap counters.
  AppendJsonField(&out.json, "step_ms",
                  1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(), 3, true);
  out.json += mix_json;
  out.json += dp_.StepJson();
  if (session_.loss_scaler().enabled())
    out.json += StrFormat(",\"loss_scale\":%.17g,\"skipped\":%s,\"skipped_steps\":%lld",
                          static_cast<double>(session_.loss_scaler().scale()), r.skipped ? "true" : "false",
                          (long long)session_.loss_scaler().skipped_steps());
  return out;
}

}  // namespace ot
