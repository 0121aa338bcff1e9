/*
 * A rank for the braidrun tests that writes empty lines to stdout without
 * pause, faster than braidrun can prefix them. It first enlarges its stdout
 * pipe to 1 MiB (where the system allows), so that the pipe never runs dry
 * while this process waits for a CPU: a braidrun that reads one stream until
 * it is empty then never comes back to its other duties.
 *
 *   flood_helper            every rank floods
 *   flood_helper R CODE     rank R writes "failing" to stderr after 500 ms
 *                           and exits with CODE; the others flood
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  const char *r = getenv("BRAID_RANK");
  if (argc > 2 && r != NULL && atoi(r) == atoi(argv[1])) {
    struct timespec ts = {0, 500000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
    fputs("failing\n", stderr);
    return atoi(argv[2]);
  }
  (void)fcntl(1, F_SETPIPE_SZ, 1 << 20);
  static char lines[65536];
  memset(lines, '\n', sizeof lines);
  for (;;)
    if (write(1, lines, sizeof lines) < 0)
      return 1;
}
