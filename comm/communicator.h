// Communicator: the collective-communication interface of the data-parallel trainer, in
// the shape of PyTorch c10d's Backend and Work. One virtual method per collective, each
// returning an asynchronous Work handle; an options struct per op; failures are typed
// CommErrors whose message names the rank(s) at fault and what to do. Backends (Gloo for
// host buffers, NCCL for CUDA buffers, MPI for host buffers under mpirun) register by
// name; CreateCommunicator() connects one.
//
// Buffers are plain memory (pointer + element count + dtype + device): the comm layer knows
// nothing of the executor. comm/tensor_buffer.h turns an ot::Tensor into a CommBuffer.
// A buffer handed to a collective must stay alive and untouched until its Work completes.
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/dtype.h"
#include "graph/error.h"
#include "runtime/core/device.h"

namespace ot {

// What went wrong in a collective or at connect time.
enum class CommErrorKind {
  kTimeout,      // a rank did not take part in time (hung, slow, never joined)
  kPeerLost,     // a connection to a rank broke (it exited or was killed)
  kMismatch,     // ranks disagree (model fingerprint, world size, rank claimed twice)
  kInvalid,      // a bad argument (dtype, count, root) or an unknown backend
  kUnavailable,  // the rendezvous store cannot be used (Redis unreachable, dir unwritable)
  kAborted,      // the communicator was aborted or broke on an earlier failure
};
const char* CommErrorKindName(CommErrorKind kind);

class CommError : public Error {
 public:
  CommError(CommErrorKind kind, const std::string& message, std::vector<int> ranks = {})
      : Error(message), kind_(kind), ranks_(std::move(ranks)) {}
  CommErrorKind kind() const { return kind_; }
  // The ranks the failure is blamed on (empty when none could be named).
  const std::vector<int>& ranks() const { return ranks_; }

 private:
  CommErrorKind kind_;
  std::vector<int> ranks_;
};

// "rank 2" or "ranks 1, 3".
std::string DescribeRanks(const std::vector<int>& ranks);

// A span of device memory handed to a collective.
struct CommBuffer {
  void* data = nullptr;
  size_t count = 0;  // elements
  DType dtype = DType::kFloat32;
  Device device = Device::CPU();

  size_t bytes() const { return count * DTypeSize(dtype); }
  template <typename T>
  static CommBuffer Of(T* data, size_t count, Device device = Device::CPU()) {
    return CommBuffer{data, count, DTypeOf<T>::value, device};
  }
};

enum class ReduceOp { kSum, kAverage };

// Allreduce algorithm; kAuto chooses by message size and world size (the backend says how).
enum class AllreduceAlgorithm { kAuto, kRing, kRingChunked, kHalvingDoubling, kBcube };
const char* AllreduceAlgorithmName(AllreduceAlgorithm algorithm);
AllreduceAlgorithm ParseAllreduceAlgorithm(const std::string& name);  // throws CommError

// Fields every collective takes.
struct CollectiveOptions {
  // The collective fails with a CommError once it has run this long; zero means the
  // communicator's timeout (CommConfig::timeout). Gloo: float32 allreduces up to 1 MiB
  // (halving-doubling on sync pairs) are bounded by the communicator's timeout whatever
  // this says; larger ones honour it (a shorter one sends them over the unbound ring).
  std::chrono::milliseconds timeout{0};
  // Backend stream to order the collective on (NCCL: a cudaStream_t); host backends ignore
  // it. Null means the backend's own stream.
  void* stream = nullptr;
};
struct AllReduceOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::kSum;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;
};
struct BroadcastOptions : CollectiveOptions {
  int root = 0;
};
struct AllGatherOptions : CollectiveOptions {};
struct ReduceScatterOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::kSum;
};
struct BarrierOptions : CollectiveOptions {};

// Wait() without an argument waits until the collective completes or fails; the
// collective's own timeout bounds that.
constexpr std::chrono::milliseconds kUntilDone{-1};

// Handle of one collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  // True once the collective has completed or failed.
  virtual bool IsCompleted() = 0;
  // Blocks until the collective completes (returns) or fails (throws its CommError). With a
  // timeout, throws CommError(kTimeout) when it runs out first; the collective goes on and
  // may be waited for again.
  virtual void Wait(std::chrono::milliseconds timeout = kUntilDone) = 0;
  // The failure, once failed; null otherwise.
  virtual std::exception_ptr Error() = 0;
  // Orders later work on a device stream after this collective without blocking the host
  // (NCCL); host backends wait.
  virtual void WaitOnStream(void* /*stream*/) { Wait(); }
  // "allreduce #12 (4194304 B float)".
  virtual std::string Describe() const = 0;
  // When the collective completed (steady clock) where the backend records it; the
  // epoch (time_point{}) while it runs or when the backend does not record it.
  virtual std::chrono::steady_clock::time_point CompletedAt() { return {}; }
};
using WorkPtr = std::shared_ptr<Work>;

