// ImageSource and the adaptation of in-memory image data sets to a model's input.
#include "train/data/image_source.h"

#include <malloc.h>

#include <random>

#include "graph/error.h"
#include "train/readers/data_random.h"
#include "train/loader/model_input_check.h"

namespace ot {

ImageSource::ImageSource(std::function<DecodedImage(int64_t)> load, std::function<std::string(int64_t)> name,
                         ImagePipeline pipeline, int workers)
    : load_(std::move(load)), name_(std::move(name)), pipeline_(std::move(pipeline)),
      pool_(std::make_unique<WorkerPool>(std::max(1, workers))) {
  // Decoded images and their resized copies are a few hundred KiB each, above glibc's
  // default mmap threshold: every batch would map, fault in and unmap them afresh (a fifth
  // of the pipeline's time at 224x224). Keep such blocks in the heap instead.
  static const bool tuned = [] {
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    return true;
  }();
  (void)tuned;
}

std::vector<int64_t> ImageSource::SampleDims() const {
  return {pipeline_.channels(), pipeline_.height(), pipeline_.width()};
}

uint64_t SampleSeed(uint64_t seed, int64_t epoch, int64_t batch_index, int64_t place) {
  return StreamSeed(StreamSeed(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(batch_index)),
                    0x1a6e5, static_cast<uint64_t>(place));
}

HostTensor ImageSource::Inputs(const std::vector<int64_t>& indices, const AugmentOptions* augment, int64_t epoch,
                               int64_t batch_index) const {
  const int64_t n = static_cast<int64_t>(indices.size());
  const int64_t c = pipeline_.channels(), h = pipeline_.height(), w = pipeline_.width();
  HostTensor t(DType::kFloat32, {n, c, h, w}, "input");
  float* out = t.Data<float>();
  pool_->ParallelFor(n, [&](int64_t i) {
    const int64_t index = indices[static_cast<size_t>(i)];
    const DecodedImage img = load_(index);
    if (augment) {
      std::mt19937_64 rng(SampleSeed(augment->seed, epoch, batch_index, i));
      pipeline_.Apply(img, augment, &rng, out + i * c * h * w, name_(index));
    } else {
      pipeline_.Apply(img, nullptr, nullptr, out + i * c * h * w, name_(index));
    }
  });
  return t;
}

void AdaptToModel(ImageDataset& ds, const ValueInfo& input, const DataSourceOptions& options) {
  if (ds.source) return;
  const bool image_input = input.has_shape && input.dims.size() == 4 && input.dims[1].IsStatic() &&
                           input.dims[2].IsStatic() && input.dims[3].IsStatic();
  if (!image_input) return;  // CheckImagesFitInput says what does not fit
  const std::vector<int64_t> chw = ImageShapeOfInput(input);
  const bool same = chw[0] == ds.channels && chw[1] == ds.height && chw[2] == ds.width;
  if (same && !options.transforms.Any()) return;
  OT_CHECK(ds.channels == 1 || ds.channels == 3, "data set %s has %lld-channel images; only grey or RGB adapt",
           ds.name.c_str(), (long long)ds.channels);
  ImagePipeline pipeline(options.transforms, chw[0], chw[1], chw[2], ds.mean, ds.stddev);
  auto pixels = std::make_shared<std::vector<uint8_t>>(std::move(ds.pixels));
  ds.pixels.clear();
  const int64_t c = ds.channels, h = ds.height, w = ds.width;
  const std::string name = ds.name;
  auto load = [pixels, c, h, w](int64_t i) {
    DecodedImage img;
    img.height = h;
    img.width = w;
    img.channels = c;
    img.pixels.resize(static_cast<size_t>(c * h * w));
    const uint8_t* src = pixels->data() + i * c * h * w;
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < h * w; ++p) img.pixels[static_cast<size_t>(p * c + ch)] = src[ch * h * w + p];
    return img;
  };
  auto describe = [name](int64_t i) { return name + " sample " + std::to_string(i); };
  const std::string what = pipeline.Describe(c, h, w);
  ds.notes.push_back(name + ": " + ds.ImageShapeString() + " images fed to the model's " + std::to_string(chw[0]) +
                     "x" + std::to_string(chw[1]) + "x" + std::to_string(chw[2]) + " input" +
                     (what.empty() ? "" : " (" + what + ")"));
  ds.mean = pipeline.mean();
  ds.stddev = pipeline.stddev();
  ds.channels = chw[0];
  ds.height = chw[1];
  ds.width = chw[2];
  ds.source = std::make_shared<ImageSource>(load, describe, std::move(pipeline), options.data_workers);
}

}  // namespace ot
