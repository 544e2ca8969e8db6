// Reading the `qos.classes` and `qos.tenants` lists of a YAML config file
// (config.cc's walk hands them here). Private to common/.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "common/qos_config.h"

namespace lt {

/// Whether `path` is one of the lists read here ("qos.classes", "qos.tenants").
bool is_qos_list(const std::string& path);
/// Reads the list at `path` into `p` (replacing what it held): kInvalidArg
/// with `*error` naming the key and its line on anything unexpected.
Status parse_qos_list(const YAML::Node& node, const std::string& path, QosPolicy* p,
                      std::string* error);

}  // namespace lt
