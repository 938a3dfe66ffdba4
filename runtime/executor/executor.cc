// Executor: validation, tracing, memory planning and replay. Layouts: a kernel may hand
// out values in a layout of its own (oneDNN's blocked formats); before a step whose
// kernel does not accept layouts, such inputs are converted to plain temporaries planned
// in the arena, and fetched values and state updates are written back plain.
#include "runtime/executor/executor.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <iostream>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <sstream>

#include "graph/error.h"
#include "runtime/executor/kernel_coverage.h"
#include "runtime/core/kernel_registry.h"
#include "runtime/executor/memory_plan.h"
#include "graph/op_domains.h"

namespace ot {

struct Executor::Plan {
  struct Slot {
    DType dtype = DType::kUndefined;
    Shape shape;
    std::shared_ptr<const TensorLayout> layout;  // as the producing kernel chose it
    bool external = true;  // allocated per run (fetched values), not in the arena
    size_t offset = 0;
    int state = -1;        // >= 0: written in place into this state value (not in the arena)
    int view_of = -1;      // >= 0: a view of this value's buffer (OpKernel::OutputIsInputView; not in the arena)
    int backs = -1;        // >= 0: lives in the buffer of this external value, its view (not in the arena)
  };
  // (laid-out value, plain temporary): converted before a step whose kernel reads only
  // plain inputs.
  using Conversion = std::pair<int, int>;
  std::vector<std::unique_ptr<OpKernel>> kernels;  // by step; null for steps not run
  std::vector<bool> active;                        // by step: needed for the fetches or state updates
  std::vector<StepBinding> binds;                  // by step; inputs may name conversion temporaries
  std::vector<std::vector<Conversion>> conversions;  // by step
  std::vector<std::vector<int>> views;               // by step: outputs bound to a view of their input
  std::vector<Slot> slots;  // by value id (node outputs only), then conversion temporaries
  std::vector<int> external_ids;                   // values allocated per run
  std::vector<int> backed_ids;                     // values living in an external value's buffer (Slot::backs)
  Tensor arena;
  // Replay state, made once: tensors by slot id (arena views of planned values; state and
  // feeds are bound per run) and each step's kernel context over them.
  std::vector<Tensor> run_slots;
  std::vector<std::unique_ptr<KernelContext>> contexts;
  PlanStats stats;
  // ExecutorOptions::profile: seconds spent in each step over `profiled_runs` replays.
  std::vector<double> step_seconds;
  int profiled_runs = 0;
  // CPU threads of this plan's kernels (ExecutorOptions::serial_below_bytes); 0: as set.
  int threads = 0;
  // This run's fetched node outputs live in buffers the plan keeps (CUDA graph replay):
  // they are handed out as copies.
  bool fetch_copies = false;
  // Whole-step CUDA graph (ExecutorOptions::cuda_graphs). A graph reads and writes fixed
  // addresses, so feeds are copied into buffers of the plan, fetched outputs go to buffers
  // of the plan, and the state storage must stay where it was at capture.
  struct CudaGraph {
    std::unique_ptr<StepGraph> graph;  // from the device backend; null until first used
    bool unusable = false;
    std::map<int, Tensor> feeds;    // by value id
    std::map<int, Tensor> outputs;  // by value id (external_ids)
    std::vector<void*> state_storage;  // by value id at capture
  } cuda_graph;
};

using StepBinding = Executor::StepBinding;

namespace {
std::vector<StepBinding> Bind(const Graph& g, const std::vector<size_t>& order, const std::map<std::string, int>& ids) {
  std::vector<StepBinding> out(order.size());
  for (size_t step = 0; step < order.size(); ++step) {
    const Node& n = g.nodes[order[step]];
    for (const auto& in : n.inputs) out[step].inputs.push_back(in.empty() ? -1 : ids.at(in));
    for (const auto& o : n.outputs) out[step].outputs.push_back(o.empty() ? -1 : ids.at(o));
  }
  return out;
}

// Graph inputs read only by ops whose output shapes follow from input shapes alone
// (optimizer updates read the step count T; losses read labels): their values need not
// be part of the plan key.
std::set<std::string> InputsWhoseValuesNeverShapeThePlan(const Graph& g) {
  static const std::set<std::string> kShapeFromShapesOnly = {
      "Momentum", "Adam", "Adagrad", "AdamW", "RMSprop", "SGD", "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss",
      "SoftmaxCrossEntropyLossGrad", "NegativeLogLikelihoodLossGrad"};
  std::set<std::string> out;
  for (const auto& v : g.inputs) {
    bool independent = true;
    for (const auto& n : g.nodes)
      for (const auto& in : n.inputs)
        if (in == v.name && !kShapeFromShapesOnly.count(n.op_type)) independent = false;
    if (independent) out.insert(v.name);
  }
  return out;
}

// Makes `device` usable (or throws one clear sentence: no GPU, no such device, no CUDA in
// this build) before anything else is asked of it.
void RequireDevice(Device device) {
  if (device.type == DeviceType::kCPU) return;
  BackendFor(device.type).Require(device.index);
}

std::string Mebibytes(size_t bytes) { return StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20)); }

