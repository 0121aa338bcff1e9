/*
 * Writes the schedules of a hierarchical generator for one host map as a
 * schedule file (BRAID_SCHEDULE_FILE), so that a multi-host run executes them
 * whatever the selector would pick: every collective the generator makes,
 * every root for broadcast and reduce, with `nch` channels.
 *
 *   hier_sched_dump GEN SIZES NCH OUT
 *
 * GEN: hier or chaintree. SIZES: ranks per host, host after host, as
 * braidrun --hosts places them ("2,2", "3,1"). Exit 0, or 1 with a message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/generators.h"
#include "collectives/sched_file.h"
#include "collectives/verify.h"
#include "collectives/view.h"
#include "tests/collectives/gen_try.h"

#define MAXR 256

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: hier_sched_dump GEN SIZES NCH OUT\n");
    return 1;
  }
  const gen_desc *g = gen_find(argv[1]);
  if (!g) {
    fprintf(stderr, "hier_sched_dump: no generator %s\n", argv[1]);
    return 1;
  }
  int host[MAXR], vertex[MAXR], n = 0, H = 0;
  for (char *s = argv[2]; *s;) {
    char *end;
    long k = strtol(s, &end, 10);
    if (end == s || k < 1 || n + k > MAXR) {
      fprintf(stderr, "hier_sched_dump: bad host sizes '%s'\n", argv[2]);
      return 1;
    }
    for (long i = 0; i < k; i++, n++) {
      host[n] = H;
      vertex[n] = -1;
    }
    H++;
    s = *end == ',' ? end + 1 : end;
  }
  int nch = atoi(argv[3]);
  sched_view v = {NULL, n, vertex, host, H, 1, 0};
  sched *all[8 * MAXR];
  int ns = 0, rc = 0;
  for (int c = 0; c < SCHED_NUM_COLLS && !rc; c++) {
    if (!gen_supports_view(g, (sched_coll)c, n, &v))
      continue;
    int rooted = c == SCHED_BROADCAST || c == SCHED_REDUCE;
    for (int root = 0; root < (rooted ? n : 1) && !rc; root++) {
      gen_params p = {(sched_coll)c, n, root, nch, &v, 0, 0};
      sched *s = gen_try(g->fn, &p);
      if (!s || verify_sched(s, 0, 2) != BRAID_SUCCESS ||
          verify_sched(s, 1, 2) != BRAID_SUCCESS) {
        fprintf(stderr, "hier_sched_dump: %s %s root %d: %s\n", argv[1],
                sched_coll_name((sched_coll)c), root,
                s ? err_msg() : "no schedule");
        sched_free(s);
        rc = 1;
        break;
      }
      all[ns++] = s;
    }
  }
  if (!rc) {
    FILE *f = fopen(argv[4], "w");
    int bad = !f || sched_file_write_all(all, ns, f);
    if (f && fclose(f))
      bad = 1;
    if (bad) {
      fprintf(stderr, "hier_sched_dump: cannot write %s\n", argv[4]);
      rc = 1;
    }
  }
  for (int i = 0; i < ns; i++)
    sched_free(all[i]);
  if (!rc)
    printf("%s: %d %s schedules for hosts %s, %d channel(s)\n", argv[4], ns,
           argv[1], argv[2], nch);
  return rc;
}
