// libFuzzer target for the ONNX model loader (ot::LoadModelFromBytes: protobuf parse,
// IR conversion, checker, shape inference). Any byte string must either load or be refused
// with ot::Error; a crash, sanitizer report, leak, timeout or a big allocation is a bug.
// A model that loads is also ordered and exported again, as every command does next.
#include <cstddef>
#include <cstdint>
#include <string>

#include <onnx/onnx_pb.h>

#include "graph/error.h"
#include "graph/onnx_io.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    ot::Model model = ot::LoadModelFromBytes(bytes, "fuzz input", ot::fuzz::ExternalDataDir());
    model.graph.TopologicalOrder();
    onnx::ModelProto exported;
    ot::ModelToProto(model, &exported);
    exported.SerializeAsString();
  } catch (const ot::Error&) {
    // Refused with a message: the expected outcome for most inputs.
  }
  return 0;
}
