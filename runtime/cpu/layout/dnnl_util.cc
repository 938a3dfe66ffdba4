// oneDNN glue for CPU kernels.
#include "runtime/cpu/layout/dnnl_util.h"

#include "graph/error.h"

namespace ot {
namespace cpu {

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& Stream() {
  thread_local dnnl::stream stream(Engine());
  return stream;
}

bool DnnlSupports(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kFloat16: case DType::kBFloat16:
    case DType::kInt32: case DType::kInt8: case DType::kUInt8:
      return true;
    default:
      return false;
  }
}

bool CpuHasBFloat16Products() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

dnnl::memory::data_type ToDnnl(DType t) {
  using dt = dnnl::memory::data_type;
  switch (t) {
    case DType::kFloat32: return dt::f32;
    case DType::kFloat16: return dt::f16;
    case DType::kBFloat16: return dt::bf16;
    case DType::kInt32: return dt::s32;
    case DType::kInt8: return dt::s8;
    case DType::kUInt8: return dt::u8;
    default: throw UnsupportedError("data type " + DTypeName(t) + " is not supported by the oneDNN kernels");
  }
}

dnnl::memory::dims ToDims(const Shape& s) {
  if (s.empty()) return {1};
  return dnnl::memory::dims(s.begin(), s.end());
}

dnnl::memory::desc PlainDesc(const Shape& shape, dnnl::memory::data_type t) {
  dnnl::memory::dims dims = ToDims(shape);
  dnnl::memory::dims strides(dims.size());
  int64_t stride = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(dims[i], 1);
  }
  return dnnl::memory::desc(dims, t, strides);
}

dnnl::memory::desc PlainDesc(const Shape& shape, DType t) { return PlainDesc(shape, ToDnnl(t)); }

dnnl::memory Wrap(const dnnl::memory::desc& md, const Tensor& t) { return dnnl::memory(md, Engine(), t.raw()); }

dnnl::memory Wrap(const Tensor& t) { return Wrap(PlainDesc(t.shape(), t.dtype()), t); }

void PrimitiveArgs::Set(int arg, const dnnl::memory::desc& md, const void* data) {
  void* handle = const_cast<void*>(data);
  auto it = args_.find(arg);
  if (it == args_.end()) args_.emplace(arg, dnnl::memory(md, Engine(), handle));
  else if (it->second.get_data_handle() != handle) it->second.set_data_handle(handle);
}

}  // namespace cpu
}  // namespace ot
