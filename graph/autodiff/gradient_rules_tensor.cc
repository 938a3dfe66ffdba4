// Gradient rules, Indexing and data movement: Gather*, Scatter*, Slice, Split, Tile, Where, Trilu, CumSum, TopK,
// DepthToSpace, SpaceToDepth, ReverseSequence, Resize, Upsample and GridSample. Gathers are undone by
// scatter-adds of the gradient (duplicate indices add up), scatters by a gather of the
// gradient at the written positions and the gradient with those positions masked.
#include "graph/autodiff/gradient_rules_common.h"

#include "graph/error.h"

namespace ot {
namespace {

using B = GradientBuilder;

std::string ShapeOf(B& b, const std::string& value) { return b.Emit("Shape", {value}, {b.Temp("shape")}); }
// Float zeros shaped like `value` (the gradient of an output nobody reads).
std::string ZerosLike(B& b, const std::string& value) {
  return b.Emit("ConstantOfShape", {ShapeOf(b, value)}, {b.Temp("zeros")});
}

// Gather(data, indices) along `axis`: dData is dY scatter-added into zeros of data's shape.
void GatherGrad(B& b) {
  b.Emit("GatherGrad", {b.GO(0), ShapeOf(b, b.I(0)), b.I(1)}, {b.GI(0)}, kGradDomain,
         {{"axis", B::AttrInt(b.node().GetInt("axis", 0))}});
}

void GatherElementsGrad(B& b) {
  b.Emit("GatherElementsGrad", {b.GO(0), ShapeOf(b, b.I(0)), b.I(1)}, {b.GI(0)}, kGradDomain,
         {{"axis", B::AttrInt(b.node().GetInt("axis", 0))}});
}

void GatherNDGrad(B& b) {
  b.Emit("GatherNDGrad", {b.GO(0), ShapeOf(b, b.I(0)), b.I(1)}, {b.GI(0)}, kGradDomain,
         {{"batch_dims", B::AttrInt(b.node().GetInt("batch_dims", 0))}});
}

void CheckNoScatterReduction(B& b) {
  const std::string red = b.node().GetString("reduction", "none");
  OT_CHECK(red == "none", "%s: the gradient of %s with reduction '%s' is not supported (only 'none')",
           b.node().Describe().c_str(), b.node().op_type.c_str(), red.c_str());
}

// ScatterND(data, indices, updates): dData is dY with the written positions zeroed,
// dUpdates is dY gathered at them.
void ScatterNDGrad(B& b) {
  CheckNoScatterReduction(b);
  if (b.NeedGI(0)) b.Emit("ScatterND", {b.GO(0), b.I(1), ZerosLike(b, b.I(2))}, {b.GI(0)});
  if (b.NeedGI(2)) b.Emit("GatherND", {b.GO(0), b.I(1)}, {b.GI(2)});
}

void ScatterElementsGrad(B& b) {
  CheckNoScatterReduction(b);
  const std::map<std::string, Attribute> axis = {{"axis", B::AttrInt(b.node().GetInt("axis", 0))}};
  if (b.NeedGI(0)) b.Emit("ScatterElements", {b.GO(0), b.I(1), ZerosLike(b, b.I(2))}, {b.GI(0)}, "", axis);
  if (b.NeedGI(2)) b.Emit("GatherElements", {b.GO(0), b.I(1)}, {b.GI(2)}, "", axis);
}

// Slice: dY written back into zeros at the sliced positions. SliceGrad takes the forward
// inputs at their positions (starts, ends, axes, steps; absent before opset 10, whose
// attributes it carries) and the input's shape last.
void SliceGrad(B& b) {
  const Node& n = b.node();
  std::vector<std::string> ins = {b.GO(0)};
  for (int i = 1; i <= 4; ++i) ins.push_back(b.opset() >= 10 && n.HasInput(i) ? b.I(i) : "");
  ins.push_back(ShapeOf(b, b.I(0)));
  std::map<std::string, Attribute> attrs;
  if (b.opset() < 10) {
    attrs["starts"] = B::AttrInts(n.GetInts("starts"));
    attrs["ends"] = B::AttrInts(n.GetInts("ends"));
    if (n.HasAttr("axes")) attrs["axes"] = B::AttrInts(n.GetInts("axes"));
  }
  attrs["forward_opset"] = B::AttrInt(b.opset());
  b.Emit("SliceGrad", ins, {b.GI(0)}, kGradDomain, attrs);
}

// Split: the outputs' gradients concatenated back; zeros stand in for unread outputs.
void SplitGrad(B& b) {
  const Node& n = b.node();
  std::vector<std::string> pieces;
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (n.outputs[i].empty()) continue;
    const int k = static_cast<int>(i);
    pieces.push_back(b.HasGO(k) ? b.GO(k) : ZerosLike(b, b.O(k)));
  }
  OT_CHECK(pieces.size() == n.outputs.size(), "%s: Split with an omitted output has no gradient rule", n.Describe().c_str());
  b.Emit("Concat", pieces, {b.GI(0)}, "", {{"axis", B::AttrInt(n.GetInt("axis", 0))}});
}

// Tile: dY seen as [r0, d0, r1, d1, ...] summed over the repeat axes.
void TileGrad(B& b) { b.Emit("TileGrad", {b.GO(0), ShapeOf(b, b.I(0))}, {b.GI(0)}, kGradDomain); }

// Where(cond, X, Y): dX = where(cond, dY, 0), dY = where(cond, 0, dY), each summed to
// its input's shape.
void WhereGrad(B& b) {
  const std::string zero = b.ConstantFloat(0.f, "zero");
  if (b.NeedGI(1)) WriteBroadcastGrad(b, b.Emit("Where", {b.I(0), b.GO(0), zero}, {b.Temp("dx")}), 1);
  if (b.NeedGI(2)) WriteBroadcastGrad(b, b.Emit("Where", {b.I(0), zero, b.GO(0)}, {b.Temp("dy")}), 2);
}

// Trilu keeps a triangle: its gradient keeps the same triangle of dY.
void TriluGrad(B& b) {
  std::vector<std::string> ins = {b.GO(0)};
  if (b.node().HasInput(1)) ins.push_back(b.I(1));
  b.Emit("Trilu", ins, {b.GI(0)}, "", {{"upper", B::AttrInt(b.node().GetInt("upper", 1))}});
}

// CumSum: the gradient of a running sum is the running sum of dY in the other direction
// (exclusive stays exclusive).
void CumSumGrad(B& b) {
  b.Emit("CumSum", {b.GO(0), b.I(1)}, {b.GI(0)}, "",
         {{"exclusive", B::AttrInt(b.node().GetInt("exclusive", 0))},
          {"reverse", B::AttrInt(b.node().GetInt("reverse", 0) ? 0 : 1)}});
}

// TopK: dValues scattered back to the positions the indices output names.
void TopKGrad(B& b) {
  OT_CHECK(b.node().HasOutput(1), "%s: the gradient of TopK needs its Indices output", b.node().Describe().c_str());
  if (!b.HasGO(0)) return;
  b.Emit("GatherElementsGrad", {b.GO(0), ShapeOf(b, b.I(0)), b.O(1)}, {b.GI(0)}, kGradDomain,
         {{"axis", B::AttrInt(b.node().GetInt("axis", -1))}});
}

// DepthToSpace and SpaceToDepth permute elements: the gradient applies the inverse
// permutation. SpaceToDepth's inverse is DepthToSpace in DCR order.
void DepthToSpaceGrad(B& b) {
  b.Emit("DepthToSpaceGrad", {b.GO(0)}, {b.GI(0)}, kGradDomain,
         {{"blocksize", B::AttrInt(b.node().GetInt("blocksize", 0))},
          {"mode", B::AttrString(b.node().GetString("mode", "DCR"))}});
}
void SpaceToDepthGrad(B& b) {
  std::map<std::string, Attribute> attrs = {{"blocksize", B::AttrInt(b.node().GetInt("blocksize", 0))}};
  if (b.opset() >= 11) attrs["mode"] = B::AttrString("DCR");  // the only order before 11
  b.Emit("DepthToSpace", {b.GO(0)}, {b.GI(0)}, "", attrs);
}

// ReverseSequence is its own inverse.
void ReverseSequenceGrad(B& b) { b.Emit("ReverseSequence", {b.GO(0), b.I(1)}, {b.GI(0)}, "", b.node().attrs); }

// Resize (opset 10: X, scales; 11+: X, roi, scales, sizes) and Upsample (X, scales, or
// the attribute before opset 9): ResizeGrad takes dY, the forward's inputs after X at
// their positions, and X's shape last; it recomputes the interpolation weights and
// scatter-adds dY with them.
void ResizeGrad(B& b) {
  const Node& n = b.node();
  std::vector<std::string> ins = {b.GO(0)};
  for (int i = 1; i < n.NumInputs(); ++i) ins.push_back(n.HasInput(i) ? b.I(i) : "");
  while (ins.size() < 4) ins.push_back("");
  ins.push_back(ShapeOf(b, b.I(0)));
  std::map<std::string, Attribute> attrs = n.attrs;
  attrs["forward_op"] = B::AttrString(n.op_type);
  attrs["forward_opset"] = B::AttrInt(b.opset());
  b.Emit("ResizeGrad", ins, {b.GI(0)}, kGradDomain, attrs);
}

// GridSample(X, grid): GridSampleGrad gives dX (dY added back with the sampling weights)
// and dGrid (the weights differentiated by the coordinates).
void GridSampleGrad(B& b) {
  std::vector<std::string> outs = {b.NeedGI(0) ? b.GI(0) : "", b.NeedGI(1) ? b.GI(1) : ""};
  b.Emit("GridSampleGrad", {b.GO(0), b.I(0), b.I(1)}, outs, kGradDomain, b.node().attrs);
}

}  // namespace

