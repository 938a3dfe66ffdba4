// The training loop.
#include "train/trainer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <cmath>
#include <sstream>
#include <thread>

#include "comm/rendezvous.h"
#include "runtime/executor.h"
#include "graph/error.h"
#include "graph/file_util.h"
#include "graph/onnx_io.h"
#include "train/checkpoint.h"
#include "train/data_for_model.h"
#include "train/evaluate.h"
#include "train/gradient_reducer.h"
#include "train/batch_loader.h"
#include "train/image_dataset.h"
#include "train/interrupt.h"
#include "train/mix_batch.h"
#include "train/model_ema.h"
#include "train/model_input_check.h"
#include "train/progress.h"
#include "train/replica_sum.h"
#include "train/sampler.h"
#include "train/training_session.h"

namespace ot {

namespace {

// The kernels' timed choices (TrainingSession::SaveAlgorithmChoices: auto's convolution
// algorithms, runtime/cpu/conv/conv_algorithm.h) beside the checkpoints, a file
// per rank: a resumed run loads them and so runs the algorithms, and rounds the way, the
// interrupted run did. Written when they change; a failure to write only warns (once).
class ConvChoicesFile {
 public:
  ConvChoicesFile(std::string dir, int rank, const TrainingSession& session)
      : path_(dir + "/conv_algorithms.rank" + std::to_string(rank) + ".txt"), session_(session) {}
  // Before the first step of a run resumed from the state file `state_path`: the choices
  // kept beside it, if any.
  static void LoadBeside(const std::string& state_path, int rank, TrainingSession& session) {
    const size_t slash = state_path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : state_path.substr(0, slash);
    const std::string path = dir + "/conv_algorithms.rank" + std::to_string(rank) + ".txt";
    if (::access(path.c_str(), R_OK) != 0) return;
    try {
      session.LoadAlgorithmChoices(ReadFileBytes(path));
    } catch (const Error& e) {
      throw Error(path + ": " + e.what() + " (delete the file to let this run time its convolutions anew)");
    }
  }
  void Update() {
    const std::string text = session_.SaveAlgorithmChoices();
    if (text == written_ || failed_) return;
    try {
      WriteFileAtomic(path_, text);
      written_ = text;
    } catch (const std::exception& e) {
      failed_ = true;
      std::fprintf(stderr, "warning: could not keep the convolution choices in %s (%s); a resumed run may choose "
                   "other algorithms and not be bitwise equal\n", path_.c_str(), e.what());
    }
  }

