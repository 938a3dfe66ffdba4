// Glob patterns over initializer names (--freeze, --train-only, --param-group).
#include "graph/passes/param_patterns.h"

#include <cmath>
#include <cstdlib>

#include "graph/error.h"

namespace ot {

namespace {

// Where the bracket expression opening at pattern[open] ends (the index of its ']'), or
// npos when it is not closed (then '[' is an ordinary character).
size_t ClassEnd(const std::string& pattern, size_t open) {
  size_t i = open + 1;
  if (i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^')) ++i;
  if (i < pattern.size() && pattern[i] == ']') ++i;  // a leading ']' is a member
  const size_t close = pattern.find(']', i);
  return close;
}

// Whether `c` belongs to the bracket expression pattern[open..close].
bool ClassMatches(const std::string& pattern, size_t open, size_t close, char c) {
  size_t i = open + 1;
  bool negate = false;
  if (pattern[i] == '!' || pattern[i] == '^') {
    negate = true;
    ++i;
  }
  bool in = false;
  for (size_t k = i; k < close; ++k) {
    if (k + 2 < close && pattern[k + 1] == '-') {
      in = in || (c >= pattern[k] && c <= pattern[k + 2]);
      k += 2;
    } else {
      in = in || c == pattern[k];
    }
  }
  return in != negate;
}

bool GlobMatches(const std::string& p, const std::string& s) {
  size_t pi = 0, si = 0;
  size_t star = std::string::npos, resume = 0;  // the last '*' and where its run would end
  while (si < s.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      resume = si;
      continue;
    }
    if (pi < p.size()) {
      if (p[pi] == '?') {
        ++pi;
        ++si;
        continue;
      }
      if (p[pi] == '[') {
        const size_t close = ClassEnd(p, pi);
        if (close != std::string::npos) {
          if (ClassMatches(p, pi, close, s[si])) {
            pi = close + 1;
            ++si;
            continue;
          }
        } else if (s[si] == '[') {
          ++pi;
          ++si;
          continue;
        }
      } else if (p[pi] == s[si]) {
        ++pi;
        ++si;
        continue;
      }
    }
    if (star == std::string::npos) return false;
    pi = star + 1;  // let the last '*' take one more character
    si = ++resume;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

}  // namespace

bool NameMatches(const std::string& pattern, const std::string& name) {
  return pattern == name || GlobMatches(pattern, name);
}

std::vector<std::string> SplitPatternList(const std::string& list) {
  std::vector<std::string> out;
  std::string item;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] == '[') {
      const size_t close = ClassEnd(list, i);
      if (close != std::string::npos) {
        item += list.substr(i, close - i + 1);
        i = close;
        continue;
      }
    }
    if (list[i] == ',') {
      if (!Trim(item).empty()) out.push_back(Trim(item));
      item.clear();
    } else {
      item += list[i];
    }
  }
  if (!Trim(item).empty()) out.push_back(Trim(item));
  return out;
}

std::vector<std::string> MatchInitializers(const Graph& graph, const std::vector<std::string>& patterns,
                                           const std::string& flag) {
  std::vector<std::string> out;
  for (const std::string& pattern : patterns) {
    bool any = false;
    for (const HostTensor& t : graph.initializers) any = any || NameMatches(pattern, t.name);
    if (any) continue;
    std::string some;
    for (size_t i = 0; i < graph.initializers.size() && i < 6; ++i)
      some += (i ? ", '" : "'") + graph.initializers[i].name + "'";
    throw Error(StrFormat("%s pattern '%s' matches no initializer of the model; write globs (* ? [..]) over its "
                          "initializer names, which are %s%s (%zu in all)",
                          flag.c_str(), pattern.c_str(), some.empty() ? "none" : some.c_str(),
                          graph.initializers.size() > 6 ? ", ..." : "", graph.initializers.size()));
  }
  for (const HostTensor& t : graph.initializers)
    for (const std::string& pattern : patterns)
      if (NameMatches(pattern, t.name)) {
        out.push_back(t.name);
        break;
      }
  return out;
}

ParamGroup ParseParamGroup(const std::string& spec) {
  ParamGroup g;
  g.spec = spec;
  const size_t colon = spec.rfind(':');
  OT_CHECK(colon != std::string::npos,
           "--param-group '%s' has no settings; write PATTERN:lr=X,wd=Y (e.g. 'fc.*:lr=10x' or "
           "'features.*:lr=0.001,wd=0')",
           spec.c_str());
  g.patterns = SplitPatternList(spec.substr(0, colon));
  OT_CHECK(!g.patterns.empty(), "--param-group '%s' has no pattern before the ':'; write PATTERN:lr=X,wd=Y",
           spec.c_str());
  const std::string settings = spec.substr(colon + 1);
  size_t start = 0;
  bool any = false;
  while (start <= settings.size()) {
    size_t comma = settings.find(',', start);
    if (comma == std::string::npos) comma = settings.size();
    const std::string item = Trim(settings.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key = Trim(item.substr(0, eq));
    std::string value = eq == std::string::npos ? "" : Trim(item.substr(eq + 1));
    const bool factor = key == "lr" && !value.empty() && (value.back() == 'x' || value.back() == 'X');
    if (factor) value.pop_back();
    char* end = nullptr;
    const double v = value.empty() ? std::nan("") : std::strtod(value.c_str(), &end);
    OT_CHECK(key == "lr" || key == "wd" || key == "weight_decay",
             "--param-group '%s': unknown setting '%s'; the settings are lr=X (absolute), lr=Fx (F times the base "
             "lr) and wd=Y",
             spec.c_str(), item.c_str());
    OT_CHECK(!value.empty() && end && *end == '\0' && std::isfinite(v) && v >= 0,
             "--param-group '%s': '%s' needs a number 0 or more (lr=0.001, lr=0.1x, wd=0.0001)", spec.c_str(),
             item.c_str());
    if (key == "lr") {
      (factor ? g.lr_factor : g.lr) = static_cast<float>(v);
      (factor ? g.lr : g.lr_factor) = std::numeric_limits<float>::quiet_NaN();
    } else {
      g.weight_decay = static_cast<float>(v);
    }
    any = true;
  }
  OT_CHECK(any, "--param-group '%s' sets nothing after the ':'; give lr=X, lr=Fx or wd=Y", spec.c_str());
  return g;
}

}  // namespace ot
