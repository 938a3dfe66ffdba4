// Gradient rule of ONNX Attention (opset 23+): one AttentionGrad node (org.onnxtrain,
// runtime/cpu/matmul/attention.cc) that recomputes the probabilities from Q and K and gives dQ,
// dK and dV, and, when an additive float mask needs a gradient (a learned bias), the
// gradient of the scores summed down to the mask's shape. org.onnxtrain Attention, the
// fusion of attention written out as ops (graph/passes/fusion.h), has the same rule; its output 4,
// the row logsumexp, goes to AttentionGrad with Y so that the backward recomputes the
// probabilities without a row max and sum; its output 5, the probabilities themselves where
// the kernel keeps them (short sequences on the CPU; empty otherwise), goes as input 8.
#include "graph/autodiff/gradient_rules_common.h"

#include "graph/error.h"

namespace ot {
namespace {

using B = GradientBuilder;

void AttentionGrad(B& b) {
  const Node& n = b.node();
  OT_CHECK(!b.HasGO(1) && !b.HasGO(2) && !b.HasGO(3) && !b.HasGO(4),
           "%s: the gradient through Attention's present_key, present_value or qk_matmul_output is not supported; "
           "train on Y only", n.Describe().c_str());
  OT_CHECK(!n.HasInput(4) && !n.HasInput(5),
           "%s: Attention with past_key/past_value (a KV cache) cannot be differentiated; export the model for "
           "training without a cache", n.Describe().c_str());
  if (!b.HasGO(0)) return;
  const bool mask_grad = n.HasInput(3) && b.NeedGI(3);
  const std::string dscores = mask_grad ? b.Temp("dscores") : "";
  std::vector<std::string> ins = {b.GO(0), b.I(0), b.I(1), b.I(2), n.HasInput(3) ? b.I(3) : "",
                                  n.HasInput(6) ? b.I(6) : ""};
  if (n.HasOutput(4)) {  // org.onnxtrain Attention's row logsumexp: the kernel's flash path
    ins.push_back(b.O(0));
    ins.push_back(b.O(4));
    if (n.HasOutput(5)) ins.push_back(b.O(5));  // the probabilities the CPU kernel keeps for short sequences
  }
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  std::map<std::string, Attribute> attrs;
  for (const char* key : {"is_causal", "q_num_heads", "kv_num_heads", "broadcast_mask", "sequence_first"})
    if (n.HasAttr(key)) attrs[key] = B::AttrInt(n.GetInt(key, 0));
  for (const char* key : {"scale", "softcap"})
    if (n.HasAttr(key)) attrs[key] = B::AttrFloat(n.GetFloat(key, 0.f));
  b.Emit("AttentionGrad", ins,
         {b.NeedGI(0) ? b.GI(0) : "", b.NeedGI(1) ? b.GI(1) : "", b.NeedGI(2) ? b.GI(2) : "", dscores}, kGradDomain,
         attrs);
  if (mask_grad) WriteBroadcastGrad(b, dscores, 3);
}

}  // namespace

void RegisterAttentionGradientRules(GradientRegistry& r) {
  // past_key, past_value and nonpad_kv_seqlen never carry a gradient.
  RegisterRule(r, "Attention", 23, kLatestOpset, AttentionGrad, {4, 5, 6});
  RegisterRule(r, "Attention", 1, kLatestOpset, AttentionGrad, {4, 5, 6}, kGradDomain);  // fused (graph/passes/fusion.h)
}

}  // namespace ot
