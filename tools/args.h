// A small command-line parser: positional arguments and --flag VALUE / --flag=VALUE /
// boolean --flag, with repeated flags kept in order. Unknown flags are errors.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ot {

// The command whose --help usage errors point to ("see onnx-train eval --help"), and which
// other commands take a flag ("train and export"; "" for none), for the error on a flag
// that this command does not take.
void SetCommandForMessages(const std::string& command,
                           std::function<std::string(const std::string&)> flag_owners = nullptr);
std::string SeeHelp();
// The known flag nearest to `name` (at most two edits, or a prefix either way); "" if none.
std::string SuggestFlag(const std::string& name, const std::set<std::string>& known);
// A flag's value as an integer or a number; throws ot::Error naming the flag otherwise.
int64_t ParseIntFlag(const std::string& flag, const std::string& text);
double ParseNumberFlag(const std::string& flag, const std::string& text);

class Args {
 public:
  // `value_flags` take a value; `bool_flags` do not. Throws ot::Error on unknown flags.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& value_flags,
       const std::set<std::string>& bool_flags);
  const std::vector<std::string>& positional() const { return positional_; }
  bool Has(const std::string& flag) const { return values_.count(flag) != 0; }
  std::string Get(const std::string& flag, const std::string& fallback = "") const;
  std::vector<std::string> GetAll(const std::string& flag) const;
  int64_t GetInt(const std::string& flag, int64_t fallback) const;
  double GetDouble(const std::string& flag, double fallback) const;

 private:
  std::vector<std::string> positional_;
  std::map<std::string, std::vector<std::string>> values_;
};

}  // namespace ot
