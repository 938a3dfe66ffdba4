// Communicator registry, error names and buffer checks shared by every backend.
#include "comm/communicator.h"

#include <map>
#include <mutex>

#include "comm/gloo_communicator.h"
#include "runtime/core/plugin.h"

namespace ot {
namespace {

struct BackendRegistry {
  std::mutex mu;
  std::map<std::string, CommunicatorFactory> factories;
};

BackendRegistry& Registry() {
  static BackendRegistry* registry = [] {
    auto* r = new BackendRegistry;
    r->factories["gloo"] = [](const CommConfig& config) { return CreateGlooCommunicator(config); };
    return r;
  }();
  return *registry;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

const char* CommErrorKindName(CommErrorKind kind) {
  switch (kind) {
    case CommErrorKind::kTimeout: return "timeout";
    case CommErrorKind::kPeerLost: return "peer lost";
    case CommErrorKind::kMismatch: return "mismatch";
    case CommErrorKind::kInvalid: return "invalid";
    case CommErrorKind::kUnavailable: return "unavailable";
    case CommErrorKind::kAborted: return "aborted";
  }
  return "unknown";
}

std::string DescribeRanks(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

const char* AllreduceAlgorithmName(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::kAuto: return "auto";
    case AllreduceAlgorithm::kRing: return "ring";
    case AllreduceAlgorithm::kRingChunked: return "ring_chunked";
    case AllreduceAlgorithm::kHalvingDoubling: return "halving_doubling";
    case AllreduceAlgorithm::kBcube: return "bcube";
  }
  return "unknown";
}

AllreduceAlgorithm ParseAllreduceAlgorithm(const std::string& name) {
  for (auto a : {AllreduceAlgorithm::kAuto, AllreduceAlgorithm::kRing,
                 AllreduceAlgorithm::kRingChunked, AllreduceAlgorithm::kHalvingDoubling,
                 AllreduceAlgorithm::kBcube}) {
    if (name == AllreduceAlgorithmName(a)) return a;
  }
  throw CommError(CommErrorKind::kInvalid,
                  "unknown allreduce algorithm '" + name +
                      "'; use auto, ring, ring_chunked, halving_doubling or bcube");
}

void RegisterCommunicatorBackend(const std::string& name, CommunicatorFactory factory) {
  auto& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[name] = std::move(factory);
}

std::vector<std::string> CommunicatorBackends() {
  auto& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

std::unique_ptr<Communicator> CreateCommunicator(const std::string& backend,
                                                 const CommConfig& config) {
  std::string name = backend;
  if (name == "auto") name = config.device.type == DeviceType::kCUDA ? "nccl" : "gloo";
  auto find = [&name] {
    auto& r = Registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(name);
    return it != r.factories.end() ? it->second : CommunicatorFactory();
  };
  CommunicatorFactory factory = find();
  if (!factory && PluginBuilt(name)) {
    // The NCCL and MPI backends are plugins: loading one registers its factory.
    try {
      LoadPlugin(name);
    } catch (const Error& e) {
      throw CommError(CommErrorKind::kUnavailable, e.what());
    }
    factory = find();
  }
  if (!factory) {
    if (name == "mpi") throw CommError(CommErrorKind::kInvalid, NoMpiBackendMessage());
    std::string hint = name == "nccl" ? " (NCCL needs a CUDA build; use --backend gloo for CPU "
                                        "training)"
                                      : "";
    throw CommError(CommErrorKind::kInvalid,
                    "communication backend '" + name + "' is not in this build" + hint +
                        "; available: " + JoinNames(CommunicatorBackends()));
  }
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size) {
    throw CommError(CommErrorKind::kInvalid,
                    StrFormat("rank %d of world size %d is not valid: the rank must be in "
                              "[0, world size)",
                              config.rank, config.size));
  }
  return factory(config);
}

void CheckWorldSized(const CommBuffer& part, const CommBuffer& whole, int world_size, const char* op,
                     const char* which) {
  if (part.dtype != whole.dtype || whole.count != part.count * static_cast<size_t>(world_size)) {
    throw CommError(CommErrorKind::kInvalid,
                    StrFormat("%s: the %s must hold world size (%d) x %zu %s elements, not %zu %s", op, which,
                              world_size, part.count, DTypeName(part.dtype).c_str(), whole.count,
                              DTypeName(whole.dtype).c_str()));
  }
}

void CheckHostReducible(const CommBuffer& buffer, const char* op, const char* backend, bool reducible) {
  if (!reducible) {
    throw CommError(CommErrorKind::kInvalid,
                    StrFormat("%s: the %s backend reduces float32, float64, float16 and bfloat16 buffers, not %s", op,
                              backend, DTypeName(buffer.dtype).c_str()));
  }
  if (buffer.device.type != DeviceType::kCPU) {
    throw CommError(CommErrorKind::kInvalid,
                    StrFormat("%s: the %s backend works on host memory; this buffer is on a CUDA device (use --backend "
                              "nccl or auto)",
                              op, backend));
  }
}

void CheckBuffer(const CommBuffer& buffer, const char* op, const char* which) {
  if (buffer.count > 0 && buffer.data == nullptr) {
    throw CommError(CommErrorKind::kInvalid,
                    StrFormat("%s: the %s buffer is null but holds %zu elements", op, which,
                              buffer.count));
  }
  if (DTypeSize(buffer.dtype) == 0) {
    throw CommError(CommErrorKind::kInvalid,
                    StrFormat("%s: the %s buffer has data type %s, which has no fixed size", op,
                              which, DTypeName(buffer.dtype).c_str()));
  }
}

}  // namespace ot
