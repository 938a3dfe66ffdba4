// Image folders as torchvision's ImageFolder reads them: ROOT/<class>/**/<file>.{jpg,jpeg,png}
// (other files are ignored), classes are the sorted sub-folder names, samples sorted by class
// then path. `imagefolder:DIR` uses DIR/train and DIR/val (or DIR/test) as the two splits when
// DIR/train exists, else holds out a seeded --val-fraction of DIR (or of DIR/train).
#pragma once

#include <string>
#include <vector>

#include "train/data/image_dataset.h"

namespace ot {

struct ImageFolderIndex {
  std::vector<std::string> classes;  // sorted class folder names
  std::vector<std::string> files;    // sorted by class, then by path
  std::vector<int64_t> labels;       // class index of each file
};

// Folder helpers the image readers share: whether `path` is a folder; a folder's entry
// names, sorted (throws ot::Error naming an unreadable one); a .jpg/.jpeg/.png name.
bool IsDir(const std::string& path);
std::vector<std::string> ListDir(const std::string& dir);
bool HasImageExtension(const std::string& name);

// Lists root; throws ot::Error for a missing folder, no class folders, or a class folder
// without images (naming it).
ImageFolderIndex ScanImageFolder(const std::string& root);

// The positions [0, count) split into (train, held-out) by a seeded shuffle; each part is
// sorted. Throws unless 0 < fraction < 1 leaves both parts non-empty.
std::pair<std::vector<int64_t>, std::vector<int64_t>> HoldOut(int64_t count, double fraction, uint64_t seed,
                                                              const std::string& what);

// The split ("train" or "test") of imagefolder:DIR for options.model_input (required: it
// fixes the image size). Files are decoded per batch.
ImageDataset LoadImageFolder(const std::string& dir, const std::string& split, const DataSourceOptions& options);

}  // namespace ot
