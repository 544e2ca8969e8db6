// The README's C++ quick start, compiled so it cannot rot.
#include <cstdio>

#include "ltier/ltier.hpp"

int main() {
  auto joined = ltier::Engine::join();  // manager + secret from $LTIER_MANAGER, $LTIER_SECRET
  if (!joined) {
    fprintf(stderr, "join: %s\n", joined.status().message());
    return 1;
  }
  ltier::Engine& lt = **joined;
  lt_node_t other = 0;
  for (lt_node_t n : lt.nodes()) other = n != lt.id() ? n : other;

  auto lmr = lt.malloc(other, 4096, ltier::kRW);  // 4 KiB on another node
  ltier::Status s = lmr ? lt.memset(*lmr, 0, 0x5a, 4096) : lmr.status();
  char back[16] = {};
  if (s) s = lt.read(*lmr, 0, back, sizeof back);  // read it back
  if (!s) fprintf(stderr, "ltier: %s (%s)\n", s.message(), s.name());
  printf("node %u: byte 0 on node %u is 0x%02x\n", lt.id(), other, back[0] & 0xff);
  if (lmr) (void)lt.free(*lmr);
  return s ? 0 : 1;
}
