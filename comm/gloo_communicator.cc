// GlooCommunicator: collectives on Gloo's TCP transport, run in order on a background
// thread (or on the waiting thread when it reaches a collective first: Wait() on a
// collective that is next in line runs it in place, which saves two thread wake-ups).
//
// Two Gloo contexts (full meshes) serve different message sizes:
//  - a *sync* context whose pairs read in the calling thread (Gloo's sync mode, no device
//    thread hop per message) runs allreduces with Gloo's pointer-bound halving-doubling
//    or chunked-ring classes (float32, float64), buffers larger than SyncBytesLimit() in
//    pieces of that size one after another. They are built once per (algorithm, dtype,
//    element count) on staging memory and reused; the build consumes Gloo slots, so every
//    rank builds the same ones in the same order, which the key (not the caller's pointer)
//    guarantees. Blocking sends cannot deadlock because the pieces fit in the socket
//    buffers (SyncBytesLimit()).
//  - an *async* context (Gloo's device thread) runs everything else: the unbound-buffer
//    ring allreduce of gloo/allreduce.h (zero-copy, any float dtype through our sum), bcube,
//    broadcast, allgather, barrier and reduce-scatter.
//  - a *watch* context that only carries goodbyes (comm/peer_watch.h): a dead peer is seen
//    at once and the blocked Gloo waits are interrupted.
// The per-op timeout (CollectiveOptions::timeout) applies to the unbound-buffer ops; the
// pointer-bound ones are bounded by the communicator's timeout, which Gloo sets on its
// sockets.
//
// Failures: any Gloo error in a collective closes this rank's connections (so its peers
// fail at once instead of waiting out their timeouts), writes "fail.SEQ.RANK" to the store
// and waits CommConfig::failure_report_window for the other ranks' reports. The ranks that
// do not report are the ones at fault (exited, killed, hung): the CommError names them.
#include "comm/gloo_communicator.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <tuple>
#include <mutex>
#include <thread>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "comm/host_work.h"
#include "comm/peer_watch.h"
#include "comm/reduction.h"
#include "comm/rendezvous.h"

