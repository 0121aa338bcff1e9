/*
 * A TCP port for a test's rendezvous root, free when asked.
 *
 * Binding port 0 hands out a port from the ephemeral range
 * (32768..60999), the same range every outgoing connection of every test
 * running in parallel takes its local port from: between our close() and
 * the root's bind() one of them can take it (seen as "Address already in
 * use" in a loaded CI run). Ports are drawn below that range instead, from
 * a per-process sequence, and checked with a bind. A test that can redo
 * its setup should still retry with a fresh port on EADDRINUSE.
 */
#ifndef BRAID_TEST_FREE_PORT_H
#define BRAID_TEST_FREE_PORT_H

#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A port in 20000..31999 that could be bound on every address just now;
 * -1 when none was found in 200 tries. */
static inline int free_port(void) {
  static unsigned seed;
  if (seed == 0)
    seed = (unsigned)getpid() * 2654435761u;
  for (int tries = 0; tries < 200; tries++) {
    seed = seed * 1103515245u + 12345u;
    int port = 20000 + (int)((seed >> 8) % 12000);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0)
      return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons((uint16_t)port);
    int ok = bind(s, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(s);
    if (ok)
      return port;
  }
  return -1;
}

#endif
