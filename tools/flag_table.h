// Command-line flags as data. A command declares one table: each row a flag (name, value
// type, default, usage lines, the setting it fills) or a heading of the usage text. The
// table gives the usage text, the set of flags the command accepts, and the parsing:
// ParseFlags() checks the command line against it and Apply() runs each row's setter on the
// command's options struct. Flags that several commands take are declared once
// (tools/shared_flags.h) and lifted into each command's options with In().
#pragma once

#include <functional>
#include <type_traits>
#include <string>
#include <vector>

#include "tools/args.h"

namespace ot {

enum class FlagType {
  kBool,    // --flag
  kInt,     // --flag N
  kNumber,  // --flag X (a real number)
  kText,    // --flag TEXT
  kList,    // --flag TEXT, repeatable (every value kept, in order)
};

// What a command's usage and parser need of a flag.
struct FlagInfo {
  const char* name = nullptr;  // without the dashes; null for a heading row
  FlagType type = FlagType::kBool;
  // Its usage lines, verbatim, each ending in '\n'; "" when another row's lines or the
  // command's synopsis name it (train's "--epochs N (5)   --batch B (32)" line).
  const char* help = "";
};

// A flag's value on the command line (or its default), with readers whose errors name the
// flag; args() gives the other flags for the few settings that depend on them.
class FlagValue {
 public:
  FlagValue(const Args& args, const char* flag, std::string text) : args_(args), flag_(flag), text_(std::move(text)) {}
  const std::string& Text() const { return text_; }
  int64_t Int() const;
  double Number() const;
  float Float() const { return static_cast<float>(Number()); }
  // Every value of a repeatable flag.
  std::vector<std::string> All() const { return args_.GetAll(flag_); }
  const char* flag() const { return flag_; }
  const Args& args() const { return args_; }

 private:
  const Args& args_;
  const char* flag_;
  std::string text_;
};

// One row of a command's table over its options struct T.
template <typename T>
struct Flag {
  FlagInfo info;
  // Fills the setting; called once when the flag is given (with its last value) or, when it
  // is not and `fallback` is set, with the fallback. Null: the command reads it from Args.
  std::function<void(T&, const FlagValue&)> set;
  const char* fallback = nullptr;
};

template <typename T>
using FlagTable = std::vector<Flag<T>>;

// A heading row of the usage text ("data:\n").
template <typename T>
Flag<T> Heading(const char* text) {
  return Flag<T>{FlagInfo{nullptr, FlagType::kBool, text}, nullptr, nullptr};
}

// A row that fills a field of T directly: bool (true when given), integers, floating point
// or text, by the field's type.
template <typename T, typename F>
Flag<T> Field(const FlagInfo& info, F T::*field, const char* fallback = nullptr) {
  return Flag<T>{info,
                 [field](T& o, const FlagValue& v) {
                   if constexpr (std::is_same_v<F, bool>) {
                     o.*field = true;
                   } else if constexpr (std::is_integral_v<F>) {
                     o.*field = static_cast<F>(v.Int());
                   } else if constexpr (std::is_floating_point_v<F>) {
                     o.*field = static_cast<F>(v.Number());
                   } else {
                     o.*field = v.Text();
                   }
                 },
                 fallback};
}

// A row of an inner options struct (a flag declared once for DataSourceOptions) as a row
// of the struct that holds it (TrainerOptions::data_source).
template <typename Outer, typename Inner>
Flag<Outer> In(Inner Outer::*member, const Flag<Inner>& f) {
  Flag<Outer> out{f.info, nullptr, f.fallback};
  if (f.set) out.set = [member, set = f.set](Outer& o, const FlagValue& v) { set(o.*member, v); };
  return out;
}
template <typename Outer, typename Inner>
FlagTable<Outer> In(Inner Outer::*member, const FlagTable<Inner>& rows) {
  FlagTable<Outer> out;
  for (const auto& f : rows) out.push_back(In(member, f));
  return out;
}

// The same row with another default (export's --momentum 0.9).
template <typename T>
Flag<T> WithFallback(Flag<T> f, const char* fallback) {
  f.fallback = fallback;
  return f;
}

// A row that the command reads from Args itself (-o, --input).
template <typename T>
Flag<T> Read(const FlagInfo& info) {
  return Flag<T>{info, nullptr, nullptr};
}

template <typename T>
std::vector<FlagInfo> Infos(const FlagTable<T>& table) {
  std::vector<FlagInfo> out;
  for (const auto& f : table) out.push_back(f.info);
  return out;
}

// Parses argv against the flags of `table` (heading rows are skipped): the flags' names and
// whether they take a value. Throws ot::Error for a flag the table does not hold.
Args ParseFlags(const std::vector<std::string>& argv, const std::vector<FlagInfo>& table);

// Runs the setters of `table` on `options`, in table order.
template <typename T>
void Apply(const FlagTable<T>& table, const Args& args, T* options) {
  for (const auto& f : table) {
    if (!f.info.name || !f.set) continue;
    if (args.Has(f.info.name)) {
      f.set(*options, FlagValue(args, f.info.name, args.Get(f.info.name)));
    } else if (f.fallback) {
      f.set(*options, FlagValue(args, f.info.name, f.fallback));
    }
  }
}

// The rows' usage lines in order (headings included).
std::string TableUsage(const std::vector<FlagInfo>& table);
// A command's --help: its synopsis, then "options:" and the usage lines of every flag that
// the synopsis does not name already.
std::string CommandHelp(const std::string& synopsis, const std::vector<FlagInfo>& table);

}  // namespace ot
