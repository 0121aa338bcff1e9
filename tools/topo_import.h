/*
 * `braid-topo import`: an MSCCL XML schedule read into braid's IR, proved by
 * the verifier, timed by the simulator on a machine model and saved as a
 * braid schedule file (tools/topo_import.c).
 */
#ifndef BRAID_TOOLS_TOPO_IMPORT_H
#define BRAID_TOOLS_TOPO_IMPORT_H

/* argv holds the arguments after "import". Returns the exit status: 0 (the
 * schedule imports and verifies), 1 (it is refused; the reason on stderr),
 * 2 (a bad argument). */
int topo_import_main(int argc, char **argv);

#define TOPO_IMPORT_USAGE                                                      \
  "import PLAN.xml [-o out.json] [--machine M] [--size S]\n"                   \
  "      an MSCCL XML schedule into braid's schedule IR: verified (exit 1\n"   \
  "      with the rank, step and chunk that break it), simulated on M\n"       \
  "      (dgx1-v100) for S bytes (64M), saved as JSON with -o"

#endif
