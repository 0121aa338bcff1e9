/*
 * braid-doctor: a preflight check of this machine and environment for braid
 * jobs (docs/DOCTOR.md). The checks live in the library (src/doctor.c,
 * src/doctor_net.c), which runs the cheap ones itself when a communicator
 * fails to form; this program prints them as text or JSON.
 *
 * Exit status: 0 nothing would stop a job, 1 warnings, 2 errors (or a bad
 * command line). With --ranks under a launcher, once the ranks have met and
 * exchanged their verdicts, rank 0 exits with the worst of every rank's and
 * the others with 0, after every rank's report is out: a launcher that
 * stops the job at the first rank to fail (braidrun) cuts no report short.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/doctor.h"

static void usage(FILE *f) {
  fprintf(f, "usage: braid-doctor [--json] [--ranks N] [--local-ranks N] "
             "[--timeout S]\n"
             "  --json           one JSON object on stdout instead of text\n"
             "  --ranks N        the job has N ranks; under a launcher "
             "(braidrun, torchrun,\n"
             "                   mpirun, srun) also try a real rendezvous, an "
             "allreduce and a\n"
             "                   send/receive between every pair of ranks\n"
             "  --local-ranks N  ranks per host (default: the launcher's, else "
             "--ranks,\n"
             "                   else min(cores, 8))\n"
             "  --timeout S      bound on each wait of --ranks (default 10 s)\n"
             "exit status: 0 ok, 1 warnings, 2 errors (docs/DOCTOR.md); "
             "with --ranks, once\n"
             "the ranks have met: rank 0 the worst of every rank's, the "
             "others 0\n");
}

static int parse_pos(const char *s, int *out) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 1 || v > 1000000)
    return -1;
  *out = (int)v;
  return 0;
}

static void json_str(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c == '\n')
      printf("\\n");
    else if (c == '\t')
      printf("\\t");
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

/* The ranks of each verdict, and what this rank exits with. */
static void print_job(const doc_job *job, int status) {
  printf("job of %d rank%s: the worst verdict of every rank's report is %s",
         job->nranks, job->nranks == 1 ? "" : "s",
         doc_verdict_name(job->worst));
  for (int v = DOC_WARN; v <= DOC_ERROR; v++) {
    int n = 0;
    for (int i = 0; i < job->nranks; i++)
      if (job->verdicts[i] == (doc_verdict)v) {
        if (n < 16)
          printf("%s%d",
                 n               ? ", "
                 : v == DOC_WARN ? "; warnings on ranks "
                                 : "; errors on ranks ",
                 i);
        n++;
      }
    if (n > 16)
      printf(" and %d more", n - 16);
  }
  if (job->rank == 0)
    printf("\nrank 0 exits with %d, the job's worst verdict; the other ranks "
           "with 0\n",
           status);
  else
    printf("\nrank %d exits with %d; rank 0 exits with %d, the job's worst "
           "verdict\n",
           job->rank, status, (int)job->worst);
}

int main(int argc, char **argv) {
  int json = 0, ranks = 0, local = 0, timeout_s = 10;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--json") == 0) {
      json = 1;
    } else if ((strcmp(a, "--ranks") == 0 || strcmp(a, "--local-ranks") == 0 ||
                strcmp(a, "--timeout") == 0) &&
               i + 1 < argc) {
      int *dst = a[2] == 'r' ? &ranks : a[2] == 'l' ? &local : &timeout_s;
      if (parse_pos(argv[++i], dst) != 0) {
        fprintf(stderr, "braid-doctor: %s takes a positive integer, not '%s'\n",
                a, argv[i]);
        return 2;
      }
    } else if (strcmp(a, "--ranks") == 0 || strcmp(a, "--local-ranks") == 0 ||
               strcmp(a, "--timeout") == 0) {
      fprintf(stderr, "braid-doctor: %s needs a value (a positive integer)\n",
              a);
      return 2;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "braid-doctor: unknown argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  doc_opts o = {local, ranks, 0};
  doc_report r = {0};
  if (doc_run(&o, &r) != BRAID_SUCCESS) {
    fprintf(stderr, "braid-doctor: out of memory\n");
    return 2;
  }
  doc_job job = {0};
  if (ranks > 0)
    doc_ranks(ranks, timeout_s * 1000, &r, &job);
  doc_verdict worst = doc_worst(&r);
  int status = (int)worst;
  if (job.nranks > 0)
    status = job.rank == 0 ? (int)job.worst : 0;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  int nwarn = 0, nerr = 0;
  for (int i = 0; i < r.n; i++) {
    nwarn += r.f[i].verdict == DOC_WARN;
    nerr += r.f[i].verdict == DOC_ERROR;
  }
  if (json) {
    printf("{\"host\": ");
    json_str(host);
    printf(", \"pid\": %d, \"verdict\": \"%s\", \"exit\": %d, "
           "\"warnings\": %d, \"errors\": %d, ",
           (int)getpid(), doc_verdict_name(worst), status, nwarn, nerr);
    if (job.nranks > 0) {
      printf("\"job\": {\"rank\": %d, \"ranks\": %d, \"verdict\": \"%s\", "
             "\"verdicts\": [",
             job.rank, job.nranks, doc_verdict_name(job.worst));
      for (int i = 0; i < job.nranks; i++)
        printf("%s\"%s\"", i ? ", " : "", doc_verdict_name(job.verdicts[i]));
      printf("]}, ");
    }
    printf("\"findings\": [");
    for (int i = 0; i < r.n; i++) {
      printf("%s\n  {\"check\": ", i ? "," : "");
      json_str(r.f[i].check);
      printf(", \"verdict\": \"%s\", \"what\": ",
             doc_verdict_name(r.f[i].verdict));
      json_str(r.f[i].what);
      printf(", \"fix\": ");
      json_str(r.f[i].fix);
      printf("}");
    }
    printf("\n]}\n");
  } else {
    printf("braid-doctor on %s\n", host);
    for (int i = 0; i < r.n; i++) {
      printf("%-8s %-7s %s\n", doc_verdict_name(r.f[i].verdict), r.f[i].check,
             r.f[i].what);
      if (r.f[i].fix[0])
        printf("%-8s %-7s fix: %s\n", "", "", r.f[i].fix);
    }
    printf("%d warning%s, %d error%s: %s\n", nwarn, nwarn == 1 ? "" : "s", nerr,
           nerr == 1 ? "" : "s",
           worst == DOC_OK     ? "nothing would stop a job"
           : worst == DOC_WARN ? "a job runs, see the warnings"
                               : "a job would fail, see the errors");
    if (job.nranks > 0)
      print_job(&job, status);
  }
  fflush(stdout);
  doc_job_end(&job); /* every rank's report is out before any exits */
  doc_report_free(&r);
  return status;
}
