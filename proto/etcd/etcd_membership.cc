#include "proto/etcd/etcd_membership.h"

#include <sodium.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "common/mac.h"
#include "common/net.h"

namespace lt::proto {

using etcd::field;
using etcd::Json;
using etcd::Kv;
using etcd::succeeded;
using etcd::txn_kvs;

namespace {

constexpr char kMemberTag[] = "ltier etcd member";
constexpr char kTokenTag[] = "ltier etcd token";

std::string slot_name(uint32_t slot) {
  char b[16];
  std::snprintf(b, sizeof(b), "%04u", slot);
  return b;
}

// The slot at the end of a P/members/ or P/gen/ key; 0 if none.
uint32_t slot_of(const std::string& key) {
  size_t at = key.rfind('/');
  if (at == std::string::npos || at + 1 >= key.size()) return 0;
  unsigned long v = std::strtoul(key.c_str() + at + 1, nullptr, 10);
  return v > 0 && v < transport::kNodeSlots ? static_cast<uint32_t>(v) : 0;
}

std::string token_mac(const std::string& secret, const std::string& token) {
  Mac m = hmac(secret, {as_bytes(kTokenTag), as_bytes(token)});
  return etcd::b64(std::string_view(reinterpret_cast<const char*>(m.data()), m.size()));
}

}  // namespace

EtcdMembership::EtcdMembership() { event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

EtcdMembership::~EtcdMembership() {
  leave();
  if (event_fd_ >= 0) close(event_fd_);
}

Status EtcdMembership::join(const JoinInfo& info, Deadline d) {
  stop_threads();
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = lost_ = expelled_ = false;
    members_.clear();
    queued_.clear();
  }
  secret_ = info.cluster.secret;
  prefix_ = info.cluster.etcd_prefix;
  if (prefix_.empty() || prefix_.back() != '/') prefix_ += '/';
  lease_ms_ = std::max<uint32_t>(info.cluster.etcd_lease_ms, 2000);
  client_ = std::make_unique<etcd::Client>(info.cluster.etcd);
  if (!client_->valid()) {
    LT_ERROR("join: cluster.etcd (LTIER_ETCD) names no etcd endpoint: '%s'",
             info.cluster.etcd.c_str());
    return Code::kInvalidArg;
  }
  Status s = take_token(d);
  if (s.code() == Code::kPeerDown) {
    LT_ERROR("join: no etcd answers at %s (cluster.etcd, LTIER_ETCD)",
             client_->endpoints().c_str());
  }
  LT_RETURN_IF_ERROR(s);
  Result<Json> g =
      client_->call("/v3/lease/grant", Json{{"TTL", std::to_string((lease_ms_ + 999) / 1000)}}, d);
  if (!g.is_ok()) return g.status();
  lease_ = etcd::num(*g, "ID");
  if (lease_ == 0) return Code::kMalformed;
  s = take_slot(info, d);
  if (s.is_ok()) s = load_members(d, false);
  if (!s.is_ok()) {
    (void)client_->call("/v3/lease/revoke", Json{{"ID", std::to_string(lease_)}},
                        Deadline::after_ms(1000));
    lease_ = 0;
    return s;
  }
  watch_ = std::make_unique<etcd::WatchStream>();
  keeper_ = std::thread([this] { keeper_loop(); });
  watcher_ = std::thread([this] { watcher_loop(); });
  return Status::ok();
}

// The cluster token: made by the first node of the cluster, with a MAC
// under the secret, so that a node with another secret is told so.
Status EtcdMembership::take_token(Deadline d) {
  const std::string key = prefix_ + "token";
  uint64_t fresh = 0;
  while (fresh == 0) randombytes_buf(&fresh, sizeof(fresh));
  const std::string mine = std::to_string(fresh) + " " + token_mac(secret_, std::to_string(fresh));
  Result<Json> r = client_->call(
      "/v3/kv/txn",
      etcd::txn(Json::array({etcd::compare_rev(key, "CREATE", 0)}),
                Json::array({etcd::put_of(key, mine)}), Json::array({etcd::range_of(key)})),
      d);
  if (!r.is_ok()) return r.status();
  std::string value = mine;
  if (!succeeded(*r)) {
    std::vector<Kv> kvs = txn_kvs(*r, 0);
    if (kvs.empty()) return Code::kMalformed;
    value = kvs[0].value;
  }
  size_t sp = value.find(' ');
  std::string token = value.substr(0, sp);
  if (sp == std::string::npos || value.substr(sp + 1) != token_mac(secret_, token)) {
    LT_ERROR(
        "join: the cluster under etcd prefix %s was made with another cluster.secret "
        "(LTIER_SECRET), or its token key is not ltier's",
        prefix_.c_str());
    return Code::kAuth;
  }
  token_ = std::strtoull(token.c_str(), nullptr, 10);
  return token_ != 0 ? Status::ok() : Status(Code::kMalformed);
}

// A slot and a generation. The free slot whose generation is lowest is
// taken (slots are reused as late as possible), in one txn that fails if
// another node took the slot or raised its generation meanwhile.
Status EtcdMembership::take_slot(const JoinInfo& info, Deadline d) {
  Member m;
  m.name = default_node_name(info.cluster.node_name);
  m.addresses = info.addresses;
  m.host_id = net::host_id();
  m.rank = info.rank;
  const std::string gens = prefix_ + "gen/", slots = prefix_ + "members/";
  while (!d.expired()) {
    Result<Json> r =
        client_->call("/v3/kv/txn",
                      etcd::txn(Json::array(),
                                Json::array({etcd::range_prefix(gens), etcd::range_prefix(slots)})),
                      d);
    if (!r.is_ok()) return r.status();
    std::vector<uint64_t> gen(transport::kNodeSlots, 0);
    std::vector<int64_t> gen_rev(transport::kNodeSlots, 0);
    std::vector<bool> taken(transport::kNodeSlots, false);
    for (const Kv& kv : txn_kvs(*r, 0)) {
      uint32_t s = slot_of(kv.key);
      gen[s] = std::strtoull(kv.value.c_str(), nullptr, 10);
      gen_rev[s] = kv.mod_rev;
    }
    size_t live = 0;
    for (const Kv& kv : txn_kvs(*r, 1)) {
      taken[slot_of(kv.key)] = true;
      ++live;
    }
    uint32_t slot = 0;
    for (uint32_t s = 1; s < transport::kNodeSlots; ++s) {
      if (!taken[s] && gen[s] + 1 <= transport::node_gen(UINT32_MAX) &&
          (slot == 0 || gen[s] < gen[slot])) {
        slot = s;
      }
    }
    if (slot == 0 || live >= kMaxMembers) {
      LT_ERROR("join: all %u member slots under etcd prefix %s are taken", kMaxMembers,
               prefix_.c_str());
      return Code::kNoResource;
    }
    const uint64_t next = gen[slot] + 1;
    m.node = static_cast<NodeId>(next * transport::kNodeSlots + slot);
    const std::string gkey = gens + slot_name(slot), mkey = slots + slot_name(slot);
    r = client_->call("/v3/kv/txn",
                      etcd::txn(Json::array({etcd::compare_rev(mkey, "CREATE", 0),
                                             etcd::compare_rev(gkey, "MOD", gen_rev[slot])}),
                                Json::array({etcd::put_of(gkey, std::to_string(next)),
                                             etcd::put_of(mkey, sealed(mkey, m), lease_)})),
                      d);
    if (!r.is_ok()) return r.status();
    if (succeeded(*r)) {
      self_ = m.node;
      return Status::ok();
    }
    // Another node took the slot first: look again.
  }
  return Code::kTimedOut;
}

// The address book as of one revision; the watcher goes on from the next.
// `report`: the differences from the book held so far become events.
Status EtcdMembership::load_members(Deadline d, bool report) {
  const std::string slots = prefix_ + "members/";
  Result<Json> r = client_->call(
      "/v3/kv/range",
      Json{{"key", etcd::b64(slots)}, {"range_end", etcd::b64(etcd::prefix_end(slots))}}, d);
  if (!r.is_ok()) return r.status();
  std::map<NodeId, Member> book;
  for (const Kv& kv : etcd::kvs_of(*r)) {
    Member m;
    if (unseal(kv.key, kv.value, &m)) book[m.node] = std::move(m);
  }
  std::vector<NodeId> gone, came;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [id, m] : members_) {
      if (book.count(id) == 0) gone.push_back(id);
    }
    for (auto& [id, m] : book) {
      if (members_.count(id) == 0 && id != self_) came.push_back(id);
    }
    members_ = std::move(book);
    if (!report) {
      gone.clear();
      came.clear();
    }
    for (NodeId id : gone) push(id == self_ ? Event::kExpelled : Event::kDown, id);
    for (NodeId id : came) push(Event::kUp, id);
    if (std::find(gone.begin(), gone.end(), self_) != gone.end()) expelled_ = true;
  }
  revision_ = etcd::num(field(*r, "header"), "revision");
  return Status::ok();
}

