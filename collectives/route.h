/*
 * Routes between vertices of a system graph for the simulator and the flow
 * graphs (collectives/sim.c, collectives/flow.c). Internal to collectives/.
 *
 * SCHED_ROUTE_ANY: on a single host, the topology's best path
 *   (topo_path_get); on a cluster, the widest path (then fewest hops) that
 *   uses NVLink when NVLink alone joins the two vertices, restricted to the
 *   two hosts and the network, so that no per-source cache over the whole
 *   cluster is built.
 * SCHED_ROUTE_NVL: NVLink links only, directly or through NVSwitches.
 * SCHED_ROUTE_HOST: no NVLink link: through PCIe switches, CPUs and NICs.
 *   Between two GPUs it is the path the runtime stages such a channel on
 *   (pinned host memory, transports/cuda/staged.c): up to the CPU nearest
 *   the sender, on to the CPU nearest the receiver (the inter-socket link,
 *   or the NICs and the network on another host), down to the receiver.
 * Transit rules follow topology/paths.c: a GPU is crossed only from NVLink
 * to NVLink, a NIC only between PCIe and the network.
 */
#ifndef BRAID_COLLECTIVES_ROUTE_H
#define BRAID_COLLECTIVES_ROUTE_H

#include "topology/topo.h"

typedef struct route_ctx route_ctx;

route_ctx *route_ctx_new(topo_graph *g); /* NULL when out of memory */
void route_ctx_free(route_ctx *rc);
/* The path from vertex a to vertex b for route r (sched_route). 0 with
 * out filled (release with topo_path_release), or -1 when no such path. */
int route_find(route_ctx *rc, int a, int b, int r, topo_path *out);

#endif
