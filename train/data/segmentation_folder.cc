// Segmentation image/mask pairs (see segmentation_folder.h).
#include "train/data/segmentation_folder.h"

#include <algorithm>
#include <unistd.h>

#include "graph/error.h"
#include "graph/file_util.h"
#include "train/readers/image_decode.h"
#include "train/data/image_folder.h"
#include "train/data/image_source.h"
#include "train/loader/transforms.h"

namespace ot {

namespace {

struct Pair {
  std::string image, mask;
};

bool IsFile(const std::string& path) { return ::access(path.c_str(), R_OK) == 0 && !IsDir(path); }

std::string Stem(const std::string& name) { return name.substr(0, name.rfind('.')); }

// The pairs of images_dir and masks_dir, by file stem, sorted; names restricts them to a list
// (VOC's ImageSets) when not empty.
std::vector<Pair> PairFolders(const std::string& images_dir, const std::string& masks_dir,
                              const std::vector<std::string>& names = {}) {
  std::vector<Pair> pairs;
  std::vector<std::string> images;
  for (const std::string& n : ListDir(images_dir))
    if (HasImageExtension(n)) images.push_back(n);
  auto image_of = [&](const std::string& stem) -> std::string {
    for (const char* ext : {".jpg", ".jpeg", ".png", ".JPG", ".JPEG", ".PNG"})
      if (IsFile(images_dir + "/" + stem + ext)) return images_dir + "/" + stem + ext;
    return "";
  };
  if (!names.empty()) {
    for (const std::string& stem : names) {
      const std::string image = image_of(stem), mask = masks_dir + "/" + stem + ".png";
      OT_CHECK(!image.empty(), "'%s' lists '%s' but '%s' holds no image of that name (.jpg or .png)",
               (images_dir + "/..").c_str(), stem.c_str(), images_dir.c_str());
      OT_CHECK(IsFile(mask), "the image '%s' has no mask '%s'", image.c_str(), mask.c_str());
      pairs.push_back({image, mask});
    }
    return pairs;
  }
  for (const std::string& n : images) {
    const std::string mask = masks_dir + "/" + Stem(n) + ".png";
    OT_CHECK(IsFile(mask),
             "the image '%s/%s' has no mask '%s'; every image of a segmentation folder needs a PNG mask of the same "
             "name",
             images_dir.c_str(), n.c_str(), mask.c_str());
    pairs.push_back({images_dir + "/" + n, mask});
  }
  OT_CHECK(!pairs.empty(), "'%s' holds no images (.jpg, .jpeg, .png)", images_dir.c_str());
  return pairs;
}

std::vector<std::string> ReadList(const std::string& path) {
  std::vector<std::string> names;
  std::string text = ReadFileBytes(path), line;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '\n') {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty()) names.push_back(line.substr(0, line.find(' ')));
      line.clear();
    } else {
      line += text[i];
    }
  }
  OT_CHECK(!names.empty(), "the list '%s' names no images", path.c_str());
  return names;
}

// The split's pairs and where they come from (for the note).
std::vector<Pair> SplitPairs(const std::string& dir, const std::string& split, const DataSourceOptions& options,
                             std::string* where) {
  auto held_out = [&](std::vector<Pair> all, const std::string& from) {
    const auto parts = HoldOut(static_cast<int64_t>(all.size()), options.val_fraction, options.seed, from);
    std::vector<Pair> out;
    for (int64_t i : split == "train" ? parts.first : parts.second) out.push_back(all[static_cast<size_t>(i)]);
    *where = StrFormat("%s (%s share of --val-fraction %g)", from.c_str(), split == "train" ? "training" : "held-out",
                       options.val_fraction);
    return out;
  };
  if (IsDir(dir + "/train/images")) {
    std::string part = dir + "/train";
    if (split != "train")
      for (const char* name : {"val", "test"})
        if (IsDir(dir + "/" + name + "/images")) {
          part = dir + "/" + name;
          break;
        }
    if (split != "train" && part == dir + "/train") return held_out(PairFolders(part + "/images", part + "/masks"), part);
    *where = part;
    return PairFolders(part + "/images", part + "/masks");
  }
  if (IsDir(dir + "/images")) return held_out(PairFolders(dir + "/images", dir + "/masks"), dir);
  if (IsDir(dir + "/JPEGImages") && IsDir(dir + "/SegmentationClass")) {  // Pascal VOC
    const std::string list = dir + "/ImageSets/Segmentation/" + (split == "train" ? "train" : "val") + ".txt";
    if (IsFile(list)) {
      *where = list;
      return PairFolders(dir + "/JPEGImages", dir + "/SegmentationClass", ReadList(list));
    }
    // Without the lists: the images that have masks (VOC has many more images than masks).
    std::vector<std::string> names;
    for (const std::string& n : ListDir(dir + "/SegmentationClass"))
      if (n.size() > 4 && n.compare(n.size() - 4, 4, ".png") == 0) names.push_back(Stem(n));
    OT_CHECK(!names.empty(), "'%s/SegmentationClass' holds no masks (.png)", dir.c_str());
    return held_out(PairFolders(dir + "/JPEGImages", dir + "/SegmentationClass", names), dir);
  }
  throw Error(StrFormat("'%s' is not a segmentation folder: it needs train/images and train/masks (with val/ or "
                        "test/ alike), or images/ and masks/, or Pascal VOC's JPEGImages/ and SegmentationClass/",
                        dir.c_str()));
}

