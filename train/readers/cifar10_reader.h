// Reader for the binary version of CIFAR-10 (cifar-10-batches-bin): each file is a run of
// records of 1 label byte (0..9) and 3072 pixel bytes (1024 red, 1024 green, 1024 blue,
// each 32x32 row-major, i.e. already C x H x W).
#pragma once

#include <cstdint>
#include <string>

#include "train/data/image_dataset.h"

namespace ot {

constexpr int64_t kCifar10ImageBytes = 3 * 32 * 32;
constexpr int64_t kCifar10RecordBytes = 1 + kCifar10ImageBytes;
constexpr int64_t kCifar10RecordsPerFile = 10000;  // in the real files

// Loads split "train" (DIR/data_batch_1.bin .. data_batch_5.bin) or "test"
// (DIR/test_batch.bin). Every file must hold exactly records_per_file records; a missing or
// wrongly sized file, or a label outside [0, 10), throws ot::Error naming the file (and the
// expected size, or the record index). Tests pass a small records_per_file.
ImageDataset ReadCifar10(const std::string& dir, const std::string& split,
                         int64_t records_per_file = kCifar10RecordsPerFile);

}  // namespace ot
