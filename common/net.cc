#include "common/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/config.h"
#include "common/log.h"

namespace lt::net {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Status resolve(const std::string& host, uint16_t port, sockaddr_in* out) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (host.empty() || host == "*") {
    a.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) {
      LT_ERROR("cannot resolve host '%s'", host.c_str());
      return Code::kInvalidArg;
    }
    a.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    freeaddrinfo(res);
  }
  *out = a;
  return Status::ok();
}

std::string to_string(const sockaddr_in& a) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a.sin_addr, buf, sizeof(buf));
  return std::string(buf) + ":" + std::to_string(ntohs(a.sin_port));
}

Status set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return Code::kSys;
  return Status::ok();
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void set_bufsizes(int fd, uint32_t snd, uint32_t rcv) {
  if (snd != 0) {
    int v = static_cast<int>(snd);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
  }
  if (rcv != 0) {
    int v = static_cast<int>(rcv);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
  }
}

Result<Fd> listen_tcp(const std::string& host, uint16_t port, sockaddr_in* bound) {
  sockaddr_in a;
  LT_RETURN_IF_ERROR(resolve(host, port, &a));
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Code::kSys;
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    LT_ERROR("bind %s:%u: %s", host.c_str(), port, strerror(errno));
    return Code::kSys;
  }
  if (listen(fd.get(), 512) != 0) return Code::kSys;
  socklen_t len = sizeof(a);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  if (bound) *bound = a;
  return fd;
}

Result<Fd> listen_on(const std::string& host_port, const char* what, sockaddr_in* bound) {
  std::string host;
  uint16_t port = 0;
  if (!parse_host_port(host_port, &host, &port).is_ok()) {
    LT_ERROR("%s '%s' is not host:port", what, host_port.c_str());
    return Code::kInvalidArg;
  }
  return listen_tcp(host, port, bound);
}

Result<Fd> connect_tcp(const sockaddr_in& addr, Deadline d) {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Code::kSys;
  set_nodelay(fd.get());
  int rc = connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  if (rc != 0 && errno != EINPROGRESS) return Code::kPeerDown;
  if (rc != 0) {
    pollfd p{fd.get(), POLLOUT, 0};
    for (;;) {
      int n = ::poll(&p, 1, d.remaining_ms());
      if (n > 0) break;
      if (n == 0) return Code::kTimedOut;
      if (errno != EINTR) return Code::kSys;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return Code::kPeerDown;
  }
  return fd;
}

Status write_all(int fd, const void* p, size_t n, Deadline d) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w > 0) {
      c += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      int r = ::poll(&pf, 1, d.remaining_ms());
      if (r == 0) return Code::kTimedOut;
      continue;
    }
    return Code::kPeerDown;
  }
  return Status::ok();
}

Status read_all(int fd, void* p, size_t n, Deadline d) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r > 0) {
      c += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return Code::kPeerDown;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd pf{fd, POLLIN, 0};
      int k = ::poll(&pf, 1, d.remaining_ms());
      if (k == 0) return Code::kTimedOut;
      continue;
    }
    return Code::kPeerDown;
  }
  return Status::ok();
}

std::string host_id() {
  // The boot id is fixed for the life of the process: read once (the first
  // join paid an ifstream per call). The network namespace is looked at on
  // every call, since a process may move between namespaces.
  static const std::string boot = [] {
    char buf[64] = {};
    ssize_t n = -1;
    if (int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC); fd >= 0) {
      n = ::read(fd, buf, sizeof(buf) - 1);
      ::close(fd);
    }
    std::string b(buf, n > 0 ? static_cast<size_t>(n) : 0);
    if (!b.empty() && b.back() == '\n') b.pop_back();
    return b;
  }();
  struct stat st {};
  unsigned long long ns = 0;
  if (stat("/proc/self/ns/net", &st) == 0) ns = static_cast<unsigned long long>(st.st_ino);
  return boot + "/" + std::to_string(ns);
}

void ring_eventfd(int fd) {
  uint64_t one = 1;
  ssize_t r = ::write(fd, &one, sizeof(one));
  (void)r;
}

void drain_eventfd(int fd) {
  uint64_t v;
  ssize_t r = ::read(fd, &v, sizeof(v));
  (void)r;
}

}  // namespace lt::net