std::string EtcdMembership::sealed(const std::string& key, const Member& m) const {
  std::string rec;
  wire::Writer w(&rec);
  put_member(w, m);
  Mac mac = hmac(secret_, {as_bytes(kMemberTag), as_bytes(key), as_bytes(rec)});
  rec.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  return rec;
}

// A member record written by a node that knows the secret, in its slot.
bool EtcdMembership::unseal(const std::string& key, const std::string& value, Member* m) const {
  if (value.size() < kMacBytes) return false;
  std::string_view rec(value.data(), value.size() - kMacBytes);
  Mac mac = hmac(secret_, {as_bytes(kMemberTag), as_bytes(key), as_bytes(rec)});
  bool ok = same_mac(mac, as_bytes(std::string_view(value).substr(rec.size())));
  if (ok) {
    wire::Reader r(as_bytes(rec));
    ok = get_member(r, m) && r.at_end() && transport::node_slot(m->node) == slot_of(key);
  }
  if (!ok) LT_WARN("etcd: ignoring member record %s: not sealed by this cluster", key.c_str());
  return ok;
}

void EtcdMembership::push(Event::Kind k, NodeId n) {
  queued_.push_back(Event{k, n});
  uint64_t one = 1;
  ssize_t w = write(event_fd_, &one, sizeof(one));
  (void)w;
}

