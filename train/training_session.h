// TrainingSession: a forward model turned into a training graph (autodiff + optimizer)
// and run step by step on one device, with an eval graph that shares its trained state.
// The training loop, checkpoints, benchmarks and the distributed worker all drive it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/passes/amp_pass.h"
#include "graph/autodiff/autodiff.h"
#include "graph/passes/optimizer_pass.h"
#include "runtime/executor/executor.h"
#include "train/amp/loss_scaler.h"

namespace ot {

struct TrainingConfig {
  AutodiffOptions autodiff;
  OptimizerConfig optimizer;
  ExecutorOptions executor;
  // Data parallel with --sync-bn: batch normalizations in training mode use statistics and
  // gradient sums over all replicas (graph/exports/sync_batch_norm.h; executor.cross_replica).
  bool sync_batch_norm = false;
  // > 1: each optimizer step takes this many micro-batches (AppendGradientAccumulation):
  // MicroStep for the first accumulate - 1 of them, then Step.
  int64_t accumulate = 1;
  // BatchNormalization + ReLU pairs run as one forward and one backward kernel, Add + ReLU
  // as one forward kernel (graph/passes/fusion.h), where the device has them (CPU).
  bool fuse_relu = true;
  // --amp bf16: convolutions and matrix products read bfloat16 casts of their operands
  // (graph/passes/amp_pass.h), everything else and the weights stay float32.
  // --amp fp16 also runs on the CPU, its products emulated: float32 kernels on operands the
  // Cast nodes rounded to float16 (EmulateFloat16Products).
  AmpMode amp = AmpMode::kOff;
  // --loss-scale: with --amp fp16 (kDefault: dynamic), the scaling nodes of
  // graph/passes/fp16/loss_scale_pass.h and the session's LossScaler.
  LossScaleOptions loss_scale;
};

// The loss scaling a config gets: dynamic for --amp fp16 unless told otherwise, none
// without it. Throws ot::Error for --loss-scale static or dynamic without --amp fp16.
LossScaleOptions EffectiveLossScale(const TrainingConfig& config);

// The training graph a session runs for `config` (forward, loss, gradients, accumulation,
// optimizer update, synchronised batch norm and the device's fusions), without running it:
// `check --training` lists its ops. micro_updates receives the micro-step state updates
// (accumulate > 1), sync_bn_nodes the batch normalizations made synchronised.
TrainingGraph PlanTrainingGraph(const Model& forward, const TrainingConfig& config,
                                std::vector<std::pair<std::string, std::string>>* micro_updates = nullptr,
                                int* sync_bn_nodes = nullptr);

struct StepResult {
  float loss = 0.f;
  bool skipped = false;  // --amp fp16: an inf or NaN gradient; no update, the scale backed off
  Tensor logits;  // the model's first output for this batch (accuracy)
};

class TrainingSession {
 public:
  // Throws ot::Error naming what the model lacks (a single data input, a trainable
  // initializer, a gradient rule) or ot::UnsupportedError for missing kernels.
  TrainingSession(const Model& forward, const TrainingConfig& config);
  ~TrainingSession();

  const std::string& input_name() const { return input_name_; }
  const ValueInfo& input_info() const { return input_info_; }
  const TrainingGraph& graph() const { return tg_; }

  // One step: forward, loss, backward, optimizer update at learning rate `lr`. The step
  // counter (the optimizers' T) advances by one.
  // `extra` feeds further inputs of the training graph (Mixup/CutMix's second labels and lambda).
  StepResult Step(const Tensor& input, const Tensor& labels, float lr, const RunOptions& options = {},
                  const std::map<std::string, Tensor>& extra = {});
  // With accumulation: forward and backward of one micro-batch, its gradients added to the
  // accumulators; no update, the step counter stays. Needs no gradient communication.
  // `options`: the executor's hooks, as for Step.
  StepResult MicroStep(const Tensor& input, const Tensor& labels, const std::map<std::string, Tensor>& extra = {},
                       const RunOptions& options = {});
  // Forward in evaluation mode (BatchNorm running statistics, no Dropout) with the
  // current weights; returns the logits.
  // `extra` feeds the model's further inputs by name.
  Tensor Evaluate(const Tensor& input, const std::map<std::string, Tensor>& extra = {});
  // The inference model: the forward model in eval mode with the trained initializers.
  Model InferenceModel() const;

  // Every tensor of training state by name: parameters, BatchNorm statistics, optimizer
  // state. Checkpoints and broadcasts walk this list; it is the same order every time.
  std::vector<std::pair<std::string, Tensor*>> StateTensors();
  // Frees the bytes of `model`'s initializers that this session holds as state (the
  // weights it was made from), keeping their names, shapes and types: a caller that keeps
  // the model for its structure drops its copy of the weights.
  void ReleaseStateBytes(Model* model) const;
  int64_t steps_done() const { return steps_done_; }
  // How many batch normalizations are synchronised (TrainingConfig::sync_batch_norm).
  int sync_batch_norm_nodes() const { return sync_batch_norm_nodes_; }
  // Memory plan of the last training step (arena bytes for intermediate values).
  PlanStats LastPlanStats() const { return train_->LastPlanStats(); }
  // CPU: the threads a training step on feeds of `feed_bytes` runs its kernels on
  // (Executor::PlanThreadsFor); 0 off the CPU.
  int StepThreadsFor(size_t feed_bytes) const { return train_->PlanThreadsFor(feed_bytes); }
  // The random stream of the training graph's random ops (Dropout), for checkpoints.
  std::string RngState() const;
  void SetRngState(const std::string& state);
  // What the kernels chose by timing (a CPU convolution's algorithm per problem), as text
  // for the checkpoint state, and its restoration: a resumed run then runs, and rounds, the
  // way the interrupted one did. Load throws ot::Error on text that Save did not write.
  std::string SaveAlgorithmChoices() const;
  void LoadAlgorithmChoices(const std::string& text);
  // With accumulation, the micro-steps' executor draws from its own stream ("" without).
  std::string MicroRngState() const;
  void SetMicroRngState(const std::string& state);
  void set_steps_done(int64_t n) { steps_done_ = n; }
  // --amp fp16's loss scale (disabled without it), and its state for checkpoints: "" when
  // disabled; Load throws ot::Error on text Save did not write.
  const LossScaler& loss_scaler() const { return scaler_; }
  std::string SaveLossScale() const { return scaler_.enabled() ? scaler_.Save() : ""; }
  void LoadLossScale(const std::string& text) { scaler_.Load(text); }

 private:
  void SyncEvalWeights();
  // Copies the state `from` holds in other storage than `to` (none on plain layouts).
  void SyncState(Executor& from, Executor& to);

  TrainingGraph tg_;
  Model eval_model_;
  std::string input_name_;
  ValueInfo input_info_;
  std::string logits_name_;
  std::unique_ptr<Executor> train_;
  std::unique_ptr<Executor> micro_;  // accumulation: the same graph, without the updates
  bool micro_ran_last_ = false;      // micro_ holds the newest state (where not shared)
  std::unique_ptr<Executor> eval_;
  std::vector<std::string> state_names_;
  int64_t steps_done_ = 0;
  LossScaler scaler_;
  int64_t eval_synced_at_ = -1;
  int sync_batch_norm_nodes_ = 0;
};

}  // namespace ot
