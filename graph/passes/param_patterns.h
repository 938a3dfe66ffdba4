// Glob patterns over initializer names, as fine-tuning recipes write them: --freeze and
// --train-only ('features.*', 'classifier.*,fc.*') and the parameter groups of
// --param-group 'PATTERN:lr=X,wd=Y'. A pattern is fnmatch-style (* any run of characters,
// ? one character, [abc] [a-z] [!a] one of or none of a set; '.' and '/' are ordinary
// characters) and an exact name always matches itself.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace ot {

// True when `name` is `pattern` or matches it as a glob.
bool NameMatches(const std::string& pattern, const std::string& name);

// A comma-separated pattern list; commas inside [..] belong to the pattern. Empty items
// are dropped.
std::vector<std::string> SplitPatternList(const std::string& list);

// The initializers of `graph` that match any of `patterns`, in initializer order. Throws
// ot::Error naming `flag`, the first pattern that matches no initializer and a few of
// the model's initializer names.
std::vector<std::string> MatchInitializers(const Graph& graph, const std::vector<std::string>& patterns,
                                           const std::string& flag);

// One --param-group: the parameters matching `patterns` take its learning rate (absolute,
// or a factor of the base rate that the schedule scales alike) and weight decay; a field
// left NaN keeps the optimizer's default for the parameter.
struct ParamGroup {
  std::string spec;  // as written, for messages
  std::vector<std::string> patterns;
  float lr = std::numeric_limits<float>::quiet_NaN();         // lr=0.001
  float lr_factor = std::numeric_limits<float>::quiet_NaN();  // lr=0.1x
  float weight_decay = std::numeric_limits<float>::quiet_NaN();  // wd=0.0001
};

// Parses "PATTERN[,PATTERN...]:lr=X|lr=Fx,wd=Y" (the last ':' separates the settings).
// Throws ot::Error naming the spec for a missing pattern or setting, an unknown key, or a
// value that is not a number >= 0.
ParamGroup ParseParamGroup(const std::string& spec);

}  // namespace ot
