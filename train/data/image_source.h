// ImageSource: samples that are images of any size and channel count (files of an image
// folder, or in-memory images of another shape than the model's), decoded and transformed
// per batch on a WorkerPool into the model's float C x H x W input.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "train/data/image_dataset.h"
#include "train/loader/transforms.h"
#include "train/loader/worker_pool.h"

namespace ot {

class ImageSource : public SampleSource {
 public:
  // load(i) gives sample i's image (throws ot::Error naming its file); name(i) names it.
  ImageSource(std::function<DecodedImage(int64_t)> load, std::function<std::string(int64_t)> name,
              ImagePipeline pipeline, int workers);
  std::vector<int64_t> SampleDims() const override;
  DType InputType() const override { return DType::kFloat32; }
  HostTensor Inputs(const std::vector<int64_t>& indices, const AugmentOptions* augment, int64_t epoch,
                    int64_t batch_index) const override;
  const ImagePipeline& pipeline() const { return pipeline_; }

 private:
  std::function<DecodedImage(int64_t)> load_;
  std::function<std::string(int64_t)> name_;
  ImagePipeline pipeline_;
  std::unique_ptr<WorkerPool> pool_;
};

// The random stream of sample `place` of training batch (epoch, batch_index).
uint64_t SampleSeed(uint64_t seed, int64_t epoch, int64_t batch_index, int64_t place);

// Makes `ds` (in-memory images) feed `input`: when its size or channels differ, or transform
// flags are given, its samples go through an ImagePipeline (a line in ds.notes says what it
// does). Unchanged otherwise.
void AdaptToModel(ImageDataset& ds, const ValueInfo& input, const DataSourceOptions& options);

}  // namespace ot
