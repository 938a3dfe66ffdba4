// The training loop, assembled from its parts: the task (task.h: what the data feeds, what
// is scored), data parallelism (data_parallel.h), the step with gradient accumulation
// (step_accumulator.h), checkpoints and resume (checkpointer.h), evaluation and the
// observers the launcher's worker installs (step_observer.h).
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <thread>

#include <unistd.h>

#include "graph/error.h"
#include "runtime/executor/executor.h"
#include "train/loader/batch_loader.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpointer.h"
#include "train/data/data_for_model.h"
#include "train/parallel/data_parallel.h"
#include "train/checkpoint/interrupt.h"
#include "train/recipe/model_ema.h"
#include "train/loader/model_input_check.h"
#include "train/progress.h"
#include "train/loader/sampler.h"
#include "train/step_accumulator.h"
#include "train/task.h"
#include "train/training_session.h"

namespace ot {

namespace {

// The train and test splits of --data, checked against the model: the first input gets the
// data's samples, every further input an array of its name, the labels fit the scores.
struct Splits {
  ImageDataset train, test;
};

Splits LoadSplits(const Model& forward, const TrainerOptions& o) {
  DataSourceOptions source = DataSourceForModel(forward, o.data, o.seed, o.data_source);
  source.float_targets = !IsClassIndexLoss(o.loss) && o.loss != LossKind::kModel;
  if (source.data_workers <= 0) {  // a quarter of the thread budget, 1 to 8
    const int total = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
    source.data_workers = std::min(8, std::max(1, total / 4));
  }
  Splits s{LoadImageDataset(o.data, "train", source), LoadImageDataset(o.data, "test", source)};
  CheckDataFitsInput(forward.graph.inputs[0], s.train);
  for (const ImageDataset* d : {&s.train, &s.test}) CheckEveryInputFed(forward, *d, o.data);
  // Targets [N] for a model output [N, 1] (a regressor's one value) are [N, 1].
  const ValueInfo& out0 = forward.graph.outputs.at(0);
  for (ImageDataset* d : {&s.train, &s.test})
    if (!d->float_labels.empty() && d->label_dims.empty() && out0.has_shape && out0.dims.size() == 2 &&
        out0.dims[1].IsStatic() && out0.dims[1].value == 1)
      d->label_dims = {1};
  CheckLabelsFitOutput(out0, s.train);
  return s;
}

TrainingConfig SessionConfig(const TrainerOptions& o, Device device, CrossReplicaSum* replica_sum, bool sync_bn) {
  TrainingConfig config;
  config.executor = o.executor;  // --conv-algo and the environment's knobs, from the entry point
  config.sync_batch_norm = sync_bn;
  if (sync_bn) config.executor.cross_replica = replica_sum;
  config.autodiff.freeze = o.freeze;
  config.autodiff.train_only = o.train_only;
  config.autodiff.label_smoothing = o.label_smoothing;
  config.autodiff.loss = o.loss;
  config.autodiff.ignore_index = o.ignore_index;
  config.autodiff.smooth_l1_beta = o.smooth_l1_beta;
  config.autodiff.mixed_targets = o.mixup_alpha > 0 || o.cutmix_alpha > 0;
  config.optimizer = o.optimizer;
  config.optimizer.base_lr = static_cast<float>(o.schedule.base_lr);  // absolute --param-group rates
  config.accumulate = o.accumulate;
  config.executor.device = device;
  config.executor.cuda_graphs = o.cuda_graphs;
  config.executor.num_threads = o.threads;
  config.executor.seed = o.seed;
  config.amp = o.amp;
  config.loss_scale = o.loss_scale;
  return config;
}

// The scores the loss reads: the output it was attached to.
const ValueInfo& ScoresOf(const Model& forward, const TrainingGraph& tg) {
  for (const auto& v : forward.graph.outputs)
    if (v.name == tg.loss_input) return v;
  return forward.graph.outputs.at(0);
}

enum class EpochEnd { kDone, kStopAfter, kInterrupted };

class Trainer {
 public:
  Trainer(Model forward, const TrainerOptions& o);
  TrainResult Run();

