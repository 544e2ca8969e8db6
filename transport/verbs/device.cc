#include "transport/verbs/device.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#if LTIER_HAVE_HWLOC
#include <hwloc.h>
#include <hwloc/openfabrics-verbs.h>
#endif

namespace lt::transport::verbs {

namespace {

const char* port_state(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    default:
      return "OTHER";
  }
}

uint32_t mtu_bytes(ibv_mtu m) { return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0; }

std::string gid_text(const ibv_gid& g) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, g.raw, buf, sizeof(buf));
  return buf;
}

bool is_ipv4_mapped(const ibv_gid& g) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(g.raw, prefix, sizeof(prefix)) == 0;
}

int numa_node_of(const std::string& dev) {
  std::ifstream f("/sys/class/infiniband/" + dev + "/device/numa_node");
  int n = -1;
  if (!(f >> n)) return -1;
  return n;
}

// Which devices' CPUs include those this process may run on now: one hwloc
// topology, loaded on the first question, for every device asked about.
class Nearness {
 public:
  Nearness() = default;
  Nearness(const Nearness&) = delete;
  Nearness& operator=(const Nearness&) = delete;
#if LTIER_HAVE_HWLOC
  ~Nearness() {
    if (loaded_) hwloc_topology_destroy(topo_);
  }
  bool near(ibv_device* dev) {
    if (!loaded_ && !failed_) {
      failed_ = hwloc_topology_init(&topo_) != 0;
      if (!failed_ && hwloc_topology_load(topo_) != 0) {
        hwloc_topology_destroy(topo_);
        failed_ = true;
      }
      loaded_ = !failed_;
    }
    if (!loaded_) return false;
    hwloc_bitmap_t devset = hwloc_bitmap_alloc(), mine = hwloc_bitmap_alloc();
    bool near = hwloc_ibv_get_device_cpuset(topo_, dev, devset) == 0 &&
                hwloc_get_cpubind(topo_, mine, HWLOC_CPUBIND_THREAD) == 0 &&
                hwloc_bitmap_intersects(devset, mine);
    hwloc_bitmap_free(devset);
    hwloc_bitmap_free(mine);
    return near;
  }

 private:
  hwloc_topology_t topo_ = nullptr;
  bool loaded_ = false, failed_ = false;
#else
  bool near(ibv_device*) { return false; }
#endif
};

void read_port(ibv_context* ctx, uint32_t num, PortInfo* p) {
  ibv_port_attr pa{};
  p->num = num;
  if (ibv_query_port(ctx, static_cast<uint8_t>(num), &pa) != 0) {
    p->state = "UNKNOWN";
    return;
  }
  p->state = port_state(pa.state);
  p->link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
  p->active_mtu = mtu_bytes(pa.active_mtu);
  p->max_mtu = mtu_bytes(pa.max_mtu);
  p->lid = pa.lid;
  std::vector<ibv_gid_entry> table(pa.gid_tbl_len > 0 ? pa.gid_tbl_len : 1);
  ssize_t n = ibv_query_gid_table(ctx, table.data(), table.size(), 0);
  for (ssize_t i = 0; i < n; ++i) {
    const ibv_gid_entry& e = table[static_cast<size_t>(i)];
    if (e.port_num != num) continue;
    GidInfo g;
    g.index = e.gid_index;
    g.text = gid_text(e.gid);
    g.type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? "RoCE v2"
             : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1"
                                                  : "IB";
    g.ipv4_mapped = is_ipv4_mapped(e.gid);
    p->gids.push_back(std::move(g));
  }
}

}  // namespace

std::vector<DeviceInfo> list_devices(std::string* why, Locality locality) {
  std::vector<DeviceInfo> out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    *why = std::string("ibv_get_device_list: ") + std::strerror(errno) +
           " (is rdma-core's ibverbs-providers installed and the kernel's ib_uverbs loaded?)";
    return out;
  }
  // With one device there is nothing to choose: no topology is loaded (the
  // largest part of a transport's start under emulation).
  const bool ask_near = locality == Locality::kAlways || n > 1;
  Nearness nearness;
  for (int i = 0; i < n; ++i) {
    DeviceInfo d;
    d.name = ibv_get_device_name(list[i]);
    char guid[32];
    std::snprintf(guid, sizeof(guid), "%016llx",
                  static_cast<unsigned long long>(be64toh(ibv_get_device_guid(list[i]))));
    d.node_guid = guid;
    d.numa_node = numa_node_of(d.name);
    d.near = ask_near && nearness.near(list[i]);
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) {
      *why = "ibv_open_device(" + d.name + "): " + std::strerror(errno) +
             " (permission on /dev/infiniband/uverbs*?)";
      continue;
    }
    ibv_device_attr a{};
    if (ibv_query_device(ctx, &a) == 0) {
      d.fw_ver = a.fw_ver;
      d.max_qp = static_cast<uint32_t>(a.max_qp);
      d.max_qp_wr = static_cast<uint32_t>(a.max_qp_wr);
      d.max_sge = static_cast<uint32_t>(a.max_sge);
      d.max_cq = static_cast<uint32_t>(a.max_cq);
      d.max_cqe = static_cast<uint32_t>(a.max_cqe);
      d.max_mr = static_cast<uint32_t>(a.max_mr);
      d.max_srq = static_cast<uint32_t>(a.max_srq);
      d.max_qp_rd_atom = static_cast<uint32_t>(a.max_qp_rd_atom);
      d.max_mr_size = a.max_mr_size;
      d.atomics = a.atomic_cap != IBV_ATOMIC_NONE;
      d.atomics_global = a.atomic_cap == IBV_ATOMIC_GLOB;
      for (uint32_t p = 1; p <= a.phys_port_cnt; ++p) {
        d.ports.emplace_back();
        read_port(ctx, p, &d.ports.back());
      }
    }
    ibv_close_device(ctx);
    out.push_back(std::move(d));
  }
  ibv_free_device_list(list);
  if (out.empty() && why->empty()) {
    *why =
        "no RDMA device (ibv_get_device_list found none; Soft-RoCE: rdma link add rxe0 type "
        "rxe netdev IFACE)";
  }
  return out;
}

