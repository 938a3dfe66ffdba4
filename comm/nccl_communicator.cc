// NcclCommunicator: collectives on NCCL for CUDA buffers (see nccl_communicator.h).
//
// Threads and locks:
//  - nccl_mu_ guards every call on the NCCL communicator (NCCL forbids concurrent calls
//    on one communicator) and its abort; an enqueue that NCCL reports "in progress"
//    (non-blocking mode) is settled under it, bounded by the collective's deadline.
//  - mu_ guards the pending collectives, the first failure and the lost peers. Lock
//    order: nccl_mu_, then mu_.
//  - A watchdog thread polls the pending collectives every few milliseconds, so a
//    collective nobody waits on (one a stream waits on through WaitOnStream) still ends
//    at its deadline, and a dead peer ends the job at once.
#include "comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <gloo/context.h>
#include <gloo/transport/buffer.h>

#include "comm/gloo_communicator.h"
#include "comm/peer_watch.h"
#include "comm/rendezvous.h"
#include "runtime/cuda/cuda_common.h"

namespace ot {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

constexpr const char* kUniqueIdKey = "nccl.unique_id";

std::string NcclErrorText(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += std::string(": ") + last;
  return text;
}

// The CommError kind of a NCCL failure.
CommErrorKind KindOf(ncclResult_t result) {
  switch (result) {
    case ncclRemoteError:
    case ncclSystemError: return CommErrorKind::kPeerLost;
    case ncclInvalidArgument:
    case ncclInvalidUsage: return CommErrorKind::kInvalid;
    default: return CommErrorKind::kAborted;
  }
}

// NCCL's type for a reduction; false for types NCCL does not reduce.
bool ReductionType(DType dtype, ncclDataType_t* out) {
  switch (dtype) {
    case DType::kFloat32: *out = ncclFloat32; return true;
    case DType::kFloat16: *out = ncclFloat16; return true;
    case DType::kBFloat16: *out = ncclBfloat16; return true;
    case DType::kFloat64: *out = ncclFloat64; return true;
    default: return false;
  }
}

std::string Hex(const void* data, size_t bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

bool Unhex(const std::string& text, void* data, size_t bytes) {
  if (text.size() != 2 * bytes) return false;
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    unsigned value = 0;
    if (std::sscanf(text.c_str() + 2 * i, "%2x", &value) != 1) return false;
    p[i] = static_cast<unsigned char>(value);
  }
  return true;
}

std::string DescribeBuffer(const CommBuffer& b) {
  return StrFormat("%zu B %s on %s", b.bytes(), DTypeName(b.dtype).c_str(),
                   b.device.ToString().c_str());
}

// A host buffer's device copy for one collective.
struct Staged {
  void* host = nullptr;
  void* device = nullptr;
  size_t bytes = 0;
  bool copy_back = false;
};

// One collective in flight. Its state fields are guarded by NcclState::mu_.
struct Pending {
  enum class State { kRunning, kDone, kFailed };
  uint64_t seq = 0;
  std::string what;
  int device = 0;
  Clock::time_point deadline;
  cudaEvent_t done = nullptr;
  State state = State::kRunning;
  std::exception_ptr error;
  Clock::time_point completed_at;
  std::vector<Staged> staged;
  std::once_flag copied_back;

  ~Pending() {
    if (done != nullptr) cudaEventDestroy(done);
    for (auto& s : staged) {
      if (s.device != nullptr) BackendFor(DeviceType::kCUDA).Free(s.device, device);
    }
  }
};

class NcclState : public std::enable_shared_from_this<NcclState> {
 public:
  NcclState(const CommConfig& config, int device, std::unique_ptr<RendezvousStore> store)
      : config_(config), device_(device), store_(std::move(store)) {}
  ~NcclState();

  // Watches the peers (size > 1), makes the NCCL communicator and starts the watchdog.
  void Connect();
  // Stops the watchdog and finishes (or, after a failure, aborts) the NCCL communicator.
  void Shutdown();

  const CommConfig& config() const { return config_; }
  int device() const { return device_; }

