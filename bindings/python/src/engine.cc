// ltier.join and the Engine's membership, locks, barriers, stats and QoS.
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core.h"

namespace ltpy {

namespace {

std::string opt_str(const py::object& o) {
  return o.is_none() ? std::string() : o.cast<std::string>();
}

// What the bindings need from the configuration LT_join reads: the largest
// message any transport accepts (what a receive of unknown size must be ready
// for) and the default op timeout (what a wait with no timeout is bounded by).
struct Limits {
  size_t max_msg = 0;
  uint64_t op_timeout_ms = 0;
};

Limits limits(const std::string& config) {
  Limits l;
  auto fn = [](void* ctx, const char* key, const char*, const char* value, const char*) {
    auto* out = static_cast<Limits*>(ctx);
    std::string k(key);
    const std::string suffix = ".max_msg_bytes";
    if (k.size() > suffix.size() && k.compare(k.size() - suffix.size(), suffix.size(), suffix) == 0)
      out->max_msg = std::max<size_t>(out->max_msg, std::strtoull(value, nullptr, 10));
    if (k == "engine.op_timeout_ms") out->op_timeout_ms = std::strtoull(value, nullptr, 10);
  };
  if (LT_config_keys(config.empty() ? nullptr : config.c_str(), fn, &l) != 0) l = Limits{};
  if (l.max_msg == 0) l.max_msg = 64u << 20;
  if (l.op_timeout_ms == 0) l.op_timeout_ms = 10'000;
  return l;
}

EnginePtr join(const py::object& manager, const py::object& secret, const py::object& tenant,
               const py::object& config, const py::object& listen) {
  std::string m = opt_str(manager), s = opt_str(secret), t = opt_str(tenant), c = opt_str(config),
              l = opt_str(listen);
  auto opt = [](const std::string& v) { return v.empty() ? nullptr : v.c_str(); };
  lt_join_opts_t o{};
  o.config_path = opt(c);
  o.manager = opt(m);
  o.secret = opt(s);
  o.tenant = opt(t);
  o.listen = opt(l);
  lt_engine_t* e = nullptr;
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = LT_join(&o, &e);
  }
  check(rc, "join");
  auto st = std::make_shared<EngineState>(e);
  const Limits lim = limits(c);
  st->set_limits(lim.max_msg, static_cast<int64_t>(lim.op_timeout_ms) * 1000);
  track(st);
  return st;
}

// LT_member_event in slices, as wait_interruptible waits: leave() on another
// thread (CLOSED) and signals end the wait. Events queue, so a slice that
// ends empty loses nothing.
int member_event(EngineState& s, int64_t us, lt_member_event_t* ev) {
  EngineState::Use use(s);
  for (int64_t left = us;;) {
    const int64_t slice = std::min(left, kWaitSliceUs);
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = LT_member_event(use.e(), slice, ev);
    }
    left -= slice;
    if (rc != -LT_ERR_TIMEDOUT || left <= 0) return rc;
    if (s.closed()) return -LT_ERR_CLOSED;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

struct Event {
  std::string kind;
  lt_node_t node;
  uint32_t missed;
};

// `with engine.lock(name):` takes the lock at the call and drops it on exit.
struct LockGuard {
  EnginePtr eng;
  std::string name;
  bool held = true;
  void release() {
    if (!held) return;
    held = false;
    call(*eng, "unlock", [&](lt_engine_t* e) { return LT_unlock(e, name.c_str()); });
  }
};

py::dict node_info(EngineState& s, lt_node_t node) {
  lt_node_info_t info{};
  call(s, "node_info", [&](lt_engine_t* e) { return LT_node_info(e, node, &info); });
  py::dict d;
  d["id"] = info.id;
  d["rank"] = info.rank == LT_NO_RANK ? py::object(py::none()) : py::object(py::int_(info.rank));
  d["name"] = std::string(info.name);
  return d;
}

py::dict stats(EngineState& s) {
  lt_stats_t st{};
  call(s, "stats", [&](lt_engine_t* e) { return LT_stats(e, &st); });
  py::dict d;
  d["served"] = st.served;
  d["malformed"] = st.malformed;
  d["late_replies"] = st.late_replies;
  d["ring_calls"] = st.ring_calls;
  d["ring_replies"] = st.ring_replies;
  d["split_recvs"] = st.split_recvs;
  py::list ts;
  for (uint32_t i = 0; i < st.num_transports && i < LT_MAX_TRANSPORTS; ++i) {
    const auto& t = st.transports[i];
    py::dict td;
    td["name"] = std::string(t.name);
    td["connections"] = t.connections;
    td["queue_pairs"] = t.queue_pairs;
    td["spare_queue_pairs"] = t.spare_queue_pairs;
    td["retransmits"] = t.retransmits;
    td["window_cuts"] = t.window_cuts;
    td["qp_resets"] = t.qp_resets;
    td["registrations"] = t.registrations;
    ts.append(td);
  }
  d["transports"] = ts;
  return d;
}

py::list peer_stats(EngineState& s) {
  std::vector<lt_peer_stats_t> ps(64);
  size_t n = 0;
  for (;;) {
    call(s, "peer_stats",
         [&](lt_engine_t* e) { return LT_peer_stats(e, ps.data(), ps.size(), &n); });
    if (n <= ps.size()) break;
    ps.resize(n);  // more peers than room: again, with room for them
  }
  py::list out;
  for (size_t i = 0; i < n; ++i) {
    py::dict d;
    d["node"] = ps[i].node;
    d["transport"] = std::string(ps[i].transport);
    d["tx_ops"] = ps[i].tx_ops;
    d["tx_bytes"] = ps[i].tx_bytes;
    d["rx_ops"] = ps[i].rx_ops;
    d["rx_bytes"] = ps[i].rx_bytes;
    out.append(d);
  }
  return out;
}

py::list class_stats(EngineState& s) {
  lt_class_stats_t cs[32];
  size_t n = 0;
  call(s, "class_stats", [&](lt_engine_t* e) { return LT_class_stats(e, cs, 32, &n); });
  py::list out;
  for (size_t i = 0; i < n && i < 32; ++i) {
    py::dict d;
    d["name"] = std::string(cs[i].name);
    d["priority"] = cs[i].priority;
    d["ops"] = cs[i].ops;
    d["bytes"] = cs[i].bytes;
    d["in_flight"] = cs[i].in_flight;
    d["waiting"] = cs[i].waiting;
    d["delayed"] = cs[i].delayed;
    d["throttles"] = cs[i].throttles;
    d["rtt_p50_ns"] = cs[i].rtt_p50_ns;
    d["rtt_p99_ns"] = cs[i].rtt_p99_ns;
    d["target_rtt_ns"] = cs[i].target_rtt_ns;
    d["rate"] =
        cs[i].rate == UINT64_MAX ? py::object(py::none()) : py::object(py::int_(cs[i].rate));
    d["throttled_peers"] = cs[i].throttled_peers;
    out.append(d);
  }
  return out;
}

}  // namespace

// Long by nature: one .def per Python method with its docstring, a table read
// top to bottom; the work is in the functions above.
void bind_engine(py::module_& m, EngineClass& cls) {
  m.def("join", &join, py::kw_only(), py::arg("manager") = py::none(),
        py::arg("secret") = py::none(), py::arg("tenant") = py::none(),
        py::arg("config") = py::none(), py::arg("listen") = py::none(),
        R"(Joins the cluster and returns an Engine (use it as a context manager).

Arguments left None come from the config file (`config`, else $LTIER_CONFIG)
and the LTIER_* environment, as for LT_join: manager is "host:port" of
ltier-manager, secret the cluster secret, tenant the QoS tenant, listen the
address this node's tcp transport binds.)");
  m.def("_leave_all", &leave_all);

  py::class_<Event>(m, "Event",
                    "A membership event: kind is 'up', 'down', 'expelled', "
                    "'manager_lost' or 'rejoined'.")
      .def_readonly("kind", &Event::kind)
      .def_readonly("node", &Event::node)
      .def_readonly("missed", &Event::missed)
      .def("__repr__", [](const Event& e) {
        return "Event(" + e.kind + ", node=" + std::to_string(e.node) + ")";
      });

  py::class_<LockGuard>(m, "LockGuard", "A held named lock; leaving the `with` block drops it.")
      .def("release", &LockGuard::release)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](LockGuard& g, py::args) { g.release(); });

