// EtcdMembership's watcher: members coming and going, as etcd reports the
// puts and deletes under P/members/.
#include <chrono>

#include "common/log.h"
#include "proto/etcd/etcd_membership.h"

namespace lt::proto {

using etcd::Json;
using etcd::Kv;

namespace {

constexpr auto kMinBackoff = std::chrono::milliseconds(50);
constexpr auto kMaxBackoff = std::chrono::milliseconds(1000);

}  // namespace

// One watch from the revision after the newest applied; when the stream
// breaks (etcd restarted, or out of reach) another is opened from there,
// with backoff. A revision etcd compacted away meanwhile: the book is read
// again whole and compared.
void EtcdMembership::watcher_loop() {
  const std::string slots = prefix_ + "members/";
  auto backoff = kMinBackoff;
  for (;;) {
    Json create = {{"create_request",
                    {{"key", etcd::b64(slots)},
                     {"range_end", etcd::b64(etcd::prefix_end(slots))},
                     {"start_revision", std::to_string(revision_ + 1)},
                     {"prev_kv", true}}}};
    bool resync = false, heard = false;
    Status s = watch_->run(client_->current(), create, [&](const Json& msg) {
      heard = true;
      return on_watch(msg, &resync);
    });
    if (s.code() == Code::kClosed) return;
    if (resync) (void)load_members(Deadline::after_ms(lease_ms_), true);
    if (heard) backoff = kMinBackoff;
    std::unique_lock<std::mutex> lk(mu_);
    if (cv_.wait_for(lk, backoff, [&] { return stopping_; })) return;
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

// One message of the watch stream; false ends the stream (*resync: read
// the book again first).
bool EtcdMembership::on_watch(const Json& msg, bool* resync) {
  auto res = msg.find("result");
  if (res == msg.end() || !res->is_object()) {
    *resync = true;  // an error from the gateway
    return false;
  }
  if (etcd::num(*res, "compact_revision") > 0 ||
      (res->contains("canceled") && res->at("canceled").is_boolean() && res->at("canceled"))) {
    *resync = true;
    return false;
  }
  auto events = res->find("events");
  if (events == res->end() || !events->is_array()) return true;
  std::lock_guard<std::mutex> g(mu_);
  for (const Json& ev : *events) {
    Kv kv, prev;
    auto k = ev.find("kv");
    if (k == ev.end() || !etcd::decode_kv(*k, &kv)) continue;
    revision_ = std::max(revision_, kv.mod_rev);
    auto type = ev.find("type");
    const bool put = type == ev.end() || *type == "PUT";
    Member m;
    if (put) {
      if (!unseal(kv.key, kv.value, &m)) continue;
      // A node in a slot whose last holder's delete we have not seen: that
      // holder is gone.
      for (auto it = members_.begin(); it != members_.end(); ++it) {
        if (transport::node_slot(it->first) == transport::node_slot(m.node) &&
            it->first != m.node) {
          push(Event::kDown, it->first);
          members_.erase(it);
          break;
        }
      }
      bool fresh = members_.count(m.node) == 0;
      members_[m.node] = m;
      if (fresh && m.node != self_) push(Event::kUp, m.node);
      continue;
    }
    auto p = ev.find("prev_kv");
    if (p == ev.end() || !etcd::decode_kv(*p, &prev) || !unseal(prev.key, prev.value, &m)) continue;
    if (members_.erase(m.node) == 0) continue;
    if (m.node != self_) {
      push(Event::kDown, m.node);
    } else if (!expelled_) {
      LT_WARN("etcd: this node's record (node %u) was deleted: its lease expired", self_);
      expelled_ = true;
      push(Event::kExpelled, self_);
    }
  }
  return true;
}

}  // namespace lt::proto
