// HostWork: a Work completed by a host thread (the Gloo backend's background thread).
// The thread calls Finish() or Fail(); callers Wait() on a condition variable.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "comm/communicator.h"

namespace ot {

class HostWork : public Work {
 public:
  // before_wait: called by Wait() before it blocks (the backend may run the collective on
  // the waiting thread); may be empty.
  using BeforeWait = std::function<void(const HostWork*)>;
  explicit HostWork(std::string description, BeforeWait before_wait = nullptr)
      : description_(std::move(description)), before_wait_(std::move(before_wait)) {}

  bool IsCompleted() override;
  void Wait(std::chrono::milliseconds timeout = kUntilDone) override;
  std::exception_ptr Error() override;
  std::string Describe() const override { return description_; }
  std::chrono::steady_clock::time_point CompletedAt() override;

  void Finish();
  // error: a CommError (Wait() rethrows it). A second Finish/Fail is ignored.
  void Fail(std::exception_ptr error);

 private:
  const std::string description_;
  const BeforeWait before_wait_;
  std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::chrono::steady_clock::time_point completed_at_;
  std::exception_ptr error_;
};

}  // namespace ot