  // Runs `call` on the stream (null: the context's comm stream) after the compute stream's
  // queued work, staging host buffers; returns the Work (failed when the enqueue failed).
  using Call = std::function<ncclResult_t(ncclComm_t, cudaStream_t, const std::vector<void*>&)>;
  WorkPtr Enqueue(const std::string& op, const std::string& detail, Millis timeout,
                  void* stream, std::vector<std::pair<CommBuffer, bool>> buffers, Call call);

  // Polls one collective: true once it is done or failed (never blocks).
  bool Poll(const std::shared_ptr<Pending>& p);
  // The collective's failure, once failed; null otherwise.
  std::exception_ptr ErrorOf(const Pending& p) {
    std::lock_guard<std::mutex> lock(mu_);
    return p.state == Pending::State::kFailed ? p.error : nullptr;
  }
  bool DoneOk(const Pending& p) {
    std::lock_guard<std::mutex> lock(mu_);
    return p.state == Pending::State::kDone;
  }
  // The failure the communicator is in now (async NCCL error, lost peer, a collective past
  // its deadline), or null. May take the failure report window (a roll call).
  std::exception_ptr Diagnose();
  void Fail(std::exception_ptr error);
  void Abort(const std::string& reason);
  std::exception_ptr error() {
    std::lock_guard<std::mutex> lock(mu_);
    return broken_;
  }

 private:
  // Waits for a non-blocking NCCL call to leave ncclInProgress; nccl_mu_ held.
  ncclResult_t Settle(Clock::time_point deadline, bool* timed_out);
  // After a collective timed out: ranks that do not report the same within the failure
  // report window are named as hung.
  std::vector<int> RollCall(uint64_t seq);
  void Watchdog();
  void OnPeerLost(int peer);
  std::vector<int> LostPeers() {
    std::lock_guard<std::mutex> lock(mu_);
    return lost_;
  }

  const CommConfig config_;
  const int device_;
  std::unique_ptr<RendezvousStore> store_;
  std::mutex store_mu_;
  std::map<uint64_t, std::vector<int>> roll_calls_;  // seq -> ranks that did not report

  std::mutex nccl_mu_;
  ncclComm_t comm_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // recorded on compute before each collective

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Pending>> pending_;
  std::exception_ptr broken_;
  std::vector<int> lost_;
  uint64_t next_seq_ = 0;
  bool stopping_ = false;
  std::thread watchdog_;
  // Last: destroyed first, so its threads never see a half-destroyed state.
  std::unique_ptr<PeerWatch> watch_;
};

NcclState::~NcclState() { Shutdown(); }

void NcclState::OnPeerLost(int peer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    lost_.push_back(peer);
  }
  cv_.notify_all();
}

ncclResult_t NcclState::Settle(Clock::time_point deadline, bool* timed_out) {
  *timed_out = false;
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    // A lost peer or a failure elsewhere (Abort, the watchdog) ends the wait too.
    if (Clock::now() > deadline || !LostPeers().empty() || error() != nullptr) {
      *timed_out = true;
      return ncclInProgress;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::microseconds(1000));
  }
}

