/* An outside C program built against an installed ltier (install_test.sh):
 * the C API's paths that need no cluster. argv[1] names a file that is not
 * YAML, which LT_join and LT_config_keys must refuse before any network. */
#include <ltier/lt.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

static void count_key(void* ctx, const char* key, const char* env, const char* value,
                      const char* help) {
  (void)env;
  (void)value;
  (void)help;
  if (key != NULL) ++*(int*)ctx;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s NOT_YAML_FILE\n", argv[0]);
    return 2;
  }
  CHECK(strcmp(LT_errname(-LT_ERR_PEER_DOWN), "LT_ERR_PEER_DOWN") == 0);
  CHECK(strcmp(LT_strerror(LT_ERR_PEER_DOWN), LT_strerror(-LT_ERR_PEER_DOWN)) == 0);
  CHECK(LT_join(NULL, NULL) == -LT_ERR_INVAL);

  int keys = 0;
  CHECK(LT_config_keys(NULL, count_key, &keys) == 0);
  CHECK(keys > 0);

  lt_join_opts_t o;
  memset(&o, 0, sizeof o);
  o.config_path = argv[1];
  o.manager = "127.0.0.1:1";
  lt_engine_t* e = NULL;
  CHECK(LT_join(&o, &e) == -LT_ERR_INVAL);
  CHECK(e == NULL);
  CHECK(LT_config_keys(argv[1], count_key, &keys) == -LT_ERR_INVAL);

  if (failures != 0) return 1;
  printf("%s: ok (%d configuration keys)\n", argv[0], keys);
  return 0;
}