// Ops whose every run draws new random values: a captured graph would repeat one draw.
bool IsRandomOp(const Node& n) {
  static const std::set<std::string> kRandom = {"Dropout", "RandomNormal", "RandomUniform", "RandomNormalLike",
                                                "RandomUniformLike", "Multinomial", "Bernoulli"};
  return n.domain.empty() && kRandom.count(n.op_type) > 0;
}

KernelContext MakeContext(const Node& node, const StepBinding& b, std::vector<Tensor>& slots, std::mt19937_64* rng,
                          const ExecutorOptions& options, const KernelSettings& settings) {
  std::vector<const Tensor*> ins;
  for (int id : b.inputs) ins.push_back(id < 0 ? nullptr : &slots[static_cast<size_t>(id)]);
  std::vector<Tensor*> outs;
  for (int id : b.outputs) outs.push_back(id < 0 ? nullptr : &slots[static_cast<size_t>(id)]);
  return KernelContext(node, std::move(ins), std::move(outs), rng, options.device, options.cross_replica, &settings);
}
}  // namespace

Executor::Executor(const Model& model, ExecutorOptions options)
    : Executor(std::make_unique<Model>(ModelStructure(model)), &model.graph.initializers, options) {}

Executor::Executor(Model&& model, ExecutorOptions options)
    : Executor(std::make_unique<Model>(std::move(model)), nullptr, options) {}

// Shape and Size read only their input's shape, which the plan knows, yet a Shape that
// the autodiff placed in backward (the reduction shape of a broadcast Add's gradient)
// would keep a whole forward activation alive until then. Each runs right after the node
// that produces its input instead (first, for graph inputs and initializers).
static std::vector<size_t> ShapeReadsFirst(const Graph& g, const std::vector<size_t>& order) {
  auto shape_only = [&](const Node& n) {
    return IsOnnxDomain(n.domain) && (n.op_type == "Shape" || n.op_type == "Size") &&
           n.inputs.size() == 1 && !n.inputs[0].empty();
  };
  std::unordered_map<std::string, std::vector<size_t>> readers;  // value -> Shape/Size nodes, in order
  std::vector<size_t> result;
  result.reserve(order.size());
  std::unordered_set<std::string> produced;
  for (size_t i : order)
    for (const auto& o : g.nodes[i].outputs) produced.insert(o);
  std::vector<size_t> first;  // Shape/Size of graph inputs and initializers: known from the start
  for (size_t i : order) {
    const Node& n = g.nodes[i];
    if (!shape_only(n)) continue;
    if (produced.count(n.inputs[0]))
      readers[n.inputs[0]].push_back(i);
    else
      first.push_back(i);
  }
  std::function<void(size_t)> emit = [&](size_t i) {
    result.push_back(i);
    for (const auto& o : g.nodes[i].outputs) {
      auto it = readers.find(o);
      if (it == readers.end()) continue;
      const std::vector<size_t> shape_reads = std::move(it->second);
      readers.erase(it);
      for (size_t r : shape_reads) emit(r);
    }
  };
  for (size_t i : first) emit(i);  // then whatever reads their outputs' shapes
  for (size_t i : order)
    if (!shape_only(g.nodes[i])) emit(i);
  return result.size() == order.size() ? result : order;  // (all placed unless the graph is malformed)
}

// The model is kept without initializer data: its initializers live in state_ on the
// device (one copy of the weights, not two).
Executor::Executor(std::unique_ptr<Model> model, const std::vector<HostTensor>* initializer_data,
                   ExecutorOptions options)
    : model_(std::move(model)), options_(options), rng_(options.seed) {
  RequireDevice(options_.device);
  if (options_.print_profile) options_.profile = true;
  choices_ = options_.shared_state ? options_.shared_state->choices_ : std::make_shared<AlgorithmChoices>();
  settings_.conv_algo = options_.conv_algo.empty() ? "auto" : options_.conv_algo;
  settings_.cpu_channel_block = options_.cpu_channel_block;
  settings_.cuda_workspace_limit = options_.cuda_workspace_limit;
  settings_.choices = choices_.get();
  const Graph& g = model_->graph;
  order_ = ShapeReadsFirst(g, g.TopologicalOrder());
  auto add_value = [&](const std::string& name) {
    if (name.empty() || value_ids_.count(name)) return;
    value_ids_[name] = static_cast<int>(value_names_.size());
    value_names_.push_back(name);
  };
  for (const auto& v : g.inputs) add_value(v.name);
  for (const auto& t : g.initializers) add_value(t.name);
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs) add_value(o);
  for (const auto& o : g.outputs) {
    OT_CHECK(value_ids_.count(o.name), "graph output '%s' is not produced by any node, input or initializer",
             o.name.c_str());
    output_names_.push_back(o.name);
  }

  // Every op must have a kernel; all that do not are named in one message grouped by op type
  // and opset: "Attention (opset 23): 2 nodes, 'attn_0', 'attn_1'; ...".
  node_opsets_.resize(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) node_opsets_[i] = model_->OpsetFor(g.nodes[i].domain);
  const KernelCoverage coverage = CheckKernelCoverage(*model_, options_.device.type);
  if (!coverage.missing.empty())
    throw UnsupportedError("the model uses " + coverage.Describe(options_.device.ToString()) +
                           " (export at another opset, or replace those ops)");

  state_.resize(value_names_.size());
  for (size_t i = 0; i < g.initializers.size(); ++i) {
    HostTensor& t = model_->graph.initializers[i];
    const HostTensor& data = initializer_data ? (*initializer_data)[i] : t;
    Tensor& st = state_[static_cast<size_t>(value_ids_[t.name])];
    if (const Tensor* shared = options_.shared_state ? options_.shared_state->FindState(t.name) : nullptr;
        shared && shared->dtype() == t.dtype && shared->shape() == t.dims && shared->is_plain()) {
      st = *shared;  // the same storage: updates made by the other executor are seen here
    } else {
      st = Tensor::FromHost(data, options_.device);
    }
    std::vector<uint8_t>().swap(t.bytes);  // uploaded: keep the shape only
  }

  for (const auto& [value, state] : options_.state_updates) {
    auto v = value_ids_.find(value), st = value_ids_.find(state);
    OT_CHECK(v != value_ids_.end(), "state update: the model has no value '%s'", value.c_str());
    OT_CHECK(st != value_ids_.end() && state_[static_cast<size_t>(st->second)].defined(),
             "state update: '%s' is not an initializer of the model", state.c_str());
    update_ids_.emplace_back(v->second, st->second);
  }
  binds_ = Bind(g, order_, value_ids_);
  value_independent_inputs_ = InputsWhoseValuesNeverShapeThePlan(g);
  if (options_.num_threads > 0) BackendFor(options_.device.type).SetThreads(options_.num_threads);
}

