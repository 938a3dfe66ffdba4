// Helpers for gradient tests: a small builder of forward models and the central
// finite-difference check of a training graph's parameter gradients.
#pragma once

#include <map>
#include <random>
#include <string>
#include <vector>

#include "graph/autodiff/autodiff.h"
#include "graph/ir.h"
#include "runtime/core/tensor.h"

namespace ot {
namespace testing {

// Builds a forward model node by node (opset 13 unless set_opset is called). Params are
// float initializers drawn uniformly from [lo, hi] with a fixed seed.
class ModelBuilder {
 public:
  ModelBuilder() { m_.opsets[""] = 13; }
  ModelBuilder& Opset(int64_t v) {
    m_.opsets[""] = v;
    return *this;
  }
  // An initializer that is not trained (indices, shapes, constants); freeze float ones.
  ModelBuilder& Const(HostTensor t) {
    m_.graph.initializers.push_back(std::move(t));
    return *this;
  }
  Model& model() { return m_; }
  ModelBuilder& Input(const std::string& name, DType t, std::vector<int64_t> dims) {
    ValueInfo v;
    v.name = name;
    v.dtype = t;
    v.has_shape = true;
    for (int64_t d : dims) v.dims.push_back(Dim{d, ""});
    m_.graph.inputs.push_back(v);
    return *this;
  }
  ModelBuilder& Param(const std::string& name, std::vector<int64_t> dims, float lo, float hi) {
    HostTensor t(DType::kFloat32, dims, name);
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t i = 0; i < t.NumElements(); ++i) t.Data<float>()[i] = u(rng_);
    m_.graph.initializers.push_back(t);
    return *this;
  }
  // A float32 scalar as a Constant node's output.
  ModelBuilder& ScalarConstant(const std::string& name, float v) {
    Op("Constant", {}, name).SetTensor("value", HostTensor::FromVector<float>({v}, {}));
    return *this;
  }
  // torch.onnx's GELU of x as y: Mul(Mul(x, Add(Erf(Div(x, sqrt2)), 1)), 0.5).
  ModelBuilder& TorchGelu(const std::string& x, const std::string& y) {
    ScalarConstant(y + "/sqrt2", 1.4142135f).ScalarConstant(y + "/one", 1.f).ScalarConstant(y + "/half", 0.5f);
    Op("Div", {x, y + "/sqrt2"}, y + "/div");
    Op("Erf", {y + "/div"}, y + "/erf");
    Op("Add", {y + "/erf", y + "/one"}, y + "/add");
    Op("Mul", {x, y + "/add"}, y + "/mul");
    Op("Mul", {y + "/mul", y + "/half"}, y);
    return *this;
  }
  Node& Op(const std::string& op, std::vector<std::string> ins, std::string out) {
    Node n;
    n.name = op + "_" + std::to_string(m_.graph.nodes.size());
    n.op_type = op;
    n.inputs = std::move(ins);
    n.outputs = {std::move(out)};
    m_.graph.nodes.push_back(n);
    return m_.graph.nodes.back();
  }
  ModelBuilder& Output(const std::string& name, std::vector<int64_t> dims) {
    ValueInfo v;
    v.name = name;
    v.dtype = DType::kFloat32;
    v.has_shape = true;
    for (int64_t d : dims) v.dims.push_back(Dim{d, ""});
    m_.graph.outputs.push_back(v);
    return *this;
  }
  Model Build() { return m_; }
  std::mt19937& rng() { return rng_; }

 private:
  Model m_;
  std::mt19937 rng_{7};
};

// For every element of every parameter: the analytic gradient against the central
// difference (loss(w+eps) - loss(w-eps)) / 2eps, as |a - n| / (1e-2 + |n|) < tol.
// Prints the worst relative error.
void ExpectGradientsMatchFiniteDifferences(const TrainingGraph& tg, const std::map<std::string, Tensor>& feeds,
                                           float eps = 2e-3f, double tol = 2e-2);

// Two training graphs of one function (fused and unfused, rewritten and not): the same
// parameters, and a's loss and gradients equal to b's within rtol x (1 + the largest
// magnitude of b's tensor); rtol 0 asks for bitwise equality (the same operations in the
// same order).
void ExpectSameLossAndGradients(const TrainingGraph& a, const TrainingGraph& b, double rtol);

// Ends the model in loss = ReduceSum(y * w) over all axes (a scalar graph output "loss"),
// w a fixed random constant "loss_w" of y's shape (so every element of y's gradient
// differs); freeze "loss_w" when training.
void AddWeightedSumLoss(ModelBuilder& b, const std::string& y, std::vector<int64_t> dims);

// AddWeightedSumLoss, then the training graph.
TrainingGraph TrainWithWeightedSumLoss(ModelBuilder& b, const std::string& y, std::vector<int64_t> dims,
                                       std::vector<std::string> freeze = {});
// The training graph of a model that ends in AddWeightedSumLoss ("loss_w" frozen), fused or not.
TrainingGraph TrainFrozenLossWeights(const Model& m, bool fuse = true);

}  // namespace testing
}  // namespace ot
