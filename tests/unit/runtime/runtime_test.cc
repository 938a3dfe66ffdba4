// Runtime tests: memory planning, executor validation and plan caching.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <tuple>
#include <vector>

#include "graph/error.h"
#include "runtime/cpu/cpu_threads.h"
#include "runtime/executor/executor.h"
#include "runtime/executor/memory_plan.h"

namespace ot {
namespace {

TEST(MemoryPlan, BuffersAliveTogetherNeverOverlap) {
  std::vector<BufferLifetime> b = {{100, 0, 2}, {200, 1, 3}, {300, 3, 4}, {50, 4, 5}, {400, 5, 6}};
  MemoryPlan p = PlanMemory(b, 64);
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(p.offsets[i] % 64, 0u);
    for (size_t j = i + 1; j < b.size(); ++j) {
      bool live_together = b[i].first_step <= b[j].last_step && b[j].first_step <= b[i].last_step;
      bool overlap = p.offsets[i] < p.offsets[j] + b[j].bytes && p.offsets[j] < p.offsets[i] + b[i].bytes;
      EXPECT_FALSE(live_together && overlap) << i << " and " << j;
    }
  }
  // A chain where each buffer dies as the next is born reuses memory.
  EXPECT_LT(p.arena_bytes, p.sum_of_buffers);
}

TEST(MemoryPlan, DisjointLifetimesShareOneSlot) {
  std::vector<BufferLifetime> b = {{1000, 0, 1}, {1000, 2, 3}, {1000, 4, 5}};
  MemoryPlan p = PlanMemory(b, 64);
  EXPECT_EQ(p.arena_bytes, 1024u);
}

// Relu -> Relu -> Relu on input "x" [batch, 4].
Model ChainModel() {
  Model m;
  m.opsets[""] = 17;
  ValueInfo x;
  x.name = "x";
  x.dtype = DType::kFloat32;
  x.has_shape = true;
  x.dims = {Dim{-1, "batch"}, Dim{4, ""}};
  m.graph.inputs.push_back(x);
  std::string prev = "x";
  for (int i = 0; i < 3; ++i) {
    Node n;
    n.name = "relu" + std::to_string(i);
    n.op_type = "Relu";
    n.inputs = {prev};
    n.outputs = {"y" + std::to_string(i)};
    prev = n.outputs[0];
    m.graph.nodes.push_back(n);
  }
  ValueInfo y;
  y.name = prev;
  y.dtype = DType::kFloat32;
  m.graph.outputs.push_back(y);
  return m;
}

TEST(Executor, RunsAndCachesOnePlanPerShape) {
  Executor exec(ChainModel());
  for (int64_t batch : {2, 3, 2}) {
    HostTensor h(DType::kFloat32, {batch, 4});
    for (int64_t i = 0; i < h.NumElements(); ++i) h.Data<float>()[i] = static_cast<float>(i % 3) - 1.f;
    auto out = exec.Run({{"x", Tensor::FromHost(h)}});
    ASSERT_EQ(out.size(), 1u);
    HostTensor r = out[0].ToHost();
    for (int64_t i = 0; i < h.NumElements(); ++i) EXPECT_EQ(r.Data<float>()[i], std::max(0.f, h.Data<float>()[i]));
  }
  EXPECT_EQ(exec.NumPlans(), 2u);
}

// ExecutorOptions::profile: the replayed runs' node times, summed by op type, with the
// slowest nodes named; the planning run is not counted; nothing without profiling.
TEST(Executor, ProfileCountsReplayedRunsByOpTypeAndNode) {
  ExecutorOptions options;
  options.profile = true;
  Executor exec(ChainModel(), options);
  const Tensor x = Tensor::Empty(DType::kFloat32, {64, 4});
  EXPECT_EQ(exec.ProfileReport(), "");  // nothing replayed yet
  for (int i = 0; i < 4; ++i) exec.Run({{"x", x}});
  const std::string report = exec.ProfileReport();
  EXPECT_NE(report.find("profile: 3 run(s)"), std::string::npos) << report;
  EXPECT_NE(report.find("Relu"), std::string::npos) << report;
  for (const char* node : {"relu0", "relu1", "relu2"}) EXPECT_NE(report.find(node), std::string::npos) << report;

  if (std::getenv("ONNXTRAIN_PROFILE")) return;
  Executor quiet(ChainModel());
  for (int i = 0; i < 2; ++i) quiet.Run({{"x", x}});
  EXPECT_EQ(quiet.ProfileReport(), "");
}

// ExecutorOptions::serial_below_bytes: a run whose feeds and state are small plans and
// replays on one thread (seen from inside the run), a large one on all of them, and the
// caller's thread count is back after either.
TEST(Executor, SmallRunsTakeOneThread) {
  ExecutorOptions options;
  options.num_threads = 2;
  Executor exec(ChainModel(), options);
  ASSERT_EQ(GetCpuThreads(), 2);
  for (int64_t rows : {int64_t{8}, int64_t{1} << 16}) {  // 128 bytes, 1 MiB
    const Tensor x = Tensor::Empty(DType::kFloat32, {rows, 4});
    const int want = rows == 8 ? 1 : 2;
    EXPECT_EQ(exec.PlanThreadsFor(x.nbytes()), want) << rows << " rows, asked before the run";
    for (int run = 0; run < 2; ++run) {  // planning, then replay
      std::vector<int> seen;
      RunOptions ro;
      ro.on_value_ready = [&](const std::string&, const Tensor&) { seen.push_back(GetCpuThreads()); };
      exec.Run({{"x", x}}, {}, ro);
      ASSERT_EQ(seen.size(), 3u);
      for (int t : seen) EXPECT_EQ(t, want) << rows << " rows, run " << run;
      EXPECT_EQ(exec.LastPlanStats().threads, want);
      EXPECT_EQ(GetCpuThreads(), 2);
    }
  }
  options.serial_below_bytes = 0;
  Executor never(ChainModel(), options);
  EXPECT_EQ(never.PlanThreadsFor(128), 2);
  never.Run({{"x", Tensor::Empty(DType::kFloat32, {8, 4})}});
  EXPECT_EQ(never.LastPlanStats().threads, 2);
}

TEST(Executor, RunsOnlyWhatTheFetchesNeedAndReportsValuesAsTheyAreReady) {
  Executor exec(ChainModel());
  std::vector<std::string> produced;
  RunOptions opts;
  opts.on_value_ready = [&](const std::string& name, const Tensor&) { produced.push_back(name); };
  exec.Run({{"x", Tensor::Empty(DType::kFloat32, {2, 4})}}, {"y0"}, opts);
  EXPECT_EQ(produced, std::vector<std::string>{"y0"});
  produced.clear();
  exec.Run({{"x", Tensor::Empty(DType::kFloat32, {2, 4})}}, {}, opts);
  EXPECT_EQ(produced, (std::vector<std::string>{"y0", "y1", "y2"}));
}

// x -> Relu a -> Relu b -> Relu c, and Reshape(c, Shape(a)) written last, as the autodiff
// writes the Shape of a broadcast Add's gradient in backward: the Shape runs right after
// a is made, so a is not kept alive beside b and c for its shape alone.
TEST(Executor, ShapeReadsDoNotKeepTheirInputAlive) {
  Model m = ChainModel();
  m.graph.nodes[2].outputs = {"y2"};
  Node shape;
  shape.name = "shape_of_y0";
  shape.op_type = "Shape";
  shape.inputs = {"y0"};
  shape.outputs = {"s"};
  Node reshape;
  reshape.name = "reshape";
  reshape.op_type = "Reshape";
  reshape.inputs = {"y2", "s"};
  reshape.outputs = {"out"};
  m.graph.nodes.push_back(reshape);  // before the Shape in file order, after it in data order
  m.graph.nodes.insert(m.graph.nodes.end() - 1, shape);
  std::swap(m.graph.nodes[3], m.graph.nodes[4]);  // file order: relu0, relu1, relu2, reshape, shape
  m.graph.outputs[0].name = "out";
  // Shape of a Shape of the graph input (the rank of x), read by nothing fetched.
  for (auto [op, in, out] : {std::tuple{"Shape", "x", "sx"}, std::tuple{"Size", "sx", "rank"}}) {
    Node n;
    n.name = std::string(op) + "_of_" + in;
    n.op_type = op;
    n.inputs = {in};
    n.outputs = {out};
    m.graph.nodes.push_back(n);
  }
  Executor exec(std::move(m));
  EXPECT_EQ(exec.Run({{"x", Tensor::FromHost(HostTensor(DType::kFloat32, {3, 4}))}}, {"rank"})[0].ToHost().Data<int64_t>()[0],
            2);
  const int64_t batch = 1024;
  HostTensor h(DType::kFloat32, {batch, 4});
  for (int64_t i = 0; i < h.NumElements(); ++i) h.Data<float>()[i] = static_cast<float>(i % 5) - 2.f;
  auto out = exec.Run({{"x", Tensor::FromHost(h)}});
  HostTensor r = out[0].ToHost();
  ASSERT_EQ(r.dims, (std::vector<int64_t>{batch, 4}));
  for (int64_t i = 0; i < h.NumElements(); ++i) ASSERT_EQ(r.Data<float>()[i], std::max(0.f, h.Data<float>()[i]));
  // y0 and y1, then y1 and y2, are alive together; the fetched result is allocated apart.
  const size_t one = static_cast<size_t>(batch) * 4 * sizeof(float);
  EXPECT_LE(exec.LastPlanStats().arena_bytes, 2 * one + 4096) << "a Shape read kept its input alive";
}

TEST(Executor, RejectsWrongInputs) {
  Executor exec(ChainModel());
  EXPECT_THROW(exec.Run({}), Error);
  EXPECT_THROW(exec.Run({{"x", Tensor::Empty(DType::kInt64, {2, 4})}}), Error);
  EXPECT_THROW(exec.Run({{"x", Tensor::Empty(DType::kFloat32, {2, 5})}}), Error);
  EXPECT_THROW(exec.Run({{"x", Tensor::Empty(DType::kFloat32, {2, 4})}, {"z", Tensor::Empty(DType::kFloat32, {1})}}),
               Error);
  try {
    exec.Run({{"x", Tensor::Empty(DType::kFloat32, {2, 5})}});
    FAIL() << "an input of the wrong shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
}

TEST(Executor, UnsupportedOpsAreListedTogether) {
  Model m = ChainModel();
  m.graph.nodes[0].op_type = "NoSuchOpA";
  m.graph.nodes[2].op_type = "NoSuchOpB";
  try {
    Executor exec(m);
    FAIL() << "expected UnsupportedError";
  } catch (const UnsupportedError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("NoSuchOpA"), std::string::npos) << msg;
    EXPECT_NE(msg.find("NoSuchOpB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("relu2"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace ot

namespace ot {
namespace {

// Momentum(R, T, W, G, V) -> W/new, V/new with W/new -> W and V/new -> V as state
// updates; with `read_old_after`, a node after the update reads the old W (Add(W, W/new)),
// so W must not be overwritten in place.
Model MomentumModel(bool read_old_after) {
  Model m;
  m.opsets[""] = 17;
  m.opsets["ai.onnx.preview.training"] = 1;
  auto input = [&](const std::string& name, DType t, std::vector<int64_t> dims) {
    ValueInfo v;
    v.name = name;
    v.dtype = t;
    v.has_shape = true;
    for (int64_t d : dims) v.dims.push_back(Dim{d, ""});
    m.graph.inputs.push_back(v);
  };
  input("R", DType::kFloat32, {});
  input("T", DType::kInt64, {});
  input("G", DType::kFloat32, {3});
  m.graph.initializers.push_back(HostTensor::FromVector<float>({1.f, -2.f, 3.f}, {3}, "W"));
  m.graph.initializers.push_back(HostTensor::FromVector<float>({0.5f, 0.f, -1.f}, {3}, "V"));
  Node n;
  n.name = "sgd";
  n.op_type = "Momentum";
  n.domain = "ai.onnx.preview.training";
  n.inputs = {"R", "T", "W", "G", "V"};
  n.outputs = {"W/new", "V/new"};
  n.SetFloat("alpha", 0.9f);
  n.SetFloat("beta", 1.f);
  n.SetString("mode", "standard");
  m.graph.nodes.push_back(n);
  ValueInfo out;
  out.dtype = DType::kFloat32;
  if (read_old_after) {
    Node add;
    add.name = "after";
    add.op_type = "Add";
    add.inputs = {"W", "W/new"};
    add.outputs = {"sum"};
    m.graph.nodes.push_back(add);
    out.name = "sum";
  } else {
    out.name = "V/new";
  }
  m.graph.outputs.push_back(out);
  return m;
}

TEST(Executor, StateUpdatesWrittenInPlaceOnlyWhereNothingReadsTheOldValueLater) {
  for (bool read_old_after : {false, true}) {
    SCOPED_TRACE(read_old_after ? "old W read after the update" : "plain update");
    ExecutorOptions opts;
    opts.state_updates = {{"W/new", "W"}, {"V/new", "V"}};
    Executor exec(MomentumModel(read_old_after), opts);
    double w[3] = {1, -2, 3}, v[3] = {0.5, 0, -1};
    const double g[3] = {0.25, -1, 2};
    for (int step = 1; step <= 3; ++step) {
      const double lr = 0.1 * step;
      double w_old[3];
      for (int i = 0; i < 3; ++i) {
        w_old[i] = w[i];
        v[i] = 0.9 * v[i] + g[i];
        w[i] -= lr * v[i];
      }
      auto out = exec.Run({{"R", Tensor::FromHost(HostTensor::FromVector<float>({static_cast<float>(lr)}, {}))},
                           {"T", Tensor::FromHost(HostTensor::FromVector<int64_t>({step}, {}))},
                           {"G", Tensor::FromHost(HostTensor::FromVector<float>({0.25f, -1.f, 2.f}, {3}))}},
                          {read_old_after ? "sum" : "V/new"});
      HostTensor r = out[0].ToHost();
      HostTensor ws = exec.FindState("W")->ToHost(), vs = exec.FindState("V")->ToHost();
      for (int i = 0; i < 3; ++i) {
        EXPECT_NEAR(ws.Data<float>()[i], w[i], 1e-5) << "step " << step;
        EXPECT_NEAR(vs.Data<float>()[i], v[i], 1e-5) << "step " << step;
        EXPECT_NEAR(r.Data<float>()[i], read_old_after ? w_old[i] + w[i] : v[i], 1e-5) << "step " << step;
      }
    }
    // In place, W/new needs no arena buffer (V/new is fetched, so it is allocated per run
    // and copied into V); with the old W read later, W/new is an arena buffer.
    if (read_old_after)
      EXPECT_GE(exec.LastPlanStats().arena_bytes, 3 * sizeof(float));
    else
      EXPECT_EQ(exec.LastPlanStats().arena_bytes, 0u);
  }
}

// A float32 graph input or output named `name` (dims: its shape; none: unknown).
ValueInfo FloatValue(const std::string& name, std::vector<Dim> dims = {}) {
  ValueInfo v;
  v.name = name;
  v.dtype = DType::kFloat32;
  v.has_shape = !dims.empty();
  v.dims = std::move(dims);
  return v;
}

// Appends node `op`(in) -> out, named after its output.
Node& AddNode(Model& m, const std::string& op, std::vector<std::string> in, const std::string& out) {
  Node n;
  n.name = out;
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = {out};
  m.graph.nodes.push_back(n);
  return m.graph.nodes.back();
}

// y = Relu(x); f = Flatten(y) (a view of y's buffer in replay); t = Neg(Neg(x)) (two
// buffers the planner could place where y was, were y taken as dead after Flatten);
// out = f + t = relu(x) + x.
TEST(Executor, FlattenViewKeepsItsInputBufferAlive) {
  Model m;
  m.opsets[""] = 17;
  m.graph.inputs.push_back(FloatValue("x", {Dim{-1, "batch"}, Dim{4, ""}}));
  AddNode(m, "Relu", {"x"}, "y");
  AddNode(m, "Flatten", {"y"}, "f");
  AddNode(m, "Neg", {"x"}, "t1");
  AddNode(m, "Neg", {"t1"}, "t2");
  AddNode(m, "Add", {"f", "t2"}, "out");
  m.graph.outputs.push_back(FloatValue("out"));
  Executor exec(m);
  for (int run = 0; run < 3; ++run) {  // the first run traces; later ones replay
    HostTensor h(DType::kFloat32, {3, 4});
    for (int64_t i = 0; i < h.NumElements(); ++i) h.Data<float>()[i] = static_cast<float>((i + run) % 5) - 2.f;
    HostTensor r = exec.Run({{"x", Tensor::FromHost(h)}})[0].ToHost();
    for (int64_t i = 0; i < h.NumElements(); ++i) {
      const float v = h.Data<float>()[i];
      EXPECT_EQ(r.Data<float>()[i], std::max(0.f, v) + v) << "run " << run << " element " << i;
    }
  }
}

// A fetched output that is a Reshape of a value only it reads (the logits of a Gemm shaped
// back to [N, T, V], graph/passes/fusion.h) is written by the Gemm straight into the
// output's buffer: right values in every run, each run's output its own buffer (an earlier
// run's result is not overwritten), and the arena holds no copy of the rows.
TEST(Executor, FetchedReshapeOfAGemmGetsItsRowsWithoutACopy) {
  Model m;
  m.opsets[""] = 17;
  m.graph.inputs.push_back(FloatValue("x", {Dim{6, ""}, Dim{4, ""}}));
  HostTensor w(DType::kFloat32, {3, 4}, "w");
  for (int64_t i = 0; i < w.NumElements(); ++i) w.Data<float>()[i] = static_cast<float>(i % 7) - 3.f;
  m.graph.initializers.push_back(w);
  m.graph.initializers.push_back(HostTensor::FromVector<int64_t>({2, 3, 3}, {3}, "shape"));
  AddNode(m, "Gemm", {"x", "w"}, "rows").SetInt("transB", 1);
  AddNode(m, "Reshape", {"rows", "shape"}, "y");
  m.graph.outputs.push_back(FloatValue("y"));
  Executor exec(m);
  std::vector<HostTensor> results, inputs;
  for (int run = 0; run < 3; ++run) {  // the first run traces; later ones replay
    HostTensor h(DType::kFloat32, {6, 4});
    for (int64_t i = 0; i < h.NumElements(); ++i) h.Data<float>()[i] = static_cast<float>((i * 3 + run) % 5) - 2.f;
    results.push_back(exec.Run({{"x", Tensor::FromHost(h)}})[0].ToHost());
    inputs.push_back(h);
    EXPECT_LT(exec.LastPlanStats().arena_bytes, 6u * 3u * sizeof(float)) << "run " << run;
  }
  for (int run = 0; run < 3; ++run) {
    const HostTensor& r = results[static_cast<size_t>(run)];
    ASSERT_EQ(r.dims, (std::vector<int64_t>{2, 3, 3}));
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 3; ++j) {
        float want = 0.f;
        for (int64_t k = 0; k < 4; ++k)
          want += inputs[static_cast<size_t>(run)].Data<float>()[i * 4 + k] * w.Data<float>()[j * 4 + k];
        EXPECT_EQ(r.Data<float>()[i * 3 + j], want) << "run " << run << " row " << i << " column " << j;
      }
  }
}

// Resident bytes of this process (/proc/self/statm).
size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Freed activation-sized CPU buffers give their pages back even while a later buffer lives
// on. Through glibc's malloc they stayed resident: freeing one 8 MiB block lifts its mmap
// threshold to 8 MiB, the 2 MiB blocks then come from the heap, and the heap cannot shrink
// below the block still alive at its top (a plan's tracing run left ViT's step at 600 MB
// of RSS over a 266 MB arena this way). At most 64 MiB of freed blocks stay mapped for reuse.
TEST(CpuMemory, FreedLargeBuffersLeaveTheProcess) {
  constexpr size_t kMiB = size_t{1} << 20;
  { Tensor big = Tensor::Empty(DType::kFloat32, {static_cast<int64_t>(8 * kMiB / 4)}); std::memset(big.raw(), 1, big.nbytes()); }
  const size_t before = ResidentBytes();
  std::vector<Tensor> buffers;
  for (int i = 0; i < 64; ++i) {
    buffers.push_back(Tensor::Empty(DType::kFloat32, {static_cast<int64_t>(4 * kMiB / 4)}));
    std::memset(buffers.back().raw(), 1, buffers.back().nbytes());
  }
  EXPECT_GE(ResidentBytes(), before + 240 * kMiB);
  Tensor last = buffers.back();
  buffers.clear();
  EXPECT_LT(ResidentBytes(), before + (64 + 16) * kMiB) << "freed buffers still resident";
  EXPECT_EQ(static_cast<const unsigned char*>(last.raw())[4 * kMiB - 1], 1);
}

// A freed large block handed out again for the same length comes back zeroed.
TEST(CpuMemory, ReusedLargeBuffersAreZero) {
  constexpr int64_t kFloats = int64_t{3} << 20;
  void* first = nullptr;
  {
    Tensor t = Tensor::Empty(DType::kFloat32, {kFloats});
    std::memset(t.raw(), 0xff, t.nbytes());
    first = t.raw();
  }
  Tensor again = Tensor::Empty(DType::kFloat32, {kFloats});
  EXPECT_EQ(again.raw(), first) << "the freed block of this length was not reused";
  const float* p = again.data<float>();
  for (int64_t i = 0; i < kFloats; i += 4099) ASSERT_EQ(p[i], 0.f) << "element " << i;
  ASSERT_EQ(p[kFloats - 1], 0.f);
}

// Large buffers are zero when made, as small ones are.
TEST(CpuMemory, NewBuffersAreZero) {
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 18, int64_t{3} << 20}) {
    Tensor t = Tensor::Empty(DType::kFloat32, {n});
    const float* p = t.data<float>();
    for (int64_t i = 0; i < n; i += 997) ASSERT_EQ(p[i], 0.f) << "size " << n << " element " << i;
    ASSERT_EQ(p[n - 1], 0.f);
  }
}

}  // namespace
}  // namespace ot
