/*
 * InfiniBand verbs transport (tp_ibverbs, declared in
 * transports/transport.h): a probe for automatic transport choice.
 */
#ifndef BRAID_TRANSPORTS_IBVERBS_H
#define BRAID_TRANSPORTS_IBVERBS_H

#include <stddef.h>

/* 1 when this host has an active RDMA port that BRAID_IB_HCA selects; name
 * (may be NULL) gets "device:port". 0 when built without libibverbs, when
 * there is no device, or when BRAID_IB_HCA is malformed. Local only. */
int ib_probe_device(char *name, size_t len);

#endif
