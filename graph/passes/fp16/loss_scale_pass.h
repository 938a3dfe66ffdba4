// Loss scaling for --amp fp16, written into the training graph (torch.amp.GradScaler's
// arithmetic as graph nodes; the skip/grow/backoff decision is the trainer's, on the
// host: train/amp/loss_scaler.h).
//
//  - the seed gradient (dLoss/dLoss = 1) is multiplied by the scalar input "amp/loss_scale",
//    so the float16 casts of the backward pass carry scaled gradients (small ones survive);
//  - every parameter gradient is multiplied by 1 / scale ("<grad>/unscaled") before
//    anything else reads it: gradient clipping, the optimizer and, data parallel, the
//    allreduce (the reducer's buckets take the unscaled gradients);
//  - an all-finite check over every unscaled gradient: each one's sum, their Sum, times 0
//    (0, or NaN when any element is inf or NaN), Equal to itself -> the bool graph output
//    "amp/grads_finite". Data parallel, it reads the allreduced gradients (a non-finite
//    element on any rank makes the average non-finite on every rank), so all ranks agree;
//  - after the optimizer is appended: each of its state updates (weights and optimizer
//    state, not BatchNorm statistics) becomes Where(amp/grads_finite, new, old), so a step
//    with an inf or NaN gradient leaves them bitwise unchanged.
// The step counter input (the optimizers' T) is the trainer's: it does not count skipped
// steps. Ordinary ONNX ops throughout, so `onnx-train export --amp fp16` shows them.
#pragma once

#include <cstddef>

#include "graph/autodiff/autodiff.h"

namespace ot {

constexpr const char* kLossScaleInput = "amp/loss_scale";
constexpr const char* kGradsFiniteOutput = "amp/grads_finite";

// Before AppendOptimizer (and after AppendGradientAccumulation): scales the seed, unscales
// tg.grads (which then name the unscaled gradients) and adds the finite check. Throws
// ot::Error when the graph already has the names it adds or has no seed gradient.
void InsertLossScaling(TrainingGraph& tg);

// After AppendOptimizer: tg.state_updates[first_update...] (the optimizer's) are gated on
// kGradsFiniteOutput; the updates keep their names (the optimizer's own outputs are renamed).
void GateOptimizerUpdates(TrainingGraph& tg, size_t first_update);

}  // namespace ot
