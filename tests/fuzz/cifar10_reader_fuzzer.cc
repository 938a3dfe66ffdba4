// libFuzzer target for the CIFAR-10 reader (ot::ReadCifar10 on the test split). The first
// input byte picks the records per file (1 to 4), the rest is written as test_batch.bin, so
// that both wrongly sized files and bad labels are reached. The reader must either give
// that many images with labels in [0, 10) or refuse with ot::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "graph/error.h"
#include "tests/fuzz/fuzz_support.h"
#include "train/readers/cifar10_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int64_t records = 1 + data[0] % 4;
  ot::fuzz::WriteScratchFile("test_batch.bin", std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  try {
    ot::ImageDataset ds = ot::ReadCifar10(ot::fuzz::ExternalDataDir(), "test", records);
    if (ds.count != records || static_cast<int64_t>(ds.labels.size()) != records ||
        static_cast<int64_t>(ds.pixels.size()) != records * ot::kCifar10ImageBytes)
      std::abort();
    for (int64_t label : ds.labels)
      if (label < 0 || label >= 10) std::abort();
  } catch (const ot::Error&) {
    // Refused with a message.
  }
  return 0;
}
