// Socket helpers for the tcp transport and the control protocol (IPv4).
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/time.h"

namespace lt::net {

/// A file descriptor that closes itself.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

Status resolve(const std::string& host, uint16_t port, sockaddr_in* out);
std::string to_string(const sockaddr_in& a);

/// Non-blocking listening socket bound to host:port (port 0: any).
Result<Fd> listen_tcp(const std::string& host, uint16_t port, sockaddr_in* bound);
/// The same from "host:port"; `what` names the setting in the error log.
Result<Fd> listen_on(const std::string& host_port, const char* what, sockaddr_in* bound);
/// Connects with a deadline; the returned socket is non-blocking, TCP_NODELAY.
/// kPeerDown when refused or unreachable, kTimedOut past the deadline.
Result<Fd> connect_tcp(const sockaddr_in& addr, Deadline d);

Status set_nonblocking(int fd);
void set_nodelay(int fd);
void set_bufsizes(int fd, uint32_t snd, uint32_t rcv);

/// Blocking-with-deadline full write/read on a non-blocking socket.
Status write_all(int fd, const void* p, size_t n, Deadline d);
Status read_all(int fd, void* p, size_t n, Deadline d);

/// Host identity: the kernel boot id plus the network namespace inode, so two
/// nodes share memory only if they are on one kernel and one namespace.
std::string host_id();

/// Adds 1 to an eventfd's counter, so it polls readable (a doorbell). A
/// non-blocking one refuses only near overflow, when it is readable anyway.
void ring_eventfd(int fd);
/// Reads an eventfd's (or a timerfd's) counter back to 0; on a non-blocking
/// one that reads 0, nothing happens.
void drain_eventfd(int fd);

}  // namespace lt::net
