// FuseSliceGradSums (graph/passes/fusion.h) and the CPU kernel of org.onnxtrain SliceGradSum:
// the q, k and v slices of a packed product, whose bounds PyTorch's exports compute from the
// shape at run time, tile the gradient exactly; slices that overlap, leave gaps or step by 2
// are added into zeros instead. Each fused training graph gives the unfused graph's loss and
// gradients and those of finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "graph/autodiff/autodiff.h"
#include "graph/op_domains.h"
#include "graph/passes/fusion.h"
#include "runtime/executor/executor.h"
#include "tests/common/grad_check.h"

namespace ot {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using testing::ExpectSameLossAndGradients;
using testing::ModelBuilder;

struct SliceSpec {
  int64_t start, end, step;
};

void Ints(ModelBuilder& b, const std::string& name, std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  b.Op("Constant", {}, name).SetTensor("value", HostTensor::FromVector<int64_t>(std::move(v), {n}));
}

// packed = x [batch, 3, 12] (a product's output); each slice along the last axis times its
// own weight, summed into the loss. With `runtime_bounds`, the bounds are computed from
// Shape(packed) as torch 1.13's chunk writes them (Gather, Div, Mul).
Model PackedSlices(int64_t batch, const std::vector<SliceSpec>& slices, bool runtime_bounds) {
  ModelBuilder b;
  b.Param("x", {batch, 3, 12}, -1.f, 1.f);
  b.Op("Tanh", {"x"}, "packed");
  std::string third;
  if (runtime_bounds) {
    b.Op("Shape", {"packed"}, "shape");
    Ints(b, "last", {2});
    Ints(b, "three", {3});
    b.Op("Gather", {"shape", "last"}, "width").SetInt("axis", 0);
    b.Op("Div", {"width", "three"}, "third");
    third = "third";
  }
  Ints(b, "axes", {-1});
  std::vector<std::string> terms;
  for (size_t k = 0; k < slices.size(); ++k) {
    const std::string s = "s" + std::to_string(k);
    if (runtime_bounds) {  // start = k * third, end = (k + 1) * third
      Ints(b, s + "/k", {static_cast<int64_t>(k)});
      Ints(b, s + "/k1", {static_cast<int64_t>(k) + 1});
      b.Op("Mul", {third, s + "/k"}, s + "/start");
      b.Op("Mul", {third, s + "/k1"}, s + "/end");
    } else {
      Ints(b, s + "/start", {slices[k].start});
      Ints(b, s + "/end", {slices[k].end});
    }
    Ints(b, s + "/step", {slices[k].step});
    b.Op("Slice", {"packed", s + "/start", s + "/end", "axes", s + "/step"}, s);
    const int64_t width = (slices[k].end - slices[k].start + slices[k].step - 1) / slices[k].step;
    b.Param(s + "/w", {batch, 3, width}, -1.f, 1.f);
    b.Op("Mul", {s, s + "/w"}, s + "/y");
    b.Op("ReduceSum", {s + "/y"}, s + "/sum").SetInt("keepdims", 0);
    terms.push_back(s + "/sum");
  }
  b.Op("Sum", terms, "loss");
  b.Output("loss", {});
  return b.Build();
}

TrainingGraph Train(const Model& m) {
  AutodiffOptions opts;
  opts.fuse = false;
  return BuildTrainingGraph(m, opts);
}

int Count(const Model& m, const std::string& op, const std::string& domain) {
  int n = 0;
  for (const auto& node : m.graph.nodes) n += node.op_type == op && node.domain == domain;
  return n;
}

TEST(SliceGradSumFusion, PackedQkvSlicesAndOtherSlicesTrainAsUnfused) {
  struct Case {
    const char* what;
    std::vector<SliceSpec> slices;
    bool runtime_bounds;
  };
  const std::vector<Case> cases = {
      {"q, k, v with run-time bounds", {{0, 4, 1}, {4, 8, 1}, {8, 12, 1}}, true},
      {"three constant slices out of order", {{8, 12, 1}, {0, 4, 1}, {4, 8, 1}}, false},
      {"overlapping", {{0, 8, 1}, {4, 12, 1}}, false},
      {"a gap", {{0, 4, 1}, {8, 12, 1}}, false},
      {"steps of 2", {{0, 12, 2}, {1, 12, 2}}, false},
  };
  for (const Case& c : cases) {
    for (int64_t batch : {1, 3}) {
      SCOPED_TRACE(std::string(c.what) + ", batch " + std::to_string(batch));
      const Model m = PackedSlices(batch, c.slices, c.runtime_bounds);
      const TrainingGraph plain = Train(m);
      TrainingGraph fused = plain;
      EXPECT_EQ(FuseSliceGradSums(fused.model), 1);
      EXPECT_EQ(Count(fused.model, "SliceGradSum", kGradDomain), 1);
      EXPECT_EQ(Count(fused.model, "SliceGrad", kGradDomain), 0);
      ExpectSameLossAndGradients(fused, plain, 0);  // the same additions in the same order
      ExpectGradientsMatchFiniteDifferences(fused, {}, 1e-2f);
    }
  }
}

TEST(SliceGradSumFusion, SumsWithOtherTermsOrSharedSliceGradsStay) {
  // x is read whole as well: its gradient's Sum adds a term that is no SliceGrad.
  ModelBuilder b;
  b.Param("x", {2, 3, 12}, -1.f, 1.f);
  Ints(b, "axes", {-1});
  Ints(b, "a0", {0});
  Ints(b, "a1", {6});
  Ints(b, "b1", {12});
  b.Op("Slice", {"x", "a0", "a1", "axes"}, "lo");
  b.Op("Slice", {"x", "a1", "b1", "axes"}, "hi");
  b.Op("Mul", {"lo", "hi"}, "prod");
  b.Op("ReduceSum", {"prod"}, "p").SetInt("keepdims", 0);
  b.Op("ReduceSumSquare", {"x"}, "q").SetInt("keepdims", 0);
  b.Op("Add", {"p", "q"}, "loss");
  b.Output("loss", {});
  const TrainingGraph plain = Train(b.Build());
  TrainingGraph fused = plain;
  EXPECT_EQ(FuseSliceGradSums(fused.model), 0);
  EXPECT_EQ(Count(fused.model, "SliceGrad", kGradDomain), 2);
}

}  // namespace
}  // namespace ot
