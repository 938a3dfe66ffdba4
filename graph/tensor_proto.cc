// TensorProto <-> HostTensor, with size checks so that a corrupt file is an error, not a crash.
#include "graph/tensor_proto.h"

#include <sys/stat.h>

#include <fstream>

#include <onnx/onnx_pb.h>

#include "graph/error.h"
#include "graph/file_util.h"

namespace ot {

namespace {

// Allocates the tensor's bytes for the values the field holds, and converts them.
template <typename Dst, typename Field>
void CopyField(const Field& field, HostTensor* t) {
  t->bytes.resize(static_cast<size_t>(field.size()) * sizeof(Dst));
  Dst* out = t->Data<Dst>();
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<Dst>(field.Get(i));
}

// Parses a decimal external-data field ("offset", "length") without throwing std:: errors.
int64_t ParseExternalNumber(const std::string& text, const std::string& key, const std::string& where) {
  OT_CHECK(!text.empty() && text.size() <= 18 && text.find_first_not_of("0123456789") == std::string::npos,
           "%s: external data '%s' is '%s'; expected a non-negative integer", where.c_str(), key.c_str(),
           text.c_str());
  return std::stoll(text);
}

// Reads the tensor's bytes from its external file after checking that the file holds them,
// so that a size field alone never makes us allocate.
void LoadExternal(const onnx::TensorProto& p, const std::string& base_dir, const std::string& where,
                  size_t nbytes, HostTensor* t) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = ParseExternalNumber(kv.value(), kv.key(), where);
    else if (kv.key() == "length") length = ParseExternalNumber(kv.value(), kv.key(), where);
  }
  OT_CHECK(!location.empty(), "%s: external data without a 'location'", where.c_str());
  OT_CHECK(location.find("..") == std::string::npos && location[0] != '/',
           "%s: external data location '%s' must be a relative path inside the model's folder",
           where.c_str(), location.c_str());
  std::string path = base_dir + "/" + location;
  struct stat st {};
  OT_CHECK(::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode), "%s: external data file '%s' is missing",
           where.c_str(), path.c_str());
  int64_t want = static_cast<int64_t>(nbytes);
  if (length < 0) length = want;
  OT_CHECK(length == want, "%s: external data length %lld does not match shape %s of type %s (%lld bytes)",
           where.c_str(), (long long)length, ShapeString(t->dims).c_str(), DTypeName(t->dtype).c_str(),
           (long long)want);
  OT_CHECK(length <= st.st_size && offset <= st.st_size - length,
           "%s: external data [%lld, %lld + %lld) lies outside '%s' (%lld bytes); the file is truncated",
           where.c_str(), (long long)offset, (long long)offset, (long long)length, path.c_str(),
           (long long)st.st_size);
  t->bytes.resize(nbytes);
  std::ifstream in(path, std::ios::binary);
  in.seekg(offset);
  in.read(reinterpret_cast<char*>(t->bytes.data()), length);
  OT_CHECK(in.good() || length == 0, "%s: cannot read external data from '%s'", where.c_str(), path.c_str());
}

}  // namespace

HostTensor TensorFromProto(const onnx::TensorProto& p, const std::string& base_dir, const std::string& where) {
  CheckDTypeSupported(p.data_type(), where + ": tensor '" + p.name() + "'");
  HostTensor t;
  t.name = p.name();
  t.dtype = static_cast<DType>(p.data_type());
  // Element counts are bounded (and checked before each multiplication, so they cannot
  // overflow); memory is allocated only once the data is known to be present.
  constexpr int64_t kMaxElements = int64_t(1) << 40;
  int64_t n = 1;
  for (int64_t d : p.dims()) {
    OT_CHECK(d >= 0 && d < kMaxElements, "%s: tensor '%s' has invalid dimension %lld", where.c_str(),
             p.name().c_str(), (long long)d);
    t.dims.push_back(d);
    OT_CHECK(d == 0 || n <= kMaxElements / d, "%s: tensor '%s' has implausibly large shape (over 2^40 elements)",
             where.c_str(), p.name().c_str());
    n *= d;
  }
  const size_t esize = DTypeSize(t.dtype);
  const size_t nbytes = static_cast<size_t>(n) * esize;

  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    LoadExternal(p, base_dir, where, nbytes, &t);
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
  // check_count runs before CopyField allocates, so the field's own size bounds the memory.
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
    default:
      throw UnsupportedError(where + ": tensor '" + p.name() + "' has unsupported type " + DTypeName(t.dtype));
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

HostTensor TensorFromBytes(const std::string& bytes, const std::string& base_dir, const std::string& where) {
  onnx::TensorProto p;
  OT_CHECK(p.ParseFromString(bytes), "%s is not a binary TensorProto file (corrupt or truncated)", where.c_str());
  return TensorFromProto(p, base_dir, where);
}

HostTensor ReadTensorFile(const std::string& path) {
  return TensorFromBytes(ReadFileBytes(path), DirName(path), "'" + path + "'");
}

void WriteTensorFile(const HostTensor& t, const std::string& path) {
  onnx::TensorProto p;
  TensorToProto(t, &p);
  WriteFileAtomic(path, p.SerializeAsString());
}

}  // namespace ot
