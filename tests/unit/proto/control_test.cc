#include "proto/control.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/time.h"

namespace lt::proto {
namespace {

std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// A connected pair of non-blocking stream sockets: the test writes on one end
// and a CtlStream reads the other.
class CtlStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0)
        << strerror(errno);
    rd_ = fds[0];
    wr_ = fds[1];
  }
  void TearDown() override {
    if (rd_ >= 0) close(rd_);
    if (wr_ >= 0) close(wr_);
  }
  void write_bytes(const std::string& s) {
    ASSERT_EQ(::write(wr_, s.data(), s.size()), static_cast<ssize_t>(s.size())) << strerror(errno);
  }
  void close_writer() {
    close(wr_);
    wr_ = -1;
  }

  int rd_ = -1, wr_ = -1;
  CtlStream stream_;
};

std::string ctl_frame(CtlType type, const std::string& body) {
  std::string f = begin_ctl(type);
  f += body;
  finish_ctl(&f);
  return f;
}

std::string raw_frame(wire::FrameKind kind, const std::string& payload) {
  wire::FrameHeader h = wire::make_frame(kind, static_cast<uint32_t>(payload.size()));
  std::string f(reinterpret_cast<const char*>(&h), sizeof(h));
  return f + payload;
}

TEST_F(CtlStreamTest, BeginFinishFramesPayload) {
  std::string f = ctl_frame(CtlType::kHeartbeat, "");
  wire::FrameHeader h;
  ASSERT_TRUE(wire::decode_frame_header(as_bytes(f), kMaxCtlFrame, &h).is_ok());
  EXPECT_EQ(h.kind, static_cast<uint8_t>(wire::FrameKind::kControl));
  EXPECT_EQ(h.length, 1u);
  EXPECT_EQ(f.size(), sizeof(h) + 1);
  EXPECT_EQ(static_cast<uint8_t>(f.back()), static_cast<uint8_t>(CtlType::kHeartbeat));
}

TEST_F(CtlStreamTest, EmptySocketHasNothing) {
  std::string payload;
  EXPECT_TRUE(stream_.fill(rd_).is_ok());
  EXPECT_EQ(stream_.next(&payload).code(), Code::kNoResource);
}

TEST_F(CtlStreamTest, WholeFrame) {
  write_bytes(ctl_frame(CtlType::kLeave, ""));
  ASSERT_TRUE(stream_.fill(rd_).is_ok());
  std::string payload;
  ASSERT_TRUE(stream_.next(&payload).is_ok());
  ASSERT_EQ(payload.size(), 1u);
  EXPECT_EQ(static_cast<uint8_t>(payload[0]), static_cast<uint8_t>(CtlType::kLeave));
  EXPECT_EQ(stream_.next(&payload).code(), Code::kNoResource);
}

TEST_F(CtlStreamTest, SplitFrameReassembles) {
  std::string body;
  wire::Writer w(&body);
  w.u64(77);
  w.str("some-name");
  std::string f = ctl_frame(CtlType::kNameLookup, body);
  std::string payload;
  // One byte per write: every cut point, inside the header and the body.
  for (size_t i = 0; i + 1 < f.size(); ++i) {
    write_bytes(f.substr(i, 1));
    ASSERT_TRUE(stream_.fill(rd_).is_ok());
    ASSERT_EQ(stream_.next(&payload).code(), Code::kNoResource) << "after " << i + 1 << " bytes";
  }
  write_bytes(f.substr(f.size() - 1));
  ASSERT_TRUE(stream_.fill(rd_).is_ok());
  ASSERT_TRUE(stream_.next(&payload).is_ok());
  EXPECT_EQ(payload, f.substr(sizeof(wire::FrameHeader)));
  wire::Reader r(as_bytes(payload));
  EXPECT_EQ(r.u8(), static_cast<uint8_t>(CtlType::kNameLookup));
  EXPECT_EQ(r.u64(), 77u);
  EXPECT_EQ(r.str(), "some-name");
  EXPECT_TRUE(r.ok() && r.at_end());
}

