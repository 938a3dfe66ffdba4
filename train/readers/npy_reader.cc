// The .npy header parser, file mapping and .npz members.
#include "train/readers/npy_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <minizip/unzip.h>

#include <cctype>
#include <cstring>
#include <limits>

#include "graph/error.h"

namespace ot {

namespace {

// A cursor over the header's Python dictionary literal.
class DictParser {
 public:
  DictParser(const char* text, size_t size, const std::string& what)
      : begin_(text), p_(text), end_(text + size), what_(what) {}

  void SkipSpace() {
    while (p_ < end_ && std::isspace(static_cast<unsigned char>(*p_))) ++p_;
  }
  bool Peek(char c) {
    SkipSpace();
    return p_ < end_ && *p_ == c;
  }
  void Expect(char c) {
    OT_CHECK(Peek(c), "%s: malformed .npy header: expected '%c' at byte %zu of the header dictionary", what_.c_str(),
             c, static_cast<size_t>(p_ - begin_));
    ++p_;
  }
  std::string String() {
    SkipSpace();
    OT_CHECK(p_ < end_ && (*p_ == '\'' || *p_ == '"'), "%s: malformed .npy header: expected a quoted string",
             what_.c_str());
    const char quote = *p_++;
    const char* start = p_;
    while (p_ < end_ && *p_ != quote) ++p_;
    OT_CHECK(p_ < end_, "%s: malformed .npy header: unterminated string", what_.c_str());
    return std::string(start, p_++);
  }
  std::string Word() {
    SkipSpace();
    const char* start = p_;
    while (p_ < end_ && std::isalpha(static_cast<unsigned char>(*p_))) ++p_;
    return std::string(start, p_);
  }
  int64_t Integer() {
    SkipSpace();
    const char* start = p_;
    uint64_t v = 0;
    while (p_ < end_ && std::isdigit(static_cast<unsigned char>(*p_))) {
      OT_CHECK(v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / 10 - 9),
               "%s: .npy shape dimension is too large", what_.c_str());
      v = v * 10 + static_cast<uint64_t>(*p_++ - '0');
    }
    // numpy writes Python ints; older versions wrote "3L".
    if (p_ < end_ && *p_ == 'L') ++p_;
    OT_CHECK(p_ > start, "%s: malformed .npy header: expected a whole number in the shape", what_.c_str());
    return static_cast<int64_t>(v);
  }
  bool AtEnd() {
    SkipSpace();
    return p_ == end_;
  }

 private:
  const char* begin_;
  const char* p_;
  const char* end_;
  const std::string& what_;
};

DType DTypeOfDescr(const std::string& descr, const std::string& what) {
  OT_CHECK(descr.size() >= 2, "%s: unsupported .npy dtype '%s'", what.c_str(), descr.c_str());
  const char order = descr[0];
  const std::string kind = descr.substr(1);
  static const struct {
    const char* kind;
    DType dtype;
  } kTypes[] = {{"b1", DType::kBool},    {"i1", DType::kInt8},    {"u1", DType::kUInt8},   {"i2", DType::kInt16},
                {"u2", DType::kUInt16},  {"i4", DType::kInt32},   {"u4", DType::kUInt32},  {"i8", DType::kInt64},
                {"u8", DType::kUInt64},  {"f2", DType::kFloat16}, {"f4", DType::kFloat32}, {"f8", DType::kFloat64}};
  for (const auto& t : kTypes) {
    if (kind != t.kind) continue;
    const bool one_byte = DTypeSize(t.dtype) == 1;
    OT_CHECK(order == '<' || order == '=' || (order == '|' && one_byte) || (order == '>' && one_byte),
             "%s: .npy dtype '%s' is big-endian or of unknown byte order; save it little-endian "
             "(numpy: x.astype(x.dtype.newbyteorder('<')))",
             what.c_str(), descr.c_str());
    return t.dtype;
  }
  throw Error(what + ": unsupported .npy dtype '" + descr +
              "' (bool, int8..int64, uint8..uint64, float16, float32 or float64 arrays)");
}

struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr && addr != MAP_FAILED) ::munmap(addr, size);
  }
};

std::shared_ptr<Mapping> MapFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OT_CHECK(fd >= 0, "cannot open '%s': %s", path.c_str(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("'" + path + "' is not a regular file");
  }
  auto m = std::make_shared<Mapping>();
  m->size = static_cast<size_t>(st.st_size);
  if (m->size > 0) {
    m->addr = ::mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m->addr == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw Error("cannot map '" + path + "': " + std::strerror(err));
    }
  }
  ::close(fd);
  return m;
}

void CheckDataLength(const NpyHeader& h, size_t available, const std::string& what) {
  OT_CHECK(available >= h.data_offset && available - h.data_offset >= h.DataBytes(),
           "%s is truncated: its header promises %lld elements of %s (%zu bytes) but %zu bytes follow the header",
           what.c_str(), (long long)h.NumElements(), DTypeName(h.dtype).c_str(), h.DataBytes(),
           available >= h.data_offset ? available - h.data_offset : 0);
}

}  // namespace

