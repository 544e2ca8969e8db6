// common/wire: decode_frame_header and wire::Reader.
//
// Input: the first byte says how many of the next bytes are a Reader program
// (one op per byte); the rest is the buffer. decode_frame_header runs on the
// buffer with three length limits and is checked against the rule written
// out here independently (and must round-trip through make_frame). The
// program then runs on a Reader over the buffer next to a model of its
// position and latch, and what was read must re-encode with wire::Writer to
// exactly the bytes consumed.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/wire.h"
#include "tests/fuzz/fuzz_util.h"

namespace lt::wire {
namespace {

using fuzz::Input;

bool valid_header(const FrameHeader& h, uint32_t max_len) {
  bool kind_ok = h.kind >= 1 && h.kind <= kMaxFrameKind;
  bool imm_ok = h.imm == 0 || h.kind == static_cast<uint8_t>(FrameKind::kDataImm);
  return h.magic == kFrameMagic && h.version == kWireVersion && kind_ok && h.reserved == 0 &&
         h.length <= max_len && imm_ok;
}

void check_header(std::span<const std::byte> buf, uint32_t max_len) {
  FrameHeader out;
  std::memset(&out, 0xa5, sizeof(out));
  FrameHeader sentinel = out;
  Status s = decode_frame_header(buf, max_len, &out);
  if (buf.size() < sizeof(FrameHeader)) {
    FUZZ_CHECK(s.code() == Code::kNoResource, s.name());
    FUZZ_CHECK(std::memcmp(&out, &sentinel, sizeof(out)) == 0, "output set on failure");
    return;
  }
  FrameHeader raw;
  std::memcpy(&raw, buf.data(), sizeof(raw));
  bool valid = valid_header(raw, max_len);
  FUZZ_CHECK(s.is_ok() == valid, s.name());
  if (!s.is_ok()) {
    FUZZ_CHECK(s.code() == Code::kMalformed, s.name());
    FUZZ_CHECK(std::memcmp(&out, &sentinel, sizeof(out)) == 0, "output set on failure");
    return;
  }
  FrameHeader again = make_frame(static_cast<FrameKind>(out.kind), out.length, out.imm);
  FUZZ_CHECK(std::memcmp(&again, buf.data(), sizeof(again)) == 0, "make_frame round trip");
}

// One Reader call chosen by `op`, mirrored on a model (pos, ok) and
// re-encoded into `w` when it succeeds.
void step(uint8_t op, Reader& r, std::span<const std::byte> buf, size_t* pos, bool* ok, Writer& w) {
  auto fixed = [&](size_t n, auto value, auto put) {
    bool fits = *ok && buf.size() - *pos >= n;
    if (fits) {
      decltype(value) expect;
      std::memcpy(&expect, buf.data() + *pos, n);
      FUZZ_CHECK(value == expect, "value differs from the bytes");
      *pos += n;
      put(value);
    } else {
      FUZZ_CHECK(value == 0, "a failed read gave a value");
      *ok = false;
    }
  };
  switch (op % 9) {
    case 0:
      fixed(1, r.u8(), [&](uint8_t v) { w.u8(v); });
      break;
    case 1:
      fixed(2, r.u16(), [&](uint16_t v) { w.u16(v); });
      break;
    case 2:
      fixed(4, r.u32(), [&](uint32_t v) { w.u32(v); });
      break;
    case 3:
      fixed(8, r.u64(), [&](uint64_t v) { w.u64(v); });
      break;
    case 4:
      fixed(4, r.i32(), [&](int32_t v) { w.i32(v); });
      break;
    case 5: {  // str with a limit from the op byte: 0, small, the default
      size_t max_len = op / 9 % 3 == 0 ? 0 : op / 9 % 3 == 1 ? 7 : 1024;
      std::string_view s = r.str(max_len);
      uint16_t n = 0;
      bool fits = *ok && buf.size() - *pos >= 2;
      if (fits) std::memcpy(&n, buf.data() + *pos, 2);
      fits = fits && n <= max_len && buf.size() - *pos - 2 >= n;
      if (fits) {
        FUZZ_CHECK(s.size() == n, "str length");
        FUZZ_CHECK(reinterpret_cast<const std::byte*>(s.data()) == buf.data() + *pos + 2,
                   "str does not view the buffer");
        *pos += 2 + n;
        w.str(s);
      } else {
        FUZZ_CHECK(s.empty(), "a failed str gave bytes");
        *ok = false;
      }
      break;
    }
    case 6: {  // bytes(n), n from the op byte, sometimes huge
      size_t n = op / 9 == 27 ? SIZE_MAX : op / 9;
      std::span<const std::byte> b = r.bytes(n);
      bool fits = *ok && buf.size() - *pos >= n;
      if (fits) {
        FUZZ_CHECK(b.data() == buf.data() + *pos && b.size() == n, "bytes span");
        *pos += n;
        w.bytes(b.data(), b.size());
      } else {
        FUZZ_CHECK(b.empty(), "a failed bytes() gave bytes");
        *ok = false;
      }
      break;
    }
    case 7: {  // rest: everything left, whatever the latch says
      std::span<const std::byte> b = r.rest();
      FUZZ_CHECK(b.data() == buf.data() + *pos && b.size() == buf.size() - *pos, "rest span");
      if (*ok) w.bytes(b.data(), b.size());
      *pos = buf.size();
      break;
    }
    default:
      FUZZ_CHECK(r.at_end() == (*pos == buf.size()), "at_end");
      break;
  }
  FUZZ_CHECK(r.ok() == *ok, "latch");
  FUZZ_CHECK(r.pos() == *pos, "position");
  FUZZ_CHECK(r.pos() <= buf.size(), "position past the end");
}

}  // namespace
}  // namespace lt::wire

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lt::wire;
  lt::fuzz::Input in(data, size);
  size_t nops = in.u8() % 33;
  std::string_view ops = in.bytes(nops);
  std::string_view rest = in.rest();
  // The buffer views the input itself, so reading past it is an ASan report.
  auto buf = lt::fuzz::as_bytes(rest);

  check_header(buf, UINT32_MAX);
  check_header(buf, 1u << 20);
  check_header(buf, 16);

  Reader r(buf);
  std::string written;
  Writer w(&written);
  size_t pos = 0;
  bool ok = true;
  for (char op : ops) step(static_cast<uint8_t>(op), r, buf, &pos, &ok, w);
  // What was read re-encodes to the bytes it came from (rest() included,
  // while the latch was clear).
  if (ok) {
    FUZZ_CHECK(written.size() == pos && std::memcmp(written.data(), buf.data(), pos) == 0,
               "Writer round trip");
  }
  return 0;
}
