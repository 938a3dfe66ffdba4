// The executor options that the environment sets, read once at the entry point (the
// runtime itself reads no environment): ONNXTRAIN_PROFILE (profile every executor and
// print its report to stderr as it ends; =cpu: by the process's CPU time, not the wall clock), ONNXTRAIN_PROFILE_NODES (the report names every
// node), ONNXTRAIN_SERIAL_BELOW_BYTES (ExecutorOptions::serial_below_bytes) and
// ONNXTRAIN_CHANNEL_BLOCK=8|16 (the CPU's blocked activation layout). And the check of the
// --conv-algo flag, which the executor hands to the CPU convolutions unread.
#pragma once

#include <string>

#include "runtime/executor/executor.h"

namespace ot {

// Default options with the environment's settings applied. Throws ot::Error naming the
// variable when a value cannot be read.
ExecutorOptions ExecutorOptionsFromEnvironment();

// The value of --conv-algo for ExecutorOptions::conv_algo; throws ot::Error naming the
// choices when it is not one.
std::string CheckedConvAlgo(const std::string& flag);

}  // namespace ot
