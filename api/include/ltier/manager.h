// Running an ltier-manager (the cluster manager) inside a process. The
// ltier-manager tool is a thin main() over this.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace ltier {

struct ManagerOptions {
  std::string listen = "127.0.0.1:7700";  // host:port; port 0 picks one
  std::string secret = "ltier-dev-secret";
  uint32_t heartbeat_ms = 200;
  uint32_t down_after_ms = 1500;  // a node silent this long is declared down
  // A connection that has not joined within join_timeout_ms is closed, and at
  // most max_unjoined are kept (the oldest is closed for a new one).
  uint32_t join_timeout_ms = 5000;
  uint32_t max_unjoined = 1024;
  // After a restart: fresh joins wait this long (and are answered at its end)
  // while the nodes that outlived the old manager reconnect and claim their
  // ids, locks and names back. 0 admits at once (a first start).
  uint32_t recover_ms = 0;
  // Members at once (1 to 1023). A departed member's slot is reused under a
  // new id, so joins over the cluster's life are not limited.
  uint32_t max_nodes = 1023;
  bool verbose = false;
};

class Manager {
 public:
  explicit Manager(const ManagerOptions& o);
  ~Manager();
  /// Binds; returns 0 or -LT_ERR_*.
  int start();
  std::string address() const;
  /// Serves until `stop` is set.
  int run(const std::atomic<bool>& stop);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A manager on 127.0.0.1 (a port the system picks), served by a thread of
/// this process until destruction: for benchmarks, tests and demos that bring
/// a cluster of their own.
class LocalManager {
 public:
  explicit LocalManager(const std::string& secret) : secret_(secret) {
    ManagerOptions o;
    o.listen = "127.0.0.1:0";
    o.secret = secret;
    manager_ = std::make_unique<Manager>(o);
  }
  ~LocalManager() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  LocalManager(const LocalManager&) = delete;
  LocalManager& operator=(const LocalManager&) = delete;
  /// Binds and starts serving; returns 0 or -LT_ERR_*.
  int start() {
    if (int rc = manager_->start(); rc != 0) return rc;
    address_ = manager_->address();
    thread_ = std::thread([this] { manager_->run(stop_); });
    return 0;
  }
  const std::string& address() const { return address_; }
  const std::string& secret() const { return secret_; }

 private:
  std::string secret_, address_;
  std::unique_ptr<Manager> manager_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ltier
