// The LMR directory (LITE's master role): LT_malloc on any node, LT_free by
// the master, LT_publish by name and LT_map by name with rights checked by
// the master; and the serving side of each on the node that owns the memory
// or the name.
#include <chrono>
#include <thread>

#include "proto/engine.h"

namespace lt::proto {

namespace {
constexpr uint32_t kUserRights = kRightRead | kRightWrite | kRightAtomic;
}

Result<LmrHandle> Engine::malloc(NodeId node, uint64_t size, uint32_t rights, Deadline d) {
  LT_RETURN_IF_ERROR(usable());
  if (size == 0 || (rights & ~kUserRights) != 0) return Code::kInvalidArg;
  // The tenant's LMR quotas (count and bytes), held until LT_free.
  LT_RETURN_IF_ERROR(sched_.take_lmr(size));
  Result<LmrHandle> h = malloc_held(node, size, rights, d);
  if (!h) sched_.give_lmr(size);
  return h;
}

// LT_malloc once the quota is taken.
Result<LmrHandle> Engine::malloc_held(NodeId node, uint64_t size, uint32_t rights, Deadline d) {
  auto m = std::make_shared<Mapping>();
  m->owner = node;
  m->rights = rights | kRightAdmin;
  m->size = size;
  m->master = true;
  m->minted_by = self();
  if (node == self()) {
    if (size > config_.engine.max_lmr_bytes) return Code::kNoMemory;
    auto l = lmrs_.create(size, self(), transports_.memory(), transports_.exporter());
    if (!l) return l.status();
    m->secret = (*l)->secret;
    m->key = (*l)->key;
    m->rkeys[0] = (*l)->region.rkey;
    m->rkeys[1] = (*l)->exported.rkey;
  } else {
    ReqId id = 0;
    auto r = alloc_request(ReqKind::kAlloc, node, &id);
    if (!r) return r.status();
    AllocReq q{make_header(MsgOp::kAllocReq, id), size};
    LT_RETURN_IF_ERROR(send_request(*r, node, &q, sizeof(q), nullptr, 0));
    Results res;
    Status s = wait_or_cancel(id, d, &res);
    if (!s.is_ok()) return s;
    m->key = res.alloc.key;
    m->secret = {res.alloc.secret0, res.alloc.secret1};
    m->rkeys[0] = res.alloc.rkey;
    m->rkeys[1] = res.alloc.rkey_exported;
  }
  m->cap = cap_for(m->secret, m->key, m->rights);
  auto h = client_.handles.insert(m);
  if (!h) {
    // No handle slot: give the memory back rather than leak it at the owner.
    if (node == self()) {
      (void)lmrs_.erase(m->key);
    } else {
      (void)free_remote(*m, d);
    }
  }
  return h;
}

// Asks the owner of a master mapping to free its LMR.
Status Engine::free_remote(const Mapping& m, Deadline d) {
  ReqId id = 0;
  auto r = alloc_request(ReqKind::kPlain, m.owner, &id);
  if (!r) return r.status();
  FreeReq q{make_header(MsgOp::kFreeReq, id), m.ref()};
  LT_RETURN_IF_ERROR(send_request(*r, m.owner, &q, sizeof(q), nullptr, 0));
  return wait_or_cancel(id, d);
}

Status Engine::free(LmrHandle h, Deadline d) {
  std::shared_ptr<Mapping> m;
  LT_RETURN_IF_ERROR(client_.handles.get(h, &m));
  if (!m->master) return Code::kPerm;
  Status s = m->owner == self() ? lmrs_.erase(m->key) : free_remote(*m, d);
  // A dead owner or an LMR already gone (its owner freed it as ours died):
  // the handle goes all the same.
  if (!s.is_ok() && s.code() != Code::kPeerDown && s.code() != Code::kBadHandle) return s;
  if (client_.handles.erase(h).is_ok()) sched_.give_lmr(m->size);
  std::vector<NodeId> mappers;
  auto names = client_.handles.remove_names_of(h, &mappers);
  revoke_mappers(*m, mappers, d);
  for (auto& n : names) (void)membership_->unregister_name(n, d);
  return s.code() == Code::kBadHandle ? Status::ok() : s;
}

// Tells every node that mapped the freed LMR by name that its handles are
// dead, so they fail at once instead of reaching the owner's freed memory
// (rc posts ops without a liveness check while the mapping's last check
// is recent: rma/native.cc). Waits for their acknowledgements for at most
// kGuardFreshNs: after that no mapper posts an unchecked op anyway (its
// last check found the word alive before the owner cleared it), so a
// stopped or slow mapper delays LT_free by that much and never longer. A
// mapper that could not be told (no request slot, a failed send) is waited
// out the same way; one that is down posts nothing.
void Engine::revoke_mappers(const Mapping& m, const std::vector<NodeId>& mappers, Deadline d) {
  if (mappers.empty()) return;
  const Deadline by(std::min(d.at_ns(), now_ns() + transport::kGuardFreshNs));
  std::vector<ReqId> sent;
  sent.reserve(mappers.size());
  bool untold = false;
  for (NodeId n : mappers) {
    if (n == self()) {
      client_.handles.revoke(self(), m.owner, m.key);
      continue;
    }
    ReqId id = 0;
    auto r = alloc_request(ReqKind::kPlain, n, &id);
    if (!r) {
      untold = untold || r.status().code() != Code::kPeerDown;
      continue;
    }
    RevokeReq q{make_header(MsgOp::kRevokeReq, id), m.owner, 0, m.key};
    Status s = send_request(*r, n, &q, sizeof(q), nullptr, 0);
    if (s.is_ok()) {
      sent.push_back(id);
    } else {
      untold = untold || s.code() != Code::kPeerDown;
    }
  }
  for (ReqId id : sent) (void)wait_or_cancel(id, by);
  if (untold) {
    const uint64_t now = now_ns();
    if (now < by.at_ns()) std::this_thread::sleep_for(std::chrono::nanoseconds(by.at_ns() - now));
  }
}

Status Engine::publish(LmrHandle h, const std::string& name, uint32_t max_rights, Deadline d) {
  std::shared_ptr<Mapping> m;
  LT_RETURN_IF_ERROR(client_.handles.get(h, &m));
  if (!m->master) return Code::kPerm;
  if (name.empty() || name.size() > kMaxName || (max_rights & ~kUserRights) != 0) {
    return Code::kInvalidArg;
  }
  LT_RETURN_IF_ERROR(client_.handles.add_name(name, h, max_rights));
  Status s = membership_->register_name(name, d);
  if (!s.is_ok()) client_.handles.remove_name(name);
  return s;
}

Result<LmrHandle> Engine::map(const std::string& name, uint32_t rights, Deadline d) {
  LT_RETURN_IF_ERROR(usable());
  if (name.empty() || name.size() > kMaxName || rights == 0 || (rights & ~kUserRights) != 0) {
    return Code::kInvalidArg;
  }
  auto master = membership_->lookup_name(name, d);
  if (!master) return master.status();
  auto m = std::make_shared<Mapping>();
  if (*master == self()) {
    std::shared_ptr<Mapping> src;
    LT_RETURN_IF_ERROR(client_.handles.lookup_name(name, rights, self(), &src));
    m->minted_by = self();
    m->owner = src->owner;
    m->key = src->key;
    m->size = src->size;
    m->rights = rights;
    m->cap = cap_for(src->secret, src->key, rights);
    m->rkeys[0] = src->rkeys[0];
    m->rkeys[1] = src->rkeys[1];
  } else {
    ReqId id = 0;
    auto r = alloc_request(ReqKind::kMap, *master, &id);
    if (!r) return r.status();
    MapReq q{make_header(MsgOp::kMapReq, id), rights, static_cast<uint32_t>(name.size())};
    LT_RETURN_IF_ERROR(send_request(*r, *master, &q, sizeof(q), name.data(), name.size()));
    Results res;
    Status s = wait_or_cancel(id, d, &res);
    if (!s.is_ok()) return s;
    m->minted_by = *master;
    m->owner = res.mapr.owner;
    m->key = res.mapr.lmr.key;
    m->cap = res.mapr.lmr.cap;
    m->rights = res.mapr.rights;
    m->size = res.mapr.size;
    m->rkeys[0] = res.mapr.rkey;
    m->rkeys[1] = res.mapr.rkey_exported;
  }
  return client_.handles.insert(m);
}

Status Engine::unmap(LmrHandle h) {
  std::shared_ptr<Mapping> m;
  LT_RETURN_IF_ERROR(client_.handles.get(h, &m));
  if (m->master) return Code::kInvalidArg;  // the master releases with free()
  return client_.handles.erase(h);
}

Result<uint64_t> Engine::lmr_size(LmrHandle h) const {
  std::shared_ptr<Mapping> m;
  LT_RETURN_IF_ERROR(client_.handles.get(h, &m));
  return m->size;
}

Status Engine::check_access(LmrHandle h, uint32_t need, uint64_t off, uint64_t len) const {
  MappingRef m;
  return client_.handles.check(h, need, off, len, &m);
}

void Engine::serve_alloc(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  auto q = load<AllocReq>(b);
  if (q.size == 0 || q.size > config_.engine.max_lmr_bytes) {
    return reply_status(from, h.req_id, q.size == 0 ? Code::kInvalidArg : Code::kNoMemory);
  }
  auto l = lmrs_.create(q.size, from, transports_.memory(), transports_.exporter());
  if (!l) return reply_status(from, h.req_id, l.status());
  AllocReply rep{make_header(MsgOp::kAllocReply, h.req_id),
                 (*l)->key,
                 (*l)->secret.k0,
                 (*l)->secret.k1,
                 q.size,
                 (*l)->region.rkey,
                 (*l)->exported.rkey};
  (void)send(from, &rep, sizeof(rep), nullptr, 0, default_deadline(), true);
}

void Engine::serve_free(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  auto q = load<FreeReq>(b);
  Status s = lmrs_.with_checked(q.lmr, kRightAdmin, 0, 0, [](LocalLmr&) { return Status::ok(); });
  if (s.is_ok()) s = lmrs_.erase(q.lmr.key);
  reply_status(from, h.req_id, s);
}

// The master of an LMR this node mapped freed it: its handles here fail
// from now on (revoke_mappers). Only the master that minted a handle can
// revoke it.
void Engine::serve_revoke(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  auto q = load<RevokeReq>(b);
  if (q.pad != 0) return reply_status(from, h.req_id, Code::kMalformed);
  client_.handles.revoke(from, q.owner, q.key);
  reply_status(from, h.req_id, Status::ok());
}

void Engine::serve_map(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  auto q = load<MapReq>(b);
  if (q.name_len == 0 || q.name_len > kMaxName || b.size() - sizeof(MapReq) != q.name_len) {
    return reply_status(from, h.req_id, Code::kMalformed);
  }
  std::string name(reinterpret_cast<const char*>(b.data() + sizeof(MapReq)), q.name_len);
  std::shared_ptr<Mapping> src;
  Status s = client_.handles.lookup_name(name, q.rights, from, &src);
  if (!s.is_ok()) return reply_status(from, h.req_id, s);
  MapReply rep{make_header(MsgOp::kMapReply, h.req_id),
               src->owner,
               q.rights,
               src->size,
               LmrRef{src->key, cap_for(src->secret, src->key, q.rights), q.rights, 0},
               src->rkeys[0],
               src->rkeys[1]};
  (void)send(from, &rep, sizeof(rep), nullptr, 0, default_deadline(), true);
}

}  // namespace lt::proto
