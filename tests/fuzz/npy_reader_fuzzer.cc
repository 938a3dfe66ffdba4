// libFuzzer target for the NumPy reader (ot::NpyArray::FromBytes, the code behind
// NpyArray::Open and the .npz members: magic, version, header length, the header's Python
// dictionary, dtype, shape and data length). Any byte string must either give an array whose
// elements lie inside the bytes or be refused with ot::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "graph/error.h"
#include "train/readers/npy_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    ot::NpyArray a = ot::NpyArray::FromBytes(bytes, "fuzz input");
    const ot::NpyHeader& h = a.header();
    if (h.data_offset > size || h.DataBytes() > size - h.data_offset) std::abort();
    // Touch the first and last element: ASan catches reads outside the buffer.
    volatile uint8_t sink = 0;
    if (h.DataBytes() > 0) sink = static_cast<uint8_t>(a.data()[0] ^ a.data()[h.DataBytes() - 1]);
    (void)sink;
  } catch (const ot::Error&) {
    // Refused with a message.
  }
  return 0;
}
