// oneDNN glue for CPU kernels: the engine and stream, memory descriptors for plain
// (row-major) tensors, and wrapping runtime Tensors as dnnl::memory without copies.
#pragma once

#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "runtime/core/tensor.h"

namespace ot {
namespace cpu {

dnnl::engine& Engine();
// One stream per thread.
dnnl::stream& Stream();

dnnl::memory::data_type ToDnnl(DType t);  // throws UnsupportedError for types oneDNN lacks
bool DnnlSupports(DType t);
// True where oneDNN runs bfloat16 products in hardware (avx512_bf16 or AMX; its
// ONEDNN_MAX_CPU_ISA limit applies): what --amp bf16 needs to be faster than float32.
bool CpuHasBFloat16Products();
dnnl::memory::dims ToDims(const Shape& s);
// Dense row-major descriptor (strides from the shape); a rank-0 tensor becomes [1].
dnnl::memory::desc PlainDesc(const Shape& shape, DType t);
dnnl::memory::desc PlainDesc(const Shape& shape, dnnl::memory::data_type t);
// A memory object over the tensor's buffer.
dnnl::memory Wrap(const dnnl::memory::desc& md, const Tensor& t);
dnnl::memory Wrap(const Tensor& t);

// A primitive's arguments kept from one Compute to the next: each memory object is made
// on first use and afterwards only pointed at the new buffer (no allocation per step).
// Descriptors must stay the same (they do within a plan); plain ones only (re-pointing a
// padded blocked memory zero-fills its padding).
class PrimitiveArgs {
 public:
  void Set(int arg, const dnnl::memory::desc& md, const void* data);
  const std::unordered_map<int, dnnl::memory>& map() const { return args_; }

 private:
  std::unordered_map<int, dnnl::memory> args_;
};

}  // namespace cpu
}  // namespace ot
