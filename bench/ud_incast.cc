// ud_incast: N senders stream into one receiver over the ud transport, with
// each congestion mode (verbs.ud_congestion: 1, losses and the receiver's
// marks; 2, marks only; 0, a fixed window), their order rotating round by
// round in one run. Each sender and the receiver is a
// UdTransport of its own (its own UD QP) on its own thread, on the real
// device (Soft-RoCE in tests/rdma's guest). Prints, per round, the goodput
// and the datagrams sent again; then the medians of each mode.
//
//   ud_incast [--senders N] [--messages M] [--bytes B] [--recv-buffers R]
//             [--window W] [--loss PERCENT] [--rounds K]
//
// --loss drops that percentage of the datagrams every transport receives
// (verbs.ud_loss_percent): loss that is not congestion.
#include <poll.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/time.h"
#include "transport/factory.h"

using namespace lt;
using namespace lt::transport;

namespace {

constexpr uint64_t kToken = 0x1ca57ull;
constexpr uint64_t kLimitMs = 120000;  // a round that has not ended by then failed

struct Options {
  int senders = 3;
  int messages = 256;
  uint32_t bytes = 16384;
  uint32_t recv_buffers = 64;
  uint32_t window = 128;
  uint32_t loss = 0;
  int rounds = 3;
};

struct Round {
  double seconds = 0;
  uint64_t retransmits = 0, cuts = 0, mark_cuts = 0, marks = 0, datagrams = 0;
  bool ok = false;
};

constexpr const char* kModeName[3] = {"fixed", "adaptive", "marks"};

std::unique_ptr<Transport> make(const Options& o, uint32_t mode, NodeId node) {
  Config c;
  c.verbs.ud_recv_buffers = o.recv_buffers;
  c.verbs.ud_window = o.window;
  c.verbs.ud_send_slots = std::max<uint32_t>(4096, 2 * o.window);
  c.verbs.ud_congestion = mode;
  c.verbs.ud_loss_percent = o.loss;
  auto t = make_ud_transport(c);
  if (!t.is_ok()) {
    std::fprintf(stderr, "ud_incast: no ud transport: %s\n", t.status().name());
    std::exit(1);
  }
  (*t)->set_identity(node, kToken, Mac{});
  return std::move(t).value();
}

// Polls `t` once, counting kRecv completions into *got (when not null).
size_t pump(Transport* t, std::atomic<uint64_t>* got) {
  std::array<Completion, 32> cq;
  const size_t n = t->poll(cq);
  uint64_t k = 0;
  for (size_t i = 0; i < n; ++i) k += cq[i].kind == CqKind::kRecv;
  t->release_rx(std::span<const Completion>(cq.data(), n));
  if (got != nullptr && k > 0) got->fetch_add(k, std::memory_order_relaxed);
  return n;
}

void nap(Transport* t) {
  pollfd p{t->wait_fd(), POLLIN, 0};
  ::poll(&p, 1, 1);
}

Round run_round(const Options& o, uint32_t mode) {
  Round r;
  auto rx = make(o, mode, 1);
  std::vector<std::unique_ptr<Transport>> tx;
  std::vector<std::unique_ptr<Endpoint>> eps;
  for (int i = 0; i < o.senders; ++i) {
    tx.push_back(make(o, mode, static_cast<NodeId>(2 + i)));
    auto ep = tx.back()->connect(PeerInfo{1, "", {{"ud", rx->local_address()}}},
                                 Deadline::after_ms(10000));
    if (!ep.is_ok()) {
      std::fprintf(stderr, "ud_incast: connect: %s\n", ep.status().name());
      return r;
    }
    eps.push_back(std::move(ep).value());
  }
  std::vector<std::byte> payload(o.bytes, std::byte{0x5a});
  const uint64_t want = uint64_t(o.senders) * o.messages;
  std::atomic<uint64_t> got{0};
  std::atomic<bool> stop{false};
  const Deadline limit = Deadline::after_ms(kLimitMs);
  const uint64_t t0 = now_ns();
  std::vector<std::thread> threads;
  for (int i = 0; i < o.senders; ++i) {
    threads.emplace_back([&, i] {
      WorkRequest wr;
      wr.op = Op::kSend;
      wr.num_sge = 1;
      wr.sge[0] = Sge{payload.data(), o.bytes, 0};
      for (int m = 0; m < o.messages && !limit.expired();) {
        auto p = eps[i]->post(std::span<const WorkRequest>(&wr, 1));
        if (!p.is_ok()) return;
        if (*p == 1) {
          ++m;
        } else if (pump(tx[i].get(), nullptr) == 0) {
          nap(tx[i].get());
        }
      }
      while (!stop.load(std::memory_order_acquire) && !limit.expired()) {
        if (pump(tx[i].get(), nullptr) == 0) nap(tx[i].get());
      }
    });
  }
  while (got.load(std::memory_order_relaxed) < want && !limit.expired()) {
    if (pump(rx.get(), &got) == 0) nap(rx.get());
  }
  r.seconds = double(now_ns() - t0) / 1e9;
  r.ok = got.load() == want;
  stop.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  for (auto& t : tx) {
    const TransportStats st = t->stats();
    r.retransmits += st.retransmits;
    r.cuts += st.window_cuts;
    r.mark_cuts += st.mark_cuts;
  }
  r.marks = rx->stats().marks_sent;
  const uint32_t payload_max = 1024 - 48;  // rxe's MTU less the datagram header
  r.datagrams = want * ((o.bytes + payload_max - 1) / payload_max);
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const long v = std::strtol(argv[i + 1], nullptr, 10);
    if (k == "--senders") {
      o.senders = int(v);
    } else if (k == "--messages") {
      o.messages = int(v);
    } else if (k == "--bytes") {
      o.bytes = uint32_t(v);
    } else if (k == "--recv-buffers") {
      o.recv_buffers = uint32_t(v);
    } else if (k == "--window") {
      o.window = uint32_t(v);
    } else if (k == "--loss") {
      o.loss = uint32_t(v);
    } else if (k == "--rounds") {
      o.rounds = int(v);
    } else {
      std::fprintf(stderr, "ud_incast: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each round shows, even if a later one hangs
  std::printf(
      "ud incast: %d senders x %d messages of %u B into one receiver with %u receive "
      "buffers, flow window %u, %u%% of datagrams dropped on receipt\n",
      o.senders, o.messages, o.bytes, o.recv_buffers, o.window, o.loss);
  std::printf("%-5s %-9s %9s %10s %12s %10s %6s %10s %6s\n", "round", "window", "seconds", "MB/s",
              "resent", "datagrams", "cuts", "mark_cuts", "marks");
  std::vector<double> mbs[3], resent[3];
  int failed = 0;
  for (int k = 0; k < o.rounds; ++k) {
    for (uint32_t i = 0; i < 3; ++i) {
      const uint32_t mode = (i + static_cast<uint32_t>(k)) % 3;  // rotate which goes first
      const Round r = run_round(o, mode);
      const double mb = double(o.senders) * o.messages * o.bytes / 1e6 / r.seconds;
      std::printf("%-5d %-9s %9.3f %10.1f %12llu %10llu %6llu %10llu %6llu%s\n", k, kModeName[mode],
                  r.seconds, mb, static_cast<unsigned long long>(r.retransmits),
                  static_cast<unsigned long long>(r.datagrams),
                  static_cast<unsigned long long>(r.cuts),
                  static_cast<unsigned long long>(r.mark_cuts),
                  static_cast<unsigned long long>(r.marks), r.ok ? "" : "  INCOMPLETE");
      failed += !r.ok;
      mbs[mode].push_back(mb);
      resent[mode].push_back(double(r.retransmits) / double(r.datagrams));
    }
  }
  for (uint32_t m : {1u, 2u, 0u}) {
    std::printf("median %-9s %.1f MB/s, %.3f datagrams sent again per datagram\n", kModeName[m],
                median(mbs[m]), median(resent[m]));
  }
  return failed == 0 ? 0 : 1;
}
