#include "common/wire.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace lt::wire {
namespace {

constexpr uint32_t kMaxLen = 1u << 20;

std::array<std::byte, sizeof(FrameHeader)> encode(const FrameHeader& h) {
  std::array<std::byte, sizeof(FrameHeader)> b;
  std::memcpy(b.data(), &h, sizeof(h));
  return b;
}

Status decode(const FrameHeader& h, uint32_t max_len, FrameHeader* out) {
  auto b = encode(h);
  return decode_frame_header(b, max_len, out);
}

std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// The rule decode_frame_header must implement, written independently.
bool is_valid(const FrameHeader& h, uint32_t max_len) {
  bool kind_ok = h.kind >= 1 && h.kind <= kMaxFrameKind;
  bool imm_ok = h.imm == 0 || h.kind == static_cast<uint8_t>(FrameKind::kDataImm);
  return h.magic == kFrameMagic && h.version == kWireVersion && kind_ok && h.reserved == 0 &&
         h.length <= max_len && imm_ok;
}

TEST(FrameHeaderTest, LayoutIsLittleEndian) {
  auto b = encode(make_frame(FrameKind::kData, 0x01020304, 0));
  EXPECT_EQ(b[0], std::byte{0x4c});  // 'L'
  EXPECT_EQ(b[1], std::byte{0x54});  // 'T'
  EXPECT_EQ(b[2], std::byte{kWireVersion});
  EXPECT_EQ(b[3], std::byte{2});
  EXPECT_EQ(b[4], std::byte{0x04});
  EXPECT_EQ(b[7], std::byte{0x01});
}

TEST(FrameHeaderTest, ExactHeaderDecodes) {
  for (FrameKind k :
       {FrameKind::kHello, FrameKind::kData, FrameKind::kControl, FrameKind::kWrite}) {
    FrameHeader out{};
    ASSERT_TRUE(decode(make_frame(k, 123), kMaxLen, &out).is_ok()) << static_cast<int>(k);
    EXPECT_EQ(out.kind, static_cast<uint8_t>(k));
    EXPECT_EQ(out.length, 123u);
    EXPECT_EQ(out.imm, 0u);
  }
  FrameHeader out{};
  ASSERT_TRUE(decode(make_frame(FrameKind::kDataImm, 0, 0xdeadbeef), kMaxLen, &out).is_ok());
  EXPECT_EQ(out.imm, 0xdeadbeefu);
  EXPECT_EQ(out.length, 0u);
  // length == max_len is allowed.
  ASSERT_TRUE(decode(make_frame(FrameKind::kData, kMaxLen), kMaxLen, &out).is_ok());
}

// The kWrite descriptor: u64 addr, u64 rkey, little-endian, right after the header.
TEST(FrameHeaderTest, WriteDescLayout) {
  WriteDesc d{0x0807060504030201ull, 0x1817161514131211ull};
  std::byte b[sizeof(WriteDesc)];
  std::memcpy(b, &d, sizeof(d));
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(b[i], std::byte(0x01 + i)) << i;
    EXPECT_EQ(b[8 + i], std::byte(0x11 + i)) << i;
  }
  EXPECT_EQ(static_cast<uint8_t>(FrameKind::kWrite), kMaxFrameKind);
}

TEST(FrameHeaderTest, TrailingBytesAreIgnored) {
  std::vector<std::byte> buf(100, std::byte{0xff});
  FrameHeader h = make_frame(FrameKind::kData, 84);
  std::memcpy(buf.data(), &h, sizeof(h));
  FrameHeader out{};
  ASSERT_TRUE(decode_frame_header(buf, kMaxLen, &out).is_ok());
  EXPECT_EQ(out.length, 84u);
}

TEST(FrameHeaderTest, TruncatedNeedsMore) {
  auto b = encode(make_frame(FrameKind::kData, 10));
  for (size_t n = 0; n < sizeof(FrameHeader); ++n) {
    FrameHeader out{};
    out.length = 77;
    EXPECT_EQ(decode_frame_header(std::span(b.data(), n), kMaxLen, &out).code(), Code::kNoResource)
        << n;
    EXPECT_EQ(out.length, 77u) << "output written on failure, n=" << n;
  }
}

