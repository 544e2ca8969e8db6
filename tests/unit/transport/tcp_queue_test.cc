// The tcp transport's send queue end to end: large frames queued as copies
// in buffers the queue keeps (spare_buffers.h; its own rules are in
// tcp_spare_buffers_test.cc).
#include "transport/tcp/tcp_transport.h"
#include "transport_harness.h"

namespace lt::transport::test {
namespace {

Result<std::unique_ptr<Transport>> make_tcp_small_sockets() {
  TcpConfig c;
  c.listen = "127.0.0.1:0";
  c.max_msg_bytes = kTestMaxMsg;
  c.sndbuf_bytes = c.rcvbuf_bytes = 64 * 1024;  // the queue, not the socket, holds the frames
  return make_tcp_transport(c);
}

class TcpQueueTest : public TransportHarness {
 protected:
  TcpQueueTest() : TransportHarness(&make_tcp_small_sockets) {}
  void SetUp() override { set_up_pair(); }
};

// Large frames the socket cannot take at once are queued as copies, in
// buffers the queue keeps and hands to later copies: frames of mixed sizes,
// posted while the receiver lags, each arrive whole, in order, with none of
// an earlier frame's bytes left in a reused buffer.
TEST_F(TcpQueueTest, QueuedLargeFramesArriveWholeThroughReusedBuffers) {
  const size_t sizes[] = {(1u << 20) + 5, (300u << 10) + 3, (700u << 10) + 1, (64u << 10) + 9,
                          (2u << 20) + 7};
  constexpr uint64_t kFrames = 40;
  uint64_t next = 0;
  int bad = 0;
  b_->on_rx = [&](const Completion& c) {
    const uint64_t i = next++;
    if (c.len != sizes[i % std::size(sizes)] || check_pattern(c.rx, c.len, i) != SIZE_MAX) ++bad;
  };
  std::vector<std::byte> buf((2u << 20) + 16);
  for (uint64_t i = 0; i < kFrames; ++i) {
    const size_t len = sizes[i % std::size(sizes)];
    fill_pattern(buf.data(), len, i);
    WorkRequest wr = send_wr(i, buf.data(), len);
    ASSERT_TRUE(post_one(ab_.get(), wr).is_ok());
    // At most four frames ahead of the receiver: the queue drains as it
    // fills, so later copies go into buffers earlier ones left.
    ASSERT_TRUE(pump_until([&] { return next + 4 > i; })) << "frame " << next << " never came";
  }
  ASSERT_TRUE(pump_until([&] { return next >= kFrames; }))
      << "received " << next << " of " << kFrames;
  EXPECT_EQ(next, kFrames);
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace lt::transport::test