int64_t NpyHeader::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

NpyHeader ParseNpyHeader(const uint8_t* data, size_t size, const std::string& what) {
  static const char kMagic[] = "\x93NUMPY";
  OT_CHECK(size >= 10 && std::memcmp(data, kMagic, 6) == 0,
           "%s is not a NumPy .npy array (no \\x93NUMPY magic at its start)", what.c_str());
  const int major = data[6];
  OT_CHECK(major >= 1 && major <= 3, "%s: unsupported .npy format version %d.%d", what.c_str(), major, data[7]);
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = static_cast<size_t>(data[8]) | static_cast<size_t>(data[9]) << 8;
    start = 10;
  } else {
    OT_CHECK(size >= 12, "%s: .npy header is truncated", what.c_str());
    header_len = static_cast<size_t>(data[8]) | static_cast<size_t>(data[9]) << 8 |
                 static_cast<size_t>(data[10]) << 16 | static_cast<size_t>(data[11]) << 24;
    start = 12;
  }
  OT_CHECK(header_len <= size - start, "%s: .npy header claims %zu bytes but the file has only %zu after the preamble",
           what.c_str(), header_len, size - start);
  NpyHeader h;
  h.data_offset = start + header_len;
  DictParser dict(reinterpret_cast<const char*>(data + start), header_len, what);
  bool have_descr = false, have_order = false, have_shape = false;
  dict.Expect('{');
  while (!dict.Peek('}')) {
    const std::string key = dict.String();
    dict.Expect(':');
    if (key == "descr") {
      h.descr = dict.String();
      h.dtype = DTypeOfDescr(h.descr, what);
      have_descr = true;
    } else if (key == "fortran_order") {
      const std::string v = dict.Word();
      OT_CHECK(v == "False" || v == "True", "%s: malformed .npy header: fortran_order is '%s'", what.c_str(),
               v.c_str());
      OT_CHECK(v == "False", "%s: the array is in Fortran order; save it in C order (numpy.ascontiguousarray)",
               what.c_str());
      have_order = true;
    } else if (key == "shape") {
      dict.Expect('(');
      while (!dict.Peek(')')) {
        h.shape.push_back(dict.Integer());
        OT_CHECK(h.shape.size() <= 32, "%s: .npy shape has more than 32 dimensions", what.c_str());
        if (!dict.Peek(',')) break;
        dict.Expect(',');
      }
      dict.Expect(')');
      have_shape = true;
    } else {
      throw Error(what + ": malformed .npy header: unknown key '" + key + "'");
    }
    if (!dict.Peek(',')) break;
    dict.Expect(',');
  }
  dict.Expect('}');
  OT_CHECK(dict.AtEnd(), "%s: malformed .npy header: text after the dictionary", what.c_str());
  OT_CHECK(have_descr && have_order && have_shape, "%s: .npy header lacks %s", what.c_str(),
           !have_descr ? "'descr'" : !have_order ? "'fortran_order'" : "'shape'");
  // The byte count must fit: elements * item size without overflow.
  uint64_t bytes = DTypeSize(h.dtype);
  for (int64_t d : h.shape) {
    OT_CHECK(d == 0 || bytes <= (static_cast<uint64_t>(1) << 62) / static_cast<uint64_t>(d),
             "%s: .npy shape is too large", what.c_str());
    bytes *= static_cast<uint64_t>(d);
  }
  return h;
}

NpyArray NpyArray::Open(const std::string& path) {
  std::shared_ptr<Mapping> m = MapFile(path);
  NpyArray a;
  a.source_ = path;
  a.header_ = ParseNpyHeader(static_cast<const uint8_t*>(m->addr), m->size, "'" + path + "'");
  CheckDataLength(a.header_, m->size, "'" + path + "'");
  a.data_ = static_cast<const uint8_t*>(m->addr) + a.header_.data_offset;
  a.storage_ = m;
  return a;
}

NpyArray NpyArray::FromBytes(const std::string& bytes, const std::string& what) {
  auto buffer = std::make_shared<std::string>(bytes);
  NpyArray a;
  a.source_ = what;
  a.header_ = ParseNpyHeader(reinterpret_cast<const uint8_t*>(buffer->data()), buffer->size(), what);
  CheckDataLength(a.header_, buffer->size(), what);
  a.data_ = reinterpret_cast<const uint8_t*>(buffer->data()) + a.header_.data_offset;
  a.storage_ = buffer;
  return a;
}

namespace {

struct UnzCloser {
  unzFile f;
  ~UnzCloser() {
    if (f) unzClose(f);
  }
};

}  // namespace

