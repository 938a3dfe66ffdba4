// What the CUDA tests do without a usable GPU: skip on a machine that has no GPU or no CUDA
// driver at all (CI, laptops), fail with the driver's message on one whose GPU or driver is
// broken (cuda::DeviceCountOrThrow tells the two apart), so a broken GPU host never goes green.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "graph/error.h"
#include "runtime/cuda/cuda_common.h"

namespace ot::testing {

// Empty when the machine has a working GPU or none at all; the driver's error otherwise.
inline std::string BrokenGpuReason() {
  try {
    ::ot::cuda::DeviceCountOrThrow();
    return "";
  } catch (const ::ot::Error& e) {
    return e.what();
  }
}

}  // namespace ot::testing

// In a TEST body or SetUp: fails on a broken GPU host, skips where there is no GPU.
#define OT_REQUIRE_GPU()                                                                         \
  do {                                                                                           \
    const std::string broken_ = ::ot::testing::BrokenGpuReason();                                \
    if (!broken_.empty()) FAIL() << broken_;                                                     \
    if (::ot::cuda::DeviceCount() == 0) GTEST_SKIP() << ::ot::cuda::NoDeviceReason();            \
  } while (0)
