// Attributes and shapes of the unary activations and PRelu (see activation_attrs.h).
#include "runtime/ops/checks/activation_attrs.h"

#include <limits>


namespace ot {

bool ParseUnaryFn(const std::string& op_type, UnaryFn* fn) {
#define OT_UNARY_PARSE(name)   \
  if (op_type == #name) {      \
    *fn = UnaryFn::k##name;    \
    return true;               \
  }
  OT_UNARY_FNS(OT_UNARY_PARSE)
#undef OT_UNARY_PARSE
  return false;
}

bool ParseNodeUnaryFn(const Node& node, const std::string& op_type, UnaryFn* fn) {
  if (!ParseUnaryFn(op_type, fn)) return false;
  if (*fn == UnaryFn::kGelu) {
    // ai.onnx Gelu (opset 20) names its form; the fused org.onnxtrain Gelu has none (erf).
    const std::string form = node.GetString("approximate", "none");
    if (form != "none" && form != "tanh")
      throw Error(node.Describe() + ": Gelu's approximate must be \"none\" or \"tanh\", not \"" + form + "\"");
    if (form == "tanh") *fn = UnaryFn::kGeluTanh;
  }
  return true;
}

UnaryParams ReadUnaryParams(const Node& node, UnaryFn fn) {
  UnaryParams p;
  switch (fn) {
    case UnaryFn::kHardSigmoid:
      p.alpha = node.GetFloat("alpha", 0.2f);
      p.beta = node.GetFloat("beta", 0.5f);
      break;
    case UnaryFn::kElu:
    case UnaryFn::kCelu:
    case UnaryFn::kThresholdedRelu:
      p.alpha = node.GetFloat("alpha", 1.f);
      break;
    case UnaryFn::kSelu:
      p.alpha = node.GetFloat("alpha", 1.67326319217681884765625f);
      p.gamma = node.GetFloat("gamma", 1.05070102214813232421875f);
      break;
    case UnaryFn::kShrink:
      p.alpha = node.GetFloat("lambd", 0.5f);
      p.beta = node.GetFloat("bias", 0.f);
      break;
    case UnaryFn::kClip:
      p.alpha = node.GetFloat("min", -std::numeric_limits<float>::infinity());
      p.beta = node.GetFloat("max", std::numeric_limits<float>::infinity());
      break;
    default:
      break;
  }
  if (fn == UnaryFn::kCelu && p.alpha == 0.f) throw Error(node.Describe() + ": Celu's alpha must not be 0");
  return p;
}

std::pair<float, float> ReadClipBounds(const Node& node, const KernelContext& ctx, int first_input) {
  float bound[2] = {-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()};
  const char* attr[2] = {"min", "max"};
  for (int k = 0; k < 2; ++k) {
    if (node.HasAttr(attr[k])) {
      bound[k] = node.GetFloat(attr[k], bound[k]);
    } else if (const Tensor* t = ctx.OptionalInput(first_input + k)) {
      if ((t->dtype() != DType::kFloat32 && t->dtype() != DType::kFloat64) || t->numel() != 1)
        throw Error(node.Describe() + ": Clip's " + attr[k] + " must be a float scalar, got " + DTypeName(t->dtype()) +
                    " " + ShapeString(t->shape()));
      bound[k] = t->dtype() == DType::kFloat32 ? *t->data<float>() : static_cast<float>(*t->data<double>());
    }
  }
  return {bound[0], bound[1]};
}

Shape PReluSlopeShape(const Node& node, int64_t opset, const Shape& x, const Shape& slope) {
  Shape aligned = slope;
  if (opset < 7 && slope.size() == 1 && x.size() >= 2 && slope[0] == x[1] && slope[0] != 1) {
    aligned.assign(x.size() - 1, 1);
    aligned[0] = slope[0];
  }
  bool ok = aligned.size() <= x.size();
  for (size_t i = 0; ok && i < aligned.size(); ++i) {
    const int64_t s = aligned[aligned.size() - 1 - i], d = x[x.size() - 1 - i];
    ok = s == d || s == 1;
  }
  if (!ok)
    throw Error(node.Describe() + ": the slope " + ShapeString(slope) + " does not broadcast to X " + ShapeString(x));
  return aligned;
}

}  // namespace ot
