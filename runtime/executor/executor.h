// Executor: runs a model's graph on one device. The first run for a given set of input
// shapes traces the graph (kernels prepared, output shapes found) and makes a static,
// liveness-based memory plan; later runs with the same shapes only execute.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "runtime/core/algorithm_choices.h"
#include "runtime/core/kernel.h"
#include "runtime/core/tensor.h"

namespace ot {

class Executor;

struct ExecutorOptions {
  Device device = Device::CPU();
  int num_threads = 0;  // 0: leave the library default
  uint64_t seed = 0;    // for random ops (Dropout in training mode)
  // (value, state): after each run, value is copied into the initializer named state
  // (training graphs: updated weights, optimizer state, BatchNorm running statistics).
  std::vector<std::pair<std::string, std::string>> state_updates;
  // Initializers that this executor's state has too (same name, type and shape) share its
  // storage instead of being copied: an evaluation executor sees the training one's
  // weights as they are updated. Must outlive this executor.
  Executor* shared_state = nullptr;
  // CUDA only: once a plan has run, its kernels are captured into a CUDA graph and later
  // runs with the same input shapes replay that graph (one launch per step). Runs with
  // RunOptions hooks, plans with random ops and plans whose kernels cannot be captured
  // take the normal path.
  bool cuda_graphs = false;
  // Data-parallel training: the kernels' sums over replicas (KernelContext::cross_replica);
  // must outlive this executor. Null: none.
  CrossReplicaSum* cross_replica = nullptr;
  // CPU convolutions: "auto", "direct", "winograd", "taps", "winograd2" or "winograd4"
  // (runtime/cpu/conv/conv_algorithm.h); empty: auto.
  std::string conv_algo;
  // CUDA: the most workspace one cuDNN convolution may take, in bytes (--cudnn-workspace-mb,
  // KernelSettings::cuda_workspace_limit); 0: as much as the device can give.
  size_t cuda_workspace_limit = 0;
  // CPU: channels per block of the blocked activation layouts, 8 or 16; 0: the CPU's own
  // (16 with AVX-512, else 8). Forcing 8 on an AVX-512 machine tests AVX2's layout.
  int cpu_channel_block = 0;
  // Times every node's kernel (with its layout conversions) on each replayed run;
  // ProfileReport() sums the times by op type and names the slowest nodes. CPU kernels are
  // synchronous; on CUDA the figures are launch times.
  bool profile = false;
  // With profile: time the nodes by the process's CPU time (CLOCK_PROCESS_CPUTIME_ID) instead
  // of the wall clock: on a machine shared with other work, at one thread, the kernels' own
  // cost without the time the process waited for a core.
  bool profile_cpu_clock = false;
  // With profile: the report goes to stderr as the executor ends.
  bool print_profile = false;
  // ProfileReport names every node, not only the 15 slowest.
  bool profile_all_nodes = false;
  // CPU: a run whose feeds and state together are smaller than this runs its plan on one
  // thread (its kernels are prepared and run with one OpenMP thread). A small model's
  // kernels are microseconds long, and waking the other threads for each of them costs
  // more than they save (the bound was chosen from SimpleNN's step at batches 32 to 512 on
  // one and two threads; benchmarks/cpu_speed_notes.md keeps the figures). 0: never (tests
  // that compare runs summed by the same thread blocking).
  size_t serial_below_bytes = 512 << 10;
};

struct RunOptions {
  // Called as each value is produced (after its node ran), in execution order. The tensor
  // may be in a kernel's layout (Tensor::layout()); ToHost / CopyFrom give plain data.
  std::function<void(const std::string& name, const Tensor& value)> on_value_ready;
  // Called before each node runs (before its inputs are read), in execution order; a
  // data-parallel trainer waits here for the allreduce of the gradients the node reads.
  std::function<void(const Node& node)> before_node;
};

struct PlanStats {
  size_t arena_bytes = 0;       // planned buffer memory for intermediate values
  size_t unplanned_bytes = 0;   // what one buffer per value would take
  int num_nodes = 0;
  int threads = 0;              // CPU threads the plan's kernels run on (0: not a CPU plan)
};

class Executor {
 public:
  // Value ids read and written by one step (-1: absent optional).
  struct StepBinding {
    std::vector<int> inputs;
    std::vector<int> outputs;
  };

