// Signal handlers for graceful interruption.
#include "train/checkpoint/interrupt.h"

#include <signal.h>
#include <unistd.h>

namespace ot {

namespace {

volatile sig_atomic_t g_interrupt = 0;
struct sigaction g_old_int, g_old_term;

void OnInterrupt(int sig) {
  if (g_interrupt != 0) {
    // The second signal: the user does not want to wait for the step to finish.
    static const char kMsg[] = "\nonnx-train: interrupted again; exiting now without saving\n";
    ssize_t ignored = ::write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
    (void)ignored;
    ::_exit(kInterruptedExitStatus);
  }
  g_interrupt = sig;
}

}  // namespace

InterruptGuard::InterruptGuard() {
  g_interrupt = 0;
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  sa.sa_flags = SA_RESTART;  // a step blocked in a read or a wait goes on; the flag is read after it
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &g_old_int);
  ::sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptGuard::~InterruptGuard() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
}

int InterruptSignal() { return g_interrupt; }

}  // namespace ot
