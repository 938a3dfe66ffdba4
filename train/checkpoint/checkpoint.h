// Training checkpoints. A checkpoint of epoch E in folder D is two files:
//   D/epoch_E.onnx   the inference model (eval mode, trained weights and BatchNorm
//                    statistics): the ONNX checker accepts it, `eval` and `infer` run it;
//   D/epoch_E.state  everything an exact continuation needs: every state tensor
//                    (weights, statistics, optimizer moments) and the scalars (epoch, step,
//                    sampler, RNG streams, the model's fingerprint, the run's settings).
// Recovery snapshots (D/step_S.state) hold the same state mid-epoch.
// All are written atomically (temporary file, fsync, rename); the state file ends in a
// CRC-32 trailer that is verified on load, so a torn or corrupt file is never resumed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/host_tensor.h"
#include "graph/ir.h"

namespace ot {

struct TrainingState {
  int64_t epochs_done = 0;  // completed epochs
  int64_t global_step = 0;  // optimizer steps taken
  std::map<std::string, std::string> scalars;
  std::vector<HostTensor> tensors;

  const HostTensor* FindTensor(const std::string& name) const;
  // scalars[key], or throws naming the checkpoint and the key.
  const std::string& Scalar(const std::string& key, const std::string& where) const;
  // scalars[key] as a non-negative count; throws ot::Error naming the key otherwise.
  int64_t Count(const std::string& key, const std::string& where) const;
};

void WriteTrainingState(const TrainingState& state, const std::string& path);
// Throws ot::Error for a missing, truncated or corrupt file (checksum mismatch).
TrainingState ReadTrainingState(const std::string& path);

// A fingerprint of a forward model's structure and parameter shapes (not values): a
// checkpoint only resumes the model it was made from.
std::string ModelFingerprint(const Model& model);

std::string CheckpointStem(const std::string& dir, int64_t epoch);
// Creates the folder if needed and checks that files can be written there.
void PrepareCheckpointDir(const std::string& dir);
// Recovery snapshots between epoch checkpoints (--snapshot-every): D/step_S.state.
std::string SnapshotPath(const std::string& dir, int64_t global_step);
// Deletes all but the newest `keep` snapshots.
void PruneSnapshots(const std::string& dir, int keep);
// The state file (epoch checkpoint or snapshot) in dir with the most steps done whose
// checksum verifies ("" when none). Corrupt files are skipped with a warning on stderr.
std::string FindLatestCheckpoint(const std::string& dir);

}  // namespace ot
