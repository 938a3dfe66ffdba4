// Bucketed, overlapped gradient allreduce.
#include "train/parallel/gradient_reducer.h"

#include <algorithm>
#include <cstring>

#include "comm/tensor_buffer.h"
#include "graph/error.h"

namespace ot {

GradientReducer::GradientReducer(Communicator& comm, const std::vector<std::pair<std::string, int64_t>>& grads,
                                 const BucketOptions& options)
    : comm_(comm), options_(options) {
  // Backward produces the last parameters' gradients first: fill buckets in reverse.
  size_t limit = options_.first_bucket_bytes;
  for (auto it = grads.rbegin(); it != grads.rend(); ++it) {
    const size_t bytes = static_cast<size_t>(it->second) * sizeof(float);
    if (buckets_.empty() || (!buckets_.back().buffer.empty() && buckets_.back().buffer.size() * sizeof(float) + bytes > limit)) {
      if (!buckets_.empty()) limit = options_.bucket_bytes;
      buckets_.emplace_back();
    }
    Bucket& b = buckets_.back();
    Slot s;
    s.bucket = buckets_.size() - 1;
    s.offset = b.buffer.size();
    s.count = it->second;
    b.buffer.resize(b.buffer.size() + static_cast<size_t>(it->second));
    slots_[it->first] = s;
  }
}

RunOptions GradientReducer::Hooks() {
  for (auto& b : buckets_) {
    b.pending = 0;
    b.work.reset();
    b.reduced = false;
    b.started = b.completed = {};
  }
  for (auto& [name, s] : slots_) {
    buckets_[s.bucket].pending++;
    s.tensor = Tensor();
  }
  wait_seconds_ = 0;
  stats_ = StepStats();
  RunOptions o;
  o.on_value_ready = [this](const std::string& name, const Tensor& value) { OnValue(name, value); };
  o.before_node = [this](const Node& node) { BeforeNode(node); };
  return o;
}

void GradientReducer::NoteCompleted() {
  for (auto& b : buckets_) {
    if (b.work && b.completed == std::chrono::steady_clock::time_point() && b.work->IsCompleted()) {
      b.completed = b.work->CompletedAt();
      if (b.completed == std::chrono::steady_clock::time_point()) b.completed = std::chrono::steady_clock::now();
    }
  }
}

Tensor GradientReducer::BucketSlice(const Bucket& b, const Slot& s) {
  if (b.device_buffer.defined()) {
    return Tensor::View(DType::kFloat32, {s.count}, b.device_buffer.data<float>() + s.offset, b.device_buffer.device());
  }
  return Tensor::View(DType::kFloat32, {s.count}, const_cast<float*>(b.buffer.data()) + s.offset, Device::CPU());
}

void GradientReducer::OnValue(const std::string& name, const Tensor& value) {
  auto it = slots_.find(name);
  if (it == slots_.end()) return;
  Slot& s = it->second;
  OT_CHECK(value.dtype() == DType::kFloat32 && value.numel() == s.count, "gradient '%s' is %s, expected %lld floats",
           name.c_str(), value.Describe().c_str(), (long long)s.count);
  OT_CHECK(value.is_plain(), "gradient '%s' arrived in a non-plain layout; the reducer needs plain data", name.c_str());
  Bucket& b = buckets_[s.bucket];
  s.tensor = value;
  // NCCL reduces device gradients in a device bucket (copies ordered on the compute
  // stream); every other case goes through the host bucket.
  if (value.device().type != DeviceType::kCPU && std::string(comm_.backend()) == "nccl" &&
      (!b.device_buffer.defined() || b.device_buffer.device() != value.device())) {
    b.device_buffer = Tensor::Empty(DType::kFloat32, {static_cast<int64_t>(b.buffer.size())}, value.device());
  }
  BucketSlice(b, s).CopyFrom(value.Reshaped({s.count}));
  OT_CHECK(b.pending > 0, "gradient '%s' was produced twice in one step", name.c_str());
  if (--b.pending == 0) {
    AllReduceOptions ar;
    ar.op = ReduceOp::kAverage;
    ar.timeout = options_.timeout;
    b.started = std::chrono::steady_clock::now();
    b.work = comm_.AllReduce(b.device_buffer.defined() ? BufferOf(b.device_buffer)
                                                       : CommBuffer::Of(b.buffer.data(), b.buffer.size()),
                             ar);
  }
}

void GradientReducer::BeforeNode(const Node& node) {
  for (const auto& in : node.inputs) {
    auto it = slots_.find(in);
    if (it == slots_.end()) continue;
    Slot& s = it->second;
    Bucket& b = buckets_[s.bucket];
    OT_CHECK(b.work != nullptr, "%s reads gradient '%s' before its bucket was complete (internal ordering error)",
             node.Describe().c_str(), in.c_str());
    if (!b.reduced) {
      const auto start = std::chrono::steady_clock::now();
      NoteCompleted();
      if (b.device_buffer.defined()) {
        b.work->WaitOnStream(nullptr);  // the optimizer's kernels wait, not the host
      } else {
        b.work->Wait(options_.timeout);
      }
      wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      NoteCompleted();
      b.reduced = true;
    }
    s.tensor.Reshaped({s.count}).CopyFrom(BucketSlice(b, s));
  }
}

void GradientReducer::FinishStep() {
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    OT_CHECK(b.pending == 0 && b.work, "gradient bucket %zu was not complete at the end of the step", i);
    // A device bucket's stream wait does not bound the allreduce: wait for it here.
    if (!b.reduced || b.device_buffer.defined()) {
      NoteCompleted();
      const auto start = std::chrono::steady_clock::now();
      b.work->Wait(options_.timeout);
      wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }
  for (auto& [name, s] : slots_) s.tensor = Tensor();
  // Overlap counters: the union of the buckets' in-flight intervals, and the waits.
  NoteCompleted();
  std::vector<std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point>> spans;
  for (const auto& b : buckets_) spans.emplace_back(b.started, std::max(b.started, b.completed));
  std::sort(spans.begin(), spans.end());
  double busy = 0;
  for (size_t i = 0; i < spans.size();) {
    auto begin = spans[i].first, end = spans[i].second;
    for (++i; i < spans.size() && spans[i].first <= end; ++i) end = std::max(end, spans[i].second);
    busy += std::chrono::duration<double>(end - begin).count();
  }
  stats_.allreduce_seconds = busy;
  stats_.wait_seconds = wait_seconds_;
  stats_.buckets = buckets_.size();
}

}  // namespace ot
