// Rendezvous stores (Gloo's FileStore and RedisStore scoped to one run), the join
// protocol with its fingerprint check, and rank discovery from launcher environments.
#include "comm/rendezvous.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/redis_store.h>

namespace ot {
namespace {

using Clock = std::chrono::steady_clock;

// Gloo's FileStore keeps its existence check protected; this makes it usable.
class CheckableFileStore : public gloo::rendezvous::FileStore {
 public:
  using FileStore::FileStore;
  using FileStore::check;
};

// Creates DIR and its parents; returns errno text on failure, empty on success.
std::string MakeDirs(const std::string& dir) {
  std::string partial;
  std::stringstream parts(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/') partial = "/";
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    partial += part + "/";
    if (mkdir(partial.c_str(), 0777) != 0 && errno != EEXIST) return std::strerror(errno);
  }
  return "";
}

// Empty when this process can create files in dir, else the reason.
std::string ProbeWritable(const std::string& dir) {
  std::string probe = dir + "/.probe-" + std::to_string(getpid());
  int fd = open(probe.c_str(), O_CREAT | O_WRONLY | O_EXCL, 0600);
  if (fd < 0) return std::strerror(errno);
  close(fd);
  unlink(probe.c_str());
  return "";
}

// Connects to host:port within timeout; empty on success, else the reason.
std::string ProbeTcp(const std::string& host, int port, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rv = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rv != 0) return std::string("cannot resolve host: ") + gai_strerror(rv);
  std::string reason = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      close(fd);
      reason.clear();
      break;
    }
    if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int ready = poll(&p, 1, static_cast<int>(std::max<int64_t>(1, timeout.count())));
      int err = 0;
      socklen_t len = sizeof(err);
      if (ready == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
        close(fd);
        reason.clear();
        break;
      }
      reason = ready == 0 ? "connect timed out" : std::strerror(err ? err : errno);
    } else {
      reason = std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(found);
  return reason;
}

std::string HostName() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::string JoinKey(int rank) { return "join." + std::to_string(rank); }

}  // namespace

// Gloo store with every key prefixed by the run id.
class RendezvousStore::ScopedStore : public gloo::rendezvous::Store {
 public:
  ScopedStore(std::unique_ptr<gloo::rendezvous::Store> inner,
              std::function<bool(const std::string&)> has, std::string prefix)
      : inner_(std::move(inner)), has_(std::move(has)), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    inner_->set(prefix_ + key, data);
  }
  std::vector<char> get(const std::string& key) override { return inner_->get(prefix_ + key); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> scoped;
    for (const auto& k : keys) scoped.push_back(prefix_ + k);
    inner_->wait(scoped, timeout);
  }
  bool Has(const std::string& key) { return has_(prefix_ + key); }

 private:
  std::unique_ptr<gloo::rendezvous::Store> inner_;
  std::function<bool(const std::string&)> has_;
  std::string prefix_;
};

RendezvousStore::RendezvousStore(std::unique_ptr<ScopedStore> store, std::string description,
                                 int rank, bool is_file_store)
    : store_(std::move(store)),
      description_(std::move(description)),
      rank_(rank),
      is_file_store_(is_file_store) {}

RendezvousStore::~RendezvousStore() = default;

