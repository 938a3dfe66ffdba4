// MpiCommunicator: non-blocking MPI collectives progressed by MPI_Test (see the header).
#include "comm/mpi_communicator.h"

#include <mpi.h>
#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include "comm/host_work.h"
#include "comm/reduction.h"

namespace ot {
namespace {

using Millis = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

// An MPI return code as a CommError: failures of processes and of the transport are
// kPeerLost (a rank exited or the connection broke), the rest kInvalid.
CommError MpiFailure(int rank, const std::string& what, int code) {
  int error_class = MPI_ERR_OTHER;
  MPI_Error_class(code, &error_class);
  const bool lost = error_class == MPI_ERR_INTERN || error_class == MPI_ERR_OTHER ||
                    error_class == MPI_ERR_UNKNOWN || error_class == MPI_ERR_PENDING;
  return CommError(lost ? CommErrorKind::kPeerLost : CommErrorKind::kInvalid,
                   StrFormat("rank %d: %s failed in MPI: %s; if another rank exited, mpirun "
                             "names it in its own message; restart the job from its last "
                             "checkpoint",
                             rank, what.c_str(), MpiErrorText(code).c_str()));
}

// float16 and bfloat16 sums for MPI (inout = in + inout), on uint16 elements.
void SumFloat16(void* in, void* inout, int* len, MPI_Datatype*) {
  SumFunctionFor(DType::kFloat16)(inout, in, inout, static_cast<size_t>(*len));
}
void SumBFloat16(void* in, void* inout, int* len, MPI_Datatype*) {
  SumFunctionFor(DType::kBFloat16)(inout, in, inout, static_cast<size_t>(*len));
}

// Process-wide MPI state: initialised once, finalised at exit unless a collective failed
// (MPI_Finalize would wait for peers that are gone; mpirun ends the job instead).
struct MpiProcess {
  std::mutex mu;  // orders every MPI call (MPI_THREAD_SERIALIZED)
  bool initialized_here = false;
  bool failed = false;
  MPI_Op sum_f16 = MPI_OP_NULL;
  MPI_Op sum_bf16 = MPI_OP_NULL;
};

MpiProcess& Process() {
  static MpiProcess* process = new MpiProcess;  // never destroyed: used at exit
  return *process;
}

void FinalizeAtExit() {
  MpiProcess& p = Process();
  std::lock_guard<std::mutex> lock(p.mu);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !p.failed) MPI_Finalize();
}

// Whether process_vm_readv works here (read from this process itself).
bool CrossMemoryAttachWorks() {
  int source = 42, target = 0;
  iovec local{&target, sizeof(target)}, remote{&source, sizeof(source)};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof(int)) &&
         target == 42;
}

void InitializeMpi(int rank_hint) {
  MpiProcess& p = Process();
  std::lock_guard<std::mutex> lock(p.mu);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Open MPI defaults measured on one host (2 ranks, shared memory): the ring iallreduce
    // of libnbc streams 2-4x faster from 256 KiB than its default choice and no slower
    // below; a 16 KiB eager limit halves the time of 4-16 KiB messages (the default 4 KiB
    // sends them by rendezvous). Settings from the user's environment or mpirun win.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "ring", 0);
    setenv("OMPI_MCA_btl_vader_eager_limit", "16384", 0);
    // Shared memory copies large messages with process_vm_readv (CMA); a container whose
    // seccomp profile forbids it would fail mid-run, so there it copies through the
    // shared segment instead (up to 2x slower at 1-4 MiB, measured).
    if (!CrossMemoryAttachWorks()) setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    int provided = MPI_THREAD_SINGLE;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      throw CommError(CommErrorKind::kUnavailable,
                      StrFormat("rank %d: MPI_Init_thread failed (%s); start the ranks with "
                                "mpirun",
                                rank_hint, MpiErrorText(rc).c_str()));
    }
    p.initialized_here = true;
    std::atexit(FinalizeAtExit);
    if (provided < MPI_THREAD_SERIALIZED) {
      throw CommError(CommErrorKind::kUnavailable,
                      StrFormat("rank %d: this MPI library gives thread level %d, below "
                                "MPI_THREAD_SERIALIZED, which the mpi backend needs",
                                rank_hint, provided));
    }
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (p.sum_f16 == MPI_OP_NULL) {
    MPI_Op_create(SumFloat16, /*commute=*/1, &p.sum_f16);
    MPI_Op_create(SumBFloat16, /*commute=*/1, &p.sum_bf16);
  }
}