 private:
  std::string path_, written_;
  const TrainingSession& session_;
  bool failed_ = false;
};

// The settings that decide the data order and the update rule: a resumed run must use
// the same ones to continue exactly.
std::map<std::string, std::string> RunSettings(const TrainerOptions& o) {
  std::map<std::string, std::string> s = {{"batch", std::to_string(o.batch)},
                                          {"seed", std::to_string(o.seed)},
                                          {"shuffle", o.shuffle ? "1" : "0"},
                                          {"augment", o.augment ? "1" : "0"},
                                          {"data", o.data}};
  // Transforms and the held-out share change the batches; recorded only when used, so that
  // checkpoints of runs without them still resume.
  const DataSourceOptions& d = o.data_source;
  const TransformOptions& t = d.transforms;
  if (t.Any()) {
    std::string text = StrFormat("resize=%lld,center_crop=%lld,random_resized_crop=%lld,hflip=%d", (long long)t.resize,
                                 (long long)t.center_crop, (long long)t.random_resized_crop, t.hflip ? 1 : 0);
    for (float m : t.mean) text += StrFormat(",mean=%g", m);
    for (float v : t.stddev) text += StrFormat(",std=%g", v);
    s["transforms"] = text;
  }
  if (d.val_fraction != DataSourceOptions().val_fraction) s["val_fraction"] = StrFormat("%g", d.val_fraction);
  if (o.accumulate > 1) s["accumulate"] = std::to_string(o.accumulate);  // positions count micro-batches
  // Label smoothing and random erasing too (recorded only when used).
  if (o.label_smoothing != 0.f) s["label_smoothing"] = StrFormat("%.9g", o.label_smoothing);
  if (o.random_erase != 0.f) s["random_erase"] = StrFormat("%.9g", o.random_erase);
  if (o.mixup_alpha > 0 || o.cutmix_alpha > 0)
    s["mix"] = StrFormat("mixup_alpha=%.17g,cutmix_alpha=%.17g", o.mixup_alpha, o.cutmix_alpha);
  if (o.data.rfind("tokens:", 0) == 0)  // the windows' length and the files' type
    s["tokens"] = StrFormat("seq_len=%lld,dtype=%s", (long long)d.token_seq_len, DTypeName(d.token_dtype).c_str());
  if (o.model_ema)
    s["model_ema"] = StrFormat("steps=%lld,decay=%.17g,warmup_epochs=%d", (long long)o.model_ema_steps,
                               o.model_ema_decay, o.model_ema_warmup_epochs);
  return s;
}

// The epoch so far, over all ranks: a mid-epoch snapshot keeps it, so that the epoch line
// of a resumed run counts the whole epoch.
struct EpochTally {
  double loss_sum = 0;  // sum of per-sample losses
  int64_t seen = 0, correct = 0;
};

// The training state file; `path` is an epoch checkpoint's .state or a snapshot.
void SaveState(TrainingSession& session, const Model& forward, const TrainerOptions& o, int64_t epochs_done,
               const SamplerState& sampler, const std::string& path, const EpochTally& tally, const ModelEma* ema) {
  TrainingState state;
  state.epochs_done = epochs_done;
  state.global_step = session.steps_done();
  state.scalars = RunSettings(o);
  state.scalars["model_fingerprint"] = ModelFingerprint(forward);
  state.scalars["sampler_epoch"] = std::to_string(sampler.epoch);
  state.scalars["sampler_position"] = std::to_string(sampler.position);
  state.scalars["executor_rng"] = session.RngState();
  if (!session.MicroRngState().empty()) state.scalars["executor_rng_micro"] = session.MicroRngState();
  if (tally.seen > 0) {
    state.scalars["epoch_loss_sum"] = StrFormat("%.17g", tally.loss_sum);
    state.scalars["epoch_seen"] = std::to_string(tally.seen);
    state.scalars["epoch_correct"] = std::to_string(tally.correct);
  }
  for (const auto& [name, tensor] : session.StateTensors()) state.tensors.push_back(tensor->ToHost(name));
  if (ema) {
    state.scalars["ema_updates"] = std::to_string(ema->updates());
    for (const HostTensor& t : ema->tensors()) {
      state.tensors.push_back(t);
      state.tensors.back().name = ModelEma::StateName(t.name);
    }
  }
  WriteTrainingState(state, path);
}

void SaveCheckpoint(TrainingSession& session, const Model& forward, const TrainerOptions& o, int64_t epochs_done,
                    const SamplerState& sampler, const std::string& stem, const ModelEma* ema) {
  const Model inference = session.InferenceModel();
  SaveModel(inference, stem + ".onnx");
  if (ema) SaveModel(ema->AveragedModel(inference), stem + "_ema.onnx");
  SaveState(session, forward, o, epochs_done, sampler, stem + ".state", {}, ema);
}

// Fault injection for the chaos tests: ONNXTRAIN_FAULT_KILL_AT_STEPS="s0,s1,..." makes the
// process SIGKILL itself when global step s_k is reached in restart k (ONNXTRAIN_RESTART_COUNT);
// ONNXTRAIN_FAULT_RANK limits that to one rank; ONNXTRAIN_FAULT_MODE=hang stops the process
// (SIGSTOP) instead, as a hung worker.
void MaybeInjectFault(int64_t global_step, int rank) {
  if (const char* only = std::getenv("ONNXTRAIN_FAULT_RANK"))
    if (std::atoi(only) != rank) return;
  static const std::vector<int64_t> steps = [] {
    std::vector<int64_t> out;
    if (const char* env = std::getenv("ONNXTRAIN_FAULT_KILL_AT_STEPS"))
      for (const char* p = env; *p;) {
        char* end = nullptr;
        out.push_back(std::strtoll(p, &end, 10));
        p = *end == ',' ? end + 1 : end + std::strlen(end);
      }
    return out;
  }();
  if (steps.empty()) return;
  const char* restart = std::getenv("ONNXTRAIN_RESTART_COUNT");
  const size_t k = restart ? static_cast<size_t>(std::atoi(restart)) : 0;
  if (k < steps.size() && steps[k] == global_step) {
    const char* mode = std::getenv("ONNXTRAIN_FAULT_MODE");
    ::raise(mode && std::strcmp(mode, "hang") == 0 ? SIGSTOP : SIGKILL);
  }
}

// Restores the session from a checkpoint; returns where the sampler stood and fills the
// epoch's tally so far (zero at an epoch boundary).
SamplerState Resume(TrainingSession& session, const Model& forward, const TrainerOptions& o, const std::string& path,
                    EpochTally* tally, ModelEma* ema) {
  TrainingState state = ReadTrainingState(path);
  const std::string fp = state.Scalar("model_fingerprint", path);
  OT_CHECK(fp == ModelFingerprint(forward),
           "checkpoint '%s' was made from another model (fingerprint %s, this model %s); resume it with the model it "
           "was trained from",
           path.c_str(), fp.c_str(), ModelFingerprint(forward).c_str());
  const std::map<std::string, std::string> settings = RunSettings(o);
  const std::vector<std::string> optional = {"transforms", "val_fraction", "accumulate", "label_smoothing",
                                             "random_erase", "mix", "model_ema", "tokens"};  // recorded only when used
  for (const auto& [key, value] : settings) {
    OT_CHECK(state.scalars.count(key) || std::find(optional.begin(), optional.end(), key) == optional.end(),
             "checkpoint '%s' was made without the %s setting this run has (%s); resume with the flags the run was "
             "started with",
             path.c_str(), key.c_str(), value.c_str());
    const std::string& saved = state.Scalar(key, path);
    OT_CHECK(saved == value,
             "checkpoint '%s' was made with %s=%s but this run has %s=%s; resume with the same setting to continue "
             "the same run",
             path.c_str(), key.c_str(), saved.c_str(), key.c_str(), value.c_str());
  }
  for (const std::string& key : optional) {
    auto it = state.scalars.find(key);
    OT_CHECK(it == state.scalars.end() || settings.count(key),
             "checkpoint '%s' was made with %s=%s but this run has none; resume with the same flags to continue "
             "the same run",
             path.c_str(), key.c_str(), it->second.c_str());
  }
  for (const auto& [name, tensor] : session.StateTensors()) {
    const HostTensor* saved = state.FindTensor(name);
    OT_CHECK(saved, "checkpoint '%s' has no tensor '%s'", path.c_str(), name.c_str());
    OT_CHECK(saved->dims == tensor->shape() && saved->dtype == tensor->dtype(),
             "checkpoint '%s': tensor '%s' is %s%s, the model wants %s", path.c_str(), name.c_str(),
             DTypeName(saved->dtype).c_str(), ShapeString(saved->dims).c_str(), tensor->Describe().c_str());
    tensor->CopyFrom(Tensor::FromHost(*saved, tensor->device()));
  }
  if (ema) ema->Restore(state.tensors, state.Count("ema_updates", path));
  session.set_steps_done(state.global_step);
  session.SetRngState(state.Scalar("executor_rng", path));
  if (state.scalars.count("executor_rng_micro")) session.SetMicroRngState(state.scalars.at("executor_rng_micro"));
  SamplerState sampler;
  sampler.epoch = state.Count("sampler_epoch", path);
  sampler.position = state.Count("sampler_position", path);
  if (state.scalars.count("epoch_seen")) {
    tally->loss_sum = std::strtod(state.Scalar("epoch_loss_sum", path).c_str(), nullptr);
    tally->seen = state.Count("epoch_seen", path);
    tally->correct = state.Count("epoch_correct", path);
  }
  return sampler;
}

// The state file that --resume PATH names. A model (.onnx) is accepted when it is an epoch
// checkpoint this program wrote (its .state lies beside it); any other model is explained.
std::string ResumeStatePath(const std::string& path) {
  const bool onnx = path.size() > 5 && path.compare(path.size() - 5, 5, ".onnx") == 0;
  if (!onnx) return path;
  const std::string state = path.substr(0, path.size() - 5) + ".state";
  OT_CHECK(::access(state.c_str(), R_OK) == 0,
           "--resume %s: that is a model, not a training state; --resume continues a run from the .state file "
           "onnx-train wrote beside each checkpoint (or, alone, from the newest in --checkpoint-dir). To train "
           "starting from this model's weights, give it as the model: onnx-train %s ...",
           path.c_str(), path.c_str());
  return state;
}

// Removes the checkpoint folder at the end of a run that created it and wrote nothing
// there (a failed start), so that no empty trained_models/ is left behind.
class CreatedDirCleanup {
 public:
  explicit CreatedDirCleanup(const std::string& dir) : dir_(dir) {
    struct stat st {};
    created_ = ::stat(dir.c_str(), &st) != 0;
  }
  ~CreatedDirCleanup() {
    if (created_) ::rmdir(dir_.c_str());  // fails, as it should, unless the folder is empty
  }

