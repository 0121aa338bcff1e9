/*
 * `braid-topo schedule`: every generator's schedule for a collective on a
 * machine (or some of its GPUs, or a cluster of it), verified and simulated,
 * with the selector's pick; saves it as JSON or draws it
 * (tools/topo_schedule.c).
 */
#ifndef BRAID_TOOLS_TOPO_SCHEDULE_H
#define BRAID_TOOLS_TOPO_SCHEDULE_H

#include <stddef.h>

/* argv holds the options after "schedule". Returns the exit status: 0, 1
 * (a failure while running), 2 (a bad argument, named on stderr). */
int topo_schedule_main(int argc, char **argv);

/* A size in bytes with an optional K, M or G (powers of 1024; "64K",
 * "64KiB", "64KB", "1.5M"), 1 byte to 10^15; 0 when s is none. */
size_t topo_parse_size(const char *s);

#define TOPO_SCHEDULE_USAGE                                                    \
  "schedule --coll C --size S [--machine M | --file F] [--gpus 0,2,3]\n"       \
  "      [--hosts N [--nic-bw GBps]] [--algo NAME] [--dtype T] [--channels "   \
  "N]\n"                                                                       \
  "      [--deterministic 1] [--save out.json] [--render svg|png|dot -o "      \
  "OUT]\n"                                                                     \
  "      every generator's schedule for a collective of S bytes (K/M/G):\n"    \
  "      channels, verifier, predicted time, algbw, busbw, efficiency"

#endif