// The MPI datatype and sum of a dtype; false when MPI cannot reduce it here.
bool ReductionFor(DType dtype, MPI_Datatype* type, MPI_Op* op) {
  MpiProcess& p = Process();
  switch (dtype) {
    case DType::kFloat32: *type = MPI_FLOAT; *op = MPI_SUM; return true;
    case DType::kFloat64: *type = MPI_DOUBLE; *op = MPI_SUM; return true;
    case DType::kFloat16: *type = MPI_UINT16_T; *op = p.sum_f16; return true;
    case DType::kBFloat16: *type = MPI_UINT16_T; *op = p.sum_bf16; return true;
    default: return false;
  }
}

// Allreduce piece size: 4 MiB (measured; CommConfig::mpi_piece_bytes sets another).
size_t PieceBytes(const CommConfig& config) {
  return config.mpi_piece_bytes >= 4096 ? config.mpi_piece_bytes : size_t{4} << 20;
}

std::string DescribeBuffer(const CommBuffer& b) {
  return StrFormat("%zu B %s", b.bytes(), DTypeName(b.dtype).c_str());
}

class MpiState;

// A collective's handle: Wait() drives MPI progress on the waiting thread.
class MpiWork : public HostWork {
 public:
  MpiWork(std::string description, std::weak_ptr<MpiState> state)
      : HostWork(std::move(description)), state_(std::move(state)) {}
  void Wait(Millis timeout = kUntilDone) override;

 private:
  std::weak_ptr<MpiState> state_;  // gone once the communicator is destroyed
};

// A collective in flight. A large allreduce runs as a chain of pieces, each started when
// the one before completes (see AllReduce).
struct Pending {
  MPI_Request request = MPI_REQUEST_NULL;
  std::shared_ptr<MpiWork> work;
  Clock::time_point deadline;
  Millis timeout{0};
  std::function<int(MPI_Comm, MPI_Request*, int)> start;  // starts piece i
  int pieces = 1;
  int next_piece = 0;
  std::function<void()> on_done;  // e.g. the average's scaling
};

