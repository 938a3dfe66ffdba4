// Executor options from the environment, for the entry points.
#include "tools/executor_environment.h"

#include <cstdlib>
#include <string>

#include "graph/error.h"
#include "runtime/cpu/conv/conv_algorithm.h"

namespace ot {

ExecutorOptions ExecutorOptionsFromEnvironment() {
  ExecutorOptions options;
  if (const char* profile = std::getenv("ONNXTRAIN_PROFILE")) {
    options.profile = options.print_profile = true;
    options.profile_cpu_clock = std::string(profile) == "cpu";
  }
  options.profile_all_nodes = std::getenv("ONNXTRAIN_PROFILE_NODES") != nullptr;
  if (const char* serial = std::getenv("ONNXTRAIN_SERIAL_BELOW_BYTES"))
    options.serial_below_bytes = static_cast<size_t>(std::strtoull(serial, nullptr, 10));
  if (const char* block = std::getenv("ONNXTRAIN_CHANNEL_BLOCK"); block && *block) {
    const std::string b = block;
    OT_CHECK(b == "8" || b == "16", "ONNXTRAIN_CHANNEL_BLOCK=%s: the CPU's channel block is 8 or 16", block);
    options.cpu_channel_block = std::stoi(b);
  }
  return options;
}

std::string CheckedConvAlgo(const std::string& flag) { return ConvAlgorithmName(ParseConvAlgorithm(flag)); }

}  // namespace ot
