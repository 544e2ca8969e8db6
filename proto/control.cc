#include "proto/control.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace lt::proto {

void put_member(wire::Writer& w, const Member& m) {
  w.u32(m.node);
  w.str(m.name);
  w.str(m.addresses);
  w.str(m.host_id);
  w.u32(m.rank);
}

bool get_member(wire::Reader& r, Member* m) {
  m->node = r.u32();
  m->name = std::string(r.str(256));
  m->addresses = std::string(r.str(256));
  m->host_id = std::string(r.str(256));
  m->rank = r.u32();
  return r.ok() && m->node != 0;
}

namespace {
constexpr std::string_view kJoinLabel = "ltier join v1";
constexpr std::string_view kJoinOkLabel = "ltier join-ok v1";

std::span<const std::byte> bytes_of(const std::string& s) { return as_bytes(s); }
std::string_view view(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}
}  // namespace

Mac hello_key(std::string_view secret, uint64_t cluster_token) {
  return hmac(secret,
              {as_bytes("ltier hello key v1"),
               std::span<const std::byte>(reinterpret_cast<const std::byte*>(&cluster_token),
                                          sizeof(cluster_token))});
}

std::string challenge_frame(const Nonce& manager_nonce) {
  std::string f = begin_ctl(CtlType::kChallenge);
  wire::Writer w(&f);
  w.u8(kHandshakeVersion);
  w.bytes(manager_nonce.data(), manager_nonce.size());
  finish_ctl(&f);
  return f;
}

bool parse_challenge(const std::string& payload, Nonce* manager_nonce) {
  wire::Reader r(bytes_of(payload));
  if (static_cast<CtlType>(r.u8()) != CtlType::kChallenge || r.u8() != kHandshakeVersion) {
    return false;
  }
  auto n = r.bytes(kNonceBytes);
  if (!r.ok() || !r.at_end()) return false;
  std::memcpy(manager_nonce->data(), n.data(), n.size());
  return true;
}

std::string join_body(const JoinRequest& j) {
  std::string body;
  wire::Writer w(&body);
  for (const std::string* s : {&j.name, &j.addresses, &j.host_id, &j.tenant}) w.str(*s);
  w.u32(j.rank);
  w.u32(j.claim_node);
  w.u64(j.claim_token);
  w.u32(static_cast<uint32_t>(j.seen.size()));
  for (uint32_t id : j.seen) w.u32(id);
  w.u32(static_cast<uint32_t>(j.locks.size()));
  for (auto& [name, owner] : j.locks) {
    w.str(name);
    w.u64(owner);
  }
  w.u32(static_cast<uint32_t>(j.names.size()));
  for (auto& name : j.names) w.str(name);
  w.u32(static_cast<uint32_t>(j.known.size()));
  for (uint32_t id : j.known) w.u32(id);
  return body;
}

std::string seal_join(std::string_view secret, const Nonce& manager_nonce, const Nonce& node_nonce,
                      std::string_view body) {
  Mac mac = hmac(secret, {as_bytes(kJoinLabel), manager_nonce, node_nonce, as_bytes(body)});
  std::string f = begin_ctl(CtlType::kJoin);
  wire::Writer w(&f);
  w.bytes(node_nonce.data(), node_nonce.size());
  w.bytes(mac.data(), mac.size());
  w.bytes(body.data(), body.size());
  finish_ctl(&f);
  return f;
}

std::string join_frame(std::string_view secret, const Nonce& manager_nonce, const Nonce& node_nonce,
                       const JoinRequest& j) {
  return seal_join(secret, manager_nonce, node_nonce, join_body(j));
}

