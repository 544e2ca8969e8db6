// One-sided operations on LMRs: LT_read, LT_write, LT_memset, LT_memcpy.
// Done at once when the LMR is this node's (a copy under its store entry) or
// reachable natively (rma/native.cc); otherwise emulated: the request
// travels as a message and the owner applies it after checking the
// capability, rights and bounds (the serve_* functions here).
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "common/racy.h"
#include "proto/engine.h"
#include "proto/rma/native_ops.h"

namespace lt::proto {

// The part of a read or write that needs no request: the LMR is this
// node's (memcpy under its store entry) or a same-host peer's over a
// one-sided transport (native). False: it must go as a request. `m` is
// checked already.
bool Engine::copy_now(const Mapping& m, bool write, uint64_t off, std::byte* buf, uint64_t len,
                      Status* s) {
  if (m.owner == self()) {
    *s = lmrs_.with_checked(m.ref(), write ? kRightWrite : kRightRead, off, len, [&](LocalLmr& l) {
      if (write) {
        lmr_copy(l.mem + off, buf, len);
      } else {
        lmr_copy(buf, l.mem + off, len);
      }
      return Status::ok();
    });
    return true;
  }
  if (len > UINT32_MAX) return false;
  NativeOps ops;
  uint64_t rkey = 0;
  if (const transport::MappedRegion* v = kept_view(m, &rkey)) {
    ops.set_rw(write, buf, static_cast<uint32_t>(len), off, rkey);
    *s = view_op(m, rkey, *v, ops);
    return true;
  }
  EndpointRef ep;
  if (!native_endpoint(m, &ep, &rkey)) return false;
  ops.set_rw(write, buf, static_cast<uint32_t>(len), off, rkey);
  *s = native_op(m, rkey, ep.get(), ops);
  return true;
}

bool Engine::read_now(LmrHandle h, uint64_t off, void* buf, uint64_t len, Status* s) {
  if (expelled_.load(std::memory_order_relaxed)) return (*s = Code::kClosed), true;
  MappingRef m;
  *s = client_.handles.check(h, kRightRead, off, len, &m);
  if (!s->is_ok()) return true;
  if (buf == nullptr && len != 0) return (*s = Code::kInvalidArg), true;
  if (len == 0) return true;
  return sched_.gated(len, m->owner, default_deadline(), s, [&] {
    return copy_now(*m, false, off, static_cast<std::byte*>(buf), len, s);
  });
}

bool Engine::write_now(LmrHandle h, uint64_t off, const void* buf, uint64_t len, Status* s) {
  if (expelled_.load(std::memory_order_relaxed)) return (*s = Code::kClosed), true;
  MappingRef m;
  *s = client_.handles.check(h, kRightWrite, off, len, &m);
  if (!s->is_ok()) return true;
  if (buf == nullptr && len != 0) return (*s = Code::kInvalidArg), true;
  if (len == 0) return true;
  // Written from, never to: the cast only shares copy_now with reads.
  return sched_.gated(len, m->owner, default_deadline(), s, [&] {
    return copy_now(*m, true, off, static_cast<std::byte*>(const_cast<void*>(buf)), len, s);
  });
}

Result<ReqId> Engine::read_async(LmrHandle h, uint64_t off, void* buf, uint64_t len) {
  MappingRef m;
  LT_RETURN_IF_ERROR(client_.handles.check(h, kRightRead, off, len, &m));
  if (buf == nullptr && len != 0) return Code::kInvalidArg;
  if (len == 0) return done_request(Status::ok());
  // The slot first: an op done at once must not be followed by a refusal.
  ReqId id = 0;
  auto r = alloc_request(ReqKind::kRead, 0, &id, len);
  if (!r) return r.status();
  if (Status s; copy_now(*m, false, off, static_cast<std::byte*>(buf), len, &s)) {
    return finish_now(*r, id, s);
  }
  if (len > max_payload_ - sizeof(MsgHeader)) return drop_unsent(*r, Code::kInvalidArg);
  (*r)->peer.store(m->owner);
  (*r)->out = static_cast<std::byte*>(buf);
  (*r)->out_len = len;
  RangeReq q{make_header(MsgOp::kReadReq, id), m->ref(), off, len, 0, 0};
  LT_RETURN_IF_ERROR(send_request(*r, m->owner, &q, sizeof(q), nullptr, 0));
  return id;
}

Result<ReqId> Engine::write_async(LmrHandle h, uint64_t off, const void* buf, uint64_t len) {
  MappingRef m;
  LT_RETURN_IF_ERROR(client_.handles.check(h, kRightWrite, off, len, &m));
  if (buf == nullptr && len != 0) return Code::kInvalidArg;
  if (len == 0) return done_request(Status::ok());
  ReqId id = 0;
  auto r = alloc_request(ReqKind::kPlain, 0, &id, len);
  if (!r) return r.status();
  if (Status s; copy_now(*m, true, off, static_cast<std::byte*>(const_cast<void*>(buf)), len, &s)) {
    return finish_now(*r, id, s);
  }
  if (len > max_payload_ - sizeof(RangeReq)) return drop_unsent(*r, Code::kInvalidArg);
  (*r)->peer.store(m->owner);
  RangeReq q{make_header(MsgOp::kWriteReq, id), m->ref(), off, len, 0, 0};
  // A large payload goes from the caller's buffer where the transport can
  // (tcp): no copy of what the socket cannot take now. Not for a thread
  // whose posts are deferred: those are queued whole, later.
  if (len >= kByRefMinBytes && !sched_.defers_posts() && sends_by_ref(m->owner)) {
    LT_RETURN_IF_ERROR(send_request_by_ref(*r, id, m->owner, &q, sizeof(q), buf, len));
    return id;
  }
  LT_RETURN_IF_ERROR(send_request(*r, m->owner, &q, sizeof(q), buf, len));
  return id;
}

Result<ReqId> Engine::memset_async(LmrHandle h, uint64_t off, uint8_t value, uint64_t len) {
  MappingRef m;
  LT_RETURN_IF_ERROR(client_.handles.check(h, kRightWrite, off, len, &m));
  if (len == 0) return done_request(Status::ok());
  ReqId id = 0;
  auto r = alloc_request(ReqKind::kPlain, 0, &id, len);
  if (!r) return r.status();
  if (m->owner == self()) {
    return finish_now(*r, id, lmrs_.with_checked(m->ref(), kRightWrite, off, len, [&](LocalLmr& l) {
      lmr_fill(l.mem + off, value, len);
      return Status::ok();
    }));
  }
  if (Status s; memset_now(*m, off, value, len, &s)) return finish_now(*r, id, s);
  (*r)->peer.store(m->owner);
  RangeReq q{make_header(MsgOp::kMemsetReq, id), m->ref(), off, len, value, 0};
  LT_RETURN_IF_ERROR(send_request(*r, m->owner, &q, sizeof(q), nullptr, 0));
  return id;
}

// LT_memset of a peer's LMR reached natively: one-sided writes from a
// buffer of the byte (this thread's, made once), in chunks, each checked as
// native_op checks a write. No request, no work by the owner. False: it must
// go as a request.
bool Engine::memset_now(const Mapping& m, uint64_t off, uint8_t value, uint64_t len, Status* s) {
  EndpointRef ep;
  uint64_t rkey = 0;
  if (!native_endpoint(m, &ep, &rkey)) return false;
  constexpr size_t kChunk = 64u << 10;
  thread_local std::unique_ptr<std::byte[]> fill;
  thread_local int filled_with = -1;
  if (!fill) {
    fill.reset(new (std::nothrow) std::byte[kChunk]);
    if (!fill) return false;
    filled_with = -1;
  }
  if (filled_with != value) {
    std::memset(fill.get(), value, kChunk);
    filled_with = value;
  }
  *s = Status::ok();
  for (uint64_t done = 0; done < len && s->is_ok();) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(kChunk, len - done));
    NativeOps ops;
    ops.set_rw(true, fill.get(), n, off + done, rkey);
    *s = native_op(m, rkey, ep.get(), ops);
    done += n;
  }
  return true;
}

