// An outside C++ program built against an installed ltier (install_test.sh):
// the C++ layer (ltier.hpp, manager.h) on paths that need no cluster.
// argv[1] names a file that is not YAML.
#include <ltier/manager.h>

#include <cstdio>
#include <cstring>
#include <ltier/ltier.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s NOT_YAML_FILE\n", argv[0]);
    return 2;
  }
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "%s: check failed: %s\n", argv[0], what);
      ++failures;
    }
  };

  ltier::Status down(-LT_ERR_PEER_DOWN);
  check(!down && std::strcmp(down.name(), "LT_ERR_PEER_DOWN") == 0, "Status names its code");

  ltier::JoinOptions o;
  o.config_path = argv[1];
  o.manager = "127.0.0.1:1";
  auto joined = ltier::Engine::join(o);
  check(!joined && joined.status() == -LT_ERR_INVAL, "join with a broken config is LT_ERR_INVAL");
  check(std::strcmp(joined.status().name(), "LT_ERR_INVAL") == 0, "its name");

  {
    ltier::ManagerOptions mo;  // constructed, never started: binds nothing
    mo.listen = "127.0.0.1:0";
    ltier::Manager m(mo);
  }

  if (failures != 0) return 1;
  std::printf("%s: ok\n", argv[0]);
  return 0;
}
