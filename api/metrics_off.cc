// serve_metrics in a build without prometheus-cpp: metrics.listen is refused
// with the reason, so nobody waits for a scrape that cannot come.
#include "api/metrics.h"

namespace lt::api {

Result<std::unique_ptr<MetricsServer>> serve_metrics(const proto::Engine&,
                                                     const std::string& listen,
                                                     std::string* error) {
  if (error) {
    *error = "metrics.listen '" + listen +
             "': this libltier was built without prometheus-cpp (Debian: prometheus-cpp-dev)";
  }
  return Code::kUnsupported;
}

}  // namespace lt::api
