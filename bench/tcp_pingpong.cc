// tcp_pingpong: the plain-sockets TCP floor that ltier's numbers are judged against.
//
// It forks its own echo server on 127.0.0.1 (ephemeral port) and measures, with nothing but
// blocking send/recv and TCP_NODELAY:
//   - ping-pong round-trip latency (p50/p99) per message size,
//   - one-way stream bandwidth for sizes >= 64 KiB,
//   - fresh connect + first 8-byte echo time (p50/p90).
// With --busy-poll the latency runs spin on non-blocking recv instead (op=tcp_busy): a second
// floor that leaves out the scheduler's wake-up cost, which is large on some VMs.
// Results go to stdout as one machine-readable line per measurement (bench/compare.sh parses
// them); everything else goes to stderr. Every blocking call is bounded by socket timeouts and
// an alarm() watchdog, so a wedged peer makes the program fail loudly instead of hanging.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Any single blocking socket call that waits longer than this means the peer is gone or wedged.
constexpr int kIoTimeoutSec = 10;
// Backstop for a whole measurement (re-armed before each one), in case something blocks in a
// way the socket timeouts do not cover.
constexpr unsigned kWatchdogSec = 120;

constexpr size_t kSmallSizeLimit = 4096;  // Sizes up to this run the full --iters.
constexpr size_t kMinLargeIters = 200;    // Enough samples for a meaningful p99.
constexpr size_t kMinLargeWarmup = 20;
constexpr size_t kBwMinSize = 65536;  // Below this, a stream test measures syscalls, not bytes.
constexpr size_t kConnectWarmup = 10;
constexpr size_t kStreamRecvBuf = 1 << 20;

// First 8 bytes of every connection tell the server what the client wants. The connect probe
// sends only its magic, so the probe's first message is a genuine 8-byte echo.
constexpr uint64_t kMagicConnectEcho = 0x6c74636f6e6e6563ULL;   // Echo these 8 bytes once.
constexpr uint64_t kMagicPingPong = 0x6c7470696e67706fULL;      // Then: size; echo until EOF.
constexpr uint64_t kMagicPingPongSpin = 0x6c747370696e7070ULL;  // Same, busy-polling recv.
constexpr uint64_t kMagicStream = 0x6c7473747265616dULL;        // Then: size; sink until EOF.
constexpr uint64_t kMagicQuit = 0x6c74717569742121ULL;          // Server exits.

struct Options {
  std::vector<size_t> sizes = {8, 4096, 65536, 1048576};
  size_t iters = 10000;
  size_t warmup = 1000;
  bool bw = true;
  bool connect = true;
  uint64_t bw_bytes = 2ULL << 30;  // Cap so a very fast machine still finishes promptly.
  double bw_seconds = 0.5;
  size_t connect_tries = 200;
  bool busy_poll = false;
};

// Async-signal-safe state for die() and the watchdog.
volatile pid_t g_child_pid = -1;
volatile sig_atomic_t g_is_server = 0;

void kill_child() {
  if (g_child_pid > 0) kill(g_child_pid, SIGKILL);
}

[[noreturn]] void die(const char* what) {
  const int err = errno;
  std::fprintf(stderr, "tcp_pingpong(%s): %s: %s\n", g_is_server ? "server" : "client", what,
               err == EAGAIN || err == EWOULDBLOCK ? "timed out" : std::strerror(err));
  if (g_is_server) _exit(1);  // _exit: never flush stdio buffers inherited from the parent.
  kill_child();
  if (g_child_pid > 0) waitpid(g_child_pid, nullptr, 0);
  std::exit(1);
}

[[noreturn]] void die_plain(const char* what) {
  std::fprintf(stderr, "tcp_pingpong(%s): %s\n", g_is_server ? "server" : "client", what);
  if (g_is_server) _exit(1);
  kill_child();
  if (g_child_pid > 0) waitpid(g_child_pid, nullptr, 0);
  std::exit(1);
}

void on_alarm(int) {
  static const char kMsg[] = "tcp_pingpong: watchdog expired, aborting\n";
  ssize_t ignored = write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
  (void)ignored;
  kill_child();
  _exit(3);
}

void set_timeouts(int fd) {
  timeval tv{};
  tv.tv_sec = kIoTimeoutSec;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) die("SO_RCVTIMEO");
  if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) die("SO_SNDTIMEO");
}

