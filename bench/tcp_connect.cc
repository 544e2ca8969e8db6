// tcp_connect: the raw-socket peers of ltier's two connection figures, taken
// the way ltier's are, so that the ratios compare like with like. No ltier
// code.
//
//  - new_server: the peer of `ltier-perf --new-peer` (a warm engine's first
//    LT_RPC to a node that joined moments ago). Each try starts a server
//    process of its own (this program again, with --serve), waits until it
//    listens, lets the machine sit idle for --settle-ms (ltier-perf's wait
//    for a new node to finish starting), then times socket + connect + an
//    8-byte echo from this warm process.
//  - fresh_client: the peer of `ltier-perf --join` (a fresh process, from
//    the start of LT_join to its first completed remote operation). One
//    echo server runs; each try starts a client process of its own (--once),
//    which times socket + connect + an 8-byte echo from the start of main()
//    and prints it.
//
// On a VM both depend much more on what ran just before than a connection
// made back to back with the last one does (bench/tcp_pingpong's connect
// probe): a vCPU that sat idle takes long to wake, and a fresh process's
// first system calls fault in pages. Those costs are part of ltier's
// figures too.
//
//   tcp_connect [--tries N] [--settle-ms MS] [--no-new-server] [--no-fresh-client]
//
// Prints, one line per mode:
//   connect op=new_server tries=N settle_ms=MS p50_us=X p90_us=Y
//   connect op=fresh_client tries=N p50_us=X p90_us=Y
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kIoTimeoutMs = 10000;  // any single wait longer than this: the peer is gone
constexpr uint64_t kMagic = 0x6c74636f6e6e6563ULL;

struct Options {
  int tries = 20, settle_ms = 200;
  bool new_server = true, fresh_client = true;
};

[[noreturn]] void die(const char* what) {
  fprintf(stderr, "tcp_connect: %s: %s\n", what, errno != 0 ? strerror(errno) : "failed");
  exit(1);
}

void wait_fd(int fd, short events) {
  pollfd p{fd, events, 0};
  int r;
  while ((r = poll(&p, 1, kIoTimeoutMs)) < 0 && errno == EINTR) {
  }
  if (r == 0) {
    errno = ETIMEDOUT;
    die("wait");
  }
  if (r < 0) die("poll");
}

void io_exact(int fd, void* buf, size_t len, bool out) {
  auto* p = static_cast<char*>(buf);
  while (len > 0) {
    wait_fd(fd, out ? POLLOUT : POLLIN);
    const ssize_t n = out ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
    if (n == 0) die("peer closed");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      die(out ? "send" : "recv");
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
}

// socket + connect + one 8-byte echo; what both modes time.
void connect_and_echo(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) die("socket");
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (errno != EINPROGRESS) die("connect");
    wait_fd(fd, POLLOUT);
    int err = 0;
    socklen_t l = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
    errno = err;
    if (err != 0) die("connect");
  }
  uint64_t m = kMagic, echo = 0;
  io_exact(fd, &m, sizeof(m), true);
  io_exact(fd, &echo, sizeof(echo), false);
  if (echo != kMagic) die("echo mismatch");
  close(fd);
}

// Listens on an ephemeral loopback port, writes it to stdout, then echoes 8
// bytes on each connection until stdin closes (the parent is done or gone).
[[noreturn]] void serve() {
  const int ls = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t l = sizeof(a);
  if (ls < 0 || bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(ls, 64) != 0 ||
      getsockname(ls, reinterpret_cast<sockaddr*>(&a), &l) != 0) {
    die("listen");
  }
  printf("%u\n", ntohs(a.sin_port));
  fflush(stdout);
  for (;;) {
    pollfd p[2] = {{ls, POLLIN, 0}, {0, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (p[1].revents != 0) exit(0);  // stdin closed
    const int fd = accept(ls, nullptr, nullptr);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint64_t m = 0;
    io_exact(fd, &m, sizeof(m), false);
    io_exact(fd, &m, sizeof(m), true);
    close(fd);
  }
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) die("readlink /proc/self/exe");
  return std::string(buf, static_cast<size_t>(n));
}

// Starts this program with `args`; *to_child is its stdin, *from_child its stdout.
pid_t spawn_self(const std::vector<std::string>& args, int* to_child, int* from_child) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) die("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  std::vector<std::string> all = {self_exe()};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : all) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) die("posix_spawn");
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  *to_child = in[1];
  *from_child = out[0];
  return pid;
}

