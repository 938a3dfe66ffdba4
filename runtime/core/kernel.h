// OpKernel: the unit of execution. A kernel is made once per node and per plan (input
// shapes); Prepare() declares output types and shapes and builds whatever the library
// needs (oneDNN primitives, cuDNN descriptors); Compute() runs it on bound buffers.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/ir.h"
#include "runtime/core/cross_replica.h"
#include "runtime/core/tensor.h"

namespace ot {

class AlgorithmChoices;

// What an executor's options tell its kernels (ExecutorOptions fills it), and where the
// kernels keep what they chose by timing.
struct KernelSettings {
  // CPU convolutions (--conv-algo): "auto", "direct", "winograd", "taps", "winograd2" or
  // "winograd4" (runtime/cpu/conv/conv_algorithm.h).
  std::string conv_algo = "auto";
  // CPU: channels per block of the blocked activation layouts, 8 or 16; 0: the CPU's own
  // (16 with AVX-512, else 8).
  int cpu_channel_block = 0;
  // CUDA: the most scratch memory one cuDNN call (a convolution) may take, in bytes; an
  // algorithm that needs more is passed over for the next one cuDNN ranks. 0: no fixed
  // cap (an algorithm whose workspace the device cannot give is still passed over).
  size_t cuda_workspace_limit = 0;
  // The executor's timed choices (runtime/core/algorithm_choices.h); null: none are kept.
  AlgorithmChoices* choices = nullptr;
};

struct KernelInfo {
  const Node& node;
  int64_t opset;
  Device device;
};

// What a kernel sees while it prepares or runs.
class KernelContext {
 public:
  KernelContext(const Node& node, std::vector<const Tensor*> inputs, std::vector<Tensor*> outputs,
                std::mt19937_64* rng, Device device = Device::CPU(), CrossReplicaSum* cross_replica = nullptr,
                const KernelSettings* settings = nullptr)
      : node_(node),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)),
        rng_(rng),
        device_(device),
        cross_replica_(cross_replica),
        settings_(settings) {}

  const Node& node() const { return node_; }
  int NumInputs() const { return static_cast<int>(inputs_.size()); }
  // nullptr for an absent optional input.
  const Tensor* OptionalInput(int i) const { return i < NumInputs() ? inputs_[static_cast<size_t>(i)] : nullptr; }
  const Tensor& Input(int i) const {
    const Tensor* t = OptionalInput(i);
    if (!t) throw Error(node_.Describe() + ": required input " + std::to_string(i) + " is missing");
    return *t;
  }
  int NumOutputs() const { return static_cast<int>(outputs_.size()); }
  bool HasOutput(int i) const { return i < NumOutputs() && outputs_[static_cast<size_t>(i)] != nullptr; }
  // The bound output buffer (Compute) or the tensor whose spec Prepare fills.
  Tensor& Output(int i) const {
    if (!HasOutput(i)) throw Error(node_.Describe() + ": output " + std::to_string(i) + " is not requested");
    return *outputs_[static_cast<size_t>(i)];
  }
  // Prepare: declares the type, shape and (optionally) layout of output i; ignored when
  // not requested. Only kernels that accept layouts should hand out non-plain outputs.
  void SetOutput(int i, DType dtype, Shape shape, std::shared_ptr<const TensorLayout> layout = nullptr) {
    if (HasOutput(i))
      *outputs_[static_cast<size_t>(i)] =
          Tensor::View(dtype, std::move(shape), nullptr, device_, std::move(layout));
  }
  std::mt19937_64& rng() const { return *rng_; }
  // The device the kernel runs on (its inputs and outputs live there).
  Device device() const { return device_; }
  // Sums over the replicas of a data-parallel step (synchronised batch normalization);
  // null outside data-parallel training.
  CrossReplicaSum* cross_replica() const { return cross_replica_; }
  // The executor's settings for its kernels (defaults where the context was made without).
  const KernelSettings& settings() const {
    static const KernelSettings defaults;
    return settings_ ? *settings_ : defaults;
  }

 private:
  const Node& node_;
  std::vector<const Tensor*> inputs_;
  std::vector<Tensor*> outputs_;
  std::mt19937_64* rng_;
  Device device_;
  CrossReplicaSum* cross_replica_;
  const KernelSettings* settings_;
};

class OpKernel {
 public:
  explicit OpKernel(const KernelInfo& info) : node_(info.node), opset_(info.opset), device_(info.device) {}
  virtual ~OpKernel() = default;
  // Declares every requested output with SetOutput; inputs hold real data here (so shape
  // tensors can be read). Throws ot::Error, or ot::UnsupportedError for a data type or
  // attribute this kernel does not handle.
  virtual void Prepare(KernelContext& ctx) = 0;
  // Computes into the bound outputs. Must not keep pointers from one call to the next.
  virtual void Compute(KernelContext& ctx) = 0;
  // Asked once per plan before Prepare, with the inputs as they are: true when this
  // kernel reads its inputs in whatever layout they have (it converts any it cannot use
  // itself). Otherwise the executor hands it plain copies of non-plain inputs.
  virtual bool AcceptsLayouts(const KernelContext& ctx) const { return false; }
  // Asked after Prepare: the input whose buffer output `output` may be written into
  // (same dtype and shape; each element of the input is read before that element of the
  // output is written, as in elementwise updates), or -1. The executor uses it to update
  // training state in place (optimizer outputs written straight into the weights and
  // moments instead of into new buffers copied back after the step).
  virtual int InPlaceInput(int output) const { return -1; }
  // Asked after Prepare: what the kernel chose at plan time that a plan dump should show
  // (e.g. a convolution's algorithm per primitive); empty when nothing.
  virtual std::string PlanNote() const { return {}; }
  // Asked after Prepare: true when output 0 is input 0's bytes unchanged (Flatten,
  // Reshape). The CPU executor may then bind output 0 to input 0's buffer; Compute still
  // runs (for its checks) and must skip the copy when the two are the same memory.
  virtual bool OutputIsInputView() const { return false; }
  // Errors that a device kernel records instead of raising (labels out of range, integer
  // division by zero, Gather indices out of range: a flag the kernel sets and the host
  // reads without waiting): throws ot::Error naming the node when an earlier run of this
  // kernel reported one. Compute asks it first; the executor asks every kernel around
  // each whole-step CUDA graph replay, which runs no Compute.
  virtual void CheckDeviceErrors() const {}

 protected:
  // Error helpers that name the node.
  [[noreturn]] void Fail(const std::string& what) const { throw Error(node_.Describe() + ": " + what); }
  [[noreturn]] void Unsupported(const std::string& what) const {
    throw UnsupportedError(node_.op_type + ": " + what);
  }

  const Node& node_;
  int64_t opset_;
  Device device_;
};

}  // namespace ot
