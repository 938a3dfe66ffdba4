// Tensor layouts on the CPU: a oneDNN memory descriptor (e.g. the channel-blocked
// nChw16c a convolution chooses) as a TensorLayout, and the reorders kernels use to
// bring an input into the layout their primitive wants.
#pragma once

#include <memory>

#include "runtime/cpu/layout/dnnl_util.h"
#include "runtime/core/kernel.h"
#include "runtime/core/tensor_layout.h"

namespace ot {
namespace cpu {

class DnnlLayout final : public TensorLayout {
 public:
  DnnlLayout(const dnnl::memory::desc& md, const dnnl::memory::desc& plain) : md_(md), plain_(plain) {}
  size_t bytes() const override { return md_.get_size(); }
  std::string name() const override;
  bool Equals(const TensorLayout& other) const override;
  void ToPlain(const void* src, void* plain_dst) const override;
  const dnnl::memory::desc& desc() const { return md_; }

 private:
  dnnl::memory::desc md_, plain_;
  mutable dnnl::reorder to_plain_;  // made on first use
};

// The layout for data of `shape` and `dtype` a primitive described as `md`: null when
// that is plain row-major.
std::shared_ptr<const TensorLayout> LayoutFor(const dnnl::memory::desc& md, const Shape& shape, DType dtype);
// The descriptor of a tensor's data: its layout's, or plain row-major.
dnnl::memory::desc DescOf(const Tensor& t);
// Channels per block of the blocked activation layout: the executor's setting
// (KernelSettings::cpu_channel_block, 8 or 16; tests of the other ISA's layout,
// benchmarks) or else the CPU's own: 16 where oneDNN runs AVX-512 kernels (nChw16c), 8 on
// AVX2 and below (nChw8c). oneDNN's AVX2 convolutions have no kernel for 16-blocks (they
// fell back to channels-last, whose weight gradient on small maps runs as a gemm 4-10x
// slower); its AVX-512 ones want 16. Throws ot::Error for a setting other than 0, 8, 16.
int64_t ChannelBlock(const KernelSettings& settings);
// float32 data of `dims` (rank 3 to 5) blocked by `block` (8 or 16) channels along axis 1
// (nCw16c, nChw16c, nCdhw16c or their 8-channel forms): the layout the convolutions give
// their activations.
dnnl::memory::desc ChannelBlocked(const Shape& dims, int64_t block);
// The block of `t` when it is float32 in a ChannelBlocked layout (8 or 16), else 0.
int64_t ChannelBlockOf(const Tensor& t);

// A reorder from one descriptor to another, made in Prepare and run in Compute; a no-op
// when the two are the same.
class Reorder {
 public:
  Reorder() = default;
  Reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to);
  bool needed() const { return needed_; }
  const dnnl::memory::desc& to() const { return to_; }
  // `src` in the target layout: src itself, or its copy in per-thread scratch buffer
  // `scratch` (valid until that buffer is used again).
  dnnl::memory Apply(void* src, int scratch) const;
  // Writes src (in `from`) to dst (in `to`).
  void Run(void* src, void* dst) const;

 private:
  bool needed_ = false;
  dnnl::memory::desc from_, to_;
  dnnl::reorder prim_;
};

// Per-thread scratch memory for reorders inside one Compute: buffer `slot` (0..15) of at
// least `bytes`, 64-byte aligned; grown on demand, never shrunk. Slots 0-7 are the
// convolutions' (conv.cc's reorders, conv_taps, conv_winograd, conv_dense); 8-10 hold the
// float32 copies of bfloat16 inputs that our float32 convolutions read under --amp bf16;
// 12-14 the bfloat16 operands of conv_winograd's products under --amp bf16.
constexpr int kScratchSlots = 16;
void* ScratchBuffer(int slot, size_t bytes);

}  // namespace cpu
}  // namespace ot
