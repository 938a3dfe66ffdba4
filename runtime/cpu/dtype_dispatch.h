// Runtime data type -> C++ type dispatch for hand-written CPU loops: calls a generic
// lambda with a TypeTag<T> for the tensor's element type, or throws UnsupportedError
// naming the op when the type is outside the set the caller supports.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "graph/dtype.h"
#include "graph/error.h"
#include "graph/ir.h"

namespace ot {
namespace cpu {

template <typename T>
struct TypeTag {
  using type = T;
};

// The ONNX data type of a C++ element type (the set the loops use).
template <typename T>
constexpr DType kDTypeOf = DType::kUndefined;
template <>
constexpr DType kDTypeOf<float> = DType::kFloat32;
template <>
constexpr DType kDTypeOf<double> = DType::kFloat64;
template <>
constexpr DType kDTypeOf<int8_t> = DType::kInt8;
template <>
constexpr DType kDTypeOf<int16_t> = DType::kInt16;
template <>
constexpr DType kDTypeOf<int32_t> = DType::kInt32;
template <>
constexpr DType kDTypeOf<int64_t> = DType::kInt64;
template <>
constexpr DType kDTypeOf<uint8_t> = DType::kUInt8;
template <>
constexpr DType kDTypeOf<uint16_t> = DType::kUInt16;
template <>
constexpr DType kDTypeOf<uint32_t> = DType::kUInt32;
template <>
constexpr DType kDTypeOf<uint64_t> = DType::kUInt64;
template <>
constexpr DType kDTypeOf<bool> = DType::kBool;

template <typename... Ts>
struct TypeList {};

using FloatTypes = TypeList<float, double>;
// Floating point and signed integers: types where negation and abs make sense.
using SignedTypes = TypeList<float, double, int8_t, int16_t, int32_t, int64_t>;
using NumericTypes = TypeList<float, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>;
using NumericOrBoolTypes =
    TypeList<float, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, bool>;

[[noreturn]] inline void ThrowUnsupportedType(DType t, const Node& node) {
  throw UnsupportedError(node.op_type + ": data type " + DTypeName(t));
}

template <typename... Ts, typename Fn>
void DispatchType(TypeList<Ts...>, DType t, const Node& node, Fn&& fn) {
  bool found = ((kDTypeOf<Ts> == t ? (fn(TypeTag<Ts>{}), true) : false) || ...);
  if (!found) ThrowUnsupportedType(t, node);
}

// True when `t` is one of the list's types.
template <typename... Ts>
bool TypeListHas(TypeList<Ts...>, DType t) {
  return ((kDTypeOf<Ts> == t) || ...);
}

}  // namespace cpu
}  // namespace ot
