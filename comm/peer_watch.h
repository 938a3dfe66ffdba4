// PeerWatch: notices at once when a peer process dies, even while this rank is blocked on
// a different peer (in a ring or halving-doubling, the ranks next to a dead one may wait on
// each other until their timeout). One thread per peer waits on a dedicated Gloo
// connection that only ever carries a "goodbye" on clean shutdown; a connection error
// instead means the peer is gone, and the callback runs.
//
// InterruptConnections() is what the callback (and Abort) use to wake Gloo's blocked
// waits: Gloo offers no call that fails a pending wait, so it shuts down the sockets of the
// context's pairs (found in /proc/self/fd by their local address); Gloo then reads EOF
// and fails every wait on them with "connection closed".
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gloo {
class Context;
namespace transport {
class Buffer;
}
}  // namespace gloo

namespace ot {

class PeerWatch {
 public:
  // watch: a connected context (no timeout) used only by this class. on_lost(rank) runs on
  // a watcher thread, at most once per peer.
  PeerWatch(std::shared_ptr<gloo::Context> watch, std::function<void(int)> on_lost);
  ~PeerWatch() { Close(std::chrono::milliseconds(0)); }

  // Says goodbye to every peer (a clean exit is not a loss), then waits up to `linger` for
  // every peer's goodbye (or loss) before stopping the watchers: Gloo fails a wait on a
  // connection whose peer has closed even when the data already arrived, so a rank must
  // not close its connections while a peer still finishes the last collective.
  void Close(std::chrono::milliseconds linger);

 private:
  void Watch(int peer);

  std::shared_ptr<gloo::Context> watch_;
  std::function<void(int)> on_lost_;
  std::atomic<bool> closing_{false};
  bool closed_ = false;
  std::mutex mu_;
  std::condition_variable done_cv_;
  int done_ = 0;  // watchers that have finished
  int goodbye_ = 1;
  std::vector<int> received_;
  std::vector<std::unique_ptr<gloo::transport::Buffer>> send_, recv_;
  std::vector<std::thread> threads_;
};

// Shuts down the sockets of every pair of the context so that blocked Gloo calls on them
// fail now. The context is unusable afterwards.
void InterruptConnections(gloo::Context& context);

}  // namespace ot