void NcclState::Connect() {
  const int rank = config_.rank;
  if (config_.size > 1) {
    watch_ = std::make_unique<PeerWatch>(ConnectPeerWatchMesh(*store_, config_, "nccl.watch"),
                                         [this](int peer) { OnPeerLost(peer); });
  }
  cuda::Context(device_);  // this thread on the device, its streams made
  ncclUniqueId id;
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      throw CommError(CommErrorKind::kUnavailable,
                      StrFormat("rank 0: ncclGetUniqueId failed: %s; NCCL needs a network "
                                "interface for its bootstrap (see NCCL_SOCKET_IFNAME)",
                                NcclErrorText(r, nullptr).c_str()));
    }
    std::lock_guard<std::mutex> lock(store_mu_);
    store_->Set(kUniqueIdKey, Hex(&id, sizeof(id)));
  } else {
    std::lock_guard<std::mutex> lock(store_mu_);
    if (!store_->WaitFor({kUniqueIdKey}, config_.timeout).empty()) {
      throw CommError(CommErrorKind::kTimeout,
                      StrFormat("rank %d: rank 0 did not publish the NCCL unique id in %s "
                                "within %lld ms; check rank 0's log",
                                rank, store_->description().c_str(),
                                static_cast<long long>(config_.timeout.count())),
                      {0});
    }
    if (!Unhex(store_->Get(kUniqueIdKey), &id, sizeof(id))) {
      throw CommError(CommErrorKind::kMismatch,
                      StrFormat("rank %d: the NCCL unique id in %s is malformed; start the job "
                                "with a new run id",
                                rank, store_->description().c_str()));
    }
  }
  OT_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  ncclConfig_t nccl_config = NCCL_CONFIG_INITIALIZER;
  nccl_config.blocking = 0;  // every call returns at once; Settle() bounds the wait
  const auto deadline = Clock::now() + config_.timeout;
  std::lock_guard<std::mutex> lock(nccl_mu_);
  ncclResult_t r = ncclCommInitRankConfig(&comm_, config_.size, id, rank, &nccl_config);
  bool timed_out = false;
  if (r == ncclInProgress || (r == ncclSuccess && comm_ != nullptr)) r = Settle(deadline, &timed_out);
  if (r != ncclSuccess) {
    std::string text = timed_out ? std::string("it did not complete") : NcclErrorText(r, comm_);
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    auto lost = LostPeers();
    if (!lost.empty()) {
      throw CommError(CommErrorKind::kPeerLost,
                      StrFormat("rank %d: NCCL init on cuda:%d failed because %s exited; see "
                                "that rank's log",
                                rank, device_, DescribeRanks(lost).c_str()),
                      lost);
    }
    throw CommError(timed_out ? CommErrorKind::kTimeout : KindOf(r),
                    StrFormat("rank %d: NCCL init on cuda:%d (world size %d) failed: %s%s", rank,
                              device_, config_.size, text.c_str(),
                              timed_out ? StrFormat(" within %lld ms; a rank may hang or the "
                                                    "GPUs cannot reach each other (NCCL_DEBUG=INFO "
                                                    "tells more)",
                                                    static_cast<long long>(config_.timeout.count()))
                                              .c_str()
                        : KindOf(r) == CommErrorKind::kInvalid
                            ? "; NCCL needs one GPU per rank: start each rank with its own "
                              "--device cuda:K (K = local rank)"
                            : ""));
  }
  watchdog_ = std::thread([this] { Watchdog(); });
}

void NcclState::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  bool healthy = error() == nullptr;
  {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    if (comm_ != nullptr) {
      if (healthy) {
        // Finalize flushes the queued collectives; bounded like any collective.
        ncclResult_t r = ncclCommFinalize(comm_);
        bool timed_out = false;
        if (r == ncclSuccess || r == ncclInProgress) {
          r = Settle(Clock::now() + config_.timeout, &timed_out);
        }
        healthy = r == ncclSuccess;
      }
      if (healthy) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
  }
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  ready_ = nullptr;
  // A healthy rank keeps its watch connections until every peer is done too.
  if (watch_) watch_->Close(healthy ? config_.timeout : Millis(0));
}

std::vector<int> NcclState::RollCall(uint64_t seq) {
  const std::string prefix = StrFormat("nccl.fail.%llu.", static_cast<unsigned long long>(seq));
  std::vector<std::string> others;
  std::vector<int> other_ranks;
  for (int r = 0; r < config_.size; ++r) {
    if (r == config_.rank) continue;
    others.push_back(prefix + std::to_string(r));
    other_ranks.push_back(r);
  }
  std::lock_guard<std::mutex> lock(store_mu_);
  auto done = roll_calls_.find(seq);
  if (done != roll_calls_.end()) return done->second;
  std::vector<int> missing;
  try {
    store_->Set(prefix + std::to_string(config_.rank), "timeout");
    auto absent = store_->WaitFor(others, config_.failure_report_window);
    for (size_t i = 0; i < others.size(); ++i) {
      if (std::find(absent.begin(), absent.end(), others[i]) != absent.end()) {
        missing.push_back(other_ranks[i]);
      }
    }
  } catch (const std::exception&) {
    // The store is unusable too: nobody can be named.
  }
  roll_calls_[seq] = missing;
  return missing;
}