  // Throws ot::UnsupportedError listing every node whose op has no kernel on the device.
  // The executor keeps the model's structure; initializer data goes to the device and
  // model().graph.initializers keep only names, types and shapes.
  Executor(const Model& model, ExecutorOptions options = {});
  // Takes the model over, freeing each initializer's host copy as it is uploaded.
  Executor(Model&& model, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs the graph. `feeds` are the graph inputs by name; `fetches` the values to return
  // (default: the graph outputs), in that order. Validates names, types and shapes.
  std::vector<Tensor> Run(const std::map<std::string, Tensor>& feeds, const std::vector<std::string>& fetches = {},
                          const RunOptions& options = {});

  const Model& model() const { return *model_; }
  const ExecutorOptions& options() const { return options_; }
  // Persistent tensors (initializers), updated in place by training graphs.
  Tensor* FindState(const std::string& name);
  const std::vector<std::string>& OutputNames() const { return output_names_; }
  PlanStats LastPlanStats() const { return last_stats_; }
  // CPU: the threads a new plan's kernels would run on for feeds of `feed_bytes` in all (one
  // below ExecutorOptions::serial_below_bytes with the state, else the backend's); 0 off the
  // CPU. A caller that keeps a core free for other work (the trainer's batch making) asks it.
  int PlanThreadsFor(size_t feed_bytes) const;
  size_t NumPlans() const { return plans_.size(); }
  // What the kernels chose at plan time (OpKernel::PlanNote), one line per such node and
  // plan: "plan N: node 'name' (OpType): note".
  std::string PlanNotes() const;
  // The random stream of random ops (Dropout in training mode), saved in checkpoints so
  // that a resumed run draws the same masks.
  std::string RngState() const;
  void SetRngState(const std::string& state);
  // Node times of the replayed runs (ExecutorOptions::profile); empty when not profiling.
  std::string ProfileReport() const;
  // What the kernels chose by timing (a CPU convolution's algorithm per problem), as text,
  // and its restoration (runtime/core/algorithm_choices.h); shared with the executors that share
  // this one's state. Load throws ot::Error on text that Save did not write.
  std::string SaveAlgorithmChoices() const;
  void LoadAlgorithmChoices(const std::string& text);

 private:
  struct Plan;
  Executor(std::unique_ptr<Model> model, const std::vector<HostTensor>* initializer_data, ExecutorOptions options);
  std::unique_ptr<Plan> BuildPlan(std::vector<Tensor>& slots, const std::vector<int>& fetch_ids,
                                  const RunOptions& options);
  // Makes the plan's replay state (arena views, kernel contexts) once.
  void PrepareReplay(Plan& plan);
  // Runs a traced plan on new feeds.
  void Replay(Plan& plan, const std::map<std::string, Tensor>& feeds, const RunOptions& options);
  // Replay through the plan's CUDA graph; false when the plan cannot use one.
  bool ReplayGraph(Plan& plan, const std::map<std::string, Tensor>& feeds);
  // Asks every kernel of the plan whether the device reported an error (OpKernel::CheckDeviceErrors).
  void CheckDeviceErrors(const Plan& plan) const;
  // Feeds on the host are copied to the executor's device.
  std::map<std::string, Tensor> FeedsOnDevice(const std::map<std::string, Tensor>& feeds) const;
  void ValidateFeeds(const std::map<std::string, Tensor>& feeds) const;
  std::string PlanKey(const std::map<std::string, Tensor>& feeds, const std::vector<int>& fetch_ids) const;

  std::unique_ptr<Model> model_;
  ExecutorOptions options_;
  std::vector<size_t> order_;                  // node indices, topological
  std::map<std::string, int> value_ids_;
  std::vector<std::string> value_names_;
  std::vector<Tensor> state_;                  // by value id; defined for initializers
  std::vector<int64_t> node_opsets_;
  std::vector<StepBinding> binds_;             // by step
  std::vector<std::pair<int, int>> update_ids_;  // (value id, state id)
  std::vector<std::string> output_names_;
  std::set<std::string> value_independent_inputs_;  // their values are not in the plan key
  std::map<std::string, std::unique_ptr<Plan>> plans_;
  PlanStats last_stats_;
  std::mt19937_64 rng_;
  std::shared_ptr<AlgorithmChoices> choices_;
  KernelSettings settings_;  // what MakeContext hands the kernels
};

}  // namespace ot
