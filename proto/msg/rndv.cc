// Rendezvous: a message above the eager threshold waits at its sender
// (MsgRts) until a receive matches it; the receiver then asks for it
// (MsgPull). The sender either places the bytes straight into the
// receive's registered buffer (single copy, Caps::placement) and says so
// (MsgPlaced), or sends them (MsgData). See ARCHITECTURE "Placement".
#include "common/log.h"
#include "proto/engine.h"

namespace lt::proto {

using transport::WorkRequest;

// Extra spin for a waiter on a `len`-byte rendezvous: about the time its
// copy takes at 4 GB/s, at most kMaxRendezvousSpinUs. A waiter that sleeps
// through the copy pays a wake-up (tens of µs here) after it.
uint32_t Engine::rendezvous_spin_us(uint64_t len) {
  return static_cast<uint32_t>(std::min<uint64_t>(len >> 12, kMaxRendezvousSpinUs));
}

// True when the sender `from` can write a `len`-byte message straight into
// a receive buffer of `cap` bytes (the transport to it places writes).
bool Engine::can_place(NodeId from, uint64_t len, uint64_t cap) const {
  if (!peers_.valid(from) || len == 0 || len > cap || len > UINT32_MAX) return false;
  transport::Transport* t = peers_.via(from);
  return t != nullptr && t->caps().placement;
}

// Registers the receive's buffer with the transport that reaches `from` and
// names it in the pull. Both ends of a pair pick the same transport (the
// choice depends on both nodes' offers), so the rkey is one the sender's
// endpoint understands. Nothing is offered if registration fails: the
// sender then sends the bytes in MsgData.
void Engine::offer_placement(Request* req, NodeId from, uint64_t len, MsgPull* pull) {
  transport::Transport* t = peers_.via(from);
  if (t == nullptr) return;
  auto mr =
      t->register_memory(std::span<std::byte>(req->out, len), transport::Access::kRemoteWrite);
  if (!mr.is_ok() || mr->rkey == 0) return;
  req->place_t = t;
  req->place_mr = *mr;
  pull->dst_addr = reinterpret_cast<uintptr_t>(req->out);
  pull->dst_rkey = mr->rkey;
}

void Engine::drop_placement(Request* r) {
  if (r->place_t == nullptr) return;
  r->place_t->deregister_memory(r->place_mr);
  r->place_t = nullptr;
  r->place_mr = {};
}

// Sends a receive's pull; a receive whose pull cannot go fails with why
// (false: the request may be gone).
bool Engine::send_pull(Request* req, ReqId id, NodeId to, transport::Endpoint* ep,
                       const MsgPull& pull) {
  Status s = ep != nullptr
                 ? send_on(to, ep, &pull, sizeof(pull), nullptr, 0, default_deadline(), true)
                 : send(to, &pull, sizeof(pull), nullptr, 0, default_deadline(), true);
  if (s.is_ok()) return true;
  // Unless a peer-down sweep failed it first (and its slot may be reused).
  if (req->move(req_gen(id), kStPlacing, kStClaimed)) finish(req, s);
  return false;
}

// A rendezvous request matched a posted receive (claimed by the caller):
// pull the data into it, or have the sender place it there.
void Engine::pull_matched(Request* r, NodeId from, uint64_t sender_req, uint64_t len, RndvSrc src) {
  r->peer.store(from);
  uint64_t w = r->word.load();
  // PLACING, placed or pulled: the pull consumes the sender's message, so
  // the receive cannot be withdrawn until the data is in (match_recv).
  r->word.store((w & ~uint64_t{0xff}) | kStPlacing, std::memory_order_release);
  start_pull(r, make_req_id(word_gen(w), r->idx), from, sender_req, len, src);
}

// The pull of a PLACING receive: with placement the sender writes into the
// buffer, and where it offered its own buffer (a split) we read the tail of
// the message from it meanwhile. The endpoint comes first: a sender whose
// message is the first contact between the two has no transport here until
// then, and its message would be pulled through the connection instead.
void Engine::start_pull(Request* r, ReqId id, NodeId from, uint64_t sender_req, uint64_t len,
                        RndvSrc src) {
  r->spin_extra_us.store(rendezvous_spin_us(len), std::memory_order_relaxed);
  MsgPull pull{make_header(MsgOp::kMsgPull, sender_req), id, 0, 0, 0};
  std::byte* dst = r->out;  // before the pull: once it is out, another thread may finish r
  bool sent = false;
  {
    EndpointRef ep;  // held until the pull is out: its post needs no second lookup
    const bool have_ep = endpoint(from, default_deadline(), &ep).is_ok();
    if (have_ep && can_place(from, len, r->out_len)) offer_placement(r, from, len, &pull);
    if (pull.dst_rkey != 0) pull.head_len = split_head(from, len, src);
    if (pull.head_len != 0) {
      r->split_local = r->split_remote = Code::kOk;
      r->split_withdrawn = false;
      r->split.store(split_word(req_gen(id), kSplitRecv, 2), std::memory_order_relaxed);
    }
    // Publish the request's fields (and a registration) to whichever thread
    // completes the receive (the answer may come through another process's
    // shared memory, an edge TSan cannot see); an RMW, so a concurrent
    // peer-down claim is kept.
    r->word.fetch_or(0, std::memory_order_release);
    sent = send_pull(r, id, from, have_ep ? ep.get() : nullptr, pull);
  }
  if (sent && pull.head_len != 0) {
    read_split_tail(r, id, from, sender_req, dst, len, pull.head_len, src);  // rndv_split.cc
  }
}

// The receiver is ready: send the rendezvous data, complete our send.
void Engine::serve_pull(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  auto q = load<MsgPull>(b);
  Request* r = client_.requests.slot(h.req_id);
  if (r == nullptr) return;
  const uint32_t gen = req_gen(h.req_id);
  // Claim first: only then are the request's plain fields ours to read.
  bool claimed = r->peer.load() == from && r->move(gen, kStPending, kStClaimed);
  if (claimed && r->kind != ReqKind::kSendRndv) {
    r->word.store(req_word(gen, kStPending), std::memory_order_release);  // not a send: undo
    claimed = false;
  }
  if (!claimed) {
    // The send was cancelled (timed out): tell the receiver, whose
    // receive then takes the next message instead.
    late_.fetch_add(1, std::memory_order_relaxed);
    MsgHeader d = make_header(MsgOp::kMsgData, q.recv_id, Code::kTimedOut);
    if (credits_.msg_credit_now()) d.flags |= kFlagCreditNow;
    (void)send(from, &d, sizeof(d), nullptr, 0, default_deadline(), true);
    return;
  }
  // Split: the receiver reads from the head on, and we end when it says so.
  const bool split = q.head_len != 0 && q.dst_rkey != 0 && r->split_running(gen, kSplitSend);
  if (!split) r->split.store(0, std::memory_order_relaxed);  // nobody reads our buffer
  Status s;
  bool sent = false;
  if (q.dst_rkey != 0) {
    // Single copy: write into the receiver's buffer, then say so (the
    // transport delivers MsgPlaced after the written bytes). Where the
    // transport sends from our buffer rather than copy what the socket
    // cannot take now (Caps::send_by_ref), the send rests in PLACING until
    // it says the bytes left (sent_by_ref), as a split's does.
    // Once PLACING, a peer-loss sweep may end the send: nothing of the
    // request is read after that (place_write gets its buffer and length).
    const uint64_t bytes = split ? std::min(q.head_len, r->out_len) : r->out_len;
    const bool by_ref = !split && bytes >= kByRefMinBytes && sends_by_ref(from);
    const std::byte* src = r->send_buf;
    const uint64_t msg_len = r->out_len;
    if (by_ref) r->word.store(req_word(gen, kStPlacing), std::memory_order_release);
    s = place_write(from, src, msg_len, q, bytes, by_ref ? h.req_id : 0, &sent);
    if (by_ref && (!sent || !s.is_ok())) {
      // Nothing went (the request is ours again), or the write went and its
      // notice did not: the connection is broken and the send fails now.
      if (!r->move(gen, kStPlacing, kStClaimed)) return;  // a peer-loss sweep ended it
    } else if (by_ref) {
      return;
    }
    // Refused (a ptrace policy may forbid cross-memory attach): send the bytes.
    if (!sent && s.code() != Code::kPeerDown) {
      LT_DEBUG("placement to node %u refused (%s); sending the data", from, s.text());
    }
  }
  if (!sent && s.code() != Code::kPeerDown) {
    MsgHeader d = make_header(MsgOp::kMsgData, q.recv_id);
    if (credits_.msg_credit_now()) d.flags |= kFlagCreditNow;  // at the tenant's cap: credits.h
    s = send(from, &d, sizeof(d), r->send_buf, r->out_len, default_deadline(), true);
  }
  if (split && s.code() != Code::kPeerDown) return end_split_send(r, gen, s);
  finish(r, s);
}

// The sender's side of placement: one kWrite of the message (`msg_len`
// bytes at `src`, of which the first `bytes`) into the receiver's registered
// buffer and its MsgPlaced, posted together (one system call on tcp, and the
// notice rides in the write's last segment).
// *wrote: the write went, so the send's outcome is this status. by_ref_id:
// post the write by reference, reported to sent_by_ref with this id (0: no).
// A peer-loss sweep may end such a send while the transport still points at
// its buffer; the connection is broken by then, so at most the kernel reads
// memory the caller reused, for a socket nobody reads.
Status Engine::place_write(NodeId to, const std::byte* src, uint64_t msg_len, const MsgPull& q,
                           uint64_t bytes, ReqId by_ref_id, bool* wrote) {
  if (bytes > UINT32_MAX) return Code::kInvalidArg;
  EndpointRef ep;
  Deadline d = default_deadline();
  LT_RETURN_IF_ERROR(endpoint(to, d, &ep));
  MsgPlaced pl{make_header(MsgOp::kMsgPlaced, q.recv_id), msg_len};
  if (credits_.msg_credit_now()) pl.h.flags |= kFlagCreditNow;
  WorkRequest wrs[2];
  wrs[0].op = transport::Op::kWrite;
  wrs[0].flags = transport::kWrMustQueue;
  wrs[0].num_sge = 1;
  wrs[0].sge[0] = {src, static_cast<uint32_t>(bytes), 0};
  wrs[0].remote = {q.dst_addr, q.dst_rkey};
  if (by_ref_id != 0) {
    wrs[0].flags |= transport::kWrSignaled | transport::kWrByRef;
    wrs[0].wr_id = by_ref_id;
  }
  wrs[1].op = transport::Op::kSend;
  wrs[1].flags = transport::kWrMustQueue;
  wrs[1].num_sge = 1;
  wrs[1].sge[0] = {reinterpret_cast<const std::byte*>(&pl), sizeof(pl), 0};
  size_t posted = 0;
  Status s = post_all(to, ep.get(), wrs, d, &posted);
  *wrote = posted > 0;
  return s;
}

// A rendezvous receive's answer: MsgPlaced (the bytes are in its buffer
// already) or MsgData (the bytes follow).
Status Engine::complete_recv(Request* r, NodeId from, MsgOp op, std::span<const std::byte> b) {
  if (op == MsgOp::kMsgPlaced) {
    uint64_t n = load<MsgPlaced>(b).len;
    if (r->place_t == nullptr || n > r->place_mr.len) return Code::kMalformed;
    *r->rpc_len = n;
    *r->msg_src = from;
    return Status::ok();
  }
  if (op != MsgOp::kMsgData) return Code::kMalformed;
  return fill_recv(r, from, b.subspan(sizeof(MsgHeader)));
}

}  // namespace lt::proto