 private:
  std::string dir_;
  bool created_ = false;
};

// Tells a launcher that this worker is alive: touches $ONNXTRAIN_HEARTBEAT_FILE at most
// once a second.
void Heartbeat() {
  static const char* path = std::getenv("ONNXTRAIN_HEARTBEAT_FILE");
  static auto last = std::chrono::steady_clock::time_point();
  if (!path) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last < std::chrono::seconds(1)) return;
  last = now;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ::futimens(fd, nullptr);
    ::close(fd);
  }
}

// The job's tally of the epoch so far: this rank's figures summed over the ranks, plus
// what a resumed snapshot had counted (held by rank 0 only). Every rank must call it.
// `prior_seen`, if given, receives the samples of the resumed snapshot.
EpochTally JobTally(Communicator* comm, std::chrono::milliseconds timeout, const EpochTally& prior, double loss_sum,
                    int64_t seen, int64_t correct, int64_t* prior_seen = nullptr) {
  double sums[4] = {prior.loss_sum + loss_sum, static_cast<double>(prior.seen + seen),
                    static_cast<double>(prior.correct + correct), static_cast<double>(prior.seen)};
  if (comm) comm->AllReduce(CommBuffer::Of(sums, 4))->Wait(timeout);
  if (prior_seen) *prior_seen = static_cast<int64_t>(sums[3]);
  return EpochTally{sums[0], static_cast<int64_t>(sums[1]), static_cast<int64_t>(sums[2])};
}

// Whether the run should stop after this step: a signal reached this process or, in data
// parallel, any rank (all ranks stop after the same step, so their states agree).
bool StopRequested(Communicator* comm, std::chrono::milliseconds timeout) {
  float flag = InterruptSignal() != 0 ? 1.f : 0.f;
  if (comm) comm->AllReduce(CommBuffer::Of(&flag, 1))->Wait(timeout);
  return flag > 0.f;
}

// The class names, one a line in label order, beside the checkpoints (image folders).
void WriteClassNames(const std::vector<std::string>& names, const std::string& path) {
  std::string text;
  for (const std::string& n : names) text += n + "\n";
  WriteFileAtomic(path, text);
}

}  // namespace

