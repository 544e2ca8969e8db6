// Construction of transports; the implementations stay private to transport/.
// Adding a transport is its folder under transport/ and one entry in
// transport_entries(): proto/ builds and ranks transports from this table
// and never names one.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "common/config.h"
#include "transport/transport.h"

namespace lt::transport {

/// What the transports of one engine share, built with one of these: the
/// RDMA device's context and protection domain today, so that rc and ud open
/// the device once and register the engine's memory in one domain. Opaque
/// outside transport/ (transport/share.h). Each transport keeps what it
/// took: the share may go once the engine's transports are built.
class TransportShare {
 public:
  TransportShare();
  ~TransportShare();
  TransportShare(const TransportShare&) = delete;
  TransportShare& operator=(const TransportShare&) = delete;
  struct Held;
  Held& held() { return *held_; }

 private:
  std::unique_ptr<Held> held_;
};

/// One transport ltier can build, and how it ranks against the others.
struct TransportEntry {
  const char* name;  // what config's `transports` list and Transport::name() say
  Result<std::unique_ptr<Transport>> (*make)(const Config& config, TransportShare& share);
  /// Reaches only peers on this host (same boot id and network namespace).
  bool same_host_only;
  /// Among the transports two peers share, the lowest rank serves them.
  int rank;
  /// Its alloc_memory regions are reached natively by peers it serves
  /// (Caps::one_sided): a node's LMRs live in its best-ranked such transport
  /// and are exported (Transport::export_memory) to the next.
  bool native_memory;
};

/// Every transport this build has, best rank first.
std::span<const TransportEntry> transport_entries();
/// The entry called `name`, or null.
const TransportEntry* find_transport(std::string_view name);

/// Binds the listening socket now (config.listen); fails with kSys/kInvalidArg
/// when the address cannot be bound.
Result<std::unique_ptr<Transport>> make_tcp_transport(const TcpConfig& config);

/// Same-host transport over memfd rings (transport/shm/shm_transport.h).
/// Binds its abstract unix socket now; kInvalidArg for a bad shm.ring_bytes
/// (a power of two in [4 KiB, 1 GiB]) or shm.max_msg_bytes 0, kSys when the
/// socket, epoll set or memfd cannot be made.
Result<std::unique_ptr<Transport>> make_shm_transport(const ShmConfig& config);

/// RDMA reliable-connected QPs (transport/verbs/verbs_transport.h): the
/// device verbs.* picks, a shared receive queue, LMR pools. kNotFound when
/// there is no usable device (the log says which and why), kUnsupported in
/// a build without libibverbs. With `share`, the device's context and PD
/// come from it (or are left in it); without, the transport opens its own.
Result<std::unique_ptr<Transport>> make_rc_transport(const Config& config,
                                                     TransportShare* share = nullptr);

/// Reliable messages over one RDMA UD QP (transport/verbs/ud_transport.h),
/// for peers rc cannot serve. kNotFound without a usable device,
/// kUnsupported in a build without libibverbs. `share` as for rc.
Result<std::unique_ptr<Transport>> make_ud_transport(const Config& config,
                                                     TransportShare* share = nullptr);

}  // namespace lt::transport