std::unique_ptr<RendezvousStore> RendezvousStore::Open(const std::string& spec,
                                                       const std::string& run_id, int rank,
                                                       std::chrono::milliseconds connect_timeout) {
  const std::string prefix = "onnx-train." + run_id + ".";
  if (spec.rfind("redis://", 0) == 0) {
    std::string hostport = spec.substr(8);
    if (!hostport.empty() && hostport.back() == '/') hostport.pop_back();
    size_t colon = hostport.rfind(':');
    std::string host = colon == std::string::npos ? hostport : hostport.substr(0, colon);
    int port = 6379;
    if (colon != std::string::npos) {
      char* end = nullptr;
      long p = std::strtol(hostport.c_str() + colon + 1, &end, 10);
      if (*end != '\0' || p <= 0 || p > 65535) {
        throw CommError(CommErrorKind::kInvalid,
                        "rendezvous '" + spec + "': the port is not a number in 1..65535; "
                        "write redis://HOST:PORT");
      }
      port = static_cast<int>(p);
    }
    std::string why = ProbeTcp(host, port, std::min(connect_timeout, std::chrono::milliseconds(10000)));
    if (!why.empty()) {
      throw CommError(CommErrorKind::kUnavailable,
                      StrFormat("rank %d: cannot reach the Redis rendezvous store at %s:%d (%s); "
                                "start redis-server there (reachable from every host) or fix "
                                "--rdzv",
                                rank, host.c_str(), port, why.c_str()));
    }
    std::unique_ptr<gloo::rendezvous::RedisStore> redis;
    try {
      redis = std::make_unique<gloo::rendezvous::RedisStore>(host, port);
    } catch (const std::exception& e) {
      throw CommError(CommErrorKind::kUnavailable,
                      StrFormat("rank %d: connecting to Redis at %s:%d failed: %s", rank,
                                host.c_str(), port, e.what()));
    }
    auto* raw = redis.get();  // owned by the ScopedStore, which outlives the closure
    auto scoped = std::make_unique<ScopedStore>(
        std::move(redis), [raw](const std::string& key) { return raw->check({key}); }, prefix);
    return std::unique_ptr<RendezvousStore>(new RendezvousStore(
        std::move(scoped), StrFormat("RedisStore %s:%d (run %s)", host.c_str(), port,
                                     run_id.c_str()),
        rank, false));
  }

  std::string dir;
  if (spec.empty()) {
    dir = DefaultRendezvousDir(run_id);
  } else if (spec.rfind("file:", 0) == 0) {
    dir = spec.substr(5);
    if (dir.rfind("//", 0) == 0) dir = dir.substr(2);  // file:///abs/path
  } else {
    throw CommError(CommErrorKind::kInvalid,
                    "rendezvous '" + spec + "' is not understood; use file:DIR or "
                    "redis://HOST:PORT (or nothing for a FileStore in a temp directory)");
  }
  if (dir.empty()) {
    throw CommError(CommErrorKind::kInvalid, "rendezvous 'file:' needs a directory: file:DIR");
  }
  std::string why = MakeDirs(dir);
  if (why.empty()) why = ProbeWritable(dir);
  if (!why.empty()) {
    throw CommError(CommErrorKind::kUnavailable,
                    StrFormat("rank %d: the rendezvous directory %s cannot be used (%s); pick a "
                              "writable directory with --rdzv file:DIR (on a shared file "
                              "system for several hosts)",
                              rank, dir.c_str(), why.c_str()));
  }
  auto file = std::make_unique<CheckableFileStore>(dir);
  auto* raw = file.get();
  auto scoped = std::make_unique<ScopedStore>(
      std::move(file), [raw](const std::string& key) { return raw->check({key}); }, prefix);
  return std::unique_ptr<RendezvousStore>(
      new RendezvousStore(std::move(scoped), "FileStore " + dir, rank, true));
}

void RendezvousStore::Rethrow(const char* what, const std::exception& e) const {
  throw CommError(CommErrorKind::kUnavailable,
                  StrFormat("rank %d: rendezvous store %s: %s failed: %s", rank_,
                            description_.c_str(), what, e.what()));
}

