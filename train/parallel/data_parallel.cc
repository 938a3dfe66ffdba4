// Data parallelism (see data_parallel.h).
#include "train/parallel/data_parallel.h"

#include <algorithm>

#include "graph/error.h"

namespace ot {

DataParallel::DataParallel(const DataParallelOptions& options) : options_(options), launch_(options.launch) {
  world_ = std::max(launch_.size, 1);
  rank_ = std::max(launch_.rank, 0);
}

void DataParallel::Connect(TrainingSession& session, Device device, const std::string& fingerprint) {
  if (world_ <= 1) return;
  CommConfig cc;
  cc.rank = rank_;
  cc.size = world_;
  cc.local_rank = launch_.local_rank;
  cc.rendezvous = launch_.rendezvous;
  cc.run_id = launch_.run_id.empty() ? "default" : launch_.run_id;
  cc.device = device;
  cc.timeout = options_.timeout;
  cc.listen_host = options_.bind_addr;
  cc.fingerprint = fingerprint;
  comm_ = CreateCommunicator(options_.backend, cc);
  replica_sum_.Bind(comm_.get(), options_.timeout);
  std::vector<std::pair<std::string, int64_t>> grads;
  const TrainingGraph& g = session.graph();
  for (size_t i = 0; i < g.params.size(); ++i)
    grads.emplace_back(g.grads[i], g.model.graph.FindInitializer(g.params[i])->NumElements());
  BucketOptions bo;
  bo.timeout = options_.timeout;
  bo.bucket_bytes = static_cast<size_t>(options_.bucket_cap_mb * (1 << 20));
  reducer_ = std::make_unique<GradientReducer>(*comm_, grads, bo);
}

void DataParallel::BroadcastState(TrainingSession& session) {
  if (!comm_) return;
  std::vector<WorkPtr> works;
  for (const auto& [name, tensor] : session.StateTensors())
    works.push_back(comm_->Broadcast(
        CommBuffer{tensor->raw(), static_cast<size_t>(tensor->numel()), tensor->dtype(), tensor->device()}));
  for (auto& w : works) w->Wait(options_.timeout);
}

std::string DataParallel::Describe(int64_t batch) const {
  if (!comm_) return "";
  const size_t buckets = reducer_->NumBuckets();
  return StrFormat("data parallel: %d ranks over %s, %zu gradient bucket%s; batch %lld per rank (%lld global)", world_,
                   comm_->backend(), buckets, buckets == 1 ? "" : "s", (long long)batch, (long long)batch * world_);
}

RunOptions DataParallel::Hooks() { return reducer_ ? reducer_->Hooks() : RunOptions{}; }

void DataParallel::FinishStep() {
  if (reducer_) reducer_->FinishStep();
}

double DataParallel::last_wait_seconds() const { return reducer_ ? reducer_->last_wait_seconds() : 0.0; }

std::string DataParallel::StepJson() const {
  if (!reducer_) return "";
  const GradientReducer::StepStats& st = reducer_->last_stats();
  return StrFormat(",\"allreduce_ms\":%.3f,\"allreduce_wait_ms\":%.3f,\"buckets\":%zu", 1e3 * st.allreduce_seconds,
                   1e3 * st.wait_seconds, st.buckets);
}

void DataParallel::Sum(std::vector<double>* values) {
  if (!comm_ || values->empty()) return;
  comm_->AllReduce(CommBuffer::Of(values->data(), values->size()))->Wait(options_.timeout);
}

std::vector<std::string> DataParallel::GatherText(const std::string& text) {
  if (!comm_) return {text};
  // Lengths first, then the texts padded to the longest, a byte per float (exact below 2^24).
  float length = static_cast<float>(text.size());
  std::vector<float> lengths(static_cast<size_t>(world_));
  comm_->AllGather(CommBuffer::Of(&length, 1), CommBuffer::Of(lengths.data(), lengths.size()))->Wait(options_.timeout);
  const size_t longest = static_cast<size_t>(*std::max_element(lengths.begin(), lengths.end()));
  std::vector<float> mine(std::max<size_t>(longest, 1), 0.f), all(mine.size() * static_cast<size_t>(world_));
  for (size_t i = 0; i < text.size(); ++i) mine[i] = static_cast<float>(static_cast<unsigned char>(text[i]));
  comm_->AllGather(CommBuffer::Of(mine.data(), mine.size()), CommBuffer::Of(all.data(), all.size()))
      ->Wait(options_.timeout);
  std::vector<std::string> out(static_cast<size_t>(world_));
  for (size_t r = 0; r < out.size(); ++r)
    for (size_t i = 0; i < static_cast<size_t>(lengths[r]); ++i)
      out[r] += static_cast<char>(static_cast<unsigned char>(all[r * mine.size() + i]));
  return out;
}

bool DataParallel::AnyStop(bool here) {
  float flag = here ? 1.f : 0.f;
  if (comm_) comm_->AllReduce(CommBuffer::Of(&flag, 1))->Wait(options_.timeout);
  return flag > 0.f;
}

void DataParallel::Barrier() {
  if (comm_) comm_->Barrier()->Wait(options_.timeout);
}

}  // namespace ot
