// The local launcher: fork/exec of the workers, output relay with rank prefixes, signal
// forwarding, failure handling and restarts.
#include "tools/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <random>
#include <thread>

#include "graph/error.h"
#include "train/progress.h"

namespace ot {

namespace {

volatile sig_atomic_t g_signal = 0;        // the first SIGINT/SIGTERM
volatile sig_atomic_t g_signal_count = 0;  // how many arrived
void OnSignal(int sig) {
  if (g_signal == 0) g_signal = sig;
  g_signal_count = g_signal_count + 1;
}

struct Worker {
  int rank = 0;
  bool mpirun = false;  // the process is mpirun: its lines carry the rank (--tag-output)
  int tag_rank = 0;       // mpirun: the rank of the line being drawn (a bar's later segments carry no tag)
  bool continues = false; // mpirun: the next segment continues a line that a '\r' ended
  pid_t pid = -1;
  int out_fd = -1;  // stdout and stderr of the worker, merged
  std::string partial;
  std::deque<std::string> last_lines;
  bool exited = false;
  int status = 0;
};

std::string SelfPath() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  OT_CHECK(n > 0, "cannot find this program's own path (/proc/self/exe)");
  buf[n] = '\0';
  return buf;
}

std::string NewRunDir(const std::string& root) {
  std::random_device rd;
  const std::string id = StrFormat("%08x%08x", rd(), rd());
  const std::string dir = (root.empty() ? std::string("/tmp") : root) + "/onnx-train-run-" + id;
  OT_CHECK(::mkdir(dir.c_str(), 0700) == 0, "cannot create the rendezvous folder '%s': %s", dir.c_str(),
           std::strerror(errno));
  return dir;
}

bool g_bar_shown = false;  // a worker's progress bar is on the terminal's last line

// Drops the terminal's erase-line sequence that a worker's bar writes.
std::string WithoutEraseLine(std::string s) {
  for (size_t p; (p = s.find("\033[K")) != std::string::npos;) s.erase(p, 3);
  return s;
}

// mpirun --tag-output writes "[JOB,RANK]<stdout>:TEXT" (or <stderr>); sets *rank and
// strips the tag. False for mpirun's own lines.
bool StripMpiTag(std::string* line, int* rank) {
  if (line->empty() || (*line)[0] != '[') return false;
  const size_t comma = line->find(',');
  const size_t close = line->find(']');
  const size_t colon = line->find(">:");
  if (comma == std::string::npos || close == std::string::npos || colon == std::string::npos || comma > close ||
      close > colon)
    return false;
  *rank = std::atoi(line->c_str() + comma + 1);
  line->erase(0, colon + 2);
  return true;
}

// A progress bar update (a segment ended by '\r'): redrawn in place on the last line.
void EmitBar(Worker& w, std::string bar) {
  int rank = w.rank;
  if (w.mpirun) rank = StripMpiTag(&bar, &rank) ? (w.tag_rank = rank) : w.tag_rank;
  std::cout << "\r[rank " << rank << "] " << bar << "\033[K" << std::flush;
  g_bar_shown = true;
}

void Emit(Worker& w, std::string line) {
  if (g_bar_shown) std::cout << "\r\033[K";  // the line replaces the bar
  g_bar_shown = false;
  int rank = w.rank;
  bool from_rank = true;
  if (w.mpirun && StripMpiTag(&line, &rank)) {
    w.tag_rank = rank;
  } else if (w.mpirun) {
    rank = w.tag_rank;
    from_rank = w.continues;  // else mpirun's own line
  }
  if (from_rank) {
    std::cout << "[rank " << rank << "] " << line << "\n" << std::flush;
  } else {
    std::cout << "[mpirun] " << line << "\n" << std::flush;
  }
  w.last_lines.push_back(line);
  if (w.last_lines.size() > 10) w.last_lines.pop_front();
}

// Reads what is available from a worker; emits complete lines. Returns false at EOF.
bool Pump(Worker& w) {
  char buf[8192];
  ssize_t n = ::read(w.out_fd, buf, sizeof(buf));
  if (n <= 0) {
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (!w.partial.empty()) Emit(w, w.partial);
    w.partial.clear();
    ::close(w.out_fd);
    w.out_fd = -1;
    return false;
  }
  w.partial.append(buf, static_cast<size_t>(n));
  size_t pos;
  while ((pos = w.partial.find_first_of("\n\r")) != std::string::npos) {
    const bool bar = w.partial[pos] == '\r';
    std::string line = WithoutEraseLine(w.partial.substr(0, pos));
    w.partial.erase(0, pos + 1);
    if (!line.empty()) {
      if (bar) {
        EmitBar(w, line);
      } else {
        Emit(w, line);
      }
    }
    w.continues = bar;
  }
  // A bar that has been drawn but not yet ended by the next '\r': show it now.
  if (w.partial.size() > 3 && w.partial.compare(w.partial.size() - 3, 3, "\033[K") == 0) {
    const std::string bar = WithoutEraseLine(w.partial);
    if (!bar.empty()) {
      EmitBar(w, bar);
      w.partial.clear();
    }
  }
  return true;
}

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "ended";
}

