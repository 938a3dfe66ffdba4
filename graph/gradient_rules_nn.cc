// Gradient rules, Normalisation, reductions and contractions: LayerNormalization, InstanceNormalization, the Reduce* family, ConvTranspose, Einsum.
#include "graph/gradient_rules_common.h"

#include "graph/error.h"

namespace ot {
namespace {

using B = GradientBuilder;

// LayerNormalization(X, Scale[, B]) -> Y[, Mean, InvStdDev]. LayerNormalizationGrad
// recomputes the row statistics from X, so the forward node's optional outputs are not
// needed; it gives dScale and dBias shaped like X.shape[axis:], summed down to the shapes
// of Scale and B.
void LayerNormalizationGrad(B& b) {
  const Node& n = b.node();
  OT_CHECK(!b.HasGO(1) && !b.HasGO(2), "%s: the gradient through LayerNormalization's Mean or InvStdDev output is not supported",
           n.Describe().c_str());
  const bool need_bias = n.HasInput(2) && b.NeedGI(2);
  std::vector<std::string> outs = {b.NeedGI(0) ? b.GI(0) : "", b.NeedGI(1) ? b.Temp("dscale") : "",
                                   need_bias ? b.Temp("dbias") : ""};
  b.Emit("LayerNormalizationGrad", {b.GO(0), b.I(0), b.I(1)}, outs, kGradDomain,
         {{"axis", B::AttrInt(n.GetInt("axis", -1))},
          {"epsilon", B::AttrFloat(n.GetFloat("epsilon", 1e-5f))},
          {"stash_type", B::AttrInt(n.GetInt("stash_type", 1))}});
  if (b.NeedGI(1)) WriteBroadcastGrad(b, outs[1], 1);
  if (need_bias) WriteBroadcastGrad(b, outs[2], 2);
}

// ReduceMax ... ReduceLogSumExp: ReduceValueGrad(dY, X, Y[, axes]) with the forward op's
// name and reduction attributes (axes as an attribute, or as input 1 from opset 18).
void ReduceValueGrad(B& b) {
  const Node& n = b.node();
  std::vector<std::string> ins = {b.GO(0), b.I(0), b.O(0)};
  if (n.HasInput(1)) ins.push_back(b.I(1));
  std::map<std::string, Attribute> attrs = {{"op", B::AttrString(n.op_type)},
                                            {"keepdims", B::AttrInt(n.GetInt("keepdims", 1))},
                                            {"noop_with_empty_axes", B::AttrInt(n.GetInt("noop_with_empty_axes", 0))}};
  if (n.HasAttr("axes")) attrs["axes"] = B::AttrInts(n.GetInts("axes"));
  b.Emit("ReduceValueGrad", ins, {b.GI(0)}, kGradDomain, attrs);
}

// ConvTranspose(X, W[, B]): ConvTransposeGrad(dY, X, W) -> dX, dW, dB with the forward
// node's attributes (oneDNN's deconvolution backward data and weights).
void ConvTransposeGrad(B& b) {
  const Node& n = b.node();
  std::vector<std::string> outs = {b.NeedGI(0) ? b.GI(0) : "", b.NeedGI(1) ? b.GI(1) : "",
                                   n.HasInput(2) && b.NeedGI(2) ? b.GI(2) : ""};
  b.Emit("ConvTransposeGrad", {b.GO(0), b.I(0), b.I(1)}, outs, kGradDomain, n.attrs);
}

// InstanceNormalization(X, scale, B): InstanceNormalizationGrad(dY, X, scale) -> dX,
// dScale, dBias, which recomputes the per-instance statistics from X.
void InstanceNormalizationGrad(B& b) {
  std::vector<std::string> outs = {b.NeedGI(0) ? b.GI(0) : "", b.NeedGI(1) ? b.GI(1) : "", b.NeedGI(2) ? b.GI(2) : ""};
  b.Emit("InstanceNormalizationGrad", {b.GO(0), b.I(0), b.I(1)}, outs, kGradDomain,
         {{"epsilon", B::AttrFloat(b.node().GetFloat("epsilon", 1e-5f))}});
}

}  // namespace

void RegisterNnGradientRules(GradientRegistry& r) {
  RegisterRule(r, "LayerNormalization", 17, kAnyOpset, LayerNormalizationGrad);
  for (const char* op : {"ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                         "ReduceLogSumExp"})
    RegisterRule(r, op, 1, kAnyOpset, ReduceValueGrad, {1});
  RegisterRule(r, "ConvTranspose", 1, kAnyOpset, ConvTransposeGrad);
  RegisterRule(r, "InstanceNormalization", 1, kAnyOpset, InstanceNormalizationGrad);
}

}  // namespace ot