std::exception_ptr NcclState::Diagnose() {
  std::shared_ptr<Pending> expired;
  std::vector<int> lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_) return broken_;
    lost = lost_;
    const auto now = Clock::now();
    for (const auto& p : pending_) {
      if (p->state == Pending::State::kRunning && now > p->deadline) {
        expired = p;
        break;
      }
    }
  }
  const int rank = config_.rank;
  if (!lost.empty()) {
    const bool one = lost.size() == 1;
    return std::make_exception_ptr(CommError(
        CommErrorKind::kPeerLost,
        StrFormat("rank %d: %s exited or lost its connection during NCCL collectives on cuda:%d; "
                  "see %s log for its own error, then restart the job from its last checkpoint",
                  rank, DescribeRanks(lost).c_str(), device_, one ? "that rank's" : "those ranks'"),
        lost));
  }
  ncclResult_t async = ncclSuccess;
  std::string text;
  {
    std::unique_lock<std::mutex> lock(nccl_mu_, std::try_to_lock);
    if (lock.owns_lock() && comm_ != nullptr) {
      ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
      if (r != ncclSuccess) async = r;
      if (async != ncclSuccess && async != ncclInProgress) text = NcclErrorText(async, comm_);
    }
  }
  if (async != ncclSuccess && async != ncclInProgress) {
    return std::make_exception_ptr(CommError(
        KindOf(async),
        StrFormat("rank %d: NCCL reported an error on cuda:%d: %s; the communicator was aborted: "
                  "check every rank's log, then restart the job",
                  rank, device_, text.c_str())));
  }
  if (expired) {
    auto hung = config_.size > 1 ? RollCall(expired->seq) : std::vector<int>{};
    if (!LostPeers().empty()) return Diagnose();
    if (!hung.empty()) {
      return std::make_exception_ptr(CommError(
          CommErrorKind::kTimeout,
          StrFormat("rank %d: %s timed out: %s did not take part (did not report the timeout "
                    "within %lld ms either, so it hangs or is stuck elsewhere); see its log",
                    rank, expired->what.c_str(), DescribeRanks(hung).c_str(),
                    static_cast<long long>(config_.failure_report_window.count())),
          hung));
    }
    return std::make_exception_ptr(CommError(
        CommErrorKind::kTimeout,
        StrFormat("rank %d: %s timed out on every rank, so no single rank can be blamed: check "
                  "that all ranks call the same collectives in the same order with the same "
                  "sizes, or raise the timeout",
                  rank, expired->what.c_str())));
  }
  return nullptr;
}

bool NcclState::Poll(const std::shared_ptr<Pending>& p) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (p->state != Pending::State::kRunning) return true;
  }
  cudaError_t q = cudaEventQuery(p->done);
  if (q == cudaSuccess) {
    std::lock_guard<std::mutex> lock(mu_);
    if (p->state == Pending::State::kRunning) {
      p->state = Pending::State::kDone;
      p->completed_at = Clock::now();
      pending_.erase(std::remove(pending_.begin(), pending_.end(), p), pending_.end());
    }
    return true;
  }
  if (q != cudaErrorNotReady) {
    cudaGetLastError();
    Fail(std::make_exception_ptr(CommError(
        CommErrorKind::kAborted,
        StrFormat("rank %d: %s failed on cuda:%d: %s: %s", config_.rank, p->what.c_str(), device_,
                  cudaGetErrorName(q), cudaGetErrorString(q)))));
    return true;
  }
  return false;
}

