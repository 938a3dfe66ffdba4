// The loader refills the batches its consumer hands back (train/batch_loader.h): the refilled
// buffers hold exactly what a fresh batch would, also where the batch size changes (an epoch's
// short last batch, then full ones again) and for queues of any depth; the one-pass gather and
// normalisation (ImageDataset::ImagesInto) gives the values of x / 255 normalised, bit for bit.
#include <gtest/gtest.h>

#include <set>

#include "graph/error.h"
#include "train/batch_loader.h"
#include "train/image_dataset.h"
#include "train/sampler.h"

namespace ot {
namespace {

ImageDataset Synthetic(int64_t count) {
  SyntheticDataOptions o;
  o.count = count;
  o.channels = 3;
  o.height = 5;
  o.width = 7;
  ImageDataset ds = MakeSyntheticDataset(o);
  ds.mean = {0.1f, 0.5f, 0.9f};
  ds.stddev = {0.2f, 0.3f, 0.7f};
  return ds;
}

TEST(BatchRecyclingTest, OnePassImagesAreTheNormalisedBytes) {
  const ImageDataset ds = Synthetic(50);
  const std::vector<int64_t> idx = {7, 3, 49, 0, 3, 21};
  HostTensor out(DType::kFloat32, {100});  // a buffer of another shape, refilled
  ds.ImagesInto(idx, &out);
  ASSERT_EQ(out.dims, (std::vector<int64_t>{6, 3, 5, 7}));
  const int64_t plane = 35, item = 105;
  for (size_t i = 0; i < idx.size(); ++i)
    for (int64_t c = 0; c < 3; ++c) {
      const float scale = 1.f / (255.f * ds.stddev[c]), shift = ds.mean[c] / ds.stddev[c];
      for (int64_t p = 0; p < plane; ++p) {
        const float want = ds.pixels[idx[i] * item + c * plane + p] * scale - shift;
        ASSERT_EQ(out.Data<float>()[static_cast<int64_t>(i) * item + c * plane + p], want) << i << " " << c << " " << p;
      }
    }
  EXPECT_EQ(ds.Normalize(ds.RawImages(idx)).bytes, out.bytes);
}

TEST(BatchRecyclingTest, RefilledBatchesAreFreshBatches) {
  const ImageDataset ds = Synthetic(103);
  SamplerOptions so;
  so.dataset_size = 103;
  so.batch_size = 10;  // 11 batches an epoch, the last of 3 samples
  so.shuffle = true;
  so.seed = 5;
  for (const bool augment : {false, true})
  for (const int64_t depth : {1, 2, 8}) {  // 8: the loader sleeps until 4 are taken
    BatchLoaderOptions lo;
    lo.queue_depth = depth;
    lo.end_epoch = 3;
    lo.augment.random_crop = lo.augment.horizontal_flip = augment;
    lo.augment.random_erase = augment ? 0.5f : 0.f;
    lo.augment.seed = 3;
    DistributedSampler direct(so);
    BatchLoader loader(ds, DistributedSampler(so), lo);
    Batch b;
    std::set<const uint8_t*> buffers;
    int64_t served = 0;
    while (loader.Next(&b)) {
      SCOPED_TRACE(StrFormat("queue depth %lld%s", (long long)depth, augment ? ", augmented" : ""));
      const SamplerState at = direct.State();
      const Batch want = PrepareBatch(ds, direct.NextBatch(), lo.augment, at.epoch, at.position);
      ASSERT_EQ(b.samples, want.samples) << served;
      ASSERT_EQ(b.images.dims, want.images.dims) << served;
      ASSERT_EQ(b.images.bytes, want.images.bytes) << "batch " << served << (augment ? " (augmented)" : "");
      ASSERT_EQ(b.labels.bytes, want.labels.bytes) << served;
      buffers.insert(b.images.bytes.data());
      ++served;
    }
    EXPECT_EQ(served, 3 * 11);
    // Without recycling every batch would have a buffer of its own. With it, at most
    // queue_depth + 2 buffers, each of which may move once when the epoch's short last
    // batch was its first.
    EXPECT_LE(buffers.size(), 2u * (static_cast<size_t>(lo.queue_depth) + 2)) << "batches are not refilled";
  }
}

}  // namespace
}  // namespace ot
