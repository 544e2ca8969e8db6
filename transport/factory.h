// Construction of transports; the implementations stay private to transport/.
#pragma once

#include <memory>

#include "common/config.h"
#include "transport/transport.h"

namespace lt::transport {

/// Binds the listening socket now (config.listen); fails with kSys/kInvalidArg
/// when the address cannot be bound.
Result<std::unique_ptr<Transport>> make_tcp_transport(const TcpConfig& config);

}  // namespace lt::transport
