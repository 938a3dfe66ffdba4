// Runtime tests: memory planning, executor validation and plan caching.
#include <gtest/gtest.h>

#include "graph/error.h"
#include "runtime/executor.h"
#include "runtime/memory_plan.h"

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

TEST(Executor, RejectsWrongInputs) {
  Executor exec(ChainModel());
  EXPECT_THROW(exec.Run({}), Error);
  EXPECT_THROW(exec.Run({{"x", Tensor::Empty(DType::kInt64, {2, 4})}}), Error);
  EXPECT_THROW(exec.Run({{"x", Tensor::Empty(DType::kFloat32, {2, 5})}}), Error);
  EXPECT_THROW(exec.Run({{"x", Tensor::Empty(DType::kFloat32, {2, 4})}, {"z", Tensor::Empty(DType::kFloat32, {1})}}),
               Error);
  try {
    exec.Run({{"x", Tensor::Empty(DType::kFloat32, {2, 5})}});
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