void NcclState::Fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_) broken_ = error;
    for (auto& p : pending_) {
      if (p->state != Pending::State::kRunning) continue;
      if (cudaEventQuery(p->done) == cudaSuccess) {  // finished before the failure
        p->state = Pending::State::kDone;
        p->completed_at = Clock::now();
      } else {
        p->state = Pending::State::kFailed;
        p->error = broken_;
      }
    }
    cudaGetLastError();
    pending_.clear();
  }
  cv_.notify_all();
  // Abort ends NCCL's kernels, so no stream waits on this communicator for ever.
  std::lock_guard<std::mutex> lock(nccl_mu_);
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
}

void NcclState::Abort(const std::string& reason) {
  Fail(std::make_exception_ptr(CommError(
      CommErrorKind::kAborted,
      StrFormat("rank %d: the communicator was aborted (%s); no collective can run on it any "
                "more",
                config_.rank, reason.c_str()))));
}

void NcclState::Watchdog() {
  try {
    cuda::SetDevice(device_);
  } catch (const std::exception&) {
  }
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, Millis(pending_.empty() && lost_.empty() ? 200 : 5));
    if (stopping_) break;
    if (broken_ || (pending_.empty() && lost_.empty())) continue;
    auto pending = pending_;
    lock.unlock();
    for (const auto& p : pending) Poll(p);
    if (auto failure = Diagnose(); failure && !error()) Fail(failure);
    lock.lock();
  }
}

// The Work of one collective.
class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> state, std::shared_ptr<Pending> pending)
      : state_(std::move(state)), pending_(std::move(pending)) {}

  bool IsCompleted() override { return state_->Poll(pending_); }

  void Wait(std::chrono::milliseconds timeout = kUntilDone) override {
    const auto caller_deadline =
        timeout.count() < 0 ? Clock::time_point::max() : Clock::now() + timeout;
    auto pause = std::chrono::microseconds(5);
    while (!state_->Poll(pending_)) {
      if (auto failure = state_->Diagnose()) state_->Fail(failure);
      if (state_->Poll(pending_)) break;
      if (Clock::now() > caller_deadline) {
        throw CommError(
            CommErrorKind::kTimeout,
            StrFormat("%s is still running after the caller's wait of %lld ms; it goes on "
                      "(bounded by its own timeout): wait again, or Abort() the communicator",
                      pending_->what.c_str(), static_cast<long long>(timeout.count())));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::microseconds(500));
    }
    if (auto error = state_->ErrorOf(*pending_)) std::rethrow_exception(error);
    CopyBack();
  }

  std::exception_ptr Error() override {
    state_->Poll(pending_);
    return state_->ErrorOf(*pending_);
  }

  // stream: a cudaStream_t, or null for the compute stream of the collective's device.
  void WaitOnStream(void* stream) override {
    if (!pending_->staged.empty()) return Wait(kUntilDone);  // the host buffer needs the copy back
    if (auto error = state_->ErrorOf(*pending_)) std::rethrow_exception(error);
    cudaStream_t s = stream != nullptr ? static_cast<cudaStream_t>(stream)
                                       : cuda::Context(pending_->device).compute;
    OT_CUDA_CHECK(cudaStreamWaitEvent(s, pending_->done, 0));
  }

  std::string Describe() const override { return pending_->what; }

  std::chrono::steady_clock::time_point CompletedAt() override {
    state_->Poll(pending_);
    return state_->DoneOk(*pending_) ? pending_->completed_at : Clock::time_point{};
  }

 private:
  void CopyBack() {
    std::call_once(pending_->copied_back, [this] {
      if (pending_->staged.empty()) return;
      cuda::SetDevice(pending_->device);
      for (const auto& s : pending_->staged) {
        // The collective's event has completed, so the data is there; cudaMemcpy on the
        // legacy stream does not wait for later work on the (non-blocking) comm stream.
        if (s.copy_back) {
          OT_CUDA_CHECK(cudaMemcpy(s.host, s.device, s.bytes, cudaMemcpyDeviceToHost));
        }
      }
    });
  }

  std::shared_ptr<NcclState> state_;
  std::shared_ptr<Pending> pending_;
};

