// CommunicatorReplicaSum: runtime/core/cross_replica.h's sums over replicas on a data-parallel
// run's Communicator, for synchronised batch normalization (--sync-bn). Each sum is a
// blocking allreduce on the communicator's queue, behind any gradient bucket allreduce
// already started: every rank issues both from its one step thread in the graph's order,
// so the collectives match across ranks. Bound to its communicator after connecting
// (the training session, made first, already holds a pointer to this).
#pragma once

#include <chrono>

#include "comm/communicator.h"
#include "runtime/core/cross_replica.h"

namespace ot {

class CommunicatorReplicaSum final : public CrossReplicaSum {
 public:
  void Bind(Communicator* comm, std::chrono::milliseconds timeout) {
    comm_ = comm;
    timeout_ = timeout;
  }
  int replicas() const override { return comm_ ? comm_->size() : 1; }
  void SumInPlace(double* data, size_t count) override {
    OT_CHECK(comm_ != nullptr, "synchronised batch normalization ran before the ranks were connected");
    AllReduceOptions options;
    options.timeout = timeout_;
    comm_->AllReduce(CommBuffer::Of(data, count), options)->Wait(timeout_);
  }

 private:
  Communicator* comm_ = nullptr;
  std::chrono::milliseconds timeout_{0};
};

}  // namespace ot
