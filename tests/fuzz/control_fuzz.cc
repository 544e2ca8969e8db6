// proto/control: CtlStream (fill + next) cutting control frames out of a
// stream socket, and get_member/put_member.
//
// Input: byte 0 seeds how the rest is split into writes; the rest is what a
// peer sends. The bytes go through a real non-blocking socketpair in those
// pieces; after each piece the stream is filled and drained. The payloads
// must be exactly the ones a reference cutter written out here finds in the
// whole stream, stopping where it does (incomplete: kNoResource; bad:
// kMalformed), however the stream was split. Each payload that holds a
// member must round-trip through put_member.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "proto/control.h"
#include "tests/fuzz/fuzz_util.h"

namespace lt::proto {
namespace {

// The frames of `s` by the wire rules (common/wire.h) and CtlStream's own:
// kind kControl, length 1..kMaxCtlFrame, a known CtlType first.
struct Cut {
  std::vector<std::string> payloads;
  Code end = Code::kNoResource;  // what next() says after the last payload
};

uint32_t le32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(s[at + i]);
  return v;
}

Cut reference_cut(const std::string& s) {
  Cut c;
  size_t at = 0;
  while (s.size() - at >= 16) {
    auto u8 = [&](size_t i) { return static_cast<uint8_t>(s[at + i]); };
    uint32_t len = le32(s, at + 4), imm = le32(s, at + 8), reserved = le32(s, at + 12);
    bool header_ok = u8(0) == 0x4c && u8(1) == 0x54 && u8(2) == 1 && u8(3) >= 1 && u8(3) <= 5 &&
                     reserved == 0 && len <= kMaxCtlFrame && (imm == 0 || u8(3) == 3);
    if (!header_ok || u8(3) != 4 || len == 0) {
      c.end = Code::kMalformed;
      return c;
    }
    if (s.size() - at - 16 < len) return c;
    std::string p = s.substr(at + 16, len);
    at += 16 + len;
    uint8_t type = static_cast<uint8_t>(p[0]);
    if (type == 0 || type > kMaxCtlType) {
      c.end = Code::kMalformed;
      return c;
    }
    c.payloads.push_back(std::move(p));
  }
  return c;
}

void check_member(const std::string& payload) {
  wire::Reader r(fuzz::as_bytes(payload));
  r.u8();  // the type
  Member m;
  bool ok = get_member(r, &m);
  if (!ok) return;
  FUZZ_CHECK(m.node != 0, "member 0");
  FUZZ_CHECK(m.name.size() <= 256 && m.addresses.size() <= 256 && m.host_id.size() <= 256,
             "member field longer than its limit");
  std::string again;
  wire::Writer w(&again);
  put_member(w, m);
  FUZZ_CHECK(payload.compare(1, again.size(), again) == 0, "put_member round trip");
}

struct Pair {
  int rd = -1, wr = -1;
  Pair() {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) {
      fuzz::fail(__FILE__, __LINE__, "socketpair", strerror(errno));
    }
    rd = fds[0];
    wr = fds[1];
  }
  ~Pair() {
    if (rd >= 0) close(rd);
    if (wr >= 0) close(wr);
  }
};

}  // namespace
}  // namespace lt::proto

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lt::proto;
  using lt::Code;
  using lt::Status;
  lt::fuzz::Input in(data, size);
  uint64_t split = in.u8();
  // At most 64 KiB, so every write fits the socket buffer at once.
  std::string stream(in.bytes(64 * 1024));
  const Cut want = reference_cut(stream);

  Pair p;
  CtlStream cs;
  std::vector<std::string> got;
  Code end = Code::kNoResource;
  bool stopped = false;  // next() said kMalformed: the caller drops the connection
  auto drain = [&] {
    while (!stopped) {
      std::string payload = "unset";
      Status s = cs.next(&payload);
      if (!s.is_ok()) FUZZ_CHECK(payload == "unset", "output set on failure");
      if (s.code() == Code::kNoResource) return;
      if (!s.is_ok()) {
        FUZZ_CHECK(s.code() == Code::kMalformed, s.name());
        end = s.code();
        stopped = true;
        return;
      }
      FUZZ_CHECK(!payload.empty() && payload.size() <= kMaxCtlFrame, "payload size");
      got.push_back(payload);
      check_member(payload);
    }
  };
  size_t at = 0;
  while (at < stream.size() && !stopped) {
    // Pieces of 1..64 bytes, or the whole rest, chosen by the split seed.
    uint64_t r = lt::fuzz::splitmix64(&split);
    size_t n = r % 4 == 0 ? stream.size() - at : 1 + (r >> 8) % 64;
    n = std::min(n, stream.size() - at);
    ssize_t w = ::write(p.wr, stream.data() + at, n);
    FUZZ_CHECK(w == static_cast<ssize_t>(n), strerror(errno));  // inputs fit the socket buffer
    at += n;
    FUZZ_CHECK(cs.fill(p.rd).is_ok(), "fill failed while the peer is open");
    drain();
  }
  close(p.wr);
  p.wr = -1;
  if (!stopped) {
    FUZZ_CHECK(cs.fill(p.rd).code() == Code::kPeerDown, "EOF is not kPeerDown");
    drain();
  }
  FUZZ_CHECK(got == want.payloads, "payloads differ from the reference cut");
  FUZZ_CHECK(end == want.end, "ends differently from the reference cut");
  return 0;
}
