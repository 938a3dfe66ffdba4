// CIFAR-10 binary reading with size and label checks.
#include "train/readers/cifar10_reader.h"

#include <sys/stat.h>

#include <vector>

#include "graph/error.h"
#include "graph/file_util.h"
#include "train/readers/huge_pages.h"

namespace ot {

namespace {

std::vector<std::string> SplitFiles(const std::string& dir, const std::string& split) {
  if (split == "test") return {dir + "/test_batch.bin"};
  std::vector<std::string> files;
  for (int i = 1; i <= 5; ++i) files.push_back(dir + "/data_batch_" + std::to_string(i) + ".bin");
  return files;
}

// Appends one file's records to ds (pixels and labels).
void AppendCifarFile(const std::string& path, int64_t records, ImageDataset& ds) {
  const long long expected = static_cast<long long>(records * kCifar10RecordBytes);
  const std::string layout = StrFormat("%lld bytes: %lld records of 1 label byte and %lld pixel bytes", expected,
                                       (long long)records, (long long)kCifar10ImageBytes);
  struct stat st {};
  OT_CHECK(::stat(path.c_str(), &st) == 0, "CIFAR-10 file '%s' is missing (expected %s)", path.c_str(),
           layout.c_str());
  OT_CHECK(static_cast<long long>(st.st_size) == expected, "CIFAR-10 file '%s' has %lld bytes, expected %s%s",
           path.c_str(), static_cast<long long>(st.st_size), layout.c_str(),
           static_cast<long long>(st.st_size) < expected ? " (truncated?)" : "");
  const std::string bytes = ReadFileBytes(path);
  OT_CHECK(static_cast<long long>(bytes.size()) == expected, "CIFAR-10 file '%s' changed size while being read",
           path.c_str());
  for (int64_t r = 0; r < records; ++r) {
    const char* record = bytes.data() + r * kCifar10RecordBytes;
    const int label = static_cast<uint8_t>(record[0]);
    OT_CHECK(label < 10, "CIFAR-10 file '%s': label %d of record %lld is outside [0, 10)", path.c_str(), label,
             (long long)r);
    ds.labels.push_back(label);
    ds.pixels.insert(ds.pixels.end(), record + 1, record + kCifar10RecordBytes);
  }
}

}  // namespace

ImageDataset ReadCifar10(const std::string& dir, const std::string& split, int64_t records_per_file) {
  OT_CHECK(split == "train" || split == "test", "unknown split '%s' (train or test)", split.c_str());
  OT_CHECK(records_per_file > 0, "CIFAR-10 records per file must be positive");
  const std::vector<std::string> files = SplitFiles(dir, split);
  ImageDataset ds;
  ds.name = "cifar10";
  ds.channels = 3;
  ds.height = 32;
  ds.width = 32;
  ds.classes = 10;
  ds.count = records_per_file * static_cast<int64_t>(files.size());
  ReserveOnHugePages(&ds.pixels, static_cast<size_t>(ds.count * kCifar10ImageBytes));
  ds.labels.reserve(static_cast<size_t>(ds.count));
  for (const std::string& f : files) AppendCifarFile(f, records_per_file, ds);
  ds.mean = {0.4914f, 0.4822f, 0.4465f};
  ds.stddev = {0.2470f, 0.2435f, 0.2616f};
  return ds;
}

}  // namespace ot
