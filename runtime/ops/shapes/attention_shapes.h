// Device-neutral geometry of ONNX Attention (opset 23, 24) and of its gradient
// AttentionGrad (org.onnxtrain): head counts, sequence lengths, the element strides that
// read Q, K, V and Y as [batch, head, position, feature] whether they come as 4D tensors or
// as 3D [batch, position, heads * feature] ones, the scale, softcap and causal flag, and how
// the optional mask broadcasts over [batch, q_heads, q_len, total_len]. The CPU kernels use
// it, and a CUDA kernel would use the same, so both accept the same models with the same
// messages.
#pragma once

#include <array>
#include <cstdint>

#include "graph/ir.h"
#include "runtime/core/tensor.h"

namespace ot {

// Element strides of a [batch, head, position, feature] view.
struct HeadStrides {
  int64_t batch = 0, head = 0, pos = 0;
};

struct AttentionGeometry {
  int64_t batch = 0, q_heads = 0, kv_heads = 0;
  int64_t q_len = 0, kv_len = 0, past_len = 0, total_len = 0;
  int64_t head_size = 0, v_head_size = 0;
  bool three_d = false;
  float scale = 1.f;    // applied to Q.K^T
  float softcap = 0.f;  // 0: none; else scores = softcap * tanh(scores / softcap)
  bool causal = false;  // position j > i + past_len is masked out
  int64_t qk_output_mode = 0;
  HeadStrides q, k, v, y;  // k, v: of the K and V inputs (not the present caches)

  bool has_mask = false, mask_bool = false;
  int64_t mask_len = 0;  // the mask's last dimension (<= total_len; beyond it: masked out)
  std::array<int64_t, 4> mask_strides{};  // over [batch, q_heads, q_len, mask_len]
  bool has_nonpad = false;                // nonpad_kv_seqlen (opset 24)

  Shape y_shape, present_k_shape, present_v_shape, scores_shape;

  int64_t GroupSize() const { return q_heads / kv_heads; }
};

// sequence_first=1 (org.onnxtrain's fused Attention, graph/passes/fusion.h): 3D Q, K, V and Y are
// [sequence, batch, hidden], as torch 1.13's nn.MultiheadAttention holds them.
//
// Q, K, V shapes and the optional inputs of an Attention node (mask: input 3,
// past_key/past_value: 4 and 5, nonpad_kv_seqlen: 6) as its inputs hold them. Throws
// ot::Error naming the node for shapes that do not fit together, ot::UnsupportedError for
// data types other than float32 (a bool or float mask, int64 lengths).
AttentionGeometry PlanAttention(const Node& node, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor* mask, const Tensor* past_key, const Tensor* past_value,
                                const Tensor* nonpad_kv_seqlen);

}  // namespace ot