TEST(FrameHeaderTest, MalformedFields) {
  struct Case {
    const char* what;
    FrameHeader h;
  };
  FrameHeader good = make_frame(FrameKind::kData, 8);
  auto with = [&](auto f) {
    FrameHeader h = good;
    f(h);
    return h;
  };
  Case cases[] = {
      {"bad magic", with([](FrameHeader& h) { h.magic = 0x4c54; })},
      {"zero magic", with([](FrameHeader& h) { h.magic = 0; })},
      {"version 0", with([](FrameHeader& h) { h.version = 0; })},
      {"version 2", with([](FrameHeader& h) { h.version = 2; })},
      {"kind 0", with([](FrameHeader& h) { h.kind = 0; })},
      {"kind max+1", with([](FrameHeader& h) { h.kind = kMaxFrameKind + 1; })},
      {"kind 255", with([](FrameHeader& h) { h.kind = 255; })},
      {"reserved", with([](FrameHeader& h) { h.reserved = 1; })},
      {"reserved high bit", with([](FrameHeader& h) { h.reserved = 0x80000000u; })},
      {"length > max", with([](FrameHeader& h) { h.length = kMaxLen + 1; })},
      {"length max u32", with([](FrameHeader& h) { h.length = UINT32_MAX; })},
      {"imm on kData", with([](FrameHeader& h) { h.imm = 1; })},
      {"imm on kHello", make_frame(FrameKind::kHello, 16, 5)},
      {"imm on kControl", make_frame(FrameKind::kControl, 16, 5)},
  };
  for (const auto& c : cases) {
    FrameHeader out{};
    out.length = 77;
    EXPECT_EQ(decode(c.h, kMaxLen, &out).code(), Code::kMalformed) << c.what;
    EXPECT_EQ(out.length, 77u) << c.what;
  }
}

TEST(FrameHeaderTest, RandomGarbageNeverCrashes) {
  std::mt19937_64 rng(0x17e7);
  int valid = 0;
  for (int i = 0; i < 100000; ++i) {
    std::array<std::byte, sizeof(FrameHeader)> b;
    uint64_t r0 = rng(), r1 = rng();
    std::memcpy(b.data(), &r0, 8);
    std::memcpy(b.data() + 8, &r1, 8);
    // Make a quarter of the inputs nearly valid so the later checks run too.
    if (i % 4 == 0) {
      FrameHeader h = make_frame(static_cast<FrameKind>(1 + rng() % 5), 0);
      std::memcpy(b.data(), &h, 4);
      if (rng() % 2) std::memset(b.data() + 12, 0, 4);  // reserved
      if (rng() % 2) std::memset(b.data() + 8, 0, 4);   // imm
      if (rng() % 2) b[7] = std::byte{0};               // length < 2^24
    }
    uint32_t max_len = (i % 3 == 0) ? UINT32_MAX : kMaxLen;
    size_t n = (i % 16 == 0) ? rng() % sizeof(FrameHeader) : sizeof(FrameHeader);
    FrameHeader h;
    std::memcpy(&h, b.data(), sizeof(h));
    FrameHeader out{};
    Status s = decode_frame_header(std::span(b.data(), n), max_len, &out);
    if (n < sizeof(FrameHeader)) {
      EXPECT_EQ(s.code(), Code::kNoResource);
    } else if (is_valid(h, max_len)) {
      ++valid;
      ASSERT_TRUE(s.is_ok()) << i;
      EXPECT_EQ(std::memcmp(&out, &h, sizeof(h)), 0) << i;
    } else {
      ASSERT_EQ(s.code(), Code::kMalformed) << i;
    }
  }
  EXPECT_GT(valid, 0);  // the generator reached the success path
}

TEST(ReaderTest, ReadsInOrder) {
  std::string buf;
  Writer w(&buf);
  w.u8(0xab);
  w.u16(0x1234);
  w.u32(0xdeadbeef);
  w.u64(0x0102030405060708ull);
  w.i32(-5);
  w.str("hello");
  w.bytes("xyz", 3);
  Reader r(as_bytes(buf));
  EXPECT_EQ(r.u8(), 0xab);
  EXPECT_EQ(r.u16(), 0x1234);
  EXPECT_EQ(r.u32(), 0xdeadbeefu);
  EXPECT_EQ(r.u64(), 0x0102030405060708ull);
  EXPECT_EQ(r.i32(), -5);
  EXPECT_EQ(r.str(), "hello");
  auto b = r.bytes(3);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(std::memcmp(b.data(), "xyz", 3), 0);
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.at_end());
  EXPECT_EQ(r.pos(), buf.size());
}