  cls.def_property_readonly("node_id", &EngineState::node_id, "This node's id (never 0).")
      .def_property_readonly(
          "address",
          [](EngineState& s) {
            char buf[300];
            call(s, "address",
                 [&](lt_engine_t* e) { return LT_local_address(e, buf, sizeof buf); });
            return std::string(buf);
          },
          "host:port this node's tcp transport listens on.")
      .def_property_readonly("closed", &EngineState::closed)
      .def("leave", &EngineState::leave,
           "Leaves the cluster: waits for calls in progress on other threads, stops the handler "
           "threads; requests still in flight fail with ClosedError. Idempotent.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](EngineState& s, py::args) { s.leave(); })
      .def(
          "nodes",
          [](EngineState& s) {
            std::vector<lt_node_t> ids(64);
            size_t n = 0;
            for (;;) {
              call(s, "nodes",
                   [&](lt_engine_t* e) { return LT_nodes(e, ids.data(), ids.size(), &n); });
              if (n <= ids.size()) break;
              ids.resize(n);
            }
            ids.resize(n);
            return ids;
          },
          "Live node ids, this one included, ascending.")
      .def("node_info", &node_info, py::arg("node"),
           "{'id', 'rank' (or None), 'name'} of a live node.")
      .def(
          "node_by_name",
          [](EngineState& s, const std::string& name, const py::object& timeout) {
            int64_t us = timeout_us(timeout);
            lt_node_t n = 0;
            call(s, "node_by_name",
                 [&](lt_engine_t* e) { return LT_node_by_name(e, name.c_str(), us, &n); });
            return n;
          },
          py::arg("name"), py::arg("timeout") = 0.0,
          "The node called `name`, waiting up to `timeout` s for it to join (NotFoundError).")
      .def(
          "node_by_rank",
          [](EngineState& s, uint32_t rank, const py::object& timeout) {
            int64_t us = timeout_us(timeout);
            lt_node_t n = 0;
            call(s, "node_by_rank",
                 [&](lt_engine_t* e) { return LT_node_by_rank(e, rank, us, &n); });
            return n;
          },
          py::arg("rank"), py::arg("timeout") = 0.0,
          "The node that joined with `rank` (ltier-run).")
      .def(
          "member_event",
          [](EngineState& s, const py::object& timeout) {
            int64_t us = timeout_us(timeout);
            lt_member_event_t ev{};
            check(member_event(s, us < 0 ? s.op_timeout_us() : us, &ev), "member_event");
            return Event{LT_event_name(ev.kind), ev.node, ev.missed};
          },
          py::arg("timeout") = py::none(),
          "The next membership event, waiting up to `timeout` s (TimedOutError when none).")
      .def(
          "peer_transport",
          [](EngineState& s, lt_node_t node) {
            char name[16], why[256];
            call(s, "peer_transport", [&](lt_engine_t* e) {
              return LT_peer_transport(e, node, name, sizeof name, why, sizeof why);
            });
            return py::make_tuple(std::string(name), std::string(why));
          },
          py::arg("node"), "(transport, why): 'shm', 'rc', 'tcp' or 'self', and the reason.")
      .def("stats", &stats, "This node's counters and what each transport holds now.")
      .def("peer_stats", &peer_stats,
           "Traffic with each live peer, per transport: dicts of node, transport, tx_ops, "
           "tx_bytes, rx_ops, rx_bytes.")
      .def(
          "lock",
          [](const EnginePtr& s, const std::string& name, const py::object& timeout) {
            int64_t us = timeout_us(timeout);
            call(*s, "lock", [&](lt_engine_t* e) { return LT_lock(e, name.c_str(), us); });
            return LockGuard{s, name};
          },
          py::arg("name"), py::arg("timeout") = py::none(),
          "Takes the cluster-wide lock `name` for this thread (FIFO-fair) and returns a guard: "
          "`with engine.lock('x'): ...`.")
      .def(
          "unlock",
          [](EngineState& s, const std::string& name) {
            call(s, "unlock", [&](lt_engine_t* e) { return LT_unlock(e, name.c_str()); });
          },
          py::arg("name"))
      .def(
          "barrier",
          [](EngineState& s, const std::string& name, uint32_t count, const py::object& timeout) {
            int64_t us = timeout_us(timeout);
            call(s, "barrier",
                 [&](lt_engine_t* e) { return LT_barrier(e, name.c_str(), count, us); });
          },
          py::arg("name"), py::arg("count"), py::arg("timeout") = py::none(),
          "Returns once `count` callers (any nodes, any threads) reached barrier `name`.")
      .def(
          "set_class",
          [](EngineState& s, const py::object& name) {
            std::string n = opt_str(name);
            call(s, "set_class", [&](lt_engine_t* e) { return LT_set_class(e, n.c_str()); });
          },
          py::arg("name"),
          "This thread's calls go to QoS class `name` (None: the process's class).")
      .def("class_stats", &class_stats, "Per-class QoS counters, highest priority first.")
      .def_property_readonly(
          "metrics_address",
          [](EngineState& s) -> py::object {
            char buf[300];
            int rc;
            {
              EngineState::Use use(s);
              py::gil_scoped_release nogil;
              rc = LT_metrics_address(use.e(), buf, sizeof buf);
            }
            if (rc == -LT_ERR_UNSUPPORTED) return py::none();
            check(rc, "metrics_address");
            return py::str(buf);
          },
          "host:port of the Prometheus endpoint (metrics.listen), or None.")
      .def("__repr__", [](EngineState& s) {
        return "<ltier.Engine node " + std::to_string(s.node_id()) +
               (s.closed() ? " (left)>" : ">");
      });
}

}  // namespace ltpy
