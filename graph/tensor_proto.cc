// TensorProto <-> HostTensor, with size checks so that a corrupt file is an error, not a crash.
#include "graph/tensor_proto.h"

#include <sys/stat.h>

#include <fstream>

#include <onnx/onnx_pb.h>

#include "graph/error.h"
#include "graph/file_util.h"

namespace ot {

namespace {

template <typename Dst, typename Field>
void CopyField(const Field& field, HostTensor* t) {
  Dst* out = t->Data<Dst>();
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<Dst>(field.Get(i));
}

void LoadExternal(const onnx::TensorProto& p, const std::string& base_dir, const std::string& where,
                  HostTensor* t) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = std::stoll(kv.value());
    else if (kv.key() == "length") length = std::stoll(kv.value());
  }
  OT_CHECK(!location.empty(), "%s: external data without a 'location'", where.c_str());
  OT_CHECK(location.find("..") == std::string::npos && location[0] != '/',
           "%s: external data location '%s' must be a relative path inside the model's folder",
           where.c_str(), location.c_str());
  std::string path = base_dir + "/" + location;
  struct stat st {};
  OT_CHECK(::stat(path.c_str(), &st) == 0, "%s: external data file '%s' is missing", where.c_str(), path.c_str());
  int64_t want = static_cast<int64_t>(t->NumBytes());
  if (length < 0) length = want;
  OT_CHECK(length == want, "%s: external data length %lld does not match shape %s of type %s (%lld bytes)",
           where.c_str(), (long long)length, ShapeString(t->dims).c_str(), DTypeName(t->dtype).c_str(),
           (long long)want);
  OT_CHECK(offset >= 0 && offset + length <= st.st_size,
           "%s: external data [%lld, %lld) lies outside '%s' (%lld bytes); the file is truncated",
           where.c_str(), (long long)offset, (long long)(offset + length), path.c_str(), (long long)st.st_size);
  std::ifstream in(path, std::ios::binary);
  in.seekg(offset);
  in.read(reinterpret_cast<char*>(t->bytes.data()), length);
  OT_CHECK(in.good() || length == 0, "%s: cannot read external data from '%s'", where.c_str(), path.c_str());
}

}  // namespace

HostTensor TensorFromProto(const onnx::TensorProto& p, const std::string& base_dir, const std::string& where) {
  OT_CHECK(DTypeIsKnown(p.data_type()) && p.data_type() != onnx::TensorProto::STRING,
           "%s: tensor '%s' has unsupported data type %d", where.c_str(), p.name().c_str(), p.data_type());
  HostTensor t;
  t.name = p.name();
  t.dtype = static_cast<DType>(p.data_type());
  int64_t n = 1;
  for (int64_t d : p.dims()) {
    OT_CHECK(d >= 0 && d < (int64_t(1) << 40), "%s: tensor '%s' has invalid dimension %lld", where.c_str(),
             p.name().c_str(), (long long)d);
    t.dims.push_back(d);
    n *= d;
    OT_CHECK(n < (int64_t(1) << 40), "%s: tensor '%s' is implausibly large", where.c_str(), p.name().c_str());
  }
  const size_t esize = DTypeSize(t.dtype);
  const size_t nbytes = static_cast<size_t>(n) * esize;

  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    t.bytes.resize(nbytes);
    LoadExternal(p, base_dir, where, &t);
    return t;
  }
  if (p.has_raw_data()) {
    OT_CHECK(p.raw_data().size() == nbytes,
             "%s: tensor '%s' holds %zu bytes but shape %s of type %s needs %zu", where.c_str(),
             p.name().c_str(), p.raw_data().size(), ShapeString(t.dims).c_str(), DTypeName(t.dtype).c_str(), nbytes);
    t.bytes.assign(p.raw_data().begin(), p.raw_data().end());
    return t;
  }
  auto check_count = [&](int count) {
    OT_CHECK(count == n, "%s: tensor '%s' holds %d values but shape %s needs %lld", where.c_str(),
             p.name().c_str(), count, ShapeString(t.dims).c_str(), (long long)n);
  };
  t.bytes.resize(nbytes);
  switch (t.dtype) {
    case DType::kFloat32: check_count(p.float_data_size()); CopyField<float>(p.float_data(), &t); break;
    case DType::kFloat64: check_count(p.double_data_size()); CopyField<double>(p.double_data(), &t); break;
    case DType::kInt64: check_count(p.int64_data_size()); CopyField<int64_t>(p.int64_data(), &t); break;
    case DType::kInt32: check_count(p.int32_data_size()); CopyField<int32_t>(p.int32_data(), &t); break;
    case DType::kInt16: check_count(p.int32_data_size()); CopyField<int16_t>(p.int32_data(), &t); break;
    case DType::kUInt16: case DType::kFloat16: case DType::kBFloat16:
      check_count(p.int32_data_size()); CopyField<uint16_t>(p.int32_data(), &t); break;
    case DType::kInt8: check_count(p.int32_data_size()); CopyField<int8_t>(p.int32_data(), &t); break;
    case DType::kUInt8: case DType::kBool:
      check_count(p.int32_data_size()); CopyField<uint8_t>(p.int32_data(), &t); break;
    case DType::kUInt32: check_count(p.uint64_data_size()); CopyField<uint32_t>(p.uint64_data(), &t); break;
    case DType::kUInt64: check_count(p.uint64_data_size()); CopyField<uint64_t>(p.uint64_data(), &t); break;
    default: throw Error(where + ": tensor '" + p.name() + "' has unsupported type " + DTypeName(t.dtype));
  }
  return t;
}

void TensorToProto(const HostTensor& t, onnx::TensorProto* p) {
  p->Clear();
  p->set_name(t.name);
  p->set_data_type(static_cast<int32_t>(t.dtype));
  for (int64_t d : t.dims) p->add_dims(d);
  p->set_raw_data(t.bytes.data(), t.bytes.size());
}

HostTensor ReadTensorFile(const std::string& path) {
  std::string bytes = ReadFileBytes(path);
  onnx::TensorProto p;
  OT_CHECK(p.ParseFromString(bytes), "'%s' is not a binary TensorProto file (corrupt or truncated)", path.c_str());
  return TensorFromProto(p, DirName(path), "'" + path + "'");
}

void WriteTensorFile(const HostTensor& t, const std::string& path) {
  onnx::TensorProto p;
  TensorToProto(t, &p);
  WriteFileAtomic(path, p.SerializeAsString());
}

}  // namespace ot
