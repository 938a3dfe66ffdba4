// Einsum equation parser (see einsum_equation.h).
#include "graph/autodiff/einsum_equation.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "graph/error.h"

namespace ot {
namespace {

EinsumTerm ParseTerm(const std::string& s, const std::string& where, const std::string& equation) {
  EinsumTerm t;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 3, "...") == 0) {
      if (t.has_ellipsis) throw Error(where + ": Einsum equation '" + equation + "' has two ellipses in one term");
      t.has_ellipsis = true;
      t.ellipsis_pos = t.letters.size();
      i += 3;
    } else if (std::isalpha(static_cast<unsigned char>(s[i]))) {
      t.letters += s[i++];
    } else {
      throw Error(where + ": Einsum equation '" + equation + "' has the character '" + std::string(1, s[i]) +
                  "' (labels are letters; terms are separated by ',' and the output follows '->')");
    }
  }
  return t;
}

}  // namespace

std::string EinsumTerm::ToString() const {
  if (!has_ellipsis) return letters;
  return letters.substr(0, ellipsis_pos) + "..." + letters.substr(ellipsis_pos);
}

std::string EinsumEquation::ToString() const {
  std::string s;
  for (size_t i = 0; i < inputs.size(); ++i) s += (i ? "," : "") + inputs[i].ToString();
  return s + "->" + output.ToString();
}

EinsumEquation ParseEinsumEquation(const std::string& equation, const std::string& where) {
  std::string eq;
  for (char c : equation)
    if (!std::isspace(static_cast<unsigned char>(c))) eq += c;
  EinsumEquation e;
  const size_t arrow = eq.find("->");
  const std::string lhs = arrow == std::string::npos ? eq : eq.substr(0, arrow);
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    e.inputs.push_back(ParseTerm(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start),
                                 where, equation));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::map<char, int> count;
  bool any_ellipsis = false;
  for (const EinsumTerm& t : e.inputs) {
    for (char c : t.letters) count[c]++;
    any_ellipsis = any_ellipsis || t.has_ellipsis;
  }
  if (arrow != std::string::npos) {
    e.explicit_output = true;
    e.output = ParseTerm(eq.substr(arrow + 2), where, equation);
    for (size_t i = 0; i < e.output.letters.size(); ++i) {
      const char c = e.output.letters[i];
      if (!count.count(c))
        throw Error(where + ": Einsum equation '" + equation + "': output label '" + std::string(1, c) +
                    "' is in no input");
      if (e.output.letters.find(c, i + 1) != std::string::npos)
        throw Error(where + ": Einsum equation '" + equation + "': output label '" + std::string(1, c) +
                    "' is repeated");
    }
    if (e.output.has_ellipsis && !any_ellipsis)
      throw Error(where + ": Einsum equation '" + equation + "': the output has '...' but no input does");
  } else {
    for (const auto& [c, n] : count)
      if (n == 1) e.output.letters += c;  // std::map: ASCII order
    e.output.has_ellipsis = any_ellipsis;
    e.output.ellipsis_pos = 0;
  }
  return e;
}

}  // namespace ot
