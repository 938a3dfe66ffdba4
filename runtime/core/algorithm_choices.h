// AlgorithmChoices: what kernels chose by timing at plan time (a CPU convolution's
// algorithm per problem and primitive), kept by the executor that planned them (and shared
// with the executors that share its state) so that later plans of the same problem reuse
// them, and saved as text beside checkpoints: a resumed run then runs, and rounds, the way
// the interrupted run did (timing alone could choose otherwise on a busy machine).
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ot {

class AlgorithmChoices {
 public:
  // The choice recorded for problem `key` of `kind`, if any.
  std::optional<std::string> Find(const std::string& kind, const std::string& key) const;
  void Record(const std::string& kind, const std::string& key, const std::string& choice);
  // Every choice, a line "kind<TAB>key<TAB>choice" each, sorted.
  std::string Save() const;
  // Adds the choices of `text` as Save wrote it. Throws ot::Error naming the line when a
  // line is malformed, its kind is not defined or its choice is not one of the kind's.
  void Load(const std::string& text);

  // Declares a kind of choice and the choices it may take; kernels that record choices
  // define their kinds once, at static initialisation (OT_DEFINE_ALGORITHM_CHOICE).
  static void DefineKind(const std::string& kind, std::vector<std::string> choices);

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, std::string> choices_;
};

struct AlgorithmChoiceKind {
  AlgorithmChoiceKind(const std::string& kind, std::vector<std::string> choices) {
    AlgorithmChoices::DefineKind(kind, std::move(choices));
  }
};

}  // namespace ot
