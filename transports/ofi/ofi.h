/*
 * libfabric transport (tp_ofi, declared in transports/transport.h): a probe
 * for automatic transport choice.
 */
#ifndef BRAID_TRANSPORTS_OFI_H
#define BRAID_TRANSPORTS_OFI_H

#include <stddef.h>

#include "transports/transport.h"

/* 1 when the provider tp_ofi would use with set (its ofi_provider and
 * ofi_domain, BRAID_OFI_PROVIDER / _DOMAIN, else the fastest present) is an
 * RDMA-class one (verbs, efa, cxi, psm3, ...), not a socket one (tcp, net,
 * sockets, udp) that braid's own tcp transport serves as well. name (may be
 * NULL) gets the provider's name, "" when none. Local and cheap enough to
 * call once per communicator; 0 when built without libfabric. */
int ofi_probe_fast(const tp_settings *set, char *name, size_t len);

#endif
