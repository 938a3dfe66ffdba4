// Data sets of NumPy arrays: `npy:X.npy,Y.npy[,XTEST.npy,YTEST.npy]` and `npz:FILE.npz`
// (arrays x, y and, when present, x_test, y_test; other names with --npz-keys). x is
// [N, ...] of any shape and dtype the model's input takes (float32 images or features,
// int64 token ids; float64 is narrowed to float32, uint8 scaled to [0, 1] as ToTensor does,
// smaller integers widened), y holds N integer labels. Arrays stay memory-mapped; batches
// copy their rows. Without a test split a seeded --val-fraction is held out.
#pragma once

#include <string>

#include "train/data/image_dataset.h"

namespace ot {

// `kind` is "npy" or "npz", `rest` what follows "kind:". options.model_input is required.
ImageDataset LoadNumpyDataset(const std::string& kind, const std::string& rest, const std::string& split,
                              const DataSourceOptions& options);

}  // namespace ot