// Starts `program` with `args` (argv[1:]) and `env` added to the environment.
pid_t Spawn(const std::string& self, const std::vector<std::string>& args, const std::vector<std::string>& env,
            int* out_fd) {
  int fds[2];
  OT_CHECK(::pipe(fds) == 0, "cannot create a pipe for a worker: %s", std::strerror(errno));
  pid_t pid = ::fork();
  OT_CHECK(pid >= 0, "cannot start a worker process: %s", std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group: a terminal's Ctrl-C reaches the launcher, which forwards it
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a launcher that dies (even by SIGKILL) takes its workers along
    if (::getppid() == 1) ::_exit(1);   // it died before prctl took effect
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    for (const auto& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(self.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(self.c_str(), argv.data());
    std::fprintf(stderr, "onnx-train: error: cannot start worker '%s': %s\n", self.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::close(fds[1]);
  *out_fd = fds[0];
  return pid;
}

// One attempt: start all workers, relay their output, wait for all. Returns the rank of
// the first worker that failed (-1 when all succeeded) and fills `failure`.
int RunOnce(const LaunchOptions& o, const std::string& self, const std::vector<std::string>& args, int restart,
            std::string* failure) {
  const std::string run_dir = NewRunDir(o.run_root);
  // With mpirun, one process (mpirun) starts every rank and MPI tells each its rank.
  std::vector<Worker> workers(o.mpirun ? 1 : static_cast<size_t>(o.world_size));
  // Strings must outlive the fork: putenv keeps pointers.
  std::vector<std::vector<std::string>> envs(workers.size());
  if (o.mpirun) {
    auto& env = envs[0];
    env = {std::string(kEnvRunId) + "=" + run_dir.substr(run_dir.rfind('-') + 1),
           std::string(kEnvRestartCount) + "=" + std::to_string(restart),
           std::string(kEnvOutputPrefixed) + "=1"};
    if (o.threads_per_worker > 0) env.push_back("OMP_NUM_THREADS=" + std::to_string(o.threads_per_worker));
    if (!o.continue_command.empty()) env.push_back(std::string(kEnvContinueCommand) + "=" + o.continue_command);
    std::vector<std::string> mpi_args = MpirunCommand(o.world_size, {});
    const std::string mpirun = mpi_args[0];
    mpi_args.erase(mpi_args.begin());
    mpi_args.push_back("--tag-output");
    mpi_args.push_back(self);
    mpi_args.insert(mpi_args.end(), args.begin(), args.end());
    workers[0].mpirun = true;
    workers[0].pid = Spawn(mpirun, mpi_args, env, &workers[0].out_fd);
  }
  for (int r = 0; r < o.world_size && !o.mpirun; ++r) {
    auto& env = envs[static_cast<size_t>(r)];
    env = {std::string(kEnvRank) + "=" + std::to_string(r),
           std::string(kEnvWorldSize) + "=" + std::to_string(o.world_size),
           std::string(kEnvLocalRank) + "=" + std::to_string(r),
           std::string(kEnvRendezvous) + "=" + (o.rendezvous.empty() ? "file:" + run_dir : o.rendezvous),
           std::string(kEnvRunId) + "=" + run_dir.substr(run_dir.rfind('-') + 1),
           std::string(kEnvRestartCount) + "=" + std::to_string(restart),
           "TORCHELASTIC_RESTART_COUNT=" + std::to_string(restart),
           "RANK=" + std::to_string(r),
           "WORLD_SIZE=" + std::to_string(o.world_size),
           "LOCAL_RANK=" + std::to_string(r)};
    if (o.threads_per_worker > 0) env.push_back("OMP_NUM_THREADS=" + std::to_string(o.threads_per_worker));
    if (!o.continue_command.empty()) env.push_back(std::string(kEnvContinueCommand) + "=" + o.continue_command);
    env.push_back(std::string(kEnvOutputPrefixed) + "=1");
    if (::isatty(STDOUT_FILENO)) env.push_back(std::string(kEnvOutputIsTerminal) + "=1");
    env.push_back(std::string(kEnvHeartbeatFile) + "=" + run_dir + "/heartbeat." + std::to_string(r));
    Worker& w = workers[static_cast<size_t>(r)];
    w.rank = r;
    w.pid = Spawn(self, args, env, &w.out_fd);
  }
  int failed = -1;
  bool stopping = false, interrupted = false, killed = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  auto signal_all = [&](int sig) {
    for (auto& w : workers)
      if (!w.exited) ::kill(w.pid, sig);
  };
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Worker*> owners;
    for (auto& w : workers)
      if (w.out_fd >= 0) {
        fds.push_back(pollfd{w.out_fd, POLLIN, 0});
        owners.push_back(&w);
      }
    if (!fds.empty()) {
      int n = ::poll(fds.data(), fds.size(), std::max(1, static_cast<int>(o.monitor_interval_seconds * 1000)));
      if (n > 0)
        for (size_t i = 0; i < fds.size(); ++i)
          if (fds[i].revents) Pump(*owners[i]);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (auto& w : workers) {
      if (w.exited) continue;
      int status = 0;
      if (::waitpid(w.pid, &status, WNOHANG) == w.pid) {
        w.exited = true;
        w.status = status;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed < 0 && !stopping) {
          failed = w.rank;
          *failure = (w.mpirun ? std::string("mpirun (the ranks' launcher) ")
                               : "worker rank " + std::to_string(w.rank) + " ") +
                     DescribeStatus(status);
        }
      }
    }
    if (o.heartbeat_timeout_seconds > 0 && failed < 0 && !stopping) {
      // A heartbeat file that exists but has gone stale: the worker is hung.
      const auto now = std::chrono::system_clock::now();
      for (auto& w : workers) {
        if (w.exited) continue;
        struct stat st {};
        const std::string hb = run_dir + "/heartbeat." + std::to_string(w.rank);
        if (::stat(hb.c_str(), &st) != 0) continue;
        const auto beat = std::chrono::system_clock::from_time_t(st.st_mtime);
        if (std::chrono::duration<double>(now - beat).count() > o.heartbeat_timeout_seconds) {
          failed = w.rank;
          *failure = StrFormat("worker rank %d stopped answering (no training step for %.0f s)", w.rank,
                               o.heartbeat_timeout_seconds);
          break;
        }
      }
    }
    if (g_signal && !interrupted) {
      // Forwarded once: each worker finishes its step, rank 0 saves a snapshot and says
      // how to continue. No kill deadline (saving may take a while); a second signal kills.
      interrupted = true;
      if (failed < 0) {
        *failure = std::string("interrupted by ") + strsignal(g_signal);
        failed = 0;
      }
      stopping = true;
      signal_all(g_signal == SIGINT ? SIGINT : SIGTERM);
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }
    if (g_signal_count >= 2 && !killed) {
      killed = true;
      signal_all(SIGKILL);
    }
    if (failed >= 0 && !stopping) {
      stopping = true;
      signal_all(SIGTERM);
      stop_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(o.grace_seconds * 1000));
    }
    if (stopping && std::chrono::steady_clock::now() > stop_deadline) {
      signal_all(SIGKILL);
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }
    bool all_done = true;
    for (auto& w : workers) all_done = all_done && w.exited && w.out_fd < 0;
    if (all_done) break;
  }
  bool with_tail = true;
  if (interrupted) {
    // Workers that stopped as asked (exit 130, or 0 when the run had just finished):
    // rank 0 has said where it stopped and how to continue; nothing to add.
    bool clean = !killed, before_start = !killed;
    for (const auto& w : workers) {
      clean = clean && WIFEXITED(w.status) && (WEXITSTATUS(w.status) == 130 || WEXITSTATUS(w.status) == 0);
      before_start = before_start && WIFSIGNALED(w.status);  // ended by the signal itself: not yet training
    }
    if (clean) failure->clear();
    if (killed) {
      *failure = "interrupted again: workers stopped at once without saving (the last checkpoint or snapshot stays)";
      with_tail = false;
    }
    if (before_start) {
      *failure = std::string("interrupted by ") + strsignal(g_signal) + " before training began; nothing saved";
      with_tail = false;
    }
  }
  if (failed >= 0 && with_tail && !failure->empty() && workers[0].mpirun) {
    // mpirun names the rank that ended the job ("mpirun noticed that process rank 1 with
    // PID ... exited on signal 9 (Killed)", or "Process name: [[JOB,1],RANK]").
    for (const auto& l : workers[0].last_lines) {
      size_t p = l.find("noticed that process rank ");
      if (p != std::string::npos) {
        const int rank = std::atoi(l.c_str() + p + 26);
        const size_t how = l.find(" exited");
        std::string what = how == std::string::npos ? " failed" : l.substr(how);
        if (what.back() == '.') what.pop_back();
        *failure = StrFormat("worker rank %d%s (mpirun ended the job)", rank, what.c_str());
        break;
      }
      p = l.find("Process name: [[");
      if (p != std::string::npos && l.find("],", p) != std::string::npos) {
        *failure = StrFormat("worker rank %d exited with an error (mpirun ended the job)",
                             std::atoi(l.c_str() + l.find("],", p) + 2));
      }
    }
  }
  if (failed >= 0 && with_tail && !failure->empty()) {
    const Worker& w = workers[static_cast<size_t>(failed)];
    std::string tail;
    for (const auto& l : w.last_lines) tail += "\n    " + l;
    *failure += tail.empty() ? " (no output)" : "; its last lines:" + tail;
  }
  std::string cmd = "rm -rf '" + run_dir + "'";
  if (std::system(cmd.c_str()) != 0) std::cerr << "onnx-train: warning: could not remove " << run_dir << "\n";
  return failed;
}

}  // namespace

std::string ProgramPath() { return SelfPath(); }

std::string FindMpirun() {
  if (const char* env = std::getenv("ONNXTRAIN_MPIRUN"); env && *env) return env;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = (end > start ? dirs.substr(start, end - start) : ".") + "/mpirun";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

std::vector<std::string> MpirunCommand(int np, const std::vector<std::string>& args, bool bind_to_core) {
  const std::string mpirun = FindMpirun();
  OT_CHECK(!mpirun.empty(),
           "--backend mpi starts its ranks with mpirun, which is not on PATH: install Open MPI (apt-get install "
           "openmpi-bin), set ONNXTRAIN_MPIRUN to its path, or use --backend gloo");
  const bool bind = bind_to_core && np <= static_cast<int>(std::thread::hardware_concurrency());
  std::vector<std::string> cmd = {mpirun, "-np", std::to_string(np), "--oversubscribe", "--bind-to",
                                  bind ? "core" : "none", "--mca", "btl", "self,vader"};
  if (::geteuid() == 0) {
    // Open MPI refuses root unless told; containers run as root as a rule.
    cmd.push_back("--allow-run-as-root");
    static bool said = false;
    if (!said) std::cout << "mpirun: running as root, so with --allow-run-as-root (Open MPI refuses root otherwise)\n" << std::flush;
    said = true;
  }
  if (const char* extra = std::getenv("ONNXTRAIN_MPIRUN_ARGS")) {
    std::string word;
    for (const char* c = extra;; ++c) {
      if (*c == '\0' || *c == ' ') {
        if (!word.empty()) cmd.push_back(word);
        word.clear();
        if (*c == '\0') break;
      } else {
        word += *c;
      }
    }
  }
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

std::function<const char*(const char*)> ProcessEnvironment(const std::string& rendezvous) {
  return [rendezvous](const char* name) -> const char* {
    if (!rendezvous.empty() && std::strcmp(name, kEnvRendezvous) == 0) return rendezvous.c_str();
    return std::getenv(name);
  };
}

bool StartedByMpirun() { return std::getenv("OMPI_COMM_WORLD_RANK") != nullptr; }

int LaunchWorkers(const LaunchOptions& o) {
  OT_CHECK(o.world_size >= 1 && o.world_size <= 1024, "--world-size must be between 1 and 1024");
  OT_CHECK(o.max_restarts >= 0, "--max-restarts must be 0 or more");
  const std::string self = SelfPath();
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  std::vector<std::string> args = o.worker_args;
  for (int attempt = 0;; ++attempt) {
    std::string failure;
    const int failed = RunOnce(o, self, args, attempt, &failure);
    if (failed < 0) return 0;
    if (g_signal) {
      if (!failure.empty()) std::cerr << "onnx-train: error: " << failure << "\n";
      return 130;
    }
    if (attempt >= o.max_restarts) {
      std::cerr << "onnx-train: error: " << failure << "\n"
                << (o.max_restarts > 0 ? StrFormat("onnx-train: gave up after %d restart(s)\n", o.max_restarts) : "");
      return 1;
    }
    std::cout << "onnx-train: " << failure.substr(0, failure.find(';')) << "; restarting all " << o.world_size
              << " workers from the latest checkpoint (restart " << attempt + 1 << " of " << o.max_restarts << ")\n"
              << std::flush;
    if (attempt == 0 && !o.resume_flag.empty()) {
      bool has = false;
      for (const auto& a : args) has = has || a.rfind(o.resume_flag, 0) == 0;
      if (!has) args.push_back(o.resume_flag);
    }
  }
}

}  // namespace ot
