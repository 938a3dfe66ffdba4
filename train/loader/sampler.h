// DistributedSampler: which samples each rank trains on, in which order, batch by batch.
// Like PyTorch's DistributedSampler: each epoch is shuffled with a generator seeded by
// seed + epoch (same order on every rank), padded to a multiple of world_size by repeating
// its first indices, and dealt out round-robin (rank r takes positions r, r + W, ...), so
// every rank has the same number of samples and of batches. The last partial batch is
// kept (50,000 samples at batch 128 on one rank: 391 batches). The shuffle is our own
// Fisher-Yates on std::mt19937_64, so the order is the same on every platform.
#pragma once

#include <cstdint>
#include <vector>

namespace ot {

struct SamplerOptions {
  int64_t dataset_size = 0;
  int64_t batch_size = 1;
  int64_t rank = 0, world_size = 1;
  bool shuffle = true;
  uint64_t seed = 0;
};

// Where a sampler stands; a checkpoint stores these two numbers for an exact resume.
struct SamplerState {
  int64_t epoch = 0;     // the epoch being served
  int64_t position = 0;  // batches of that epoch already handed out
  bool operator==(const SamplerState& o) const { return epoch == o.epoch && position == o.position; }
};

class DistributedSampler {
 public:
  // Throws ot::Error for an empty data set, a batch size < 1 or a rank outside the world.
  explicit DistributedSampler(const SamplerOptions& options);

  const SamplerOptions& options() const { return options_; }
  // Samples per rank per epoch, padding included: ceil(dataset_size / world_size).
  int64_t SamplesPerRank() const { return samples_per_rank_; }
  // Of those, the ones that are not padding (padding comes last in each rank's order).
  int64_t RealSamplesPerRank() const;
  int64_t BatchesPerEpoch() const;
  // Batches of exactly batch_size samples in an epoch (the last partial one left out).
  int64_t FullBatchesPerEpoch() const { return samples_per_rank_ / options_.batch_size; }

  // This rank's samples of an epoch, in order.
  std::vector<int64_t> EpochOrder(int64_t epoch) const;
  // Batch `batch` (0-based) of an epoch order; the last one may be shorter.
  std::vector<int64_t> BatchOf(const std::vector<int64_t>& epoch_order, int64_t batch) const;
  // How many samples of batch `batch` are not padding.
  int64_t RealSamplesInBatch(int64_t batch) const;

  // The next batch of indices; moves the state on (into the next epoch after the last batch).
  std::vector<int64_t> NextBatch();
  // The samples the next NextBatch returns, as a view of the epoch's order, the state left
  // as it is; empty where that epoch's order is not made yet (before its first batch). The
  // view lasts until the next NextBatch or Restore.
  struct IndexView {
    const int64_t* data = nullptr;
    int64_t count = 0;
  };
  IndexView UpcomingBatch() const;
  SamplerState State() const { return state_; }
  // Continues from a saved state. A position equal to BatchesPerEpoch() means the next
  // epoch's start. Throws ot::Error for a state this sampler cannot have.
  void Restore(const SamplerState& state);

 private:
  SamplerOptions options_;
  int64_t samples_per_rank_ = 0;
  SamplerState state_;
  std::vector<int64_t> order_;  // EpochOrder(order_epoch_)
  int64_t order_epoch_ = -1;
};

}  // namespace ot