class MpiState : public std::enable_shared_from_this<MpiState> {
 public:
  MpiState(const CommConfig& config, MPI_Comm comm) : config_(config), comm_(comm) {
    thread_ = std::thread([this] { ProgressLoop(); });
  }
  ~MpiState() {
    {
      std::lock_guard<std::mutex> lock(Process().mu);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
    std::lock_guard<std::mutex> lock(Process().mu);
    if (!broken_ && pending_.empty()) MPI_Comm_free(&comm_);
  }

  const CommConfig& config() const { return config_; }

  // Starts a collective: start(comm, request, i) makes the MPI call of piece i of `pieces`
  // and returns its code. While a chain of pieces is being started, later collectives
  // wait in line, so that every rank starts the same MPI collectives in the same order.
  WorkPtr Start(const std::string& op, const std::string& detail, Millis timeout,
                std::function<int(MPI_Comm, MPI_Request*, int)> start, int pieces = 1,
                std::function<void()> on_done = nullptr) {
    std::unique_lock<std::mutex> lock(Process().mu);
    const std::string what =
        StrFormat("%s #%llu%s", op.c_str(), static_cast<unsigned long long>(next_seq_++), detail.c_str());
    auto work = std::make_shared<MpiWork>(what, weak_from_this());
    if (broken_) {
      work->Fail(broken_);
      return work;
    }
    Pending p;
    p.work = work;
    p.timeout = timeout.count() > 0 ? timeout : config_.timeout;
    p.deadline = Clock::now() + p.timeout;
    p.start = std::move(start);
    p.pieces = pieces;
    p.on_done = std::move(on_done);
    waiting_.push_back(std::move(p));
    StartWaiting();
    lock.unlock();
    cv_.notify_all();
    return work;
  }

  // Waits for `work` driving MPI on this thread, until it is done or `until` passes.
  void Drive(HostWork* work, Clock::time_point until) {
    int idle = 0;
    while (!work->IsCompleted() && Clock::now() < until) {
      {
        std::lock_guard<std::mutex> lock(Process().mu);
        Poll();
      }
      // Spin (yielding the core to whoever needs it) while messages are in flight; after a
      // while, sleep a little so that a long wait does not burn a core.
      if (++idle < 20000) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  void Abort(const std::string& reason) {
    std::lock_guard<std::mutex> lock(Process().mu);
    if (!broken_) {
      Break(std::make_exception_ptr(CommError(
          CommErrorKind::kAborted,
          StrFormat("rank %d: the communicator was aborted (%s); no collective can run on it "
                    "any more",
                    config_.rank, reason.c_str()))));
    }
  }

  std::exception_ptr error() {
    std::lock_guard<std::mutex> lock(Process().mu);
    return broken_;
  }

 private:
  // Tests every pending collective; finishes the completed ones and fails everything when
  // one errs or outlives its timeout. Needs Process().mu.
  void Poll() {
    const auto now = Clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      int done = 0;
      const int rc = MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        Break(std::make_exception_ptr(MpiFailure(config_.rank, it->work->Describe(), rc)));
        return;
      }
      if (done && it->next_piece < it->pieces) {
        const int rc_next = it->start(comm_, &it->request, it->next_piece++);
        if (rc_next != MPI_SUCCESS) {
          Break(std::make_exception_ptr(MpiFailure(config_.rank, it->work->Describe(), rc_next)));
          return;
        }
      } else if (done) {
        if (it->on_done) it->on_done();
        it->work->Finish();
        it = pending_.erase(it);
        continue;
      }
      if (now > it->deadline) {
        Break(std::make_exception_ptr(CommError(
            CommErrorKind::kTimeout,
            StrFormat("rank %d: %s did not complete within %lld ms: another rank is hung, "
                      "slow, or calls a different collective (a rank that exited is named by "
                      "mpirun); raise --timeout if the ranks are only slow, else restart the "
                      "job from its last checkpoint",
                      config_.rank, it->work->Describe().c_str(),
                      static_cast<long long>(it->timeout.count())))));
        return;
      }
      ++it;
    }
    StartWaiting();
  }

  // Starts the collectives waiting in line while no chain of pieces is half started.
  // Needs Process().mu.
  void StartWaiting() {
    for (;;) {
      for (const auto& p : pending_) {
        if (p.next_piece < p.pieces) return;
      }
      if (waiting_.empty() || broken_) return;
      Pending p = std::move(waiting_.front());
      waiting_.pop_front();
      const int rc = p.start(comm_, &p.request, p.next_piece++);
      if (rc != MPI_SUCCESS) {
        pending_.push_back(std::move(p));
        Break(std::make_exception_ptr(MpiFailure(config_.rank, pending_.back().work->Describe(), rc)));
        return;
      }
      pending_.push_back(std::move(p));
    }
  }

  // Marks the communicator broken and fails every pending collective (their requests are
  // left to MPI: a collective cannot be cancelled). Needs Process().mu.
  void Break(std::exception_ptr error) {
    if (!broken_) broken_ = error;
    Process().failed = true;
    for (auto& p : pending_) p.work->Fail(broken_);
    for (auto& p : waiting_) p.work->Fail(broken_);
    pending_.clear();
    waiting_.clear();
  }

  // Progresses collectives nobody waits on (MPI moves data only inside MPI calls).
  void ProgressLoop() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(Process().mu);
        cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
        if (pending_.empty() && stopping_) return;
        if (stopping_ && broken_) return;
        Poll();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  const CommConfig config_;
  MPI_Comm comm_;
  std::deque<Pending> pending_;  // started
  std::deque<Pending> waiting_;  // in line behind a chain of pieces
  std::exception_ptr broken_;
  uint64_t next_seq_ = 0;
  bool stopping_ = false;
  std::condition_variable_any cv_;
  std::thread thread_;
};

void MpiWork::Wait(Millis timeout) {
  const auto until = timeout.count() < 0 ? Clock::time_point::max() : Clock::now() + timeout;
  if (auto state = state_.lock()) {
    state->Drive(this, until);
  } else if (!IsCompleted()) {
    throw CommError(CommErrorKind::kAborted,
                    Describe() + " cannot complete: its communicator was destroyed while it ran");
  }
  if (!IsCompleted()) {
    throw CommError(CommErrorKind::kTimeout,
                    StrFormat("%s is still running after the caller's wait of %lld ms; it goes "
                              "on (bounded by its own timeout): wait again, or Abort() the "
                              "communicator",
                              Describe().c_str(), static_cast<long long>(timeout.count())));
  }
  HostWork::Wait(Millis(0));  // rethrows the failure, if any
}

int CheckedCount(size_t count, const char* op) {
  if (count > static_cast<size_t>(INT_MAX)) {
    throw CommError(CommErrorKind::kInvalid,
                    StrFormat("%s: the mpi backend takes at most %d elements per call, not %zu; "
                              "split the buffer",
                              op, INT_MAX, count));
  }
  return static_cast<int>(count);
}

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(std::shared_ptr<MpiState> state) : state_(std::move(state)) {}