 private:
  void Say(const std::string& line) {
    if (dp_.lead()) progress_->Message(line);
  }
  bool ResumeIfAsked();  // false: nothing left to train
  EpochEnd RunEpoch(int64_t epoch);
  BatchLoaderOptions LoaderOptions(int64_t epoch) const;
  void FinishEpoch(int64_t epoch, int64_t updates, double lr, const TaskFigures& mine, const TaskFigures& prior,
                   std::chrono::steady_clock::time_point start, bool stop);
  TaskFigures JobFigures(const TaskFigures& mine, const TaskFigures& prior, double* session_samples = nullptr);
  std::string SaveSnapshot(int64_t epoch, const SamplerState& next, const TaskFigures& mine, const TaskFigures& prior);
  void Evaluate(EpochSummary* summary);
  void ReportInterrupt(int64_t epoch, int64_t step, const std::string& saved);
  int64_t EvalBatch() const;

  Model forward_;
  const TrainerOptions& o_;
  Splits data_;
  DataParallel dp_;
  Device device_;
  std::unique_ptr<TrainingSession> session_;
  TaskSpec spec_;
  std::unique_ptr<ModelEma> ema_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<ProgressReporter> progress_;
  std::unique_ptr<DistributedSampler> sampler_;
  std::unique_ptr<BatchLoader> next_loader_;  // made as the epoch before next_loader_epoch_ starts
  int64_t next_loader_epoch_ = -1;
  std::unique_ptr<StepAccumulator> steps_;
  std::string ema_line_;       // --model-ema: both test accuracies, after the epoch line
  int64_t skipped_before_epoch_ = 0;  // --amp fp16: the steps skipped before this epoch
  TaskFigures resumed_tally_;  // the resumed epoch's figures before the snapshot (whole job, rank 0)
  int64_t full_steps_ = 0, epoch_updates_ = 0;
  TrainResult result_;
};

Trainer::Trainer(Model forward, const TrainerOptions& o)
    : forward_(std::move(forward)), o_(o), data_(LoadSplits(forward_, o)),
      dp_(DataParallelOptions{o.backend, std::chrono::milliseconds(static_cast<int64_t>(o.comm_timeout_seconds * 1000)),
                              o.bucket_cap_mb, o.bind_addr, o.launch}),
      device_(o.device) {
  // One GPU per rank, like DDP: rank with local rank i runs on cuda:((K + i) mod count).
  if (device_.type == DeviceType::kCUDA && dp_.world() > 1) {
    const int count = BackendFor(DeviceType::kCUDA).DeviceCount();
    if (count > 0) device_.index = (device_.index + std::max(dp_.local_rank(), 0)) % count;
  }
  const bool sync_bn = o.sync_bn && dp_.world() > 1;
  OT_CHECK(!sync_bn || device_.type == DeviceType::kCPU,
           "--sync-bn runs on CPU ranks only for now (its %s kernels sum the statistics over ranks through host "
           "memory, which the NCCL communicator does not take); train with --device cpu or leave out --sync-bn",
           device_.ToString().c_str());
  OT_CHECK(o.accumulate >= 1, "--accumulate must be at least 1");
  session_ = std::make_unique<TrainingSession>(forward_, SessionConfig(o, device_, dp_.replica_sum(), sync_bn));
  spec_ = TaskFor(session_->graph().loss_kind, forward_, ScoresOf(forward_, session_->graph()), data_.train,
                  o.ignore_index);
  // The session holds the weights now; the forward model serves only its structure from here
  // on (fingerprints, input and output names), so its copy of the initial weights goes.
  session_->ReleaseStateBytes(&forward_);
  if (o.model_ema && dp_.lead())  // the weights are the same on every rank: rank 0 averages, evaluates, saves
    ema_ = std::make_unique<ModelEma>(session_->InferenceModel(), AdjustedEmaDecay(o.model_ema_decay, o.batch, dp_.world(),
                                                                                    o.model_ema_steps, o.epochs));
  std::string fingerprint = ModelFingerprint(forward_);
  for (const auto& [k, v] : Checkpointer::RunSettings(o)) fingerprint += ";" + k + "=" + v;
  dp_.Connect(*session_, device_, fingerprint);
  checkpointer_ = std::make_unique<Checkpointer>(o, forward_, dp_.rank(), dp_.lead(), device_.type == DeviceType::kCPU);
  // Under onnx-train's launcher every line already starts with "[rank R] ": no second tag.
  const std::string tag = o.output_prefixed ? ""
                          : device_.type == DeviceType::kCPU ? "cpu" + std::to_string(dp_.rank())
                                                             : "cuda" + std::to_string(device_.index);
  progress_ = std::make_unique<ProgressReporter>(tag, dp_.lead() ? o.metrics_path : "", o.quiet || !dp_.lead(),
                                                 o.output_is_terminal);
  progress_->SetWorldSize(dp_.world());
  MixOptions mix;
  mix.mixup_alpha = o.mixup_alpha;
  mix.cutmix_alpha = o.cutmix_alpha;
  mix.seed = o.seed;
  steps_ = std::make_unique<StepAccumulator>(*session_, dp_, o.accumulate, mix, spec_, device_);
  SamplerOptions so;
  so.dataset_size = data_.train.count;
  so.batch_size = o.batch;
  so.shuffle = o.shuffle;
  so.seed = o.seed;
  so.rank = dp_.rank();
  so.world_size = dp_.world();
  sampler_ = std::make_unique<DistributedSampler>(so);
  // Batches (micro-batches with --accumulate) of an epoch; with accumulation, or a model of
  // one batch size, only full ones: each optimizer step averages `accumulate` equal ones.
  full_steps_ = o.fixed_batch > 0 || o.accumulate > 1 ? sampler_->FullBatchesPerEpoch() : sampler_->BatchesPerEpoch();
  OT_CHECK(full_steps_ % o.accumulate == 0,
           "--accumulate %lld does not divide an epoch's %lld full batches of %lld%s; choose a divisor of %lld (or "
           "another --batch)",
           (long long)o.accumulate, (long long)full_steps_, (long long)o.batch, dp_.world() > 1 ? " per rank" : "",
           (long long)full_steps_);
  epoch_updates_ = full_steps_ / o.accumulate;
}

// --resume: continues from the state; false when the run is already complete.
bool Trainer::ResumeIfAsked() {
  ResumePoint point;
  std::string note;
  if (!checkpointer_->Resume(*session_, ema_.get(), &point, &note)) {
    if (!note.empty()) Say(note);
    return true;
  }
  sampler_->Restore(point.sampler);
  resumed_tally_ = point.tally;
  if (point.sampler.epoch >= o_.epochs) {  // nothing left: say so, and report no test figures
    const std::string model_path = point.path.substr(0, point.path.rfind(".state")) + ".onnx";
    Say(StrFormat("already complete (epoch %lld of %d): %s; nothing to train (raise --epochs to train further)",
                  (long long)point.sampler.epoch, o_.epochs,
                  ::access(model_path.c_str(), R_OK) == 0 ? ("the trained model is " + model_path).c_str()
                                                          : ("the state is " + point.path).c_str()));
    result_.already_complete = true;
    result_.epochs_done = static_cast<int>(point.sampler.epoch);
    return false;
  }
  Say(StrFormat("resumed from %s: epoch %lld, %lld steps done", point.path.c_str(), (long long)point.sampler.epoch,
                (long long)session_->steps_done()));
  return true;
}

TrainResult Trainer::Run() {
  for (const std::string& note : data_.train.notes) Say(note);
  for (const std::string& note : data_.test.notes)
    if (std::find(data_.train.notes.begin(), data_.train.notes.end(), note) == data_.train.notes.end()) Say(note);
  if (!o_.headline.empty()) Say(o_.headline);
  if (o_.sync_bn && dp_.world() == 1)
    Say("note: --sync-bn has no effect with one rank (the batch statistics are already the whole batch's)");
  if (o_.sync_bn && dp_.world() > 1 && session_->sync_batch_norm_nodes() == 0)
    Say("warning: --sync-bn: the model has no BatchNormalization in training mode; nothing to synchronise");
  result_.world_size = dp_.world();
  if (!ResumeIfAsked()) {
    result_.global_step = session_->steps_done();
    return result_;
  }
  dp_.BroadcastState(*session_);
  if (dp_.connected()) Say(dp_.Describe(o_.batch));
  if (o_.eval_every > o_.epochs)
    Say(StrFormat("warning: --eval-every %d is more than --epochs %d; test figures only at the end", o_.eval_every,
                  o_.epochs));
  if (o_.save_every > o_.epochs && o_.save_checkpoints)
    Say(StrFormat("warning: --save-every %d is more than --epochs %d; a checkpoint only at the end", o_.save_every,
                  o_.epochs));
  if (o_.max_steps_per_epoch > epoch_updates_)
    Say(StrFormat("warning: --max-steps %lld is more than an epoch's %lld steps (%lld samples, batch %lld%s); each "
                  "epoch runs %lld",
                  (long long)o_.max_steps_per_epoch, (long long)epoch_updates_, (long long)data_.train.count,
                  (long long)(o_.batch * dp_.world() * o_.accumulate), dp_.world() > 1 ? " global" : "",
                  (long long)epoch_updates_));
  for (int64_t epoch = sampler_->State().epoch; epoch < o_.epochs; ++epoch) {
    const EpochEnd end = RunEpoch(epoch);
    if (end != EpochEnd::kDone) return result_;
    dp_.Barrier();
  }
  result_.global_step = session_->steps_done();
  dp_.Barrier();  // peers close their connections together
  return result_;
}

// How the batches of `epoch` are made: augmentation, queue depth, and where (the step's
// threads or a loader thread; MakeBatchesOnCaller).
BatchLoaderOptions Trainer::LoaderOptions(int64_t epoch) const {
  BatchLoaderOptions lo;
  lo.augment.random_crop = lo.augment.horizontal_flip = o_.augment;
  lo.augment.seed = o_.seed;
  lo.augment.random_erase = o_.random_erase;
  lo.end_epoch = epoch + 1;
  if (data_.train.ImageBytes() > 0)  // float images; other arrays keep the default, their size unknown here
    lo.queue_depth = QueueDepthFor(o_.batch * data_.train.ImageBytes() * int64_t{4});
  if (o_.device.type == DeviceType::kCPU) {
    // The cores this rank has: the host's, shared among its local ranks.
    const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                      std::max(1, o_.launch.local_size));
    const int threads = o_.threads > 0 ? o_.threads : cores;
    // A batch's feeds: float32 images and the labels (int64 class indices or float32 values).
    const int64_t label_bytes = data_.train.float_labels.empty() ? 8 : 4;
    int64_t label_elements = 1;
    for (int64_t d : data_.train.label_dims) label_elements *= d;
    const int64_t feed_bytes = o_.batch * (data_.train.ImageBytes() * 4 + label_elements * label_bytes);
    const int step_threads = session_->StepThreadsFor(static_cast<size_t>(std::max<int64_t>(feed_bytes, 0)));
    if (MakeBatchesOnCaller(data_.train, threads, cores, step_threads)) lo.on_caller_threads = threads;
  }
  return lo;
}

EpochEnd Trainer::RunEpoch(int64_t epoch) {
  const int64_t first = epoch == sampler_->State().epoch ? sampler_->State().position : 0;
  const int64_t accumulate = o_.accumulate;
  // In batches (micro-batches); the epoch's optimizer steps are last / accumulate.
  const int64_t last =
      accumulate * (o_.max_steps_per_epoch > 0 ? std::min(epoch_updates_, o_.max_steps_per_epoch) : epoch_updates_);
  const int64_t updates = last / accumulate;
  // The rate of each step (a per-step schedule counts the optimizer steps of the run).
  auto lr_at = [&](int64_t step) {
    return (o_.schedule.per_step ? o_.schedule.AtStep(step, updates) : o_.schedule.At(static_cast<int>(epoch))) *
           (o_.lr_scale_world ? dp_.world() : 1);
  };
  double lr = lr_at(session_->steps_done());
  skipped_before_epoch_ = session_->loss_scaler().skipped_steps();
  progress_->StartEpoch(static_cast<int>(epoch), updates, lr);
  const auto start = std::chrono::steady_clock::now();
  sampler_->Restore(SamplerState{epoch, first});
  const BatchLoaderOptions lo = LoaderOptions(epoch);
  // The loader the previous epoch started for this one, or a new one.
  std::unique_ptr<BatchLoader> loader = std::move(next_loader_);
  if (!loader || next_loader_epoch_ != epoch || first != 0)
    loader = std::make_unique<BatchLoader>(data_.train, *sampler_, lo);
  // With a loader thread, the next epoch's starts now: its shuffle (0.85 ms for 60,000
  // samples) and first batches are made on the idle core while this epoch runs, and its first
  // step finds its batch made (SimpleNN b32: each epoch's first step took 1 ms, 0.5 us a step).
  if (lo.on_caller_threads == 0 && epoch + 1 < o_.epochs) {
    DistributedSampler next = *sampler_;
    next.Restore(SamplerState{epoch + 1, 0});
    next_loader_ = std::make_unique<BatchLoader>(data_.train, std::move(next), LoaderOptions(epoch + 1));
    next_loader_epoch_ = epoch + 1;
  }
  // Batches made on the step's threads: the rows of the next one are asked for between the
  // step's kernels, a few at a time, and arrive while the step computes.
  std::function<void()> prefetch;
  if (lo.on_caller_threads > 0) prefetch = [&loader] { loader->PrefetchUpcoming(); };
  TaskFigures mine = EmptyFigures(spec_), prior = EmptyFigures(spec_);  // this rank's; the job's before a resume
  if (epoch == sampler_->State().epoch && resumed_tally_.loss_count > 0) prior.Add(resumed_tally_);
  resumed_tally_ = {};
  Batch batch;
  bool stop = false;
  for (int64_t s = first; s < last && loader->Next(&batch); ++s) {
    if ((s + 1) % accumulate == 0) progress_->SetLr(lr = lr_at(session_->steps_done()));
    const StepOutcome step = steps_->Feed(batch, epoch, s, lr, &mine, prefetch);
    if (!step.stepped) continue;
    result_.allreduce_wait_seconds += dp_.last_wait_seconds();
    result_.step_losses.push_back(step.loss);
    progress_->Step(s / accumulate, session_->steps_done(), step.loss, mine.Loss(), step.targets, step.json);
    // torchvision updates its EMA after the optimizer steps i % model_ema_steps == 0 of each epoch.
    if (ema_ && (s / accumulate) % o_.model_ema_steps == 0) {
      ema_->Update(session_->InferenceModel());
      if (epoch < o_.model_ema_warmup_epochs) ema_->ResetCount();
    }
    std::string snapshot;
    if (o_.save_checkpoints && o_.snapshot_every > 0 && session_->steps_done() % o_.snapshot_every == 0 &&
        batch.next.position < full_steps_)
      snapshot = SaveSnapshot(epoch, batch.next, mine, prior);
    for (const auto& observer : o_.observers) observer->AfterStep(session_->steps_done(), dp_.rank());
    stop = dp_.AnyStop(InterruptSignal() != 0);
    if (stop && s + 1 < last) {  // mid-epoch: a recovery snapshot where the next step would start
      if (o_.save_checkpoints && snapshot.empty()) snapshot = SaveSnapshot(epoch, batch.next, mine, prior);
      ReportInterrupt(epoch, (s + 1) / accumulate, o_.save_checkpoints ? snapshot : "");
      return EpochEnd::kInterrupted;
    }
    if (stop) break;  // the epoch's last step: finish the epoch (its checkpoint) below
  }
  sampler_->Restore(SamplerState{epoch + 1, 0});
  FinishEpoch(epoch, updates, lr, mine, prior, start, stop);
  if (stop && epoch + 1 < o_.epochs) {
    ReportInterrupt(epoch + 1, 0, o_.save_checkpoints ? CheckpointStem(o_.checkpoint_dir, epoch + 1) + ".state" : "");
    return EpochEnd::kStopAfter;
  }
  return EpochEnd::kDone;
}

// The job's figures of the epoch so far: this rank's plus a resumed snapshot's (`prior`,
// rank 0 only), summed over the ranks; session_samples: the samples of this session alone.
// Every rank calls it.
TaskFigures Trainer::JobFigures(const TaskFigures& mine, const TaskFigures& prior, double* session_samples) {
  TaskFigures job = mine;
  job.Add(prior);
  std::vector<double> packed = job.Pack();
  packed.push_back(mine.samples);
  dp_.Sum(&packed);
  if (session_samples) *session_samples = packed.back();
  packed.pop_back();
  return TaskFigures::Unpack(packed);
}

// A recovery snapshot with the job's figures of the epoch so far (every rank calls it; rank
// 0 writes). Returns its path.
std::string Trainer::SaveSnapshot(int64_t epoch, const SamplerState& next, const TaskFigures& mine,
                                  const TaskFigures& prior) {
  progress_->FlushMetrics();  // the steps this state covers are on disk before it is
  const TaskFigures job = JobFigures(mine, prior);
  const std::vector<std::string> choices = dp_.GatherText(session_->SaveAlgorithmChoices());
  if (dp_.lead())
    checkpointer_->SaveSnapshot(*session_, epoch, next, job, ema_.get(), choices);
  return SnapshotPath(o_.checkpoint_dir, session_->steps_done());
}

// The epoch line (the whole job's figures, a resumed epoch's included; img/s counts this
// session's samples only), the test figures when due, and the checkpoint.
void Trainer::FinishEpoch(int64_t epoch, int64_t updates, double lr, const TaskFigures& mine,
                          const TaskFigures& prior, std::chrono::steady_clock::time_point start, bool stop) {
  double session_samples = 0;
  const TaskFigures job = JobFigures(mine, prior, &session_samples);
  EpochSummary summary;
  summary.epoch = static_cast<int>(epoch);
  summary.batch = o_.batch;
  summary.world_size = dp_.world();
  summary.steps = updates;
  summary.lr = lr;
  summary.loss = job.Loss();
  summary.accuracy = -1;
  FillTrainingFigures(spec_, job, &summary);
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  summary.images_per_second = summary.seconds > 0 ? session_samples / summary.seconds : 0;
  const bool final_epoch = epoch + 1 == o_.epochs;
  if (dp_.lead() && (final_epoch || (!stop && o_.eval_every > 0 && (epoch + 1) % o_.eval_every == 0)))
    Evaluate(&summary);
  if (dp_.lead()) progress_->EndEpoch(summary);
  const LossScaler& scaler = session_->loss_scaler();
  if (scaler.enabled() && scaler.skipped_steps() > skipped_before_epoch_)
    Say(StrFormat("epoch %lld: %lld of %lld steps skipped under --amp fp16 (inf or NaN gradients; %lld in the run), "
                  "loss scale now %g",
                  (long long)epoch + 1, (long long)(scaler.skipped_steps() - skipped_before_epoch_),
                  (long long)updates, (long long)scaler.skipped_steps(), static_cast<double>(scaler.scale())));
  skipped_before_epoch_ = scaler.skipped_steps();
  if (!ema_line_.empty()) Say(ema_line_), ema_line_.clear();
  const bool interrupted = stop && !final_epoch;
  if (o_.save_checkpoints && (final_epoch || interrupted || (o_.save_every > 0 && (epoch + 1) % o_.save_every == 0))) {
    const std::vector<std::string> choices = dp_.GatherText(session_->SaveAlgorithmChoices());  // every rank
    if (dp_.lead()) {
      const std::string stem = checkpointer_->SaveEpoch(*session_, epoch + 1, sampler_->State(), ema_.get(),
                                                        data_.train.class_names, choices);
      result_.last_checkpoint = stem;
      Say(progress_->tag() + "saved checkpoint " + stem + ".onnx and .state");
    }
  }
  result_.epochs_run++;
  result_.epochs_done = static_cast<int>(epoch + 1);
  result_.last_epoch_loss = summary.loss;
}

int64_t Trainer::EvalBatch() const {
  if (o_.fixed_batch > 0) return o_.fixed_batch;
  const bool dense = spec_.kind == TaskKind::kTokens || spec_.kind == TaskKind::kDense;  // big scores per sample
  return dense ? o_.batch : std::max<int64_t>(o_.batch, 256);
}

// The test split's figures of the model (and, with --model-ema, of the averaged weights).
void Trainer::Evaluate(EpochSummary* summary) {
  if (spec_.kind == TaskKind::kModelLoss) return;
  const TaskFigures test = EvaluateSplit(
      spec_, [&](const Tensor& x, const std::map<std::string, Tensor>& extra) { return session_->Evaluate(x, extra); },
      data_.test, EvalBatch(), device_, o_.fixed_batch > 0);
  FillTestFigures(spec_, test, summary);
  result_.test_accuracy = summary->test_accuracy;
  result_.test_loss = summary->test_loss;
  result_.test_mae = summary->test_mae, result_.test_rmse = summary->test_rmse;
  result_.test_exact_match = summary->test_exact_match, result_.test_f1 = summary->test_f1;
  result_.test_miou = summary->test_miou;
  if (!ema_ || spec_.kind != TaskKind::kClasses) return;
  ExecutorOptions eo = o_.executor;
  eo.device = device_;
  eo.num_threads = o_.threads;
  Executor averaged(ema_->AveragedModel(session_->InferenceModel()), eo);
  const std::string in = forward_.graph.inputs[0].name;
  const TaskFigures ema = EvaluateSplit(
      spec_,
      [&](const Tensor& x, const std::map<std::string, Tensor>& extra) {
        std::map<std::string, Tensor> feeds = extra;
        feeds.emplace(in, x);
        return averaged.Run(feeds)[0];
      },
      data_.test, EvalBatch(), device_, o_.fixed_batch > 0);
  result_.ema_test_accuracy = ema.Accuracy();
  ema_line_ = StrFormat("epoch %lld: test accuracy %.2f%% (model), %.2f%% (EMA of the weights, decay %.6g every %lld "
                        "steps, %lld updates)",
                        (long long)summary->epoch + 1, 100 * test.Accuracy(), 100 * ema.Accuracy(), ema_->decay(),
                        (long long)o_.model_ema_steps, (long long)ema_->updates());
}

// An interrupted run says where it stopped, what it saved and how to go on.
void Trainer::ReportInterrupt(int64_t epoch, int64_t step, const std::string& saved) {
  progress_->FlushMetrics();
  result_.interrupted = true;
  result_.global_step = session_->steps_done();
  dp_.Barrier();  // the state is on disk before anyone exits
  if (saved.empty()) {
    Say(StrFormat("interrupted at epoch %lld step %lld; nothing saved (--no-checkpoints)", (long long)epoch,
                  (long long)step));
    return;
  }
  const std::string cmd = o_.continue_command.empty() ? "onnx-train MODEL.onnx ..." : o_.continue_command;
  Say(StrFormat("interrupted at epoch %lld step %lld; saved %s; continue with: %s --resume %s", (long long)epoch,
                (long long)step, saved.c_str(), cmd.c_str(), saved.c_str()));
}

}  // namespace

TrainResult RunTraining(Model forward, const TrainerOptions& o) {
  InterruptGuard interrupt_guard;  // from here on, Ctrl-C finishes a step and saves
  OT_CHECK(o.epochs >= 1, "--epochs must be at least 1");
  OT_CHECK(o.batch >= 1, "--batch must be at least 1");
  Trainer trainer(std::move(forward), o);
  return trainer.Run();
}

}  // namespace ot
