// What a training process learns from its environment, read once here and handed to the
// trainer as options: set by onnx-train's launcher for its workers (line prefixes, the
// terminal, the heartbeat file, the restart count) or by the user (ONNXTRAIN_BIND_ADDR, the
// chaos tests' ONNXTRAIN_FAULT_*). The trainer itself reads no environment.
#pragma once

#include "train/trainer.h"

namespace ot {

// Fills o->output_prefixed, o->output_is_terminal, o->bind_addr (unless --bind-addr set it)
// and installs the step observers the environment asks for:
//  - ONNXTRAIN_HEARTBEAT_FILE: touched at most once a second (the launcher's liveness check);
//  - ONNXTRAIN_FAULT_KILL_AT_STEPS="s0,s1,...": the process SIGKILLs itself when global step
//    s_k is reached in restart k (ONNXTRAIN_RESTART_COUNT); ONNXTRAIN_FAULT_RANK limits that
//    to one rank; ONNXTRAIN_FAULT_MODE=hang stops it (SIGSTOP) instead, as a hung worker.
void ReadWorkerEnvironment(TrainerOptions* o);

}  // namespace ot
