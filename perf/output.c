/*
 * braid-perf output: the nccl-tests table, CSV, JSON and gnuplot plots.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "perf.h"

int perf_rows_push(perf_rows *r, const perf_row *row) {
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 64;
    perf_row *v = realloc(r->v, cap * sizeof *v);
    if (!v)
      return -1;
    r->v = v;
    r->cap = cap;
  }
  r->v[r->n++] = *row;
  return 0;
}

void perf_print_header(FILE *f, const perf_opts *o, int nranks) {
  fprintf(f,
          "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) "
          "warmup iters: %d iters: %d agg iters: %d validation: %d "
          "graph: 0\n",
          o->minbytes, o->maxbytes,
          o->stepfactor ? o->stepfactor : o->stepbytes,
          o->stepfactor ? "factor" : "bytes", o->warmup, o->iters, o->agg,
          o->check);
  if (o->blocking)
    fprintf(f, "# Blocking Enabled: wait for completion and barrier after "
               "each collective\n");
  fprintf(f, "# nranks %d, host buffers\n", nranks);
  fflush(f);
}

void perf_print_table_header(FILE *f) {
  fprintf(f, "#\n");
  fprintf(f,
          "# %10s  %12s  %8s  %6s  %6s           out-of-place                 "
          "      in-place          \n",
          "", "", "", "", "");
  fprintf(f,
          "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s "
          "%6s\n",
          "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
          "#wrong", "time", "algbw", "busbw", "#wrong");
  fprintf(f,
          "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  "
          "%5s\n",
          "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
          "(us)", "(GB/s)", "(GB/s)", "");
  fflush(f);
}

static void print_result(FILE *f, const perf_result *r) {
  if (!r->valid) {
    fprintf(f, "  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  char t[32];
  if (r->time_us >= 10000.0)
    snprintf(t, sizeof t, "%7.0f", r->time_us);
  else if (r->time_us >= 100.0)
    snprintf(t, sizeof t, "%7.1f", r->time_us);
  else
    snprintf(t, sizeof t, "%7.2f", r->time_us);
  if (r->wrong >= 0)
    fprintf(f, "  %7s  %6.2f  %6.2f  %5lld", t, r->algbw, r->busbw,
            (long long)r->wrong);
  else
    fprintf(f, "  %7s  %6.2f  %6.2f  %5s", t, r->algbw, r->busbw, "N/A");
}

void perf_print_row(FILE *f, const perf_row *row) {
  const perf_coll_info *ci = &perf_colls[row->coll];
  char root[16];
  if (ci->has_root)
    snprintf(root, sizeof root, "%6d", row->root);
  else
    snprintf(root, sizeof root, "%6d", -1);
  fprintf(f, "%12zu  %12zu  %8s  %6s  %6s", row->bytes, row->count,
          perf_dtype_str(row->dtype),
          ci->has_op ? perf_op_str(row->op) : "none", root);
  print_result(f, &row->oop);
  print_result(f, &row->inp);
  fprintf(f, "\n");
  fflush(f);
}

static void csv_result(FILE *f, const perf_result *r) {
  if (!r->valid) {
    fprintf(f, ",,,,");
    return;
  }
  fprintf(f, ",%.3f,%.6g,%.6g,", r->time_us, r->algbw, r->busbw);
  if (r->wrong >= 0)
    fprintf(f, "%lld", (long long)r->wrong);
}

int perf_write_csv(const char *path, const perf_rows *r, int nranks) {
  FILE *f = fopen(path, "w");
  if (!f)
    return -1;
  fprintf(f, "collective,nranks,size_bytes,count,type,redop,root,"
             "oop_time_us,oop_algbw_GBps,oop_busbw_GBps,oop_wrong,"
             "ip_time_us,ip_algbw_GBps,ip_busbw_GBps,ip_wrong\n");
  for (size_t i = 0; i < r->n; i++) {
    const perf_row *w = &r->v[i];
    const perf_coll_info *ci = &perf_colls[w->coll];
    fprintf(f, "%s,%d,%zu,%zu,%s,%s,%d", ci->name, nranks, w->bytes, w->count,
            perf_dtype_str(w->dtype), ci->has_op ? perf_op_str(w->op) : "none",
            ci->has_root ? w->root : -1);
    csv_result(f, &w->oop);
    csv_result(f, &w->inp);
    fprintf(f, "\n");
  }
  return fclose(f) ? -1 : 0;
}

static void json_result(FILE *f, const char *name, const perf_result *r) {
  if (!r->valid) {
    fprintf(f, "\"%s\": null", name);
    return;
  }
  fprintf(f,
          "\"%s\": {\"time_us\": %.3f, \"algbw_GBps\": %.6g, "
          "\"busbw_GBps\": %.6g, \"wrong\": ",
          name, r->time_us, r->algbw, r->busbw);
  if (r->wrong >= 0)
    fprintf(f, "%lld}", (long long)r->wrong);
  else
    fprintf(f, "null}");
}

int perf_write_json(const char *path, const perf_opts *o, const perf_rows *r,
                    int nranks, int version, double avg_busbw, int64_t wrong) {
  FILE *f = fopen(path, "w");
  if (!f)
    return -1;
  int v = version;
  fprintf(f,
          "{\n  \"tool\": \"braid-perf\",\n  \"braid_version\": %d,\n"
          "  \"nranks\": %d,\n  \"config\": {\"minbytes\": %zu, "
          "\"maxbytes\": %zu, \"stepbytes\": %zu, \"stepfactor\": %zu, "
          "\"iters\": %d, \"warmup_iters\": %d, \"agg_iters\": %d, "
          "\"check\": %d, \"blocking\": %d, \"stream_null\": %d, "
          "\"average\": %d},\n  \"results\": [\n",
          v, nranks, o->minbytes, o->maxbytes, o->stepbytes, o->stepfactor,
          o->iters, o->warmup, o->agg, o->check, o->blocking, o->stream_null,
          o->average);
  for (size_t i = 0; i < r->n; i++) {
    const perf_row *w = &r->v[i];
    const perf_coll_info *ci = &perf_colls[w->coll];
    fprintf(f,
            "    {\"collective\": \"%s\", \"size_bytes\": %zu, \"count\": %zu, "
            "\"type\": \"%s\", \"redop\": \"%s\", \"root\": %d, ",
            ci->name, w->bytes, w->count, perf_dtype_str(w->dtype),
            ci->has_op ? perf_op_str(w->op) : "none",
            ci->has_root ? w->root : -1);
    json_result(f, "out_of_place", &w->oop);
    fprintf(f, ", ");
    json_result(f, "in_place", &w->inp);
    fprintf(f, "}%s\n", i + 1 < r->n ? "," : "");
  }
  fprintf(f,
          "  ],\n  \"out_of_bounds_values\": %lld,\n"
          "  \"avg_bus_bandwidth_GBps\": %.4f\n}\n",
          (long long)wrong, avg_busbw);
  return fclose(f) ? -1 : 0;
}

int perf_have_gnuplot(void) {
  const char *path = getenv("PATH");
  if (!path)
    path = "/usr/bin:/bin";
  char *dup = strdup(path);
  if (!dup)
    return 0;
  int found = 0;
  for (char *save = NULL, *d = strtok_r(dup, ":", &save); d && !found;
       d = strtok_r(NULL, ":", &save)) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/gnuplot", *d ? d : ".");
    found = access(buf, X_OK) == 0;
  }
  free(dup);
  return found;
}

/* A series is one (collective, type, op, root); each gets its own curve. */
static int same_series(const perf_row *a, const perf_row *b) {
  return a->coll == b->coll && a->dtype == b->dtype && a->op == b->op &&
         a->root == b->root;
}

