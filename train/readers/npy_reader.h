// NumPy arrays on disk: our own reader of the .npy header (format versions 1, 2 and 3),
// arrays memory-mapped from .npy files, and arrays of .npz archives (zip, read through
// minizip: stored members are mapped in place, deflated ones are inflated into memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/dtype.h"

namespace ot {

struct NpyHeader {
  DType dtype = DType::kUndefined;
  std::string descr;            // as written, e.g. "<f4"
  std::vector<int64_t> shape;   // () for a scalar
  size_t data_offset = 0;       // bytes from the start of the file to the first element
  int64_t NumElements() const;
  size_t DataBytes() const { return static_cast<size_t>(NumElements()) * DTypeSize(dtype); }
};

// Parses the header of .npy bytes (at least the header; `size` is the whole length known, so
// a header that runs past it is refused). Accepts little-endian (or byte-order free) bool,
// int8/16/32/64, uint8/16, float32/64 in C order; anything else (big-endian, Fortran order,
// structured or object dtypes, a malformed dictionary, a shape whose byte count overflows)
// throws ot::Error naming `what`.
NpyHeader ParseNpyHeader(const uint8_t* data, size_t size, const std::string& what);

// An array whose elements stay where they are: in a memory-mapped file, or in a buffer this
// object owns. Cheap to copy (shares the storage).
class NpyArray {
 public:
  const NpyHeader& header() const { return header_; }
  DType dtype() const { return header_.dtype; }
  const std::vector<int64_t>& shape() const { return header_.shape; }
  const uint8_t* data() const { return data_; }
  const std::string& source() const { return source_; }  // "x.npy" or "data.npz:x"

  // Maps `path` (an .npy file); throws ot::Error naming the file when it cannot be read or
  // its header is malformed or its data is shorter than the header says.
  static NpyArray Open(const std::string& path);
  // The member `key` (or `key`.npy) of the .npz archive `path`.
  static NpyArray OpenNpz(const std::string& path, const std::string& key);
  // The member names of an .npz archive, without the .npy suffix.
  static std::vector<std::string> NpzKeys(const std::string& path);
  // From bytes in memory (tests, fuzzing): copies them.
  static NpyArray FromBytes(const std::string& bytes, const std::string& what);

 private:
  NpyHeader header_;
  std::shared_ptr<const void> storage_;  // the mapping or the buffer
  const uint8_t* data_ = nullptr;
  std::string source_;
};

// The bytes of an .npy file holding `dims` of `dtype` (C order) with the given data; for
// tests and tools that hand arrays to Python.
std::string EncodeNpy(DType dtype, const std::vector<int64_t>& dims, const void* data);

}  // namespace ot
