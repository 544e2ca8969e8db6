// One reliable-connected queue pair (RcQp), taken through INIT, RTR and RTS
// towards a remote QP whose address (QpAddress) came over ltier's own
// control path, and the one-sided operations posted on it.
//
// Every set-up failure names the device, port, GID index and MTU involved
// and the configuration key that changes them.
//
// Thread contract: one thread posts on a QP at a time (the transport
// serializes posts).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "transport/verbs/verbs_device.h"

struct ibv_qp;
struct ibv_cq;

namespace lt::transport::verbs {

/// What a remote peer needs to connect to one QP.
struct QpAddress {
  uint32_t qpn = 0;
  uint32_t psn = 0;  // first packet sequence number, 24 bits
  std::array<uint8_t, 16> gid{};
  uint16_t lid = 0;
  uint32_t mtu = 0;  // bytes; the path uses the smaller of the two ends
};

struct RcOptions {
  uint32_t send_depth = 256;
  uint32_t recv_depth = 0;     // receives are posted to an SRQ by the transport
  uint32_t inline_bytes = 64;  // the device may lower it
  uint8_t timeout = 14;        // local ACK timeout: 4.096 us x 2^timeout (14: 67 ms)
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;      // 7: retry for ever on receiver-not-ready
  uint8_t rd_atomic = 16;     // outstanding READs/atomics, capped by the device
  ibv_cq* send_cq = nullptr;  // null: the device's send CQ
};

class RcQp {
 public:
  static Result<std::unique_ptr<RcQp>> create(VerbsDevice& dev, const RcOptions& o,
                                              std::string* why);
  ~RcQp();
  RcQp(const RcQp&) = delete;
  RcQp& operator=(const RcQp&) = delete;

  QpAddress local() const { return local_; }
  ibv_qp* raw() const { return qp_; }
  /// Bytes a post may send inline, as the device granted.
  uint32_t max_inline() const { return max_inline_; }
  /// Moves the QP to the error state: what is in flight completes with a
  /// flush error, and nothing more goes out.
  void to_error();
  /// INIT, RTR towards `remote`, RTS. kInvalidArg with *why naming the
  /// device, port, GID index and MTU when the device refuses a step.
  Status connect(const QpAddress& remote, std::string* why);

  // One-sided operations on a remote region (raddr, rkey). `signaled`:
  // the completion is reported (else only an error is).
  Status write(uint64_t wr_id, const Region& local, uint64_t loff, uint64_t raddr, uint32_t rkey,
               uint32_t len, bool signaled = true);
  Status read(uint64_t wr_id, const Region& local, uint64_t loff, uint64_t raddr, uint32_t rkey,
              uint32_t len, bool signaled = true);
  /// 64-bit atomics; the old value lands at local + loff (8 bytes, aligned).
  Status fetch_add(uint64_t wr_id, const Region& local, uint64_t loff, uint64_t raddr,
                   uint32_t rkey, uint64_t add);
  Status compare_swap(uint64_t wr_id, const Region& local, uint64_t loff, uint64_t raddr,
                      uint32_t rkey, uint64_t expect, uint64_t desired);

 private:
  RcQp() = default;
  Status rdma(int opcode, uint64_t wr_id, const Region& local, uint64_t loff, uint64_t raddr,
              uint32_t rkey, uint32_t len, bool signaled);
  VerbsDevice* dev_ = nullptr;
  RcOptions opts_;
  ibv_qp* qp_ = nullptr;
  QpAddress local_;
  uint32_t max_inline_ = 0;
};

}  // namespace lt::transport::verbs