TrainResult RunTraining(Model forward, const TrainerOptions& o) {
  InterruptGuard interrupt_guard;  // from here on, Ctrl-C finishes a step and saves
  OT_CHECK(o.epochs >= 1, "--epochs must be at least 1");
  OT_CHECK(o.batch >= 1, "--batch must be at least 1");
  const ValueInfo& input = forward.graph.inputs[0];
  DataSourceOptions source = DataSourceForModel(forward, o.data, o.seed, o.data_source);
  const bool float_targets = !IsClassIndexLoss(o.loss) && o.loss != LossKind::kModel;
  source.float_targets = float_targets;
  if (source.data_workers <= 0) {  // a quarter of the thread budget, 1 to 8
    const int total = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
    source.data_workers = std::min(8, std::max(1, total / 4));
  }
  ImageDataset train = LoadImageDataset(o.data, "train", source);
  ImageDataset test = LoadImageDataset(o.data, "test", source);
  CheckDataFitsInput(input, train);
  for (const ImageDataset* d : {&train, &test})  // every input fed: the first from the data, the rest by name
    for (size_t i = 1; i < forward.graph.inputs.size(); ++i) {
      const std::string& name = forward.graph.inputs[i].name;
      OT_CHECK(std::any_of(d->extra_inputs.begin(), d->extra_inputs.end(), [&](const auto& e) { return e.first == name; }),
               "the model's input '%s' gets no data from --data %s; give an npz with an array per input (input_ids, "
               "attention_mask, ..., and y), or --input-map %s=ARRAY",
               name.c_str(), o.data.c_str(), name.c_str());
    }
  // Targets [N] for a model output [N, 1] (a regressor's one value) are [N, 1].
  const ValueInfo& out0 = forward.graph.outputs.at(0);
  for (ImageDataset* d : {&train, &test})
    if (!d->float_labels.empty() && d->label_dims.empty() && out0.has_shape && out0.dims.size() == 2 &&
        out0.dims[1].IsStatic() && out0.dims[1].value == 1)
      d->label_dims = {1};
  CheckLabelsFitOutput(forward.graph.outputs.at(0), train);

  // Data parallel: the launcher's environment says which rank this is.
  const LaunchInfo launch = LaunchInfoFromEnvironment(nullptr, o.backend != "mpi");
  const int world = std::max(launch.size, 1), rank = std::max(launch.rank, 0);
  // One GPU per rank, like DDP: rank with local rank i runs on cuda:((K + i) mod count).
  Device device = o.device;
  if (device.type == DeviceType::kCUDA && world > 1) {
    const int count = BackendFor(DeviceType::kCUDA).DeviceCount();
    if (count > 0) device.index = (device.index + std::max(launch.local_rank, 0)) % count;
  }

  const bool sync_bn = o.sync_bn && world > 1;
  OT_CHECK(!sync_bn || device.type == DeviceType::kCPU,
           "--sync-bn runs on CPU ranks only for now (no %s kernel for synchronised batch normalization); train "
           "with --device cpu or leave out --sync-bn",
           device.ToString().c_str());
  CommunicatorReplicaSum replica_sum;  // bound to the communicator once connected
  TrainingConfig config;
  config.executor = o.executor;
  config.sync_batch_norm = sync_bn;
  if (sync_bn) config.executor.cross_replica = &replica_sum;
  config.autodiff.freeze = o.freeze;
  config.autodiff.train_only = o.train_only;
  config.autodiff.label_smoothing = o.label_smoothing;
  config.autodiff.loss = o.loss;
  config.autodiff.ignore_index = o.ignore_index;
  config.autodiff.smooth_l1_beta = o.smooth_l1_beta;
  MixOptions mix;
  mix.mixup_alpha = o.mixup_alpha;
  mix.cutmix_alpha = o.cutmix_alpha;
  mix.seed = o.seed;
  config.autodiff.mixed_targets = mix.Enabled();
  config.optimizer = o.optimizer;
  config.optimizer.base_lr = static_cast<float>(o.schedule.base_lr);  // absolute --param-group rates
  OT_CHECK(o.accumulate >= 1, "--accumulate must be at least 1");
  config.accumulate = o.accumulate;
  config.executor.device = device;
  config.executor.cuda_graphs = o.cuda_graphs;
  config.executor.num_threads = o.threads;
  config.executor.seed = o.seed;
  TrainingSession session(forward, config);
  // Accuracy is a classifier's: arg-max of scores [N, K] (or per token [N, T, V]) against
  // class labels. The regression and multi-label losses, and per-pixel classes, report
  // the loss only.
  const TrainingGraph& loss_graph = session.graph();
  const ValueInfo* scores_info = nullptr;
  for (const auto& v : forward.graph.outputs)
    if (v.name == loss_graph.loss_input) scores_info = &v;
  bool class_rows = true;  // [N, K], [N, K, 1, 1] or [N, T, V]
  if (scores_info && scores_info->has_shape && scores_info->dims.size() > 3)
    for (size_t d = 2; d < scores_info->dims.size(); ++d)
      class_rows = class_rows && scores_info->dims[d].IsStatic() && scores_info->dims[d].value == 1;
  const bool accuracy_applies = IsClassIndexLoss(loss_graph.loss_kind) && class_rows;
  // The session holds the weights now (its state); the forward model serves only its
  // structure from here on (fingerprints, input and output names), so its copy of the
  // initial weights goes (ResNet34: 85 MB less for the whole run).
  session.ReleaseStateBytes(&forward);
  std::unique_ptr<ModelEma> ema;
  if (o.model_ema && rank == 0)  // the weights are the same on every rank: rank 0 averages, evaluates, saves
    ema = std::make_unique<ModelEma>(
        session.InferenceModel(),
        AdjustedEmaDecay(o.model_ema_decay, o.batch, world, o.model_ema_steps, o.epochs));

  std::unique_ptr<Communicator> comm;
  std::unique_ptr<GradientReducer> reducer;
  const auto comm_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.comm_timeout_seconds * 1000));
  if (world > 1) {
    CommConfig cc;
    cc.rank = rank;
    cc.size = world;
    cc.local_rank = launch.local_rank;
    cc.rendezvous = launch.rendezvous;
    cc.run_id = launch.run_id.empty() ? "default" : launch.run_id;
    cc.device = device;
    cc.timeout = comm_timeout;
    // --bind-addr: the address this rank's Gloo connections listen on (several hosts, or
    // several addresses of one host).
    if (const char* bind = std::getenv("ONNXTRAIN_BIND_ADDR")) cc.listen_host = bind;
    std::string fp = ModelFingerprint(forward);
    for (const auto& [k, v] : RunSettings(o)) fp += ";" + k + "=" + v;
    cc.fingerprint = fp;
    comm = CreateCommunicator(o.backend, cc);
    replica_sum.Bind(comm.get(), comm_timeout);
    std::vector<std::pair<std::string, int64_t>> grads;
    for (size_t i = 0; i < session.graph().params.size(); ++i)
      grads.emplace_back(session.graph().grads[i],
                         session.graph().model.graph.FindInitializer(session.graph().params[i])->NumElements());
    BucketOptions bo;
    bo.timeout = comm_timeout;
    bo.bucket_bytes = static_cast<size_t>(o.bucket_cap_mb * (1 << 20));
    reducer = std::make_unique<GradientReducer>(*comm, grads, bo);
  }
  const bool lead = rank == 0;
  std::unique_ptr<CreatedDirCleanup> dir_cleanup;
  if (o.save_checkpoints && lead) {
    dir_cleanup = std::make_unique<CreatedDirCleanup>(o.checkpoint_dir);
    PrepareCheckpointDir(o.checkpoint_dir);
  }
  // Under onnx-train's launcher every line already starts with "[rank R] ": no second tag.
  const std::string tag = std::getenv(kEnvOutputPrefixed) ? ""
                          : device.type == DeviceType::kCPU ? "cpu" + std::to_string(rank)
                                                            : "cuda" + std::to_string(device.index);
  ProgressReporter progress(tag, lead ? o.metrics_path : "", o.quiet || !lead);
  progress.SetWorldSize(world);
  auto say = [&](const std::string& line) {
    if (lead) progress.Message(line);
  };
  for (const std::string& note : train.notes) say(note);
  for (const std::string& note : test.notes)
    if (std::find(train.notes.begin(), train.notes.end(), note) == train.notes.end()) say(note);
  if (!o.headline.empty()) say(o.headline);
  if (o.sync_bn && world == 1)
    say("note: --sync-bn has no effect with one rank (the batch statistics are already the whole batch's)");
  if (sync_bn && session.sync_batch_norm_nodes() == 0)
    say("warning: --sync-bn: the model has no BatchNormalization in training mode; nothing to synchronise");

  SamplerOptions so;
  so.dataset_size = train.count;
  so.batch_size = o.batch;
  so.shuffle = o.shuffle;
  so.seed = o.seed;
  so.rank = rank;
  so.world_size = world;
  DistributedSampler sampler(so);
  EpochTally resumed_tally;  // the resumed epoch's figures before the snapshot (whole job)
  TrainResult result;
  std::unique_ptr<ConvChoicesFile> conv_choices;
  bool conv_choices_kept = false;  // after the run's first step
  if (o.save_checkpoints && device.type == DeviceType::kCPU)
    conv_choices = std::make_unique<ConvChoicesFile>(o.checkpoint_dir, rank, session);
  if (!o.resume.empty()) {
    const std::string path = o.resume == "latest" ? FindLatestCheckpoint(o.checkpoint_dir) : ResumeStatePath(o.resume);
    if (path.empty()) {
      say("no checkpoint in " + o.checkpoint_dir + " yet: starting from the beginning");
    } else {
      sampler.Restore(Resume(session, forward, o, path, &resumed_tally, ema.get()));
      if (device.type == DeviceType::kCPU) ConvChoicesFile::LoadBeside(path, rank, session);
      if (!lead) resumed_tally = EpochTally{};  // rank 0 adds the job's tally once
      const int64_t done = sampler.State().epoch;
      if (done >= o.epochs) {
        // Nothing left to train: say so, and leave the result without a test accuracy.
        const std::string model_path = path.substr(0, path.rfind(".state")) + ".onnx";
        say(StrFormat("already complete (epoch %lld of %d): %s; nothing to train (raise --epochs to train further)",
                      (long long)done, o.epochs,
                      ::access(model_path.c_str(), R_OK) == 0 ? ("the trained model is " + model_path).c_str()
                                                              : ("the state is " + path).c_str()));
        result.already_complete = true;
        result.epochs_done = static_cast<int>(done);
        result.global_step = session.steps_done();
        result.world_size = world;
        return result;
      }
      say(StrFormat("resumed from %s: epoch %lld, %lld steps done", path.c_str(), (long long)done,
                    (long long)session.steps_done()));
    }
  }
  if (comm) {
    // Every rank starts from rank 0's state (weights, BatchNorm statistics, optimizer state).
    std::vector<WorkPtr> works;
    for (const auto& [name, tensor] : session.StateTensors())
      works.push_back(comm->Broadcast(CommBuffer{tensor->raw(), static_cast<size_t>(tensor->numel()), tensor->dtype(),
                                                 tensor->device()}));
    for (auto& w : works) w->Wait(comm_timeout);
    say(StrFormat("data parallel: %d ranks over %s, %zu gradient bucket%s; batch %lld per rank (%lld global)", world,
                  comm->backend(), reducer->NumBuckets(), reducer->NumBuckets() == 1 ? "" : "s", (long long)o.batch,
                  (long long)o.batch * world));
  }
  BatchLoaderOptions lo;
  lo.augment.random_crop = lo.augment.horizontal_flip = o.augment;
  lo.augment.seed = o.seed;
  lo.augment.random_erase = o.random_erase;

  // An interrupted run says where it stopped, what it saved and how to go on.
  auto report_interrupt = [&](int64_t epoch, int64_t step, const std::string& saved) {
    result.interrupted = true;
    result.global_step = session.steps_done();
    result.world_size = world;
    if (comm) comm->Barrier()->Wait(comm_timeout);  // the state is on disk before anyone exits
    if (saved.empty()) {
      say(StrFormat("interrupted at epoch %lld step %lld; nothing saved (--no-checkpoints)", (long long)epoch,
                    (long long)step));
    } else {
      const std::string cmd = o.continue_command.empty() ? "onnx-train MODEL.onnx ..." : o.continue_command;
      say(StrFormat("interrupted at epoch %lld step %lld; saved %s; continue with: %s --resume %s", (long long)epoch,
                    (long long)step, saved.c_str(), cmd.c_str(), saved.c_str()));
    }
  };
  // A fixed-batch model runs full batches only.
  // Batches (micro-batches with --accumulate) of an epoch; with accumulation only full ones
  // (each optimizer step averages `accumulate` equal micro-batches), a whole number of steps.
  const int64_t accumulate = std::max<int64_t>(o.accumulate, 1);
  const int64_t full_steps =
      o.fixed_batch > 0 || accumulate > 1 ? sampler.FullBatchesPerEpoch() : sampler.BatchesPerEpoch();
  OT_CHECK(full_steps % accumulate == 0,
           "--accumulate %lld does not divide an epoch's %lld full batches of %lld%s; choose a divisor of %lld (or "
           "another --batch)",
           (long long)accumulate, (long long)full_steps, (long long)o.batch, world > 1 ? " per rank" : "",
           (long long)full_steps);
  const int64_t epoch_updates = full_steps / accumulate;  // optimizer steps of a whole epoch
  if (o.eval_every > o.epochs)
    say(StrFormat("warning: --eval-every %d is more than --epochs %d; test accuracy only at the end", o.eval_every,
                  o.epochs));
  if (o.save_every > o.epochs && o.save_checkpoints)
    say(StrFormat("warning: --save-every %d is more than --epochs %d; a checkpoint only at the end", o.save_every,
                  o.epochs));
  if (o.max_steps_per_epoch > epoch_updates)
    say(StrFormat("warning: --max-steps %lld is more than an epoch's %lld steps (%lld samples, batch %lld%s); each "
                  "epoch runs %lld",
                  (long long)o.max_steps_per_epoch, (long long)epoch_updates, (long long)train.count,
                  (long long)(o.batch * world * accumulate), world > 1 ? " global" : "", (long long)epoch_updates));
  for (int64_t epoch = sampler.State().epoch; epoch < o.epochs; ++epoch) {
    const int64_t first = epoch == sampler.State().epoch ? sampler.State().position : 0;
    // In batches (micro-batches); the epoch's optimizer steps are last / accumulate.
    const int64_t last =
        accumulate * (o.max_steps_per_epoch > 0 ? std::min(epoch_updates, o.max_steps_per_epoch) : epoch_updates);
    const int64_t updates = last / accumulate;
    // The rate of each step (a per-step schedule counts the optimizer steps of the run).
    auto lr_at = [&](int64_t step) {
      return (o.schedule.per_step ? o.schedule.AtStep(step, updates) : o.schedule.At(static_cast<int>(epoch))) *
             (o.lr_scale_world ? world : 1);
    };
    const double lr = lr_at(session.steps_done());
    progress.StartEpoch(static_cast<int>(epoch), updates, lr);
    double last_lr = lr;  // the rate of the epoch's last step (per-step schedules move within an epoch)
    const auto start = std::chrono::steady_clock::now();
    sampler.Restore(SamplerState{epoch, first});
    lo.end_epoch = epoch + 1;
    BatchLoader loader(train, sampler, lo);
    double loss_sum = 0;
    int64_t seen = 0, correct = 0;  // this rank's samples in this session
    TaskTally task;                 // float targets: this rank's regression / multi-label figures
    task.multilabel = o.loss == LossKind::kBceWithLogits;
    EpochTally prior;               // the job's samples of this epoch before a resume
    if (epoch == sampler.State().epoch) std::swap(prior, resumed_tally);
    SamplerState next{epoch + 1, 0};
    Batch batch;
    bool stop = false;
    auto step_start = std::chrono::steady_clock::now();
    double group_loss = 0;  // the step's micro-batch losses so far
    int64_t group_n = 0;
    for (int64_t s = first; s < last && loader.Next(&batch); ++s) {
      if (s % accumulate == 0) step_start = std::chrono::steady_clock::now();
      std::map<std::string, Tensor> mixed;  // Mixup/CutMix: the paired labels and lambda; the further inputs
      for (const auto& [name, t] : batch.extra) mixed.emplace(name, Tensor::FromHost(t, device));
      std::string mix_json;
      if (mix.Enabled()) {
        OT_CHECK(batch.images.dims.size() == 4, "--mixup-alpha and --cutmix-alpha need image batches [n, C, H, W]");
        const MixDraw draw = DrawMix(mix, batch.images.dims[2], batch.images.dims[3], epoch, batch.index);
        mixed[kMixLabelsInput] = Tensor::FromHost(MixBatch(batch.images, batch.labels, draw), device);
        mixed[kMixLambdaInput] =
            Tensor::FromHost(HostTensor::FromVector<float>({static_cast<float>(draw.lambda)}, {}), device);
        mix_json = MixDrawJson(draw);
      }
      CheckLabelsFit(loss_graph, batch.labels.dtype, batch.labels.dims);
      if ((s + 1) % accumulate != 0) {  // a micro-batch before the step's last: no update, no allreduce
        StepResult r = session.MicroStep(Tensor::FromHost(batch.images, device), Tensor::FromHost(batch.labels, device),
                                         mixed);
        OT_CHECK(std::isfinite(r.loss), "the loss became %f at epoch %lld step %lld; lower the learning rate", r.loss,
                 (long long)epoch, (long long)(s / accumulate));
        const int64_t n = batch.labels.NumElements();
        loss_sum += static_cast<double>(r.loss) * static_cast<double>(n);
        seen += n;
        if (accuracy_applies) correct += CountCorrect(r.logits, batch.labels);
        if (float_targets) task.Add(r.logits, batch.labels);
        group_loss += r.loss;
        group_n += n;
        continue;
      }
      const double step_lr = lr_at(session.steps_done());
      progress.SetLr(step_lr);
      last_lr = step_lr;
      StepResult r = session.Step(Tensor::FromHost(batch.images, device), Tensor::FromHost(batch.labels, device),
                                  static_cast<float>(step_lr), reducer ? reducer->Hooks() : RunOptions{}, mixed);
      if (reducer) {
        reducer->FinishStep();
        result.allreduce_wait_seconds += reducer->last_wait_seconds();
      }
      // The choices are made when a shape is first planned: after the run's first step here,
      // and at the epoch's end for a smaller last batch.
      if (conv_choices && !conv_choices_kept) {
        conv_choices->Update();
        conv_choices_kept = true;
      }
      // Step time (forward, backward, update, allreduce waits) and the reducer's overlap
      // counters for the metrics file.
      std::string extra = StrFormat(",\"step_ms\":%.3f",
          1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count()) + mix_json;
      if (reducer) {
        const GradientReducer::StepStats& st = reducer->last_stats();
        extra += StrFormat(",\"allreduce_ms\":%.3f,\"allreduce_wait_ms\":%.3f,\"buckets\":%zu",
                           1e3 * st.allreduce_seconds, 1e3 * st.wait_seconds, st.buckets);
      }
      OT_CHECK(std::isfinite(r.loss), "the loss became %f at epoch %lld step %lld; lower the learning rate", r.loss,
               (long long)epoch, (long long)(s / accumulate));
      const int64_t n = batch.labels.NumElements();
      loss_sum += static_cast<double>(r.loss) * static_cast<double>(n);
      seen += n;
      if (accuracy_applies) correct += CountCorrect(r.logits, batch.labels);
      if (float_targets) task.Add(r.logits, batch.labels);
      // The step's loss: the mean of its micro-batches' (equal sizes) losses.
      const float step_loss = static_cast<float>((group_loss + r.loss) / static_cast<double>(accumulate));
      const int64_t step_n = group_n + n;
      group_loss = 0;
      group_n = 0;
      result.step_losses.push_back(step_loss);
      progress.Step(s / accumulate, session.steps_done(), step_loss, loss_sum / static_cast<double>(seen), step_n,
                    extra);
      // torchvision updates its EMA after the optimizer steps i % model_ema_steps == 0 of each epoch.
      if (ema && (s / accumulate) % o.model_ema_steps == 0) {
        ema->Update(session.InferenceModel());
        if (epoch < o.model_ema_warmup_epochs) ema->ResetCount();
      }
      if (o.save_checkpoints && o.snapshot_every > 0 && session.steps_done() % o.snapshot_every == 0 &&
          batch.next.position < full_steps) {
        const EpochTally tally = JobTally(comm.get(), comm_timeout, prior, loss_sum, seen, correct);
        if (lead) {
          SaveState(session, forward, o, epoch, batch.next, SnapshotPath(o.checkpoint_dir, session.steps_done()), tally,
                    ema.get());
          PruneSnapshots(o.checkpoint_dir, o.keep_snapshots);
        }
      }
      MaybeInjectFault(session.steps_done(), rank);
      Heartbeat();
      if (StopRequested(comm.get(), comm_timeout)) {
        stop = true;
        if (s + 1 < last) {  // mid-epoch: a recovery snapshot where the next step would start
          std::string saved;
          if (o.save_checkpoints) {
            saved = SnapshotPath(o.checkpoint_dir, session.steps_done());
            const EpochTally tally = JobTally(comm.get(), comm_timeout, prior, loss_sum, seen, correct);
            if (lead) SaveState(session, forward, o, epoch, batch.next, saved, tally, ema.get());
          }
          report_interrupt(epoch, (s + 1) / accumulate, saved);
          return result;
        }
        break;  // the epoch's last step: finish the epoch (its checkpoint) below
      }
    }
    sampler.Restore(next);
    // The printed figures are the whole job's, and the whole epoch's (a resumed epoch adds
    // what its snapshot tallied); img/s counts only the images of this session.
    int64_t prior_seen = 0;
    const EpochTally job = JobTally(comm.get(), comm_timeout, prior, loss_sum, seen, correct, &prior_seen);
    EpochSummary summary;
    summary.epoch = static_cast<int>(epoch);
    summary.batch = o.batch;
    summary.world_size = world;
    summary.steps = updates;
    summary.lr = last_lr;
    summary.loss = job.loss_sum / static_cast<double>(std::max<int64_t>(job.seen, 1));
    summary.accuracy =
        accuracy_applies ? static_cast<double>(job.correct) / static_cast<double>(std::max<int64_t>(job.seen, 1)) : -1;
    if (!train.label_dims.empty() && !float_targets) summary.perplexity = std::exp(summary.loss);  // per-token cross-entropy
    summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int64_t session_images = job.seen - prior_seen;
    summary.images_per_second = summary.seconds > 0 ? static_cast<double>(session_images) / summary.seconds : 0;
    const bool final_epoch = epoch + 1 == o.epochs;
    if (float_targets && task.samples > 0) {  // this rank's share of the epoch (rank 0's, in data parallel)
      if (task.multilabel) summary.exact_match = task.ExactMatch(), summary.f1 = task.MeanF1();
      else summary.mae = task.Mae(), summary.rmse = task.Rmse();
    }
    if (lead && float_targets && (final_epoch || (!stop && o.eval_every > 0 && (epoch + 1) % o.eval_every == 0))) {
      const TaskTally t = EvaluateTask(
          [&](const Tensor& x, const std::map<std::string, Tensor>& extra) { return session.Evaluate(x, extra); }, test,
          o.fixed_batch > 0 ? o.fixed_batch : std::max<int64_t>(o.batch, 256), device, task.multilabel,
          o.fixed_batch > 0);
      if (t.multilabel) {
        summary.test_exact_match = result.test_exact_match = t.ExactMatch();
        summary.test_f1 = result.test_f1 = t.MeanF1();
      } else {
        summary.test_mae = result.test_mae = t.Mae();
        summary.test_rmse = result.test_rmse = t.Rmse();
      }
    }
    std::string ema_line;  // --model-ema: both test accuracies, after the epoch line
    if (lead && !train.label_dims.empty() && !float_targets &&
        (final_epoch || (!stop && o.eval_every > 0 && (epoch + 1) % o.eval_every == 0))) {
      // Per-token labels (token windows, npz y [N, T]): the validation loss and perplexity.
      const TokenLoss val = EvaluateTokens([&](const Tensor& x) { return session.Evaluate(x); }, test,
                                           o.fixed_batch > 0 ? o.fixed_batch : o.batch, device, o.fixed_batch > 0);
      summary.test_loss = val.Loss();
      result.test_loss = val.Loss();
      if (accuracy_applies) summary.test_accuracy = result.test_accuracy = val.Accuracy();
    }
    if (lead && accuracy_applies && train.label_dims.empty() &&
        (final_epoch || (!stop && o.eval_every > 0 && (epoch + 1) % o.eval_every == 0))) {
      Accuracy acc = EvaluateAccuracy(
          [&](const Tensor& x, const std::map<std::string, Tensor>& extra) { return session.Evaluate(x, extra); }, test,
                                      o.fixed_batch > 0 ? o.fixed_batch : std::max<int64_t>(o.batch, 256), device,
                                      o.fixed_batch > 0);
      summary.test_accuracy = acc.Fraction();
      result.test_accuracy = acc.Fraction();
      if (ema) {
        ExecutorOptions eo = o.executor;
        eo.device = device;
        eo.num_threads = o.threads;
        Executor averaged(ema->AveragedModel(session.InferenceModel()), eo);
        const std::string in = forward.graph.inputs[0].name;
        Accuracy ema_acc = EvaluateAccuracy([&](const Tensor& x) { return averaged.Run({{in, x}})[0]; }, test,
                                            o.fixed_batch > 0 ? o.fixed_batch : std::max<int64_t>(o.batch, 256), device,
                                            o.fixed_batch > 0);
        result.ema_test_accuracy = ema_acc.Fraction();
        ema_line = StrFormat("epoch %lld: test accuracy %.2f%% (model), %.2f%% (EMA of the weights, decay %.6g every "
                             "%lld steps, %lld updates)",
                             (long long)epoch + 1, 100 * acc.Fraction(), 100 * ema_acc.Fraction(), ema->decay(),
                             (long long)o.model_ema_steps, (long long)ema->updates());
      }
    }
    if (lead) progress.EndEpoch(summary);
    if (!ema_line.empty()) say(ema_line);
    const bool interrupted = stop && !final_epoch;
    if (conv_choices) conv_choices->Update();  // with a smaller last batch's shapes
    if (lead && o.save_checkpoints &&
        (final_epoch || interrupted || (o.save_every > 0 && (epoch + 1) % o.save_every == 0))) {
      const std::string stem = CheckpointStem(o.checkpoint_dir, epoch + 1);
      SaveCheckpoint(session, forward, o, epoch + 1, sampler.State(), stem, ema.get());
      if (!train.class_names.empty()) WriteClassNames(train.class_names, o.checkpoint_dir + "/classes.txt");
      result.last_checkpoint = stem;
      say((tag.empty() ? "" : "[" + tag + "] ") + "saved checkpoint " + stem + ".onnx and .state");
    }
    result.epochs_run++;
    result.epochs_done = static_cast<int>(epoch + 1);
    result.last_epoch_loss = summary.loss;
    if (interrupted) {
      report_interrupt(epoch + 1, 0, o.save_checkpoints ? CheckpointStem(o.checkpoint_dir, epoch + 1) + ".state" : "");
      return result;
    }
    if (comm) comm->Barrier()->Wait(comm_timeout);
  }
  result.global_step = session.steps_done();
  result.world_size = world;
  if (comm) comm->Barrier()->Wait(comm_timeout);  // peers close their connections together
  return result;
}

}  // namespace ot
