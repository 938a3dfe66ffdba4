// Element type sizes and names.
#include "graph/dtype.h"

#include "graph/error.h"

namespace ot {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kInt32: case DType::kUInt32: return 4;
    case DType::kFloat64: case DType::kInt64: case DType::kUInt64: return 8;
    case DType::kFloat16: case DType::kBFloat16: case DType::kInt16: case DType::kUInt16: return 2;
    case DType::kUInt8: case DType::kInt8: case DType::kBool: return 1;
    default: return 0;
  }
}

std::string DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "float";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kUInt16: return "uint16";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kString: return "string";
    case DType::kBool: return "bool";
    case DType::kFloat16: return "float16";
    case DType::kFloat64: return "double";
    case DType::kUInt32: return "uint32";
    case DType::kUInt64: return "uint64";
    case DType::kBFloat16: return "bfloat16";
    default: return "undefined";
  }
}

bool DTypeIsKnown(int32_t v) { return (v >= 1 && v <= 13) || v == 16; }

std::string OnnxTypeName(int32_t v) {
  if (DTypeIsKnown(v)) return DTypeName(static_cast<DType>(v));
  switch (v) {
    case 14: return "complex64";
    case 15: return "complex128";
    case 17: return "float8e4m3fn";
    case 18: return "float8e4m3fnuz";
    case 19: return "float8e5m2";
    case 20: return "float8e5m2fnuz";
    case 21: return "uint4";
    case 22: return "int4";
    case 23: return "float4e2m1";
    case 24: return "float8e8m0";
    case 25: return "uint2";
    case 26: return "int2";
    default: return "data type " + std::to_string(v);
  }
}

void CheckDTypeSupported(int32_t v, const std::string& where) {
  if (DTypeIsKnown(v) && v != static_cast<int32_t>(DType::kString)) return;
  throw UnsupportedError(where + " has element type " + OnnxTypeName(v) + ", which onnx-train does not support");
}

}  // namespace ot
