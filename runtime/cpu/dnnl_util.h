// oneDNN glue for CPU kernels: the engine and stream, memory descriptors for plain
// (row-major) tensors, and wrapping runtime Tensors as dnnl::memory without copies.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "runtime/tensor.h"

namespace ot {
namespace cpu {

dnnl::engine& Engine();
// One stream per thread.
dnnl::stream& Stream();

dnnl::memory::data_type ToDnnl(DType t);  // throws UnsupportedError for types oneDNN lacks
bool DnnlSupports(DType t);
dnnl::memory::dims ToDims(const Shape& s);
// Dense row-major descriptor (strides from the shape); a rank-0 tensor becomes [1].
dnnl::memory::desc PlainDesc(const Shape& shape, DType t);
dnnl::memory::desc PlainDesc(const Shape& shape, dnnl::memory::data_type t);
// A memory object over the tensor's buffer.
dnnl::memory Wrap(const dnnl::memory::desc& md, const Tensor& t);
dnnl::memory Wrap(const Tensor& t);

}  // namespace cpu
}  // namespace ot
