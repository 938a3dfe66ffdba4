// Finite-difference tests of the elementwise gradient rules and their kernels.
#include <gtest/gtest.h>

#include "graph/autodiff.h"
#include "runtime/executor.h"
#include "tests/grad_check.h"

namespace ot {
namespace {

using testing::ExpectGradientsMatchFiniteDifferences;
using testing::ModelBuilder;

}  // namespace
}  // namespace ot