void set_nodelay(int fd) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) die("TCP_NODELAY");
}

void send_all(int fd, const void* buf, size_t len) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    const ssize_t n = send(fd, p, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("send");
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
}

// Returns false on a clean EOF before the first byte (the peer finished); dies on a short
// message, an error or a timeout. MSG_WAITALL lets large messages arrive in one call, as a
// careful hand-written client would do.
bool recv_all(int fd, void* buf, size_t len) {
  char* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < len) {
    const ssize_t n = recv(fd, p + got, len - got, MSG_WAITALL);
    if (n == 0) {
      if (got == 0) return false;
      die_plain("peer closed mid-message");
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      die("recv");
    }
    got += static_cast<size_t>(n);
  }
  return true;
}

void recv_exact(int fd, void* buf, size_t len) {
  if (!recv_all(fd, buf, len)) die_plain("peer closed the connection early");
}

// Busy-polling variant of recv_all: never sleeps in the kernel, so it shows what TCP costs
// without the scheduler's wake-up latency (a cost that is large on some VMs). It needs a core
// per spinning process; the socket timeout does not apply, so it keeps its own deadline.
bool recv_all_spin(int fd, void* buf, size_t len) {
  char* p = static_cast<char*>(buf);
  size_t got = 0;
  unsigned spins = 0;
  auto deadline = Clock::now() + std::chrono::seconds(kIoTimeoutSec);
  while (got < len) {
    const ssize_t n = recv(fd, p + got, len - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      if (got == 0) return false;
      die_plain("peer closed mid-message");
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) die("recv");
    if (++spins % 4096 == 0 && Clock::now() > deadline) {
      errno = EAGAIN;
      die("recv (busy-poll)");
    }
  }
  return true;
}

// --- Server ----------------------------------------------------------------------------------

void serve_connection(int fd) {
  uint64_t magic = 0;
  if (!recv_all(fd, &magic, sizeof(magic))) return;
  if (magic == kMagicQuit) {
    close(fd);
    _exit(0);
  }
  if (magic == kMagicConnectEcho) {
    send_all(fd, &magic, sizeof(magic));
    char drain;
    while (recv(fd, &drain, 1, 0) > 0) {
    }  // Wait for the client's close so it owns TIME_WAIT, not the server.
    return;
  }
  uint64_t size = 0;
  recv_exact(fd, &size, sizeof(size));
  if (size == 0 || size > (1ULL << 31)) die_plain("bad message size in header");
  if (magic == kMagicPingPong) {
    std::vector<char> buf(size);
    while (recv_all(fd, buf.data(), size)) send_all(fd, buf.data(), size);
    return;
  }
  if (magic == kMagicPingPongSpin) {
    std::vector<char> buf(size);
    while (recv_all_spin(fd, buf.data(), size)) send_all(fd, buf.data(), size);
    return;
  }
  if (magic == kMagicStream) {
    // Read in big chunks regardless of the sender's message size: the server's job is only to
    // drain the stream as fast as the kernel delivers it.
    std::vector<char> buf(std::max<size_t>(size, kStreamRecvBuf));
    uint64_t total = 0;
    for (;;) {
      const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EINTR) continue;
        die("stream recv");
      }
      total += static_cast<uint64_t>(n);
    }
    send_all(fd, &total, sizeof(total));  // The one ack that stops the client's clock.
    return;
  }
  die_plain("unknown request magic");
}

[[noreturn]] void run_server(int listen_fd) {
  g_is_server = 1;
  g_child_pid = -1;
  alarm(0);
  for (;;) {
    // An idle server exits on its own, so a crashed client never leaves an orphan behind.
    pollfd pfd{listen_fd, POLLIN, 0};
    const int r = poll(&pfd, 1, kIoTimeoutSec * 1000);
    if (r < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (r == 0) die_plain("server idle too long, exiting");
    const int fd = accept(listen_fd, nullptr, nullptr);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      die("accept");
    }
    set_timeouts(fd);
    set_nodelay(fd);
    serve_connection(fd);
    close(fd);
  }
}

// --- Client ----------------------------------------------------------------------------------

int connect_to(const sockaddr_in& addr) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  set_timeouts(fd);  // Linux also bounds connect() by SO_SNDTIMEO.
  set_nodelay(fd);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) die("connect");
  return fd;
}

