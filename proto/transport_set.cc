#include "proto/transport_set.h"

#include <algorithm>

#include "common/log.h"
#include "common/net.h"
#include "transport/factory.h"

namespace lt::proto {

using transport::TransportEntry;

Status TransportSet::build(const Config& config) {
  const std::string& names = config.transports;
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
  for (const TransportEntry* e : want) {
    auto t = e->make(config);
    if (!t) return t.status();
    list_.push_back(std::move(t.value()));
    same_host_only_.push_back(e->same_host_only);
  }
  max_msg_ = UINT32_MAX;
  for (auto& t : list_) {
    max_msg_ = std::min(max_msg_, t->caps().max_msg);
    if (memory_ == nullptr && t->caps().one_sided) memory_ = t.get();
  }
  if (memory_ == nullptr && !list_.empty()) memory_ = list_.front().get();
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
  return out;
}

bool TransportSet::native_memory(const transport::PeerInfo& info,
                                 const transport::Transport* via) const {
  if (via == nullptr || via != memory_ || !via->caps().one_sided) return false;
  const TransportEntry* best = nullptr;
  for (const transport::PeerAddress& a : info.addresses) {
    const TransportEntry* e = transport::find_transport(a.transport);
    if (e != nullptr && e->native_memory && (best == nullptr || e->rank < best->rank)) best = e;
  }
  return best != nullptr && std::string_view(best->name) == via->name();
}

transport::Transport* TransportSet::pick(const transport::PeerInfo& info, const char** why) const {
  const bool same_host = !info.host_id.empty() && info.host_id == host_id_;
  bool have_local = false;
  for (size_t i = 0; i < list_.size(); ++i) {
    transport::Transport* t = list_[i].get();
    have_local = have_local || same_host_only_[i];
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
