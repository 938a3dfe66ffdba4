// Gradient rules of the standard ops, one small function each. Gradient ops that ONNX
// lacks are emitted in kGradDomain and have kernels in runtime/cpu/training/gradient_kernels.cc.
#include "graph/autodiff/gradient_rules_common.h"

#include "graph/error.h"

namespace ot {

void WriteBroadcastGrad(GradientBuilder& b, const std::string& grad, int i) {
  std::string shape = b.Emit("Shape", {b.I(i)}, {b.Temp("shape")});
  b.Emit("SumToShape", {grad, shape}, {b.GI(i)}, kGradDomain);
}

void RegisterRule(GradientRegistry& r, const std::string& op, int64_t since, int64_t until, GradientRule rule,
                  std::vector<int> stops, const std::string& domain) {
  r.Register(GradientRuleDef{domain, op, since, until, std::move(stops), std::move(rule)});
}

namespace {

using B = GradientBuilder;

void IdentityGrad(B& b) { b.Emit("Identity", {b.GO(0)}, {b.GI(0)}); }

// Ops that only change the shape: the gradient is GO reshaped to the input's shape
// (before opset 5, whose Reshape takes no shape input, by the gradient domain's Reshape).
void ReshapeLikeInputGrad(B& b) {
  std::string shape = b.Emit("Shape", {b.I(0)}, {b.Temp("shape")});
  b.Emit("Reshape", {b.GO(0), shape}, {b.GI(0)}, b.opset() < 5 ? kGradDomain : "");
}

// Activations whose gradient needs the output (Relu, Sigmoid, Tanh) or the input.
void ActivationFromOutputGrad(B& b) {
  b.Emit(b.node().op_type + "Grad", {b.GO(0), b.O(0)}, {b.GI(0)}, kGradDomain);
}
void LeakyReluGrad(B& b) {
  b.Emit("LeakyReluGrad", {b.GO(0), b.I(0)}, {b.GI(0)}, kGradDomain,
         {{"alpha", B::AttrFloat(b.node().GetFloat("alpha", 0.01f))}});
}

void AddGrad(B& b) {
  for (int i : {0, 1})
    if (b.NeedGI(i)) WriteBroadcastGrad(b, b.GO(0), i);
}
void SubGrad(B& b) {
  if (b.NeedGI(0)) WriteBroadcastGrad(b, b.GO(0), 0);
  if (b.NeedGI(1)) WriteBroadcastGrad(b, b.Emit("Neg", {b.GO(0)}, {b.Temp("neg")}), 1);
}
void MulGrad(B& b) {
  if (b.NeedGI(0)) WriteBroadcastGrad(b, b.Emit("Mul", {b.GO(0), b.I(1)}, {b.Temp("mul")}), 0);
  if (b.NeedGI(1)) WriteBroadcastGrad(b, b.Emit("Mul", {b.GO(0), b.I(0)}, {b.Temp("mul")}), 1);
}
void DivGrad(B& b) {
  if (b.NeedGI(0)) WriteBroadcastGrad(b, b.Emit("Div", {b.GO(0), b.I(1)}, {b.Temp("div")}), 0);
  if (b.NeedGI(1)) {
    // d(a/b)/db = -(a/b)/b
    std::string t = b.Emit("Mul", {b.GO(0), b.O(0)}, {b.Temp("mul")});
    t = b.Emit("Div", {t, b.I(1)}, {b.Temp("div")});
    WriteBroadcastGrad(b, b.Emit("Neg", {t}, {b.Temp("neg")}), 1);
  }
}

// Add, Sub, Mul and Div before opset 7: Y has A's shape; B has it too, or with
// broadcast=1 is matched against A's dimensions from `axis` on (by default against its
// last ones, as numpy would). The emitted ops that read B broadcast it the same way; B's
// gradient is summed over A's dimensions outside [axis, axis + rank(B)) and then over
// those where B has 1.
void LegacyBinaryGrad(B& b) {
  const Node& n = b.node();
  const std::string& op = n.op_type;
  const bool broadcast = n.GetInt("broadcast", 0) != 0;
  std::map<std::string, Attribute> bcast;
  if (broadcast) {
    bcast["broadcast"] = B::AttrInt(1);
    if (n.HasAttr("axis")) bcast["axis"] = B::AttrInt(n.GetInt("axis", 0));
  }
  // `g` shaped like Y (and A) summed to B's shape, into GI(1).
  auto write_b = [&](std::string g) {
    if (!broadcast) {
      b.Emit("Identity", {g}, {b.GI(1)});
      return;
    }
    if (n.HasAttr("axis")) {
      const int ra = b.Rank(b.I(0)), rb = b.Rank(b.I(1));
      OT_CHECK(ra >= 0 && rb >= 0, "%s: the gradient of %s with broadcast=1 and an axis needs the ranks of A and B, "
               "which the model's shapes do not give; add shapes (value_info) or re-export at opset 7 or newer",
               n.Describe().c_str(), op.c_str());
      int64_t axis = n.GetInt("axis", 0);
      if (axis < 0) axis += ra;
      OT_CHECK(axis >= 0 && axis + rb <= ra, "%s: B of rank %d does not fit A of rank %d at axis %lld",
               n.Describe().c_str(), rb, ra, static_cast<long long>(n.GetInt("axis", 0)));
      std::vector<int64_t> outside;
      for (int64_t d = 0; d < ra; ++d)
        if (d < axis || d >= axis + rb) outside.push_back(d);
      if (!outside.empty())
        g = b.Emit("ReduceSum", {g}, {b.Temp("summed")}, "",
                   {{"axes", B::AttrInts(outside)}, {"keepdims", B::AttrInt(0)}});
    }
    WriteBroadcastGrad(b, g, 1);
  };
  if (op == "Add" || op == "Sub") {
    if (b.NeedGI(0)) b.Emit("Identity", {b.GO(0)}, {b.GI(0)});
    if (b.NeedGI(1)) write_b(op == "Add" ? b.GO(0) : b.Emit("Neg", {b.GO(0)}, {b.Temp("neg")}));
  } else if (op == "Mul") {
    if (b.NeedGI(0)) b.Emit("Mul", {b.GO(0), b.I(1)}, {b.GI(0)}, "", bcast);
    if (b.NeedGI(1)) write_b(b.Emit("Mul", {b.GO(0), b.I(0)}, {b.Temp("mul")}));
  } else {  // Div: d(a/b)/db = -(a/b)/b
    if (b.NeedGI(0)) b.Emit("Div", {b.GO(0), b.I(1)}, {b.GI(0)}, "", bcast);
    if (b.NeedGI(1)) {
      std::string t = b.Emit("Mul", {b.GO(0), b.O(0)}, {b.Temp("mul")});
      t = b.Emit("Div", {t, b.I(1)}, {b.Temp("div")}, "", bcast);
      write_b(b.Emit("Neg", {t}, {b.Temp("neg")}));
    }
  }
}

// Y = alpha * op(A) * op(B) + beta * C
void GemmGrad(B& b) {
  const Node& n = b.node();
  const int64_t ta = n.GetInt("transA", 0), tb = n.GetInt("transB", 0);
  const float alpha = n.GetFloat("alpha", 1.f), beta = n.GetFloat("beta", 1.f);
  auto gemm = [&](const std::string& x, const std::string& y, int64_t tx, int64_t ty, const std::string& out) {
    b.Emit("Gemm", {x, y}, {out}, "",
           {{"transA", B::AttrInt(tx)}, {"transB", B::AttrInt(ty)}, {"alpha", B::AttrFloat(alpha)}});
  };
  if (b.NeedGI(0)) {
    if (ta == 0) gemm(b.GO(0), b.I(1), 0, tb ? 0 : 1, b.GI(0));
    else gemm(b.I(1), b.GO(0), tb, 1, b.GI(0));
  }
  if (b.NeedGI(1)) {
    if (tb == 0) gemm(b.I(0), b.GO(0), ta ? 0 : 1, 0, b.GI(1));
    else gemm(b.GO(0), b.I(0), 1, ta, b.GI(1));
  }
  if (b.NeedGI(2)) {
    std::string g = b.GO(0);
    if (beta != 1.f) {
      std::map<std::string, Attribute> attrs;
      if (b.opset() < 7) attrs["broadcast"] = B::AttrInt(1);  // a scalar broadcasts only when told to
      g = b.Emit("Mul", {g, b.ConstantFloat(beta, "beta")}, {b.Temp("scaled")}, "", attrs);
    }
    WriteBroadcastGrad(b, g, 2);
  }
}

void TransposeGrad(B& b) {
  std::vector<int64_t> perm = b.node().GetInts("perm");
  std::map<std::string, Attribute> attrs;
  if (!perm.empty()) {
    std::vector<int64_t> inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
    attrs["perm"] = B::AttrInts(inv);
  }
  b.Emit("Transpose", {b.GO(0)}, {b.GI(0)}, "", attrs);
}

void SoftmaxCrossEntropyLossGrad(B& b) {
  const Node& n = b.node();
  std::vector<std::string> ins = {b.GO(0), b.O(1), b.I(1)};
  if (n.HasInput(2)) ins.push_back(b.I(2));
  std::map<std::string, Attribute> attrs = {{"reduction", B::AttrString(n.GetString("reduction", "mean"))}};
  if (n.HasAttr("ignore_index")) attrs["ignore_index"] = B::AttrInt(n.GetInt("ignore_index", 0));
  b.Emit("SoftmaxCrossEntropyLossGrad", ins, {b.GI(0)}, kGradDomain, attrs);
}

void NegativeLogLikelihoodLossGrad(B& b) {
  const Node& n = b.node();
  std::vector<std::string> ins = {b.GO(0), b.I(0), b.I(1)};
  if (n.HasInput(2)) ins.push_back(b.I(2));
  std::map<std::string, Attribute> attrs = {{"reduction", B::AttrString(n.GetString("reduction", "mean"))}};
  if (n.HasAttr("ignore_index")) attrs["ignore_index"] = B::AttrInt(n.GetInt("ignore_index", 0));
  b.Emit("NegativeLogLikelihoodLossGrad", ins, {b.GI(0)}, kGradDomain, attrs);
}

// BatchNormTraining(X, scale, B, mean, var) -> Y, mean', var', saved_mean, saved_var.
void BatchNormTrainingGrad(B& b) {
  std::vector<std::string> outs = {b.NeedGI(0) ? b.GI(0) : b.Temp("dx"), b.NeedGI(1) ? b.GI(1) : b.Temp("dscale"),
                                   b.NeedGI(2) ? b.GI(2) : b.Temp("dbias")};
  b.Emit("BatchNormalizationGrad", {b.GO(0), b.I(0), b.I(1), b.O(3), b.O(4)}, outs, kGradDomain,
         {{"epsilon", B::AttrFloat(b.node().GetFloat("epsilon", 1e-5f))}});
}

// Dropout(X[, ratio, training_mode]) -> Y, mask: dX = dY * mask / (1 - ratio). From
// opset 7 to 11 the op has no training switch and the CPU kernel passes X through (the
// mask all ones, nothing scaled), so there dX = dY; before opset 7 is_test=0 (what the
// training graph leaves) drops and scales as from opset 12.
void DropoutGrad(B& b) {
  if (b.opset() >= 7 && b.opset() < 12) {
    b.Emit("Identity", {b.GO(0)}, {b.GI(0)});
    return;
  }
  std::vector<std::string> ins = {b.GO(0), b.O(1)};
  std::map<std::string, Attribute> attrs;
  if (b.opset() >= 12) {
    if (b.node().HasInput(1)) ins.push_back(b.I(1));
  } else {
    attrs["ratio"] = B::AttrFloat(b.node().GetFloat("ratio", 0.5f));
  }
  b.Emit("DropoutGrad", ins, {b.GI(0)}, kGradDomain, attrs);
}

// The forward node's attributes, for gradient ops that recompute its geometry.
std::map<std::string, Attribute> SameAttrs(B& b) { return b.node().attrs; }

void ConvGrad(B& b) {
  std::vector<std::string> outs = {b.NeedGI(0) ? b.GI(0) : "", b.NeedGI(1) ? b.GI(1) : "",
                                   b.node().HasInput(2) && b.NeedGI(2) ? b.GI(2) : ""};
  b.Emit("ConvGrad", {b.GO(0), b.I(0), b.I(1)}, outs, kGradDomain, SameAttrs(b));
}

// MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool. MaxPool's Indices output is
// int64 and carries no gradient.
void PoolGrad(B& b) {
  OT_CHECK(!b.HasGO(1), "%s: the gradient through MaxPool's Indices output is not supported",
           b.node().Describe().c_str());
  b.Emit(b.node().op_type + "Grad", {b.GO(0), b.I(0)}, {b.GI(0)}, kGradDomain, SameAttrs(b));
}

// Softmax and LogSoftmax: the gradient ops take dY and Y, and the axis semantics of the
// forward opset (before 13 the input is seen as 2-D at `axis`).
void SoftmaxFamilyGrad(B& b) {
  std::map<std::string, Attribute> attrs = {{"axis", B::AttrInt(b.node().GetInt("axis", b.opset() >= 13 ? -1 : 1))},
                                            {"coerce_2d", B::AttrInt(b.opset() < 13 ? 1 : 0)}};
  b.Emit(b.node().op_type + "Grad", {b.GO(0), b.O(0)}, {b.GI(0)}, kGradDomain, attrs);
}

// ReduceSum and ReduceMean: dY broadcast back over the reduced axes (scaled for mean).
void ReduceGrad(B& b) {
  std::vector<std::string> ins = {b.GO(0), b.Emit("Shape", {b.I(0)}, {b.Temp("shape")})};
  if (b.node().HasInput(1)) ins.push_back(b.I(1));  // axes as an input (ReduceSum 13+)
  std::map<std::string, Attribute> attrs = {{"keepdims", B::AttrInt(b.node().GetInt("keepdims", 1))},
                                            {"noop_with_empty_axes", B::AttrInt(b.node().GetInt("noop_with_empty_axes", 0))},
                                            {"mean", B::AttrInt(b.node().op_type == "ReduceMean" ? 1 : 0)}};
  if (b.node().HasAttr("axes")) attrs["axes"] = B::AttrInts(b.node().GetInts("axes"));
  b.Emit("ReduceGrad", ins, {b.GI(0)}, kGradDomain, attrs);
}

// Concat: dY split back into pieces shaped like the inputs.
void ConcatGrad(B& b) {
  std::vector<std::string> ins = {b.GO(0)};
  std::vector<std::string> outs;
  for (int i = 0; i < b.node().NumInputs(); ++i) {
    ins.push_back(b.I(i));
    outs.push_back(b.NeedGI(i) ? b.GI(i) : "");
  }
  // Before opset 4 the axis is optional, 1 by default.
  const int64_t axis = b.node().GetInt("axis", b.opset() < 4 ? 1 : 0);
  b.Emit("ConcatGrad", ins, outs, kGradDomain, {{"axis", B::AttrInt(axis)}});
}

// Pad (constant, reflect, edge): dY added back to the input elements it was read from.
void PadGrad(B& b) {
  const Node& n = b.node();
  const std::string mode = n.GetString("mode", "constant");
  OT_CHECK(mode == "constant" || mode == "reflect" || mode == "edge",
           "%s: the gradient of Pad in mode '%s' is not supported (constant, reflect, edge)", n.Describe().c_str(),
           mode.c_str());
  std::vector<std::string> ins = {b.GO(0), b.I(0)};
  std::map<std::string, Attribute> attrs = {{"mode", B::AttrString(mode)}};
  if (n.HasInput(1)) ins.push_back(b.I(1));
  else attrs["pads"] = B::AttrInts(n.GetInts("pads"));
  if (n.HasInput(3)) ins.push_back(b.I(3));  // opset 18: the axes the pads are for
  b.Emit("PadGrad", ins, {b.GI(0)}, kGradDomain, attrs);
}

void SumGrad(B& b) {
  for (int i = 0; i < b.node().NumInputs(); ++i)
    if (b.NeedGI(i)) WriteBroadcastGrad(b, b.GO(0), i);
}
void ExpandGrad(B& b) { WriteBroadcastGrad(b, b.GO(0), 0); }
void NegGrad(B& b) { b.Emit("Neg", {b.GO(0)}, {b.GI(0)}); }
void ExpGrad(B& b) { b.Emit("Mul", {b.GO(0), b.O(0)}, {b.GI(0)}); }
void LogGrad(B& b) { b.Emit("Div", {b.GO(0), b.I(0)}, {b.GI(0)}); }
void SqrtGrad(B& b) {
  std::string half = b.Emit("Mul", {b.GO(0), b.ConstantFloat(0.5f, "half")}, {b.Temp("half")});
  b.Emit("Div", {half, b.O(0)}, {b.GI(0)});
}

void Register(GradientRegistry& r, const std::string& op, int64_t since, int64_t until, GradientRule rule,
              std::vector<int> stops = {}, const std::string& domain = "") {
  RegisterRule(r, op, since, until, std::move(rule), std::move(stops), domain);
}

}  // namespace

void RegisterStandardGradientRules(GradientRegistry& r) {
  Register(r, "Identity", 1, kLatestOpset, IdentityGrad);
  for (const char* op : {"Flatten", "Reshape", "Squeeze", "Unsqueeze"})
    Register(r, op, 1, kLatestOpset, ReshapeLikeInputGrad, {1});
  for (const char* op : {"Relu", "Sigmoid", "Tanh"}) Register(r, op, 6, kLatestOpset, ActivationFromOutputGrad);
  Register(r, "LeakyRelu", 6, kLatestOpset, LeakyReluGrad);
  Register(r, "Add", 7, kLatestOpset, AddGrad);
  Register(r, "Sub", 7, kLatestOpset, SubGrad);
  Register(r, "Mul", 7, kLatestOpset, MulGrad);
  Register(r, "Div", 7, kLatestOpset, DivGrad);
  Register(r, "Gemm", 7, kLatestOpset, GemmGrad);
  // The forms before opset 7 (broadcast/axis attributes), as Model Zoo models carry them.
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) Register(r, op, 1, 6, LegacyBinaryGrad);
  Register(r, "Gemm", 1, 6, GemmGrad);  // C broadcast (suffix matching) only with broadcast=1
  Register(r, "Sum", 1, 7, SumGrad);    // inputs of equal shapes
  Register(r, "Dropout", 1, 6, DropoutGrad);
  Register(r, "Concat", 1, 3, ConcatGrad);
  Register(r, "Transpose", 1, kLatestOpset, TransposeGrad);
  Register(r, "SoftmaxCrossEntropyLoss", 12, kLatestOpset, SoftmaxCrossEntropyLossGrad, {1, 2});
  Register(r, "NegativeLogLikelihoodLoss", 12, kLatestOpset, NegativeLogLikelihoodLossGrad, {1, 2});
  Register(r, "Dropout", 7, kLatestOpset, DropoutGrad, {1, 2});
  Register(r, "Conv", 1, kLatestOpset, ConvGrad);
  for (const char* op : {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"}) Register(r, op, 1, kLatestOpset, PoolGrad);
  for (const char* op : {"Softmax", "LogSoftmax"}) Register(r, op, 1, kLatestOpset, SoftmaxFamilyGrad);
  for (const char* op : {"ReduceSum", "ReduceMean"}) Register(r, op, 1, kLatestOpset, ReduceGrad, {1});
  Register(r, "Concat", 4, kLatestOpset, ConcatGrad);
  Register(r, "Sum", 8, kLatestOpset, SumGrad);
  Register(r, "Pad", 2, kLatestOpset, PadGrad, {1, 2, 3});
  // The loss attached to models older than opset 12 lives in the gradient domain.
  Register(r, "SoftmaxCrossEntropyLoss", 1, kLatestOpset, SoftmaxCrossEntropyLossGrad, {1, 2}, kGradDomain);
  Register(r, "Expand", 8, kLatestOpset, ExpandGrad, {1});
  Register(r, "Neg", 6, kLatestOpset, NegGrad);
  Register(r, "Exp", 6, kLatestOpset, ExpGrad);
  Register(r, "Log", 6, kLatestOpset, LogGrad);
  Register(r, "Sqrt", 6, kLatestOpset, SqrtGrad);
  Register(r, "BatchNormTraining", 1, kLatestOpset, BatchNormTrainingGrad, {3, 4}, kGradDomain);
}

}  // namespace ot
