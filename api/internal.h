// What the api/ files share: the engine behind an lt_engine_t, the
// configuration as the LT_* calls load it, and Status as their negative
// return codes.
#pragma once

#include "api/metrics.h"
#include "common/config.h"
#include "common/siphash.h"
#include "common/status.h"
#include "proto/engine.h"

struct lt_engine {
  explicit lt_engine(const lt::Config& c) : core(c) {}
  lt::proto::Engine core;
  std::unique_ptr<lt::api::MetricsServer> metrics;  // metrics.listen; stopped before leave
  // Request ids leave the library XORed with this: an id of another engine
  // (or a made-up one) names no request here, with overwhelming
  // probability, instead of this engine's request in the same slot. Bit 31
  // is set, and no slot index reaches it, so no request maps to LT_REQ_DONE.
  const uint64_t req_salt = lt::random_u64() | (uint64_t{1} << 31);
};

namespace lt::api {

/// Defaults, then the file (explicit_path, else $LTIER_CONFIG), then the
/// LTIER_* variables; the reason is logged when it fails.
Status load_user_config(const char* explicit_path, Config* c);

inline int rc(Status s) { return -static_cast<int>(s.code()); }

}  // namespace lt::api