// How a communicator finds its peers.
struct CommConfig {
  int rank = -1;
  int size = 0;
  int local_rank = 0;
  // Rendezvous store: "file:DIR" (a directory on this host or a shared file system),
  // "redis://HOST:PORT", or empty: a FileStore in a per-run directory under
  // $TMPDIR/onnx-train-rdzv (one host).
  std::string rendezvous;
  // Keeps jobs sharing a store or host apart; all ranks of one job use the same id.
  std::string run_id = "default";
  // Compared across ranks at connect (model hash, sizes): a difference is a kMismatch.
  std::string fingerprint;
  // Address this rank's connections listen on; empty: loopback when the store is a file,
  // else this host's name.
  std::string listen_host;
  // Connect timeout (every rank must join within it) and default collective timeout.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // After a failure each rank reports it to the store and waits this long for the others'
  // reports; ranks that do not report are named as lost.
  std::chrono::milliseconds failure_report_window{std::chrono::seconds(3)};
  // Device of the buffers; the "auto" backend picks NCCL for CUDA, Gloo otherwise.
  Device device = Device::CPU();
  // Allreduce piece sizes, for measurements (bench-comm reads them from
  // $ONNXTRAIN_GLOO_SYNC_BYTES and $ONNXTRAIN_MPI_PIECE_BYTES); 0: the measured defaults.
  // Gloo: the largest piece on the sync pairs (1 MiB; never above net.core.wmem_max, at
  // least 4 KiB). MPI: the piece of a large allreduce (4 MiB; below 4 KiB: the default).
  size_t gloo_sync_bytes = 0;
  size_t mpi_piece_bytes = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;

  // In place: every rank ends with the sum (or average) of all ranks' buffers.
  virtual WorkPtr AllReduce(CommBuffer buffer, const AllReduceOptions& options = {}) = 0;
  // In place: every rank ends with root's buffer.
  virtual WorkPtr Broadcast(CommBuffer buffer, const BroadcastOptions& options = {}) = 0;
  // output (size() * input.count elements) gets every rank's input in rank order.
  virtual WorkPtr AllGather(CommBuffer input, CommBuffer output,
                            const AllGatherOptions& options = {}) = 0;
  // input holds size() * output.count elements; output gets this rank's slice of the
  // reduction.
  virtual WorkPtr ReduceScatter(CommBuffer input, CommBuffer output,
                                const ReduceScatterOptions& options = {}) = 0;
  virtual WorkPtr Barrier(const BarrierOptions& options = {}) = 0;

  // Fails every pending collective with kAborted at once and makes later ones fail; the
  // connections are closed. Use it to end a job after a failure elsewhere.
  virtual void Abort(const std::string& reason) = 0;
  // The first failure this communicator has seen (it is unusable after one); null if none.
  virtual std::exception_ptr AsyncError() = 0;
};

// Backend registry. A factory connects (rendezvous included) and throws CommError.
using CommunicatorFactory = std::function<std::unique_ptr<Communicator>(const CommConfig&)>;
void RegisterCommunicatorBackend(const std::string& name, CommunicatorFactory factory);
std::vector<std::string> CommunicatorBackends();
// backend: a registered name or "auto" (NCCL for CUDA devices, Gloo otherwise).
std::unique_ptr<Communicator> CreateCommunicator(const std::string& backend,
                                                 const CommConfig& config);

// Throws CommError(kInvalid) naming the op when a buffer is unusable (null with a count,
// an unsupported dtype).
void CheckBuffer(const CommBuffer& buffer, const char* op, const char* which);
// Throws CommError(kInvalid) naming `backend` unless a host backend can sum `buffer`: its
// dtype is one it reduces (`reducible`: float32, float64, float16 and bfloat16) and it lies
// in host memory.
void CheckHostReducible(const CommBuffer& buffer, const char* op, const char* backend, bool reducible);
// Throws CommError(kInvalid) unless `whole` holds world_size x `part` elements of the same
// dtype (allgather: part in, whole out; reduce-scatter: whole in, part out). `which` names
// the whole buffer ("output", "input").
void CheckWorldSized(const CommBuffer& part, const CommBuffer& whole, int world_size, const char* op,
                     const char* which);

}  // namespace ot
