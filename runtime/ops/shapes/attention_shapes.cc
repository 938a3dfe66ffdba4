// Device-neutral geometry of Attention and AttentionGrad (see attention_shapes.h).
#include "runtime/ops/shapes/attention_shapes.h"

#include <cmath>
#include <string>

#include "graph/error.h"

namespace ot {

namespace {

[[noreturn]] void Bad(const Node& node, const std::string& what) { throw Error(node.Describe() + ": " + what); }

void RequireFloat(const Node& node, const Tensor& t, const char* name) {
  if (t.dtype() != DType::kFloat32)
    throw UnsupportedError("Attention: " + std::string(name) + " of type " + DTypeName(t.dtype()) +
                           " (float32 only)");
}

// Strides of a 4D [batch, heads, positions, features] tensor, or of a 3D [batch, positions,
// heads * features] one seen as [batch, heads, positions, features].
// sequence_first: 3D [positions, batch, heads * features].
HeadStrides StridesOf(const Shape& s, int64_t heads, bool three_d, bool sequence_first) {
  if (three_d) {
    const int64_t hidden = s[2];
    if (sequence_first) return {hidden, hidden / heads, s[1] * hidden};
    return {s[1] * hidden, hidden / heads, hidden};
  }
  return {s[1] * s[2] * s[3], s[2] * s[3], s[3]};
}

}  // namespace

AttentionGeometry PlanAttention(const Node& node, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor* mask, const Tensor* past_key, const Tensor* past_value,
                                const Tensor* nonpad_kv_seqlen) {
  RequireFloat(node, q, "Q");
  RequireFloat(node, k, "K");
  RequireFloat(node, v, "V");
  if (q.rank() != k.rank() || q.rank() != v.rank() || (q.rank() != 3 && q.rank() != 4))
    Bad(node, "Q, K and V must all be 4D [batch, heads, sequence, head_size] or all 3D [batch, sequence, hidden]; got " +
                  q.Describe() + ", " + k.Describe() + ", " + v.Describe());
  AttentionGeometry g;
  g.three_d = q.rank() == 3;
  const bool sequence_first = g.three_d && node.GetInt("sequence_first", 0) != 0;
  const int bi = sequence_first ? 1 : 0, si = sequence_first ? 0 : 1;  // 3D batch and position axes
  g.batch = q.dim(bi);
  if (k.dim(bi) != g.batch || v.dim(bi) != g.batch)
    Bad(node, "Q, K and V have different batch sizes: " + q.Describe() + ", " + k.Describe() + ", " + v.Describe());
  if (g.three_d) {
    g.q_heads = node.GetInt("q_num_heads", 0);
    g.kv_heads = node.GetInt("kv_num_heads", 0);
    if (g.q_heads <= 0 || g.kv_heads <= 0)
      Bad(node, "3D Q, K and V need the attributes q_num_heads and kv_num_heads (positive)");
    if (q.dim(2) % g.q_heads != 0 || k.dim(2) % g.kv_heads != 0 || v.dim(2) % g.kv_heads != 0)
      Bad(node, "the hidden sizes of Q (" + std::to_string(q.dim(2)) + "), K (" + std::to_string(k.dim(2)) + ") and V (" +
                    std::to_string(v.dim(2)) + ") must divide by q_num_heads " + std::to_string(g.q_heads) +
                    " and kv_num_heads " + std::to_string(g.kv_heads));
    g.q_len = q.dim(si);
    g.kv_len = k.dim(si);
    g.head_size = q.dim(2) / g.q_heads;
    if (k.dim(2) / g.kv_heads != g.head_size)
      Bad(node, "Q and K have different head sizes: " + q.Describe() + ", " + k.Describe());
    if (v.dim(si) != g.kv_len) Bad(node, "K and V have different sequence lengths: " + k.Describe() + ", " + v.Describe());
    g.v_head_size = v.dim(2) / g.kv_heads;
  } else {
    g.q_heads = q.dim(1);
    g.kv_heads = k.dim(1);
    g.q_len = q.dim(2);
    g.kv_len = k.dim(2);
    g.head_size = q.dim(3);
    if (k.dim(3) != g.head_size) Bad(node, "Q and K have different head sizes: " + q.Describe() + ", " + k.Describe());
    if (v.dim(1) != g.kv_heads || v.dim(2) != g.kv_len)
      Bad(node, "K and V have different heads or sequence lengths: " + k.Describe() + ", " + v.Describe());
    g.v_head_size = v.dim(3);
  }
  if (g.kv_heads <= 0 || g.q_heads % g.kv_heads != 0)
    Bad(node, "q_num_heads " + std::to_string(g.q_heads) + " must be a multiple of kv_num_heads " +
                  std::to_string(g.kv_heads) + " (grouped-query attention)");
  g.q = StridesOf(q.shape(), g.q_heads, g.three_d, sequence_first);
  g.k = StridesOf(k.shape(), g.kv_heads, g.three_d, sequence_first);
  g.v = StridesOf(v.shape(), g.kv_heads, g.three_d, sequence_first);

  if ((past_key != nullptr) != (past_value != nullptr))
    Bad(node, "past_key and past_value must be given together");
  if (past_key) {
    RequireFloat(node, *past_key, "past_key");
    RequireFloat(node, *past_value, "past_value");
    const Shape want_k = {g.batch, g.kv_heads, past_key->rank() == 4 ? past_key->dim(2) : -1, g.head_size};
    if (past_key->rank() != 4 || past_key->shape() != want_k)
      Bad(node, "past_key " + past_key->Describe() + " must be [batch, kv_num_heads, past_length, head_size]");
    g.past_len = past_key->dim(2);
    const Shape want_v = {g.batch, g.kv_heads, g.past_len, g.v_head_size};
    if (past_value->shape() != want_v)
      Bad(node, "past_value " + past_value->Describe() + " must be " + ShapeString(want_v));
  }
  g.total_len = g.past_len + g.kv_len;

  const float scale_attr = node.GetFloat("scale", NAN);
  g.scale = std::isnan(scale_attr) ? 1.f / std::sqrt(static_cast<float>(g.head_size)) : scale_attr;
  g.softcap = node.GetFloat("softcap", 0.f);
  if (g.softcap < 0) Bad(node, "softcap " + std::to_string(g.softcap) + " must be >= 0");
  g.causal = node.GetInt("is_causal", 0) != 0;
  g.qk_output_mode = node.GetInt("qk_matmul_output_mode", 0);
  if (g.qk_output_mode < 0 || g.qk_output_mode > 3)
    Bad(node, "qk_matmul_output_mode " + std::to_string(g.qk_output_mode) + " must be 0, 1, 2 or 3");

  if (mask) {
    g.has_mask = true;
    if (mask->dtype() == DType::kBool) g.mask_bool = true;
    else if (mask->dtype() != DType::kFloat32)
      throw UnsupportedError("Attention: attn_mask of type " + DTypeName(mask->dtype()) + " (bool or float32 only)");
    if (mask->rank() < 1 || mask->rank() > 4) Bad(node, "attn_mask " + mask->Describe() + " must have rank 1 to 4");
    g.mask_len = mask->dim(-1);
    // broadcast_mask=1 (org.onnxtrain's fused Attention, graph/passes/fusion.h): the mask is the
    // addend of the scores it replaces and broadcasts as numpy does, a last axis of 1 too.
    const bool numpy_mask = node.GetInt("broadcast_mask", 0) != 0;
    if (numpy_mask && g.mask_len == 1) g.mask_len = g.total_len;
    if (numpy_mask && g.mask_len != g.total_len)
      Bad(node, "attn_mask " + mask->Describe() + " does not broadcast to the " + std::to_string(g.total_len) +
                    " key positions");
    if (g.mask_len > g.total_len)
      Bad(node, "attn_mask " + mask->Describe() + " is longer than the " + std::to_string(g.total_len) +
                    " key positions");
    const Shape full = {g.batch, g.q_heads, g.q_len, g.mask_len};
    const int offset = 4 - mask->rank();
    int64_t stride = 1;
    for (int d = 3; d >= 0; --d) {
      const int64_t size = d >= offset ? mask->dim(d - offset) : 1;
      if (d == 3 && size == 1) {  // broadcast over the keys (broadcast_mask)
        g.mask_strides[3] = 0;
        continue;
      }
      if (size != 1 && size != full[static_cast<size_t>(d)])
        Bad(node, "attn_mask " + mask->Describe() + " does not broadcast to [batch, q_heads, q_length, total_length] " +
                      ShapeString(full));
      g.mask_strides[static_cast<size_t>(d)] = size == 1 ? 0 : stride;
      stride *= size;
    }
  }
  if (nonpad_kv_seqlen) {
    if (nonpad_kv_seqlen->dtype() != DType::kInt64 || nonpad_kv_seqlen->shape() != Shape{g.batch})
      Bad(node, "nonpad_kv_seqlen " + nonpad_kv_seqlen->Describe() + " must be int64 [batch]");
    if (past_key) Bad(node, "nonpad_kv_seqlen cannot be used together with past_key and past_value");
    g.has_nonpad = true;
  }

  if (sequence_first) {
    g.y_shape = {g.q_len, g.batch, g.q_heads * g.v_head_size};
    g.y = {g.q_heads * g.v_head_size, g.v_head_size, g.batch * g.q_heads * g.v_head_size};
  } else if (g.three_d) {
    g.y_shape = {g.batch, g.q_len, g.q_heads * g.v_head_size};
    g.y = {g.q_len * g.q_heads * g.v_head_size, g.v_head_size, g.q_heads * g.v_head_size};
  } else {
    g.y_shape = {g.batch, g.q_heads, g.q_len, g.v_head_size};
    g.y = {g.q_heads * g.q_len * g.v_head_size, g.q_len * g.v_head_size, g.v_head_size};
  }
  g.present_k_shape = {g.batch, g.kv_heads, g.total_len, g.head_size};
  g.present_v_shape = {g.batch, g.kv_heads, g.total_len, g.v_head_size};
  g.scores_shape = {g.batch, g.q_heads, g.q_len, g.total_len};
  return g;
}

}  // namespace ot
