// Which convolution algorithm the CPU convolutions use (--conv-algo): oneDNN's direct
// convolution, its Winograd F(4x4, 3x3) one (3x3 stride-1 convolutions only; others stay
// direct), or, by default (auto), whichever of the two runs faster on the planned shapes
// for the backward-data and backward-weights primitives, timed once per shape at plan
// time, with the forward direct (Winograd's forward rounds 5-9x PyTorch float32's distance
// from float64; see conv.cc). auto also runs a convolution whose maps fit inside its
// window (a 3x3 on a 2x2 or 1x1 map) as one matrix product per primitive
// (runtime/cpu/conv/conv_dense.h), and a 2D stride-1 convolution whose window is partly padding
// as matrix products over the taps that touch data (runtime/cpu/conv/conv_taps.h) where that
// runs faster than oneDNN's primitive, timed per primitive, or a 3x3 stride-1 pad-1 one as
// our Winograd F(2x2, 3x3) on sgemm (runtime/cpu/conv/conv_winograd.h), or in its backward
// primitives F(4x4, 3x3), where that is faster. taps and winograd2 run every convolution
// they can that way (the others direct); winograd4 runs F(4x4, 3x3) in the backward
// primitives and F(2x2, 3x3) forward. Each executor has its setting
// (ExecutorOptions::conv_algo, KernelSettings::conv_algo), and keeps auto's timed choices
// (Executor::SaveAlgorithmChoices: kinds "winograd" and "own", defined in conv.cc).
#pragma once

#include <string>

namespace ot {

enum class ConvAlgorithm { kAuto, kDirect, kWinograd, kTaps, kWinograd2, kWinograd4 };

// "auto", "direct", "winograd", "taps", "winograd2" or "winograd4"; anything else throws ot::Error naming the choices.
ConvAlgorithm ParseConvAlgorithm(const std::string& name);
const char* ConvAlgorithmName(ConvAlgorithm a);

}  // namespace ot
