/*
 * Graphviz for the braid-topo commands that draw (render, schedule --render):
 * `dot` run on a file they wrote (tools/topo_dot.c).
 */
#ifndef BRAID_TOOLS_TOPO_DOT_H
#define BRAID_TOOLS_TOPO_DOT_H

/* How long dot may take before it is killed. */
#define TOPO_DOT_TIMEOUT_S 120

/* Runs `dot -T<fmt> -o out in`, bounded by TOPO_DOT_TIMEOUT_S. who starts
 * every message on stderr ("braid-topo", "braid-topo schedule"). Returns 0
 * when dot succeeded, else 1 with the reason on stderr (dot missing, its
 * failure, the time limit). */
int topo_run_dot(const char *who, const char *fmt, const char *in,
                 const char *out);

#endif
