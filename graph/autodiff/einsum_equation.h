// The equation of ONNX's Einsum: terms of letter labels with at most one ellipsis each,
// "->" and an explicit output, or none (implicit mode: the labels that occur once, in
// alphabetical order, after the ellipsis). Parsed once for the CPU kernel and for the
// gradient rule, whose gradients are themselves Einsums.
#pragma once

#include <string>
#include <vector>

namespace ot {

struct EinsumTerm {
  std::string letters;        // the labels, ellipsis left out
  bool has_ellipsis = false;  // "..." stands before letters[ellipsis_pos]
  size_t ellipsis_pos = 0;
  std::string ToString() const;  // "...ij", "i...j", "" (a scalar)
};

struct EinsumEquation {
  std::vector<EinsumTerm> inputs;
  EinsumTerm output;  // explicit, or derived in implicit mode
  bool explicit_output = false;
  std::string ToString() const;  // always explicit: "ij,jk->ik"
};

// Throws ot::Error starting with `where` for malformed equations (characters other than
// letters, ',', '->', '...' and spaces; two ellipses in a term; output labels repeated
// or absent from the inputs; an output ellipsis without one in the inputs).
EinsumEquation ParseEinsumEquation(const std::string& equation, const std::string& where);

}  // namespace ot
