// The rc and ud transports in a build without libibverbs-dev.
#include "common/log.h"
#include "transport/factory.h"

namespace lt::transport {

Result<std::unique_ptr<Transport>> make_rc_transport(const Config& config, TransportShare* share) {
  (void)config;
  (void)share;
  LT_INFO("rc: this ltier was built without libibverbs (install libibverbs-dev and rebuild)");
  return Code::kUnsupported;
}

Result<std::unique_ptr<Transport>> make_ud_transport(const Config& config, TransportShare* share) {
  (void)config;
  (void)share;
  LT_INFO("ud: this ltier was built without libibverbs (install libibverbs-dev and rebuild)");
  return Code::kUnsupported;
}

}  // namespace lt::transport