void RegisterTensorGradientRules(GradientRegistry& r) {
  RegisterRule(r, "Gather", 1, kLatestOpset, GatherGrad, {1});
  RegisterRule(r, "GatherElements", 11, kLatestOpset, GatherElementsGrad, {1});
  RegisterRule(r, "GatherND", 11, kLatestOpset, GatherNDGrad, {1});
  RegisterRule(r, "ScatterND", 11, kLatestOpset, ScatterNDGrad, {1});
  RegisterRule(r, "ScatterElements", 11, kLatestOpset, ScatterElementsGrad, {1});
  RegisterRule(r, "Slice", 1, kLatestOpset, SliceGrad, {1, 2, 3, 4});
  RegisterRule(r, "Split", 2, kLatestOpset, SplitGrad, {1});
  RegisterRule(r, "Tile", 6, kLatestOpset, TileGrad, {1});
  RegisterRule(r, "Where", 9, kLatestOpset, WhereGrad, {0});
  RegisterRule(r, "Trilu", 14, kLatestOpset, TriluGrad, {1});
  RegisterRule(r, "CumSum", 11, kLatestOpset, CumSumGrad, {1});
  RegisterRule(r, "TopK", 1, kLatestOpset, TopKGrad, {1});
  RegisterRule(r, "DepthToSpace", 1, kLatestOpset, DepthToSpaceGrad);
  RegisterRule(r, "SpaceToDepth", 1, kLatestOpset, SpaceToDepthGrad);
  RegisterRule(r, "ReverseSequence", 10, kLatestOpset, ReverseSequenceGrad, {1});
  RegisterRule(r, "Resize", 10, kLatestOpset, ResizeGrad, {1, 2, 3});
  RegisterRule(r, "Upsample", 7, kLatestOpset, ResizeGrad, {1});
  RegisterRule(r, "GridSample", 16, kLatestOpset, GridSampleGrad);
}

}  // namespace ot
