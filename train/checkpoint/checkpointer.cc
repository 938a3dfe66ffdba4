// Checkpoints, snapshots and exact resume (see checkpointer.h).
#include "train/checkpoint/checkpointer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "graph/error.h"
#include "graph/file_util.h"
#include "graph/onnx_io.h"
#include "train/checkpoint/checkpoint.h"

namespace ot {

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
}

Checkpointer::~Checkpointer() {
  // A run that created the folder and wrote nothing there (a failed start) leaves none.
  if (!created_dir_.empty()) ::rmdir(created_dir_.c_str());  // fails, as it should, unless empty
}

void Checkpointer::WriteState(TrainingSession& session, int64_t epochs_done, const SamplerState& sampler,
                              const std::string& path, const TaskFigures& tally, const ModelEma* ema,
                              const std::vector<std::string>& choices) {
  TrainingState state;
  state.epochs_done = epochs_done;
  state.global_step = session.steps_done();
  state.scalars = RunSettings(o_);
  state.scalars["model_fingerprint"] = fingerprint_;
  state.scalars["sampler_epoch"] = std::to_string(sampler.epoch);
  state.scalars["sampler_position"] = std::to_string(sampler.position);
  state.scalars["executor_rng"] = session.RngState();
  if (!session.MicroRngState().empty()) state.scalars["executor_rng_micro"] = session.MicroRngState();
  if (!session.SaveLossScale().empty()) state.scalars["loss_scale"] = session.SaveLossScale();
  if (tally.loss_count > 0 || tally.samples > 0) state.scalars["epoch_tally"] = TallyText(tally);
  for (size_t r = 0; r < choices.size(); ++r)
    if (!choices[r].empty()) state.scalars["conv_algorithms.rank" + std::to_string(r)] = choices[r];
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
                                       const TaskFigures& tally, const ModelEma* ema,
                                       const std::vector<std::string>& choices) {
  const std::string path = SnapshotPath(o_.checkpoint_dir, session.steps_done());
  WriteState(session, epoch, next, path, tally, ema, choices);
  PruneSnapshots(o_.checkpoint_dir, o_.keep_snapshots);
  return path;
}

std::string Checkpointer::SaveEpoch(TrainingSession& session, int64_t epochs_done, const SamplerState& sampler,
                                    const ModelEma* ema, const std::vector<std::string>& class_names,
                                    const std::vector<std::string>& choices) {
  const std::string stem = CheckpointStem(o_.checkpoint_dir, epochs_done);
  const Model inference = session.InferenceModel();
  SaveModel(inference, stem + ".onnx");
  if (ema) SaveModel(ema->AveragedModel(inference), stem + "_ema.onnx");
  WriteState(session, epochs_done, sampler, stem + ".state", {}, ema, choices);
  if (!class_names.empty()) WriteClassNames(class_names, o_.checkpoint_dir + "/classes.txt");
  return stem;
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
  if (state.scalars.count("loss_scale") && session.loss_scaler().enabled()) {
    try {
      session.LoadLossScale(state.scalars.at("loss_scale"));
    } catch (const Error& e) {
      throw Error(path + ": " + e.what());
    }
  }
  point->path = path;
  point->sampler.epoch = state.Count("sampler_epoch", path);
  point->sampler.position = state.Count("sampler_position", path);
  point->tally = {};
  if (state.scalars.count("epoch_tally") && lead_) point->tally = TallyFromText(state.scalars.at("epoch_tally"), path);
  // This rank's convolution choices (rank 0's when the job had fewer ranks).
  const std::string own = "conv_algorithms.rank" + std::to_string(rank_);
  const auto choices = state.scalars.count(own) ? state.scalars.find(own) : state.scalars.find("conv_algorithms.rank0");
  if (cpu_ && choices != state.scalars.end()) {
    try {
      session.LoadAlgorithmChoices(choices->second);
    } catch (const Error& e) {
      throw Error(path + ": " + choices->first + ": " + e.what());
    }
  }
  return true;
}

}  // namespace ot
