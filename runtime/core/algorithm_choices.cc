// AlgorithmChoices: timed kernel choices, kept per executor and saved as text.
#include "runtime/core/algorithm_choices.h"

#include <algorithm>

#include "graph/error.h"

namespace ot {

namespace {
// Kinds and their choices: definitions made at static initialisation, read-only after.
std::map<std::string, std::vector<std::string>>& Kinds() {
  static std::map<std::string, std::vector<std::string>> kinds;
  return kinds;
}
}  // namespace

void AlgorithmChoices::DefineKind(const std::string& kind, std::vector<std::string> choices) {
  Kinds()[kind] = std::move(choices);
}

std::optional<std::string> AlgorithmChoices::Find(const std::string& kind, const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = choices_.find({kind, key});
  if (it == choices_.end()) return std::nullopt;
  return it->second;
}

void AlgorithmChoices::Record(const std::string& kind, const std::string& key, const std::string& choice) {
  std::lock_guard<std::mutex> lock(mutex_);
  choices_[{kind, key}] = choice;
}

std::string AlgorithmChoices::Save() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string text;
  for (const auto& [kind_key, choice] : choices_) text += kind_key.first + "\t" + kind_key.second + "\t" + choice + "\n";
  return text;
}

void AlgorithmChoices::Load(const std::string& text) {
  std::map<std::pair<std::string, std::string>, std::string> read;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    const size_t a = line.find('\t'), b = line.rfind('\t');
    if (a == std::string::npos || b == a)
      throw Error("algorithm choices: a line that is not 'kind<TAB>key<TAB>choice': '" + line + "'");
    const std::string kind = line.substr(0, a), key = line.substr(a + 1, b - a - 1), choice = line.substr(b + 1);
    auto k = Kinds().find(kind);
    if (k == Kinds().end() || std::find(k->second.begin(), k->second.end(), choice) == k->second.end())
      throw Error("algorithm choices: unknown entry '" + line + "'");
    read[{kind, key}] = choice;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [kind_key, choice] : read) choices_[kind_key] = choice;
}

}  // namespace ot
