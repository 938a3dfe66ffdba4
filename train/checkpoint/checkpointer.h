// The training run's memory: epoch checkpoints (an inference model and its .state), recovery
// snapshots between them, and exact resume from either. Everything a resumed run needs to
// continue bit for bit is in the state file: weights, optimizer and BatchNorm state, the
// sampler's place, the random streams, the epoch's figures so far and the settings that
// decide the data order and update rule (a resume with other settings is refused).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "train/recipe/model_ema.h"
#include "train/loader/sampler.h"
#include "train/task.h"
#include "train/trainer.h"
#include "train/training_session.h"

namespace ot {

// Where a resumed run starts: the sampler's place and what the job had tallied of that
// epoch before (rank 0's copy; zero at an epoch boundary).
struct ResumePoint {
  std::string path;  // the state file read
  SamplerState sampler;
  TaskFigures tally;
};

class Checkpointer {
 public:
  // rank: this process's (each keeps its own convolution choices); lead: rank 0, which writes
  // the checkpoints. Creates the checkpoint folder (lead, when saving).
  Checkpointer(const TrainerOptions& options, const Model& forward, int rank, bool lead, bool cpu);
  ~Checkpointer();

  // --resume: restores the session (and the EMA) from the named state, or the newest in
  // the folder for "latest". Returns false when there is nothing to resume from (the note
  // for the user in *note). Throws ot::Error for a state of another model or other settings.
  bool Resume(TrainingSession& session, ModelEma* ema, ResumePoint* point, std::string* note);
  // `choices`: the algorithms each rank's runtime chose (TrainingSession::SaveAlgorithmChoices,
  // timed convolutions: they decide the rounding), by rank: saved in every state, so that a
  // resumed run computes as the interrupted one.
  // A recovery snapshot after global step `session.steps_done()`, where the next step starts
  // at `next`; `tally` is the job's figures of the epoch so far. Lead only. Returns its path.
  std::string SaveSnapshot(TrainingSession& session, int64_t epoch, const SamplerState& next,
                           const TaskFigures& tally, const ModelEma* ema, const std::vector<std::string>& choices);
  // The checkpoint after `epochs_done` epochs: STEM.onnx (the inference model), STEM_ema.onnx
  // with --model-ema, STEM.state, classes.txt for named classes. Lead only. Returns STEM.
  std::string SaveEpoch(TrainingSession& session, int64_t epochs_done, const SamplerState& sampler,
                        const ModelEma* ema, const std::vector<std::string>& class_names,
                        const std::vector<std::string>& choices);

  // The settings a state records (and a resume must match); also the data-parallel
  // fingerprint's part that says ranks run the same job.
  static std::map<std::string, std::string> RunSettings(const TrainerOptions& o);

 private:
  void WriteState(TrainingSession& session, int64_t epochs_done, const SamplerState& sampler, const std::string& path,
                  const TaskFigures& tally, const ModelEma* ema, const std::vector<std::string>& choices);

  const TrainerOptions& o_;
  std::string fingerprint_;
  int rank_;
  bool lead_;
  bool cpu_;
  std::string created_dir_;  // the folder this run created (removed again if left empty)
};

}  // namespace ot