std::vector<std::string> NpyArray::NpzKeys(const std::string& path) {
  UnzCloser z{unzOpen64(path.c_str())};
  OT_CHECK(z.f, "cannot open '%s' as an .npz (zip) archive", path.c_str());
  std::vector<std::string> keys;
  for (int rc = unzGoToFirstFile(z.f); rc == UNZ_OK; rc = unzGoToNextFile(z.f)) {
    char name[1024];
    unz_file_info64 info;
    OT_CHECK(unzGetCurrentFileInfo64(z.f, &info, name, sizeof(name), nullptr, 0, nullptr, 0) == UNZ_OK,
             "'%s': unreadable zip directory", path.c_str());
    std::string key = name;
    if (key.size() > 4 && key.compare(key.size() - 4, 4, ".npy") == 0) key.resize(key.size() - 4);
    keys.push_back(key);
  }
  return keys;
}

NpyArray NpyArray::OpenNpz(const std::string& path, const std::string& key) {
  UnzCloser z{unzOpen64(path.c_str())};
  OT_CHECK(z.f, "cannot open '%s' as an .npz (zip) archive", path.c_str());
  const std::string member = key + ".npy";
  if (unzLocateFile(z.f, member.c_str(), 1) != UNZ_OK && unzLocateFile(z.f, key.c_str(), 1) != UNZ_OK) {
    std::string have;
    for (const std::string& k : NpzKeys(path)) have += (have.empty() ? "" : ", ") + k;
    throw Error("'" + path + "' has no array '" + key + "' (it holds: " + have + "); name them with --npz-keys X,Y");
  }
  const std::string what = "'" + path + ":" + key + "'";
  unz_file_info64 info;
  OT_CHECK(unzGetCurrentFileInfo64(z.f, &info, nullptr, 0, nullptr, 0, nullptr, 0) == UNZ_OK,
           "%s: unreadable zip entry", what.c_str());
  OT_CHECK(unzOpenCurrentFile(z.f) == UNZ_OK, "%s: cannot open the zip entry", what.c_str());
  NpyArray a;
  a.source_ = path + ":" + key;
  if (info.compression_method == 0) {
    // Stored (numpy.savez): map the archive and point into it.
    const ZPOS64_T offset = unzGetCurrentFileZStreamPos64(z.f);
    unzCloseCurrentFile(z.f);
    std::shared_ptr<Mapping> m = MapFile(path);
    OT_CHECK(offset <= m->size && info.uncompressed_size <= m->size - offset, "%s: the zip entry runs past the file",
             what.c_str());
    const uint8_t* base = static_cast<const uint8_t*>(m->addr) + offset;
    a.header_ = ParseNpyHeader(base, static_cast<size_t>(info.uncompressed_size), what);
    CheckDataLength(a.header_, static_cast<size_t>(info.uncompressed_size), what);
    a.data_ = base + a.header_.data_offset;
    a.storage_ = m;
    return a;
  }
  // Deflated (numpy.savez_compressed): inflate into memory.
  OT_CHECK(info.uncompressed_size < (static_cast<ZPOS64_T>(1) << 40), "%s: the zip entry is implausibly large",
           what.c_str());
  auto buffer = std::make_shared<std::string>();
  buffer->resize(static_cast<size_t>(info.uncompressed_size));
  size_t done = 0;
  while (done < buffer->size()) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(buffer->size() - done, 1u << 30));
    const int n = unzReadCurrentFile(z.f, &(*buffer)[done], chunk);
    OT_CHECK(n > 0, "%s: the compressed zip entry is corrupt or truncated", what.c_str());
    done += static_cast<size_t>(n);
  }
  OT_CHECK(unzCloseCurrentFile(z.f) == UNZ_OK, "%s: the zip entry fails its CRC check", what.c_str());
  a.header_ = ParseNpyHeader(reinterpret_cast<const uint8_t*>(buffer->data()), buffer->size(), what);
  CheckDataLength(a.header_, buffer->size(), what);
  a.data_ = reinterpret_cast<const uint8_t*>(buffer->data()) + a.header_.data_offset;
  a.storage_ = buffer;
  return a;
}

std::string EncodeNpy(DType dtype, const std::vector<int64_t>& dims, const void* data) {
  const char* descr = nullptr;
  switch (dtype) {
    case DType::kFloat32: descr = "<f4"; break;
    case DType::kFloat64: descr = "<f8"; break;
    case DType::kInt64: descr = "<i8"; break;
    case DType::kInt32: descr = "<i4"; break;
    case DType::kUInt8: descr = "|u1"; break;
    default: throw Error("EncodeNpy: unsupported dtype " + DTypeName(dtype));
  }
  std::string shape = "(";
  int64_t n = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    shape += (i ? ", " : "") + std::to_string(dims[i]);
    n *= dims[i];
  }
  shape += dims.size() == 1 ? ",)" : ")";
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  out += dict;
  out.append(static_cast<const char*>(data), static_cast<size_t>(n) * DTypeSize(dtype));
  return out;
}

}  // namespace ot
