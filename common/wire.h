// Wire encoding shared by every stream transport and the control protocol.
// All integers are little-endian. Every decoder checks lengths, the version
// and the kind before it reads a field: malformed input is a Status, never a
// crash or an out-of-bounds read.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace lt::wire {

static_assert(std::endian::native == std::endian::little, "ltier's wire format is little-endian");

inline constexpr uint16_t kFrameMagic = 0x544c;  // "LT" on the wire
inline constexpr uint8_t kWireVersion = 1;

enum class FrameKind : uint8_t {
  kHello = 1,    // first frame on a peer connection: HelloBody
  kData = 2,     // a proto message
  kDataImm = 3,  // a proto message with a 32-bit immediate
  kControl = 4,  // node <-> ltier-manager control message
  kWrite = 5,    // one-sided write into registered memory: WriteDesc + the bytes
};
inline constexpr uint8_t kMaxFrameKind = 5;

/// The header in front of every frame on a stream transport.
struct FrameHeader {
  uint16_t magic;     // kFrameMagic
  uint8_t version;    // kWireVersion; anything else is refused
  uint8_t kind;       // FrameKind
  uint32_t length;    // payload bytes that follow the header
  uint32_t imm;       // immediate for kDataImm, else 0
  uint32_t reserved;  // must be zero (room for flags in version 2)
};
static_assert(sizeof(FrameHeader) == 16);

/// The payload of a kWrite frame starts with this descriptor; the bytes to
/// place follow it, so FrameHeader::length is sizeof(WriteDesc) + their
/// count. The frame header's version covers it.
struct WriteDesc {
  uint64_t addr;  // the owner's virtual address of the first byte to write
  uint64_t rkey;  // the owner's registration (transport register_memory())
};
static_assert(sizeof(WriteDesc) == 16);

inline FrameHeader make_frame(FrameKind kind, uint32_t length, uint32_t imm = 0) {
  return FrameHeader{kFrameMagic, kWireVersion, static_cast<uint8_t>(kind), length, imm, 0};
}

/// Decodes the header at the start of `bytes`. kNoResource: fewer than 16
/// bytes so far (not an error: read more). kMalformed: bad magic, version,
/// kind, reserved bits, or length above `max_len`.
Status decode_frame_header(std::span<const std::byte> bytes, uint32_t max_len, FrameHeader* out);

/// Sequential bounds-checked reader. A failed read latches the error; check
/// ok() once at the end.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> b) : buf_(b) {}
  uint8_t u8() { return get<uint8_t>(); }
  uint16_t u16() { return get<uint16_t>(); }
  uint32_t u32() { return get<uint32_t>(); }
  uint64_t u64() { return get<uint64_t>(); }
  int32_t i32() { return get<int32_t>(); }
  /// u16 length + bytes; longer than max_len is malformed.
  std::string_view str(size_t max_len = 1024);
  std::span<const std::byte> bytes(size_t n);
  std::span<const std::byte> rest() {
    auto r = buf_.subspan(pos_);
    pos_ = buf_.size();
    return r;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == buf_.size(); }
  size_t pos() const { return pos_; }

 private:
  template <typename T>
  T get() {
    T v{};
    if (!ok_ || buf_.size() - pos_ < sizeof(T)) {
      ok_ = false;
      return v;
    }
    std::memcpy(&v, buf_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::span<const std::byte> buf_;
  size_t pos_ = 0;
  bool ok_ = true;
};

/// Appending writer over a std::string (control path only).
class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  void u8(uint8_t v) { put(v); }
  void u16(uint16_t v) { put(v); }
  void u32(uint32_t v) { put(v); }
  void u64(uint64_t v) { put(v); }
  void i32(int32_t v) { put(v); }
  void str(std::string_view s) {
    u16(static_cast<uint16_t>(s.size() > 0xffff ? 0xffff : s.size()));
    out_->append(s.data(), s.size() > 0xffff ? 0xffff : s.size());
  }
  void bytes(const void* p, size_t n) { out_->append(static_cast<const char*>(p), n); }

 private:
  template <typename T>
  void put(T v) {
    out_->append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  std::string* out_;
};

}  // namespace lt::wire
