// The loader refills the batches its consumer hands back (train/loader/batch_loader.h): the refilled
// buffers hold exactly what a fresh batch would, also where the batch size changes (an epoch's
// short last batch, then full ones again) and for queues of any depth; the one-pass gather and
// normalisation (ImageDataset::ImagesInto) gives the values of x / 255 normalised, bit for bit,
// on one thread or several, with the vector path's values equal to the scalar formula's for every
// byte value; batches made on the caller's thread (no loader thread) are the same, also when
// the next batch's rows are prefetched between them; the sampler's upcoming batch is the one
// its next NextBatch returns.
#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

#include "graph/error.h"
#include "train/loader/batch_loader.h"
#include "train/data/image_dataset.h"
#include "train/loader/sampler.h"

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

// Every byte value, in planes of 784 (Fashion-MNIST: 98 vectors of 8) and 35 (4 vectors and
// a tail of 3): the vectorised conversion gives x * scale - shift rounded as the scalar
// product and difference are (no fused multiply-add), bit for bit.
TEST(BatchRecyclingTest, VectorNormalisationIsTheScalarFormulaForEveryByte) {
  for (const auto& [h, w] : std::vector<std::pair<int64_t, int64_t>>{{28, 28}, {5, 7}}) {
    ImageDataset ds;
    ds.name = "bytes";
    ds.count = 4;
    ds.channels = 1;
    ds.height = h;
    ds.width = w;
    ds.classes = 2;
    ds.mean = {0.2860f};
    ds.stddev = {0.3530f};
    const int64_t item = h * w;
    for (int64_t i = 0; i < ds.count * item; ++i) ds.pixels.push_back(static_cast<uint8_t>((i * 7 + i / 256) % 256));
    ds.labels = {0, 1, 0, 1};
    const std::vector<int64_t> idx = {3, 0, 2, 1};
    HostTensor out;
    ds.ImagesInto(idx, &out);
    const float scale = 1.f / (255.f * ds.stddev[0]), shift = ds.mean[0] / ds.stddev[0];
    for (size_t i = 0; i < idx.size(); ++i)
      for (int64_t p = 0; p < item; ++p) {
        volatile float product = static_cast<float>(ds.pixels[idx[i] * item + p]) * scale;  // rounded here
        const float want = product - shift;
        ASSERT_EQ(out.Data<float>()[static_cast<int64_t>(i) * item + p], want) << h << "x" << w << " " << i << " " << p;
      }
  }
}

TEST(BatchRecyclingTest, UpcomingBatchIsTheNextBatch) {
  SamplerOptions so;
  so.dataset_size = 23;
  so.batch_size = 5;  // 5 batches an epoch, the last of 3 samples
  so.shuffle = true;
  so.seed = 9;
  DistributedSampler s(so);
  EXPECT_EQ(s.UpcomingBatch().count, 0) << "no order is made before the first batch";
  for (int64_t k = 0; k < 12; ++k) {
    const DistributedSampler::IndexView up = s.UpcomingBatch();
    const SamplerState before = s.State();
    const std::vector<int64_t> next = s.NextBatch();
    if (up.count == 0) {  // only where the epoch's order is not made yet: its first batch
      EXPECT_EQ(before.position, 0) << k;
      continue;
    }
    EXPECT_EQ(std::vector<int64_t>(up.data, up.data + up.count), next) << "batch " << k;
  }
  s.Restore(SamplerState{1, 3});
  const std::vector<int64_t> order = s.EpochOrder(1);
  s.NextBatch();  // makes epoch 1's order
  const DistributedSampler::IndexView up = s.UpcomingBatch();
  EXPECT_EQ(std::vector<int64_t>(up.data, up.data + up.count), std::vector<int64_t>(order.begin() + 20, order.end()));
  EXPECT_EQ(s.State().position, 4) << "UpcomingBatch leaves the state as it is";
}

TEST(BatchRecyclingTest, ThreadsShareTheSamplesWithTheSameValues) {
  const ImageDataset ds = Synthetic(50);
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < 400; ++i) idx.push_back((i * 17 + 5) % 50);  // 400 samples: 3 shares of 128 or more
  HostTensor one, three;
  ds.ImagesInto(idx, &one, 1);
  ds.ImagesInto(idx, &three, 3);
  EXPECT_EQ(one.dims, three.dims);
  EXPECT_EQ(one.bytes, three.bytes);
  EXPECT_EQ(ds.Normalize(ds.RawImages(idx)).bytes, three.bytes);
}

TEST(BatchRecyclingTest, RefilledBatchesAreFreshBatches) {
  const ImageDataset ds = Synthetic(103);
  SamplerOptions so;
  so.dataset_size = 103;
  so.batch_size = 10;  // 11 batches an epoch, the last of 3 samples
  so.shuffle = true;
  so.seed = 5;
  for (const bool augment : {false, true})
  // (queue depth, on-caller threads): 8: the loader sleeps until 4 are taken; on-caller
  // threads > 0: no loader thread, each batch made in Next.
  for (const auto& [depth, on_caller] : std::vector<std::pair<int64_t, int>>{{1, 0}, {2, 0}, {8, 0}, {2, 1}, {2, 3}}) {
    BatchLoaderOptions lo;
    lo.queue_depth = depth;
    lo.on_caller_threads = on_caller;
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
      for (int i = 0; i < 20; ++i) loader.PrefetchUpcoming();  // as the trainer does between kernels
      SCOPED_TRACE(StrFormat("queue depth %lld, on-caller threads %d%s", (long long)depth, on_caller,
                             augment ? ", augmented" : ""));
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

// Where batches are made: on the step's threads when they take every core, on a loader
// thread when a core is left over (fewer threads than cores, or a step that runs its kernels
// on one thread on a machine of several cores), and always on the loader thread for data
// that a SampleSource decodes.
TEST(BatchRecyclingTest, BatchesAreMadeWhereACoreIsFree) {
  const ImageDataset ds = Synthetic(10);
  EXPECT_TRUE(MakeBatchesOnCaller(ds, 2, 2));
  EXPECT_TRUE(MakeBatchesOnCaller(ds, 2, 2, 2));     // the step's kernels take both cores
  EXPECT_FALSE(MakeBatchesOnCaller(ds, 2, 2, 1));    // a one-thread step leaves a core idle
  EXPECT_TRUE(MakeBatchesOnCaller(ds, 1, 1, 1));     // one core: nothing to overlap with
  EXPECT_FALSE(MakeBatchesOnCaller(ds, 1, 2, 1));    // fewer threads than cores
  EXPECT_TRUE(MakeBatchesOnCaller(ds, 4, 2, 4));
  EXPECT_TRUE(MakeBatchesOnCaller(ds, 4, 2, 0));     // not a CPU step
}

}  // namespace
}  // namespace ot
