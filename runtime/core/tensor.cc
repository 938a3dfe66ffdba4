// Tensor storage, host transfer and copies.
#include "runtime/core/tensor.h"

#include "runtime/core/plugin.h"

#include <cstring>

#include "graph/error.h"

namespace ot {

std::string Device::ToString() const {
  if (type == DeviceType::kCPU) return "cpu";
  return "cuda:" + std::to_string(index);
}

Device Device::Parse(const std::string& text) {
  if (text == "cpu") return Device::CPU();
  if (text == "cuda") return Device{DeviceType::kCUDA, 0};
  if (text.rfind("cuda:", 0) == 0) {
    std::string idx = text.substr(5);
    OT_CHECK(!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos && idx.size() < 4,
             "invalid device '%s': expected cpu, cuda or cuda:K", text.c_str());
    return Device{DeviceType::kCUDA, std::stoi(idx)};
  }
  throw Error("invalid device '" + text + "': expected cpu, cuda or cuda:K");
}

namespace {
DeviceBackend* g_backends[2] = {nullptr, nullptr};
}

void RegisterBackend(DeviceType type, DeviceBackend* backend) { g_backends[static_cast<int>(type)] = backend; }

DeviceBackend& BackendFor(DeviceType type) {
  DeviceBackend* b = g_backends[static_cast<int>(type)];
  if (!b && type == DeviceType::kCUDA) {
    OT_CHECK(PluginBuilt("cuda"), "this build of onnx-train has no CUDA runtime; use --device cpu");
    LoadPlugin("cuda");  // registers the CUDA backend and kernels, or throws why it cannot
    b = g_backends[static_cast<int>(type)];
  }
  if (!b) {
    throw Error(type == DeviceType::kCUDA ? "the CUDA plugin did not register a device backend"
                                          : "no CPU backend registered (link error in this build)");
  }
  return *b;
}

Tensor Tensor::Empty(DType dtype, Shape shape, Device device, std::shared_ptr<const TensorLayout> layout) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.device_ = device;
  t.layout_ = std::move(layout);
  size_t bytes = t.nbytes();
  DeviceBackend& backend = BackendFor(device.type);
  void* p = backend.Allocate(bytes == 0 ? kBufferAlignment : bytes, device.index);
  int index = device.index;
  t.storage_ = std::shared_ptr<void>(p, [&backend, index](void* q) { backend.Free(q, index); });
  t.data_ = p;
  return t;
}

Tensor Tensor::View(DType dtype, Shape shape, void* data, Device device,
                    std::shared_ptr<const TensorLayout> layout) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.device_ = device;
  t.layout_ = std::move(layout);
  t.data_ = data;
  return t;
}

Tensor Tensor::FromHost(const HostTensor& host, Device device) {
  Tensor t = Empty(host.dtype, host.dims, device);
  if (host.NumBytes()) BackendFor(device.type).CopyFromHost(t.data_, host.bytes.data(), host.NumBytes(), device.index);
  return t;
}

Tensor Tensor::Reshaped(Shape shape) const {
  OT_CHECK(is_plain(), "cannot reshape %s (not plain)", Describe().c_str());
  OT_CHECK(NumElements(shape) == numel(), "cannot view %s as shape %s", Describe().c_str(),
           ShapeString(shape).c_str());
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

HostTensor Tensor::ToHost(const std::string& name) const {
  if (!is_plain()) {
    Tensor plain = Empty(dtype_, shape_, device_);
    plain.CopyFrom(*this);
    return plain.ToHost(name);
  }
  HostTensor h(dtype_, shape_, name);
  if (nbytes()) BackendFor(device_.type).CopyToHost(h.bytes.data(), data_, nbytes(), device_.index);
  return h;
}

Tensor Tensor::Clone() const {
  Tensor t = Empty(dtype_, shape_, device_, layout_);
  t.CopyFrom(*this);
  return t;
}

void Tensor::CopyFrom(const Tensor& src) {
  OT_CHECK(src.dtype_ == dtype_ && src.numel() == numel(), "cannot copy %s into %s", src.Describe().c_str(),
           Describe().c_str());
  if (numel() == 0 || src.data_ == data_) return;
  if (!SameLayout(src, *this)) {
    OT_CHECK(is_plain() && src.device_ == device_ && device_.type == DeviceType::kCPU,
             "cannot copy %s into %s (layouts differ)", src.Describe().c_str(), Describe().c_str());
    src.layout_->ToPlain(src.data_, data_);
    return;
  }
  if (device_ == src.device_) {
    BackendFor(device_.type).CopyOnDevice(data_, src.data_, nbytes(), device_.index);
  } else if (src.device_.type == DeviceType::kCPU) {
    BackendFor(device_.type).CopyFromHost(data_, src.data_, nbytes(), device_.index);
  } else if (device_.type == DeviceType::kCPU) {
    BackendFor(src.device_.type).CopyToHost(data_, src.data_, nbytes(), src.device_.index);
  } else {
    HostTensor h = src.ToHost();
    BackendFor(device_.type).CopyFromHost(data_, h.bytes.data(), h.NumBytes(), device_.index);
  }
}

std::string Tensor::Describe() const {
  return DTypeName(dtype_) + ShapeString(shape_) + (layout_ ? " (" + layout_->name() + ")" : "") + " on " +
         device_.ToString();
}

bool SameLayout(const Tensor& a, const Tensor& b) {
  if (!a.layout() || !b.layout()) return a.layout() == b.layout();
  return a.layout() == b.layout() || a.layout()->Equals(*b.layout());
}

}  // namespace ot