TEST_F(CtlStreamTest, SeveralFramesInOneWrite) {
  std::string all;
  for (int i = 0; i < 50; ++i) {
    std::string body;
    wire::Writer w(&body);
    w.u32(static_cast<uint32_t>(i));
    all += ctl_frame(CtlType::kMemberDown, body);
  }
  // Split the batch at an awkward point.
  write_bytes(all.substr(0, 101));
  ASSERT_TRUE(stream_.fill(rd_).is_ok());
  write_bytes(all.substr(101));
  ASSERT_TRUE(stream_.fill(rd_).is_ok());
  std::string payload;
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(stream_.next(&payload).is_ok()) << i;
    wire::Reader r(as_bytes(payload));
    EXPECT_EQ(r.u8(), static_cast<uint8_t>(CtlType::kMemberDown));
    EXPECT_EQ(r.u32(), static_cast<uint32_t>(i));
    EXPECT_TRUE(r.ok() && r.at_end());
  }
  EXPECT_EQ(stream_.next(&payload).code(), Code::kNoResource);
}

TEST_F(CtlStreamTest, WrongKindIsMalformed) {
  write_bytes(raw_frame(wire::FrameKind::kData, std::string(1, '\x06')));
  ASSERT_TRUE(stream_.fill(rd_).is_ok());
  std::string payload;
  EXPECT_EQ(stream_.next(&payload).code(), Code::kMalformed);
}

TEST_F(CtlStreamTest, ZeroLengthIsMalformed) {
  write_bytes(raw_frame(wire::FrameKind::kControl, ""));
  ASSERT_TRUE(stream_.fill(rd_).is_ok());
  std::string payload;
  EXPECT_EQ(stream_.next(&payload).code(), Code::kMalformed);
}

TEST_F(CtlStreamTest, BadHeaderIsMalformed) {
  write_bytes(std::string(sizeof(wire::FrameHeader), 'x'));
  ASSERT_TRUE(stream_.fill(rd_).is_ok());
  std::string payload;
  EXPECT_EQ(stream_.next(&payload).code(), Code::kMalformed);
}

TEST_F(CtlStreamTest, OversizedFrameIsMalformed) {
  wire::FrameHeader h = wire::make_frame(wire::FrameKind::kControl, kMaxCtlFrame + 1);
  write_bytes(std::string(reinterpret_cast<const char*>(&h), sizeof(h)));
  ASSERT_TRUE(stream_.fill(rd_).is_ok());
  std::string payload;
  EXPECT_EQ(stream_.next(&payload).code(), Code::kMalformed);
}

TEST_F(CtlStreamTest, UnknownCtlTypeIsMalformed) {
  for (uint8_t t : {uint8_t{0}, static_cast<uint8_t>(kMaxCtlType + 1), uint8_t{255}}) {
    CtlStream s;
    write_bytes(raw_frame(wire::FrameKind::kControl, std::string(1, static_cast<char>(t))));
    ASSERT_TRUE(s.fill(rd_).is_ok());
    std::string payload;
    EXPECT_EQ(s.next(&payload).code(), Code::kMalformed) << int{t};
  }
}

// Found by tests/fuzz/control_fuzz.cc: next() copied the payload of a frame
// of unknown type into *payload before it refused the frame.
TEST_F(CtlStreamTest, UnknownCtlTypeLeavesPayloadAlone) {
  write_bytes(raw_frame(wire::FrameKind::kControl, "\x63 unknown type"));
  write_bytes(ctl_frame(CtlType::kLeave, ""));
  ASSERT_TRUE(stream_.fill(rd_).is_ok());
  std::string payload = "untouched";
  EXPECT_EQ(stream_.next(&payload).code(), Code::kMalformed);
  EXPECT_EQ(payload, "untouched");
  // The bad frame was consumed, as before: the next one follows.
  ASSERT_TRUE(stream_.next(&payload).is_ok());
  EXPECT_EQ(payload, std::string(1, static_cast<char>(CtlType::kLeave)));
}

