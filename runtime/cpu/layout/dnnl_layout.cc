// oneDNN descriptors as tensor layouts, and reorders between layouts.
#include "runtime/cpu/layout/dnnl_layout.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "graph/error.h"

namespace ot {
namespace cpu {

std::string DnnlLayout::name() const {
  const auto& blocking = md_.data.format_desc.blocking;
  std::string out = "oneDNN blocked";
  for (int i = 0; i < blocking.inner_nblks; ++i)
    out += " " + std::to_string(blocking.inner_blks[i]) + "x" + "abcdef"[blocking.inner_idxs[i]];
  return out;
}

bool DnnlLayout::Equals(const TensorLayout& other) const {
  const auto* o = dynamic_cast<const DnnlLayout*>(&other);
  return o && o->md_ == md_;
}

void DnnlLayout::ToPlain(const void* src, void* plain_dst) const {
  if (!to_plain_) to_plain_ = dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), md_, Engine(), plain_));
  dnnl::memory from(md_, Engine(), const_cast<void*>(src)), to(plain_, Engine(), plain_dst);
  to_plain_.execute(Stream(), from, to);
}

std::shared_ptr<const TensorLayout> LayoutFor(const dnnl::memory::desc& md, const Shape& shape, DType dtype) {
  const dnnl::memory::desc plain = PlainDesc(shape, dtype);
  if (md == plain) return nullptr;
  return std::make_shared<DnnlLayout>(md, plain);
}

int64_t ChannelBlock(const KernelSettings& settings) {
  if (settings.cpu_channel_block == 8 || settings.cpu_channel_block == 16) return settings.cpu_channel_block;
  if (settings.cpu_channel_block != 0)
    throw Error("a CPU channel block of " + std::to_string(settings.cpu_channel_block) +
                " channels is not one of oneDNN's layouts; use 8 or 16 (or 0 for the CPU's own)");
  static const int64_t native = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
    return (isa & avx512) == avx512 ? int64_t{16} : int64_t{8};
  }();
  return native;
}

int64_t ChannelBlockOf(const Tensor& t) {
  const size_t rank = t.shape().size();
  if (t.is_plain() || t.dtype() != DType::kFloat32 || rank < 3 || rank > 5) return 0;
  const dnnl::memory::desc md = DescOf(t);
  for (int64_t block : {8, 16})
    if (md == ChannelBlocked(t.shape(), block)) return block;
  return 0;
}

dnnl::memory::desc ChannelBlocked(const Shape& dims, int64_t block) {
  using tag = dnnl::memory::format_tag;
  const bool wide = block == 16;
  const tag t = dims.size() == 3   ? (wide ? tag::aBc16b : tag::aBc8b)
                : dims.size() == 4 ? (wide ? tag::aBcd16b : tag::aBcd8b)
                                   : (wide ? tag::aBcde16b : tag::aBcde8b);
  return dnnl::memory::desc(ToDims(dims), dnnl::memory::data_type::f32, t);
}

dnnl::memory::desc DescOf(const Tensor& t) {
  if (t.is_plain()) return PlainDesc(t.shape(), t.dtype());
  const auto* layout = dynamic_cast<const DnnlLayout*>(t.layout().get());
  OT_CHECK(layout, "tensor %s has a layout the CPU kernels do not know", t.Describe().c_str());
  return layout->desc();
}

Reorder::Reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to)
    : needed_(from != to), from_(from), to_(to) {
  if (needed_) prim_ = dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), from, Engine(), to));
}

dnnl::memory Reorder::Apply(void* src, int scratch) const {
  if (!needed_) return dnnl::memory(to_, Engine(), src);
  dnnl::memory dst(to_, Engine(), ScratchBuffer(scratch, to_.get_size()));
  dnnl::memory from(from_, Engine(), src);
  prim_.execute(Stream(), from, dst);
  return dst;
}

void Reorder::Run(void* src, void* dst) const {
  dnnl::memory out(to_, Engine(), dst);
  if (!needed_) {
    if (src != dst) std::memcpy(dst, src, to_.get_size());
    return;
  }
  dnnl::memory from(from_, Engine(), src);
  prim_.execute(Stream(), from, out);
}

namespace {
struct ScratchSlot {
  void* data = nullptr;
  size_t bytes = 0;
  ~ScratchSlot() { std::free(data); }
};
}  // namespace

void* ScratchBuffer(int slot, size_t bytes) {
  thread_local ScratchSlot slots[kScratchSlots];
  OT_CHECK(slot >= 0 && slot < kScratchSlots, "scratch slot %d out of range", slot);
  ScratchSlot& s = slots[slot];
  if (s.bytes < bytes) {
    std::free(s.data);
    const size_t rounded = (bytes + 63) / 64 * 64;
    s.data = std::aligned_alloc(64, rounded);
    if (!s.data) throw std::bad_alloc();
    s.bytes = rounded;
  }
  return s.data;
}

}  // namespace cpu
}  // namespace ot
