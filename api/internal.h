// What the api/ files share: the configuration as the LT_* calls load it,
// and Status as their negative return codes.
#pragma once

#include "common/config.h"
#include "common/status.h"

namespace lt::api {

/// Defaults, then the file (explicit_path, else $LTIER_CONFIG), then the
/// LTIER_* variables; the reason is logged when it fails.
Status load_user_config(const char* explicit_path, Config* c);

inline int rc(Status s) { return -static_cast<int>(s.code()); }

}  // namespace lt::api