void RendezvousStore::Set(const std::string& key, const std::string& value) {
  try {
    store_->set(key, std::vector<char>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    Rethrow(("setting key '" + key + "'").c_str(), e);
  }
}

std::string RendezvousStore::Get(const std::string& key) {
  try {
    auto bytes = store_->get(key);
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception& e) {
    Rethrow(("reading key '" + key + "'").c_str(), e);
  }
}

bool RendezvousStore::Has(const std::string& key) {
  try {
    return store_->Has(key);
  } catch (const std::exception& e) {
    Rethrow(("looking up key '" + key + "'").c_str(), e);
  }
}

std::vector<std::string> RendezvousStore::WaitFor(const std::vector<std::string>& keys,
                                                  std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::vector<std::string> missing = keys;
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    missing.erase(std::remove_if(missing.begin(), missing.end(),
                                 [&](const std::string& k) { return Has(k); }),
                  missing.end());
    if (missing.empty() || Clock::now() >= deadline) return missing;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

namespace {

// Forwards to another Gloo store with every key prefixed.
class PrefixedGlooStore : public gloo::rendezvous::Store {
 public:
  PrefixedGlooStore(gloo::rendezvous::Store& base, std::string prefix)
      : base_(base), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    base_.set(prefix_ + key, data);
  }
  std::vector<char> get(const std::string& key) override { return base_.get(prefix_ + key); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> scoped;
    for (const auto& k : keys) scoped.push_back(prefix_ + k);
    base_.wait(scoped, timeout);
  }

 private:
  gloo::rendezvous::Store& base_;
  std::string prefix_;
};

}  // namespace

std::unique_ptr<gloo::rendezvous::Store> RendezvousStore::GlooStore(const std::string& scope) {
  return std::make_unique<PrefixedGlooStore>(*store_, scope + ".");
}

std::string DefaultRendezvousDir(const std::string& run_id) {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp && *tmp ? tmp : "/tmp";
  return base + "/onnx-train-rdzv/" + run_id;
}

std::string NewRunId() {
  std::random_device device;
  auto now = std::chrono::system_clock::now().time_since_epoch().count();
  uint64_t mix = (static_cast<uint64_t>(device()) << 32) ^ device() ^
                 static_cast<uint64_t>(now) ^ (static_cast<uint64_t>(getpid()) << 16);
  return StrFormat("%llx-%d", static_cast<unsigned long long>(mix), static_cast<int>(getpid()));
}

void JoinRun(RendezvousStore& store, const CommConfig& config) {
  const int rank = config.rank;
  if (config.fingerprint.find('\n') != std::string::npos) {
    throw CommError(CommErrorKind::kInvalid,
                    "the model fingerprint must be one line (it holds a newline)");
  }
  const std::string me = StrFormat("%s:%d:%s", HostName().c_str(), static_cast<int>(getpid()),
                                   NewRunId().c_str());
  if (store.Has(JoinKey(rank))) {
    auto other = SplitLines(store.Get(JoinKey(rank)));
    throw CommError(CommErrorKind::kMismatch,
                    StrFormat("rank %d is already taken in run '%s' (by process %s); give each "
                              "process its own rank, or start a new run (new run id or an "
                              "empty rendezvous directory)",
                              rank, config.run_id.c_str(),
                              other.size() > 2 ? other[2].c_str() : "?"),
                    {rank});
  }
  store.Set(JoinKey(rank), StrFormat("%d\n%s\n%s", config.size, config.fingerprint.c_str(),
                                     me.c_str()));
  std::vector<std::string> keys;
  for (int r = 0; r < config.size; ++r) keys.push_back(JoinKey(r));
  auto missing = store.WaitFor(keys, config.timeout);
  if (!missing.empty()) {
    std::vector<int> ranks;
    for (const auto& k : missing) ranks.push_back(std::atoi(k.c_str() + 5));
    throw CommError(CommErrorKind::kTimeout,
                    StrFormat("rank %d: %s of %d did not join run '%s' through %s within %lld "
                              "ms; check that it was started (with the same world size, run "
                              "id and store) and did not fail before connecting (see its log)",
                              rank, DescribeRanks(ranks).c_str(), config.size,
                              config.run_id.c_str(), store.description().c_str(),
                              static_cast<long long>(config.timeout.count())),
                    ranks);
  }
  std::vector<int> other_size, other_fingerprint;
  std::string first_other_size, first_other_fingerprint;
  for (int r = 0; r < config.size; ++r) {
    auto lines = SplitLines(store.Get(JoinKey(r)));
    lines.resize(3);
    if (lines[2] != me && r == rank) {
      throw CommError(CommErrorKind::kMismatch,
                      StrFormat("rank %d was claimed by two processes (this one and %s); give "
                                "each process its own rank",
                                rank, lines[2].c_str()),
                      {rank});
    }
    if (lines[0] != std::to_string(config.size)) {
      other_size.push_back(r);
      first_other_size = lines[0];
    }
    if (lines[1] != config.fingerprint) {
      other_fingerprint.push_back(r);
      if (first_other_fingerprint.empty()) first_other_fingerprint = lines[1];
    }
  }
  if (!other_size.empty()) {
    throw CommError(CommErrorKind::kMismatch,
                    StrFormat("rank %d was started with world size %d but %s with world size "
                              "%s; start every rank with the same world size",
                              rank, config.size, DescribeRanks(other_size).c_str(),
                              first_other_size.c_str()),
                    other_size);
  }
  if (!other_fingerprint.empty()) {
    throw CommError(CommErrorKind::kMismatch,
                    StrFormat("model fingerprint mismatch: rank %d has '%s' but %s '%s'; every "
                              "rank must load the same model with the same settings",
                              rank, config.fingerprint.c_str(),
                              DescribeRanks(other_fingerprint).c_str(),
                              first_other_fingerprint.c_str()),
                    other_fingerprint);
  }
}

namespace {

// Reads an integer variable; false when unset, throws when malformed.
bool ReadInt(const EnvLookup& env, const char* name, int* out) {
  const char* text = env(name);
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < 0 || v > (1 << 24)) {
    throw CommError(CommErrorKind::kInvalid,
                    StrFormat("environment variable %s='%s' is not a non-negative integer", name,
                              text));
  }
  *out = static_cast<int>(v);
  return true;
}

std::string ReadText(const EnvLookup& env, const char* name) {
  const char* text = env(name);
  return text ? text : "";
}

bool IsLoopbackHost(const std::string& host) {
  return host.empty() || host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

struct LauncherVars {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;
};

}  // namespace

LaunchInfo LaunchInfoFromEnvironment(const EnvLookup& lookup, bool store_needed) {
  if (!lookup) throw CommError(CommErrorKind::kInvalid, "LaunchInfoFromEnvironment needs an environment lookup");
  const EnvLookup& env = lookup;
  static const LauncherVars kLaunchers[] = {
      {"onnx-train", "ONNXTRAIN_RANK", "ONNXTRAIN_WORLD_SIZE", "ONNXTRAIN_LOCAL_RANK"},
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
  };
  LaunchInfo info;
  for (const auto& l : kLaunchers) {
    if (!ReadInt(env, l.rank, &info.rank)) continue;
    if (!ReadInt(env, l.size, &info.size) || info.size < 1 || info.rank >= info.size) {
      throw CommError(CommErrorKind::kInvalid,
                      StrFormat("%s environment: %s=%d needs %s set to a world size above it",
                                l.source, l.rank, info.rank, l.size));
    }
    ReadInt(env, l.local_rank, &info.local_rank);
    info.source = l.source;
    break;
  }
  if (info.source.empty()) return info;

  // Run id and whether the ranks span several hosts, per launcher.
  bool multi_host = false;
  if (info.source == "onnx-train") info.local_size = info.size;  // its launcher starts ranks on one host
  std::string where;
  if (info.source == "torchrun") {
    std::string addr = ReadText(env, "MASTER_ADDR");
    int local_size = info.size;
    ReadInt(env, "LOCAL_WORLD_SIZE", &local_size);
    multi_host = local_size < info.size && !IsLoopbackHost(addr);
    info.local_size = local_size;
    info.run_id = "torchrun-" + ReadText(env, "TORCHELASTIC_RUN_ID") + "-" + addr + "-" +
                  ReadText(env, "MASTER_PORT");
    where = StrFormat("LOCAL_WORLD_SIZE %d < WORLD_SIZE %d", local_size, info.size);
  } else if (info.source == "slurm") {
    int nodes = 1;
    ReadInt(env, "SLURM_NNODES", &nodes);
    multi_host = nodes > 1;
    info.local_size = (info.size + std::max(nodes, 1) - 1) / std::max(nodes, 1);  // block distribution's most
    info.run_id = "slurm-" + ReadText(env, "SLURM_JOB_ID") + "." + ReadText(env, "SLURM_STEP_ID");
    where = StrFormat("SLURM_NNODES %d", nodes);
  } else if (info.source == "openmpi") {
    int local_size = info.size;
    ReadInt(env, "OMPI_COMM_WORLD_LOCAL_SIZE", &local_size);
    multi_host = local_size < info.size;
    info.local_size = local_size;
    std::string job = ReadText(env, "OMPI_MCA_ess_base_jobid");
    if (job.empty()) job = ReadText(env, "PMIX_NAMESPACE");
    info.run_id = "ompi-" + job;
    where = StrFormat("OMPI_COMM_WORLD_LOCAL_SIZE %d < OMPI_COMM_WORLD_SIZE %d", local_size,
                      info.size);
  }
  std::string run_id = ReadText(env, "ONNXTRAIN_RUN_ID");
  if (!run_id.empty()) info.run_id = run_id;
  for (char& c : info.run_id) {
    if (c == '/' || c == ':') c = '_';
  }
  info.rendezvous = ReadText(env, "ONNXTRAIN_RDZV");
  if (info.rendezvous.empty() && multi_host && store_needed) {
    throw CommError(CommErrorKind::kInvalid,
                    StrFormat("%s started ranks on several hosts (%s) but no rendezvous store "
                              "is set: start redis-server on a host every rank can reach and "
                              "set ONNXTRAIN_RDZV=redis://HOST:PORT (or --rdzv), or use "
                              "file:DIR on a shared file system",
                              info.source.c_str(), where.c_str()));
  }
  return info;
}

}  // namespace ot
