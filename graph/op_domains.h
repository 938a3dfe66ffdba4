// The operator domains onnx-train reads and writes, and the opset bound that gradient rules
// and kernels register with: one definition for graph/ and runtime/ (CPU and CUDA).
#pragma once

#include <cstdint>
#include <string>

namespace ot {

// ONNX's default domain. Models may write it as "" or "ai.onnx"; graph/ stores "".
constexpr const char* kOnnxDomain = "ai.onnx";
// ONNX's training ops (Momentum, Adam, Adagrad).
constexpr const char* kTrainingOpsDomain = "ai.onnx.preview.training";
// Domain of the ops ONNX lacks (gradients such as ConvGrad and ReluGrad, fused and
// optimizer ops), declared in the training model's opset_import.
constexpr const char* kGradDomain = "org.onnxtrain";

// Upper bound of an opset range that holds from its first version on, with no newer
// version known to change the op: "every opset from since_version".
constexpr int64_t kLatestOpset = 1 << 30;

// True for ONNX's default domain, whichever way it is written.
inline bool IsOnnxDomain(const std::string& domain) { return domain.empty() || domain == kOnnxDomain; }
// The form graph/ stores: "" for ONNX's default domain, any other unchanged.
inline std::string CanonicalDomain(const std::string& domain) { return domain == kOnnxDomain ? "" : domain; }

}  // namespace ot