namespace ot {
namespace {

using Millis = std::chrono::milliseconds;

// Largest allreduce piece run on the sync context. There a send blocks until the kernel has
// taken all of it, so every single send must fit in the socket send buffer, which Gloo
// asks to be min(bytes, 32 MiB) and Linux caps at net.core.wmem_max (then doubles): with
// messages no larger than wmem_max no rank can block on a send while its peer also sends.
// 1 MiB where wmem_max allows (measured best, see below), else wmem_max;
// CommConfig::gloo_sync_bytes sets another size (for measurements), still at most wmem_max.
size_t SyncBytesLimit(size_t wanted) {
  static const size_t wmem_max = [] {
    size_t value_max = 212992;  // Linux's default
    if (FILE* f = std::fopen("/proc/sys/net/core/wmem_max", "r")) {
      unsigned long value = 0;
      if (std::fscanf(f, "%lu", &value) == 1 && value > 0) value_max = value;
      std::fclose(f);
    }
    return value_max;
  }();
  if (wanted == 0) wanted = size_t{1} << 20;
  return std::max<size_t>(4096, std::min<size_t>(wanted, wmem_max));
}
// Pointer-bound allreduces kept built; eviction is least-recently-used, which is the same
// on every rank because every rank sees the same sequence of sizes.
constexpr size_t kMaxBoundAllreduces = 16;

}  // namespace

// Allreduce algorithm by size, from measurements on this host (2 cores shared with other
// jobs' builds and tests, loopback TCP; us per float32 allreduce, world size 2;
// bench-comm --algorithm X, and the Gloo classes driven directly; "sync": pairs in sync
// mode, "bound": pointer-bound class with staging copies):
//   bytes     HD sync  HD async  ring-chunked sync  ring (unbound)     torch.distributed
//   4 KiB        30       840          41           1900-8000           50-2000
//   256 KiB     130       240         127           4000-90000          170-375
//   1 MiB       600-740   600         780-855       890-4000            670-2000
// World size 4: HD sync 110-510 us up to 256 KiB and 1.3-1.9 ms at 1 MiB, chunked ring
// 290-640 us and 8.3 ms; torch 1.4-7 ms.
// From 1 MiB (issue 19; busbw GB/s, median of 4 interleaved runs of bench-comm and
// torch_allreduce.py; HD/ring-chunked on sync pairs in pieces of 1 or 4 MiB):
//   world 2   ring  HD 1M  HD 4M  chunked 1M  chunked 4M  torch
//   1 MiB     1.60   1.94   1.82     1.21        1.52      0.79
//   4 MiB     1.13   1.91   1.21     0.89        1.06      1.03
//   16 MiB    0.99   1.73   0.83     0.86        1.02      1.05
//   64 MiB    0.68   1.45   1.07     1.07        1.00      0.63
//   world 4
//   1 MiB     0.21   0.80   0.82     0.17        0.18      0.19
//   4 MiB     0.46   0.67   0.47     0.19        0.45      0.49
//   16 MiB    0.64   0.78   0.31     0.19        0.40      0.59
//   64 MiB    0.61   0.76   0.37     0.18        0.41      0.53
// So halving-doubling on sync pairs at every size, larger buffers in pieces of
// SyncBytesLimit() (fewest thread wake-ups: each costs up to a 4 ms scheduler tick on a
// busy host, and the unbound ring pays several per segment; pieces larger than 1 MiB
// block on full socket buffers). Other dtypes than float32 take the unbound ring, and so
// do allreduces larger than one piece whose own timeout is shorter than the communicator's
// (only the unbound ring honours a per-op timeout).
AllreduceAlgorithm GlooAutoAllreduceAlgorithm(size_t bytes, int world_size) {
  (void)bytes;
  if (world_size <= 1) return AllreduceAlgorithm::kRing;
  return AllreduceAlgorithm::kHalvingDoubling;
}

namespace {

bool IsBound(AllreduceAlgorithm a) {
  return a == AllreduceAlgorithm::kHalvingDoubling || a == AllreduceAlgorithm::kRingChunked;
}

std::string HostName() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// A unit of work for the background thread.
struct Task {
  uint64_t seq = 0;
  std::string what;  // "allreduce #3 (1024 B float, ring)"
  Millis timeout{0};
  std::function<void(uint32_t tag, Millis timeout)> run;
  std::shared_ptr<HostWork> work;
};

// A pointer-bound Gloo allreduce on its own staging memory (see the file comment).
struct BoundAllreduce {
  std::vector<uint8_t> staging;  // count float32 or float64 elements
  std::unique_ptr<gloo::Algorithm> algorithm;
  uint64_t last_use = 0;
};

// Runs f with T the unsigned integer type of the dtype's width (for Gloo's typed buffer
// setters; the reduction itself is ours).
template <typename F>
void WithElementType(DType dtype, F&& f) {
  switch (DTypeSize(dtype)) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
    default:
      throw CommError(CommErrorKind::kInvalid, "unsupported element width for " +
                                                   DTypeName(dtype));
  }
}

// State shared by the communicator, its background thread and its works (the thread keeps
// it alive, so an abandoned thread never touches freed memory).
class GlooState : public std::enable_shared_from_this<GlooState> {
 public:
  GlooState(const CommConfig& config, std::unique_ptr<RendezvousStore> store,
            std::shared_ptr<gloo::Context> async_context,
            std::shared_ptr<gloo::Context> sync_context)
      : config_(config),
        store_(std::move(store)),
        async_(std::move(async_context)),
        sync_(std::move(sync_context)) {}
  ~GlooState() {
    // A healthy rank keeps its connections until every peer is done too (see PeerWatch).
    if (watch_) watch_->Close(broken_ ? Millis(0) : config_.timeout);
  }

  const CommConfig& config() const { return config_; }
  const std::shared_ptr<gloo::Context>& async_context() { return async_; }