TEST(ReaderTest, ReadPastEndLatches) {
  std::string buf("\x01\x02\x03", 3);
  Reader r(as_bytes(buf));
  EXPECT_EQ(r.u16(), 0x0201);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.u32(), 0u);  // only one byte left
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.pos(), 2u);  // a failed read consumes nothing
  // Latched: even a read that would fit now fails.
  EXPECT_EQ(r.u8(), 0u);
  EXPECT_FALSE(r.ok());
}

TEST(ReaderTest, EmptyBuffer) {
  Reader r({});
  EXPECT_TRUE(r.at_end());
  EXPECT_EQ(r.u64(), 0u);
  EXPECT_FALSE(r.ok());
  Reader r2({});
  EXPECT_TRUE(r2.bytes(0).empty());
  EXPECT_TRUE(r2.ok());
}

TEST(ReaderTest, StrLongerThanMaxFails) {
  std::string buf;
  Writer w(&buf);
  w.str(std::string(10, 'a'));
  {
    Reader r(as_bytes(buf));
    EXPECT_EQ(r.str(10), std::string(10, 'a'));
    EXPECT_TRUE(r.ok());
  }
  {
    Reader r(as_bytes(buf));
    EXPECT_TRUE(r.str(9).empty());
    EXPECT_FALSE(r.ok());
  }
}

TEST(ReaderTest, StrLengthBeyondBufferFails) {
  std::string buf;
  Writer w(&buf);
  w.u16(100);
  buf += "short";
  Reader r(as_bytes(buf));
  EXPECT_TRUE(r.str().empty());
  EXPECT_FALSE(r.ok());
}

// Found by tests/fuzz/wire_fuzz.cc: a str() that failed after its length
// field (too long, or longer than the buffer) had consumed those two bytes.
TEST(ReaderTest, FailedStrConsumesNothing) {
  std::string buf;
  Writer w(&buf);
  w.u8(1);
  w.str("too long");
  for (size_t max_len : {size_t{7}, size_t{1024}}) {
    std::string b = max_len == 7 ? buf : buf.substr(0, buf.size() - 1);  // 7: over the limit
    Reader r(as_bytes(b));
    EXPECT_EQ(r.u8(), 1u);
    EXPECT_TRUE(r.str(max_len).empty());
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.pos(), 1u) << max_len;
  }
}

TEST(ReaderTest, StrLengthPrefixTruncated) {
  std::string buf("\x05", 1);
  Reader r(as_bytes(buf));
  EXPECT_TRUE(r.str().empty());
  EXPECT_FALSE(r.ok());
}

TEST(ReaderTest, BytesBounds) {
  std::string buf("0123456789");
  Reader r(as_bytes(buf));
  EXPECT_EQ(r.bytes(4).size(), 4u);
  EXPECT_EQ(r.bytes(6).size(), 6u);
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.at_end());
  EXPECT_TRUE(r.bytes(0).empty());
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.bytes(1).empty());
  EXPECT_FALSE(r.ok());

  Reader r2(as_bytes(buf));
  EXPECT_TRUE(r2.bytes(11).empty());
  EXPECT_FALSE(r2.ok());
  EXPECT_EQ(r2.pos(), 0u);

  Reader r3(as_bytes(buf));
  EXPECT_TRUE(r3.bytes(SIZE_MAX).empty());  // no pointer overflow
  EXPECT_FALSE(r3.ok());
}

TEST(ReaderTest, RestTakesRemainder) {
  std::string buf("abcdef");
  Reader r(as_bytes(buf));
  r.bytes(2);
  auto rest = r.rest();
  EXPECT_EQ(rest.size(), 4u);
  EXPECT_TRUE(r.at_end());
  EXPECT_TRUE(r.rest().empty());
  EXPECT_TRUE(r.ok());
}

TEST(WriterTest, StrIsCappedAt64K) {
  std::string buf;
  Writer w(&buf);
  w.str(std::string(70000, 'x'));
  EXPECT_EQ(buf.size(), 2u + 0xffff);
  Reader r(as_bytes(buf));
  EXPECT_EQ(r.str(0xffff).size(), 0xffffu);
  EXPECT_TRUE(r.ok());
}

}  // namespace
}  // namespace lt::wire