Code open_join(const std::string& payload, std::string_view secret, const Nonce& manager_nonce,
               JoinRequest* j, Nonce* node_nonce) {
  wire::Reader r(bytes_of(payload));
  r.u8();  // kJoin
  auto nonce = r.bytes(kNonceBytes);
  auto mac = r.bytes(kMacBytes);
  if (!r.ok()) return Code::kMalformed;
  auto body = r.rest();
  std::memcpy(node_nonce->data(), nonce.data(), nonce.size());
  Mac want = hmac(secret, {as_bytes(kJoinLabel), manager_nonce, *node_nonce, body});
  if (!same_mac(mac, want)) return Code::kAuth;
  wire::Reader b(body);
  for (std::string* s : {&j->name, &j->addresses, &j->host_id, &j->tenant}) {
    *s = std::string(b.str(256));
  }
  j->rank = b.u32();
  j->claim_node = b.u32();
  j->claim_token = b.u64();
  uint32_t nseen = b.u32();
  for (uint32_t i = 0; b.ok() && i < nseen && i < kNodeSlots; ++i) j->seen.push_back(b.u32());
  if (nseen > kNodeSlots) return Code::kMalformed;
  uint32_t nlocks = b.u32();
  for (uint32_t i = 0; b.ok() && i < nlocks && i < kMaxClaims; ++i) {
    std::string name(b.str(256));
    j->locks.emplace_back(std::move(name), b.u64());
  }
  uint32_t nnames = nlocks <= kMaxClaims ? b.u32() : kMaxClaims + 1;
  for (uint32_t i = 0; b.ok() && i < nnames && i < kMaxClaims; ++i) {
    j->names.emplace_back(b.str(256));
  }
  uint32_t nknown = nnames <= kMaxClaims ? b.u32() : kMaxMembers + 1;
  for (uint32_t i = 0; b.ok() && i < nknown && i < kMaxMembers; ++i) j->known.push_back(b.u32());
  if (!b.ok() || !b.at_end() || nknown > kMaxMembers) return Code::kMalformed;
  return Code::kOk;
}

std::string join_ok_frame(std::string_view secret, const Nonce& node_nonce,
                          const Nonce& manager_nonce, const std::string& answer) {
  Mac mac = hmac(secret, {as_bytes(kJoinOkLabel), node_nonce, manager_nonce, bytes_of(answer)});
  std::string f = begin_ctl(CtlType::kJoinOk);
  wire::Writer w(&f);
  w.bytes(mac.data(), mac.size());
  w.bytes(answer.data(), answer.size());
  finish_ctl(&f);
  return f;
}

Code open_join_ok(const std::string& payload, std::string_view secret, const Nonce& node_nonce,
                  const Nonce& manager_nonce, std::string* answer) {
  wire::Reader r(bytes_of(payload));
  r.u8();  // kJoinOk
  auto mac = r.bytes(kMacBytes);
  if (!r.ok()) return Code::kMalformed;
  auto rest = r.rest();
  Mac want = hmac(secret, {as_bytes(kJoinOkLabel), node_nonce, manager_nonce, rest});
  if (!same_mac(mac, want)) return Code::kAuth;
  answer->assign(view(rest));
  return Code::kOk;
}

std::string begin_ctl(CtlType type) {
  std::string s;
  wire::FrameHeader h = wire::make_frame(wire::FrameKind::kControl, 0);
  s.append(reinterpret_cast<const char*>(&h), sizeof(h));
  s.push_back(static_cast<char>(type));
  return s;
}

void finish_ctl(std::string* frame) {
  uint32_t len = static_cast<uint32_t>(frame->size() - sizeof(wire::FrameHeader));
  std::memcpy(frame->data() + offsetof(wire::FrameHeader, length), &len, sizeof(len));
}

Status CtlStream::fill(int fd) {
  char tmp[16384];
  for (;;) {
    ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
    if (n > 0) {
      buf_.append(tmp, static_cast<size_t>(n));
      if (buf_.size() - begin_ > 4 * kMaxCtlFrame) return Code::kMalformed;
      continue;
    }
    if (n == 0) return Code::kPeerDown;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::ok();
    return Code::kPeerDown;
  }
}

Status CtlStream::next(std::string* payload) {
  auto bytes = std::span<const std::byte>(reinterpret_cast<const std::byte*>(buf_.data()) + begin_,
                                          buf_.size() - begin_);
  wire::FrameHeader h;
  Status s = wire::decode_frame_header(bytes, kMaxCtlFrame, &h);
  if (!s.is_ok()) return s;
  if (h.kind != static_cast<uint8_t>(wire::FrameKind::kControl) || h.length == 0) {
    return Code::kMalformed;
  }
  if (bytes.size() < sizeof(h) + h.length) return Code::kNoResource;
  const char* body = buf_.data() + begin_ + sizeof(h);
  const uint8_t t = static_cast<uint8_t>(body[0]);
  // A frame of an unknown type is consumed like the others, but its payload
  // is not handed out: outputs are set only on success.
  const bool known = t != 0 && t <= kMaxCtlType;
  if (known) payload->assign(body, h.length);
  begin_ += sizeof(h) + h.length;
  if (begin_ == buf_.size()) {
    buf_.clear();
    begin_ = 0;
  } else if (begin_ > 65536) {
    buf_.erase(0, begin_);
    begin_ = 0;
  }
  return known ? Status::ok() : Status(Code::kMalformed);
}

}  // namespace lt::proto
