// Conversion between ONNX TensorProto and HostTensor, and binary .pb tensor files (the
// format of ONNX's own test data).
#pragma once

#include <string>

#include "graph/host_tensor.h"

namespace onnx { class TensorProto; }

namespace ot {

// Converts a TensorProto (raw_data or typed fields; external data resolved against
// base_dir). `where` names the source for error messages (file, node, initializer).
HostTensor TensorFromProto(const onnx::TensorProto& proto, const std::string& base_dir,
                           const std::string& where);
// Writes raw_data.
void TensorToProto(const HostTensor& t, onnx::TensorProto* proto);

// Parses the bytes of a binary TensorProto file; `where` names the source in messages.
HostTensor TensorFromBytes(const std::string& bytes, const std::string& base_dir, const std::string& where);
HostTensor ReadTensorFile(const std::string& path);
void WriteTensorFile(const HostTensor& t, const std::string& path);

}  // namespace ot