WorkPtr NcclState::Enqueue(const std::string& op, const std::string& detail, Millis timeout,
                           void* user_stream, std::vector<std::pair<CommBuffer, bool>> buffers,
                           Call call) {
  auto p = std::make_shared<Pending>();
  p->device = device_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    p->seq = next_seq_++;
    p->what = StrFormat("%s #%llu%s", op.c_str(), static_cast<unsigned long long>(p->seq),
                        detail.c_str());
    p->deadline = Clock::now() + (timeout.count() > 0 ? timeout : config_.timeout);
    if (broken_ || stopping_) {
      p->state = Pending::State::kFailed;
      p->error = broken_ ? broken_
                         : std::make_exception_ptr(CommError(
                               CommErrorKind::kAborted, "the communicator is shutting down"));
      return std::make_shared<NcclWork>(shared_from_this(), p);
    }
  }
  std::exception_ptr failure;
  try {
    cuda::DeviceContext& ctx = cuda::Context(device_);
    cudaStream_t stream = user_stream != nullptr ? static_cast<cudaStream_t>(user_stream)
                                                 : ctx.comm;
    OT_CUDA_CHECK(cudaEventCreateWithFlags(&p->done, cudaEventDisableTiming));
    // Host buffers: device copies, made before nccl_mu_ is taken (a pageable copy may wait
    // behind earlier work on the stream, and the watchdog must be able to abort meanwhile).
    std::vector<void*> pointers;
    for (auto& [buffer, copy_back] : buffers) {
      if (buffer.device.type == DeviceType::kCUDA || buffer.bytes() == 0) {
        pointers.push_back(buffer.data);
        continue;
      }
      Staged st;
      st.host = buffer.data;
      st.bytes = buffer.bytes();
      st.copy_back = copy_back;
      st.device = BackendFor(DeviceType::kCUDA).Allocate(st.bytes, device_);
      // NCCL writes it on `stream`: freed after a timed-out Wait, it must not go to
      // compute work before NCCL is done with it.
      BackendFor(DeviceType::kCUDA).RecordStream(st.device, device_, stream);
      p->staged.push_back(st);
      // The allocator clears new blocks on the compute stream: copy after that.
      OT_CUDA_CHECK(cudaEventRecord(p->done, ctx.compute));
      OT_CUDA_CHECK(cudaStreamWaitEvent(stream, p->done, 0));
      OT_CUDA_CHECK(cudaMemcpyAsync(st.device, st.host, st.bytes, cudaMemcpyHostToDevice, stream));
      pointers.push_back(st.device);
    }
    std::lock_guard<std::mutex> lock(nccl_mu_);
    if (comm_ == nullptr) {
      throw CommError(CommErrorKind::kAborted,
                      StrFormat("rank %d: %s: the NCCL communicator was aborted", config_.rank,
                                p->what.c_str()));
    }
    // Everything the kernels have queued (the gradients) comes first.
    OT_CUDA_CHECK(cudaEventRecord(ready_, ctx.compute));
    if (stream != ctx.compute) OT_CUDA_CHECK(cudaStreamWaitEvent(stream, ready_, 0));
    ncclResult_t r = call(comm_, stream, pointers);
    bool timed_out = false;
    if (r == ncclInProgress) r = Settle(p->deadline, &timed_out);
    if (r != ncclSuccess) {
      if (timed_out) {
        throw CommError(CommErrorKind::kTimeout,
                        StrFormat("rank %d: %s could not be started on cuda:%d within its "
                                  "timeout (NCCL kept connecting to its peers)",
                                  config_.rank, p->what.c_str(), device_));
      }
      throw CommError(KindOf(r), StrFormat("rank %d: %s failed on cuda:%d: %s", config_.rank,
                                           p->what.c_str(), device_,
                                           NcclErrorText(r, comm_).c_str()));
    }
    OT_CUDA_CHECK(cudaEventRecord(p->done, stream));
  } catch (const CommError&) {
    failure = std::current_exception();
  } catch (const std::exception& e) {
    failure = std::make_exception_ptr(
        CommError(CommErrorKind::kAborted,
                  StrFormat("rank %d: %s failed: %s", config_.rank, p->what.c_str(), e.what())));
  }
  if (failure) {
    // Lost peers explain a failed enqueue better than NCCL's own words.
    if (!LostPeers().empty()) {
      if (auto diagnosed = Diagnose()) failure = diagnosed;
    }
    Fail(failure);
    std::lock_guard<std::mutex> lock(mu_);
    p->state = Pending::State::kFailed;
    p->error = broken_;
    return std::make_shared<NcclWork>(shared_from_this(), p);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(p);
  }
  cv_.notify_all();
  return std::make_shared<NcclWork>(shared_from_this(), p);
}