  int rank() const override { return state_->config().rank; }
  int size() const override { return state_->config().size; }
  const char* backend() const override { return "mpi"; }

  WorkPtr AllReduce(CommBuffer b, const AllReduceOptions& options) override {
    CheckBuffer(b, "allreduce", "");
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Op op = MPI_OP_NULL;
    CheckReducible(b, "allreduce", &type, &op);
    const bool average = options.op == ReduceOp::kAverage;
    const int n = size();
    // Large buffers in pieces, one after another (each stays in cache; see PieceBytes()).
    const size_t piece = std::max<size_t>(1, PieceBytes(state_->config()) / DTypeSize(b.dtype));
    const size_t pieces = b.count == 0 ? 1 : (b.count + piece - 1) / piece;
    CheckedCount(pieces, "allreduce");
    const size_t element = DTypeSize(b.dtype);
    return state_->Start(
        "allreduce", " (" + DescribeBuffer(b) + (average ? ", average)" : ", sum)"), options.timeout,
        [b, piece, element, type, op](MPI_Comm comm, MPI_Request* r, int i) {
          const size_t offset = static_cast<size_t>(i) * piece;
          const int count = static_cast<int>(std::min(piece, b.count - std::min(offset, b.count)));
          return MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(b.data) + offset * element, count, type, op,
                                comm, r);
        },
        static_cast<int>(pieces), Scaling(b, average, n));
  }

  WorkPtr Broadcast(CommBuffer b, const BroadcastOptions& options) override {
    CheckBuffer(b, "broadcast", "");
    if (options.root < 0 || options.root >= size()) {
      throw CommError(CommErrorKind::kInvalid,
                      StrFormat("broadcast: root %d is not a rank of this world of %d",
                                options.root, size()));
    }
    const int bytes = CheckedCount(b.bytes(), "broadcast");
    const int root = options.root;
    return state_->Start("broadcast", StrFormat(" (%s from rank %d)", DescribeBuffer(b).c_str(), root),
                         options.timeout, [b, bytes, root](MPI_Comm comm, MPI_Request* r, int) {
                           return MPI_Ibcast(b.data, bytes, MPI_BYTE, root, comm, r);
                         });
  }

  WorkPtr AllGather(CommBuffer in, CommBuffer out, const AllGatherOptions& options) override {
    CheckBuffer(in, "allgather", "input");
    CheckBuffer(out, "allgather", "output");
    CheckWorldSized(in, out, size(), "allgather", "output");
    const int bytes = CheckedCount(in.bytes(), "allgather");
    CheckedCount(out.bytes(), "allgather");
    return state_->Start("allgather", " (" + DescribeBuffer(in) + " per rank)", options.timeout,
                         [in, out, bytes](MPI_Comm comm, MPI_Request* r, int) {
                           return MPI_Iallgather(in.data, bytes, MPI_BYTE, out.data, bytes, MPI_BYTE,
                                                 comm, r);
                         });
  }

  WorkPtr ReduceScatter(CommBuffer in, CommBuffer out,
                        const ReduceScatterOptions& options) override {
    CheckBuffer(in, "reduce-scatter", "input");
    CheckBuffer(out, "reduce-scatter", "output");
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Op op = MPI_OP_NULL;
    CheckReducible(in, "reduce-scatter", &type, &op);
    CheckWorldSized(out, in, size(), "reduce-scatter", "input");
    const int count = CheckedCount(out.count, "reduce-scatter");
    CheckedCount(in.count, "reduce-scatter");
    const bool average = options.op == ReduceOp::kAverage;
    return state_->Start(
        "reduce-scatter", " (" + DescribeBuffer(in) + ")", options.timeout,
        [in, out, count, type, op](MPI_Comm comm, MPI_Request* r, int) {
          return MPI_Ireduce_scatter_block(in.data, out.data, count, type, op, comm, r);
        },
        1, Scaling(out, average, size()));
  }

  WorkPtr Barrier(const BarrierOptions& options) override {
    return state_->Start("barrier", "", options.timeout,
                         [](MPI_Comm comm, MPI_Request* r, int) { return MPI_Ibarrier(comm, r); });
  }

  void Abort(const std::string& reason) override { state_->Abort(reason); }
  std::exception_ptr AsyncError() override { return state_->error(); }

 private:
  static std::function<void()> Scaling(const CommBuffer& b, bool average, int n) {
    if (!average) return nullptr;
    return [b, n] { ScaleInPlace(b.data, b.count, b.dtype, 1.0 / n); };
  }

  static void CheckReducible(const CommBuffer& b, const char* op, MPI_Datatype* type, MPI_Op* mpi_op) {
    CheckHostReducible(b, op, "mpi", ReductionFor(b.dtype, type, mpi_op));
  }

  std::shared_ptr<MpiState> state_;
};

