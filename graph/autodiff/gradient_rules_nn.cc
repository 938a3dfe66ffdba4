// Gradient rules, Normalisation, reductions and contractions: LayerNormalization,
// InstanceNormalization, GroupNormalization, RMSNormalization, LpNormalization, LRN, the
// Reduce* family, ConvTranspose, MatMul, Einsum.
#include "graph/autodiff/gradient_rules_common.h"

#include "graph/autodiff/einsum_equation.h"
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

// GroupNormalization(X, scale, bias): GroupNormalizationGrad(dY, X, scale) -> dX, dScale,
// dBias, shaped like scale and bias: one value per group before opset 21 (per_channel 0),
// per channel from 21 on. Statistics are recomputed from X.
void GroupNormalizationGrad(B& b) {
  const Node& n = b.node();
  std::vector<std::string> outs = {b.NeedGI(0) ? b.GI(0) : "", b.NeedGI(1) ? b.GI(1) : "", b.NeedGI(2) ? b.GI(2) : ""};
  b.Emit("GroupNormalizationGrad", {b.GO(0), b.I(0), b.I(1)}, outs, kGradDomain,
         {{"epsilon", B::AttrFloat(n.GetFloat("epsilon", 1e-5f))},
          {"num_groups", B::AttrInt(n.GetInt("num_groups", 1))},
          {"stash_type", B::AttrInt(n.GetInt("stash_type", 1))},
          {"per_channel", B::AttrInt(b.opset() >= 21 ? 1 : 0)}});
}

// RMSNormalization(X, scale): RMSNormalizationGrad(dY, X, scale) -> dX, dScale, where
// dScale is shaped like the normalised tail X.shape[axis:] and summed down to scale's shape.
void RMSNormalizationGrad(B& b) {
  const Node& n = b.node();
  std::vector<std::string> outs = {b.NeedGI(0) ? b.GI(0) : "", b.NeedGI(1) ? b.Temp("dscale") : ""};
  b.Emit("RMSNormalizationGrad", {b.GO(0), b.I(0), b.I(1)}, outs, kGradDomain,
         {{"axis", B::AttrInt(n.GetInt("axis", -1))},
          {"epsilon", B::AttrFloat(n.GetFloat("epsilon", 1e-5f))},
          {"stash_type", B::AttrInt(n.GetInt("stash_type", 1))}});
  if (b.NeedGI(1)) WriteBroadcastGrad(b, outs[1], 1);
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
  if (rb == 2 && ra > 2 && b.opset() >= 11) {
    // A batched input times a weight matrix (nn.Linear on [B, T, E]): Y's batch dims are
    // A's, so dA needs no reduction, and dB is one Gemm over the flattened batch,
    // [prod(batch) * M, K]^T x [prod(batch) * M, N], instead of a batched product summed
    // (measured on [32, 64, 192] x [192, 384] x [384, 192]: step CPU time 23.7 -> 18.3 ms,
    // arena 23 -> 15 MB, one thread). Gemm's C is optional from opset 11.
    if (b.NeedGI(0)) b.Emit("MatMul", {b.GO(0), t(b.I(1))}, {b.GI(0)});
    if (b.NeedGI(1)) {
      auto flat = [&](const std::string& x) {
        return b.Emit("Flatten", {x}, {b.Temp("flat")}, "", {{"axis", B::AttrInt(ra - 1)}});
      };
      b.Emit("Gemm", {flat(b.I(0)), flat(b.GO(0))}, {b.GI(1)}, "", {{"transA", B::AttrInt(1)}});
    }
    return;
  }
  if (b.NeedGI(0)) WriteBroadcastGrad(b, mm(b.GO(0), t(b.I(1))), 0);
  if (b.NeedGI(1)) WriteBroadcastGrad(b, mm(t(b.I(0)), b.GO(0)), 1);
}