  WorkPtr Submit(const std::string& op, const std::string& detail, Millis timeout,
                 std::function<void(uint32_t, Millis)> run);
  // The background thread's loop; returns once Stop() was called and the queue is empty.
  void Loop();
  void Stop();
  // Waits up to limit for the thread to leave Loop(); true if it did.
  bool WaitExited(Millis limit);
  // Runs the task of `work` on this thread if it is next and nothing runs.
  void RunInlineIfNext(const HostWork* work);
  void Abort(const std::string& reason);
  std::exception_ptr error() {
    std::lock_guard<std::mutex> lock(mu_);
    return broken_;
  }

  // Starts watching the peers through a dedicated context (see peer_watch.h).
  void StartWatch(std::shared_ptr<gloo::Context> watch) {
    watch_ = std::make_unique<PeerWatch>(std::move(watch), [this](int peer) { OnPeerLost(peer); });
  }

  // In-place allreduce with a pointer-bound Gloo class on the sync pairs (float32, at most
  // SyncBytesLimit()).
  // b: float32 or float64 (synchronised batch normalization's per-channel sums), in
  // pieces of at most SyncBytesLimit().
  void BoundAllreduceRun(AllreduceAlgorithm algorithm, const CommBuffer& b);
  void BoundAllreducePiece(AllreduceAlgorithm algorithm, DType dtype, void* data, size_t count);
  // In-place allreduce with Gloo's unbound-buffer ring or bcube.
  void UnboundAllreduce(const CommBuffer& b, AllreduceAlgorithm algorithm, uint32_t tag,
                        Millis timeout);

 private:
  // Runs one popped task and records its outcome; mu_ must not be held.
  void Execute(Task& task);
  std::exception_ptr Diagnose(const Task& task, const std::string& transport_error);
  void FailQueued(std::exception_ptr error);  // needs mu_

  const CommConfig config_;
  std::unique_ptr<RendezvousStore> store_;
  std::shared_ptr<gloo::Context> async_;
  std::shared_ptr<gloo::Context> sync_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::shared_ptr<HostWork> running_;  // the task being executed, by either thread
  uint64_t next_seq_ = 0;
  bool stopping_ = false;
  bool exited_ = false;
  std::exception_ptr broken_;

  // Used only by whichever thread executes (one at a time).
  std::map<std::tuple<int, DType, size_t>, BoundAllreduce> bound_;
  uint64_t bound_uses_ = 0;

  std::mutex lost_mu_;
  std::vector<int> lost_;  // peers whose process is known to be gone
  // Last: destroyed first, so its threads never see a half-destroyed state.
  std::unique_ptr<PeerWatch> watch_;

