// ltier-manager: the cluster manager. Nodes join with the cluster secret and
// get a node id, the address book and membership events.
//
//   ltier-manager [--listen HOST:PORT] [--secret S] [--heartbeat-ms N]
//                 [--down-after-ms N] [--join-timeout-ms N] [--max-unjoined N]
//                 [--recover-ms N] [--max-nodes N] [--port-file F] [-v]
//
// The secret may also come from $LTIER_SECRET. Stops on SIGINT/SIGTERM.
// When restarting a manager under a live cluster, give --recover-ms (a few
// heartbeats' worth, say 3000): fresh joins then wait while the survivors
// reconnect and claim their ids back.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "ltier/lt.h"
#include "ltier/manager.h"

namespace {
std::atomic<bool> g_stop{false};  // signal handlers can reach nothing else
void on_signal(int) { g_stop.store(true); }

[[noreturn]] void usage() {
  fprintf(stderr,
          "usage: ltier-manager [--listen HOST:PORT] [--secret S] [--heartbeat-ms N]\n"
          "                     [--down-after-ms N] [--join-timeout-ms N] [--max-unjoined N]\n"
          "                     [--recover-ms N] [--max-nodes N] [--port-file FILE] [-v]\n");
  exit(2);
}
}  // namespace

int main(int argc, char** argv) {
  ltier::ManagerOptions o;
  if (const char* s = getenv("LTIER_SECRET")) o.secret = s;
  if (const char* s = getenv("LTIER_MANAGER")) o.listen = s;
  std::string port_file;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    auto num = [&]() -> uint32_t {
      std::string v = val();
      if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos) {
        fprintf(stderr, "ltier-manager: %s expects a number, got '%s'\n", a.c_str(), v.c_str());
        exit(2);
      }
      return static_cast<uint32_t>(std::stoul(v));
    };
    if (a == "--listen") {
      o.listen = val();
    } else if (a == "--secret") {
      o.secret = val();
    } else if (a == "--heartbeat-ms") {
      o.heartbeat_ms = num();
    } else if (a == "--down-after-ms") {
      o.down_after_ms = num();
    } else if (a == "--join-timeout-ms") {
      o.join_timeout_ms = num();
    } else if (a == "--max-unjoined") {
      o.max_unjoined = num();
    } else if (a == "--recover-ms") {
      o.recover_ms = num();
    } else if (a == "--max-nodes") {
      o.max_nodes = num();
      if (o.max_nodes == 0 || o.max_nodes > 1023) usage();
    } else if (a == "--port-file") {
      port_file = val();
    } else if (a == "-v" || a == "--verbose") {
      o.verbose = true;
    } else {
      usage();
    }
  }
  ltier::Manager m(o);
  int rc = m.start();
  if (rc != 0) {
    fprintf(stderr, "ltier-manager: cannot listen on %s: %s\n", o.listen.c_str(), LT_strerror(rc));
    return 1;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  if (!port_file.empty()) {
    std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << m.address() << "\n";
    std::rename(tmp.c_str(), port_file.c_str());
  }
  fprintf(stderr, "ltier-manager: listening on %s (down after %u ms)\n", m.address().c_str(),
          o.down_after_ms);
  return m.run(g_stop) == 0 ? 0 : 1;
}
