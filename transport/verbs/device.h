// RDMA devices through libibverbs: what is there (for ltier-info and
// LT_devices), and which device, port and GID a verbs transport uses.
//
// The choice: the device named by verbs.device, else the first device with
// an ACTIVE port whose CPUs (hwloc) include the CPUs this process runs on,
// else the first with an ACTIVE port. On that port, the GID named by
// verbs.gid_index, else a RoCE v2 GID mapping an IPv4 address, else any
// RoCE v2 GID, else (InfiniBand) GID 0. Every failure says which device,
// port, GID and MTU it looked at and which key changes the choice.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"

namespace lt::transport::verbs {

struct GidInfo {
  uint32_t index = 0;
  std::string text;  // fe80::..., ::ffff:192.0.2.1
  std::string type;  // "RoCE v2", "RoCE v1", "IB"
  bool ipv4_mapped = false;
};

struct PortInfo {
  uint32_t num = 0;
  std::string state;        // ACTIVE, DOWN, ...
  std::string link_layer;   // Ethernet, InfiniBand
  uint32_t active_mtu = 0;  // bytes
  uint32_t max_mtu = 0;
  uint16_t lid = 0;
  std::vector<GidInfo> gids;
};

struct DeviceInfo {
  std::string name;
  std::string node_guid;
  std::string fw_ver;
  int numa_node = -1;
  bool near = false;  // its CPUs include this process's (Locality)
  uint32_t max_qp = 0, max_qp_wr = 0, max_sge = 0, max_cq = 0, max_cqe = 0, max_mr = 0;
  uint32_t max_srq = 0, max_qp_rd_atom = 0;
  uint64_t max_mr_size = 0;
  bool atomics = false;
  bool atomics_global = false;  // atomic_cap IBV_ATOMIC_GLOB: atomic with the CPU's too
  std::vector<PortInfo> ports;
};

/// Whether list_devices says which devices are near this process: hwloc
/// loads the machine's topology for it, which takes a good part of a
/// transport's start. kWhenAChoice: only when there are several devices to
/// choose from (with one, `near` stays false).
enum class Locality { kAlways, kWhenAChoice };

/// Every device and port; empty with *why when there is none (no
/// libibverbs device, or no permission on /dev/infiniband).
std::vector<DeviceInfo> list_devices(std::string* why, Locality locality = Locality::kWhenAChoice);

struct Choice {
  std::string device;
  uint32_t port = 0;
  GidInfo gid;
  uint32_t mtu = 0;
  int numa_node = -1;  // the device's, -1 when unknown
};

/// The device, port and GID `config` leads to; kNotFound (or kInvalidArg for
/// a named device or GID that is not usable) with the reason in *why.
Result<Choice> choose(const std::vector<DeviceInfo>& devices, const VerbsConfig& config,
                      std::string* why);

}  // namespace lt::transport::verbs
