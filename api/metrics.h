// The engine's live figures in the Prometheus text format, served over HTTP
// on metrics.listen (prometheus-cpp's pull exposer, when the library was
// built with it). Nothing is counted for it: a scrape reads what the engine,
// its scheduler and its transports already keep.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

namespace lt::proto {
class Engine;
}

namespace lt::api {

class MetricsServer {
 public:
  virtual ~MetricsServer() = default;
  /// "HOST:PORT" it listens on (the port the system chose for :0).
  virtual std::string address() const = 0;
};

/// Serves `e`'s metrics on `listen` ("HOST:PORT"); kInvalidArg with
/// `*error` when it cannot (a bad address, a port taken, or no
/// prometheus-cpp in this build). `e` must outlive the server.
Result<std::unique_ptr<MetricsServer>> serve_metrics(const proto::Engine& e,
                                                     const std::string& listen, std::string* error);

}  // namespace lt::api
