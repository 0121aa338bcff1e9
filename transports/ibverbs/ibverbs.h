/*
 * InfiniBand verbs transport (tp_ibverbs, declared in
 * transports/transport.h): a probe for automatic transport choice.
 */
#ifndef BRAID_TRANSPORTS_IBVERBS_H
#define BRAID_TRANSPORTS_IBVERBS_H

#include <stddef.h>

#include "transports/transport.h"

/* 1 when this host has an active RDMA port that set's ib_hca (BRAID_IB_HCA)
 * selects; name (may be NULL) gets "device:port". 0 when built without
 * libibverbs, when there is no device, or when ib_hca is malformed. Local
 * only. */
int ib_probe_device(const tp_settings *set, char *name, size_t len);

#endif
