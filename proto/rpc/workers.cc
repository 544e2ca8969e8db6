#include "proto/rpc/workers.h"

#include "proto/wait.h"

namespace lt::proto {

void RpcWorkerPool::start(uint32_t n, size_t out_bytes, Runner run) {
  run_ = std::move(run);
  stop_ = false;
  for (uint32_t i = 0; i < n; ++i) threads_.emplace_back([this, out_bytes] { loop(out_bytes); });
}

void RpcWorkerPool::push(RpcJob job) {
  {
    std::lock_guard<std::mutex> g(mu_);
    jobs_.push_back(std::move(job));
  }
  note_wake();  // a worker may run next on the pushing thread's core
  cv_.notify_one();
}

void RpcWorkerPool::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void RpcWorkerPool::loop(size_t out_bytes) {
  std::unique_ptr<std::byte[]> out(new std::byte[out_bytes]);
  std::span<std::byte> outs(out.get(), out_bytes);
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    cv_.wait(g, [this] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, and nothing left to answer
    RpcJob job = std::move(jobs_.front());
    jobs_.pop_front();
    g.unlock();
    run_(job, outs);
    g.lock();
  }
}

}  // namespace lt::proto
