// BatchLoader: prepares training batches (gather, augment, normalise) on a background
// thread, a few batches ahead of the step that needs them, in the sampler's deterministic
// order. PrepareBatch is the same work done directly, for callers without a thread and for
// tests.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

#include "graph/host_tensor.h"
#include "train/loader/augment.h"
#include "train/data/image_dataset.h"
#include "train/loader/sampler.h"

namespace ot {

struct Batch {
  int64_t epoch = 0;
  int64_t index = 0;             // the batch's place in its epoch, from 0
  std::vector<int64_t> samples;  // data set indices
  int64_t real_count = 0;        // leading samples that are not sampler padding (for metrics)
  HostTensor images;             // float32 [n, C, H, W], augmented and normalised (or what a
                                 // SampleSource makes: e.g. int64 token ids [n, L])
  HostTensor labels;             // int64 [n] (token windows: [n, T]; float targets float32)
  std::map<std::string, HostTensor> extra;  // the model's further inputs, by name
  SamplerState next;             // the sampler's state after this batch: a checkpoint taken
                                 // after training on it resumes from here
};

// Images and labels of the given samples; augmentation is seeded by (seed, epoch, index).
// Data sets with a SampleSource (image folders, NumPy arrays, adapted images) make the batch
// there: decoded and transformed on the source's worker pool, augmented per sample.
Batch PrepareBatch(const ImageDataset& dataset, std::vector<int64_t> samples, const AugmentOptions& augment,
                   int64_t epoch, int64_t index);
// The same batch made in `b`, reusing the buffers it holds from an earlier batch: the images
// of an unaugmented image data set are gathered and normalised in one pass (on `threads`
// OpenMP threads), with no allocation once the buffer has the batch's size.
void PrepareBatchInto(const ImageDataset& dataset, std::vector<int64_t> samples, const AugmentOptions& augment,
                      int64_t epoch, int64_t index, Batch* b, int threads = 1);

struct BatchLoaderOptions {
  AugmentOptions augment;
  int64_t end_epoch = 1;    // the loader stops where this epoch would start
  // Batches made ahead of the consumer. A full queue puts the loader to sleep until the
  // consumer has taken half of it, so that a deep queue wakes it once for several batches.
  int64_t queue_depth = 2;
  // > 0: no loader thread; Next makes each batch on the caller's thread, the images gathered
  // by this many OpenMP threads (the step's team). For data held in memory when the step's
  // threads take every core: a loader thread would then run on a core an OpenMP thread
  // spins on, and a barrier waits a scheduler slice for the thread it displaced.
  int on_caller_threads = 0;
  // On the caller's threads: how much of the batch after the one Next returned
  // PrefetchUpcoming may ask the memory system for (its first rows, in bytes), and how much
  // each call asks for (at least one sample): about the cache-line fills a core keeps in
  // flight (a few dozen); more prefetches at once stall the core until lines arrive.
  int64_t prefetch_bytes = int64_t{1} << 20;
  int64_t prefetch_call_bytes = 2048;
};

// Whether batches of `dataset` are best made on the step's own threads (BatchLoaderOptions::
// on_caller_threads): its samples are in memory (no decoding SampleSource) and the step's
// `threads` take all `cores` the process has, unless the step runs its kernels on one
// thread (`step_threads` 1: a small model's plan, Executor::PlanThreadsFor) while there are
// other cores: the loader thread then makes the next batches on an idle core while the step
// runs (SimpleNN b32, 2 cores: the loop's step 0.029 -> 0.020 ms).
bool MakeBatchesOnCaller(const ImageDataset& dataset, int threads, int cores, int step_threads = 0);

// A queue depth for batches of `batch_bytes`: room for about 4 MiB of them, 2 batches at
// least and 64 at most. Short steps of small batches then take many batches per wake-up of
// the loader (each wake-up is a system call on the step's thread); large batches stay 2
// deep, so that the batch a step reads was made recently enough to be in the cache.
int64_t QueueDepthFor(int64_t batch_bytes);

class BatchLoader {
 public:
  // Serves the batches from the sampler's current state to the end of epoch end_epoch - 1.
  // dataset must outlive the loader.
  BatchLoader(const ImageDataset& dataset, DistributedSampler sampler, const BatchLoaderOptions& options);
  // Stops the thread and waits for it, also when batches were left unread.
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The next batch in order; false when all are served. An exception thrown while making a
  // batch is rethrown here, in place of that batch. The batch *batch held before the call
  // goes back to the loader, which makes a later batch in its buffers: views of it (the
  // step's input tensors) must not outlive the call.
  bool Next(Batch* batch);
  // Batches made on the caller's threads: asks the memory system for the rows of a few more
  // samples (prefetch_call_bytes) of the batch after the one Next returned; nothing in the
  // other mode, or once prefetch_bytes of them are asked for. Called between the step's
  // kernels, the rows arrive while the step computes, and the next Next gathers them from
  // the cache.
  void PrefetchUpcoming();

 private:
  void Run();
  void MakeNext(Batch* b);
  // The queue length at or below which a sleeping loader is woken.
  size_t RefillAt() const { return static_cast<size_t>(options_.queue_depth / 2); }

  const ImageDataset& dataset_;
  DistributedSampler sampler_;  // used only by the loader thread
  BatchLoaderOptions options_;

  std::mutex mu_;
  std::condition_variable ready_;  // a batch, the end or an error is there
  std::condition_variable room_;   // the queue has room, or stop was asked
  std::deque<Batch> queue_;
  // Batches the consumer gave back, their buffers to be refilled; with the queue, the one
  // being made and the consumer's, never more than queue_depth + 2 batches are about.
  std::vector<Batch> spare_;
  bool finished_ = false;  // the loader thread made its last batch (or failed)
  bool stop_ = false;      // the destructor asks the thread to end
  std::exception_ptr error_;
  std::thread thread_;
  // On the caller's threads: the batch after the one Next returned, and how many of its
  // samples PrefetchUpcoming has asked for.
  DistributedSampler::IndexView upcoming_;
  int64_t prefetched_ = 0;
};

}  // namespace ot
