#include "proto/rpc/registry.h"

namespace lt::proto {

Status RpcRegistry::add_handler(uint32_t func, RpcHandler h) {
  if (func > kMaxRpcFunc || !h) return Code::kInvalidArg;
  std::unique_lock<std::shared_mutex> g(mu_);
  if (handlers_.count(func) || queues_.count(func)) return Code::kExists;
  auto& fn = handlers_[func];
  fn = std::make_shared<RpcHandler>(std::move(h));
  Slot* page = pages_[func >> 8].load(std::memory_order_relaxed);
  if (page == nullptr) {
    page_store_.emplace_back(new Slot[256]());
    page = page_store_.back().get();
    pages_[func >> 8].store(page, std::memory_order_release);
  }
  page[func & 0xff].store(fn.get(), std::memory_order_release);
  return Status::ok();
}

Status RpcRegistry::add_queue(uint32_t func) {
  if (func > kMaxRpcFunc) return Code::kInvalidArg;
  std::unique_lock<std::shared_mutex> g(mu_);
  if (handlers_.count(func) || queues_.count(func)) return Code::kExists;
  queues_[func] = std::make_unique<RpcQueue>();
  return Status::ok();
}

std::shared_ptr<RpcHandler> RpcRegistry::handler(uint32_t func) const {
  std::shared_lock<std::shared_mutex> g(mu_);
  auto it = handlers_.find(func);
  return it == handlers_.end() ? nullptr : it->second;
}

RpcQueue* RpcRegistry::queue(uint32_t func) const {
  std::shared_lock<std::shared_mutex> g(mu_);
  auto it = queues_.find(func);
  return it == queues_.end() ? nullptr : it->second.get();
}

size_t RpcRegistry::drop_waiting_from(NodeId src) {
  size_t n = 0;
  std::shared_lock<std::shared_mutex> g(mu_);
  for (auto& [func, q] : queues_) {
    std::lock_guard<std::mutex> qg(q->mu);
    n += q->drop_from(src);
  }
  return n;
}

}  // namespace lt::proto
