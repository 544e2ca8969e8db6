// Reaching peers: the endpoint cache (connect on first use) and the one path
// every message takes to a transport, through the QoS scheduler.
#include <chrono>
#include <thread>

#include "common/log.h"
#include "common/net.h"
#include "proto/engine.h"
#include "qos/cpu_policy.h"

namespace lt::proto {

using transport::WorkRequest;

// ---- PeerTable: endpoints, retired when replaced or forgotten

void PeerTable::retire_locked(Slot& s) {
  s.ep.store(nullptr, std::memory_order_seq_cst);  // unpublished before the snapshot
  if (!s.owned) return;
  retired_.push_back({std::move(s.owned), Quiescence::snapshot()});
  retired_count_.store(retired_.size(), std::memory_order_release);
}

void PeerTable::retire(NodeId p) {
  if (!valid(p)) return;
  std::lock_guard<std::mutex> g(retired_mu_);
  Slot& s = at(p);
  if (s.id.load(std::memory_order_relaxed) == p) retire_locked(s);
}

PeerTable::Claim PeerTable::claim(NodeId p) {
  Slot& s = at(p);
  std::lock_guard<std::mutex> g(retired_mu_);
  NodeId holder = s.id.load(std::memory_order_relaxed);
  if (holder == p) return Claim::kHeld;
  if (holder > p) return Claim::kStale;
  // The id first (seq_cst): a reader that then finds an endpoint checks the
  // id after it (live()), so the older node's callers never get the newer
  // node's endpoint.
  s.id.store(p, std::memory_order_seq_cst);
  retire_locked(s);
  s.via.store(nullptr, std::memory_order_release);
  s.why.store(nullptr, std::memory_order_release);
  s.native.store(-1, std::memory_order_release);
  s.down.store(false, std::memory_order_release);
  s.here.store(false, std::memory_order_relaxed);
  return Claim::kTaken;
}

transport::Endpoint* PeerTable::install(NodeId p, std::unique_ptr<transport::Endpoint> ep,
                                        transport::Transport* via, const char* why, int native_slot,
                                        bool here) {
  transport::Endpoint* e = ep.get();
  Slot& s = at(p);
  std::lock_guard<std::mutex> g(retired_mu_);
  retire_locked(s);  // a dead connection's endpoint, if there was one
  s.owned = std::move(ep);
  s.via.store(via, std::memory_order_release);
  s.why.store(why, std::memory_order_release);
  s.native.store(static_cast<int8_t>(native_slot), std::memory_order_release);
  s.here.store(here, std::memory_order_relaxed);
  s.ep.store(e, std::memory_order_release);
  return e;
}

void PeerTable::collect() {
  std::lock_guard<std::mutex> g(retired_mu_);
  std::erase_if(retired_, [](const Retired& r) { return Quiescence::passed(r.inside); });
  retired_count_.store(retired_.size(), std::memory_order_release);
}

size_t PeerTable::retired() const { return retired_count_.load(std::memory_order_acquire); }

// ---- Engine: reaching peers

// endpoint() without a usable cached endpoint: PEER_DOWN, or a connection.
Status Engine::endpoint_slow(NodeId p, Deadline d, EndpointRef* out) {
  if (!peers_.valid(p) || peers_.down(p)) return Code::kPeerDown;
  if (transport::Endpoint* e = peers_.live(p); e != nullptr) {
    out->set(e);
    return Status::ok();
  }
  return connect_peer(p, d, out);
}

// The cold path of endpoint(): first contact or a reconnect.
Status Engine::connect_peer(NodeId p, Deadline d, EndpointRef* out) {
  // A node that joined moments ago may not be in our address book yet (the
  // manager's MemberUp for it is on its way to our progress thread): wait
  // for it, bounded, unless we are that thread.
  if (!membership_->peer(p) &&
      std::this_thread::get_id() != progress_tid_.load(std::memory_order_acquire)) {
    Deadline w = Deadline::after_ms(config_.tcp.connect_timeout_ms);
    if (d.at_ns() < w.at_ns()) w = d;
    while (!membership_->peer(p) && !w.expired() && !peers_.down(p)) {
      if (peers_.live(p) != nullptr) break;  // it reached us first
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (peers_.down(p)) return Code::kPeerDown;
  }
  std::lock_guard<std::mutex> g(peers_.connect_mutex());
  if (transport::Endpoint* e = peers_.live(p); e != nullptr) {
    out->set(e);
    return Status::ok();
  }
  // A peer can reach us before the manager's MemberUp for it does; its
  // inbound connection (authenticated by the cluster token) is then reused.
  Deadline cd = Deadline::after_ms(config_.tcp.connect_timeout_ms);
  if (d.at_ns() < cd.at_ns()) cd = d;
  auto info = membership_->peer(p);
  Result<std::unique_ptr<transport::Endpoint>> ep = Code::kPeerDown;
  transport::Transport* via = nullptr;
  const char* why = "";
  if (info) {
    via = transports_.pick(*info, &why);
    if (via == nullptr) {
      LT_WARN("node %u: no common transport (ours: %s)", p, config_.transports.c_str());
      return Code::kUnsupported;
    }
    ep = via->connect(*info, cd);
    // No room on that transport for this peer (rc's QP budget, here or at
    // the peer): the next one both have.
    while (!ep && ep.status().code() == Code::kNoResource) {
      transport::Transport* next = transports_.pick(*info, &why, via);
      if (next == nullptr) break;
      LT_INFO("node %u: no room on %s; trying %s", p, via->name(), next->name());
      via = next;
      ep = via->connect(*info, cd);
    }
  } else {
    // Not in our address book yet: only an inbound connection (whichever
    // transport it came on, authenticated by the cluster token) can serve.
    for (auto& t : transports_.all()) {
      ep = t->connect(transport::PeerInfo{p, "", {}}, cd);
      if (ep) {
        via = t.get();
        why = "the peer connected first";
        break;
      }
    }
  }
  if (!ep) return ep.status().code() == Code::kTimedOut ? Code::kTimedOut : Code::kPeerDown;
  // The membership knows `p`, or `p` reached us (its hello named it): it
  // holds its slot, unless a newer node does.
  if (!claim_peer(p)) return Code::kPeerDown;
  // Without an address book entry (the peer reached us first), which of its
  // LMR keys our transport uses is settled at the first native op.
  const int slot = info ? PeerTable::native_access(transports_.native_slot(*info, via),
                                                   transports_.native_atomics(*info, via))
                        : PeerTable::kUnsettled;
  const bool here = info && transports_.same_machine(*info);
  out->set(peers_.install(p, std::move(ep.value()), via, why, slot, here));
  return Status::ok();
}

Status Engine::send(NodeId p, const void* hdr, size_t hlen, const void* data, size_t dlen,
                    Deadline d, bool reply, bool more, bool express) {
  EndpointRef ep;
  LT_RETURN_IF_ERROR(endpoint(p, d, &ep));
  return send_on(p, ep.get(), hdr, hlen, data, dlen, d, reply, more, express);
}

// A message from a thread whose posts are not deferred is first offered to
// the transport's short path (Endpoint::post_short: no work request built,
// one traffic count), unless it is to be held (kWrMore) by a transport that
// gathers; what the short path does not take goes by post_all(), which
// queues it, waits for room or says why. An express message from a thread
// that does not run idle is offered to the express path instead (shm's
// lane): a thread running idle stays off it, so that the lane's lock is
// never held by a thread the kernel leaves preempted.
Status Engine::send_on(NodeId p, transport::Endpoint* ep, const void* hdr, size_t hlen,
                       const void* data, size_t dlen, Deadline d, bool reply, bool more,
                       bool express) {
  // A reply sent while handling a batch with more to come waits for the
  // batch's last reply (or the flush after it): one system call per batch.
  if (reply && holder_.load(std::memory_order_relaxed) == std::this_thread::get_id() &&
      more_in_batch_) {
    more = true;
  }
  // kWrMore means nothing to a transport that does not gather (shm, verbs).
  const transport::Transport* via = peers_.via(p);
  if (via != nullptr && (!more || !via->caps().gathers) && !sched_.defers_posts() &&
      (express && !qos::thread_runs_idle() ? ep->post_express(hdr, hlen, data, dlen)
                                           : ep->post_short(hdr, hlen, data, dlen))) {
    count_tx_one(p, via, hlen + dlen);
    return Status::ok();
  }
  WorkRequest wr;
  wr.op = transport::Op::kSend;
  wr.num_sge = dlen ? 2 : 1;
  wr.sge[0] = {static_cast<const std::byte*>(hdr), static_cast<uint32_t>(hlen), 0};
  wr.sge[1] = {static_cast<const std::byte*>(data), static_cast<uint32_t>(dlen), 0};
  if (reply) wr.flags |= transport::kWrMustQueue;
  if (more) wr.flags |= transport::kWrMore;
  return post_all(p, ep, std::span<const WorkRequest>(&wr, 1), d);
}

// Posts work requests to `p` in order, polling while the transport pushes
// back, until `d`. A broken connection retires the endpoint (PEER_DOWN).
// *posted (if given) says how many went before a failure.
Status Engine::post_all(NodeId p, transport::Endpoint* ep, std::span<const WorkRequest> wrs,
                        Deadline d, size_t* posted) {
  auto r = post_via_sched(p, ep, wrs);
  if (r && *r == wrs.size()) {  // the usual case: all taken at once
    count_tx(p, wrs);
    if (posted != nullptr) *posted = wrs.size();
    return Status::ok();
  }
  return post_rest(p, ep, wrs, d, posted, std::move(r));
}

void Engine::ask_for_flush() {
  if (!flush_asked_.exchange(true, std::memory_order_seq_cst)) net::ring_eventfd(wake_fd_);
}

// post_all's loop, from the first attempt's result `r`.
Status Engine::post_rest(NodeId p, transport::Endpoint* ep, std::span<const WorkRequest> wrs,
                         Deadline d, size_t* posted, Result<size_t> r) {
  size_t done = 0;
  Status s;
  for (bool first = true; done < wrs.size(); first = false) {
    if (!first) r = post_via_sched(p, ep, wrs.subspan(done));
    if (!r) {
      if (r.status().code() == Code::kPeerDown) peers_.retire(p);
      s = r.status();
      break;
    }
    if (*r > 0) {
      count_tx(p, wrs.subspan(done, *r));
      done += *r;
      continue;
    }
    if (d.expired()) {
      s = Code::kTimedOut;
      break;
    }
    if (!progress()) cpu_relax();
  }
  if (posted != nullptr) *posted = done;
  return s;
}

Status Engine::send_request(Request* r, NodeId p, const void* hdr, size_t hlen, const void* data,
                            size_t dlen, bool more, bool express) {
  // Publish the request's fields to whichever thread completes it: the
  // reply may come back through another process's shared memory, which
  // carries no happens-before edge that tools (TSan) can see.
  r->word.store(r->word.load(std::memory_order_relaxed), std::memory_order_release);
  Status s = send(p, hdr, hlen, data, dlen, default_deadline(), false, more, express);
  if (!s.is_ok()) drop_unsent(r);
  return s;
}

// A request `r` (id `id`, to `p`) whose payload `data` the transport may
// send from where it is (kWrByRef): the request rests in SENDING until the
// transport's kSendDone (sent_by_ref) or the reply, whichever comes first,
// so that it is not withdrawn while the kernel may still read `data`.
Status Engine::send_request_by_ref(Request* r, ReqId id, NodeId p, const void* hdr, size_t hlen,
                                   const void* data, size_t dlen) {
  // Publishes the request's fields with the state (as send_request does).
  r->word.store(req_word(req_gen(id), kStSending), std::memory_order_release);
  WorkRequest wr;
  wr.op = transport::Op::kSend;
  wr.flags = transport::kWrSignaled | transport::kWrByRef;
  wr.wr_id = id;
  wr.num_sge = 2;
  wr.sge[0] = {static_cast<const std::byte*>(hdr), static_cast<uint32_t>(hlen), 0};
  wr.sge[1] = {static_cast<const std::byte*>(data), static_cast<uint32_t>(dlen), 0};
  EndpointRef ep;
  Deadline d = default_deadline();
  Status s = endpoint(p, d, &ep);
  if (s.is_ok()) s = post_all(p, ep.get(), std::span<const WorkRequest>(&wr, 1), d);
  if (!s.is_ok()) drop_unsent(r);  // not taken: no kSendDone comes
  return s;
}

// A post by reference was sent (or its connection broke): a rendezvous
// send (PLACING) ends; a write (SENDING) now waits for its reply like any
// request, or ends when its bytes could not go. Either may have been ended
// already (the reply, a peer-loss sweep): the state tells.
void Engine::sent_by_ref(ReqId id, Status s) {
  Request* r = client_.requests.slot(id);
  if (r == nullptr) return;
  const uint32_t gen = req_gen(id);
  if (r->move(gen, kStPlacing, kStClaimed)) return finish(r, s);
  if (s.is_ok()) {
    (void)r->move(gen, kStSending, kStPending);
  } else if (r->move(gen, kStSending, kStClaimed)) {
    finish(r, s);
  }
}

bool Engine::sends_by_ref(NodeId to) const {
  transport::Transport* t = peers_.via(to);
  return t != nullptr && t->caps().send_by_ref;
}

// A request whose message never left: nobody else can complete it. Claims
// it unless a peer-down sweep already did (then waits for its finish), and
// frees it.
void Engine::drop_unsent(Request* r) {
  uint64_t w = r->word.load();
  const uint32_t st = word_state(w);
  if (!((st == kStPending || st == kStSending) &&
        r->word.compare_exchange_strong(w, (w & ~uint64_t{0xff}) | kStClaimed))) {
    while (!r->done()) cpu_relax();
  }
  release(r);
}

void Engine::count_tx(NodeId p, std::span<const WorkRequest> wrs) {
  uint64_t bytes = 0;
  for (const WorkRequest& wr : wrs) {
    for (int i = 0; i < wr.num_sge; ++i) bytes += wr.sge[i].len;
  }
  traffic_.tx(p, transports_.index_of(peers_.via(p)), wrs.size(), bytes);
}

void Engine::reply_status(NodeId to, uint64_t req_id, Status s) {
  MsgHeader h = make_header(MsgOp::kReply, req_id, s.code());
  (void)send(to, &h, sizeof(h), nullptr, 0, default_deadline(), true);
}

}  // namespace lt::proto
