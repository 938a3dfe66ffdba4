// Tensor -> CommBuffer: lets the trainer hand runtime tensors to a Communicator while
// comm/ itself stays independent of the runtime and executor.
#pragma once

#include "comm/communicator.h"
#include "runtime/core/tensor.h"

namespace ot {

inline CommBuffer BufferOf(const Tensor& tensor) {
  return CommBuffer{tensor.raw(), static_cast<size_t>(tensor.numel()), tensor.dtype(),
                    tensor.device()};
}

}  // namespace ot
