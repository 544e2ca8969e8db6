// ltier-info: what this build of ltier offers and how it is configured.
//
//   ltier-info                 transports and build facts
//   ltier-info --config [FILE] every configuration key: YAML path, environment
//                              variable, effective value, help
#include <cstdio>
#include <cstring>
#include <string>

#include "ltier/lt.h"

namespace {
void print_key(void*, const char* key, const char* env, const char* value, const char* help) {
  if (std::strcmp(key, "cluster.secret") == 0) value = "(hidden)";
  printf("%-26s %-30s %-18s %s\n", key, env, value[0] ? value : "\"\"", help);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--config") == 0) {
    printf("%-26s %-30s %-18s %s\n", "key", "environment", "value", "meaning");
    int rc = LT_config_keys(argc >= 3 ? argv[2] : nullptr, print_key, nullptr);
    if (rc != 0) {
      fprintf(stderr, "ltier-info: %s\n", LT_strerror(rc));
      return 1;
    }
    return 0;
  }
  if (argc >= 2) {
    fprintf(stderr, "usage: ltier-info [--config [FILE]]\n");
    return 2;
  }
  printf("ltier transports:\n");
  printf("  tcp    available  (epoll, framed, one connection per peer)\n");
  printf("  shm    planned    (same-host peers)\n");
  printf("  verbs  planned    (RC shared QP pool, UD fallback)\n");
  printf("select with LTIER_TRANSPORTS or the 'transports' key; see ltier-info --config\n");
  return 0;
}
