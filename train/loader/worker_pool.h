// WorkerPool: a few threads that run the iterations of a loop (the samples of a batch)
// side by side for the data pipeline. Which thread runs which iteration does not change
// any result: iterations write their own outputs and draw their own random numbers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ot {

class WorkerPool {
 public:
  // `threads` >= 1; with 1 the loop runs on the caller's thread.
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs body(i) for i in [0, n) and returns when all are done; the exception of the
  // lowest failing i is rethrown. One loop at a time (callers serialise).
  void ParallelFor(int64_t n, const std::function<void(int64_t)>& body);
  int threads() const { return static_cast<int>(threads_.size()) + 1; }

 private:
  void Work();
  void RunShare();

  std::vector<std::thread> threads_;
  std::mutex mu_, run_mu_;
  std::condition_variable start_, done_;
  const std::function<void(int64_t)>* body_ = nullptr;
  int64_t n_ = 0, next_ = 0, finished_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int64_t error_index_ = -1;
  std::exception_ptr error_;
};

}  // namespace ot
