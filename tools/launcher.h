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

#include <functional>
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
  // Start the ranks through mpirun (--backend mpi): MPI tells each its rank; restarts
  // start a new MPI job. No per-rank heartbeat then.
  bool mpirun = false;
  // The rendezvous store the workers are told (ONNXTRAIN_RDZV): --rdzv, or the launcher's
  // own ONNXTRAIN_RDZV; empty: a fresh folder per attempt.
  std::string rendezvous;
  // The command that continues the run, for the workers' messages (ONNXTRAIN_CONTINUE_COMMAND).
  std::string continue_command;
};

// Runs the workers to completion; returns the process exit status for the launcher.
int LaunchWorkers(const LaunchOptions& options);

// This program's own path (/proc/self/exe).
std::string ProgramPath();
// Open MPI's launcher on PATH ($ONNXTRAIN_MPIRUN overrides); empty when there is none.
std::string FindMpirun();
// The command that starts `np` ranks of this program with `args` through mpirun on this
// host: --oversubscribe (more ranks than cores is allowed), --bind-to none (each rank's
// threads may use any core) or, with bind_to_core and no more ranks than cores, one core
// per rank (single-threaded ranks: bench-comm), the shared-memory transport (btl
// self,vader) and any words of $ONNXTRAIN_MPIRUN_ARGS. Throws ot::Error naming what to
// install when mpirun is absent.
std::vector<std::string> MpirunCommand(int np, const std::vector<std::string>& args, bool bind_to_core = false);
// As root, mpirun refuses to start unless told otherwise: the command then carries
// --allow-run-as-root (Open MPI's), and the first call says so in one line.
// This process's environment as comm/'s LaunchInfoFromEnvironment reads it (getenv), with
// ONNXTRAIN_RDZV replaced by `rendezvous` when that is not empty (--rdzv).
std::function<const char*(const char*)> ProcessEnvironment(const std::string& rendezvous = "");
// Whether this process is a rank that mpirun started (OMPI_COMM_WORLD_RANK is set).
bool StartedByMpirun();

// Environment variable names shared by the launcher and the workers.
constexpr const char* kEnvRank = "ONNXTRAIN_RANK";
constexpr const char* kEnvWorldSize = "ONNXTRAIN_WORLD_SIZE";
constexpr const char* kEnvLocalRank = "ONNXTRAIN_LOCAL_RANK";
constexpr const char* kEnvRendezvous = "ONNXTRAIN_RDZV";
constexpr const char* kEnvRunId = "ONNXTRAIN_RUN_ID";
constexpr const char* kEnvRestartCount = "ONNXTRAIN_RESTART_COUNT";
// File a worker touches after each step (set by the launcher; one per rank).
constexpr const char* kEnvHeartbeatFile = "ONNXTRAIN_HEARTBEAT_FILE";
// The command that continues an interrupted run (set by the launcher for its workers).
constexpr const char* kEnvContinueCommand = "ONNXTRAIN_CONTINUE_COMMAND";

}  // namespace ot
