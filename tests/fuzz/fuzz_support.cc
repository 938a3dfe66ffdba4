// Scratch folder with external data for the fuzz targets.
#include "tests/fuzz/fuzz_support.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace ot {
namespace fuzz {

const std::string& ExternalDataDir() {
  static const std::string dir = [] {
    std::string path = "/tmp/onnx_train_fuzz_" + std::to_string(::getpid());
    std::string cmd = "mkdir -p " + path;
    if (std::system(cmd.c_str()) != 0) std::abort();
    std::ofstream data(path + "/data.bin", std::ios::binary);
    for (int i = 0; i < 64; ++i) data.put(static_cast<char>(i));
    return path;
  }();
  return dir;
}

std::string WriteScratchFile(const std::string& name, const std::string& bytes) {
  const std::string path = ExternalDataDir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) std::abort();
  return path;
}

}  // namespace fuzz
}  // namespace ot
