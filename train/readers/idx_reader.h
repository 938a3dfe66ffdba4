// Readers for IDX files (MNIST, Fashion-MNIST), gzip-compressed or plain. Sizes in the
// header are checked against the file's real length before anything is allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ot {

struct IdxArray {
  std::vector<int64_t> dims;   // e.g. [60000, 28, 28] or [60000]
  std::vector<uint8_t> data;   // unsigned bytes, row-major
};

// Reads an IDX file of unsigned bytes (type 0x08). Throws ot::Error naming the file and
// what is wrong (missing, not IDX, truncated: expected and actual sizes).
IdxArray ReadIdxFile(const std::string& path);
// The same for the bytes of an IDX file already in memory (gzip or plain); `where` names
// their source in errors.
IdxArray ParseIdxBytes(const std::string& file_bytes, const std::string& where);
// Decompresses gzip data if it starts with the gzip magic; returns it unchanged otherwise.
std::string MaybeGunzip(const std::string& bytes, const std::string& where);

}  // namespace ot
