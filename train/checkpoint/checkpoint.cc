// Training checkpoints: ModelProto as the container (initializers for tensors,
// metadata_props for scalars) followed by a 16-byte trailer: "OTCK", CRC-32 of the
// payload, payload length.
#include "train/checkpoint/checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include <onnx/onnx_pb.h>

#include "graph/error.h"
#include "graph/file_util.h"
#include "graph/tensor_proto.h"

namespace ot {

namespace {
constexpr char kMagic[4] = {'O', 'T', 'C', 'K'};
constexpr size_t kTrailer = 16;

uint32_t Crc32(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t done = 0;
  while (done < bytes.size()) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(bytes.size() - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), chunk);
    done += chunk;
  }
  return static_cast<uint32_t>(crc);
}

// A non-negative count written by WriteTrainingState (std::stoll would throw
// std::invalid_argument, not ot::Error, on a crafted file and accept "12abc").
int64_t ParseCount(const std::string& text, const std::string& key, const std::string& where) {
  size_t used = 0;
  long long v = -1;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  OT_CHECK(used == text.size() && used > 0 && v >= 0, "%s: '%s' is '%s', not a count", where.c_str(), key.c_str(),
           text.c_str());
  return v;
}
}  // namespace

int64_t TrainingState::Count(const std::string& key, const std::string& where) const {
  return ParseCount(Scalar(key, where), key, "checkpoint '" + where + "'");
}

const HostTensor* TrainingState::FindTensor(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const std::string& TrainingState::Scalar(const std::string& key, const std::string& where) const {
  auto it = scalars.find(key);
  OT_CHECK(it != scalars.end(), "checkpoint '%s' lacks '%s' (written by another version?)", where.c_str(), key.c_str());
  return it->second;
}

void WriteTrainingState(const TrainingState& state, const std::string& path) {
  onnx::ModelProto proto;
  proto.set_ir_version(8);
  proto.set_producer_name("onnx-train checkpoint");
  proto.mutable_graph()->set_name("training_state");
  auto set = [&](const std::string& k, const std::string& v) {
    auto* p = proto.add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  };
  set("epochs_done", std::to_string(state.epochs_done));
  set("global_step", std::to_string(state.global_step));
  for (const auto& [k, v] : state.scalars) set(k, v);
  for (const auto& t : state.tensors) TensorToProto(t, proto.mutable_graph()->add_initializer());
  std::string payload;
  OT_CHECK(proto.SerializeToString(&payload), "cannot serialise the training state for '%s' (over 2 GB?)",
           path.c_str());
  const uint32_t crc = Crc32(payload);
  const uint64_t length = payload.size();
  char trailer[kTrailer];
  std::memcpy(trailer, kMagic, 4);
  std::memcpy(trailer + 4, &crc, 4);
  std::memcpy(trailer + 8, &length, 8);
  payload.append(trailer, kTrailer);
  WriteFileAtomic(path, payload);
}

TrainingState ReadTrainingState(const std::string& path) {
  std::string bytes = ReadFileBytes(path);
  const std::string where = "checkpoint '" + path + "'";
  OT_CHECK(bytes.size() >= kTrailer && std::memcmp(bytes.data() + bytes.size() - kTrailer, kMagic, 4) == 0,
           "%s is not an onnx-train training state or is truncated (no trailer)", where.c_str());
  uint32_t crc = 0;
  uint64_t length = 0;
  std::memcpy(&crc, bytes.data() + bytes.size() - kTrailer + 4, 4);
  std::memcpy(&length, bytes.data() + bytes.size() - kTrailer + 8, 8);
  OT_CHECK(length == bytes.size() - kTrailer, "%s is truncated: %llu payload bytes promised, %zu present",
           where.c_str(), (unsigned long long)length, bytes.size() - kTrailer);
  bytes.resize(bytes.size() - kTrailer);
  OT_CHECK(Crc32(bytes) == crc, "%s is corrupt: its checksum does not match; use an older checkpoint", where.c_str());
  onnx::ModelProto proto;
  OT_CHECK(proto.ParseFromString(bytes), "%s cannot be parsed although its checksum matches", where.c_str());
  TrainingState s;
  for (const auto& kv : proto.metadata_props()) s.scalars[kv.key()] = kv.value();
  s.epochs_done = ParseCount(s.Scalar("epochs_done", path), "epochs_done", where);
  s.global_step = ParseCount(s.Scalar("global_step", path), "global_step", where);
  s.scalars.erase("epochs_done");
  s.scalars.erase("global_step");
  for (const auto& t : proto.graph().initializer()) s.tensors.push_back(TensorFromProto(t, DirName(path), where));
  return s;
}

std::string ModelFingerprint(const Model& model) {
  std::string text;
  for (const auto& n : model.graph.nodes) text += n.domain + "." + n.op_type + "(" + std::to_string(n.inputs.size()) + ");";
  for (const auto& t : model.graph.initializers) text += t.name + ShapeString(t.dims) + DTypeName(t.dtype) + ";";
  for (const auto& v : model.graph.inputs) text += v.name + v.ShapeString() + ";";
  return StrFormat("%08x-%zu", Crc32(text), text.size());
}

std::string CheckpointStem(const std::string& dir, int64_t epoch) {
  return dir + "/" + StrFormat("epoch_%04lld", (long long)epoch);
}

void PrepareCheckpointDir(const std::string& dir) {
  try {
    MakeDirectories(dir);
  } catch (const Error& e) {
    throw Error(std::string("cannot use the checkpoint folder: ") + e.what());
  }
  OT_CHECK(::access(dir.c_str(), W_OK) == 0, "checkpoint folder '%s' is not writable; choose another with --checkpoint-dir",
           dir.c_str());
}

namespace {
std::vector<std::string> ListStates(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.rfind(prefix, 0) == 0 && n.size() > 6 && n.compare(n.size() - 6, 6, ".state") == 0) out.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());  // zero-padded numbers: oldest first
  return out;
}
}  // namespace