// Einsum: the gradient of operand i is the Einsum of dY and the other operands whose
// output is operand i's term: "O,T1,...->Ti". Labels of Ti found in no other term nor
// the output (summed in the forward) are left out of that output and restored with
// Unsqueeze and Expand; with an ellipsis the result is summed down to the operand's
// shape (its ellipsis dims may have been broadcast). A label repeated within one term (a
// diagonal) has no gradient here.
void EinsumGrad(B& b) {
  const Node& n = b.node();
  const EinsumEquation eq = ParseEinsumEquation(n.GetString("equation", ""), n.Describe());
  OT_CHECK(static_cast<int>(eq.inputs.size()) == n.NumInputs(), "%s: the equation '%s' has %zu terms for %d inputs",
           n.Describe().c_str(), eq.ToString().c_str(), eq.inputs.size(), n.NumInputs());
  for (int i = 0; i < n.NumInputs(); ++i) {
    if (!b.NeedGI(i)) continue;
    const EinsumTerm& ti = eq.inputs[static_cast<size_t>(i)];
    std::string others = eq.output.letters;
    bool others_ellipsis = eq.output.has_ellipsis;
    std::vector<std::string> ins = {b.GO(0)};
    std::string lhs = eq.output.ToString();
    for (int j = 0; j < n.NumInputs(); ++j) {
      if (j == i) continue;
      const EinsumTerm& tj = eq.inputs[static_cast<size_t>(j)];
      others += tj.letters;
      others_ellipsis = others_ellipsis || tj.has_ellipsis;
      ins.push_back(b.I(j));
      lhs += "," + tj.ToString();
    }
    // The gradient's output term, and the axes (of Ti) it leaves out.
    EinsumTerm out;
    std::vector<int64_t> restore;
    const size_t nl = ti.letters.size();
    for (size_t p = 0; p < nl; ++p) {
      const char c = ti.letters[p];
      OT_CHECK(ti.letters.find(c, p + 1) == std::string::npos,
               "%s: no gradient for Einsum '%s': label '%c' repeats within input %d (a diagonal)", n.Describe().c_str(),
               eq.ToString().c_str(), c, i);
      if (ti.has_ellipsis && p == ti.ellipsis_pos) out.ellipsis_pos = out.letters.size();
      if (others.find(c) != std::string::npos) {
        out.letters += c;
      } else {
        // Axes before the ellipsis count from the front, after it from the back.
        const bool after = ti.has_ellipsis && p >= ti.ellipsis_pos;
        restore.push_back(after ? static_cast<int64_t>(p) - static_cast<int64_t>(nl) : static_cast<int64_t>(p));
      }
    }
    if (ti.has_ellipsis && ti.ellipsis_pos == nl) out.ellipsis_pos = out.letters.size();
    out.has_ellipsis = ti.has_ellipsis && others_ellipsis;
    const bool ellipsis_dropped = ti.has_ellipsis && !others_ellipsis;
    if (ellipsis_dropped && ti.ellipsis_pos != 0) {
      // Not leading: Expand cannot add its axes, so they are unsqueezed, which needs the rank.
      const int rank = b.Rank(b.I(i));
      OT_CHECK(rank >= 0, "%s: no gradient for Einsum '%s': input %d's '...' (not leading) is summed away and its "
               "rank is unknown", n.Describe().c_str(), eq.ToString().c_str(), i);
      for (int64_t e = 0; e < rank - static_cast<int64_t>(nl); ++e)
        restore.push_back(static_cast<int64_t>(ti.ellipsis_pos) + e);
    }
    const std::string grad_eq = lhs + "->" + out.ToString();
    const bool direct = restore.empty() && !ti.has_ellipsis;
    std::string g = b.Emit("Einsum", ins, {direct ? b.GI(i) : b.Temp("einsum")}, "",
                           {{"equation", B::AttrString(grad_eq)}});
    if (direct) continue;
    if (!restore.empty()) g = Unsqueeze(b, g, restore);
    if (!restore.empty() || ellipsis_dropped) {
      const std::string shape = b.Emit("Shape", {b.I(i)}, {b.Temp("shape")});
      g = b.Emit("Expand", {g, shape}, {b.Temp("expanded")});
    }
    WriteBroadcastGrad(b, g, i);
  }
}

// LpNormalization(X): LpNormalizationGrad(dY, X) with the forward attributes.
void LpNormalizationGrad(B& b) {
  b.Emit("LpNormalizationGrad", {b.GO(0), b.I(0)}, {b.GI(0)}, kGradDomain, b.node().attrs);
}

// LRN(X): LRNGrad(dY, X) with the forward attributes; the kernel recomputes the window
// sums from X (runtime/cpu/norm/lrn.cc has the formula).
void LrnGrad(B& b) { b.Emit("LRNGrad", {b.GO(0), b.I(0)}, {b.GI(0)}, kGradDomain, b.node().attrs); }

// MaxUnpool(X, I[, output_shape]): MaxUnpoolGrad(dY, I[, output_shape]) gathers dY at
// each value's position.
void MaxUnpoolGrad(B& b) {
  std::vector<std::string> ins = {b.GO(0), b.I(1)};
  if (b.node().HasInput(2)) ins.push_back(b.I(2));
  b.Emit("MaxUnpoolGrad", ins, {b.GI(0)}, kGradDomain, b.node().attrs);
}

}  // namespace

void RegisterNnGradientRules(GradientRegistry& r) {
  RegisterRule(r, "LayerNormalization", 17, kLatestOpset, LayerNormalizationGrad);
  RegisterRule(r, "LayerNormalization", 1, kLatestOpset, LayerNormalizationGrad, {}, kGradDomain);
  for (const char* op : {"ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                         "ReduceLogSumExp"})
    RegisterRule(r, op, 1, kLatestOpset, ReduceValueGrad, {1});
  RegisterRule(r, "ConvTranspose", 1, kLatestOpset, ConvTransposeGrad);
  RegisterRule(r, "MatMul", 1, kLatestOpset, MatMulGrad);
  RegisterRule(r, "Einsum", 12, kLatestOpset, EinsumGrad);
  RegisterRule(r, "LpNormalization", 1, kLatestOpset, LpNormalizationGrad);
  RegisterRule(r, "LRN", 1, kLatestOpset, LrnGrad);
  RegisterRule(r, "MaxUnpool", 9, kLatestOpset, MaxUnpoolGrad, {1, 2});
  RegisterRule(r, "InstanceNormalization", 1, kLatestOpset, InstanceNormalizationGrad);
  RegisterRule(r, "GroupNormalization", 18, kLatestOpset, GroupNormalizationGrad);
  RegisterRule(r, "RMSNormalization", 23, kLatestOpset, RMSNormalizationGrad);
}

}  // namespace ot
