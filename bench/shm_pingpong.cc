// shm_pingpong: one-way latency of the shm transport itself, below proto/.
//
// Two ShmTransports in one process, one thread each, busy-polling (never
// blocking on wait_fd): thread A posts an 8-byte message, thread B echoes it,
// A waits for the echo. One-way latency = round trip / 2. Prints one line per
// statistic; a sanity check, not a benchmark of record (no ucx comparison).
//
//   shm_pingpong [iterations] [size_bytes]

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/time.h"
#include "transport/factory.h"

using namespace lt;
using namespace lt::transport;

namespace {

constexpr uint64_t kToken = 42;

bool post_msg(Endpoint* ep, const void* p, size_t len) {
  WorkRequest wr;
  wr.op = Op::kSend;
  wr.num_sge = 1;
  wr.sge[0] = Sge{static_cast<const std::byte*>(p), static_cast<uint32_t>(len), 0};
  for (;;) {
    auto r = ep->post(std::span<const WorkRequest>(&wr, 1));
    if (!r.is_ok()) return false;
    if (*r == 1) return true;
  }
}

// Spins on poll until one kRecv arrives; copies its first 8 bytes.
// The deadline is looked at every 256 empty polls: a clock read (21 ns on a
// VM) after each one made a poll loop twice as long, and the one-way time
// with it.
bool wait_msg(Transport* t, uint64_t* v, Deadline d) {
  std::array<Completion, 8> cq;
  for (uint32_t polls = 1;; ++polls) {
    size_t n = t->poll(cq);
    bool got = false;
    for (size_t i = 0; i < n; ++i) {
      if (cq[i].kind == CqKind::kRecv && cq[i].len >= 8) {
        std::memcpy(v, cq[i].rx, 8);
        got = true;
      }
    }
    t->release_rx(std::span<const Completion>(cq.data(), n));
    if (got) return true;
    if (polls % 256 == 0 && d.expired()) return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t iters = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 200000;
  const size_t size = argc > 2 ? std::max<size_t>(8, std::strtoull(argv[2], nullptr, 10)) : 8;
  ShmConfig cfg;
  auto ta = make_shm_transport(cfg);
  auto tb = make_shm_transport(cfg);
  if (!ta.is_ok() || !tb.is_ok()) {
    std::fprintf(stderr, "shm_pingpong: cannot make transports\n");
    return 1;
  }
  Transport* a = ta->get();
  Transport* b = tb->get();
  a->set_identity(1, kToken, lt::Mac{});
  b->set_identity(2, kToken, lt::Mac{});
  PeerInfo pb;
  pb.node = 2;
  pb.addresses = {{"shm", b->local_address()}};
  auto ab = a->connect(pb, Deadline::after_ms(2000));
  if (!ab.is_ok()) {
    std::fprintf(stderr, "shm_pingpong: connect: %s\n", ab.status().name());
    return 1;
  }
  const uint64_t warmup = std::min<uint64_t>(iters / 10 + 1, 10000);
  std::atomic<bool> failed{false};
  std::thread echo([&] {
    std::unique_ptr<Endpoint> ba;
    std::vector<std::byte> buf(size);
    for (uint64_t i = 0; i < warmup + iters; ++i) {
      uint64_t v;
      if (!wait_msg(b, &v, Deadline::lazy_ms(10000))) {
        failed.store(true);
        return;
      }
      if (!ba) {
        PeerInfo pa;
        pa.node = 1;
        auto r = b->connect(pa, Deadline::after_ms(2000));  // reuses the inbound connection
        if (!r.is_ok()) {
          failed.store(true);
          return;
        }
        ba = std::move(r).value();
      }
      std::memcpy(buf.data(), &v, 8);
      if (!post_msg(ba.get(), buf.data(), size)) {
        failed.store(true);
        return;
      }
    }
  });
  std::vector<std::byte> buf(size);
  std::vector<uint64_t> rtt;
  rtt.reserve(iters);
  for (uint64_t i = 0; i < warmup + iters && !failed.load(); ++i) {
    std::memcpy(buf.data(), &i, 8);
    uint64_t t0 = now_ns();
    uint64_t v = 0;
    if (!post_msg(ab->get(), buf.data(), size) || !wait_msg(a, &v, Deadline::lazy_ms(10000)) ||
        v != i) {
      failed.store(true);
      break;
    }
    if (i >= warmup) rtt.push_back(now_ns() - t0);
  }
  echo.join();
  if (failed.load() || rtt.empty()) {
    std::fprintf(stderr, "shm_pingpong: failed\n");
    return 1;
  }
  std::sort(rtt.begin(), rtt.end());
  double sum = 0;
  for (uint64_t r : rtt) sum += static_cast<double>(r);
  auto pct = [&](double p) { return rtt[static_cast<size_t>(p * (rtt.size() - 1))] / 2.0; };
  std::printf(
      "op=shm_transport_pingpong size=%zu iters=%zu one_way_ns_avg=%.0f p50=%.0f p99=%.0f\n", size,
      rtt.size(), sum / static_cast<double>(rtt.size()) / 2, pct(0.5), pct(0.99));
  return 0;
}
