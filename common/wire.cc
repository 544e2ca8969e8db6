#include "common/wire.h"

namespace lt::wire {

Status decode_frame_header(std::span<const std::byte> bytes, uint32_t max_len, FrameHeader* out) {
  if (bytes.size() < sizeof(FrameHeader)) return Code::kNoResource;
  FrameHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (h.magic != kFrameMagic || h.version != kWireVersion || h.kind == 0 ||
      h.kind > kMaxFrameKind || h.reserved != 0 || h.length > max_len) {
    return Code::kMalformed;
  }
  if (h.kind != static_cast<uint8_t>(FrameKind::kDataImm) && h.imm != 0) return Code::kMalformed;
  *out = h;
  return Status::ok();
}

std::string_view Reader::str(size_t max_len) {
  const size_t start = pos_;
  uint16_t n = u16();
  if (!ok_ || n > max_len || buf_.size() - pos_ < n) {
    ok_ = false;
    pos_ = start;  // a failed read consumes nothing, its length field included
    return {};
  }
  std::string_view s(reinterpret_cast<const char*>(buf_.data() + pos_), n);
  pos_ += n;
  return s;
}

std::span<const std::byte> Reader::bytes(size_t n) {
  if (!ok_ || buf_.size() - pos_ < n) {
    ok_ = false;
    return {};
  }
  auto s = buf_.subspan(pos_, n);
  pos_ += n;
  return s;
}

}  // namespace lt::wire