  void OnPeerLost(int peer);
  std::vector<int> LostPeers() {
    std::lock_guard<std::mutex> lock(lost_mu_);
    return lost_;
  }
};

void GlooState::OnPeerLost(int peer) {
  {
    std::lock_guard<std::mutex> lock(lost_mu_);
    lost_.push_back(peer);
  }
  // Wake whatever waits in Gloo now; the collective then fails and Diagnose() names peer.
  InterruptConnections(*async_);
  InterruptConnections(*sync_);
}

WorkPtr GlooState::Submit(const std::string& op, const std::string& detail, Millis timeout,
                          std::function<void(uint32_t, Millis)> run) {
  std::lock_guard<std::mutex> lock(mu_);
  Task task;
  task.seq = next_seq_++;
  task.what = StrFormat("%s #%llu%s", op.c_str(), static_cast<unsigned long long>(task.seq),
                        detail.c_str());
  task.timeout = timeout.count() > 0 ? timeout : config_.timeout;
  task.run = std::move(run);
  std::weak_ptr<GlooState> weak = shared_from_this();
  task.work = std::make_shared<HostWork>(task.what, [weak](const HostWork* work) {
    if (auto state = weak.lock()) state->RunInlineIfNext(work);
  });
  WorkPtr work = task.work;
  if (broken_ || stopping_) {
    task.work->Fail(broken_ ? broken_
                            : std::make_exception_ptr(CommError(
                                  CommErrorKind::kAborted, "the communicator is shutting down")));
    return work;
  }
  queue_.push_back(std::move(task));
  cv_.notify_all();
  return work;
}

void GlooState::FailQueued(std::exception_ptr error) {
  for (auto& t : queue_) t.work->Fail(error);
  queue_.clear();
}

void GlooState::Execute(Task& task) {
  std::exception_ptr failure;
  try {
    task.run(static_cast<uint32_t>(task.seq), task.timeout);
  } catch (const CommError&) {
    failure = std::current_exception();
  } catch (const std::exception& e) {
    std::exception_ptr earlier = error();  // aborted meanwhile: keep that reason
    failure = earlier ? earlier : Diagnose(task, e.what());
  }
  std::lock_guard<std::mutex> lock(mu_);
  running_.reset();
  if (failure) {
    if (!broken_) broken_ = failure;
    task.work->Fail(failure);
    FailQueued(broken_);
  } else {
    task.work->Finish();
  }
  cv_.notify_all();
}

void GlooState::Loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return (!queue_.empty() && !running_) || (stopping_ && !running_); });
      if (queue_.empty()) break;
      task = std::move(queue_.front());
      queue_.pop_front();
      if (broken_) {
        task.work->Fail(broken_);
        continue;
      }
      running_ = task.work;
    }
    Execute(task);
  }
  std::lock_guard<std::mutex> lock(mu_);
  exited_ = true;
  cv_.notify_all();
}

void GlooState::RunInlineIfNext(const HostWork* work) {
  Task task;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_ || broken_ || queue_.empty() || queue_.front().work.get() != work) return;
    task = std::move(queue_.front());
    queue_.pop_front();
    running_ = task.work;
  }
  Execute(task);
}

void GlooState::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  cv_.notify_all();
}

bool GlooState::WaitExited(Millis limit) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, limit, [&] { return exited_; });
}

void GlooState::Abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_) {
      broken_ = std::make_exception_ptr(CommError(
          CommErrorKind::kAborted,
          StrFormat("rank %d: the communicator was aborted (%s); no collective can run on it "
                    "any more",
                    config_.rank, reason.c_str())));
    }
    if (running_) running_->Fail(broken_);
    FailQueued(broken_);
  }
  // Shutting the sockets down (rather than closing them through Gloo, which would wait
  // for the lock a blocked sync read holds) wakes every blocked wait at once.
  InterruptConnections(*async_);
  InterruptConnections(*sync_);
}

std::exception_ptr GlooState::Diagnose(const Task& task, const std::string& transport_error) {
  const int rank = config_.rank;
  const bool timed_out = transport_error.find("imed out") != std::string::npos ||
                         transport_error.find("imeout") != std::string::npos;
  // Fail the peers fast: they see this rank's connections reset. This thread is the only
  // user of the sync pairs, so none of their locks is held now.
  for (auto* context : {async_.get(), sync_.get()}) {
    try {
      context->closeConnections();
    } catch (const std::exception&) {
    }
  }
  // Roll call: every rank that saw this collective fail reports it. Peers known to be gone
  // are not waited for.
  const std::string prefix = StrFormat("fail.%llu.", static_cast<unsigned long long>(task.seq));
  std::vector<int> missing = LostPeers();
  std::vector<std::string> others;
  std::vector<int> other_ranks;
  for (int r = 0; r < config_.size; ++r) {
    if (r == rank || std::find(missing.begin(), missing.end(), r) != missing.end()) continue;
    others.push_back(prefix + std::to_string(r));
    other_ranks.push_back(r);
  }
  std::string store_problem;
  try {
    store_->Set(prefix + std::to_string(rank), transport_error);
    auto absent = store_->WaitFor(others, config_.failure_report_window);
    for (size_t i = 0; i < others.size(); ++i) {
      if (std::find(absent.begin(), absent.end(), others[i]) != absent.end()) {
        missing.push_back(other_ranks[i]);
      }
    }
  } catch (const std::exception& e) {
    store_problem = std::string(" (the rendezvous store could not be asked which rank is at "
                                "fault: ") + e.what() + ")";
  }
  std::sort(missing.begin(), missing.end());
  const CommErrorKind kind = timed_out ? CommErrorKind::kTimeout : CommErrorKind::kPeerLost;
  const char* transport = timed_out ? "timed out" : "lost a connection";
  if (!missing.empty()) {
    const bool one = missing.size() == 1;
    return std::make_exception_ptr(CommError(
        kind,
        StrFormat("rank %d: %s failed: %s %s at fault: %s not report the failure within %lld "
                  "ms, so %s exited, was killed, or hangs outside this collective (this rank "
                  "%s: %s). Look at %s log for its own error, then restart the job from its "
                  "last checkpoint",
                  rank, task.what.c_str(), DescribeRanks(missing).c_str(), one ? "is" : "are",
                  one ? "it did" : "they did",
                  static_cast<long long>(config_.failure_report_window.count()),
                  one ? "it" : "they", transport, transport_error.c_str(),
                  one ? "that rank's" : "those ranks'"),
        missing));
  }
  return std::make_exception_ptr(CommError(
      kind,
      StrFormat("rank %d: %s failed (%s: %s)%s; every other rank reported the failure too, so "
                "no single rank can be blamed: check that all ranks call the same collectives "
                "in the same order with the same sizes, then restart the job",
                rank, task.what.c_str(), transport, transport_error.c_str(),
                store_problem.c_str())));
}

