// CrossReplicaSum: what a kernel sees of data parallelism. Synchronised batch
// normalization (SyncBatchNormTraining and its gradient) sums per-channel statistics over
// the replicas of a data-parallel step through it. The runtime knows nothing of the comm
// layer: the trainer implements this on its Communicator and hands it to the executor
// (ExecutorOptions::cross_replica), which hands it to every kernel (KernelContext).
#pragma once

#include <cstddef>

namespace ot {

class CrossReplicaSum {
 public:
  virtual ~CrossReplicaSum() = default;
  // How many replicas take part (1: the sums are the local ones).
  virtual int replicas() const = 0;
  // In place and blocking: every replica ends with the element-wise sum over all replicas
  // (each of which gets the same bits). Every replica must make the same calls in the same
  // order (kernels call it from Compute, in graph order). Throws ot::Error on failure.
  virtual void SumInPlace(double* data, size_t count) = 0;
};

}  // namespace ot
