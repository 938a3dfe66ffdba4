// The names of the convolution algorithm settings.
#include "runtime/cpu/conv/conv_algorithm.h"

#include "graph/error.h"

namespace ot {

ConvAlgorithm ParseConvAlgorithm(const std::string& name) {
  if (name == "auto") return ConvAlgorithm::kAuto;
  if (name == "direct") return ConvAlgorithm::kDirect;
  if (name == "winograd") return ConvAlgorithm::kWinograd;
  if (name == "taps") return ConvAlgorithm::kTaps;
  if (name == "winograd2") return ConvAlgorithm::kWinograd2;
  if (name == "winograd4") return ConvAlgorithm::kWinograd4;
  throw Error("--conv-algo '" + name + "' is not known; use auto, direct, winograd, taps, winograd2 or winograd4");
}

const char* ConvAlgorithmName(ConvAlgorithm a) {
  switch (a) {
    case ConvAlgorithm::kAuto: return "auto";
    case ConvAlgorithm::kDirect: return "direct";
    case ConvAlgorithm::kWinograd: return "winograd";
    case ConvAlgorithm::kTaps: return "taps";
    case ConvAlgorithm::kWinograd2: return "winograd2";
    case ConvAlgorithm::kWinograd4: return "winograd4";
  }
  return "?";
}

}  // namespace ot
