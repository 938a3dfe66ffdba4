// BatchLoader: a producer thread and a bounded queue of prepared batches.
#include "train/loader/batch_loader.h"

#include <algorithm>
#include <utility>

#include "graph/error.h"

namespace ot {

Batch PrepareBatch(const ImageDataset& dataset, std::vector<int64_t> samples, const AugmentOptions& augment,
                   int64_t epoch, int64_t index) {
  Batch b;
  PrepareBatchInto(dataset, std::move(samples), augment, epoch, index, &b);
  return b;
}

void PrepareBatchInto(const ImageDataset& dataset, std::vector<int64_t> samples, const AugmentOptions& augment,
                      int64_t epoch, int64_t index, Batch* b, int threads) {
  b->epoch = epoch;
  b->index = index;
  b->samples = std::move(samples);
  b->real_count = static_cast<int64_t>(b->samples.size());
  b->next = SamplerState{};
  // Checks the indices; token windows make the labels of this epoch's windows.
  b->labels = dataset.source && dataset.source->MakesLabels() ? dataset.source->Labels(b->samples, epoch)
                                                              : dataset.Labels(b->samples);
  b->extra = dataset.ExtraInputs(b->samples);
  if (dataset.source) {  // made on demand, augmented per sample
    b->images = dataset.source->Inputs(b->samples, &augment, epoch, index);
  } else if (augment.Enabled()) {  // crops and flips move the bytes before they are normalised
    HostTensor raw = dataset.RawImages(b->samples);
    AugmentBatch(raw, augment, epoch, index);
    dataset.NormalizeInto(raw, &b->images);
  } else {
    dataset.ImagesInto(b->samples, &b->images, threads);
  }
  EraseBatch(b->images, augment, epoch, index);
}

int64_t QueueDepthFor(int64_t batch_bytes) {
  constexpr int64_t kQueueBytes = int64_t{4} << 20;
  return std::clamp<int64_t>(kQueueBytes / std::max<int64_t>(batch_bytes, 1), 2, 64);
}

bool MakeBatchesOnCaller(const ImageDataset& dataset, int threads, int cores, int step_threads) {
  return !dataset.source && threads >= cores && !(step_threads == 1 && cores > 1);
}

BatchLoader::BatchLoader(const ImageDataset& dataset, DistributedSampler sampler, const BatchLoaderOptions& options)
    : dataset_(dataset), sampler_(std::move(sampler)), options_(options) {
  OT_CHECK(options.queue_depth >= 1, "the batch queue needs room for at least one batch");
  if (options_.on_caller_threads <= 0) thread_ = std::thread([this] { Run(); });
}

BatchLoader::~BatchLoader() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  room_.notify_all();
  thread_.join();
}

void BatchLoader::MakeNext(Batch* b) {
  const SamplerState at = sampler_.State();
  std::vector<int64_t> samples = sampler_.NextBatch();
  PrepareBatchInto(dataset_, std::move(samples), options_.augment, at.epoch, at.position, b,
                   std::max(options_.on_caller_threads, 1));
  b->real_count = sampler_.RealSamplesInBatch(at.position);
  b->next = sampler_.State();
}

void BatchLoader::Run() {
  try {
    while (sampler_.State().epoch < options_.end_epoch) {
      Batch b;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (queue_.size() >= static_cast<size_t>(options_.queue_depth))
          room_.wait(lock, [this] { return stop_ || queue_.size() <= RefillAt(); });
        if (stop_) return;
        if (!spare_.empty()) {
          b = std::move(spare_.back());
          spare_.pop_back();
        }
      }
      MakeNext(&b);  // outside the lock: the consumer may take batches meanwhile
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(b));
      ready_.notify_one();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
  ready_.notify_all();
}

void BatchLoader::PrefetchUpcoming() {
  const int64_t per_call = std::max<int64_t>(1, options_.prefetch_call_bytes / std::max<int64_t>(dataset_.ImageBytes(), 1));
  const int64_t n = std::min(per_call, upcoming_.count - prefetched_);
  if (n <= 0) return;
  dataset_.PrefetchImages(upcoming_.data + prefetched_, n);
  prefetched_ += n;
}

bool BatchLoader::Next(Batch* batch) {
  if (options_.on_caller_threads > 0) {  // made here, in the buffers of the batch given back
    if (sampler_.State().epoch >= options_.end_epoch) return false;
    MakeNext(batch);
    upcoming_ = sampler_.State().epoch < options_.end_epoch && !dataset_.source ? sampler_.UpcomingBatch()
                                                                                : DistributedSampler::IndexView{};
    upcoming_.count = std::min(upcoming_.count, options_.prefetch_bytes / std::max<int64_t>(dataset_.ImageBytes(), 1));
    prefetched_ = 0;
    return true;
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!batch->images.bytes.empty() && spare_.size() < static_cast<size_t>(options_.queue_depth) + 2) {
    spare_.push_back(std::move(*batch));
    *batch = Batch();
  }
  ready_.wait(lock, [this] { return !queue_.empty() || finished_; });
  if (!queue_.empty()) {
    *batch = std::move(queue_.front());
    queue_.pop_front();
    const bool wake = queue_.size() <= RefillAt();
    lock.unlock();
    if (wake) room_.notify_one();
    return true;
  }
  if (error_) std::rethrow_exception(error_);
  return false;
}

}  // namespace ot