class NcclCommunicator : public Communicator {
 public:
  explicit NcclCommunicator(std::shared_ptr<NcclState> state) : state_(std::move(state)) {}
  ~NcclCommunicator() override { state_->Shutdown(); }

  int rank() const override { return state_->config().rank; }
  int size() const override { return state_->config().size; }
  const char* backend() const override { return "nccl"; }

  WorkPtr AllReduce(CommBuffer b, const AllReduceOptions& options) override {
    CheckBuffer(b, "allreduce", "");
    const ncclDataType_t type = ReductionTypeOf(b, "allreduce");
    CheckDevice(b, "allreduce");
    const ncclRedOp_t op = options.op == ReduceOp::kAverage ? ncclAvg : ncclSum;
    const size_t count = b.count;
    return state_->Enqueue(
        "allreduce",
        " (" + DescribeBuffer(b) + (op == ncclAvg ? ", average)" : ", sum)"), options.timeout,
        options.stream, {{b, true}},
        [type, op, count](ncclComm_t comm, cudaStream_t stream, const std::vector<void*>& p) {
          return ncclAllReduce(p[0], p[0], count, type, op, comm, stream);
        });
  }

  WorkPtr Broadcast(CommBuffer b, const BroadcastOptions& options) override {
    CheckBuffer(b, "broadcast", "");
    CheckDevice(b, "broadcast");
    if (options.root < 0 || options.root >= size()) {
      throw CommError(CommErrorKind::kInvalid,
                      StrFormat("broadcast: root %d is not a rank of this world of %d",
                                options.root, size()));
    }
    const int root = options.root;
    const size_t bytes = b.bytes();
    return state_->Enqueue(
        "broadcast", StrFormat(" (%s from rank %d)", DescribeBuffer(b).c_str(), root),
        options.timeout, options.stream, {{b, true}},
        [root, bytes](ncclComm_t comm, cudaStream_t stream, const std::vector<void*>& p) {
          return ncclBroadcast(p[0], p[0], bytes, ncclUint8, root, comm, stream);
        });
  }

  WorkPtr AllGather(CommBuffer in, CommBuffer out, const AllGatherOptions& options) override {
    CheckBuffer(in, "allgather", "input");
    CheckBuffer(out, "allgather", "output");
    CheckDevice(in, "allgather");
    CheckDevice(out, "allgather");
    CheckWorldSized(in, out, size(), "allgather", "output");
    const size_t bytes = in.bytes();
    return state_->Enqueue(
        "allgather", " (" + DescribeBuffer(in) + " per rank)", options.timeout, options.stream,
        {{in, false}, {out, true}},
        [bytes](ncclComm_t comm, cudaStream_t stream, const std::vector<void*>& p) {
          return ncclAllGather(p[0], p[1], bytes, ncclUint8, comm, stream);
        });
  }

  WorkPtr ReduceScatter(CommBuffer in, CommBuffer out,
                        const ReduceScatterOptions& options) override {
    CheckBuffer(in, "reduce-scatter", "input");
    CheckBuffer(out, "reduce-scatter", "output");
    const ncclDataType_t type = ReductionTypeOf(in, "reduce-scatter");
    CheckDevice(in, "reduce-scatter");
    CheckDevice(out, "reduce-scatter");
    CheckWorldSized(out, in, size(), "reduce-scatter", "input");
    const ncclRedOp_t op = options.op == ReduceOp::kAverage ? ncclAvg : ncclSum;
    const size_t count = out.count;
    return state_->Enqueue(
        "reduce-scatter", " (" + DescribeBuffer(in) + ")", options.timeout, options.stream,
        {{in, false}, {out, true}},
        [type, op, count](ncclComm_t comm, cudaStream_t stream, const std::vector<void*>& p) {
          return ncclReduceScatter(p[0], p[1], count, type, op, comm, stream);
        });
  }

