// DistributedSampler: seeded per-epoch shuffle, padding and sharding over ranks.
#include "train/loader/sampler.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "graph/error.h"
#include "train/readers/data_random.h"

namespace ot {

DistributedSampler::DistributedSampler(const SamplerOptions& options) : options_(options) {
  OT_CHECK(options.dataset_size > 0, "the data set is empty: nothing to sample");
  OT_CHECK(options.batch_size > 0, "batch size %lld must be at least 1", (long long)options.batch_size);
  OT_CHECK(options.world_size > 0 && options.rank >= 0 && options.rank < options.world_size,
           "rank %lld is outside the world of %lld ranks", (long long)options.rank, (long long)options.world_size);
  samples_per_rank_ = (options.dataset_size + options.world_size - 1) / options.world_size;
}

int64_t DistributedSampler::RealSamplesPerRank() const {
  // Rank r holds padded positions r, r + W, ...; those below dataset_size are real.
  const int64_t n = options_.dataset_size, r = options_.rank, w = options_.world_size;
  return r < n ? (n - r + w - 1) / w : 0;
}

int64_t DistributedSampler::BatchesPerEpoch() const {
  return (samples_per_rank_ + options_.batch_size - 1) / options_.batch_size;
}

std::vector<int64_t> DistributedSampler::EpochOrder(int64_t epoch) const {
  const int64_t n = options_.dataset_size, w = options_.world_size;
  std::vector<int64_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), int64_t{0});
  if (options_.shuffle) {
    std::mt19937_64 rng(options_.seed + static_cast<uint64_t>(epoch));
    ShuffleInPlace(all, rng);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(samples_per_rank_));
  // Padded position p holds all[p % n]: padding repeats the first indices (cyclically when
  // the world is larger than the data set).
  for (int64_t p = options_.rank; p < samples_per_rank_ * w; p += w) mine.push_back(all[static_cast<size_t>(p < n ? p : p % n)]);
  return mine;
}

std::vector<int64_t> DistributedSampler::BatchOf(const std::vector<int64_t>& epoch_order, int64_t batch) const {
  OT_CHECK(batch >= 0 && batch < BatchesPerEpoch(), "batch %lld is outside the epoch (%lld batches)",
           (long long)batch, (long long)BatchesPerEpoch());
  const size_t begin = static_cast<size_t>(batch * options_.batch_size);
  const size_t end = std::min(epoch_order.size(), begin + static_cast<size_t>(options_.batch_size));
  return std::vector<int64_t>(epoch_order.begin() + static_cast<long>(begin), epoch_order.begin() + static_cast<long>(end));
}

int64_t DistributedSampler::RealSamplesInBatch(int64_t batch) const {
  const int64_t begin = batch * options_.batch_size;
  const int64_t end = std::min(samples_per_rank_, begin + options_.batch_size);
  return std::max<int64_t>(0, std::min(end, RealSamplesPerRank()) - begin);
}

std::vector<int64_t> DistributedSampler::NextBatch() {
  if (order_epoch_ != state_.epoch) {
    order_ = EpochOrder(state_.epoch);
    order_epoch_ = state_.epoch;
  }
  std::vector<int64_t> batch = BatchOf(order_, state_.position);
  if (++state_.position == BatchesPerEpoch()) state_ = SamplerState{state_.epoch + 1, 0};
  return batch;
}

DistributedSampler::IndexView DistributedSampler::UpcomingBatch() const {
  if (order_epoch_ != state_.epoch) return {};
  const int64_t begin = state_.position * options_.batch_size;
  const int64_t end = std::min(static_cast<int64_t>(order_.size()), begin + options_.batch_size);
  return end > begin ? IndexView{order_.data() + begin, end - begin} : IndexView{};
}

void DistributedSampler::Restore(const SamplerState& state) {
  OT_CHECK(state.epoch >= 0 && state.position >= 0 && state.position <= BatchesPerEpoch(),
           "sampler state (epoch %lld, batch %lld) does not fit this run's %lld batches per epoch; was the "
           "batch size, world size or data set changed?",
           (long long)state.epoch, (long long)state.position, (long long)BatchesPerEpoch());
  state_ = state.position == BatchesPerEpoch() ? SamplerState{state.epoch + 1, 0} : state;
}

}  // namespace ot
