// The local launcher, like `torchrun --standalone`: `onnx-train MODEL --world-size N`
// starts N worker processes of this same program on this host, each told its rank through
// the environment (onnx-train's ONNXTRAIN_* variables and torchrun's RANK, WORLD_SIZE,
// LOCAL_RANK), with the CPU threads split among them and a fresh rendezvous folder per run.
// It prefixes every output line with the worker's rank, forwards Ctrl-C and SIGTERM to all
// workers, and when one worker fails it stops the others (SIGTERM, then SIGKILL after a
// grace period). With --max-restarts K it then starts all workers again from the newest
// checkpoint, up to K times; otherwise it exits non-zero naming the failed worker and its
// last lines of output. A worker that stops answering (no heartbeat for
// --heartbeat-timeout seconds) counts as failed too.
#pragma once

#include <string>
#include <vector>

namespace ot {

struct LaunchOptions {
  int world_size = 1;
  std::vector<std::string> worker_args;  // the command line for each worker (without the program)
  int threads_per_worker = 0;            // 0: split this machine's cores
  int max_restarts = 0;
  double grace_seconds = 10;             // SIGTERM -> SIGKILL
  std::string resume_flag = "--resume";  // appended to the workers' arguments on a restart
  std::string run_root;                  // where per-run rendezvous folders go ("" = /tmp)
  double monitor_interval_seconds = 0.2; // how often workers' exits and heartbeats are checked
  // A worker whose heartbeat (touched after every training step) is older than this is
  // taken as hung and fails the attempt; 0 turns the check off.
  double heartbeat_timeout_seconds = 0;
};

// Runs the workers to completion; returns the process exit status for the launcher.
int LaunchWorkers(const LaunchOptions& options);

// Environment variable names shared by the launcher and the workers.
constexpr const char* kEnvRank = "ONNXTRAIN_RANK";
constexpr const char* kEnvWorldSize = "ONNXTRAIN_WORLD_SIZE";
constexpr const char* kEnvLocalRank = "ONNXTRAIN_LOCAL_RANK";
constexpr const char* kEnvRendezvous = "ONNXTRAIN_RDZV";
constexpr const char* kEnvRunId = "ONNXTRAIN_RUN_ID";
constexpr const char* kEnvRestartCount = "ONNXTRAIN_RESTART_COUNT";
// File a worker touches after each step (set by the launcher; one per rank).
constexpr const char* kEnvHeartbeatFile = "ONNXTRAIN_HEARTBEAT_FILE";

}  // namespace ot
