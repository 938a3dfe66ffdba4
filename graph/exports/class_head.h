// The class-score head of a classification model as downloaded from a zoo or hub: a final
// Softmax or LogSoftmax over the class axis (possibly followed by Flatten/Reshape/Squeeze),
// scores shaped [N, K, 1, 1] (SqueezeNet, DenseNet-style 1x1-conv heads), and the final
// classifier layer (Gemm, MatMul+Add or a 1x1 Conv) that --num-classes replaces.
#pragma once

#include <cstdint>
#include <string>

#include "graph/ir.h"

namespace ot {

struct ClassHead {
  std::string output;      // the value asked about (a graph output, usually)
  std::string scores;      // the class scores the loss reads: the activation's input, else `output`
  std::string activation;  // "Softmax", "LogSoftmax", or "" when `output` holds the scores
  std::string node;        // the activation node, described ("node 'prob' (Softmax)")
};

// Looks back from `output` through Flatten, Reshape, Squeeze, Identity and Dropout for a
// Softmax or LogSoftmax. Throws ot::Error when that activation is not over the class axis
// (axis 1; before opset 13 also with every axis after it of size 1).
ClassHead FindClassHead(const Model& model, const std::string& output);

// True for class scores shaped [N, K, 1, ...]: every axis after the class axis a static 1
// (the loss then reads them as [N, K], with labels [N]).
bool HasUnitTrailingAxes(const ValueInfo& scores);

// True for per-token scores [N, T, V] with the classes last, as language models write them:
// rank 3, not [N, K, 1], and not made by a convolution (Conv1d's [N, C, L] has its classes on
// axis 1, as PyTorch's cross_entropy reads a rank-3 input), looking back through Softmax,
// LogSoftmax, Identity and Dropout.
bool ScoresHaveClassesLast(const Model& model, const ValueInfo& scores);

// One line for the user about what training does with the head, "" when the output holds
// the scores as they are.
std::string DescribeClassHead(const Model& model, const ClassHead& head);

// Replaces the final classifier (the Gemm, MatMul(+Add) or 1x1 Conv found looking back from
// the first graph output's class scores through Flatten, Reshape, Squeeze, (Global)AveragePool,
// Relu, Dropout, Identity, Softmax and LogSoftmax) with a fresh `classes`-way layer under the
// same initializer names, initialised as PyTorch's nn.Linear/nn.Conv2d (uniform within
// 1/sqrt(fan_in), weight and bias) from `seed`. Constant Reshape targets after it that hold
// the old class count, the graph outputs and the inferred shapes follow. Returns the note
// ("replaced the classifier 'fc' (Gemm 512x1000) with a fresh 5-way layer ..."). Throws
// ot::Error naming the output and what was looked for when there is no such layer.
std::string ReplaceClassifier(Model& model, int64_t classes, uint64_t seed);

}  // namespace ot