double to_us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// Nearest-rank percentile: always a value that was actually observed.
double percentile(std::vector<double>& sorted, double p) {
  const size_t n = sorted.size();
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
  rank = std::clamp<size_t>(rank, 1, n);
  return sorted[rank - 1];
}

size_t scaled(size_t base, size_t size, size_t floor_count) {
  if (size <= kSmallSizeLimit) return base;
  // Large messages take proportionally longer; keep total bytes roughly constant but never
  // drop below a count that still gives a usable tail percentile.
  const size_t by_bytes = static_cast<size_t>(static_cast<uint64_t>(base) * kSmallSizeLimit / size);
  return std::min(base, std::max(floor_count, by_bytes));
}

void measure_latency(const sockaddr_in& addr, size_t size, const Options& opt) {
  const size_t iters = scaled(opt.iters, size, kMinLargeIters);
  const size_t warmup = scaled(opt.warmup, size, kMinLargeWarmup);
  alarm(kWatchdogSec);
  const int fd = connect_to(addr);
  const uint64_t hdr[2] = {opt.busy_poll ? kMagicPingPongSpin : kMagicPingPong, size};
  send_all(fd, hdr, sizeof(hdr));
  std::vector<char> out(size, 'x');
  std::vector<char> in(size);
  std::vector<double> samples;
  samples.reserve(iters);
  for (size_t i = 0; i < warmup + iters; ++i) {
    const auto t0 = Clock::now();
    send_all(fd, out.data(), size);
    const bool got =
        opt.busy_poll ? recv_all_spin(fd, in.data(), size) : recv_all(fd, in.data(), size);
    if (!got) die_plain("server closed the ping-pong connection");
    const auto t1 = Clock::now();
    if (i >= warmup) samples.push_back(to_us(t1 - t0));
  }
  close(fd);
  std::sort(samples.begin(), samples.end());
  std::printf("lat op=%s size=%zu iters=%zu p50_us=%.2f p99_us=%.2f\n",
              opt.busy_poll ? "tcp_busy" : "tcp", size, iters, percentile(samples, 50),
              percentile(samples, 99));
  std::fflush(stdout);
}

void measure_bandwidth(const sockaddr_in& addr, size_t size, const Options& opt) {
  alarm(kWatchdogSec);
  const int fd = connect_to(addr);
  const uint64_t hdr[2] = {kMagicStream, size};
  send_all(fd, hdr, sizeof(hdr));
  std::vector<char> out(size, 'y');
  const auto budget = std::chrono::duration<double>(opt.bw_seconds);
  uint64_t sent = 0;
  const auto t0 = Clock::now();
  // Checking the clock per message costs ~20 ns against >= 64 KiB of copying: negligible.
  while (sent + size <= opt.bw_bytes && Clock::now() - t0 < budget) {
    send_all(fd, out.data(), size);
    sent += size;
  }
  if (shutdown(fd, SHUT_WR) != 0) die("shutdown");  // EOF tells the server to ack.
  uint64_t acked = 0;
  recv_exact(fd, &acked, sizeof(acked));
  const auto t1 = Clock::now();
  close(fd);
  if (acked != sent) die_plain("stream ack does not match bytes sent");
  const double secs = std::chrono::duration<double>(t1 - t0).count();
  std::printf("bw op=tcp size=%zu MBps=%.1f\n", size, static_cast<double>(sent) / secs / 1e6);
  std::fflush(stdout);
}

void measure_connect(const sockaddr_in& addr, const Options& opt) {
  alarm(kWatchdogSec);
  std::vector<double> samples;
  samples.reserve(opt.connect_tries);
  for (size_t i = 0; i < kConnectWarmup + opt.connect_tries; ++i) {
    const auto t0 = Clock::now();
    const int fd = connect_to(addr);
    const uint64_t magic = kMagicConnectEcho;
    send_all(fd, &magic, sizeof(magic));
    uint64_t echo = 0;
    recv_exact(fd, &echo, sizeof(echo));
    const auto t1 = Clock::now();
    close(fd);
    if (echo != magic) die_plain("connect echo mismatch");
    if (i >= kConnectWarmup) samples.push_back(to_us(t1 - t0));
  }
  std::sort(samples.begin(), samples.end());
  std::printf("connect op=tcp p50_us=%.1f p90_us=%.1f\n", percentile(samples, 50),
              percentile(samples, 90));
  std::fflush(stdout);
}