int perf_plot(const char *path, const perf_rows *r, int nranks, FILE *err) {
  if (r->n == 0) {
    fprintf(err, "braid-perf: nothing to plot\n");
    return -1;
  }
  char dir[] = "/tmp/braid-perf-plot.XXXXXX";
  if (!mkdtemp(dir)) {
    fprintf(err, "braid-perf: --plot: cannot create a temporary directory\n");
    return -1;
  }
  char dat[sizeof dir + 16], gp[sizeof dir + 16];
  snprintf(dat, sizeof dat, "%s/data", dir);
  snprintf(gp, sizeof gp, "%s/plot.gp", dir);
  FILE *f = fopen(dat, "w");
  if (!f)
    return -1;
  /* Blocks separated by two blank lines: gnuplot's "index". */
  int nseries = 0;
  char titles[64][96];
  for (size_t i = 0; i < r->n; i++) {
    const perf_row *w = &r->v[i];
    if (i == 0 || !same_series(w, &r->v[i - 1])) {
      if (i)
        fprintf(f, "\n\n");
      if (nseries < 64) {
        const perf_coll_info *ci = &perf_colls[w->coll];
        int k = snprintf(titles[nseries], sizeof titles[0], "%s %s", ci->name,
                         perf_dtype_str(w->dtype));
        if (ci->has_op && k > 0 && (size_t)k < sizeof titles[0])
          k += snprintf(titles[nseries] + k, sizeof titles[0] - (size_t)k,
                        " %s", perf_op_str(w->op));
        if (ci->has_root && k > 0 && (size_t)k < sizeof titles[0])
          snprintf(titles[nseries] + k, sizeof titles[0] - (size_t)k,
                   " root %d", w->root);
      }
      nseries++;
    }
    if (w->bytes == 0 || !w->oop.valid)
      continue;
    fprintf(f, "%zu %.6g %.6g %.6g %.6g\n", w->bytes, w->oop.busbw,
            w->oop.time_us, w->inp.valid ? w->inp.busbw : 0,
            w->inp.valid ? w->inp.time_us : 0);
  }
  fclose(f);
  if (nseries > 64)
    nseries = 64;
  int svg = strcasecmp(strrchr(path, '.'), ".svg") == 0;
  f = fopen(gp, "w");
  if (!f)
    return -1;
  fprintf(f,
          "set terminal %s size 1400,600 font 'Sans,11' noenhanced\n"
          "set output '%s'\n"
          "set multiplot layout 1,2 title 'braid-perf, %d ranks'\n"
          "set logscale x 2\nset grid\nset key left top\n"
          "set format x '%%.0b%%B'\n"
          "set xlabel 'message size (bytes)'\n"
          "set ylabel 'bus bandwidth (GB/s)'\n"
          "set title 'bus bandwidth (out-of-place solid, in-place dashed)'\n",
          svg ? "svg dynamic" : "pngcairo", path, nranks);
  fprintf(f, "plot ");
  for (int s = 0; s < nseries; s++) {
    fprintf(f,
            "%s'%s' index %d using 1:2 with linespoints lw 2 pt 7 ps 0.6 "
            "lc %d title '%s', "
            "'%s' index %d using 1:4 with lines dt 2 lc %d notitle",
            s ? ", " : "", dat, s, s + 1, titles[s], dat, s, s + 1);
  }
  fprintf(f, "\nset logscale y 10\nset key left top\n"
             "set ylabel 'time per operation (us)'\n"
             "set title 'latency (log-log)'\nplot ");
  for (int s = 0; s < nseries; s++)
    fprintf(f,
            "%s'%s' index %d using 1:3 with linespoints lw 2 pt 7 ps 0.6 "
            "lc %d title '%s'",
            s ? ", " : "", dat, s, s + 1, titles[s]);
  fprintf(f, "\nunset multiplot\n");
  fclose(f);
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    execlp("gnuplot", "gnuplot", gp, (char *)NULL);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  unlink(dat);
  unlink(gp);
  rmdir(dir);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(err, "braid-perf: gnuplot failed to draw %s\n", path);
    return -1;
  }
  return 0;
}
