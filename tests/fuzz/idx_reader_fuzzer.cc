// libFuzzer target for the IDX reader (ot::ParseIdxBytes, the code behind ReadIdxFile:
// gzip detection and inflation, header, dimensions checked against the data length). Any
// byte string must either give an array whose data size is the product of its dimensions
// or be refused with ot::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "graph/error.h"
#include "train/readers/idx_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    ot::IdxArray array = ot::ParseIdxBytes(bytes, "fuzz input");
    uint64_t count = 1;
    for (int64_t d : array.dims) count *= static_cast<uint64_t>(d);
    if (array.dims.empty() || count != array.data.size()) std::abort();
  } catch (const ot::Error&) {
    // Refused with a message.
  }
  return 0;
}
