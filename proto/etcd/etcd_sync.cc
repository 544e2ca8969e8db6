// EtcdMembership's name directory, locks and barriers: keys on this node's
// lease, so whatever a node holds goes when it does.
//
// A lock is a queue of request keys under P/locks/<name>\0; etcd orders
// them by creation revision and the oldest holds the lock (FIFO-fair, as
// the manager's). A barrier has a generation key and, per generation, one
// arrival key per caller; the caller that sees `count` arrivals raises the
// generation and clears them, in one txn. Waiters look again with backoff
// up to kMaxPoll (etcd's gateway serves no blocking wait that a client
// timeout could withdraw safely).
#include <atomic>
#include <chrono>
#include <thread>

#include "proto/etcd/etcd_membership.h"

namespace lt::proto {

using etcd::Json;
using etcd::Kv;
using etcd::succeeded;
using etcd::txn_kvs;

namespace {

constexpr auto kMinPoll = std::chrono::milliseconds(1);
constexpr auto kMaxPoll = std::chrono::milliseconds(20);
constexpr uint64_t kLookRetryNs = 1'000'000'000;

// Sleeps for the next backoff step, not past `d`.
void pause(std::chrono::milliseconds* step, Deadline d) {
  auto left = std::chrono::milliseconds(std::max(d.remaining_ms(), 0));
  std::this_thread::sleep_for(std::min(*step, left));
  *step = std::min(*step * 2, kMaxPoll);
}

Json compare_value(const std::string& key, const std::string& value) {
  return {{"key", etcd::b64(key)},
          {"target", "VALUE"},
          {"result", "EQUAL"},
          {"value", etcd::b64(value)}};
}

}  // namespace

Status EtcdMembership::register_name(const std::string& name, Deadline d) {
  const std::string key = prefix_ + "names/" + name;
  Result<Json> r =
      client_->call("/v3/kv/txn",
                    etcd::txn(Json::array({etcd::compare_rev(key, "CREATE", 0)}),
                              Json::array({etcd::put_of(key, std::to_string(self_), lease_)})),
                    d);
  if (!r.is_ok()) return r.status();
  return succeeded(*r) ? Status::ok() : Status(Code::kExists);
}

Status EtcdMembership::unregister_name(const std::string& name, Deadline d) {
  const std::string key = prefix_ + "names/" + name;
  Result<Json> r = client_->call(
      "/v3/kv/txn",
      etcd::txn(Json::array({compare_value(key, std::to_string(self_))}),
                Json::array({etcd::delete_of(key)}), Json::array({etcd::range_of(key)})),
      d);
  if (!r.is_ok()) return r.status();
  if (succeeded(*r)) return Status::ok();
  return txn_kvs(*r, 0).empty() ? Code::kNotFound : Code::kPerm;
}

Result<NodeId> EtcdMembership::lookup_name(const std::string& name, Deadline d) {
  Result<Json> r =
      client_->call("/v3/kv/range", Json{{"key", etcd::b64(prefix_ + "names/" + name)}}, d);
  if (!r.is_ok()) return r.status();
  std::vector<Kv> kvs = etcd::kvs_of(*r);
  if (kvs.empty()) return Code::kNotFound;
  unsigned long id = std::strtoul(kvs[0].value.c_str(), nullptr, 10);
  if (id == 0 || id > UINT32_MAX) return Code::kMalformed;
  return static_cast<NodeId>(id);
}

std::string EtcdMembership::lock_key(const std::string& name, uint64_t owner) const {
  std::string k = prefix_ + "locks/" + name;
  k += '\0';
  return k + std::to_string(self_) + "." + std::to_string(owner);
}

Status EtcdMembership::lock(const std::string& name, uint64_t owner, Deadline d) {
  const std::string key = lock_key(name, owner);
  const std::string queue = key.substr(0, key.rfind('\0') + 1);
  Result<Json> r = client_->call("/v3/kv/txn",
                                 etcd::txn(Json::array({etcd::compare_rev(key, "CREATE", 0)}),
                                           Json::array({etcd::put_of(key, "", lease_)})),
                                 d);
  if (!r.is_ok()) return r.status();
  if (!succeeded(*r)) return Code::kExists;  // not reentrant: it holds or waits already
  const Json oldest = {{"key", etcd::b64(queue)},
                       {"range_end", etcd::b64(etcd::prefix_end(queue))},
                       {"sort_order", "ASCEND"},
                       {"sort_target", "CREATE"},
                       {"limit", "1"}};
  auto step = kMinPoll;
  uint64_t failing_since = 0;  // when the looks began to fail; 0 while they work
  for (;;) {
    r = client_->call("/v3/kv/range", oldest, d);
    if (r.is_ok()) {
      failing_since = 0;
      std::vector<Kv> kvs = etcd::kvs_of(*r);
      if (!kvs.empty() && kvs[0].key == key) return Status::ok();
    } else if (failing_since == 0) {
      failing_since = now_ns();
    }
    // A look that failed is tried again for up to kLookRetryNs (etcd may
    // have just restarted, or a kept connection died with it).
    const bool gave_up = failing_since != 0 && now_ns() - failing_since > kLookRetryNs;
    if (gave_up || d.expired()) {
      // Withdrawn (best effort: if etcd is out of reach, the key goes with
      // the lease or with an unlock).
      (void)client_->call("/v3/kv/deleterange", Json{{"key", etcd::b64(key)}},
                          Deadline::after_ms(1000));
      return r.is_ok() ? Status(Code::kTimedOut) : r.status();
    }
    pause(&step, d);
  }
}

Status EtcdMembership::unlock(const std::string& name, uint64_t owner, Deadline d) {
  const std::string key = lock_key(name, owner);
  Result<Json> r =
      client_->call("/v3/kv/txn",
                    etcd::txn(Json::array({etcd::compare_rev(key, "CREATE", 0, "GREATER")}),
                              Json::array({etcd::delete_of(key)})),
                    d);
  if (!r.is_ok()) return r.status();
  return succeeded(*r) ? Status::ok() : Status(Code::kPerm);
}

Status EtcdMembership::barrier(const std::string& name, uint32_t count, Deadline d) {
  if (count == 0 || count > kMaxBarrierCount) return Code::kInvalidArg;
  static std::atomic<uint64_t> arrivals{0};
  std::string base = prefix_ + "barriers/" + name;
  base += '\0';
  const std::string gkey = base + "g", want = std::to_string(count);
  const std::string me = std::to_string(self_) + "." + std::to_string(++arrivals);
  auto at_gen = [&](uint64_t g) {
    std::string p = base + "a" + std::to_string(g);
    p += '\0';
    return p;
  };
  // Arrive in the current generation (the txn fails if it moved on).
  uint64_t gen = 0;
  for (;;) {
    if (d.expired()) return Code::kTimedOut;
    Result<Json> r = client_->call("/v3/kv/range", Json{{"key", etcd::b64(gkey)}}, d);
    if (!r.is_ok()) return r.status();
    std::vector<Kv> kvs = etcd::kvs_of(*r);
    gen = kvs.empty() ? 0 : std::strtoull(kvs[0].value.c_str(), nullptr, 10);
    int64_t rev = kvs.empty() ? 0 : kvs[0].mod_rev;
    r = client_->call("/v3/kv/txn",
                      etcd::txn(Json::array({etcd::compare_rev(gkey, "MOD", rev)}),
                                Json::array({etcd::put_of(at_gen(gen) + me, want, lease_)})),
                      d);
    if (!r.is_ok()) return r.status();
    if (succeeded(*r)) break;
  }
  const std::string mine = at_gen(gen) + me;
  auto step = kMinPoll;
  for (;;) {
    Result<Json> r = client_->call(
        "/v3/kv/txn",
        etcd::txn(Json::array(),
                  Json::array({etcd::range_of(gkey), etcd::range_prefix(at_gen(gen))})),
        Deadline::after_ms(std::max(d.remaining_ms(), 1000)));
    if (!r.is_ok()) return r.status();
    std::vector<Kv> g = txn_kvs(*r, 0), arrived = txn_kvs(*r, 1);
    if (!g.empty() && std::strtoull(g[0].value.c_str(), nullptr, 10) > gen) return Status::ok();
    const int64_t rev = g.empty() ? 0 : g[0].mod_rev;
    // The first arrival fixes the count, as with the manager: an arrival
    // with another count is refused, and not counted by the others.
    const Kv* first = nullptr;
    size_t agree = 0;
    for (const Kv& a : arrived) {
      if (first == nullptr || a.create_rev < first->create_rev) first = &a;
      agree += a.value == want;
    }
    const bool mismatch = first != nullptr && first->value != want;
    if (mismatch || agree >= count || d.expired()) {
      // Release the generation, or take this arrival back (a mismatched
      // count, or the deadline); either only if the generation is unmoved.
      const bool release = !mismatch && agree >= count;
      Json ops = release ? Json::array({etcd::put_of(gkey, std::to_string(gen + 1)),
                                        etcd::delete_prefix(at_gen(gen))})
                         : Json::array({etcd::delete_of(mine)});
      r = client_->call("/v3/kv/txn",
                        etcd::txn(Json::array({etcd::compare_rev(gkey, "MOD", rev)}), ops),
                        Deadline::after_ms(1000));
      if (!r.is_ok()) return r.status();
      if (!succeeded(*r)) continue;  // the generation moved: look again
      if (release) return Status::ok();
      return mismatch ? Code::kInvalidArg : Code::kTimedOut;
    }
    pause(&step, d);
  }
}

}  // namespace lt::proto