// The pointer-bound Gloo class of `algorithm` over n elements of T at data.
template <typename T>
std::unique_ptr<gloo::Algorithm> MakeBoundAllreduce(const std::shared_ptr<gloo::Context>& context,
                                                    AllreduceAlgorithm algorithm, void* data, int n) {
  std::vector<T*> ptrs{static_cast<T*>(data)};
  if (algorithm == AllreduceAlgorithm::kHalvingDoubling)
    return std::make_unique<gloo::AllreduceHalvingDoubling<T>>(context, ptrs, n);
  return std::make_unique<gloo::AllreduceRingChunked<T>>(context, ptrs, n);
}

void GlooState::BoundAllreduceRun(AllreduceAlgorithm algorithm, const CommBuffer& buffer) {
  // Larger buffers go in pieces of at most SyncBytesLimit(), one after another.
  const size_t element = DTypeSize(buffer.dtype);
  const size_t piece = SyncBytesLimit(config_.gloo_sync_bytes) / element;
  for (size_t offset = 0; offset < buffer.count; offset += piece) {
    BoundAllreducePiece(algorithm, buffer.dtype, static_cast<char*>(buffer.data) + offset * element,
                        std::min(piece, buffer.count - offset));
  }
}

void GlooState::BoundAllreducePiece(AllreduceAlgorithm algorithm, DType dtype, void* data, size_t count) {
  const size_t bytes = count * DTypeSize(dtype);
  auto key = std::make_tuple(static_cast<int>(algorithm), dtype, count);
  auto it = bound_.find(key);
  if (it == bound_.end()) {
    if (bound_.size() >= kMaxBoundAllreduces) {
      auto oldest = bound_.begin();
      for (auto i = bound_.begin(); i != bound_.end(); ++i) {
        if (i->second.last_use < oldest->second.last_use) oldest = i;
      }
      bound_.erase(oldest);
    }
    BoundAllreduce& b = bound_[key];
    b.staging.resize(bytes);
    const int n = static_cast<int>(count);
    b.algorithm = dtype == DType::kFloat64
                      ? MakeBoundAllreduce<double>(sync_, algorithm, b.staging.data(), n)
                      : MakeBoundAllreduce<float>(sync_, algorithm, b.staging.data(), n);
    it = bound_.find(key);
  }
  BoundAllreduce& b = it->second;
  b.last_use = ++bound_uses_;
  std::memcpy(b.staging.data(), data, bytes);
  b.algorithm->run();
  std::memcpy(data, b.staging.data(), bytes);
}

