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

// Unsqueeze of `x` at `axes`, in the form of the model's opset (axes as an input from
// opset 13; negative axes, used where the rank is unknown, from opset 11).
std::string Unsqueeze(B& b, const std::string& x, std::vector<int64_t> axes) {
  for (int64_t a : axes)
    OT_CHECK(a >= 0 || b.opset() >= 11, "%s: the gradient needs the rank of its inputs before opset 11",
             b.node().Describe().c_str());
  if (b.opset() >= 13) return b.Emit("Unsqueeze", {x, b.ConstantInt64s(axes, "axes")}, {b.Temp("unsqueezed")});
  return b.Emit("Unsqueeze", {x}, {b.Temp("unsqueezed")}, "", {{"axes", B::AttrInts(std::move(axes))}});
}

// Y = A @ B with numpy semantics: batch dims broadcast (the gradients are summed back to
// each operand's shape), a 1-D A is a row [1, K] and a 1-D B a column [K, 1] whose unit
// axis Y drops. The 1-D forms need the operands' ranks; where the graph does not know a
// rank it is taken to be >= 2.
void MatMulGrad(B& b) {
  const int ra = b.Rank(b.I(0)), rb = b.Rank(b.I(1));
  auto t = [&](const std::string& x) { return b.Emit("TransposeLastTwo", {x}, {b.Temp("t")}, kGradDomain); };
  auto mm = [&](const std::string& x, const std::string& y) { return b.Emit("MatMul", {x, y}, {b.Temp("mm")}); };
  if (ra == 1 && rb == 1) {  // dot product: Y is a scalar
    if (b.NeedGI(0)) b.Emit("Mul", {b.GO(0), b.I(1)}, {b.GI(0)});
    if (b.NeedGI(1)) b.Emit("Mul", {b.GO(0), b.I(0)}, {b.GI(1)});
    return;
  }
  if (ra == 1) {  // A [K], B [..., K, N], dY [..., N]
    const std::string dy_row = Unsqueeze(b, b.GO(0), {rb >= 2 ? rb - 2 : -2});  // [..., 1, N]
    if (b.NeedGI(0)) WriteBroadcastGrad(b, mm(dy_row, t(b.I(1))), 0);                // [..., 1, K] -> [K]
    if (b.NeedGI(1)) WriteBroadcastGrad(b, mm(Unsqueeze(b, b.I(0), {1}), dy_row), 1);   // [K, 1] @ [..., 1, N]
    return;
  }
  if (rb == 1) {  // A [..., M, K], B [K], dY [..., M]
    if (b.NeedGI(0)) {
      const std::string dy_col = Unsqueeze(b, b.GO(0), {ra >= 2 ? ra - 1 : -1});  // [..., M, 1]
      WriteBroadcastGrad(b, mm(dy_col, Unsqueeze(b, b.I(1), {0})), 0);                  // @ [1, K]
    }
    if (b.NeedGI(1)) {
      const std::string dy_row = Unsqueeze(b, b.GO(0), {ra >= 2 ? ra - 2 : -2});  // [..., 1, M]
      WriteBroadcastGrad(b, mm(dy_row, b.I(0)), 1);                                     // [..., 1, K] -> [K]
    }
    return;
  }
  if (b.NeedGI(0)) WriteBroadcastGrad(b, mm(b.GO(0), t(b.I(1))), 0);
  if (b.NeedGI(1)) WriteBroadcastGrad(b, mm(t(b.I(0)), b.GO(0)), 1);
}

}  // namespace

void RegisterNnGradientRules(GradientRegistry& r) {
  RegisterRule(r, "LayerNormalization", 17, kAnyOpset, LayerNormalizationGrad);
  for (const char* op : {"ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                         "ReduceLogSumExp"})
    RegisterRule(r, op, 1, kAnyOpset, ReduceValueGrad, {1});
  RegisterRule(r, "ConvTranspose", 1, kAnyOpset, ConvTransposeGrad);
  RegisterRule(r, "MatMul", 1, kAnyOpset, MatMulGrad);
  RegisterRule(r, "InstanceNormalization", 1, kAnyOpset, InstanceNormalizationGrad);
}

}  // namespace ot
