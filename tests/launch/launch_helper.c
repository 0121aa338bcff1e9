/*
 * A tiny rank program for the braidrun tests. Modes (argv[1]):
 *   env            print the BRAID_* variables (stdout) and a line on stderr
 *   fail R CODE    rank R exits with CODE after 100 ms; the others sleep 60 s
 *   abort R        rank R raises SIGABRT after 100 ms; the others sleep 60 s
 *   stubborn R     rank R exits 3 after 100 ms; the others ignore SIGTERM
 *                  and sleep 60 s
 *   sleep          sleep 60 s
 *   partial        write "no newline" without a newline, then exit 0
 *   var NAME       print NAME's value (or "(unset)")
 *   netns          print this process's network namespace
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *get(const char *n) {
  const char *v = getenv(n);
  return v ? v : "(unset)";
}

static void nap(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "env";
  int rank = atoi(get("BRAID_RANK"));
  int target = argc > 2 ? atoi(argv[2]) : 0;
  if (!strcmp(mode, "env")) {
    const char *id = get("BRAID_UNIQUE_ID");
    printf("rank=%s size=%s local_rank=%s local_size=%s idlen=%zu id=%.16s\n",
           get("BRAID_RANK"), get("BRAID_SIZE"), get("BRAID_LOCAL_RANK"),
           get("BRAID_LOCAL_SIZE"), strlen(id), id);
    fprintf(stderr, "stderr of %d\n", rank);
    return 0;
  }
  if (!strcmp(mode, "fail") || !strcmp(mode, "abort") ||
      !strcmp(mode, "stubborn")) {
    if (rank == target) {
      nap(100);
      if (!strcmp(mode, "abort"))
        raise(SIGABRT);
      return !strcmp(mode, "fail") && argc > 3 ? atoi(argv[3]) : 3;
    }
    if (!strcmp(mode, "stubborn"))
      signal(SIGTERM, SIG_IGN);
    printf("rank %d sleeping\n", rank);
    fflush(stdout);
    nap(60000);
    return 0;
  }
  if (!strcmp(mode, "sleep")) {
    printf("rank %d sleeping\n", rank);
    fflush(stdout);
    nap(60000);
    return 0;
  }
  if (!strcmp(mode, "partial")) {
    fputs("no newline", stdout);
    return 0;
  }
  if (!strcmp(mode, "var") && argc > 2) {
    printf("%s=%s\n", argv[2], get(argv[2]));
    return 0;
  }
  if (!strcmp(mode, "netns")) {
    char buf[128] = "";
    ssize_t n = readlink("/proc/self/ns/net", buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = '\0';
    printf("netns=%s\n", buf);
    return 0;
  }
  fprintf(stderr, "launch_helper: unknown mode '%s'\n", mode);
  return 2;
}
