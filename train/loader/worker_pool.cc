// WorkerPool: iterations handed out one at a time from a shared counter.
#include "train/loader/worker_pool.h"

#include "graph/error.h"

namespace ot {

WorkerPool::WorkerPool(int threads) {
  OT_CHECK(threads >= 1, "--data-workers must be at least 1");
  for (int i = 1; i < threads; ++i) threads_.emplace_back([this] { Work(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::RunShare() {
  for (;;) {
    int64_t i;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (next_ >= n_) return;
      i = next_++;
    }
    try {
      (*body_)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (error_index_ < 0 || i < error_index_) {
        error_index_ = i;
        error_ = std::current_exception();
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (++finished_ == n_) done_.notify_all();
  }
}

void WorkerPool::Work() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    RunShare();
  }
}

void WorkerPool::ParallelFor(int64_t n, const std::function<void(int64_t)>& body) {
  if (n <= 0) return;
  std::lock_guard<std::mutex> serial(run_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    body_ = &body;
    n_ = n;
    next_ = finished_ = 0;
    error_index_ = -1;
    error_ = nullptr;
    ++generation_;
  }
  start_.notify_all();
  RunShare();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return finished_ == n_; });
    n_ = 0;  // late workers find nothing to take
    body_ = nullptr;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace ot
