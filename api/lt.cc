// The C API over proto::Engine. Translates handles and Status codes; holds no
// state of its own beyond the engine object.
#include "ltier/lt.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <thread>

#include "api/blocking.h"
#include "api/internal.h"
#include "common/config.h"
#include "common/log.h"
#include "common/siphash.h"
#include "common/trace_points.h"
#include "ltier/manager.h"
#include "proto/engine.h"
#include "proto/manager.h"

static_assert(LT_ERR_INVAL == static_cast<int>(lt::Code::kInvalidArg));
static_assert(LT_ERR_BAD_HANDLE == static_cast<int>(lt::Code::kBadHandle));
static_assert(LT_ERR_OUT_OF_BOUNDS == static_cast<int>(lt::Code::kOutOfBounds));
static_assert(LT_ERR_PERM == static_cast<int>(lt::Code::kPerm));
static_assert(LT_ERR_PEER_DOWN == static_cast<int>(lt::Code::kPeerDown));
static_assert(LT_ERR_TIMEDOUT == static_cast<int>(lt::Code::kTimedOut));
static_assert(LT_ERR_AGAIN == static_cast<int>(lt::Code::kNoResource));
static_assert(LT_ERR_QUOTA == static_cast<int>(lt::Code::kQuota));
static_assert(LT_ERR_NOT_FOUND == static_cast<int>(lt::Code::kNotFound));
static_assert(LT_ERR_AUTH == static_cast<int>(lt::Code::kAuth));
using MemberEventKind = lt::proto::Membership::Event;
static_assert(int{LT_EV_UP} == int{MemberEventKind::kUp} &&
              int{LT_EV_DOWN} == int{MemberEventKind::kDown} &&
              int{LT_EV_EXPELLED} == int{MemberEventKind::kExpelled} &&
              int{LT_EV_MANAGER_LOST} == int{MemberEventKind::kManagerLost} &&
              int{LT_EV_REJOINED} == int{MemberEventKind::kRejoined});
static_assert(LT_ERR_CLOSED == static_cast<int>(lt::Code::kClosed));
static_assert(LT_ERR_SYS == static_cast<int>(lt::Code::kSys));
static_assert(LT_ERR_SYS + 1 == lt::kNumCodes);

namespace {

using lt::api::blocking;
using lt::api::chunked;
using lt::api::deadline;
using lt::api::load_user_config;
using lt::api::rc;
using lt::api::retry_on_credits;
using lt::api::TimeoutStart;
using lt::api::Try;
using lt::api::user_deadline;

template <typename T, typename U>
inline int out_rc(const lt::Result<T>& r, U* out) {
  if (!r.is_ok()) return rc(r.status());
  *out = r.value();
  return 0;
}

// A request id for the caller (see lt_engine::req_salt), and back. An
// operation complete at its call is LT_REQ_DONE both ways.
inline int req_rc(const lt_engine_t* e, const lt::Result<uint64_t>& r, lt_req_t* out) {
  if (!r.is_ok()) return rc(r.status());
  *out = r.value() == lt::proto::kDoneReqId ? LT_REQ_DONE : r.value() ^ e->req_salt;
  return 0;
}
inline uint64_t req_in(const lt_engine_t* e, lt_req_t req) {
  return req == LT_REQ_DONE ? lt::proto::kDoneReqId : req ^ e->req_salt;
}

}  // namespace

