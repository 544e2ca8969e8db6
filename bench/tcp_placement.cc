// tcp_placement: large transfers over the tcp transport itself (below proto/),
// as a message copied out of the receive buffer or as a placed kWrite.
//
// Two TcpTransports in one process on loopback, one thread each. Per transfer:
//  send  : a kSend of `size` bytes arrives in the receiver's rx buffer and the
//          receiver copies it to its destination (what the core does with a
//          message today);
//  write : a kWrite of `size` bytes is placed into the receiver's registered
//          destination (Caps::placement), then an 8-byte kSend says so.
// Destinations rotate over 8 slots. The receiver acks each transfer with an
// 8-byte kSend; the sender keeps at most `window` unacked. Both threads spin
// for 64 empty polls, then block on wait_fd (as the core does), so the CPU
// time per transfer is work, not spinning. One line per run:
//
//   placement mode=write size=1048576 window=1 iters=2000 GBps=X us_per_op=X
//             rx_cpu_us_per_op=X tx_cpu_us_per_op=X
//
//   tcp_placement send|write [window=1] [iters=2000] [size_bytes=1048576]
#include <poll.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/time.h"
#include "transport/factory.h"

using namespace lt;
using namespace lt::transport;

namespace {

constexpr uint64_t kToken = 42;
constexpr int kSlots = 8;
constexpr int kWarmup = 50;
constexpr int kSpinPolls = 64;

double seconds(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

WorkRequest one_sge(Op op, const void* p, size_t len) {
  WorkRequest wr;
  wr.op = op;
  wr.num_sge = 1;
  wr.sge[0] = Sge{static_cast<const std::byte*>(p), static_cast<uint32_t>(len), 0};
  return wr;
}

// Posts all of wrs, polling `t` on back-pressure; false when the peer is gone.
bool post_all(Endpoint* ep, Transport* t, std::span<const WorkRequest> wrs) {
  std::array<Completion, 32> cq;
  while (!wrs.empty()) {
    auto r = ep->post(wrs);
    if (!r.is_ok()) return false;
    wrs = wrs.subspan(*r);
    if (*r == 0) t->release_rx(std::span<const Completion>(cq.data(), t->poll(cq)));
  }
  return true;
}

// Spin for a while, then sleep on wait_fd (1 ms at most) until there is work.
void idle(Transport* t, int* empty_polls) {
  if (++*empty_polls < kSpinPolls) return;
  *empty_polls = 0;
  pollfd p{t->wait_fd(), POLLIN, 0};
  ::poll(&p, 1, 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || (std::string(argv[1]) != "send" && std::string(argv[1]) != "write")) {
    std::fprintf(stderr, "usage: tcp_placement send|write [window] [iters] [size_bytes]\n");
    return 2;
  }
  const bool placed = std::string(argv[1]) == "write";
  const int window = argc > 2 ? std::max(1, std::atoi(argv[2])) : 1;
  const int iters = argc > 3 ? std::max(1, std::atoi(argv[3])) : 2000;
  const size_t size = argc > 4 ? std::strtoul(argv[4], nullptr, 0) : (size_t{1} << 20);
  const int total = kWarmup + iters;

  TcpConfig cfg;
  cfg.listen = "127.0.0.1:0";
  if (size > cfg.max_msg_bytes) cfg.max_msg_bytes = static_cast<uint32_t>(size);
  auto made_a = make_tcp_transport(cfg);
  auto made_b = make_tcp_transport(cfg);
  if (!made_a.is_ok() || !made_b.is_ok()) {
    std::fprintf(stderr, "tcp_placement: cannot make the transports\n");
    return 1;
  }
  Transport* a = made_a->get();
  Transport* b = made_b->get();
  if (placed && !b->caps().placement) {
    std::fprintf(stderr, "tcp_placement: this tcp transport has no placement\n");
    return 1;
  }
  a->set_identity(1, kToken, lt::Mac{});
  b->set_identity(2, kToken, lt::Mac{});
  auto ab = a->connect(PeerInfo{2, "", {{"tcp", b->local_address()}}}, Deadline::after_ms(5000));
  if (!ab.is_ok()) {
    std::fprintf(stderr, "tcp_placement: connect: %s\n", ab.status().name());
    return 1;
  }
  std::vector<std::byte> dst(kSlots * size);
  auto mr = b->register_memory(dst, Access::kRemoteWrite);
  if (!mr.is_ok()) return 1;
  std::vector<std::byte> src(size);
  for (size_t i = 0; i < size; ++i) src[i] = static_cast<std::byte>(i * 7 + 3);

  // Receiver: copies (send) or just counts (write), acks every transfer.
  double rx_cpu = 0;
  std::atomic<bool> rx_ok{true};  // false: give up (the sender gave up, or a peer was lost)
  std::thread receiver([&] {
    std::unique_ptr<Endpoint> back;
    std::array<Completion, 32> cq;
    const uint64_t ack = 1;
    const WorkRequest ack_wr = one_sge(Op::kSend, &ack, sizeof(ack));
    int got = 0, empty = 0;
    double cpu0 = 0;
    while (got < total && rx_ok) {
      size_t n = b->poll(cq);
      if (n == 0) idle(b, &empty);
      for (size_t i = 0; i < n; ++i) {
        if (cq[i].kind == CqKind::kPeerLost) rx_ok = false;
        if (cq[i].kind != CqKind::kRecv) continue;
        if (!placed) std::memcpy(dst.data() + (got % kSlots) * size, cq[i].rx, cq[i].len);
        if (++got == kWarmup) cpu0 = seconds(CLOCK_THREAD_CPUTIME_ID);
        if (!back) {
          auto ep = b->connect(PeerInfo{1, "", {}}, Deadline::after_ms(5000));
          if (!ep.is_ok()) {
            rx_ok = false;
            break;
          }
          back = std::move(ep).value();
        }
        if (!post_all(back.get(), b, std::span<const WorkRequest>(&ack_wr, 1))) rx_ok = false;
      }
      b->release_rx(std::span<const Completion>(cq.data(), n));
    }
    rx_cpu = seconds(CLOCK_THREAD_CPUTIME_ID) - cpu0;
  });

  // Sender.
  std::array<Completion, 32> cq;
  const uint64_t done_msg = 1;
  int sent = 0, acked = 0, empty = 0;
  double t0 = 0, cpu0 = 0;
  bool ok = true;
  Deadline d = Deadline::after_ms(120000);
  while (acked < total && ok && !d.expired()) {
    while (sent < total && sent - acked < window && ok) {
      WorkRequest wrs[2];
      size_t nwr = 0;
      if (placed) {
        wrs[nwr] = one_sge(Op::kWrite, src.data(), size);
        wrs[nwr++].remote =
            RemoteRef{reinterpret_cast<uintptr_t>(mr->addr + (sent % kSlots) * size), mr->rkey};
        wrs[nwr++] = one_sge(Op::kSend, &done_msg, sizeof(done_msg));
      } else {
        wrs[nwr++] = one_sge(Op::kSend, src.data(), size);
      }
      ok = post_all(ab->get(), a, std::span<const WorkRequest>(wrs, nwr));
      ++sent;
    }
    size_t n = a->poll(cq);
    if (n == 0) idle(a, &empty);
    for (size_t i = 0; i < n; ++i) {
      if (cq[i].kind == CqKind::kPeerLost) ok = false;
      if (cq[i].kind == CqKind::kRecv && ++acked == kWarmup) {
        t0 = seconds(CLOCK_MONOTONIC);
        cpu0 = seconds(CLOCK_THREAD_CPUTIME_ID);
      }
    }
    a->release_rx(std::span<const Completion>(cq.data(), n));
  }
  const double wall = seconds(CLOCK_MONOTONIC) - t0;
  const double tx_cpu = seconds(CLOCK_THREAD_CPUTIME_ID) - cpu0;
  if (acked < total) rx_ok = false;  // lets the receiver leave
  receiver.join();
  b->deregister_memory(*mr);
  const size_t last = static_cast<size_t>((total - 1) % kSlots) * size;
  if (!ok || !rx_ok || acked < total || std::memcmp(dst.data() + last, src.data(), size) != 0) {
    std::fprintf(stderr, "tcp_placement: transfer failed or data differs\n");
    return 1;
  }
  std::printf(
      "placement mode=%s size=%zu window=%d iters=%d GBps=%.2f us_per_op=%.1f "
      "rx_cpu_us_per_op=%.1f tx_cpu_us_per_op=%.1f\n",
      placed ? "write" : "send", size, window, iters,
      static_cast<double>(iters) * static_cast<double>(size) / wall / 1e9, wall / iters * 1e6,
      rx_cpu / iters * 1e6, tx_cpu / iters * 1e6);
  return 0;
}
