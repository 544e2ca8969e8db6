// The LT_* calls that read the configuration without joining: the keys
// (LT_config_keys) and the RDMA devices with the one it picks (LT_devices).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "api/internal.h"
#include "common/log.h"
#include "ltier/lt.h"
#if LTIER_HAVE_VERBS
#include "transport/verbs/device.h"
#endif

namespace lt::api {

Status load_user_config(const char* explicit_path, Config* c) {
  std::string path, error;
  if (explicit_path != nullptr) {
    path = explicit_path;
  } else if (const char* p = std::getenv("LTIER_CONFIG")) {
    path = p;
  }
  lt::Status s = lt::load_config(path, c, &error);
  if (!s.is_ok()) LT_ERROR("config: %s", error.c_str());
  return s;
}

}  // namespace lt::api

using lt::api::load_user_config;
using lt::api::rc;

extern "C" {

int LT_config_keys(const char* config_path, lt_config_key_fn fn, void* ctx) {
  if (fn == nullptr) return -LT_ERR_INVAL;
  lt::Config c;
  lt::Status s = load_user_config(config_path, &c);
  if (!s.is_ok()) return rc(s);
  for (const auto& k : lt::config_keys(c)) {
    fn(ctx, k.path, k.env, lt::config_value(k).c_str(), k.help);
  }
  return 0;
}

int LT_devices(const char* config_path, lt_device_port_t* out, uint32_t cap, uint32_t* count,
               char* why, size_t why_cap) {
  if (count == nullptr || (out == nullptr && cap != 0)) return -LT_ERR_INVAL;
  *count = 0;
  if (why != nullptr && why_cap != 0) why[0] = 0;
#if LTIER_HAVE_VERBS
  namespace v = lt::transport::verbs;
  lt::Config c;
  lt::Status s = load_user_config(config_path, &c);
  if (!s.is_ok()) return rc(s);
  std::string reason;
  std::vector<v::DeviceInfo> devs = v::list_devices(&reason, v::Locality::kAlways);
  lt::Result<v::Choice> pick = v::choose(devs, c.verbs, &reason);
  if (!pick.is_ok() && why != nullptr && why_cap != 0) {
    std::snprintf(why, why_cap, "%s", reason.c_str());
  }
  auto copy = [](char* dst, size_t cap, const std::string& src) {
    std::snprintf(dst, cap, "%s", src.c_str());
  };
  for (const v::DeviceInfo& d : devs) {
    for (const v::PortInfo& p : d.ports) {
      if (*count < cap) {
        lt_device_port_t& o = out[*count];
        o = lt_device_port_t{};
        copy(o.device, sizeof(o.device), d.name);
        o.port = p.num;
        copy(o.state, sizeof(o.state), p.state);
        copy(o.link_layer, sizeof(o.link_layer), p.link_layer);
        o.active_mtu = p.active_mtu;
        o.numa_node = d.numa_node;
        o.near = d.near;
        o.atomics = d.atomics ? (d.atomics_global ? 2 : 1) : 0;
        o.max_qp = d.max_qp;
        o.max_qp_wr = d.max_qp_wr;
        o.max_sge = d.max_sge;
        o.max_cqe = d.max_cqe;
        o.max_mr = d.max_mr;
        o.max_srq = d.max_srq;
        o.max_qp_rd_atom = d.max_qp_rd_atom;
        o.max_mr_size = d.max_mr_size;
        for (const v::GidInfo& g : p.gids) {
          if (o.num_gids == LT_MAX_GIDS) break;
          auto& og = o.gids[o.num_gids++];
          og.index = g.index;
          copy(og.gid, sizeof(og.gid), g.text);
          copy(og.type, sizeof(og.type), g.type);
        }
        if (pick.is_ok() && pick->device == d.name && pick->port == p.num) {
          o.chosen = 1;
          o.chosen_gid = pick->gid.index;
        }
      }
      ++*count;
    }
  }
  return 0;
#else
  (void)config_path;
  if (why != nullptr && why_cap != 0) {
    std::snprintf(why, why_cap, "this ltier was built without libibverbs (libibverbs-dev)");
  }
  return -LT_ERR_UNSUPPORTED;
#endif
}

}  // extern "C"
