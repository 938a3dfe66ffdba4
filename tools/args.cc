// Command-line parsing.
#include "tools/args.h"

#include "graph/error.h"

namespace ot {

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
      OT_CHECK(!has_value, "option --%s takes no value", name.c_str());
      values_[name].push_back("1");
    } else if (value_flags.count(name)) {
      if (!has_value) {
        OT_CHECK(i + 1 < argv.size(), "option --%s needs a value", name.c_str());
        value = argv[++i];
      }
      values_[name].push_back(value);
    } else {
      throw Error("unknown option --" + name + " (see --help)");
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
  if (!Has(flag)) return fallback;
  std::string v = Get(flag);
  try {
    size_t pos = 0;
    int64_t x = std::stoll(v, &pos);
    if (pos == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw Error("option --" + flag + " expects an integer, got '" + v + "'");
}

static double GetDoubleImpl(const std::string& flag, const std::string& v) {
  try {
    size_t pos = 0;
    double x = std::stod(v, &pos);
    if (pos == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw Error("option --" + flag + " expects a number, got '" + v + "'");
}

double Args::GetDouble(const std::string& flag, double fallback) const {
  return Has(flag) ? GetDoubleImpl(flag, Get(flag)) : fallback;
}

}  // namespace ot
