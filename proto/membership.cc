// The membership services, by cluster.backend.
#include "proto/membership.h"

#include <unistd.h>

#include "common/log.h"
#include "proto/manager_membership.h"
#if LTIER_HAVE_PMIX
#include "proto/pmix_membership.h"
#endif
#if LTIER_HAVE_ETCD
#include "proto/etcd/etcd_membership.h"
#endif

namespace lt::proto {

std::unique_ptr<Membership> make_membership(const ClusterConfig& cluster) {
  if (cluster.backend == "manager") return std::make_unique<ManagerMembership>();
  if (cluster.backend == "pmix") {
#if LTIER_HAVE_PMIX
    return std::make_unique<PmixMembership>();
#else
    LT_ERROR(
        "cluster.backend pmix: this ltier was built without PMIx (install libpmix-dev "
        "and build again)");
    return nullptr;
#endif
  }
  if (cluster.backend == "etcd") {
#if LTIER_HAVE_ETCD
    return std::make_unique<EtcdMembership>();
#else
    LT_ERROR(
        "cluster.backend etcd: this ltier was built without etcd support (install "
        "libcurl4-openssl-dev and nlohmann-json3-dev and build again)");
    return nullptr;
#endif
  }
  LT_ERROR("cluster.backend '%s' is not a backend: manager, pmix or etcd", cluster.backend.c_str());
  return nullptr;
}

std::optional<transport::PeerInfo> peer_in(const std::map<NodeId, Member>& book, NodeId n) {
  auto it = book.find(n);
  if (it == book.end()) return std::nullopt;
  return transport::PeerInfo{n, it->second.host_id,
                             transport::parse_addresses(it->second.addresses)};
}

std::vector<Member> members_in(const std::map<NodeId, Member>& book) {
  std::vector<Member> v;
  v.reserve(book.size());
  for (auto& [id, m] : book) v.push_back(m);
  return v;
}

std::string default_node_name(const std::string& configured) {
  if (!configured.empty()) return configured;
  char h[256] = {};
  gethostname(h, sizeof(h) - 1);
  return std::string(h) + "." + std::to_string(getpid());
}

}  // namespace lt::proto
