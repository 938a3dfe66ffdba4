// Image data sets: IDX (MNIST, Fashion-MNIST) loading and normalised batches.
#include "train/image_dataset.h"

#include <sys/stat.h>

#include "graph/error.h"
#include "train/idx_reader.h"

namespace ot {

namespace {
bool Exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}
// "DIR/stem-idx3-ubyte.gz", or the uncompressed name if that is what exists.
std::string FindIdx(const std::string& dir, const std::string& stem) {
  std::string gz = dir + "/" + stem + ".gz";
  if (Exists(gz)) return gz;
  std::string plain = dir + "/" + stem;
  if (Exists(plain)) return plain;
  throw Error("data file '" + gz + "' (or '" + plain + "') is missing" +
              (dir == kFashionMnistDir ? "; install Debian's dataset-fashion-mnist package" : ""));
}
}  // namespace

ImageDataset LoadImageDataset(const std::string& spec, const std::string& split) {
  OT_CHECK(split == "train" || split == "test", "unknown split '%s' (train or test)", split.c_str());
  std::string kind = spec, dir;
  auto colon = spec.find(':');
  if (colon != std::string::npos) {
    kind = spec.substr(0, colon);
    dir = spec.substr(colon + 1);
  }
  ImageDataset ds;
  if (kind == "fashion-mnist" || kind == "mnist") {
    if (dir.empty()) {
      OT_CHECK(kind == "fashion-mnist", "--data mnist needs a folder: mnist:DIR");
      dir = kFashionMnistDir;
    }
    ds.name = kind;
    const std::string prefix = split == "train" ? "train" : "t10k";
    std::string img_path = FindIdx(dir, prefix + "-images-idx3-ubyte");
    std::string lbl_path = FindIdx(dir, prefix + "-labels-idx1-ubyte");
    IdxArray images = ReadIdxFile(img_path);
    IdxArray labels = ReadIdxFile(lbl_path);
    OT_CHECK(images.dims.size() == 3, "'%s' should hold N x 28 x 28 images", img_path.c_str());
    OT_CHECK(labels.dims.size() == 1 && labels.dims[0] == images.dims[0],
             "'%s' holds %lld labels but '%s' holds %lld images", lbl_path.c_str(),
             (long long)(labels.dims.empty() ? 0 : labels.dims[0]), img_path.c_str(), (long long)images.dims[0]);
    ds.count = images.dims[0];
    ds.channels = 1;
    ds.height = images.dims[1];
    ds.width = images.dims[2];
    ds.classes = 10;
    ds.pixels = std::move(images.data);
    ds.labels.reserve(labels.data.size());
    for (size_t i = 0; i < labels.data.size(); ++i) {
      OT_CHECK(labels.data[i] < 10, "'%s': label %d at index %zu is outside [0, 10)", lbl_path.c_str(),
               labels.data[i], i);
      ds.labels.push_back(labels.data[i]);
    }
    if (kind == "fashion-mnist") { ds.mean = {0.2860f}; ds.stddev = {0.3530f}; }
    else { ds.mean = {0.1307f}; ds.stddev = {0.3081f}; }
    return ds;
  }
  throw Error("unknown data set '" + spec + "'; use fashion-mnist, fashion-mnist:DIR or mnist:DIR");
}

HostTensor ImageDataset::Images(const std::vector<int64_t>& indices) const {
  const int64_t n = static_cast<int64_t>(indices.size()), plane = height * width, item = channels * plane;
  HostTensor t(DType::kFloat32, {n, channels, height, width}, "input");
  float* out = t.Data<float>();
  for (int64_t i = 0; i < n; ++i) {
    OT_CHECK(indices[i] >= 0 && indices[i] < count, "sample index %lld is outside the data set (%lld samples)",
             (long long)indices[i], (long long)count);
    const uint8_t* src = pixels.data() + indices[i] * item;
    for (int64_t c = 0; c < channels; ++c) {
      const float scale = 1.f / (255.f * stddev[c]), shift = mean[c] / stddev[c];
      for (int64_t p = 0; p < plane; ++p) out[i * item + c * plane + p] = src[c * plane + p] * scale - shift;
    }
  }
  return t;
}

HostTensor ImageDataset::Labels(const std::vector<int64_t>& indices) const {
  HostTensor t(DType::kInt64, {static_cast<int64_t>(indices.size())}, "labels");
  for (size_t i = 0; i < indices.size(); ++i) t.Data<int64_t>()[i] = labels[static_cast<size_t>(indices[i])];
  return t;
}

}  // namespace ot
