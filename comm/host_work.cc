// HostWork: completion and waiting for collectives run on a host thread.
#include "comm/host_work.h"

namespace ot {

bool HostWork::IsCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void HostWork::Wait(std::chrono::milliseconds timeout) {
  if (before_wait_ && !IsCompleted()) before_wait_(this);
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout.count() < 0) {
    done_cv_.wait(lock, [&] { return done_; });
  } else if (!done_cv_.wait_for(lock, timeout, [&] { return done_; })) {
    throw CommError(CommErrorKind::kTimeout,
                    StrFormat("%s is still running after the caller's wait of %lld ms; it "
                              "goes on (bounded by its own timeout): wait again, or Abort() "
                              "the communicator",
                              description_.c_str(), static_cast<long long>(timeout.count())));
  }
  if (error_) std::rethrow_exception(error_);
}

std::exception_ptr HostWork::Error() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

std::chrono::steady_clock::time_point HostWork::CompletedAt() {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_at_;
}

void HostWork::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    completed_at_ = std::chrono::steady_clock::now();
  }
  done_cv_.notify_all();
}

void HostWork::Fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
  }
  done_cv_.notify_all();
}

}  // namespace ot
