// Element-type conversion between float32 and bfloat16 on oneDNN's reorder, in whatever
// layout the tensor has (a channel-blocked activation stays blocked): the Cast nodes that
// --amp bf16 puts before convolutions and matrix products (graph/passes/amp_pass.h) run on it, so
// a cast is one multithreaded pass and never a reorder to plain and back.
#pragma once

#include <memory>

#include "runtime/cpu/layout/dnnl_layout.h"

namespace ot {
namespace cpu {

// True for float32 -> bfloat16 and bfloat16 -> float32.
bool IsDnnlCast(DType from, DType to);
// `md` with another element type (same dimensions, same blocking).
dnnl::memory::desc WithDataType(const dnnl::memory::desc& md, DType dtype);

// One cast of a tensor of fixed descriptor, made in Prepare and run in Compute.
class DnnlCast {
 public:
  DnnlCast() = default;
  DnnlCast(const Tensor& src, DType to);
  // The layout of the output (null: plain), for KernelContext::SetOutput.
  std::shared_ptr<const TensorLayout> output_layout() const { return layout_; }
  void Run(const Tensor& src, Tensor& dst) const { reorder_.Run(src.raw(), dst.raw()); }

 private:
  Reorder reorder_;
  std::shared_ptr<const TensorLayout> layout_;
};

}  // namespace cpu
}  // namespace ot
