// Parameters that PyTorch 2.x's optimizing dynamo exporter merged because their values were
// equal, taken apart again.
//
// torch.onnx.export(..., dynamo=True) runs onnxscript's optimizer by default (optimize=True),
// and that runs onnx_ir's DeduplicateInitializersPass: initializers of at most 1024 elements
// with the same type, shape and bytes become one, read by every node that read any of them.
// For an inference model that only saves bytes. For a model exported before training it ties
// parameters that PyTorch keeps apart: every LayerNorm's weight (all ones) and bias (all
// zeros) of a fresh transformer become one tensor, so do the biases of layers copied with
// copy.deepcopy (nn.TransformerEncoder's), and training then sums their gradients into that
// one tensor -- another model than the user's, without a word.
//
// The exporter records on each node the module that ran it (metadata
// pkg.torch.onnx.name_scopes). An initializer of at most 1024 elements whose readers ran in
// two or more modules outside its own (its name without the last component: the module that
// owns it) was merged: each such module gets its own copy, named as PyTorch names the
// module's parameter (`encoder.layers.1.norm1.weight` beside `encoder.layers.0.norm1.weight`),
// with the same values. A parameter that one module reads in several nodes, a module's
// parameter read inside its submodules, and tensors over 1024 elements (an embedding tied to
// the output layer) stay as they are.
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"

namespace ot {

// The module scopes the dynamo exporter recorded on `node`, outermost first, the last being
// the node's own op name: "['', 'encoder', 'encoder.layers.0', 'encoder.layers.0.norm1',
// 'layer_norm']" gives {"", "encoder", ..., "layer_norm"}. Empty when the metadata is absent.
std::vector<std::string> NameScopes(const Node& node);

struct MergedInitializersReport {
  int merged = 0;                      // initializers that several modules' readers shared
  std::vector<std::string> restored;  // the copies made, by their new names
  // One line for the user saying what was done ("" when there was nothing to do).
  std::string Describe() const;
};

// Gives each module that read a merged initializer its own copy (see above). Only for models
// written by PyTorch's dynamo exporter (producer "pytorch" and name_scopes metadata).
MergedInitializersReport SeparateMergedInitializers(Model& model);

}  // namespace ot
