// TrainingSession.
#include "train/training_session.h"

#include "graph/error.h"
#include "graph/exports/sync_batch_norm.h"
#include "graph/passes/fusion.h"
#include "graph/passes/fp16/fp16_products.h"
#include "graph/passes/fp16/loss_scale_pass.h"

namespace ot {

LossScaleOptions EffectiveLossScale(const TrainingConfig& config) {
  LossScaleOptions o = config.loss_scale;
  using K = LossScaleOptions::Kind;
  if (o.kind == K::kDefault) o.kind = config.amp == AmpMode::kFloat16 ? K::kDynamic : K::kNone;
  OT_CHECK(o.kind == K::kNone || config.amp == AmpMode::kFloat16,
           "--loss-scale %s is for --amp fp16 (bfloat16 and float32 need no loss scaling); leave it out or add --amp "
           "fp16",
           LossScaleName(o).c_str());
  return o;
}

TrainingGraph PlanTrainingGraph(const Model& forward, const TrainingConfig& config,
                                std::vector<std::pair<std::string, std::string>>* micro_updates, int* sync_bn_nodes) {
  TrainingGraph tg = BuildTrainingGraph(forward, config.autodiff);
  OT_CHECK(!tg.labels.empty(), "the model already ends in a loss; training needs logits to attach its own loss to");
  if (config.amp == AmpMode::kFloat16) RoundFloat16BiasGradients(tg);
  if (config.accumulate > 1) {
    auto updates = AppendGradientAccumulation(tg, config.accumulate);
    if (micro_updates) *micro_updates = std::move(updates);
  }
  const bool scaled = EffectiveLossScale(config).kind != LossScaleOptions::Kind::kNone;
  if (scaled) InsertLossScaling(tg);
  const size_t first_update = tg.state_updates.size();
  AppendOptimizer(tg, config.optimizer);
  if (scaled) GateOptimizerUpdates(tg, first_update);
  if (config.sync_batch_norm) {
    const int n = UseSyncBatchNorm(tg.model.graph);
    if (sync_bn_nodes) *sync_bn_nodes = n;
  }
  if (config.fuse_relu && config.executor.device.type == DeviceType::kCPU) {
    FuseBatchNormRelu(tg.model);
    FuseAddRelu(tg.model);
    FuseBatchNormClip(tg.model);
  }
  InsertAmpCasts(tg.model, config.amp);
  if (config.amp == AmpMode::kFloat16) {
    RoundFloat16ProductOutputs(tg.model);
    if (config.executor.device.type == DeviceType::kCPU) EmulateFloat16Products(tg.model);
  }
  if (config.fuse_relu && config.executor.device.type == DeviceType::kCPU) {
    FuseMatMulBias(tg.model);
    SimplifyWeightTransposes(tg.model);
    FuseSliceGradSums(tg.model);
  }
  if (config.amp == AmpMode::kBFloat16 && config.executor.device.type == DeviceType::kCPU) {
    UseBFloat16Attention(tg.model);
    FoldBFloat16CastsIntoActivations(tg.model);
  }
  return tg;
}

TrainingSession::TrainingSession(const Model& forward, const TrainingConfig& config) {
  const Graph& g = forward.graph;
  OT_CHECK(!g.inputs.empty(), "the model has no inputs; training needs a data input");
  OT_CHECK(!g.outputs.empty(), "the model has no outputs");
  input_info_ = g.inputs[0];
  input_name_ = input_info_.name;
  logits_name_ = config.autodiff.logits_output.empty() ? g.outputs[0].name : config.autodiff.logits_output;
  std::vector<std::pair<std::string, std::string>> micro_updates;
  tg_ = PlanTrainingGraph(forward, config, &micro_updates, &sync_batch_norm_nodes_);
  scaler_ = LossScaler(EffectiveLossScale(config));
  ExecutorOptions opts = config.executor;
  opts.state_updates = tg_.state_updates;
  // One copy of the weights: the training executor takes the graph's initializers over
  // (freeing each host copy as it is uploaded), graph() keeps only their shapes, and the
  // evaluation executor shares the training state's storage.
  if (config.accumulate > 1) {
    // The micro-step executor runs the same graph with other state updates, so the
    // optimizer nodes (read by no fetch and no update) never run; it shares the state.
    Model copy = tg_.model;
    train_ = std::make_unique<Executor>(std::move(tg_.model), opts);
    ExecutorOptions micro_opts = config.executor;
    micro_opts.state_updates = micro_updates;
    micro_opts.shared_state = train_.get();
    micro_ = std::make_unique<Executor>(std::move(copy), micro_opts);
  } else {
    train_ = std::make_unique<Executor>(std::move(tg_.model), opts);
  }
  tg_.model = ModelStructure(train_->model());
  eval_model_ = DeriveEvalModel(forward);
  ExecutorOptions eval_opts = config.executor;
  eval_opts.state_updates.clear();
  eval_opts.shared_state = train_.get();
  eval_ = std::make_unique<Executor>(eval_model_, eval_opts);
  ReleaseStateBytes(&eval_model_);  // InferenceModel takes these from the state
  for (const auto& t : tg_.model.graph.initializers)
    if (t.dtype == DType::kFloat32 && train_->FindState(t.name)) state_names_.push_back(t.name);
}

TrainingSession::~TrainingSession() = default;

void TrainingSession::ReleaseStateBytes(Model* model) const {
  for (auto& t : model->graph.initializers)
    if (train_->FindState(t.name)) std::vector<uint8_t>().swap(t.bytes);
}

StepResult TrainingSession::Step(const Tensor& input, const Tensor& labels, float lr, const RunOptions& options,
                                  const std::map<std::string, Tensor>& extra) {
  HostTensor lr_t = HostTensor::FromVector<float>({lr}, {});
  // The optimizers' step counter leaves out the steps --amp fp16 skipped (GradScaler skips
  // optimizer.step(), and with it the optimizer's own count).
  HostTensor step_t = HostTensor::FromVector<int64_t>({steps_done_ - scaler_.skipped_steps() + 1}, {});
  const Device dev = train_->options().device;
  std::map<std::string, Tensor> feeds = {{input_name_, input},
                                         {tg_.labels, labels},
                                         {kLearningRateInput, Tensor::FromHost(lr_t, dev)},
                                         {kStepInput, Tensor::FromHost(step_t, dev)}};
  std::vector<std::string> fetches = {tg_.loss, logits_name_};
  if (scaler_.enabled()) {
    feeds[kLossScaleInput] = Tensor::FromHost(HostTensor::FromVector<float>({scaler_.scale()}, {}), dev);
    fetches.push_back(kGradsFiniteOutput);
  }
  feeds.insert(extra.begin(), extra.end());
  if (micro_ && micro_ran_last_) SyncState(*micro_, *train_);
  micro_ran_last_ = false;
  std::vector<Tensor> out = train_->Run(feeds, fetches, options);
  ++steps_done_;
  StepResult r;
  r.loss = out[0].ToHost().Data<float>()[0];
  r.logits = out[1];
  if (scaler_.enabled()) r.skipped = !scaler_.Update(out[2].ToHost().Data<uint8_t>()[0] != 0);
  return r;
}

StepResult TrainingSession::MicroStep(const Tensor& input, const Tensor& labels,
                                       const std::map<std::string, Tensor>& extra, const RunOptions& options) {
  OT_CHECK(micro_ != nullptr, "MicroStep needs a session made with accumulate > 1");
  if (!micro_ran_last_) SyncState(*train_, *micro_);
  micro_ran_last_ = true;
  const Device dev = train_->options().device;
  std::map<std::string, Tensor> feeds = {
      {input_name_, input},
      {tg_.labels, labels},
      {kLearningRateInput, Tensor::FromHost(HostTensor::FromVector<float>({0.f}, {}), dev)},
      {kStepInput, Tensor::FromHost(HostTensor::FromVector<int64_t>({steps_done_ + 1}, {}), dev)}};
  if (scaler_.enabled())  // the micro-batches' gradients are scaled as the step's last one is
    feeds[kLossScaleInput] = Tensor::FromHost(HostTensor::FromVector<float>({scaler_.scale()}, {}), dev);
  feeds.insert(extra.begin(), extra.end());
  std::vector<Tensor> out = micro_->Run(feeds, {tg_.loss, logits_name_}, options);
  StepResult r;
  r.loss = out[0].ToHost().Data<float>()[0];
  r.logits = out[1];
  return r;
}

void TrainingSession::SyncState(Executor& from, Executor& to) {
  for (const auto& name : state_names_) {
    Tensor* src = from.FindState(name);
    Tensor* dst = to.FindState(name);
    if (src && dst && dst->data<void>() != src->data<void>()) dst->CopyFrom(*src);
  }
}

void TrainingSession::SyncEvalWeights() {
  if (eval_synced_at_ == steps_done_) return;
  for (const auto& t : eval_model_.graph.initializers) {
    Tensor* dst = eval_->FindState(t.name);
    Tensor* src = train_->FindState(t.name);
    if (dst && src && dst->data<void>() != src->data<void>()) dst->CopyFrom(*src);
  }
  eval_synced_at_ = steps_done_;
}

Tensor TrainingSession::Evaluate(const Tensor& input, const std::map<std::string, Tensor>& extra) {
  SyncEvalWeights();
  std::map<std::string, Tensor> feeds = {{input_name_, input}};
  feeds.insert(extra.begin(), extra.end());
  return eval_->Run(feeds)[0];
}

Model TrainingSession::InferenceModel() const {
  Model m = eval_model_;
  for (auto& t : m.graph.initializers)
    if (const Tensor* s = train_->FindState(t.name)) t = s->ToHost(t.name);
  return m;
}

std::string TrainingSession::RngState() const { return train_->RngState(); }
void TrainingSession::SetRngState(const std::string& state) { train_->SetRngState(state); }
// The micro-step and evaluation executors share the training executor's choices.
std::string TrainingSession::SaveAlgorithmChoices() const { return train_->SaveAlgorithmChoices(); }
void TrainingSession::LoadAlgorithmChoices(const std::string& text) { train_->LoadAlgorithmChoices(text); }
std::string TrainingSession::MicroRngState() const { return micro_ ? micro_->RngState() : ""; }
void TrainingSession::SetMicroRngState(const std::string& state) {
  if (micro_) micro_->SetRngState(state);
}

std::vector<std::pair<std::string, Tensor*>> TrainingSession::StateTensors() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (const auto& n : state_names_) out.emplace_back(n, train_->FindState(n));
  return out;
}

}  // namespace ot
