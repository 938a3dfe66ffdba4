// Command-line flags as data: parsing against a table and usage text from it.
#include "tools/flag_table.h"

#include <cctype>
#include <set>

namespace ot {

int64_t FlagValue::Int() const { return ParseIntFlag(flag_, text_); }
double FlagValue::Number() const { return ParseNumberFlag(flag_, text_); }

Args ParseFlags(const std::vector<std::string>& argv, const std::vector<FlagInfo>& table) {
  std::set<std::string> value_flags, bool_flags;
  for (const FlagInfo& f : table) {
    if (!f.name) continue;
    (f.type == FlagType::kBool ? bool_flags : value_flags).insert(f.name);
  }
  return Args(argv, value_flags, bool_flags);
}

std::string TableUsage(const std::vector<FlagInfo>& table) {
  std::string out;
  for (const FlagInfo& f : table) out += f.help;
  return out;
}

namespace {
// Whether `text` names --flag as a whole word ("--mean/--std" names --std, not --st).
bool Names(const std::string& text, const std::string& flag) {
  const std::string word = flag == "o" ? "-o" : "--" + flag;  // -o is spelled with one dash
  for (size_t p = text.find(word); p != std::string::npos; p = text.find(word, p + 1)) {
    const size_t end = p + word.size();
    const bool ends = end == text.size() || !(std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '-');
    if (ends) return true;
  }
  return false;
}
}  // namespace

std::string CommandHelp(const std::string& synopsis, const std::vector<FlagInfo>& table) {
  std::string options;
  for (const FlagInfo& f : table) {
    if (!f.name || Names(synopsis, f.name) || Names(options, f.name)) continue;
    std::string help = f.help;
    for (const FlagInfo& other : table)  // a flag named on another row's lines (--frozen-bn)
      if (help.empty() && Names(other.help, f.name)) help = other.help;
    options += help;
  }
  return synopsis + (options.empty() ? "" : "options:\n" + options);
}

}  // namespace ot
