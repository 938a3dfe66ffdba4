// Command-line parsing.
#include "tools/args.h"

#include <algorithm>

#include "graph/error.h"

namespace ot {

namespace {

std::string& CommandName() {
  static std::string name = "train";
  return name;
}

std::function<std::string(const std::string&)>& FlagOwners() {
  static std::function<std::string(const std::string&)> owners;
  return owners;
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

void SetCommandForMessages(const std::string& command, std::function<std::string(const std::string&)> flag_owners) {
  CommandName() = command;
  FlagOwners() = std::move(flag_owners);
}

std::string SeeHelp() { return "see onnx-train " + CommandName() + " --help"; }

std::string SuggestFlag(const std::string& name, const std::set<std::string>& known) {
  std::string best;
  size_t best_d = 3;  // at most two edits away, or a prefix either way (--batch-size, --lr-sched)
  for (const auto& k : known) {
    size_t d = EditDistance(name, k);
    bool prefix = name.size() >= 3 && k.size() >= 3 && (k.rfind(name, 0) == 0 || name.rfind(k, 0) == 0);
    if (prefix) d = std::min<size_t>(d, 2);
    const size_t allowed = prefix || std::min(name.size(), k.size()) >= 5 ? 2 : 1;  // short names: one typo
    if (d <= allowed && d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best;
}

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& value_flags,
           const std::set<std::string>& bool_flags) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() < 2 || a.compare(0, 2, "--") != 0) {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    auto eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (bool_flags.count(name)) {
      OT_CHECK(!has_value, "option --%s takes no value (%s)", name.c_str(), SeeHelp().c_str());
      values_[name].push_back("1");
    } else if (value_flags.count(name)) {
      if (!has_value) {
        OT_CHECK(i + 1 < argv.size(), "option --%s needs a value (%s)", name.c_str(), SeeHelp().c_str());
        value = argv[++i];
      }
      values_[name].push_back(value);
    } else {
      std::set<std::string> known = value_flags;
      known.insert(bool_flags.begin(), bool_flags.end());
      std::string near = SuggestFlag(name, known);
      const std::string owners = FlagOwners() ? FlagOwners()(name) : "";
      if (!owners.empty())  // another command's flag: say whose
        throw Error("unknown option --" + name + " for " + CommandName() + ": " + owners + " take" +
                    (owners.find(" and ") == std::string::npos ? "s" : "") + " it, " + CommandName() + " does not" +
                    (near.empty() ? "" : "; did you mean --" + near + "?") + " (" + SeeHelp() + ")");
      throw Error("unknown option --" + name + (near.empty() ? "" : "; did you mean --" + near + "?") + " (" +
                  SeeHelp() + ")");
    }
  }
}

std::string Args::Get(const std::string& flag, const std::string& fallback) const {
  auto it = values_.find(flag);
  return it == values_.end() ? fallback : it->second.back();
}

std::vector<std::string> Args::GetAll(const std::string& flag) const {
  auto it = values_.find(flag);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::GetInt(const std::string& flag, int64_t fallback) const {
  return Has(flag) ? ParseIntFlag(flag, Get(flag)) : fallback;
}

int64_t ParseIntFlag(const std::string& flag, const std::string& v) {
  try {
    size_t pos = 0;
    int64_t x = std::stoll(v, &pos);
    if (pos == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw Error("option --" + flag + " expects an integer, got '" + v + "'");
}

double ParseNumberFlag(const std::string& flag, const std::string& v) {
  try {
    size_t pos = 0;
    double x = std::stod(v, &pos);
    if (pos == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw Error("option --" + flag + " expects a number, got '" + v + "'");
}

double Args::GetDouble(const std::string& flag, double fallback) const {
  return Has(flag) ? ParseNumberFlag(flag, Get(flag)) : fallback;
}

}  // namespace ot
