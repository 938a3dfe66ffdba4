// Checkpoints, snapshots and exact resume (see checkpointer.h).
#include "train/checkpointer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "graph/error.h"
#include "graph/file_util.h"
#include "graph/onnx_io.h"
#include "runtime/cpu/conv_algorithm.h"
#include "train/checkpoint.h"

namespace ot {

// auto's convolution choices (runtime/cpu/conv_algorithm.h) beside the checkpoints, a file
// per rank: a resumed run loads them and so runs the algorithms, and rounds the way, the
// interrupted run did. Written when they change; a failure to write only warns (once).
class Checkpointer::ConvChoicesFile {
 public:
  ConvChoicesFile(std::string dir, int rank)
      : path_(dir + "/conv_algorithms.rank" + std::to_string(rank) + ".txt") {}
  // Before the first step of a run resumed from the state file `state_path`: the choices
  // kept beside it, if any.
  static void LoadBeside(const std::string& state_path, int rank) {
    const size_t slash = state_path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : state_path.substr(0, slash);
    const std::string path = dir + "/conv_algorithms.rank" + std::to_string(rank) + ".txt";
    if (::access(path.c_str(), R_OK) != 0) return;
    try {
      LoadConvChoices(ReadFileBytes(path));
    } catch (const Error& e) {
      throw Error(path + ": " + e.what() + " (delete the file to let this run time its convolutions anew)");
    }
  }
  void Update() {
    const std::string text = SaveConvChoices();
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
  bool failed_ = false;
};

namespace {

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

// The class names, one a line in label order, beside the checkpoints (image folders).
void WriteClassNames(const std::vector<std::string>& names, const std::string& path) {
  std::string text;
  for (const std::string& n : names) text += n + "\n";
  WriteFileAtomic(path, text);
}

// The epoch's figures in a state file: the packed sums, comma-separated.
std::string TallyText(const TaskFigures& tally) {
  std::string text;
  for (double v : tally.Pack()) text += (text.empty() ? "" : ",") + StrFormat("%.17g", v);
  return text;
}

TaskFigures TallyFromText(const std::string& text, const std::string& path) {
  std::vector<double> values;
  for (const char* p = text.c_str(); *p;) {
    char* end = nullptr;
    values.push_back(std::strtod(p, &end));
    OT_CHECK(end != p, "checkpoint '%s': the epoch tally '%s' is not a list of numbers", path.c_str(), text.c_str());
    p = *end == ',' ? end + 1 : end;
  }
  return TaskFigures::Unpack(values);
}

}  // namespace

// The settings that decide the data order and the update rule: a resumed run must use
// the same ones to continue exactly.
std::map<std::string, std::string> Checkpointer::RunSettings(const TrainerOptions& o) {
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

Checkpointer::Checkpointer(const TrainerOptions& options, const Model& forward, int rank, bool lead, bool cpu)
    : o_(options), fingerprint_(ModelFingerprint(forward)), rank_(rank), lead_(lead), cpu_(cpu) {
  if (o_.save_checkpoints && lead_) {
    struct stat st {};
    if (::stat(o_.checkpoint_dir.c_str(), &st) != 0) created_dir_ = o_.checkpoint_dir;
    PrepareCheckpointDir(o_.checkpoint_dir);
  }
  if (o_.save_checkpoints && cpu) conv_choices_ = std::make_unique<ConvChoicesFile>(o_.checkpoint_dir, rank_);
}

Checkpointer::~Checkpointer() {
  // A run that created the folder and wrote nothing there (a failed start) leaves none.
  if (!created_dir_.empty()) ::rmdir(created_dir_.c_str());  // fails, as it should, unless empty
}

void Checkpointer::WriteState(TrainingSession& session, int64_t epochs_done, const SamplerState& sampler,
                              const std::string& path, const TaskFigures& tally, const ModelEma* ema) {
  TrainingState state;
  state.epochs_done = epochs_done;
  state.global_step = session.steps_done();
  state.scalars = RunSettings(o_);
  state.scalars["model_fingerprint"] = fingerprint_;
  state.scalars["sampler_epoch"] = std::to_string(sampler.epoch);
  state.scalars["sampler_position"] = std::to_string(sampler.position);
  state.scalars["executor_rng"] = session.RngState();
  if (!session.MicroRngState().empty()) state.scalars["executor_rng_micro"] = session.MicroRngState();
  if (tally.loss_count > 0 || tally.samples > 0) state.scalars["epoch_tally"] = TallyText(tally);
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

std::string Checkpointer::SaveSnapshot(TrainingSession& session, int64_t epoch, const SamplerState& next,
                                       const TaskFigures& tally, const ModelEma* ema) {
  const std::string path = SnapshotPath(o_.checkpoint_dir, session.steps_done());
  WriteState(session, epoch, next, path, tally, ema);
  PruneSnapshots(o_.checkpoint_dir, o_.keep_snapshots);
  return path;
}

std::string Checkpointer::SaveEpoch(TrainingSession& session, int64_t epochs_done, const SamplerState& sampler,
                                    const ModelEma* ema, const std::vector<std::string>& class_names) {
  const std::string stem = CheckpointStem(o_.checkpoint_dir, epochs_done);
  const Model inference = session.InferenceModel();
  SaveModel(inference, stem + ".onnx");
  if (ema) SaveModel(ema->AveragedModel(inference), stem + "_ema.onnx");
  WriteState(session, epochs_done, sampler, stem + ".state", {}, ema);
  if (!class_names.empty()) WriteClassNames(class_names, o_.checkpoint_dir + "/classes.txt");
  return stem;
}

void Checkpointer::AfterStep() {
  // The choices are made when a shape is first planned: after the run's first step here,
  // and at the epoch's end for a smaller last batch (the trainer calls it then too).
  if (conv_choices_ && !conv_choices_kept_) {
    conv_choices_->Update();
    conv_choices_kept_ = true;
  }
}

void Checkpointer::AfterEpoch() {
  if (conv_choices_) conv_choices_->Update();
}

bool Checkpointer::Resume(TrainingSession& session, ModelEma* ema, ResumePoint* point, std::string* note) {
  if (o_.resume.empty()) return false;
  const std::string path = o_.resume == "latest" ? FindLatestCheckpoint(o_.checkpoint_dir) : ResumeStatePath(o_.resume);
  if (path.empty()) {
    *note = "no checkpoint in " + o_.checkpoint_dir + " yet: starting from the beginning";
    return false;
  }
  TrainingState state = ReadTrainingState(path);
  const std::string fp = state.Scalar("model_fingerprint", path);
  OT_CHECK(fp == fingerprint_,
           "checkpoint '%s' was made from another model (fingerprint %s, this model %s); resume it with the model it "
           "was trained from",
           path.c_str(), fp.c_str(), fingerprint_.c_str());
  const std::map<std::string, std::string> settings = RunSettings(o_);
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
  point->path = path;
  point->sampler.epoch = state.Count("sampler_epoch", path);
  point->sampler.position = state.Count("sampler_position", path);
  point->tally = {};
  if (state.scalars.count("epoch_tally") && lead_) point->tally = TallyFromText(state.scalars.at("epoch_tally"), path);
  if (cpu_) ConvChoicesFile::LoadBeside(path, rank_);
  return true;
}

}  // namespace ot
