// PeerWatch and InterruptConnections (see peer_watch.h).
#include "comm/peer_watch.h"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <gloo/context.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/tcp/address.h>

namespace ot {
namespace {

// Gloo slot of the goodbye buffers on the watch context (each pair has its own slots).
constexpr int kGoodbyeSlot = 1;

bool SameAddress(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return x.sin6_port == y.sin6_port &&
           std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof(x.sin6_addr)) == 0;
  }
  return false;
}

}  // namespace

void InterruptConnections(gloo::Context& context) {
  std::vector<sockaddr_storage> locals;
  for (int r = 0; r < context.size; ++r) {
    if (r == context.rank) continue;
    try {
      auto& pair = context.getPair(r);
      if (!pair) continue;
      const auto* address = dynamic_cast<const gloo::transport::tcp::Address*>(&pair->address());
      if (address) locals.push_back(address->getSockaddr());
    } catch (const std::exception&) {
    }
  }
  if (locals.empty()) return;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || fd < 0) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &len) != 0) {
      continue;
    }
    for (const auto& wanted : locals) {
      if (SameAddress(local, wanted)) shutdown(static_cast<int>(fd), SHUT_RDWR);
    }
  }
  closedir(dir);
}

PeerWatch::PeerWatch(std::shared_ptr<gloo::Context> watch, std::function<void(int)> on_lost)
    : watch_(std::move(watch)), on_lost_(std::move(on_lost)) {
  const int n = watch_->size;
  received_.assign(n, 0);
  send_.resize(n);
  recv_.resize(n);
  for (int r = 0; r < n; ++r) {
    if (r == watch_->rank) continue;
    auto& pair = watch_->getPair(r);
    recv_[r] = pair->createRecvBuffer(kGoodbyeSlot, &received_[r], sizeof(int));
    send_[r] = pair->createSendBuffer(kGoodbyeSlot, &goodbye_, sizeof(int));
  }
  for (int r = 0; r < n; ++r) {
    if (r != watch_->rank) threads_.emplace_back([this, r] { Watch(r); });
  }
}

void PeerWatch::Watch(int peer) {
  try {
    recv_[peer]->waitRecv();  // returns on the peer's goodbye
  } catch (const std::exception&) {
    if (!closing_) on_lost_(peer);
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++done_;
  done_cv_.notify_all();
}

void PeerWatch::Close(std::chrono::milliseconds linger) {
  if (closed_) return;
  closed_ = true;
  closing_ = true;
  for (int r = 0; r < watch_->size; ++r) {
    if (r == watch_->rank || !send_[r]) continue;
    try {
      send_[r]->send();
      send_[r]->waitSend();
    } catch (const std::exception&) {
    }
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait_for(lock, linger, [&] { return done_ == static_cast<int>(threads_.size()); });
  }
  InterruptConnections(*watch_);  // wakes the watchers of peers that have not said goodbye
  for (auto& t : threads_) t.join();
  send_.clear();
  recv_.clear();
}

}  // namespace ot
