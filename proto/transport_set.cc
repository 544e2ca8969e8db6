#include "proto/transport_set.h"

#include <algorithm>

#include "common/log.h"
#include "common/net.h"
#include "transport/factory.h"

namespace lt::proto {

using transport::TransportEntry;

namespace {
// The address-list entry that publishes a node's atomic domain (absent: kCpu).
constexpr const char* kAtomicsEntry = "atomics";
}  // namespace

Status TransportSet::build(const Config& config) {
  const std::string& names = config.transports;
  const std::string& atomic_mode = config.verbs.atomic_mode;
  if (atomic_mode != "auto" && atomic_mode != "cpu") {
    LT_ERROR("verbs.atomic_mode (LTIER_VERBS_ATOMIC_MODE) '%s': auto or cpu", atomic_mode.c_str());
    return Code::kInvalidArg;
  }
  std::vector<const TransportEntry*> want;
  for (size_t i = 0; i <= names.size();) {
    size_t j = names.find(',', i);
    if (j == std::string::npos) j = names.size();
    std::string name = names.substr(i, j - i);
    const TransportEntry* e = transport::find_transport(name);
    if (e == nullptr) {
      std::string known;
      for (const TransportEntry& k : transport::transport_entries()) {
        known += known.empty() ? k.name : std::string(", ") + k.name;
      }
      LT_ERROR("transports '%s': unknown transport '%s' (known: %s)", names.c_str(), name.c_str(),
               known.c_str());
      return Code::kInvalidArg;
    }
    if (std::find(want.begin(), want.end(), e) == want.end()) want.push_back(e);
    i = j + 1;
  }
  std::sort(want.begin(), want.end(),
            [](const TransportEntry* a, const TransportEntry* b) { return a->rank < b->rank; });
  transport::TransportShare share;  // rc and ud open the device once between them
  for (const TransportEntry* e : want) {
    auto t = e->make(config, share);
    // A transport this node lacks the hardware (kNotFound) or the build
    // (kUnsupported) for steps aside: the default list names rc on every
    // node, and a node without an RDMA device still joins over tcp. The
    // transport's own log line says why.
    const bool absent =
        !t && (t.status().code() == Code::kNotFound || t.status().code() == Code::kUnsupported);
    if (absent) {
      LT_INFO("transports '%s': %s is not available here; going on without it", names.c_str(),
              e->name);
      continue;
    }
    if (!t) return t.status();
    list_.push_back(std::move(t.value()));
    same_host_only_.push_back(e->same_host_only);
  }
  if (list_.empty()) {
    LT_ERROR("transports '%s': none of them is available on this node (LTIER_LOG=info says why)",
             names.c_str());
    return Code::kUnsupported;
  }
  max_msg_ = UINT32_MAX;
  for (auto& t : list_) {
    max_msg_ = std::min(max_msg_, t->caps().max_msg);
    if (memory_ == nullptr && t->caps().one_sided) memory_ = t.get();
  }
  if (memory_ == nullptr && !list_.empty()) memory_ = list_.front().get();
  for (auto& t : list_) {
    const TransportEntry* e = transport::find_transport(t->name());
    if (t.get() != memory_ && t->caps().one_sided && e != nullptr && e->native_memory) {
      exporter_ = t.get();
      break;
    }
  }
  for (transport::Transport* t : {memory_, exporter_}) {
    if (t != nullptr && t->caps().atomics64 && t->caps().device_atomics) atomic_device_ = t;
  }
  if (atomic_device_ != nullptr && atomic_mode == "auto") {
    atomic_domain_ = atomic_device_->caps().device_atomics_global ? AtomicDomain::kGlobal
                                                                  : AtomicDomain::kDevice;
  }
  host_id_ = net::host_id();
  // The same-host transport a peer on this host would get, for the reasons.
  const char* local = nullptr;
  for (const TransportEntry& e : transport::transport_entries()) {
    if (e.same_host_only) {
      local = e.name;
      break;
    }
  }
  local = local != nullptr ? local : "a same-host transport";
  why_same_host_ = "same host (boot id and network namespace match)";
  why_not_ours_ = std::string("same host, but ") + local + " is not in this node's transports";
  why_peer_lacks_ = std::string("same host, but the peer offers no ") + local;
  return Status::ok();
}

std::vector<transport::PeerAddress> TransportSet::addresses() const {
  std::vector<transport::PeerAddress> out;
  for (auto& t : list_) out.push_back({t->name(), t->local_address()});
  if (atomic_domain_ == AtomicDomain::kDevice) out.push_back({kAtomicsEntry, "device"});
  if (atomic_domain_ == AtomicDomain::kGlobal) out.push_back({kAtomicsEntry, "global"});
  return out;
}

bool TransportSet::native_atomics(const transport::PeerInfo& info,
                                  const transport::Transport* via) const {
  if (via == nullptr || !via->caps().atomics64) return false;
  const std::string_view domain = info.address(kAtomicsEntry);
  if (via->caps().device_atomics) return domain == "device" || domain == "global";
  return domain != "device";
}

int TransportSet::native_slot(const transport::PeerInfo& info,
                              const transport::Transport* via) const {
  if (via == nullptr || !via->caps().one_sided) return -1;
  const TransportEntry* mine = transport::find_transport(via->name());
  if (mine == nullptr || !mine->native_memory) return -1;
  // The peer's memory transport is its best-ranked native-memory one, its
  // exporter the next (as build() chooses them here).
  int slot = 0;
  for (const transport::PeerAddress& a : info.addresses) {
    const TransportEntry* e = transport::find_transport(a.transport);
    slot += e != nullptr && e != mine && e->native_memory && e->rank < mine->rank;
  }
  const bool offered = std::any_of(info.addresses.begin(), info.addresses.end(),
                                   [&](const auto& a) { return a.transport == mine->name; });
  return offered && slot < 2 ? slot : -1;
}

bool TransportSet::same_machine(const transport::PeerInfo& info) const {
  const size_t n = host_id_.find('/');
  return n != std::string::npos && n != 0 && info.host_id.size() > n && info.host_id[n] == '/' &&
         info.host_id.compare(0, n, host_id_, 0, n) == 0;
}

transport::Transport* TransportSet::pick(const transport::PeerInfo& info, const char** why,
                                         const transport::Transport* after) const {
  const bool same_host = !info.host_id.empty() && info.host_id == host_id_;
  bool have_local = false, skipping = after != nullptr;
  for (size_t i = 0; i < list_.size(); ++i) {
    transport::Transport* t = list_[i].get();
    have_local = have_local || same_host_only_[i];
    if (skipping) {
      skipping = t != after;
      continue;
    }
    if (after != nullptr && !(same_host_only_[i] && !same_host) &&
        !info.address(t->name()).empty()) {
      *why = "a better transport had no room for it (rc: verbs.rc_qp_budget)";
      return t;
    }
    if (same_host_only_[i] && !same_host) continue;
    if (info.address(t->name()).empty()) continue;
    if (same_host_only_[i]) {
      *why = why_same_host_.c_str();
    } else if (!same_host) {
      *why = "other host or network namespace";
    } else {
      *why = have_local ? why_peer_lacks_.c_str() : why_not_ours_.c_str();
    }
    return t;
  }
  *why = "no common transport";
  return nullptr;
}

}  // namespace lt::proto
