// The transports this engine runs, built from config (`transports`,
// LTIER_TRANSPORTS) through transport/factory.h, and the choice of one per
// peer: the best-ranked transport both ends offer that can reach the peer
// (a same-host-only one only when both run on this host: same boot id and
// network namespace). Nothing here names a transport.
//
// Built once at join, then read-only: every method is thread-safe.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/config.h"
#include "transport/transport.h"

namespace lt::proto {

class TransportSet {
 public:
  /// Builds every transport `config.transports` names (comma-separated);
  /// kInvalidArg, with a message naming it, for an unknown one (a name
  /// given twice counts once), or the transport's own error.
  Status build(const Config& config);

  /// Best rank first.
  std::span<const std::unique_ptr<transport::Transport>> all() const { return list_; }
  /// `t`'s position in all(); all().size() for null or a stranger.
  uint32_t index_of(const transport::Transport* t) const {
    uint32_t i = 0;
    while (i < list_.size() && list_[i].get() != t) ++i;
    return i;
  }
  bool empty() const { return list_.empty(); }
  /// This engine's addresses, published in the membership record.
  std::vector<transport::PeerAddress> addresses() const;
  /// The transport that serves `info`, and why (a string that lives as long
  /// as the set); null when they share none. With `after`, the next one
  /// after it in the list: `after` refused the peer (no room).
  transport::Transport* pick(const transport::PeerInfo& info, const char** why,
                             const transport::Transport* after = nullptr) const;
  /// Where LMR memory comes from: the best transport with native one-sided
  /// access (so peers it serves reach LMRs directly), else the first.
  transport::Transport* memory() const { return memory_; }
  /// The transport after memory() whose peers reach LMR memory natively too
  /// (rc on a node that also runs shm): every LMR is exported to it. Null
  /// when there is none.
  transport::Transport* exporter() const { return exporter_; }
  /// Which of the LMR keys of the peer `info` (Mapping::rkeys) a one-sided
  /// op over `via` uses: the position of `via` among the peer's
  /// native-memory transports (0: its memory transport, 1: its exporter),
  /// or -1 when `via` does not reach its memory natively.
  int native_slot(const transport::PeerInfo& info, const transport::Transport* via) const;

  /// Where the atomics on this node's LMR memory are done, so that every
  /// path to a word is atomic with every other (published as the
  /// "atomics" entry of the address list):
  ///  - kCpu: by CPU instructions; peers whose native atomics are a
  ///    device's (rc) send them as requests. No device, an HCA device with
  ///    verbs.atomic_mode cpu.
  ///  - kDevice: by the device (Caps::device_atomics, atomic only among its
  ///    own: IBV_ATOMIC_HCA); this node's own by local_atomic(), peers over
  ///    a CPU-atomics transport (shm) by request.
  ///  - kGlobal: either; the device's are atomic with the CPU's (GLOB).
  enum class AtomicDomain : uint8_t { kCpu, kDevice, kGlobal };
  AtomicDomain atomic_domain() const { return atomic_domain_; }
  /// The transport that does this node's own atomics in kDevice, else null.
  transport::Transport* atomics_device() const {
    return atomic_domain_ == AtomicDomain::kDevice ? atomic_device_ : nullptr;
  }
  /// Whether atomics on the LMRs of the peer `info` may go natively over
  /// `via` (native_slot >= 0 assumed): its atomic domain allows `via`'s kind.
  bool native_atomics(const transport::PeerInfo& info, const transport::Transport* via) const;
  /// The smallest max_msg among them: what any message may carry.
  uint32_t max_msg() const { return max_msg_; }
  /// This node's host id (net::host_id()), compared with peers'.
  const std::string& host_id() const { return host_id_; }
  /// `info` names a node on this machine: the same boot id, whatever the
  /// network namespace (it shares our CPUs, not necessarily our transports).
  bool same_machine(const transport::PeerInfo& info) const;

 private:
  std::vector<std::unique_ptr<transport::Transport>> list_;
  std::vector<bool> same_host_only_;  // by index in list_
  transport::Transport* memory_ = nullptr;
  transport::Transport* exporter_ = nullptr;
  transport::Transport* atomic_device_ = nullptr;
  AtomicDomain atomic_domain_ = AtomicDomain::kCpu;
  uint32_t max_msg_ = 0;
  std::string host_id_;
  // The reasons pick() gives when no same-host transport serves a peer on
  // this host (they name the transport, so they are made at build).
  std::string why_not_ours_, why_peer_lacks_, why_same_host_;
};

}  // namespace lt::proto
