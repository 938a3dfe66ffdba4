// Helpers shared by the tests.
#include "tests/common/test_util.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ot {
namespace testing {

namespace {
double ValueAt(const HostTensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::kFloat32: return t.Data<float>()[i];
    case DType::kFloat64: return t.Data<double>()[i];
    case DType::kInt64: return static_cast<double>(t.Data<int64_t>()[i]);
    case DType::kInt32: return t.Data<int32_t>()[i];
    case DType::kInt16: return t.Data<int16_t>()[i];
    case DType::kInt8: return t.Data<int8_t>()[i];
    case DType::kUInt8: case DType::kBool: return t.Data<uint8_t>()[i];
    case DType::kUInt16: return t.Data<uint16_t>()[i];
    case DType::kUInt32: return t.Data<uint32_t>()[i];
    case DType::kUInt64: return static_cast<double>(t.Data<uint64_t>()[i]);
    default: return std::nan("");
  }
}
bool IsFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBFloat16; }
}  // namespace

std::string CompareTensors(const HostTensor& expected, const HostTensor& actual, double rtol, double atol) {
  std::ostringstream err;
  if (expected.dtype != actual.dtype) {
    err << "type differs: expected " << DTypeName(expected.dtype) << ", got " << DTypeName(actual.dtype);
    return err.str();
  }
  if (expected.dims != actual.dims) {
    err << "shape differs: expected " << ShapeString(expected.dims) << ", got " << ShapeString(actual.dims);
    return err.str();
  }
  if (expected.dtype == DType::kFloat16 || expected.dtype == DType::kBFloat16) {
    return expected.bytes == actual.bytes ? "" : "16-bit float contents differ";
  }
  const bool exact = !IsFloat(expected.dtype);
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (int64_t i = 0; i < expected.NumElements(); ++i) {
    double e = ValueAt(expected, i), a = ValueAt(actual, i);
    if (std::isnan(e) && std::isnan(a)) continue;
    if (std::isinf(e) && e == a) continue;
    double diff = std::fabs(e - a);
    bool ok = exact ? diff == 0 : diff <= atol + rtol * std::fabs(e);
    if (!ok || std::isnan(diff)) {
      if (first < 0) first = i;
      ++bad;
      worst = std::max(worst, std::isnan(diff) ? INFINITY : diff);
    }
  }
  if (bad == 0) return "";
  err << bad << " of " << expected.NumElements() << " elements differ; first at flat index " << first
      << ": expected " << ValueAt(expected, first) << ", got " << ValueAt(actual, first) << "; worst |diff| " << worst;
  return err.str();
}

std::string OnnxTestDataDir() {
  const char* env = std::getenv("ONNXTRAIN_TESTDATA");
  return env ? env : "/usr/share/libonnx-testdata/data";
}

// Both may be moved: scripts/gpu-check.sh runs the test programs from a bundle, in another
// checkout, and says where the program and the sources are.
std::string OnnxTrainBinary() {
  const char* env = std::getenv("ONNXTRAIN_BINARY");
  return env && *env ? env : ONNXTRAIN_BINARY;
}
std::string SourceDir() {
  const char* env = std::getenv("ONNXTRAIN_SOURCE_DIR");
  return env && *env ? env : ONNXTRAIN_SOURCE_DIR;
}

std::set<std::string> ReadCaseList(const std::string& path, bool* exists) {
  std::ifstream in(path);
  if (exists) *exists = static_cast<bool>(in);
  std::set<std::string> cases;
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    if (!line.empty()) cases.insert(line);
  }
  return cases;
}

void WriteCaseList(const std::string& path, const std::set<std::string>& cases, const std::string& header) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write the case list " + path);
  out << header;
  for (const auto& c : cases) out << c << "\n";
  if (!out) throw std::runtime_error("cannot write the case list " + path);
}

}  // namespace testing
}  // namespace ot
