#include "proto/control.h"

#include <sys/socket.h>

#include <cerrno>

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
