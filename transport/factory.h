// Construction of transports; the implementations stay private to transport/.
#pragma once

#include <memory>

#include "common/config.h"
#include "transport/transport.h"

namespace lt::transport {

/// Binds the listening socket now (config.listen); fails with kSys/kInvalidArg
/// when the address cannot be bound.
Result<std::unique_ptr<Transport>> make_tcp_transport(const TcpConfig& config);

/// Same-host transport over memfd rings (transport/shm/shm_transport.h).
/// Binds its abstract unix socket now; kInvalidArg for a bad shm.ring_bytes
/// (a power of two in [4 KiB, 1 GiB]) or shm.max_msg_bytes 0, kSys when the
/// socket, epoll set or memfd cannot be made.
Result<std::unique_ptr<Transport>> make_shm_transport(const ShmConfig& config);

}  // namespace lt::transport