std::string Executor::PlanNotes() const {
  std::ostringstream out;
  int index = 0;
  for (const auto& [key, plan] : plans_) {
    for (size_t step = 0; step < plan->kernels.size(); ++step) {
      if (!plan->kernels[step]) continue;
      const std::string note = plan->kernels[step]->PlanNote();
      if (note.empty()) continue;
      const Node& node = model_->graph.nodes[order_[step]];
      out << "plan " << index << ": node '" << node.name << "' (" << node.op_type << "): " << note << "\n";
    }
    ++index;
  }
  return out.str();
}

std::string Executor::ProfileReport() const {
  struct Sum {
    double seconds = 0;
    int nodes = 0;
  };
  std::map<std::string, Sum> by_op;
  std::vector<std::pair<double, size_t>> by_node;  // (seconds per run, node index)
  double total = 0;
  int runs = 0;
  for (const auto& [key, plan] : plans_) {
    if (plan->profiled_runs == 0) continue;
    runs += plan->profiled_runs;
    for (size_t step = 0; step < plan->step_seconds.size(); ++step) {
      if (!plan->active[step]) continue;
      const double s = plan->step_seconds[step];
      const Node& node = model_->graph.nodes[order_[step]];
      by_op[node.op_type].seconds += s;
      ++by_op[node.op_type].nodes;
      by_node.emplace_back(s / plan->profiled_runs, order_[step]);
      total += s;
    }
  }
  if (runs == 0) return "";
  std::vector<std::pair<std::string, Sum>> ops(by_op.begin(), by_op.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::sort(by_node.begin(), by_node.end(), std::greater<>());
  char line[512];
  std::ostringstream out;
  std::snprintf(line, sizeof(line), "profile: %d run(s), %.3f ms per run in kernels%s\n", runs, 1e3 * total / runs,
                options_.profile_cpu_clock ? " (process CPU time)" : "");
  out << line << "  op type                       ms/run      %  nodes\n";
  for (const auto& [op, sum] : ops) {
    std::snprintf(line, sizeof(line), "  %-26s %9.3f %6.1f %6d\n", op.c_str(), 1e3 * sum.seconds / runs,
                  100.0 * sum.seconds / total, sum.nodes);
    out << line;
  }
  out << "  slowest nodes                 ms/run\n";
  const size_t shown = options_.profile_all_nodes ? by_node.size() : std::min<size_t>(by_node.size(), 15);
  for (size_t i = 0; i < shown; ++i) {
    const Node& node = model_->graph.nodes[by_node[i].second];
    std::snprintf(line, sizeof(line), "  %9.3f  %s (%s)\n", 1e3 * by_node[i].first, node.name.c_str(),
                  node.op_type.c_str());
    out << line;
  }
  return out.str();
}

Executor::~Executor() {
  if (!options_.print_profile) return;
  const std::string report = ProfileReport();
  if (!report.empty()) std::fprintf(stderr, "%s", report.c_str());
}

Tensor* Executor::FindState(const std::string& name) {
  auto it = value_ids_.find(name);
  if (it == value_ids_.end()) return nullptr;
  Tensor& t = state_[static_cast<size_t>(it->second)];
  return t.defined() ? &t : nullptr;
}

void Executor::ValidateFeeds(const std::map<std::string, Tensor>& feeds) const {
  const Graph& g = model_->graph;
  // Unknown names first: a misspelled input is the likelier mistake than a missing one.
  for (const auto& [name, t] : feeds) {
    if (g.FindInput(name)) continue;
    std::string names;
    for (const auto& v : g.inputs) names += (names.empty() ? "" : ", ") + v.name;
    throw Error("'" + name + "' is not an input of the model; its inputs are: " + (names.empty() ? "(none)" : names));
  }
  std::map<std::string, int64_t> symbols;
  for (const auto& v : g.inputs) {
    auto it = feeds.find(v.name);
    OT_CHECK(it != feeds.end(), "input '%s' (%s%s) was not given", v.name.c_str(), DTypeName(v.dtype).c_str(),
             v.ShapeString().c_str());
    const Tensor& t = it->second;
    auto want = [&v] { return DTypeName(v.dtype) + v.ShapeString(); };  // for messages only
    OT_CHECK(v.dtype == DType::kUndefined || t.dtype() == v.dtype, "input '%s': expected %s, got %s", v.name.c_str(),
             want().c_str(), t.Describe().c_str());
    OT_CHECK(t.is_plain(), "input '%s' is not plain (%s)", v.name.c_str(), t.Describe().c_str());
    if (!v.has_shape) continue;
    OT_CHECK(static_cast<size_t>(t.rank()) == v.dims.size(), "input '%s': expected %s, got %s (rank differs)",
             v.name.c_str(), want().c_str(), t.Describe().c_str());
    for (size_t d = 0; d < v.dims.size(); ++d) {
      const Dim& dim = v.dims[d];
      int64_t got = t.shape()[d];
      if (dim.IsStatic()) {
        OT_CHECK(got == dim.value, "input '%s': expected %s, got %s (dimension %zu differs)", v.name.c_str(),
                 want().c_str(), t.Describe().c_str(), d);
      } else if (!dim.param.empty()) {
        auto [sit, inserted] = symbols.emplace(dim.param, got);
        OT_CHECK(inserted || sit->second == got,
                 "input '%s': dimension '%s' is %lld here but %lld in another input", v.name.c_str(),
                 dim.param.c_str(), (long long)got, (long long)sit->second);
      }
    }
  }
  for (const auto& [name, t] : feeds)
    OT_CHECK(t.device() == options_.device, "input '%s' is on %s but the model runs on %s", name.c_str(),
             t.device().ToString().c_str(), options_.device.ToString().c_str());
}

std::string Executor::PlanKey(const std::map<std::string, Tensor>& feeds, const std::vector<int>& fetch_ids) const {
  std::ostringstream key;
  for (const auto& v : model_->graph.inputs) {
    const Tensor& t = feeds.at(v.name);
    key << static_cast<int>(t.dtype()) << ShapeString(t.shape());
    // Small integer inputs may be shapes (Reshape's target): their values shape the plan,
    // unless only ops whose output shapes never depend on them read them (the step count).
    if ((t.dtype() == DType::kInt64 || t.dtype() == DType::kInt32) && t.numel() <= 8 &&
        !value_independent_inputs_.count(v.name)) {
      HostTensor h = t.ToHost();
      for (int64_t x : h.AsInt64s()) key << ',' << x;
    }
    key << ';';
  }
  for (int id : fetch_ids) key << id << ',';
  return key.str();
}


std::unique_ptr<Executor::Plan> Executor::BuildPlan(std::vector<Tensor>& slots, const std::vector<int>& fetch_ids,
                                                    const RunOptions& options) {
  const Graph& g = model_->graph;
  auto plan = std::make_unique<Plan>();
  plan->slots.resize(value_names_.size());
  std::set<int> fetched(fetch_ids.begin(), fetch_ids.end());
  const std::vector<StepBinding>& binds = binds_;
  std::vector<BufferLifetime> lifetimes;
  std::vector<int> planned_ids;

  // Only the steps that lead to a fetched value or a state update run.
  std::vector<bool> needed_value(value_names_.size(), false);
  for (int id : fetch_ids) needed_value[static_cast<size_t>(id)] = true;
  for (const auto& [value, state] : update_ids_) needed_value[static_cast<size_t>(value)] = true;
  plan->active.assign(order_.size(), false);
  plan->kernels.resize(order_.size());
  for (size_t step = order_.size(); step-- > 0;) {
    for (int id : binds[step].outputs)
      if (id >= 0 && needed_value[static_cast<size_t>(id)]) plan->active[step] = true;
    if (plan->active[step])
      for (int id : binds[step].inputs)
        if (id >= 0) needed_value[static_cast<size_t>(id)] = true;
  }

  // Last active step reading each value; state updates stay alive to the end.
  std::vector<int> last_use(value_names_.size(), -1);
  for (size_t step = 0; step < order_.size(); ++step)
    if (plan->active[step])
      for (int id : binds[step].inputs)
        if (id >= 0) last_use[static_cast<size_t>(id)] = static_cast<int>(step);
  for (const auto& [value, state] : update_ids_) last_use[static_cast<size_t>(value)] = static_cast<int>(order_.size());

  // Last active step reading each state value: a state update may be written in place
  // only by a step after which nothing reads the old value.
  std::vector<int> last_read(value_names_.size(), -1);
  for (size_t step = 0; step < order_.size(); ++step)
    if (plan->active[step])
      for (int id : binds[step].inputs)
        if (id >= 0) last_read[static_cast<size_t>(id)] = static_cast<int>(step);
  std::map<int, int> update_of;  // value id -> state id
  for (const auto& [value, state] : update_ids_) update_of[value] = state;

  plan->binds = binds;
  plan->conversions.resize(order_.size());
  plan->views.resize(order_.size());
  std::map<int, size_t> lifetime_of;  // planned value id -> its entry in lifetimes
  std::map<int, int> view_root;       // view value id -> the value whose buffer it shares
  for (size_t step = 0; step < order_.size(); ++step) {
    if (!plan->active[step]) continue;
    const Node& node = g.nodes[order_[step]];
    if (options.before_node) options.before_node(node);
    auto def = KernelRegistry::Global().Find(node.domain, node.op_type, node_opsets_[order_[step]], options_.device.type);
    plan->kernels[step] = def->factory(KernelInfo{node, node_opsets_[order_[step]], options_.device});
    OpKernel& kernel = *plan->kernels[step];
    std::vector<int> temps;
    if (!kernel.AcceptsLayouts(MakeContext(node, plan->binds[step], slots, &rng_, options_, settings_))) {
      // Plain copies of laid-out inputs, alive for this step only.
      for (int& id : plan->binds[step].inputs) {
        if (id < 0 || slots[static_cast<size_t>(id)].is_plain()) continue;
        const Tensor src = slots[static_cast<size_t>(id)];  // a copy: slots grows below
        const int tmp = static_cast<int>(slots.size());
        Plan::Slot slot;
        slot.dtype = src.dtype();
        slot.shape = src.shape();
        slot.external = false;
        plan->slots.push_back(slot);
        slots.push_back(Tensor::Empty(src.dtype(), src.shape(), options_.device));
        slots.back().CopyFrom(src);
        plan->conversions[step].emplace_back(id, tmp);
        lifetimes.push_back(BufferLifetime{slots.back().nbytes(), static_cast<int>(step), static_cast<int>(step)});
        planned_ids.push_back(tmp);
        temps.push_back(tmp);
        id = tmp;
      }
    }
    KernelContext ctx = MakeContext(node, plan->binds[step], slots, &rng_, options_, settings_);
    kernel.Prepare(ctx);
    for (size_t k = 0; k < binds[step].outputs.size(); ++k) {
      int id = binds[step].outputs[k];
      if (id < 0) continue;
      Tensor& spec = slots[static_cast<size_t>(id)];
      OT_CHECK(spec.defined(), "%s: kernel did not declare output %zu ('%s')", node.Describe().c_str(), k,
               value_names_[static_cast<size_t>(id)].c_str());
      for (int64_t d : spec.shape())
        OT_CHECK(d >= 0, "%s: output '%s' has a negative dimension", node.Describe().c_str(),
                 value_names_[static_cast<size_t>(id)].c_str());
      Plan::Slot& slot = plan->slots[static_cast<size_t>(id)];
      slot.dtype = spec.dtype();
      slot.shape = spec.shape();
      slot.layout = spec.layout();
      slot.external = fetched.count(id) > 0;
      auto upd = update_of.find(id);
      const int in = upd == update_of.end() || slot.external ? -1 : kernel.InPlaceInput(static_cast<int>(k));
      if (in >= 0 && in < static_cast<int>(binds[step].inputs.size()) && binds[step].inputs[in] == upd->second &&
          plan->binds[step].inputs[in] == upd->second && !fetched.count(upd->second) &&
          last_read[static_cast<size_t>(upd->second)] == static_cast<int>(step) && !slot.layout &&
          state_[static_cast<size_t>(upd->second)].dtype() == slot.dtype &&
          state_[static_cast<size_t>(upd->second)].shape() == slot.shape &&
          state_[static_cast<size_t>(upd->second)].is_plain()) {
        slot.state = upd->second;  // the state tensor itself is the output buffer
        spec = state_[static_cast<size_t>(upd->second)];
        continue;
      }
      spec = Tensor::Empty(slot.dtype, slot.shape, options_.device, slot.layout);
      const int last = std::max(static_cast<int>(step), last_use[static_cast<size_t>(id)]);
      // An output that is its input's bytes in the same layout (Flatten and Reshape of
      // plain values, SumToShape of a gradient that needs no summing, laid out or not)
      // shares that input's buffer in replay, which then lives as long as the view. Not for
      // state (updated in place), fetched values or state updates (handed out or copied back).
      const int in0 = k == 0 && !binds[step].inputs.empty() ? binds[step].inputs[0] : -1;
      auto same_layout = [&](const Tensor& src) {
        return slot.layout ? !src.is_plain() && src.layout()->Equals(*slot.layout) : src.is_plain();
      };
      // A fetched output that is a view of a planned value only it reads (the logits
      // Reshape'd back from a Gemm's rows, graph/passes/fusion.h): that value is written
      // straight into the output's per-run buffer instead of the arena, and the view copies
      // nothing.
      if (in0 >= 0 && options_.device.type == DeviceType::kCPU && kernel.OutputIsInputView() && slot.external &&
          !slot.layout && upd == update_of.end() && plan->binds[step].inputs[0] == in0 && lifetime_of.count(in0) &&
          !view_root.count(in0) && plan->slots[static_cast<size_t>(in0)].backs < 0 && !fetched.count(in0) &&
          last_use[static_cast<size_t>(in0)] == static_cast<int>(step) && !state_[static_cast<size_t>(in0)].defined() &&
          slots[static_cast<size_t>(in0)].is_plain() && slots[static_cast<size_t>(in0)].nbytes() == spec.nbytes()) {
        lifetimes[lifetime_of[in0]].bytes = 0;
        plan->slots[static_cast<size_t>(in0)].backs = id;
        plan->backed_ids.push_back(in0);
        plan->external_ids.push_back(id);
        continue;
      }
      if (in0 >= 0 && options_.device.type == DeviceType::kCPU && kernel.OutputIsInputView() && !slot.external &&
          upd == update_of.end() && plan->binds[step].inputs[0] == in0 && !state_[static_cast<size_t>(in0)].defined() &&
          same_layout(slots[static_cast<size_t>(in0)]) && slots[static_cast<size_t>(in0)].nbytes() == spec.nbytes()) {
        const int root = view_root.count(in0) ? view_root[in0] : in0;
        view_root[id] = root;
        slot.view_of = in0;
        plan->views[step].push_back(id);
        auto lt = lifetime_of.find(root);
        if (lt != lifetime_of.end()) lifetimes[lt->second].last_step = std::max(lifetimes[lt->second].last_step, last);
        continue;
      }
      if (!slot.external) {
        lifetime_of[id] = lifetimes.size();
        lifetimes.push_back(BufferLifetime{spec.nbytes(), static_cast<int>(step), last});
        planned_ids.push_back(id);
      } else {
        plan->external_ids.push_back(id);
      }
    }
    kernel.Compute(ctx);
    if (options.on_value_ready)
      for (int id : binds[step].outputs)
        if (id >= 0) options.on_value_ready(value_names_[static_cast<size_t>(id)], slots[static_cast<size_t>(id)]);
    // Free what no later step reads (unless fetched) so that tracing stays small too.
    for (int id : temps) slots[static_cast<size_t>(id)] = Tensor();
    for (int id : binds[step].inputs) {
      if (id < 0 || fetched.count(id) || last_use[static_cast<size_t>(id)] != static_cast<int>(step)) continue;
      if (state_[static_cast<size_t>(id)].defined() || g.FindInput(value_names_[static_cast<size_t>(id)])) continue;
      slots[static_cast<size_t>(id)] = Tensor();
    }
  }
  // The traced buffers are freed; give their heap memory back before the arena is made.
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  BackendFor(options_.device.type).ReleaseCached(options_.device.index);
  MemoryPlan mp = PlanMemory(lifetimes, kBufferAlignment);
  for (size_t i = 0; i < planned_ids.size(); ++i) plan->slots[static_cast<size_t>(planned_ids[i])].offset = mp.offsets[i];
  try {
    plan->arena = Tensor::Empty(DType::kUInt8, {static_cast<int64_t>(std::max<size_t>(mp.arena_bytes, 1))}, options_.device);
  } catch (const Error& e) {
    if (options_.device.type != DeviceType::kCUDA) throw;
    size_t free_bytes = 0, total_bytes = 0;
    try {
      BackendFor(options_.device.type).MemoryInfo(options_.device.index, &free_bytes, &total_bytes);
    } catch (const Error&) {
    }
    throw Error(StrFormat("out of memory on %s while planning: the memory plan for these input shapes needs %s for "
                          "intermediate values, but the device has %s free of %s (the weights, optimizer state and "
                          "other plans hold the rest); use a smaller batch (%s)",
                          options_.device.ToString().c_str(), Mebibytes(mp.arena_bytes).c_str(),
                          Mebibytes(free_bytes).c_str(), Mebibytes(total_bytes).c_str(), e.what()));
  }
  plan->stats.arena_bytes = mp.arena_bytes;
  plan->stats.unplanned_bytes = mp.sum_of_buffers;
  plan->stats.num_nodes = static_cast<int>(order_.size());
  PrepareReplay(*plan);
  return plan;
}

void Executor::PrepareReplay(Plan& plan) {
  const Graph& g = model_->graph;
  plan.run_slots.assign(plan.slots.size(), Tensor());
  uint8_t* arena = plan.arena.data<uint8_t>();
  for (size_t id = 0; id < plan.slots.size(); ++id) {
    const Plan::Slot& s = plan.slots[id];
    if (s.state >= 0)
      plan.run_slots[id] = state_[static_cast<size_t>(s.state)];
    else if (s.dtype != DType::kUndefined && !s.external && s.view_of < 0 && s.backs < 0)
      plan.run_slots[id] = Tensor::View(s.dtype, s.shape, arena + s.offset, options_.device, s.layout);
  }
  plan.contexts.resize(order_.size());
  for (size_t step = 0; step < order_.size(); ++step)
    if (plan.active[step])
      plan.contexts[step] = std::make_unique<KernelContext>(
          MakeContext(g.nodes[order_[step]], plan.binds[step], plan.run_slots, &rng_, options_, settings_));
}

bool Executor::ReplayGraph(Plan& plan, const std::map<std::string, Tensor>& feeds) {
  Plan::CudaGraph& cg = plan.cuda_graph;
  if (cg.unusable) return false;
  auto give_up = [&](const std::string& why) {
    cg.unusable = true;
    if (cg.graph) cg.graph->Reset();
    std::cerr << "onnx-train: note: CUDA graphs are off for this plan (" << why << "); it runs kernel by kernel\n";
    return false;
  };
  if (!cg.graph) {
    cg.graph = BackendFor(options_.device.type).NewStepGraph(options_.device.index);
    if (!cg.graph) return give_up(options_.device.ToString() + " cannot record work for replay");
  }
  if (!cg.graph->ready()) {
    for (size_t step = 0; step < order_.size(); ++step) {
      if (!plan.active[step]) continue;
      const Node& n = model_->graph.nodes[order_[step]];
      if (IsRandomOp(n)) return give_up(n.Describe() + " draws new random values every run");
      if (!plan.conversions[step].empty()) return give_up(n.Describe() + " needs layout conversions");
    }
  }
  std::vector<Tensor>& slots = plan.run_slots;
  for (const auto& [name, t] : feeds) {
    const int id = value_ids_.at(name);
    Tensor& buffer = cg.feeds[id];
    if (!buffer.defined() || buffer.dtype() != t.dtype() || buffer.shape() != t.shape()) {
      if (cg.graph->ready()) cg.graph->Reset();
      buffer = Tensor::Empty(t.dtype(), t.shape(), options_.device);
    }
    buffer.CopyFrom(t);
    slots[static_cast<size_t>(id)] = buffer;
  }
  for (int id : plan.external_ids) {
    const Plan::Slot& s = plan.slots[static_cast<size_t>(id)];
    Tensor& buffer = cg.outputs[id];
    if (!buffer.defined()) buffer = Tensor::Empty(s.dtype, s.shape, options_.device, s.layout);
    slots[static_cast<size_t>(id)] = buffer;
  }
  std::vector<void*> storage(state_.size(), nullptr);
  for (size_t id = 0; id < state_.size(); ++id) storage[id] = state_[id].raw();
  if (cg.graph->ready() && storage != cg.state_storage) cg.graph->Reset();  // state was replaced: capture again
  if (!cg.graph->ready()) {
    std::string why;
    const bool captured = cg.graph->Capture(
        [&] {
          for (size_t step = 0; step < order_.size(); ++step)
            if (plan.active[step]) plan.kernels[step]->Compute(*plan.contexts[step]);
        },
        &why);
    if (!captured) return give_up(why);
    cg.state_storage = storage;
  }
  // A replay runs no Compute, so the kernels' own checks of what the device found in an
  // earlier run (bad labels, out-of-range indices) are asked here, before and after.
  CheckDeviceErrors(plan);
  cg.graph->Launch();
  CheckDeviceErrors(plan);
  plan.fetch_copies = true;
  return true;
}

void Executor::CheckDeviceErrors(const Plan& plan) const {
  for (size_t step = 0; step < order_.size(); ++step)
    if (plan.active[step]) plan.kernels[step]->CheckDeviceErrors();
}

void Executor::Replay(Plan& plan, const std::map<std::string, Tensor>& feeds, const RunOptions& options) {
  std::vector<Tensor>& slots = plan.run_slots;
  for (size_t id = 0; id < state_.size(); ++id)
    if (state_[id].defined()) slots[id] = state_[id];
  plan.fetch_copies = false;
  if (options_.cuda_graphs && options_.device.type == DeviceType::kCUDA && !options.on_value_ready &&
      !options.before_node && ReplayGraph(plan, feeds))
    return;
  for (const auto& [name, t] : feeds) slots[static_cast<size_t>(value_ids_.at(name))] = t;
  for (int id : plan.external_ids) {
    const Plan::Slot& s = plan.slots[static_cast<size_t>(id)];
    slots[static_cast<size_t>(id)] = Tensor::Empty(s.dtype, s.shape, options_.device, s.layout);
  }
  for (int id : plan.backed_ids) {
    const Plan::Slot& s = plan.slots[static_cast<size_t>(id)];
    slots[static_cast<size_t>(id)] = Tensor::View(s.dtype, s.shape, slots[static_cast<size_t>(s.backs)].raw(), options_.device);
  }
  const bool profiling = options_.profile;
  const clockid_t clock = options_.profile_cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
  auto seconds = [clock] {
    timespec t{};
    clock_gettime(clock, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  if (profiling) {
    plan.step_seconds.resize(order_.size(), 0.0);
    ++plan.profiled_runs;
  }
  for (size_t step = 0; step < order_.size(); ++step) {
    if (!plan.active[step]) continue;
    if (options.before_node) options.before_node(model_->graph.nodes[order_[step]]);
    const double started = profiling ? seconds() : 0.0;
    for (const auto& [from, to] : plan.conversions[step])
      slots[static_cast<size_t>(to)].CopyFrom(slots[static_cast<size_t>(from)]);
    for (int id : plan.views[step]) {
      const Plan::Slot& s = plan.slots[static_cast<size_t>(id)];
      slots[static_cast<size_t>(id)] =
          Tensor::View(s.dtype, s.shape, slots[static_cast<size_t>(s.view_of)].raw(), options_.device, s.layout);
    }
    plan.kernels[step]->Compute(*plan.contexts[step]);
    if (profiling) plan.step_seconds[step] += seconds() - started;
    if (options.on_value_ready)
      for (int id : binds_[step].outputs)
        if (id >= 0) options.on_value_ready(value_names_[static_cast<size_t>(id)], slots[static_cast<size_t>(id)]);
  }
}

std::map<std::string, Tensor> Executor::FeedsOnDevice(const std::map<std::string, Tensor>& feeds) const {
  std::map<std::string, Tensor> out = feeds;
  if (options_.device.type == DeviceType::kCPU) return out;
  for (auto& [name, t] : out) {
    if (t.device().type != DeviceType::kCPU || !t.is_plain()) continue;  // ValidateFeeds names a wrong device
    Tensor copy = Tensor::Empty(t.dtype(), t.shape(), options_.device);
    copy.CopyFrom(t);
    t = copy;
  }
  return out;
}

int Executor::PlanThreadsFor(size_t feed_bytes) const {
  if (options_.device.type != DeviceType::kCPU) return 0;
  size_t bytes = feed_bytes;
  for (const Tensor& t : state_) bytes += t.defined() ? t.nbytes() : 0;
  return bytes < options_.serial_below_bytes ? 1 : BackendFor(DeviceType::kCPU).Threads();
}

std::vector<Tensor> Executor::Run(const std::map<std::string, Tensor>& given_feeds,
                                  const std::vector<std::string>& fetches, const RunOptions& options) {
  const std::map<std::string, Tensor> feeds = FeedsOnDevice(given_feeds);
  ValidateFeeds(feeds);
  const std::vector<std::string>& names = fetches.empty() ? output_names_ : fetches;
  std::vector<int> fetch_ids;
  for (const auto& n : names) {
    auto it = value_ids_.find(n);
    OT_CHECK(it != value_ids_.end(), "cannot fetch '%s': the model has no value of that name", n.c_str());
    fetch_ids.push_back(it->second);
  }
  const Graph& g = model_->graph;
  std::string key = PlanKey(feeds, fetch_ids);
  auto it = plans_.find(key);
  // A small run's plan is prepared and replayed on one thread; the thread count returns to
  // what it was when the run ends.
  struct ThreadsFor {
    int before = 0;
    explicit ThreadsFor(int n) {
      if (n <= 0 || n == BackendFor(DeviceType::kCPU).Threads()) return;
      before = BackendFor(DeviceType::kCPU).Threads();
      BackendFor(DeviceType::kCPU).SetThreads(n);
    }
    ~ThreadsFor() {
      if (before > 0) BackendFor(DeviceType::kCPU).SetThreads(before);
    }
  };
  int plan_threads = 0;
  if (it != plans_.end()) {
    plan_threads = it->second->threads;
  } else {
    size_t bytes = 0;
    for (const auto& [name, t] : feeds) bytes += t.nbytes();
    plan_threads = PlanThreadsFor(bytes);
  }
  ThreadsFor threads_for(plan_threads);
  std::vector<Tensor> traced;
  std::vector<Tensor>* slots = &traced;
  const Plan* ran = nullptr;  // the plan this run built or replayed
  if (it == plans_.end()) {
    traced = state_;
    for (const auto& [name, t] : feeds) traced[static_cast<size_t>(value_ids_.at(name))] = t;
    std::unique_ptr<Plan> plan;
    try {
      plan = BuildPlan(traced, fetch_ids, options);
    } catch (const Error& e) {
      // The planning run holds each value in its own buffer; running out there is the
      // same problem as an arena that does not fit.
      const std::string what = e.what();
      if (options_.device.type != DeviceType::kCUDA || what.find("out of memory") == std::string::npos ||
          what.find("while planning") != std::string::npos)
        throw;
      throw Error("out of memory on " + options_.device.ToString() +
                  " while planning: the run that sizes the memory plan for these input shapes did not fit (" + what +
                  "); use a smaller batch");
    }
    plan->threads = plan_threads;
    plan->stats.threads = plan_threads;
    last_stats_ = plan->stats;
    ran = plan.get();
    plans_[key] = std::move(plan);
  } else {
    Plan& plan = *it->second;
    last_stats_ = plan.stats;
    Replay(plan, feeds, options);
    slots = &plan.run_slots;
    ran = &plan;
  }
  // Fetch before the state is updated: a fetched initializer is its value during the run.
  std::vector<Tensor> out;
  for (int id : fetch_ids) {
    const Tensor& t = (*slots)[static_cast<size_t>(id)];
    // Fetched node outputs were allocated for this run; state and inputs are copied;
    // laid-out values are handed out plain.
    bool fresh = !state_[static_cast<size_t>(id)].defined() && !g.FindInput(value_names_[static_cast<size_t>(id)]) &&
                 !ran->fetch_copies;
    if (!t.is_plain()) {
      out.push_back(Tensor::Empty(t.dtype(), t.shape(), t.device()));
      out.back().CopyFrom(t);
    } else {
      out.push_back(fresh ? t : t.Clone());
    }
  }
  for (const auto& [value, state] : update_ids_)
    if (ran->slots[static_cast<size_t>(value)].state != state)  // not already written in place
      state_[static_cast<size_t>(state)].CopyFrom((*slots)[static_cast<size_t>(value)]);
  if (slots != &traced) {
    // Drop this run's references to the caller's feeds and the fetched buffers.
    for (const auto& [name, t] : feeds) (*slots)[static_cast<size_t>(value_ids_.at(name))] = Tensor();
    for (int id : ran->external_ids) (*slots)[static_cast<size_t>(id)] = Tensor();
    for (int id : ran->backed_ids) (*slots)[static_cast<size_t>(id)] = Tensor();
  }
  return out;
}

std::string Executor::RngState() const {
  std::ostringstream out;
  out << rng_;
  return out.str();
}

void Executor::SetRngState(const std::string& state) {
  std::istringstream in(state);
  in >> rng_;
  OT_CHECK(!in.fail(), "the random-stream state in the checkpoint is malformed");
}

std::string Executor::SaveAlgorithmChoices() const { return choices_->Save(); }

void Executor::LoadAlgorithmChoices(const std::string& text) { choices_->Load(text); }

}  // namespace ot