// FNV-1a, to compare fingerprints across ranks in one allgather.
uint64_t Hash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

std::unique_ptr<Communicator> CreateMpiCommunicator(const CommConfig& config) {
  InitializeMpi(config.rank);
  int rank = -1, size = 0;
  MPI_Comm comm = MPI_COMM_NULL;
  {
    std::lock_guard<std::mutex> lock(Process().mu);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != config.size || rank != config.rank) {
      throw CommError(
          CommErrorKind::kMismatch,
          StrFormat("the mpi backend found this process as rank %d of %d in MPI_COMM_WORLD, but "
                    "the run expects rank %d of %d: start the ranks with `mpirun -np %d "
                    "onnx-train ... --backend mpi` (or onnx-train's --backend mpi --world-size "
                    "%d, which runs mpirun)",
                    rank, size, config.rank, config.size, config.size, config.size));
    }
    const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    if (rc != MPI_SUCCESS) throw MpiFailure(config.rank, "MPI_Comm_dup", rc);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  }
  auto state = std::make_shared<MpiState>(config, comm);
  // Every rank must train the same model with the same settings.
  const uint64_t mine = Hash(config.fingerprint);
  std::vector<uint64_t> all(static_cast<size_t>(size));
  const uint64_t* in = &mine;
  uint64_t* out = all.data();
  state
      ->Start("join", "", config.timeout,
              [in, out](MPI_Comm c, MPI_Request* r, int) {
                return MPI_Iallgather(in, 1, MPI_UINT64_T, out, 1, MPI_UINT64_T, c, r);
              })
      ->Wait();
  std::vector<int> differ;
  for (int r = 0; r < size; ++r) {
    if (all[static_cast<size_t>(r)] != all[0]) differ.push_back(r);
  }
  if (!differ.empty()) {
    throw CommError(CommErrorKind::kMismatch,
                    StrFormat("rank %d: %s %s a different model or settings than rank 0 (their "
                              "fingerprints differ); start every rank with the same model file "
                              "and options",
                              config.rank, DescribeRanks(differ).c_str(),
                              differ.size() == 1 ? "has" : "have"),
                    differ);
  }
  return std::make_unique<MpiCommunicator>(std::move(state));
}

namespace {
// Loading the plugin registers the backend under "mpi".
struct MpiRegistrar {
  MpiRegistrar() { RegisterCommunicatorBackend("mpi", CreateMpiCommunicator); }
} mpi_registrar;
}  // namespace

}  // namespace ot