// One line from the child's stdout (bounded by kIoTimeoutMs).
std::string read_line(int fd) {
  std::string s;
  char c;
  for (;;) {
    wait_fd(fd, POLLIN);
    const ssize_t n = read(fd, &c, 1);
    if (n <= 0 || c == '\n') return s;
    s += c;
  }
}

// The same percentile rule as ltier-perf's, so that the two tools' p50 and
// p90 pick the same sample out of as many.
double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

void run_new_server(const Options& o) {
  std::vector<double> us;
  for (int t = 0; t <= o.tries; ++t) {  // the first warms this process up and is not counted
    int to = -1, from = -1;
    const pid_t pid = spawn_self({"--serve"}, &to, &from);
    const int port = atoi(read_line(from).c_str());
    if (port <= 0) die("the server did not say its port");
    std::this_thread::sleep_for(std::chrono::milliseconds(o.settle_ms));
    const auto t0 = Clock::now();
    connect_and_echo(static_cast<uint16_t>(port));
    const double d = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (t > 0) us.push_back(d);
    close(to);
    close(from);
    waitpid(pid, nullptr, 0);
  }
  printf("connect op=new_server tries=%zu settle_ms=%d p50_us=%.1f p90_us=%.1f\n", us.size(),
         o.settle_ms, pct(us, 50), pct(us, 90));
  fflush(stdout);
}

void run_fresh_client(const Options& o) {
  int sto = -1, sfrom = -1;
  const pid_t server = spawn_self({"--serve"}, &sto, &sfrom);
  const std::string port = read_line(sfrom);
  if (atoi(port.c_str()) <= 0) die("the server did not say its port");
  std::vector<double> us;
  for (int t = 0; t < o.tries; ++t) {
    int to = -1, from = -1;
    const pid_t pid = spawn_self({"--once", port}, &to, &from);
    const double d = atof(read_line(from).c_str());
    close(to);
    close(from);
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && d > 0) us.push_back(d);
  }
  close(sto);
  close(sfrom);
  waitpid(server, nullptr, 0);
  printf("connect op=fresh_client tries=%zu p50_us=%.1f p90_us=%.1f\n", us.size(), pct(us, 50),
         pct(us, 90));
  fflush(stdout);
}

[[noreturn]] void usage() {
  fprintf(stderr,
          "usage: tcp_connect [--tries N] [--settle-ms MS] [--no-new-server] "
          "[--no-fresh-client]\n");
  exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  const auto start = Clock::now();
  signal(SIGPIPE, SIG_IGN);
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--serve") {
      serve();
    } else if (a == "--once" && next != nullptr) {
      connect_and_echo(static_cast<uint16_t>(atoi(next)));
      printf("%.1f\n", std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      return 0;
    } else if (a == "--tries" && next != nullptr) {
      o.tries = atoi(argv[++i]);
    } else if (a == "--settle-ms" && next != nullptr) {
      o.settle_ms = atoi(argv[++i]);
    } else if (a == "--no-new-server") {
      o.new_server = false;
    } else if (a == "--no-fresh-client") {
      o.fresh_client = false;
    } else {
      usage();
    }
  }
  if (o.tries <= 0 || o.settle_ms < 0) usage();
  if (o.new_server) run_new_server(o);
  if (o.fresh_client) run_fresh_client(o);
  return 0;
}