Status Engine::local_copy(const Mapping& dst, uint64_t doff, const Mapping& src, uint64_t soff,
                          uint64_t len) {
  return lmrs_.with_checked(dst.ref(), kRightWrite, doff, len, [&](LocalLmr& d) {
    return lmrs_.with_checked(src.ref(), kRightRead, soff, len, [&](LocalLmr& s) {
      lmr_copy(d.mem + doff, s.mem + soff, len);
      return Status::ok();
    });
  });
}

Result<ReqId> Engine::memcpy_async(LmrHandle dst, uint64_t dst_off, LmrHandle src, uint64_t src_off,
                                   uint64_t len) {
  MappingRef d, s;
  LT_RETURN_IF_ERROR(client_.handles.check(dst, kRightWrite, dst_off, len, &d));
  LT_RETURN_IF_ERROR(client_.handles.check(src, kRightRead, src_off, len, &s));
  if (len == 0) return done_request(Status::ok());
  if (d->owner == s->owner && d->owner == self()) {
    ReqId id = 0;
    auto r = alloc_request(ReqKind::kPlain, 0, &id, len);
    if (!r) return r.status();
    return finish_now(*r, id, local_copy(*d, dst_off, *s, src_off, len));
  }
  if (d->owner == s->owner) {  // both on one other node: it copies
    ReqId id = 0;
    auto r = alloc_request(ReqKind::kPlain, d->owner, &id, len);
    if (!r) return r.status();
    MemcpyReq q{make_header(MsgOp::kMemcpyReq, id), d->ref(), s->ref(), dst_off, src_off, len};
    LT_RETURN_IF_ERROR(send_request(*r, d->owner, &q, sizeof(q), nullptr, 0));
    return id;
  }
  {
    ReqId id = 0;
    auto r = alloc_request(ReqKind::kPlain, 0, &id, len);
    if (!r) return r.status();
    if (Status st; memcpy_now(*d, dst_off, *s, src_off, len, &st)) return finish_now(*r, id, st);
    (void)drop_unsent(*r, Status::ok());  // not reached natively: requests below
  }
  if (len > max_payload_ - sizeof(RangeReq)) return Code::kInvalidArg;
  return memcpy_remote(*d, dst_off, *s, src_off, len);
}

