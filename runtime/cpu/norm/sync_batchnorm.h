// Synchronised batch normalization (`onnx-train --sync-bn`): the training statistics and
// the gradient of BatchNormalization over the global batch of a data-parallel step, as
// PyTorch's SyncBatchNorm computes them. Each replica sums over its own part of the batch
// (in double, channel_statistics.h) and the sums are added over replicas
// (CrossReplicaSum), so that N replicas at batch B/N normalise and differentiate exactly
// as one at batch B:
//   forward: [sum x, count] summed -> global centre m; [sum (x - m), sum (x - m)^2] summed
//            -> mean and population variance (the same two-pass formula as one replica);
//   backward: [sum dy, sum dy (x - mean), count] summed -> dX with the global means of
//            both; dScale and dBias stay this replica's own (the gradient allreduce
//            averages them, as DDP does).
// The kernels (batchnorm.cc: SyncBatchNormTraining, SyncBatchNormalizationGrad) call these
// with the replicas from KernelContext::cross_replica(); null means one replica.
#pragma once

#include "runtime/cpu/layout/dnnl_util.h"
#include "runtime/core/cross_replica.h"

namespace ot {
namespace cpu {

// mean[c] and var[c] (population variance) of channel c over every replica's x (md as in
// ChannelStatistics).
void GlobalChannelStatistics(const dnnl::memory::desc& md, const float* x, CrossReplicaSum* replicas, float* mean,
                             float* var);

// dx (layout md, as x and dy), dscale and dbias (per channel) of batch normalization in
// training mode whose forward normalised x with the global mean and var.
void GlobalBatchNormGrad(const dnnl::memory::desc& md, const float* dy, const float* x, const float* scale,
                         const float* mean, const float* var, float epsilon, CrossReplicaSum* replicas, float* dx,
                         float* dscale, float* dbias);

}  // namespace cpu
}  // namespace ot
