// The RPC worker pool (engine.rpc_workers > 0): handlers run on these
// threads instead of the progress thread, so they may block. Jobs are taken
// FIFO; stop() lets the workers answer what is queued, then joins them.
// Thread-safe; owns its lock and threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "proto/rpc/registry.h"

namespace lt::proto {

/// A request for a handler on the pool.
struct RpcJob {
  NodeId src = 0;
  uint64_t caller_req = 0;
  std::shared_ptr<RpcHandler> fn;
  std::vector<std::byte> in;
};

class RpcWorkerPool {
 public:
  /// Runs a job with a reply buffer the worker owns.
  using Runner = std::function<void(const RpcJob& job, std::span<std::byte> out)>;
  RpcWorkerPool() = default;
  ~RpcWorkerPool() { stop(); }
  RpcWorkerPool(const RpcWorkerPool&) = delete;
  RpcWorkerPool& operator=(const RpcWorkerPool&) = delete;

  /// Starts `n` workers, each with an `out_bytes` reply buffer.
  void start(uint32_t n, size_t out_bytes, Runner run);
  void push(RpcJob job);
  void stop();

 private:
  void loop(size_t out_bytes);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RpcJob> jobs_;
  bool stop_ = false;
  Runner run_;
  std::vector<std::thread> threads_;
};

}  // namespace lt::proto
