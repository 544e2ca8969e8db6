// An RDMA device opened once per engine with its protection domain
// (VerbsContext), a transport's completion channel and queues on it
// (VerbsDevice), and memory registered in the domain (Region).
//
// Thread contract: a VerbsContext is immutable once opened but for its
// async events (async_events.h: any thread reads them, one at a time); a
// VerbsDevice is polled by one thread at a time; Regions are immutable once
// made.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "transport/verbs/async_events.h"
#include "transport/verbs/device.h"

struct ibv_context;
struct ibv_pd;
struct ibv_cq;
struct ibv_mr;
struct ibv_comp_channel;
struct ibv_srq;

namespace lt::transport {
class TransportShare;
}

namespace lt::transport::verbs {

/// A completion, as a transport sees it.
struct WorkCompletion {
  uint64_t wr_id = 0;
  bool ok = false;
  std::string error;  // ibv_wc_status_str when !ok
  uint32_t bytes = 0;
};

/// A device's context and one protection domain, with the device's limits.
/// rc and ud of one engine share it (through the TransportShare the engine
/// builds them with), so the engine opens the device once and registers all
/// of its memory in one domain.
class VerbsContext {
 public:
  /// Opens `device` and allocates a PD on it.
  static Result<std::shared_ptr<VerbsContext>> open(const std::string& device, std::string* why);
  /// The context `share` holds for `device`, else a newly opened one, which
  /// `share` then holds for the transports built after this one. A null
  /// `share` always opens a new one.
  static Result<std::shared_ptr<VerbsContext>> take(TransportShare* share,
                                                    const std::string& device, std::string* why);
  ~VerbsContext();
  VerbsContext(const VerbsContext&) = delete;
  VerbsContext& operator=(const VerbsContext&) = delete;

  const std::string& device() const { return device_; }
  ibv_context* context() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  uint32_t max_cqe() const { return max_cqe_; }
  bool atomics_global() const { return atomics_global_; }
  /// The device's asynchronous events, read by whichever transport asks.
  AsyncEvents& events() const { return *events_; }

 private:
  VerbsContext() = default;
  std::string device_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::unique_ptr<AsyncEvents> events_;
  uint32_t max_cqe_ = 0;
  bool atomics_global_ = false;
};

class VerbsDevice {
 public:
  /// Opens `choice` (from choose()) on the context VerbsContext::take gives
  /// for `share` (a new one without): a completion channel, a send CQ of
  /// `cq_entries`, and, when srq_depth > 0, a shared receive queue of that
  /// depth with its own CQ (both CQs on the one channel).
  static Result<std::unique_ptr<VerbsDevice>> open(const Choice& choice, uint32_t cq_entries,
                                                   std::string* why, uint32_t srq_depth = 0,
                                                   TransportShare* share = nullptr);
  ~VerbsDevice();
  VerbsDevice(const VerbsDevice&) = delete;
  VerbsDevice& operator=(const VerbsDevice&) = delete;

  const Choice& choice() const { return choice_; }
  ibv_context* context() const { return ctx_->context(); }
  ibv_pd* pd() const { return ctx_->pd(); }
  ibv_cq* cq() const { return cq_; }
  /// The receive CQ (the send CQ when there is no SRQ) and the SRQ (or null).
  ibv_cq* recv_cq() const { return recv_cq_ != nullptr ? recv_cq_ : cq_; }
  ibv_srq* srq() const { return srq_; }
  /// The completion channel's fd (non-blocking): readable when an armed CQ
  /// has a completion.
  int channel_fd() const;
  /// Takes and acknowledges the channel's pending events; false when none.
  /// *send_fired (when given) tells whether the send CQ's event was among
  /// them (that CQ is no longer armed).
  bool drain_events(bool* send_fired = nullptr);
  /// The largest CQ the device allows.
  uint32_t max_cqe() const { return ctx_->max_cqe(); }
  /// The send CQ's size now (the device may round a request up).
  uint32_t cq_entries() const;
  /// Makes the send CQ hold at least `entries` (ibv_resize_cq), keeping the
  /// completions it holds. The caller keeps every other poller of the send
  /// CQ out meanwhile. Refused (with the reason in *why) where the device
  /// cannot resize, or beyond max_cqe().
  Status grow_cq(uint32_t entries, std::string* why);
  /// The device's atomics are atomic with respect to the CPU's on the same
  /// memory (atomic_cap IBV_ATOMIC_GLOB); otherwise only with respect to
  /// other atomics through this device (IBV_ATOMIC_HCA).
  bool atomics_global() const { return ctx_->atomics_global(); }
  /// The context's asynchronous events (shared with the engine's other
  /// verbs transport).
  AsyncEvents& events() const { return ctx_->events(); }
  /// The chosen GID's 16 bytes and the port's LID (InfiniBand; 0 on RoCE).
  const std::array<uint8_t, 16>& gid() const { return gid_; }
  uint16_t lid() const { return lid_; }
  /// Up to `max` completions, without blocking; -1 when polling failed.
  int poll(WorkCompletion* out, int max);
  /// Sleeping on the CQ: arm(), poll() once more (a completion may have
  /// come before the arming), and only if that finds none, block() until the
  /// channel fires or timeout_ms passes (false).
  bool arm();
  /// Arms the receive CQ only: a sender that reaps its completions when it
  /// next polls anyway need not be woken for them.
  bool arm_recv();
  /// Arms the send CQ only.
  bool arm_send();
  bool block(int timeout_ms);

 private:
  VerbsDevice() = default;
  Choice choice_;
  std::array<uint8_t, 16> gid_{};
  uint16_t lid_ = 0;
  std::shared_ptr<VerbsContext> ctx_;  // destroyed after the queues below
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  ibv_srq* srq_ = nullptr;
};

/// Memory registered for local and remote access.
class Region {
 public:
  static Result<std::unique_ptr<Region>> make(VerbsDevice& dev, void* addr, size_t len,
                                              std::string* why);
  /// Local access only (send rings, receive buffers).
  static Result<std::unique_ptr<Region>> make_local(VerbsDevice& dev, void* addr, size_t len,
                                                    std::string* why);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  uint32_t lkey() const;
  uint32_t rkey() const;
  uint64_t addr() const { return reinterpret_cast<uint64_t>(addr_); }
  size_t size() const { return len_; }

 private:
  Region() = default;
  static Result<std::unique_ptr<Region>> make_with(VerbsDevice& dev, void* addr, size_t len,
                                                   int access, std::string* why);
  ibv_mr* mr_ = nullptr;
  void* addr_ = nullptr;
  size_t len_ = 0;
};

}  // namespace lt::transport::verbs
