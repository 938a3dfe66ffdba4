// libFuzzer target for the TensorProto reader (ot::TensorFromBytes, the code behind every
// .pb input file and every initializer). Any byte string must either give a tensor whose
// byte size matches its shape or be refused with ot::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "graph/error.h"
#include "graph/tensor_proto.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    ot::HostTensor t = ot::TensorFromBytes(bytes, ot::fuzz::ExternalDataDir(), "fuzz input");
    if (t.NumBytes() != static_cast<size_t>(t.NumElements()) * ot::DTypeSize(t.dtype)) std::abort();
  } catch (const ot::Error&) {
    // Refused with a message.
  }
  return 0;
}
