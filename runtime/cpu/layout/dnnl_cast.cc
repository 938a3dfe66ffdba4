// float32 <-> bfloat16 casts on oneDNN's reorder, layout kept.
#include "runtime/cpu/layout/dnnl_cast.h"

namespace ot {
namespace cpu {

bool IsDnnlCast(DType from, DType to) {
  return (from == DType::kFloat32 && to == DType::kBFloat16) || (from == DType::kBFloat16 && to == DType::kFloat32);
}

dnnl::memory::desc WithDataType(const dnnl::memory::desc& md, DType dtype) {
  dnnl::memory::desc out = md;
  out.data.data_type = static_cast<dnnl_data_type_t>(ToDnnl(dtype));
  return out;
}

DnnlCast::DnnlCast(const Tensor& src, DType to) {
  const dnnl::memory::desc from = DescOf(src);
  const dnnl::memory::desc out = WithDataType(from, to);
  reorder_ = Reorder(from, out);
  layout_ = LayoutFor(out, src.shape(), to);
}

}  // namespace cpu
}  // namespace ot