namespace {

const PortInfo* active_port(const DeviceInfo& d, uint32_t want) {
  for (const PortInfo& p : d.ports) {
    if ((want == 0 || p.num == want) && p.state == "ACTIVE") return &p;
  }
  return nullptr;
}

// RoCE v2 over IPv4 first (routable, what rdma_cm picks for an IPv4
// address), then any RoCE v2, then whatever an InfiniBand port has at 0.
const GidInfo* best_gid(const PortInfo& p) {
  for (const GidInfo& g : p.gids) {
    if (g.type == "RoCE v2" && g.ipv4_mapped) return &g;
  }
  for (const GidInfo& g : p.gids) {
    if (g.type == "RoCE v2") return &g;
  }
  if (p.link_layer == "InfiniBand" && !p.gids.empty()) return &p.gids.front();
  return nullptr;
}

std::string port_summary(const DeviceInfo& d, const PortInfo& p) {
  std::string s = d.name + " port " + std::to_string(p.num) + " (" + p.state + ", " + p.link_layer +
                  ", MTU " + std::to_string(p.active_mtu) + ", GIDs:";
  if (p.gids.empty()) s += " none";
  for (const GidInfo& g : p.gids) {
    s += " " + std::to_string(g.index) + "=" + g.text + " " + g.type;
  }
  return s + ")";
}

}  // namespace

Result<Choice> choose(const std::vector<DeviceInfo>& devices, const VerbsConfig& config,
                      std::string* why) {
  const DeviceInfo* dev = nullptr;
  if (!config.device.empty()) {
    for (const DeviceInfo& d : devices) {
      if (d.name == config.device) dev = &d;
    }
    if (dev == nullptr) {
      *why = "verbs.device (LTIER_VERBS_DEVICE) names '" + config.device + "', which is not here";
      for (size_t i = 0; i < devices.size(); ++i) {
        *why += (i == 0 ? "; devices here: " : ", ") + devices[i].name;
      }
      return Code::kInvalidArg;
    }
  } else {
    for (const DeviceInfo& d : devices) {
      if (active_port(d, config.port) != nullptr && (dev == nullptr || (d.near && !dev->near))) {
        dev = &d;
      }
    }
    if (dev == nullptr) {
      *why = devices.empty()    ? std::string("no RDMA device")
             : config.port != 0 ? "no device has an ACTIVE port " + std::to_string(config.port) +
                                      " (verbs.port, LTIER_VERBS_PORT)"
                                : std::string("no device has an ACTIVE port");
      for (const DeviceInfo& d : devices) {
        for (const PortInfo& p : d.ports) *why += "; " + port_summary(d, p);
      }
      return Code::kNotFound;
    }
  }
  const PortInfo* port = active_port(*dev, config.port);
  if (port == nullptr) {
    *why = dev->name + " has no ACTIVE port" +
           (config.port != 0 ? " " + std::to_string(config.port) + " (verbs.port)" : "");
    for (const PortInfo& p : dev->ports) *why += "; " + port_summary(*dev, p);
    return Code::kNotFound;
  }
  const GidInfo* gid = nullptr;
  if (config.gid_index != "auto") {
    const std::string& want = config.gid_index;
    bool number = !want.empty() && want.size() < 6 &&
                  want.find_first_not_of("0123456789") == std::string::npos;
    for (const GidInfo& g : port->gids) {
      if (number && g.index == std::stoul(want)) gid = &g;
    }
    if (gid == nullptr) {
      *why = "verbs.gid_index (LTIER_VERBS_GID_INDEX) '" + want +
             "' is not 'auto' or a valid GID index on " + port_summary(*dev, *port);
      return Code::kInvalidArg;
    }
  } else {
    gid = best_gid(*port);
    if (gid == nullptr) {
      *why = "no RoCE v2 GID on " + port_summary(*dev, *port) +
             ": give the netdev an IP address, or pick one with verbs.gid_index";
      return Code::kNotFound;
    }
  }
  return Choice{dev->name, port->num, *gid, port->active_mtu, dev->numa_node};
}

}  // namespace lt::transport::verbs