TEST_F(CtlStreamTest, EofIsPeerDown) {
  close_writer();
  EXPECT_EQ(stream_.fill(rd_).code(), Code::kPeerDown);
}

TEST_F(CtlStreamTest, FramesBeforeEofAreKept) {
  write_bytes(ctl_frame(CtlType::kHeartbeat, ""));
  close_writer();
  EXPECT_EQ(stream_.fill(rd_).code(), Code::kPeerDown);
  std::string payload;
  ASSERT_TRUE(stream_.next(&payload).is_ok());
  EXPECT_EQ(static_cast<uint8_t>(payload[0]), static_cast<uint8_t>(CtlType::kHeartbeat));
}

TEST_F(CtlStreamTest, BadFdIsPeerDown) { EXPECT_EQ(stream_.fill(-1).code(), Code::kPeerDown); }

TEST_F(CtlStreamTest, UnboundedBufferingIsRefused) {
  // A peer that streams bytes which never form a frame the reader can take:
  // fill() caps what it buffers instead of growing without bound.
  std::string chunk(64 * 1024, 'z');
  Deadline d = Deadline::after_ms(20000);
  Status last;
  size_t sent = 0;
  while (!d.expired() && sent < 8 * kMaxCtlFrame) {
    ssize_t n = ::write(wr_, chunk.data(), chunk.size());
    if (n > 0) sent += static_cast<size_t>(n);
    last = stream_.fill(rd_);
    if (!last.is_ok()) break;
  }
  EXPECT_EQ(last.code(), Code::kMalformed);
  EXPECT_LE(sent, 5 * kMaxCtlFrame + chunk.size());
}

TEST(MemberTest, RoundTrip) {
  Member m{7, "node-a", "10.1.2.3:7000", "boot/123", 4};
  std::string buf;
  wire::Writer w(&buf);
  put_member(w, m);
  w.u32(0xfeedu);  // something after it
  wire::Reader r(as_bytes(buf));
  Member got;
  ASSERT_TRUE(get_member(r, &got));
  EXPECT_EQ(got.node, 7u);
  EXPECT_EQ(got.name, "node-a");
  EXPECT_EQ(got.addresses, "10.1.2.3:7000");
  EXPECT_EQ(got.host_id, "boot/123");
  EXPECT_EQ(got.rank, 4u);
  EXPECT_EQ(r.u32(), 0xfeedu);
  EXPECT_TRUE(r.ok() && r.at_end());
}

TEST(MemberTest, EmptyStringsRoundTrip) {
  Member m{1, "", "", ""};
  std::string buf;
  wire::Writer w(&buf);
  put_member(w, m);
  wire::Reader r(as_bytes(buf));
  Member got;
  ASSERT_TRUE(get_member(r, &got));
  EXPECT_EQ(got.node, 1u);
  EXPECT_TRUE(got.name.empty());
}

TEST(MemberTest, TruncatedFails) {
  Member m{7, "node-a", "10.1.2.3:7000", "boot/123"};
  std::string buf;
  wire::Writer w(&buf);
  put_member(w, m);
  for (size_t n = 0; n < buf.size(); ++n) {
    std::string prefix = buf.substr(0, n);
    wire::Reader r(as_bytes(prefix));
    Member got;
    EXPECT_FALSE(get_member(r, &got)) << "prefix of " << n << " bytes";
  }
}

TEST(MemberTest, NodeZeroFails) {
  Member m{0, "a", "b", "c"};
  std::string buf;
  wire::Writer w(&buf);
  put_member(w, m);
  wire::Reader r(as_bytes(buf));
  Member got;
  EXPECT_FALSE(get_member(r, &got));
}

TEST(MemberTest, OverlongStringFails) {
  Member m{3, std::string(257, 'n'), "b", "c"};
  std::string buf;
  wire::Writer w(&buf);
  put_member(w, m);
  wire::Reader r(as_bytes(buf));
  Member got;
  EXPECT_FALSE(get_member(r, &got));
}

}  // namespace
}  // namespace lt::proto
