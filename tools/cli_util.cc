// Helpers shared by the onnx-train subcommands.
#include "tools/cli_util.h"

#include <cmath>
#include <iostream>

#include "graph/error.h"
#include "graph/file_util.h"
#include "graph/tensor_proto.h"
#include "runtime/cpu/layout/dnnl_util.h"
#include "runtime/core/device.h"

namespace ot {

std::pair<std::string, std::string> SplitAssignment(const std::string& s, const std::string& flag) {
  auto eq = s.find('=');
  OT_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < s.size(), "--%s expects NAME=FILE.pb, got '%s'",
           flag.c_str(), s.c_str());
  return {s.substr(0, eq), s.substr(eq + 1)};
}

void EnsureDir(const std::string& dir) { MakeDirectories(dir); }

std::string FileNameFor(const std::string& value) {
  std::string out = value;
  for (char& c : out)
    if (c == '/' || c == '\\' || c == ':' || c == ' ') c = '_';
  return out.empty() ? "_" : out;
}

std::map<std::string, Tensor> ReadFeeds(const std::vector<std::string>& assignments, Device device) {
  std::map<std::string, Tensor> feeds;
  for (const auto& a : assignments) {
    auto [name, path] = SplitAssignment(a, "input");
    OT_CHECK(!feeds.count(name), "input '%s' is given twice", name.c_str());
    feeds[name] = Tensor::FromHost(ReadTensorFile(path), device);
  }
  return feeds;
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

AmpMode CheckedAmpMode(const std::string& text, Device device) {
  const AmpMode mode = ParseAmpMode(text);
  if (mode == AmpMode::kFloat16 && device.type == DeviceType::kCPU)
    std::cout << "--amp fp16 on the CPU: float16 emulated in float32 products, for testing; use --amp bf16 for "
                 "speed\n";
  if (mode == AmpMode::kBFloat16 && device.type != DeviceType::kCPU)
    throw Error("--amp bf16 runs on the CPU only so far; train on " + device.ToString() + " without --amp");
  if (mode == AmpMode::kBFloat16 && !cpu::CpuHasBFloat16Products()) {
    std::cout << "--amp bf16: this CPU has no bfloat16 instructions (avx512_bf16 or AMX), training runs in float32\n";
    return AmpMode::kOff;
  }
  return mode;
}

void ApplyTf32Flag(bool tf32, Device device) {
  if (!tf32) return;
  OT_CHECK(device.type == DeviceType::kCUDA, "--tf32 needs --device cuda (TF32 is a math mode of NVIDIA tensor cores)");
  BackendFor(DeviceType::kCUDA).SetAllowTf32(true);  // loads the CUDA plugin, or says why it cannot
}

}  // namespace ot
