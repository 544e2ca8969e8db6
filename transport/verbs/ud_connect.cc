// The ud transport's peers: addresses, address handles, the kSyn that opens
// a stream (connect) and the kBye that closes them all.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "common/time.h"
#include "transport/verbs/ud_transport.h"

namespace lt::transport::verbs {

std::string format_ud_address(const UdAddress& a) {
  char buf[80];
  int k = 0;
  for (uint8_t b : a.gid) k += std::snprintf(buf + k, sizeof(buf) - k, "%02x", b);
  std::snprintf(buf + k, sizeof(buf) - k, "/%u/%u/%u", a.qpn, a.lid, a.mtu);
  return buf;
}

bool parse_ud_address(std::string_view text, UdAddress* out) {
  if (text.size() < 33 || text[32] != '/') return false;
  for (int i = 0; i < 16; ++i) {
    unsigned v = 0;
    if (std::sscanf(std::string(text.substr(2 * i, 2)).c_str(), "%2x", &v) != 1) return false;
    out->gid[i] = static_cast<uint8_t>(v);
  }
  unsigned qpn = 0, lid = 0, mtu = 0;
  char extra = 0;
  if (std::sscanf(std::string(text.substr(33)).c_str(), "%u/%u/%u%c", &qpn, &lid, &mtu, &extra) !=
          3 ||
      qpn == 0 || qpn > 0xffffff || lid > 0xffff || mtu < 256 || mtu > 4096) {
    return false;
  }
  out->qpn = qpn;
  out->lid = static_cast<uint16_t>(lid);
  out->mtu = mtu;
  return true;
}

// --- connections ---

Result<ibv_ah*> UdTransport::make_ah(const UdAddress& a, std::string* why) {
  const Choice& c = dev_->choice();
  ibv_ah_attr attr{};
  attr.is_global = 1;
  std::memcpy(attr.grh.dgid.raw, a.gid, 16);
  attr.grh.sgid_index = static_cast<uint8_t>(c.gid.index);
  attr.grh.hop_limit = 64;
  attr.dlid = a.lid;
  attr.port_num = static_cast<uint8_t>(c.port);
  ibv_ah* ah = ibv_create_ah(dev_->pd(), &attr);
  if (ah == nullptr) {
    *why = "ibv_create_ah on " + c.device + " port " + std::to_string(c.port) + " GID index " +
           std::to_string(c.gid.index) + " (" + c.gid.text + "): " + std::strerror(errno) +
           " (both ends need RoCE v2 GIDs of the same address family: verbs.gid_index, "
           "LTIER_VERBS_GID_INDEX; ltier-info --devices)";
    return Code::kPeerDown;
  }
  return ah;
}

UdSyn UdTransport::make_syn(NodeId to) {
  UdSyn s{};
  s.hello = make_hello(kUdHelloLabel, self(), to, token_.load(), hello_counter_.fetch_add(1) + 1,
                       hello_key_);
  std::memcpy(s.gid, dev_->gid().data(), 16);
  s.qpn = qp_->qp_num;
  s.lid = dev_->lid();
  s.mtu = mtu_;
  return s;
}

Result<std::unique_ptr<Endpoint>> UdTransport::connect(const PeerInfo& peer, Deadline d) {
  (void)d;  // no round trip: the stream opens with its first datagram
  if (self() == kNoNode) return Code::kNotJoined;
  if (auto c = conns_.serving(peer.node)) {
    return std::unique_ptr<Endpoint>(new ConnEndpoint<UdConn>(c));
  }
  const std::string address(peer.address(name()));
  UdAddress a;
  if (address.empty()) return Code::kPeerDown;
  if (!parse_ud_address(address, &a)) {
    LT_ERROR("ud: node %u has a bad address '%s'", peer.node, address.c_str());
    return Code::kPeerDown;
  }
  std::string why;
  auto ah = make_ah(a, &why);
  if (!ah) {
    LT_ERROR("ud: node %u: %s", peer.node, why.c_str());
    return ah.status();
  }
  auto conn = std::make_shared<UdConn>(this, peer.node, *ah, a.qpn, std::min(mtu_, a.mtu));
  auto served = conns_.add_dialed(peer.node, conn, [] { return Status::ok(); });
  if (!served) return served.status();
  if (served->get() == conn.get() && !conn->start(make_syn(peer.node))) {
    conn->broken_.store(true);  // the poller closes it
    has_broken_.store(true, std::memory_order_seq_cst);
    kick();
    LT_WARN("ud: no free send slot to open a stream to node %u (verbs.ud_send_slots)", peer.node);
    return Code::kNoResource;
  }
  return std::unique_ptr<Endpoint>(new ConnEndpoint<UdConn>(*served));
}

// A kBye to every peer with a stream both ways, and a short wait for the
// device to send them before the QP goes.
void UdTransport::say_bye() {
  std::vector<std::shared_ptr<UdConn>> all;
  conns_.for_each_locked([&](UdConn& c) {
    if (c.rx.stream != 0 && !c.dead_.load()) all.push_back(c.shared_from_this());
  });
  size_t sent = 0;
  for (auto& c : all) {
    uint32_t slot;
    if (!take_slots(1, &slot)) break;
    UdHeader h{};
    h.type = UdType::kBye;
    h.src = self();
    h.dst = c->peer();
    h.stream = c->tx_stream();
    h.ack_stream = c->rx.stream;
    std::memcpy(slot_ptr(slot), &h, sizeof(h));
    slot_state_[slot].store(kReleased, std::memory_order_relaxed);
    slot_posted(slot);
    const UdSend s{slot, static_cast<uint32_t>(sizeof(h)), kNoSeq};
    sent += send(*c, &s, 1);
  }
  const Deadline d = Deadline::after_ms(50);
  while (sent > 0 && sq_used_.load() > 0 && !d.expired()) poll_send_cq();
}

}  // namespace lt::transport::verbs
