/*
 * Internals shared by src/bootstrap.c (rendezvous, control mesh) and
 * src/bootstrap_root.c (the unique id and the root service): the greeting
 * constants, the id's layout and the root's wire format. Both ends run the
 * same build.
 */
#ifndef BRAID_SRC_BOOTSTRAP_INT_H
#define BRAID_SRC_BOOTSTRAP_INT_H

#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "braid.h"
#include "src/bootstrap.h"
#include "transports/sock_util.h"

#define BOOT_MAGIC 0x42524431u /* "BRD1": unique id and greetings */
#define BOOT_VERSION 1
#define KIND_ROOT 1u /* greeting kind of a rank joining the root */
#define KIND_MESH 2u /* greeting kind of a control-mesh connection */
#define AUTH_MS 1000 /* a connection proves the secret within this */
#define TEXT_LEN 256

/* The unique id's content (inside braid_unique_id). */
typedef struct id_wire {
  uint32_t magic;
  uint16_t version;
  uint16_t family;
  uint16_t port; /* host order */
  uint16_t pad;
  uint32_t scope_id;
  uint8_t addr[16];
  uint8_t secret[16];
} id_wire;
_Static_assert(sizeof(id_wire) <= BRAID_UNIQUE_ID_BYTES, "id fits");

/* How long a rank waits for the root's answer past its own deadline, and
 * how long before a rank's deadline the root gives up and answers. */
#define ROOT_ANSWER_MS 1000
#define ROOT_EARLY_MS 200

typedef struct root_hello {
  int32_t rank, nranks;
  /* how long the rank still waits for the reply (ms, from its send): the
   * root answers before the first of its ranks gives up, so that each
   * learns which ranks are missing */
  int32_t wait_ms;
  boot_peer me;
} root_hello;

_Static_assert(sizeof(root_hello) + sizeof(sock_auth) <= SOCK_GATE_MAX_MSG,
               "greeting fits the gate");

typedef struct root_reply {
  int32_t status; /* braid_result */
  int32_t nranks;
  char text[TEXT_LEN]; /* why, when status != 0 */
} root_reply;          /* followed by nranks boot_peer when status == 0 */

/* The root's address and the secret from an id: 0, or -1 when it is no
 * braid id of this version. */
int boot_id_decode(const braid_unique_id *id, struct sockaddr_storage *a,
                   uint8_t secret[16]);

/* timeout_ms when positive, else BRAID_TIMEOUT's value, else 300 s. */
int boot_timeout_or_default(int timeout_ms);

/* Listens on bind_addr (SO_REUSEADDR when reuse) and starts, detached, the
 * thread that answers one rendezvous of ranks proving this secret; *bound
 * gets the address it listens on. */
braid_result boot_root_start(const struct sockaddr_storage *bind_addr,
                             int reuse, const uint8_t secret[16],
                             struct sockaddr_storage *bound);

#endif
