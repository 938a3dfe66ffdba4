// IDX reading with gzip support (zlib).
#include "train/readers/idx_reader.h"

#include <zlib.h>

#include "graph/error.h"
#include "graph/file_util.h"
#include "train/readers/huge_pages.h"

namespace ot {

std::string MaybeGunzip(const std::string& bytes, const std::string& where) {
  if (bytes.size() < 2 || static_cast<uint8_t>(bytes[0]) != 0x1f || static_cast<uint8_t>(bytes[1]) != 0x8b)
    return bytes;
  z_stream zs{};
  OT_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, "%s: cannot start gzip decompression", where.c_str());
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  std::string out;
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) break;
    out.append(buf, sizeof(buf) - zs.avail_out);
    if (out.size() > (size_t(1) << 32)) { rc = Z_MEM_ERROR; break; }
  }
  inflateEnd(&zs);
  OT_CHECK(rc == Z_STREAM_END, "%s: gzip data is corrupt or truncated", where.c_str());
  return out;
}

IdxArray ReadIdxFile(const std::string& path) {
  return ParseIdxBytes(ReadFileBytes(path), "'" + path + "'");
}

IdxArray ParseIdxBytes(const std::string& file_bytes, const std::string& where) {
  const std::string bytes = MaybeGunzip(file_bytes, where);
  OT_CHECK(bytes.size() >= 4, "%s is not an IDX file: only %zu bytes", where.c_str(), bytes.size());
  auto u8 = [&](size_t i) { return static_cast<uint8_t>(bytes[i]); };
  OT_CHECK(u8(0) == 0 && u8(1) == 0, "%s is not an IDX file (bad magic number)", where.c_str());
  OT_CHECK(u8(2) == 0x08, "%s: IDX element type 0x%02x is not supported (expected unsigned bytes, 0x08)",
           where.c_str(), u8(2));
  int rank = u8(3);
  OT_CHECK(rank >= 1 && rank <= 4, "%s: IDX rank %d is not supported", where.c_str(), rank);
  size_t header = 4 + 4 * static_cast<size_t>(rank);
  OT_CHECK(bytes.size() >= header, "%s is truncated: the header needs %zu bytes, the file has %zu", where.c_str(),
           header, bytes.size());
  IdxArray out;
  uint64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    size_t o = 4 + 4 * static_cast<size_t>(d);
    uint64_t v = (uint64_t(u8(o)) << 24) | (uint64_t(u8(o + 1)) << 16) | (uint64_t(u8(o + 2)) << 8) | u8(o + 3);
    out.dims.push_back(static_cast<int64_t>(v));
    count *= v;
    OT_CHECK(count <= bytes.size(), "%s is truncated: the header promises more data than the file holds",
             where.c_str());
  }
  OT_CHECK(bytes.size() == header + count,
           "%s has the wrong size: the header promises %llu data bytes (%zu in all), the file has %zu",
           where.c_str(), (unsigned long long)count, header + count, bytes.size());
  ReserveOnHugePages(&out.data, count);  // image rows are read at random by shuffled batches
  out.data.assign(bytes.begin() + static_cast<long>(header), bytes.end());
  return out;
}

}  // namespace ot
