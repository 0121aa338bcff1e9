/* A program with functions named as libbraid's internal ones: it links
 * against the static library (tests/install/install_test.sh). */
#include <braid.h>
#include <stdio.h>

const char *err_msg(void);
int sha256_init(void);

const char *err_msg(void) { return "the program's own"; }
int sha256_init(void) { return 0; }

int main(void) {
  int v = 0;
  braid_get_version(&v);
  printf("%s %d\n", err_msg(), sha256_init() + (v > 0));
  return 0;
}