void GlooState::UnboundAllreduce(const CommBuffer& b, AllreduceAlgorithm algorithm, uint32_t tag,
                                 Millis timeout) {
  SumFunction sum = SumFunctionFor(b.dtype);
  WithElementType(b.dtype, [&](auto element) {
    using T = decltype(element);
    gloo::AllreduceOptions opts(async_);
    opts.setAlgorithm(algorithm == AllreduceAlgorithm::kBcube
                          ? gloo::detail::AllreduceOptionsImpl::BCUBE
                          : gloo::detail::AllreduceOptionsImpl::RING);
    opts.setOutput<T>(async_->createUnboundBuffer(b.data, b.bytes()));
    opts.setReduceFunction([sum](void* out, const void* x, const void* y, size_t n) {
      sum(out, x, y, n);
    });
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::allreduce(opts);
  });
}

std::string DescribeBuffer(const CommBuffer& b) {
  return StrFormat("%zu B %s", b.bytes(), DTypeName(b.dtype).c_str());
}

class GlooCommunicator : public Communicator {
 public:
  explicit GlooCommunicator(std::shared_ptr<GlooState> state) : state_(std::move(state)) {
    auto s = state_;
    thread_ = std::thread([s] { s->Loop(); });
  }

  ~GlooCommunicator() override {
    state_->Stop();
    // Queued collectives finish first; a collective stuck in Gloo after Abort() is left to
    // its own timeout on a detached thread that owns the shared state.
    const auto& c = state_->config();
    if (state_->WaitExited(c.timeout + c.failure_report_window + Millis(1000))) {
      thread_.join();
    } else {
      thread_.detach();
    }
  }

  int rank() const override { return state_->config().rank; }
  int size() const override { return state_->config().size; }
  const char* backend() const override { return "gloo"; }

  WorkPtr AllReduce(CommBuffer b, const AllReduceOptions& options) override {
    CheckBuffer(b, "allreduce", "");
    CheckReducible(b, "allreduce");
    AllreduceAlgorithm algorithm = options.algorithm == AllreduceAlgorithm::kAuto
                                       ? GlooAutoAllreduceAlgorithm(b.bytes(), size())
                                       : options.algorithm;
    // The pointer-bound classes run on the sync pairs only (float32 or float64, in pieces);
    // other dtypes take the unbound ring. (Bound classes on the async pairs slowed later
    // unbound collectives on the same pairs by seconds at world size 4.)
    // A bound allreduce is bounded by the communicator's timeout only (Gloo's sync pairs
    // take no per-op timeout): a large one asked to end sooner takes the unbound ring.
    const auto& config = state_->config();
    const bool shorter_timeout = options.timeout.count() > 0 && options.timeout < config.timeout;
    const bool bindable = b.dtype == DType::kFloat32 || b.dtype == DType::kFloat64;
    const bool long_piece = b.bytes() > SyncBytesLimit(config.gloo_sync_bytes);
    if (IsBound(algorithm) && (!bindable || (shorter_timeout && long_piece))) {
      algorithm = AllreduceAlgorithm::kRing;
    }
    const int n = size();
    const bool average = options.op == ReduceOp::kAverage;
    auto state = state_.get();
    std::string detail = " (" + DescribeBuffer(b) + ", " + AllreduceAlgorithmName(algorithm) +
                         (average ? ", average)" : ", sum)");
    return state_->Submit("allreduce", detail, options.timeout,
                          [state, b, algorithm, average, n](uint32_t tag, Millis timeout) {
      if (n > 1 && b.count > 0) {
        if (IsBound(algorithm)) {
          state->BoundAllreduceRun(algorithm, b);
        } else {
          state->UnboundAllreduce(b, algorithm, tag, timeout);
        }
      }
      if (average) ScaleInPlace(b.data, b.count, b.dtype, 1.0 / n);
    });
  }