// Images through the ImagePipeline (no random geometry: the mask could not follow), masks
// resized alike by nearest neighbour as the labels.
class SegmentationSource final : public SampleSource {
 public:
  SegmentationSource(std::shared_ptr<const std::vector<Pair>> pairs, ImagePipeline pipeline, int workers)
      : pairs_(pairs),
        images_([pairs](int64_t i) { return DecodeImageFile((*pairs)[static_cast<size_t>(i)].image); },
                [pairs](int64_t i) { return (*pairs)[static_cast<size_t>(i)].image; }, std::move(pipeline), workers),
        pool_(std::max(1, workers)) {}
  std::vector<int64_t> SampleDims() const override { return images_.SampleDims(); }
  DType InputType() const override { return DType::kFloat32; }
  HostTensor Inputs(const std::vector<int64_t>& indices, const AugmentOptions*, int64_t epoch,
                    int64_t batch_index) const override {
    return images_.Inputs(indices, nullptr, epoch, batch_index);
  }
  bool MakesLabels() const override { return true; }
  HostTensor Labels(const std::vector<int64_t>& indices, int64_t) const override {
    const int64_t n = static_cast<int64_t>(indices.size()), h = images_.pipeline().height(),
                  w = images_.pipeline().width();
    HostTensor t(DType::kInt64, {n, h, w}, "labels");
    int64_t* out = t.Data<int64_t>();
    pool_.ParallelFor(n, [&](int64_t i) {
      const DecodedImage m = DecodeMaskFile((*pairs_)[static_cast<size_t>(indices[static_cast<size_t>(i)])].mask);
      const std::vector<uint8_t> r = ResizeMaskNearest(m.pixels.data(), m.height, m.width, h, w);
      std::copy(r.begin(), r.end(), out + i * h * w);
    });
    return t;
  }

 private:
  std::shared_ptr<const std::vector<Pair>> pairs_;
  ImageSource images_;
  mutable WorkerPool pool_;
};

}  // namespace

std::vector<uint8_t> ResizeMaskNearest(const uint8_t* mask, int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w) {
  std::vector<uint8_t> out(static_cast<size_t>(out_h * out_w));
  for (int64_t y = 0; y < out_h; ++y) {
    const int64_t sy = std::min(in_h - 1, static_cast<int64_t>((static_cast<double>(y) + 0.5) * in_h / out_h));
    for (int64_t x = 0; x < out_w; ++x) {
      const int64_t sx = std::min(in_w - 1, static_cast<int64_t>((static_cast<double>(x) + 0.5) * in_w / out_w));
      out[static_cast<size_t>(y * out_w + x)] = mask[sy * in_w + sx];
    }
  }
  return out;
}

ImageDataset LoadSegmentationFolder(const std::string& dir, const std::string& split, const DataSourceOptions& options) {
  OT_CHECK(!options.transforms.AnyGeometry() && !options.transforms.hflip,
           "--data segmentation:%s: --resize N sets the size, but --center-crop, --random-resized-crop and --hflip "
           "would move the image and not its mask; leave them out",
           dir.c_str());
  std::string where;
  auto pairs = std::make_shared<const std::vector<Pair>>(SplitPairs(dir, split, options, &where));
  // The size: the model's, else --resize N, else the first image's.
  const DecodedImage first = DecodeImageFile(pairs->front().image);
  int64_t c = 3, h = first.height, w = first.width;
  const ValueInfo* in = options.model_input;
  if (in && in->has_shape && in->dims.size() == 4) {
    if (in->dims[1].IsStatic()) c = in->dims[1].value;
    if (in->dims[2].IsStatic() && in->dims[3].IsStatic()) h = in->dims[2].value, w = in->dims[3].value;
    else if (options.transforms.resize > 0) h = w = options.transforms.resize;
  }
  TransformOptions norm;  // normalisation only: the pipeline resizes to h x w
  norm.mean = options.transforms.mean;
  norm.stddev = options.transforms.stddev;
  ImagePipeline pipeline(norm, c, h, w, {}, {});
  ImageDataset ds;
  ds.name = "segmentation:" + dir;
  ds.count = static_cast<int64_t>(pairs->size());
  ds.channels = c, ds.height = h, ds.width = w;
  ds.classes = options.model_classes;
  ds.label_dims = {h, w};
  ds.mean = pipeline.mean();
  ds.stddev = pipeline.stddev();
  const std::string resize = pipeline.Describe(first.channels, first.height, first.width);
  ds.notes.push_back(StrFormat("%s: %lld image/mask pairs, fed to the model's %lldx%lldx%lld input%s; masks [N, %lld, "
                               "%lld] resized by nearest neighbour (no crops or flips: the mask would not follow)",
                               where.c_str(), (long long)ds.count, (long long)c, (long long)h, (long long)w,
                               resize.empty() ? "" : (" (first image: " + resize + ")").c_str(), (long long)h,
                               (long long)w));
  ds.source = std::make_shared<SegmentationSource>(pairs, std::move(pipeline), options.data_workers);
  return ds;
}

}  // namespace ot
