// Helpers shared by the tests: comparing tensors with tolerances, locating test data.
#pragma once

#include <set>
#include <string>

#include "graph/host_tensor.h"

namespace ot {
namespace testing {

// Empty when equal within tolerance (|a-b| <= atol + rtol*|b|, NaNs equal); otherwise a
// sentence naming the first offending element and the worst error.
std::string CompareTensors(const HostTensor& expected, const HostTensor& actual, double rtol, double atol);
// Folder of ONNX's backend test data (env ONNXTRAIN_TESTDATA overrides).
std::string OnnxTestDataDir();
// The onnx-train binary and the source tree, from the build (set by CMake).
std::string OnnxTrainBinary();
std::string SourceDir();

// A committed list of conformance cases, one "group/case" a line ('#' starts a comment):
// Read gives the set (empty, and *exists false, when the file is missing); Write replaces the
// file with the sorted names under a header saying how to regenerate it.
std::set<std::string> ReadCaseList(const std::string& path, bool* exists = nullptr);
void WriteCaseList(const std::string& path, const std::set<std::string>& cases, const std::string& header);

}  // namespace testing
}  // namespace ot