  WorkPtr Broadcast(CommBuffer b, const BroadcastOptions& options) override {
    CheckBuffer(b, "broadcast", "");
    if (options.root < 0 || options.root >= size()) {
      throw CommError(CommErrorKind::kInvalid,
                      StrFormat("broadcast: root %d is not a rank of this world of %d",
                                options.root, size()));
    }
    auto state = state_.get();
    const int root = options.root;
    return state_->Submit("broadcast",
                          StrFormat(" (%s from rank %d)", DescribeBuffer(b).c_str(), root),
                          options.timeout, [state, b, root](uint32_t tag, Millis timeout) {
      if (state->config().size == 1 || b.count == 0) return;
      const auto& context = state->async_context();
      gloo::BroadcastOptions opts(context);
      opts.setOutput<uint8_t>(context->createUnboundBuffer(b.data, b.bytes()));
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::broadcast(opts);
    });
  }

  WorkPtr AllGather(CommBuffer in, CommBuffer out, const AllGatherOptions& options) override {
    CheckBuffer(in, "allgather", "input");
    CheckBuffer(out, "allgather", "output");
    CheckWorldSized(in, out, size(), "allgather", "output");
    auto state = state_.get();
    return state_->Submit("allgather", " (" + DescribeBuffer(in) + " per rank)", options.timeout,
                          [state, in, out](uint32_t tag, Millis timeout) {
      if (state->config().size == 1) {
        if (in.bytes()) std::memmove(out.data, in.data, in.bytes());
        return;
      }
      if (in.count == 0) return;
      const auto& context = state->async_context();
      gloo::AllgatherOptions opts(context);
      opts.setInput<uint8_t>(context->createUnboundBuffer(in.data, in.bytes()));
      opts.setOutput<uint8_t>(context->createUnboundBuffer(out.data, out.bytes()));
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::allgather(opts);
    });
  }

  WorkPtr ReduceScatter(CommBuffer in, CommBuffer out,
                        const ReduceScatterOptions& options) override {
    CheckBuffer(in, "reduce-scatter", "input");
    CheckBuffer(out, "reduce-scatter", "output");
    CheckReducible(in, "reduce-scatter");
    CheckWorldSized(out, in, size(), "reduce-scatter", "input");
    auto state = state_.get();
    const bool average = options.op == ReduceOp::kAverage;
    return state_->Submit("reduce-scatter", " (" + DescribeBuffer(in) + ")", options.timeout,
                          [state, in, out, average](uint32_t tag, Millis timeout) {
      const int n = state->config().size;
      const int rank = state->config().rank;
      if (n == 1 || out.count == 0) {
        if (out.bytes()) std::memmove(out.data, in.data, out.bytes());
      } else if (in.dtype == DType::kFloat32 && in.count <= static_cast<size_t>(INT32_MAX)) {
        // Gloo's halving-doubling reduce-scatter works in place on the whole buffer and
        // leaves this rank's slice at the front.
        std::vector<float> staging(static_cast<const float*>(in.data),
                                   static_cast<const float*>(in.data) + in.count);
        std::vector<int> slices(n, static_cast<int>(out.count));
        gloo::ReduceScatterHalvingDoubling<float> algorithm(
            state->async_context(), {staging.data()}, static_cast<int>(in.count), slices);
        algorithm.run();
        std::memcpy(out.data, staging.data(), out.bytes());
      } else {
        // Other dtypes: allreduce a copy and keep this rank's slice.
        std::vector<uint8_t> staging(static_cast<const uint8_t*>(in.data),
                                     static_cast<const uint8_t*>(in.data) + in.bytes());
        CommBuffer copy{staging.data(), in.count, in.dtype, in.device};
        state->UnboundAllreduce(copy, AllreduceAlgorithm::kRing, tag, timeout);
        std::memcpy(out.data, staging.data() + static_cast<size_t>(rank) * out.bytes(),
                    out.bytes());
      }
      if (average) ScaleInPlace(out.data, out.count, out.dtype, 1.0 / n);
    });
  }

  WorkPtr Barrier(const BarrierOptions& options) override {
    auto state = state_.get();
    return state_->Submit("barrier", "", options.timeout, [state](uint32_t tag, Millis timeout) {
      if (state->config().size == 1) return;
      gloo::BarrierOptions opts(state->async_context());
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::barrier(opts);
    });
  }

