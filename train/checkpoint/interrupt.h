// Graceful interruption of a training run. The first SIGINT or SIGTERM only raises a flag
// that the step loop reads between steps: the run finishes its step, writes a recovery
// snapshot and tells the user how to continue. A second signal ends the process at once
// (exit status 130, as a shell reports an interrupted program).
#pragma once

namespace ot {

// Installs the handlers for SIGINT and SIGTERM; the previous ones come back when the guard
// is destroyed. One guard at a time.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
};

// The signal that asked this process to stop (SIGINT or SIGTERM), 0 if none since the
// guard was installed.
int InterruptSignal();

// Exit status of an interrupted run.
constexpr int kInterruptedExitStatus = 130;

}  // namespace ot