// A memcpy between two nodes' LMRs where each end is this node's or reached
// natively (shm, rc): no request, no work by either owner. This node's end
// is read from or written into in place; with both ends remote, the bytes
// pass through a buffer of this thread (64 KiB, made once), a read and a
// write per chunk. False: it must go as requests (memcpy_remote).
bool Engine::memcpy_now(const Mapping& d, uint64_t doff, const Mapping& s, uint64_t soff,
                        uint64_t len, Status* st) {
  EndpointRef dep, sep;
  uint64_t dkey = 0, skey = 0;
  if (d.owner != self() && !native_endpoint(d, &dep, &dkey)) return false;
  if (s.owner != self() && !native_endpoint(s, &sep, &skey)) return false;
  auto one = [&](bool write, const Mapping& m, uint64_t rkey, transport::Endpoint* ep, uint64_t off,
                 std::byte* buf, uint64_t n) {
    NativeOps ops;
    ops.set_rw(write, buf, static_cast<uint32_t>(n), off, rkey);
    return native_op(m, rkey, ep, ops);
  };
  constexpr uint64_t kChunk = 64u << 10;  // also what one post may carry (below 4 GiB)
  if (s.owner == self() || d.owner == self()) {
    const bool from_here = s.owner == self();
    const Mapping& here = from_here ? s : d;
    const Mapping& there = from_here ? d : s;
    *st = lmrs_.with_checked(here.ref(), from_here ? kRightRead : kRightWrite,
                             from_here ? soff : doff, len, [&](LocalLmr& l) {
                               Status r;
                               std::byte* at = l.mem + (from_here ? soff : doff);
                               const uint64_t toff = from_here ? doff : soff;
                               for (uint64_t k = 0; k < len && r.is_ok(); k += kChunk) {
                                 RacyAccess racy;  // LMR bytes, raced by design
                                 r = one(from_here, there, from_here ? dkey : skey,
                                         from_here ? dep.get() : sep.get(), toff + k, at + k,
                                         std::min(kChunk, len - k));
                               }
                               return r;
                             });
    return true;
  }
  thread_local std::unique_ptr<std::byte[]> buf;
  if (!buf) buf.reset(new (std::nothrow) std::byte[kChunk]);
  if (!buf) return false;
  *st = Status::ok();
  for (uint64_t k = 0; k < len && st->is_ok(); k += kChunk) {
    const uint64_t n = std::min(kChunk, len - k);
    *st = one(false, s, skey, sep.get(), soff + k, buf.get(), n);
    if (st->is_ok()) *st = one(true, d, dkey, dep.get(), doff + k, buf.get(), n);
  }
  return true;
}

