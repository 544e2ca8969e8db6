// The membership services, by cluster.backend.
#include "proto/membership.h"

#include "common/log.h"
#include "proto/manager_membership.h"
#if LTIER_HAVE_PMIX
#include "proto/pmix_membership.h"
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
  LT_ERROR("cluster.backend '%s' is not a backend: manager or pmix", cluster.backend.c_str());
  return nullptr;
}

}  // namespace lt::proto
