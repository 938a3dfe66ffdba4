// Element types. The numeric values are ONNX's TensorProto::DataType, so conversion is a cast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ot {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
};

// Bytes per element; 0 for undefined and string.
size_t DTypeSize(DType t);
// Lower-case name as ONNX prints it ("float", "int64", ...).
std::string DTypeName(DType t);
// True for the values ONNX defines that onnx-train knows (not complex, float8, int4, float4).
bool DTypeIsKnown(int32_t onnx_type);
// ONNX's name of any TensorProto::DataType value, known to onnx-train or not ("float8e4m3fn",
// "int4", "complex64", ...); "data type N" for a value ONNX does not define.
std::string OnnxTypeName(int32_t onnx_type);
// Throws UnsupportedError naming `where` and the type when onnx-train has no such element type
// (or it is string, which no kernel takes): such a model is unsupported, not corrupt.
void CheckDTypeSupported(int32_t onnx_type, const std::string& where);

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kInt8; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };

}  // namespace ot
