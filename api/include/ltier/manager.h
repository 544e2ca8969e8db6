// Running an ltier-manager (the cluster manager) inside a process. The
// ltier-manager tool is a thin main() over this.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace ltier {

struct ManagerOptions {
  std::string listen = "127.0.0.1:7700";  // host:port; port 0 picks one
  std::string secret = "ltier-dev-secret";
  uint32_t heartbeat_ms = 200;
  uint32_t down_after_ms = 1500;  // a node silent this long is declared down
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

}  // namespace ltier