void stop_server(const sockaddr_in& addr) {
  alarm(kWatchdogSec);
  const int fd = connect_to(addr);
  const uint64_t magic = kMagicQuit;
  send_all(fd, &magic, sizeof(magic));
  close(fd);
  // Reap the child; give it a few seconds to notice, then stop asking politely.
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(g_child_pid, &status, WNOHANG);
    if (r == g_child_pid) break;
    if (r < 0 && errno != EINTR) die("waitpid");
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "tcp_pingpong: server did not exit, killing it\n");
      kill(g_child_pid, SIGKILL);
      waitpid(g_child_pid, &status, 0);
      g_child_pid = -1;
      std::exit(1);
    }
    usleep(1000);
  }
  g_child_pid = -1;
  alarm(0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die_plain("server exited abnormally");
}

// --- Command line ----------------------------------------------------------------------------

[[noreturn]] void usage(const char* bad) {
  if (bad != nullptr) std::fprintf(stderr, "tcp_pingpong: bad argument: %s\n", bad);
  std::fprintf(stderr,
               "usage: tcp_pingpong [--sizes a,b,c] [--iters N] [--warmup N] [--no-bw]\n"
               "                    [--no-connect] [--bw-bytes N] [--bw-seconds S]\n"
               "                    [--connect-tries N] [--busy-poll]\n"
               "  --busy-poll: latency with spinning recv on both sides (op=tcp_busy)\n");
  std::exit(2);
}

uint64_t parse_u64(const char* s) {
  if (s == nullptr || *s == '\0') usage(s);
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0' || s[0] == '-') usage(s);
  return v;
}

std::vector<size_t> parse_sizes(const char* s) {
  std::vector<size_t> sizes;
  std::string_view rest(s == nullptr ? "" : s);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item(rest.substr(0, comma));
    const uint64_t v = parse_u64(item.c_str());
    if (v == 0 || v > (1ULL << 30)) usage(s);
    sizes.push_back(static_cast<size_t>(v));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (sizes.empty()) usage(s);
  return sizes;
}

Options parse_args(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a(argv[i]);
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--sizes") {
      opt.sizes = parse_sizes(next);
      ++i;
    } else if (a == "--iters") {
      opt.iters = parse_u64(next);
      if (opt.iters == 0) usage(next);
      ++i;
    } else if (a == "--warmup") {
      opt.warmup = parse_u64(next);
      ++i;
    } else if (a == "--bw-bytes") {
      opt.bw_bytes = parse_u64(next);
      ++i;
    } else if (a == "--bw-seconds") {
      if (next == nullptr) usage(nullptr);
      char* end = nullptr;
      opt.bw_seconds = std::strtod(next, &end);
      if (*end != '\0' || !(opt.bw_seconds > 0)) usage(next);
      ++i;
    } else if (a == "--connect-tries") {
      opt.connect_tries = parse_u64(next);
      if (opt.connect_tries == 0) usage(next);
      ++i;
    } else if (a == "--no-bw") {
      opt.bw = false;
    } else if (a == "--busy-poll") {
      opt.busy_poll = true;
    } else if (a == "--no-connect") {
      opt.connect = false;
    } else if (a == "-h" || a == "--help") {
      usage(nullptr);
    } else {
      usage(argv[i]);
    }
  }
  return opt;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse_args(argc, argv);

  // A dead peer must surface as EPIPE from send(), not kill us silently.
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGALRM, &sa, nullptr) != 0) die("sigaction");

  const int listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  if (listen_fd < 0) die("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;  // Ephemeral: parallel runs never collide on a port.
  if (bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) die("bind");
  // Backlog covers the connect probe, whose client may run ahead of the server's accept().
  if (listen(listen_fd, 256) != 0) die("listen");
  socklen_t len = sizeof(addr);
  if (getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) die("getsockname");
  std::fprintf(stderr, "tcp_pingpong: server on 127.0.0.1:%u\n", ntohs(addr.sin_port));

  std::fflush(nullptr);  // Nothing buffered may be duplicated into the child.
  const pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) run_server(listen_fd);
  g_child_pid = pid;
  close(listen_fd);

  for (const size_t size : opt.sizes) measure_latency(addr, size, opt);
  if (opt.bw) {
    for (const size_t size : opt.sizes) {
      if (size >= kBwMinSize) measure_bandwidth(addr, size, opt);
    }
  }
  if (opt.connect) measure_connect(addr, opt);
  stop_server(addr);
  return 0;
}