  void Abort(const std::string& reason) override { state_->Abort(reason); }
  std::exception_ptr AsyncError() override { return state_->error(); }

 private:
  static void CheckReducible(const CommBuffer& b, const char* op) {
    CheckHostReducible(b, op, "gloo", SumFunctionFor(b.dtype) != nullptr);
  }

  std::shared_ptr<GlooState> state_;
  std::thread thread_;
};

// Connects one full mesh of this run under `scope`; sync pairs read in the calling thread.
std::shared_ptr<gloo::Context> ConnectMesh(RendezvousStore& store, const CommConfig& config,
                                           std::shared_ptr<gloo::transport::Device>& device,
                                           const std::string& scope, bool sync,
                                           Millis timeout) {
  auto context = std::make_shared<gloo::rendezvous::Context>(config.rank, config.size);
  context->setTimeout(timeout);
  try {
    auto gloo_store = store.GlooStore(scope);
    context->connectFullMesh(*gloo_store, device);
    if (sync) {
      for (int r = 0; r < config.size; ++r) {
        if (r != config.rank) context->getPair(r)->setSync(true, /*busyPoll=*/false);
      }
    }
  } catch (const std::exception& e) {
    throw CommError(CommErrorKind::kPeerLost,
                    StrFormat("rank %d: every rank joined %s, but connecting to them failed: "
                              "%s; a rank may have exited right after joining (see its log), "
                              "or a firewall blocks the ports",
                              config.rank, store.description().c_str(), e.what()));
  }
  return context;
}

// The TCP device this rank's connections listen on (see CommConfig::listen_host).
std::shared_ptr<gloo::transport::Device> CreateTcpDevice(const RendezvousStore& store,
                                                         const CommConfig& config) {
  gloo::transport::tcp::attr attr;
  attr.hostname = !config.listen_host.empty() ? config.listen_host
                  : store.is_file_store()      ? "127.0.0.1"
                                               : HostName();
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw CommError(CommErrorKind::kUnavailable,
                    StrFormat("rank %d: cannot listen for peers on '%s' (%s); set the address "
                              "with CommConfig::listen_host",
                              config.rank, attr.hostname.c_str(), e.what()));
  }
}

}  // namespace

std::shared_ptr<gloo::Context> ConnectPeerWatchMesh(RendezvousStore& store,
                                                    const CommConfig& config,
                                                    const std::string& scope) {
  auto device = CreateTcpDevice(store, config);
  return ConnectMesh(store, config, device, scope, false, Millis(0));
}

std::unique_ptr<Communicator> CreateGlooCommunicator(const CommConfig& config) {
  // Gloo writes to sockets with writev(2); a peer that died would kill this process with
  // SIGPIPE instead of failing the collective, so SIGPIPE is ignored (when still default).
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
  auto store = RendezvousStore::Open(config.rendezvous, config.run_id, config.rank,
                                     config.timeout);
  JoinRun(*store, config);
  std::shared_ptr<gloo::transport::Device> device = CreateTcpDevice(*store, config);
  std::shared_ptr<gloo::Context> async_context, sync_context, watch_context;
  if (config.size > 1) {
    async_context = ConnectMesh(*store, config, device, "mesh.async", false, config.timeout);
    sync_context = ConnectMesh(*store, config, device, "mesh.sync", true, config.timeout);
    // The watch connections wait for a goodbye for as long as the run lasts: no timeout.
    watch_context = ConnectMesh(*store, config, device, "mesh.watch", false, Millis(0));
  } else {
    async_context = std::make_shared<gloo::Context>(0, 1);
    sync_context = async_context;
  }
  auto state = std::make_shared<GlooState>(config, std::move(store), std::move(async_context),
                                           std::move(sync_context));
  if (watch_context) state->StartWatch(std::move(watch_context));
  return std::make_unique<GlooCommunicator>(std::move(state));
}

}  // namespace ot
