// libFuzzer target for the checkpoint reader (ot::ReadTrainingState). Each input is read
// twice: as the whole file (trailer checks: magic, length, CRC-32) and with its last 16
// bytes replaced by a valid trailer, so that mutated payloads get past the checksum and
// reach the ModelProto parse, the scalars and the tensors. Either a state comes back or the
// reader refuses with ot::Error.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "graph/error.h"
#include "tests/fuzz/fuzz_support.h"
#include "train/checkpoint/checkpoint.h"

namespace {

// The trailer that train/checkpoint/checkpoint.cc writes: "OTCK", CRC-32 of the payload, its length.
std::string WithValidTrailer(std::string payload) {
  const uint32_t crc = static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size())));
  const uint64_t length = payload.size();
  char trailer[16];
  std::memcpy(trailer, "OTCK", 4);
  std::memcpy(trailer + 4, &crc, 4);
  std::memcpy(trailer + 8, &length, 8);
  return payload.append(trailer, sizeof(trailer));
}

void ReadState(const std::string& file_bytes) {
  try {
    ot::TrainingState state = ot::ReadTrainingState(ot::fuzz::WriteScratchFile("fuzz.state", file_bytes));
    for (const ot::HostTensor& t : state.tensors) state.FindTensor(t.name);
  } catch (const ot::Error&) {
    // Refused with a message.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  ReadState(bytes);
  if (size >= 16) ReadState(WithValidTrailer(bytes.substr(0, size - 16)));
  return 0;
}