std::string SnapshotPath(const std::string& dir, int64_t global_step) {
  return dir + "/" + StrFormat("step_%010lld.state", (long long)global_step);
}

void PruneSnapshots(const std::string& dir, int keep) {
  std::vector<std::string> snaps = ListStates(dir, "step_");
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep, 0)) < snaps.size(); ++i)
    ::unlink((dir + "/" + snaps[i]).c_str());
}

std::string FindLatestCheckpoint(const std::string& dir) {
  // An epoch model without its state (a save cut short, by a full disk say) cannot resume:
  // it is named, not passed over in silence.
  if (DIR* d = ::opendir(dir.c_str())) {
    std::vector<std::string> orphans;
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.rfind("epoch_", 0) != 0 || n.size() < 6 || n.compare(n.size() - 5, 5, ".onnx") != 0 ||
          n.find("_ema.onnx") != std::string::npos)
        continue;
      const std::string state = dir + "/" + n.substr(0, n.size() - 5) + ".state";
      if (::access(state.c_str(), R_OK) != 0) orphans.push_back(n);
    }
    ::closedir(d);
    std::sort(orphans.begin(), orphans.end());
    for (const std::string& n : orphans)
      std::cerr << "onnx-train: warning: passing over " << dir << "/" << n << ": its training state "
                << n.substr(0, n.size() - 5) << ".state is missing (the save was cut short, e.g. by a full disk), so "
                << "it cannot be resumed exactly; the run resumes from the newest complete state, if any\n";
  }
  std::string best;
  int64_t best_step = -1;
  for (const char* prefix : {"epoch_", "step_"}) {
    for (const auto& n : ListStates(dir, prefix)) {
      try {
        TrainingState s = ReadTrainingState(dir + "/" + n);
        if (s.global_step > best_step) {  // an epoch checkpoint wins a tie (listed first)
          best_step = s.global_step;
          best = dir + "/" + n;
        }
      } catch (const Error& e) {
        std::cerr << "onnx-train: warning: skipping " << e.what() << "\n";
      }
    }
  }
  return best;
}

}  // namespace ot