// A memcpy between two nodes: from here, one write carries the source to
// the destination's owner; from elsewhere, a read into a bounce buffer and
// then a write on (copy_second_half).
Result<ReqId> Engine::memcpy_remote(const Mapping& d, uint64_t dst_off, const Mapping& s,
                                    uint64_t src_off, uint64_t len) {
  ReqId id = 0;
  if (s.owner == self()) {
    auto r = alloc_request(ReqKind::kPlain, d.owner, &id, len);
    if (!r) return r.status();
    RangeReq q{make_header(MsgOp::kWriteReq, id), d.ref(), dst_off, len, 0, 0};
    bool sent = false;
    Status st = lmrs_.with_checked(s.ref(), kRightRead, src_off, len, [&](LocalLmr& l) {
      sent = true;
      return send_request(*r, d.owner, &q, sizeof(q), l.mem + src_off, len);
    });
    // Refused before anything was sent: the request is still ours.
    if (!st.is_ok() && !sent) return drop_unsent(*r, st);
    if (!st.is_ok()) return st;
    return id;
  }
  auto r = alloc_request(ReqKind::kCopyRead, s.owner, &id, len);
  if (!r) return r.status();
  (*r)->bounce.reset(new (std::nothrow) std::byte[len]);
  if (!(*r)->bounce) {
    (*r)->set_claimed();
    finish(*r, Code::kNoMemory);
    return id;
  }
  (*r)->out = (*r)->bounce.get();
  (*r)->out_len = len;
  (*r)->copy_dst = std::make_shared<Mapping>(d);
  (*r)->copy_dst_off = dst_off;
  RangeReq q{make_header(MsgOp::kReadReq, id), s.ref(), src_off, len, 0, 0};
  LT_RETURN_IF_ERROR(send_request(*r, s.owner, &q, sizeof(q), nullptr, 0));
  return id;
}

bool Engine::copy_second_half(Request* r, const MsgHeader& h, Status* s) {
  const Mapping& d = *r->copy_dst;
  if (d.owner == self()) {
    *s = lmrs_.with_checked(d.ref(), kRightWrite, r->copy_dst_off, r->out_len, [&](LocalLmr& l) {
      lmr_copy(l.mem + r->copy_dst_off, r->bounce.get(), r->out_len);
      return Status::ok();
    });
    return false;
  }
  r->kind = ReqKind::kPlain;
  r->peer.store(d.owner);
  RangeReq q{make_header(MsgOp::kWriteReq, h.req_id), d.ref(), r->copy_dst_off, r->out_len, 0, 0};
  // Once pending, a timeout or peer-down sweep may release the request:
  // keep the data in a local owner until the transport has taken it.
  std::unique_ptr<std::byte[]> data = std::move(r->bounce);
  uint64_t len = r->out_len;
  const uint32_t gen = req_gen(h.req_id);
  r->word.store(req_word(gen, kStPending), std::memory_order_release);
  Status ss = send(d.owner, &q, sizeof(q), data.get(), len, default_deadline(), true);
  if (ss.is_ok()) return true;
  if (!r->move(gen, kStPending, kStClaimed)) return true;  // a sweep or timeout took it
  *s = ss;
  return false;
}

void Engine::serve_read(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  auto q = load<RangeReq>(b);
  Status s = lmrs_.with_checked(q.lmr, kRightRead, q.offset, q.len, [&](LocalLmr& l) -> Status {
    if (q.len > max_payload_ - sizeof(MsgHeader)) return Code::kInvalidArg;
    // The transport copies what the socket does not take, so the LMR is
    // only read while we hold it.
    MsgHeader rh = make_header(MsgOp::kReply, h.req_id);
    RacyAccess racy;  // the LMR bytes (other send paths keep the checks)
    (void)send(from, &rh, sizeof(rh), l.mem + q.offset, q.len, default_deadline(), true);
    return Status::ok();
  });
  if (!s.is_ok()) reply_status(from, h.req_id, s);
}

// kWriteReq (the bytes follow) and kMemsetReq (the value is in the request).
void Engine::serve_write(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  auto q = load<RangeReq>(b);
  const bool write = h.op == static_cast<uint8_t>(MsgOp::kWriteReq);
  if ((write && b.size() - sizeof(RangeReq) != q.len) || (!write && q.value > 0xff)) {
    return reply_status(from, h.req_id, Code::kMalformed);
  }
  Status s = lmrs_.with_checked(q.lmr, kRightWrite, q.offset, q.len, [&](LocalLmr& l) {
    if (write) {
      lmr_copy(l.mem + q.offset, b.data() + sizeof(RangeReq), q.len);
    } else {
      lmr_fill(l.mem + q.offset, static_cast<int>(q.value), q.len);
    }
    return Status::ok();
  });
  reply_status(from, h.req_id, s);
}

void Engine::serve_memcpy(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  auto q = load<MemcpyReq>(b);
  Status s = lmrs_.with_checked(q.dst, kRightWrite, q.dst_offset, q.len, [&](LocalLmr& d) {
    return lmrs_.with_checked(q.src, kRightRead, q.src_offset, q.len, [&](LocalLmr& s) {
      lmr_copy(d.mem + q.dst_offset, s.mem + q.src_offset, q.len);
      return Status::ok();
    });
  });
  reply_status(from, h.req_id, s);
}

}  // namespace lt::proto
