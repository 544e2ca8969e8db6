// What the transports one engine builds share: TransportShare's insides,
// seen only by transport/.
#pragma once

#include <memory>

#include "transport/factory.h"

namespace lt::transport {

namespace verbs {
class VerbsContext;
}

struct TransportShare::Held {
  // The RDMA device's context and protection domain: the first of rc and ud
  // to open a device leaves it here, the other takes it (VerbsContext::take).
  std::shared_ptr<verbs::VerbsContext> verbs;
};

}  // namespace lt::transport
