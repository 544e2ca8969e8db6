#include "transport/factory.h"
#include "transport/verbs/ud_transport.h"
#include "transport/verbs/verbs_transport.h"

namespace lt::transport {

Result<std::unique_ptr<Transport>> make_rc_transport(const Config& config, TransportShare* share) {
  auto t = std::make_unique<verbs::VerbsTransport>(config);
  LT_RETURN_IF_ERROR(t->init(share));
  return std::unique_ptr<Transport>(std::move(t));
}

Result<std::unique_ptr<Transport>> make_ud_transport(const Config& config, TransportShare* share) {
  auto t = std::make_unique<verbs::UdTransport>(config);
  LT_RETURN_IF_ERROR(t->init(share));
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace lt::transport