Status EtcdMembership::on_readable(std::vector<Event>* events) {
  uint64_t v;
  ssize_t r = read(event_fd_, &v, sizeof(v));
  (void)r;
  std::lock_guard<std::mutex> g(mu_);
  events->insert(events->end(), queued_.begin(), queued_.end());
  queued_.clear();
  return Status::ok();
}

// Keeps the lease alive every third of its time. etcd out of reach:
// kManagerLost once, kRejoined when it answers again; the lease gone:
// kExpelled, and the keeper stops.
void EtcdMembership::keeper_loop() {
  const auto period = std::chrono::milliseconds(lease_ms_ / 3);
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    cv_.wait_for(lk, period, [&] { return stopping_; });
    if (stopping_) break;
    lk.unlock();
    Result<Json> r = client_->call("/v3/lease/keepalive", Json{{"ID", std::to_string(lease_)}},
                                   Deadline::after_ms(lease_ms_ / 3));
    lk.lock();
    if (stopping_) break;
    bool gone = r.status().code() == Code::kNotFound ||
                (r.is_ok() && etcd::num(field(*r, "result"), "TTL") <= 0);
    if (gone) {
      if (!expelled_) {
        LT_WARN("etcd: this node's lease expired (silent past cluster.etcd_lease_ms)");
        expelled_ = true;
        push(Event::kExpelled, self_);
      }
      break;
    }
    if (r.is_ok() && lost_) {
      LT_INFO("etcd: back in reach at %s", client_->current().c_str());
      lost_ = false;
      push(Event::kRejoined, self_);
    } else if (!r.is_ok() && !lost_) {
      LT_WARN("etcd: out of reach at %s (%s); names, locks and barriers fail until it is back",
              client_->endpoints().c_str(), r.status().name());
      lost_ = true;
      push(Event::kManagerLost, self_);
    }
  }
}

void EtcdMembership::stop_threads() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (watch_) watch_->stop();
  if (keeper_.joinable()) keeper_.join();
  if (watcher_.joinable()) watcher_.join();
}

void EtcdMembership::leave() {
  stop_threads();
  if (lease_ != 0 && client_) {
    // Revoking the lease deletes this node's keys: the others see it leave
    // now rather than a lease time later.
    (void)client_->call("/v3/lease/revoke", Json{{"ID", std::to_string(lease_)}},
                        Deadline::after_ms(1000));
  }
  lease_ = 0;
}

std::optional<transport::PeerInfo> EtcdMembership::peer(NodeId n) const {
  std::lock_guard<std::mutex> g(mu_);
  return peer_in(members_, n);
}

std::vector<Member> EtcdMembership::members() const {
  std::lock_guard<std::mutex> g(mu_);
  return members_in(members_);
}

}  // namespace lt::proto