extern "C" {

int LT_join(const lt_join_opts_t* opts, lt_engine_t** out) {
  if (out == nullptr) return -LT_ERR_INVAL;
  lt::Config c;
  lt::Status s = load_user_config(opts != nullptr ? opts->config_path : nullptr, &c);
  if (!s.is_ok()) return rc(s);
  if (opts != nullptr) {
    if (opts->manager) c.cluster.manager = opts->manager;
    if (opts->secret) c.cluster.secret = opts->secret;
    if (opts->tenant) c.qos.tenant = opts->tenant;
    if (opts->listen) c.tcp.listen = opts->listen;
  }
  LT_DEBUG("join: config loaded");
  auto* e = new (std::nothrow) lt_engine(c);
  if (e == nullptr) return -LT_ERR_NO_MEMORY;
  s = e->core.join();
  if (!s.is_ok()) {
    delete e;
    return rc(s);
  }
  if (!c.metrics.listen.empty()) {
    std::string why;
    auto m = lt::api::serve_metrics(e->core, c.metrics.listen, &why);
    if (!m) {
      LT_ERROR("join: %s", why.c_str());
      e->core.leave();
      delete e;
      return rc(m.status().code() == lt::Code::kUnsupported ? m.status() : lt::Code::kInvalidArg);
    }
    e->metrics = std::move(m.value());
  }
  *out = e;
  return 0;
}

int LT_leave(lt_engine_t* e) {
  if (e == nullptr) return -LT_ERR_INVAL;
  e->metrics.reset();  // no scrape reads the engine from here on
  e->core.leave();
  delete e;
  return 0;
}

lt_node_t LT_node_id(const lt_engine_t* e) { return e ? e->core.self() : 0; }

int LT_local_address(const lt_engine_t* e, char* buf, size_t cap) {
  if (e == nullptr || buf == nullptr) return -LT_ERR_INVAL;
  std::string a = e->core.local_address("tcp");  // documented as the tcp HOST:PORT
  if (a.size() + 1 > cap) return -LT_ERR_TRUNCATED;
  std::memcpy(buf, a.c_str(), a.size() + 1);
  return 0;
}

int LT_nodes(lt_engine_t* e, lt_node_t* ids, size_t cap, size_t* n) {
  if (e == nullptr || n == nullptr || (cap > 0 && ids == nullptr)) return -LT_ERR_INVAL;
  auto m = e->core.members();
  for (size_t i = 0; i < m.size() && i < cap; ++i) ids[i] = m[i].node;
  *n = m.size();
  return 0;
}

int LT_node_info(lt_engine_t* e, lt_node_t node, lt_node_info_t* out) {
  if (e == nullptr || out == nullptr) return -LT_ERR_INVAL;
  auto m = e->core.node_info(node);
  if (!m) return rc(m.status());
  out->id = m->node;
  out->rank = m->rank;
  size_t n = std::min(m->name.size(), sizeof(out->name) - 1);
  std::memcpy(out->name, m->name.data(), n);
  out->name[n] = 0;
  return 0;
}

int LT_node_by_name(lt_engine_t* e, const char* name, int64_t timeout_us, lt_node_t* node) {
  if (e == nullptr || name == nullptr || node == nullptr) return -LT_ERR_INVAL;
  return out_rc(e->core.node_by_name(name, user_deadline(e, timeout_us, TimeoutStart::kNow)), node);
}

int LT_node_by_rank(lt_engine_t* e, uint32_t rank, int64_t timeout_us, lt_node_t* node) {
  if (e == nullptr || node == nullptr) return -LT_ERR_INVAL;
  return out_rc(e->core.node_by_rank(rank, user_deadline(e, timeout_us, TimeoutStart::kNow)), node);
}

int LT_member_event(lt_engine_t* e, int64_t timeout_us, lt_member_event_t* ev) {
  if (e == nullptr || ev == nullptr) return -LT_ERR_INVAL;
  auto r = e->core.member_event(user_deadline(e, timeout_us, TimeoutStart::kNow));
  if (!r.is_ok()) return rc(r.status());
  ev->kind = r.value().kind;
  ev->node = r.value().node;
  ev->missed = r.value().missed;
  return 0;
}

const char* LT_event_name(int kind) {
  static const char* const kNames[] = {"up", "down", "expelled", "manager_lost", "rejoined"};
  return kind >= 0 && kind < 5 ? kNames[kind] : "?";
}

int LT_malloc(lt_engine_t* e, lt_node_t node, uint64_t size, uint32_t rights, lt_lmr_t* out) {
  if (e == nullptr || out == nullptr) return -LT_ERR_INVAL;
  return out_rc(e->core.malloc(node, size, rights, deadline(e)), out);
}

int LT_free(lt_engine_t* e, lt_lmr_t lmr) {
  if (e == nullptr) return -LT_ERR_INVAL;
  return rc(e->core.free(lmr, deadline(e)));
}

int LT_publish(lt_engine_t* e, lt_lmr_t lmr, const char* name, uint32_t max_rights) {
  if (e == nullptr || name == nullptr) return -LT_ERR_INVAL;
  return rc(e->core.publish(lmr, name, max_rights, deadline(e)));
}

int LT_map(lt_engine_t* e, const char* name, uint32_t rights, lt_lmr_t* out) {
  if (e == nullptr || name == nullptr || out == nullptr) return -LT_ERR_INVAL;
  return out_rc(e->core.map(name, rights, deadline(e)), out);
}

int LT_unmap(lt_engine_t* e, lt_lmr_t lmr) {
  if (e == nullptr) return -LT_ERR_INVAL;
  return rc(e->core.unmap(lmr));
}

int LT_lmr_size(lt_engine_t* e, lt_lmr_t lmr, uint64_t* size) {
  if (e == nullptr || size == nullptr) return -LT_ERR_INVAL;
  return out_rc(e->core.lmr_size(lmr), size);
}

int LT_read(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, void* buf, uint64_t len) {
  if (e == nullptr) return -LT_ERR_INVAL;
  if (lt::Status s; e->core.read_now(lmr, offset, buf, len, &s)) return rc(s);
  if (int s = rc(e->core.check_access(lmr, LT_READ, offset, len))) return s;
  return chunked(e, len, [&](uint64_t d, uint64_t n) {
    return e->core.read_async(lmr, offset + d, static_cast<char*>(buf) + d, n);
  });
}

int LT_write(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, const void* buf, uint64_t len) {
  if (e == nullptr) return -LT_ERR_INVAL;
  if (lt::Status s; e->core.write_now(lmr, offset, buf, len, &s)) return rc(s);
  if (int s = rc(e->core.check_access(lmr, LT_WRITE, offset, len))) return s;
  return chunked(e, len, [&](uint64_t d, uint64_t n) {
    return e->core.write_async(lmr, offset + d, static_cast<const char*>(buf) + d, n);
  });
}

int LT_memset(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, int value, uint64_t len) {
  if (e == nullptr) return -LT_ERR_INVAL;
  return blocking(
      e, [&] { return e->core.memset_async(lmr, offset, static_cast<uint8_t>(value), len); });
}

int LT_memcpy(lt_engine_t* e, lt_lmr_t dst, uint64_t dst_offset, lt_lmr_t src, uint64_t src_offset,
              uint64_t len) {
  if (e == nullptr) return -LT_ERR_INVAL;
  if (int s = rc(e->core.check_access(dst, LT_WRITE, dst_offset, len))) return s;
  if (int s = rc(e->core.check_access(src, LT_READ, src_offset, len))) return s;
  return chunked(e, len, [&](uint64_t d, uint64_t n) {
    return e->core.memcpy_async(dst, dst_offset + d, src, src_offset + d, n);
  });
}

int LT_fetch_add(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, uint64_t add, uint64_t* old) {
  if (e == nullptr || old == nullptr) return -LT_ERR_INVAL;
  // The engine writes *old only on success: keep the caller's value otherwise.
  uint64_t v = 0;
  if (lt::Status st; e->core.atomic_now(lmr, offset, true, add, 0, &v, &st)) {
    if (st.is_ok()) *old = v;
    return rc(st);
  }
  int s = blocking(e, [&] { return e->core.fetch_add_async(lmr, offset, add, &v); });
  if (s == 0) *old = v;
  return s;
}

int LT_compare_swap(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, uint64_t expected,
                    uint64_t desired, uint64_t* old) {
  if (e == nullptr || old == nullptr) return -LT_ERR_INVAL;
  uint64_t v = 0;
  if (lt::Status st; e->core.atomic_now(lmr, offset, false, desired, expected, &v, &st)) {
    if (st.is_ok()) *old = v;
    return rc(st);
  }
  int s =
      blocking(e, [&] { return e->core.compare_swap_async(lmr, offset, expected, desired, &v); });
  if (s == 0) *old = v;
  return s;
}

int LT_fetch_add_async(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, uint64_t add, uint64_t* old,
                       lt_req_t* req) {
  if (e == nullptr || req == nullptr) return -LT_ERR_INVAL;
  return req_rc(e, e->core.fetch_add_async(lmr, offset, add, old), req);
}

int LT_compare_swap_async(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, uint64_t expected,
                          uint64_t desired, uint64_t* old, lt_req_t* req) {
  if (e == nullptr || req == nullptr) return -LT_ERR_INVAL;
  return req_rc(e, e->core.compare_swap_async(lmr, offset, expected, desired, old), req);
}

int LT_send(lt_engine_t* e, lt_node_t node, uint32_t port, const void* buf, size_t len) {
  LT_TRACE_POINT('M');
  if (e == nullptr) return -LT_ERR_INVAL;
  lt::Deadline d = deadline(e);
  return retry_on_credits(e, d, [&]() -> Try {
    lt::Status now = e->core.send_now(node, port, buf, len);
    if (now.is_ok()) return {lt::Status::ok(), 0};
    if (now.code() != lt::Code::kUnsupported) return {now, 0};
    auto r = e->core.send_async(node, port, buf, len);  // too big for eager: rendezvous
    if (!r.is_ok()) return {r.status(), 0};
    return {lt::Status::ok(), rc(e->core.wait_or_cancel(r.value(), d))};
  });
}

int LT_send_async(lt_engine_t* e, lt_node_t node, uint32_t port, const void* buf, size_t len,
                  lt_req_t* req) {
  if (e == nullptr || req == nullptr) return -LT_ERR_INVAL;
  return req_rc(e, e->core.send_async(node, port, buf, len), req);
}

int LT_recv(lt_engine_t* e, uint32_t port, void* buf, size_t cap, lt_node_t* src, size_t* len,
            int64_t timeout_us) {
  if (e == nullptr || src == nullptr || len == nullptr) return -LT_ERR_INVAL;
  lt::Deadline d = user_deadline(e, timeout_us);
  lt_node_t s = 0;
  size_t n = 0;
  auto r = e->core.recv_async(port, buf, cap, &s, &n);
  if (!r.is_ok()) return rc(r.status());
  int st = rc(e->core.wait_or_cancel(r.value(), d));
  if (st == 0 || st == -LT_ERR_TRUNCATED) {
    *src = s;
    *len = n;
  }
  LT_TRACE_POINT('Z');
  return st;
}

int LT_recv_async(lt_engine_t* e, uint32_t port, void* buf, size_t cap, lt_node_t* src, size_t* len,
                  lt_req_t* req) {
  if (e == nullptr || req == nullptr) return -LT_ERR_INVAL;
  return req_rc(e, e->core.recv_async(port, buf, cap, src, len), req);
}

int LT_regRPC(lt_engine_t* e, uint32_t func_id, lt_rpc_fn fn, void* ctx) {
  if (e == nullptr || fn == nullptr) return -LT_ERR_INVAL;
  return rc(
      e->core.register_rpc(func_id,
                           [fn, ctx](lt::transport::NodeId src, std::span<const std::byte> in,
                                     std::span<std::byte> out, size_t* out_len) -> lt::Status {
                             size_t n = 0;
                             int r = fn(ctx, src, in.data(), in.size(), out.data(), out.size(), &n);
                             if (r > 0 || r < -static_cast<int>(lt::kNumCodes - 1))
                               return lt::Code::kInternal;
                             if (r < 0) return static_cast<lt::Code>(-r);
                             *out_len = n;
                             return lt::Status::ok();
                           }));
}

int LT_peer_transport(lt_engine_t* e, lt_node_t node, char* name, size_t name_cap, char* why,
                      size_t why_cap) {
  if (e == nullptr || name == nullptr || name_cap == 0 || (why == nullptr && why_cap != 0)) {
    return -LT_ERR_INVAL;
  }
  auto r = e->core.peer_transport(node);
  if (!r.is_ok()) return rc(r.status());
  std::snprintf(name, name_cap, "%s", r.value().first.c_str());
  if (why_cap) std::snprintf(why, why_cap, "%s", r.value().second.c_str());
  return 0;
}

int LT_regRPC_loop(lt_engine_t* e, uint32_t func_id) {
  if (e == nullptr) return -LT_ERR_INVAL;
  return rc(e->core.register_rpc_queue(func_id));
}

int LT_recvRPC(lt_engine_t* e, uint32_t func_id, void* buf, size_t cap, lt_node_t* src, size_t* len,
               lt_rpc_token_t* token, int64_t timeout_us) {
  if (e == nullptr || src == nullptr || len == nullptr || token == nullptr) return -LT_ERR_INVAL;
  lt::Deadline d = user_deadline(e, timeout_us);
  lt_node_t s = 0;
  size_t n = 0;
  uint64_t t = 0;
  auto r = e->core.recv_rpc_async(func_id, buf, cap, &s, &n, &t);
  if (!r.is_ok()) return rc(r.status());
  int st = rc(e->core.wait_or_cancel(r.value(), d));
  if (st == 0 || st == -LT_ERR_TRUNCATED) {
    *src = s;
    *len = n;
  }
  if (st == 0) *token = t;
  return st;
}

int LT_recvRPC_async(lt_engine_t* e, uint32_t func_id, void* buf, size_t cap, lt_node_t* src,
                     size_t* len, lt_rpc_token_t* token, lt_req_t* req) {
  if (e == nullptr || req == nullptr) return -LT_ERR_INVAL;
  return req_rc(e, e->core.recv_rpc_async(func_id, buf, cap, src, len, token), req);
}

int LT_replyRPC(lt_engine_t* e, lt_rpc_token_t token, const void* out, size_t out_len, int status) {
  if (e == nullptr || status > 0 || status < -static_cast<int>(lt::kNumCodes - 1)) {
    return -LT_ERR_INVAL;
  }
  return rc(e->core.reply_rpc(token, out, out_len, lt::Status(static_cast<lt::Code>(-status))));
}

int LT_RPC(lt_engine_t* e, lt_node_t node, uint32_t func_id, const void* in, size_t in_len,
           void* out, size_t out_cap, size_t* out_len) {
  if (e == nullptr || out_len == nullptr) return -LT_ERR_INVAL;
  LT_TRACE_POINT('B');
  lt::Deadline d = deadline(e);
  size_t n = 0;
  // Out of credits, the call waits for replies to return some.
  return retry_on_credits(e, d, [&]() -> Try {
    auto r = e->core.rpc_async(node, func_id, in, in_len, out, out_cap, &n);
    if (!r.is_ok()) return {r.status(), 0};
    int s = rc(e->core.wait_or_cancel(r.value(), d));
    LT_TRACE_POINT('E');
    if (s == 0 || s == -LT_ERR_TRUNCATED) *out_len = n;
    return {lt::Status::ok(), s};
  });
}

int LT_RPC_async(lt_engine_t* e, lt_node_t node, uint32_t func_id, const void* in, size_t in_len,
                 void* out, size_t out_cap, size_t* out_len, lt_req_t* req) {
  if (e == nullptr || req == nullptr) return -LT_ERR_INVAL;
  return req_rc(e, e->core.rpc_async(node, func_id, in, in_len, out, out_cap, out_len), req);
}

int LT_cancel(lt_engine_t* e, lt_req_t req) {
  if (e == nullptr) return -LT_ERR_INVAL;
  return rc(e->core.wait_or_cancel(req_in(e, req), lt::Deadline(0)));
}

int LT_lock(lt_engine_t* e, const char* name, int64_t timeout_us) {
  if (e == nullptr || name == nullptr) return -LT_ERR_INVAL;
  return rc(e->core.lock(name, user_deadline(e, timeout_us, TimeoutStart::kNow)));
}

int LT_unlock(lt_engine_t* e, const char* name) {
  if (e == nullptr || name == nullptr) return -LT_ERR_INVAL;
  return rc(e->core.unlock(name, deadline(e)));
}

int LT_barrier(lt_engine_t* e, const char* name, uint32_t count, int64_t timeout_us) {
  if (e == nullptr || name == nullptr) return -LT_ERR_INVAL;
  return rc(e->core.barrier(name, count, user_deadline(e, timeout_us, TimeoutStart::kNow)));
}

int LT_read_async(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, void* buf, uint64_t len,
                  lt_req_t* req) {
  if (e == nullptr || req == nullptr) return -LT_ERR_INVAL;
  return req_rc(e, e->core.read_async(lmr, offset, buf, len), req);
}

int LT_write_async(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, const void* buf, uint64_t len,
                   lt_req_t* req) {
  if (e == nullptr || req == nullptr) return -LT_ERR_INVAL;
  return req_rc(e, e->core.write_async(lmr, offset, buf, len), req);
}

int LT_memset_async(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, int value, uint64_t len,
                    lt_req_t* req) {
  if (e == nullptr || req == nullptr) return -LT_ERR_INVAL;
  return req_rc(e, e->core.memset_async(lmr, offset, static_cast<uint8_t>(value), len), req);
}

int LT_memcpy_async(lt_engine_t* e, lt_lmr_t dst, uint64_t dst_offset, lt_lmr_t src,
                    uint64_t src_offset, uint64_t len, lt_req_t* req) {
  if (e == nullptr || req == nullptr) return -LT_ERR_INVAL;
  return req_rc(e, e->core.memcpy_async(dst, dst_offset, src, src_offset, len), req);
}

int LT_wait(lt_engine_t* e, lt_req_t req, int64_t timeout_us) {
  if (e == nullptr) return -LT_ERR_INVAL;
  return rc(e->core.wait(req_in(e, req), user_deadline(e, timeout_us)));
}

int LT_test(lt_engine_t* e, lt_req_t req, int* done) {
  if (e == nullptr || done == nullptr) return -LT_ERR_INVAL;
  lt::Status s = e->core.test(req_in(e, req));
  if (s.code() == lt::Code::kNoResource) {
    *done = 0;
    return 0;
  }
  *done = 1;
  return rc(s);
}

const char* LT_strerror(int err) {
  return lt::code_text(static_cast<lt::Code>(err < 0 ? -err : err));
}

const char* LT_errname(int err) {
  return lt::code_name(static_cast<lt::Code>(err < 0 ? -err : err));
}

}  // extern "C"

namespace ltier {

struct Manager::Impl {
  explicit Impl(const lt::proto::ManagerOptions& o) : m(o) {}
  lt::proto::Manager m;
};

Manager::Manager(const ManagerOptions& o) {
  lt::proto::ManagerOptions po;
  po.listen = o.listen;
  po.secret = o.secret;
  po.heartbeat_ms = o.heartbeat_ms;
  po.down_after_ms = o.down_after_ms;
  po.join_timeout_ms = o.join_timeout_ms;
  po.max_unjoined = o.max_unjoined;
  po.recover_ms = o.recover_ms;
  po.max_nodes = o.max_nodes;
  po.verbose = o.verbose;
  impl_ = std::make_unique<Impl>(po);
}
Manager::~Manager() = default;
int Manager::start() { return rc(impl_->m.start()); }
std::string Manager::address() const { return impl_->m.address(); }
int Manager::run(const std::atomic<bool>& stop) { return rc(impl_->m.run(stop)); }

}  // namespace ltier
