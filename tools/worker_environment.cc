// The training process's environment (see worker_environment.h).
#include "tools/worker_environment.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "train/progress.h"

namespace ot {

namespace {

// Tells the launcher that this worker is alive: touches the file at most once a second.
class HeartbeatFile final : public StepObserver {
 public:
  explicit HeartbeatFile(std::string path) : path_(std::move(path)) {}
  void AfterStep(int64_t, int) override {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::futimens(fd, nullptr);
      ::close(fd);
    }
  }

 private:
  std::string path_;
  std::chrono::steady_clock::time_point last_;
};

// Kills (or stops) the process at a chosen global step: the chaos tests' failures.
class FaultInjector final : public StepObserver {
 public:
  FaultInjector(int64_t step, int only_rank, bool hang) : step_(step), only_rank_(only_rank), hang_(hang) {}
  void AfterStep(int64_t global_step, int rank) override {
    if ((only_rank_ >= 0 && rank != only_rank_) || global_step != step_) return;
    ::raise(hang_ ? SIGSTOP : SIGKILL);
  }

 private:
  int64_t step_;
  int only_rank_;
  bool hang_;
};

std::vector<int64_t> StepList(const char* text) {
  std::vector<int64_t> out;
  for (const char* p = text; *p;) {
    char* end = nullptr;
    out.push_back(std::strtoll(p, &end, 10));
    p = *end == ',' ? end + 1 : end + std::strlen(end);
  }
  return out;
}

}  // namespace

void ReadWorkerEnvironment(TrainerOptions* o) {
  o->output_prefixed = std::getenv(kEnvOutputPrefixed) != nullptr;
  o->output_is_terminal = std::getenv(kEnvOutputIsTerminal) != nullptr;
  if (const char* bind = std::getenv("ONNXTRAIN_BIND_ADDR"); bind && *bind && o->bind_addr.empty()) o->bind_addr = bind;
  if (const char* path = std::getenv("ONNXTRAIN_HEARTBEAT_FILE"); path && *path)
    o->observers.push_back(std::make_shared<HeartbeatFile>(path));
  if (const char* steps = std::getenv("ONNXTRAIN_FAULT_KILL_AT_STEPS")) {
    const std::vector<int64_t> at = StepList(steps);
    const char* restart = std::getenv("ONNXTRAIN_RESTART_COUNT");
    const size_t k = restart ? static_cast<size_t>(std::atoi(restart)) : 0;
    const char* rank = std::getenv("ONNXTRAIN_FAULT_RANK");
    const char* mode = std::getenv("ONNXTRAIN_FAULT_MODE");
    if (k < at.size())
      o->observers.push_back(std::make_shared<FaultInjector>(at[k], rank ? std::atoi(rank) : -1,
                                                             mode && std::strcmp(mode, "hang") == 0));
  }
}

}  // namespace ot