  // NCCL has no barrier: a one-element allreduce that every rank must join.
  WorkPtr Barrier(const BarrierOptions& options) override {
    auto token = std::make_shared<float>(0.0f);
    CommBuffer b = CommBuffer::Of(token.get(), 1);
    return state_->Enqueue(
        "barrier", "", options.timeout, options.stream, {{b, false}},
        [token](ncclComm_t comm, cudaStream_t stream, const std::vector<void*>& p) {
          return ncclAllReduce(p[0], p[0], 1, ncclFloat32, ncclSum, comm, stream);
        });
  }

  void Abort(const std::string& reason) override { state_->Abort(reason); }
  std::exception_ptr AsyncError() override {
    if (!state_->error()) {
      if (auto failure = state_->Diagnose()) state_->Fail(failure);
    }
    return state_->error();
  }

 private:
  static ncclDataType_t ReductionTypeOf(const CommBuffer& b, const char* op) {
    ncclDataType_t type;
    if (!ReductionType(b.dtype, &type)) {
      throw CommError(CommErrorKind::kInvalid,
                      StrFormat("%s: the nccl backend reduces float32, float16, bfloat16 and "
                                "float64 buffers, not %s",
                                op, DTypeName(b.dtype).c_str()));
    }
    return type;
  }
  void CheckDevice(const CommBuffer& b, const char* op) const {
    if (b.device.type == DeviceType::kCUDA && b.device.index != state_->device()) {
      throw CommError(CommErrorKind::kInvalid,
                      StrFormat("%s: the buffer is on %s but rank %d's NCCL communicator uses "
                                "cuda:%d; keep the model and the communicator on one device",
                                op, b.device.ToString().c_str(), rank(), state_->device()));
    }
  }

  std::shared_ptr<NcclState> state_;
};

}  // namespace

std::unique_ptr<Communicator> CreateNcclCommunicator(const CommConfig& config) {
  const int count = cuda::DeviceCount();
  if (count == 0) {
    throw CommError(CommErrorKind::kInvalid,
                    "nccl backend needs a CUDA device: " + cuda::NoDeviceReason() +
                        "; use --backend gloo");
  }
  const int device = config.device.type == DeviceType::kCUDA ? config.device.index
                                                             : config.local_rank % count;
  if (device < 0 || device >= count) {
    throw CommError(CommErrorKind::kInvalid,
                    StrFormat("rank %d: the nccl backend cannot use cuda:%d: this machine has "
                              "%d CUDA device(s)",
                              config.rank, device, count));
  }
  // The peer watch writes to sockets; a dead peer must fail the write, not kill this
  // process with SIGPIPE (as in the Gloo backend), so SIGPIPE is ignored when still default.
  struct sigaction current {};
  if (config.size > 1 && sigaction(SIGPIPE, nullptr, &current) == 0 &&
      current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
  auto store = RendezvousStore::Open(config.rendezvous, config.run_id, config.rank,
                                     config.timeout);
  JoinRun(*store, config);
  auto state = std::make_shared<NcclState>(config, device, std::move(store));
  try {
    state->Connect();
  } catch (const std::exception&) {
    state->Fail(std::current_exception());  // no lingering for goodbyes on the way out
    throw;
  }
  return std::make_unique<NcclCommunicator>(std::move(state));
}

namespace {
// Loading the plugin registers the backend under "nccl".
struct NcclRegistrar {
  NcclRegistrar() { RegisterCommunicatorBackend("nccl", CreateNcclCommunicator); }
} nccl_registrar;
}  // namespace

}  // namespace ot
