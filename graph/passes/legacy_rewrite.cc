// Rewrite of legacy ops (ImageScaler) into current ONNX ops; see legacy_rewrite.h.
#include "graph/passes/legacy_rewrite.h"

#include <utility>
#include <vector>

#include "graph/error.h"

namespace ot {
namespace {

Node ConstantNode(const std::string& name, HostTensor value) {
  Node c;
  c.name = name;
  c.op_type = "Constant";
  c.outputs = {name};
  value.name = name;
  c.SetTensor("value", std::move(value));
  return c;
}

// ImageScaler -> Constant, Mul[, Constant, Add]; appends the nodes to `out`.
void RewriteImageScaler(const Node& n, int64_t opset, std::vector<Node>* out) {
  OT_CHECK(n.NumInputs() == 1 && n.outputs.size() == 1 && !n.outputs[0].empty(),
           "%s: ImageScaler takes one input and gives one output", n.Describe().c_str());
  const bool legacy = opset < 7;  // Mul and Add broadcast only when told to
  const std::vector<float> bias = n.GetFloats("bias");
  const std::string& y = n.outputs[0];
  const std::string scaled = bias.empty() ? y : y + "/image_scaler_scaled";
  const std::string scale_name = y + "/image_scaler_scale";
  out->push_back(ConstantNode(scale_name, HostTensor::FromVector<float>({n.GetFloat("scale", 1.f)}, {1})));
  Node mul;
  mul.name = n.name.empty() ? scaled : n.name + "/scale";
  mul.op_type = "Mul";
  mul.inputs = {n.inputs[0], scale_name};
  mul.outputs = {scaled};
  if (legacy) mul.SetInt("broadcast", 1);
  out->push_back(std::move(mul));
  if (bias.empty()) return;
  const int64_t c = static_cast<int64_t>(bias.size());
  const std::string bias_name = y + "/image_scaler_bias";
  out->push_back(ConstantNode(bias_name, HostTensor::FromVector<float>(bias, legacy ? std::vector<int64_t>{c}
                                                                                    : std::vector<int64_t>{c, 1, 1})));
  Node add;
  add.name = n.name.empty() ? y : n.name + "/bias";
  add.op_type = "Add";
  add.inputs = {scaled, bias_name};
  add.outputs = {y};
  if (legacy) {
    add.SetInt("broadcast", 1);
    add.SetInt("axis", 1);
  }
  out->push_back(std::move(add));
}

}  // namespace

int RewriteLegacyOps(Model& model) {
  const int64_t opset = model.OpsetFor("");
  int replaced = 0;
  std::vector<Node> nodes;
  nodes.reserve(model.graph.nodes.size());
  for (Node& n : model.graph.nodes) {
    if (n.domain.empty() && n.op_type == "ImageScaler") {
      OT_CHECK(opset <= 9, "%s: ImageScaler is defined up to opset 9 only, this model imports opset %lld; replace it "
               "with Mul and Add", n.Describe().c_str(), static_cast<long long>(opset));
      RewriteImageScaler(n, opset, &nodes);
      ++replaced;
    } else {
      nodes.push_back(std::move(n));
    }
  }
  model.graph.nodes = std::move(nodes);
  return replaced;
}

}  // namespace ot
