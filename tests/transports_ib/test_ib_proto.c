/*
 * Device-free protocol logic of the ibverbs transport (ib_proto.c): HCA
 * filter, GID choice, credits and slot indices, connection state machine,
 * wire format, registration cache. No RDMA device is needed.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "src/log.h"
#include "transports/ibverbs/ib_proto.h"

/* ---- HCA filter ------------------------------------------------------- */

static ib_hca_filter parse_ok(const char *s) {
  ib_hca_filter f;
  cr_assert_eq(ib_hca_parse(s, &f), BRAID_SUCCESS, "\"%s\": %s",
               s ? s : "(null)", err_msg());
  return f;
}

Test(ib_hca, empty_selects_everything) {
  ib_hca_filter f = parse_ok(NULL);
  cr_expect_eq(f.n, 0);
  cr_expect(ib_hca_match(&f, "mlx5_0", 1));
  f = parse_ok("");
  cr_expect(ib_hca_match(&f, "anything", 2));
}

Test(ib_hca, prefix_and_ports) {
  ib_hca_filter f = parse_ok("mlx5_0:1,mlx5_1");
  cr_expect_eq(f.n, 2);
  cr_expect_str_eq(f.e[0].name, "mlx5_0");
  cr_expect_eq(f.e[0].port, 1);
  cr_expect_eq(f.e[1].port, -1);
  cr_expect(ib_hca_match(&f, "mlx5_0", 1));
  cr_expect_not(ib_hca_match(&f, "mlx5_0", 2), "port 2 was not listed");
  cr_expect(ib_hca_match(&f, "mlx5_1", 2), "any port of mlx5_1");
  cr_expect(ib_hca_match(&f, "mlx5_10", 1), "prefix match: mlx5_1 -> mlx5_10");
  cr_expect_not(ib_hca_match(&f, "mlx4_0", 1));
}

Test(ib_hca, exact) {
  ib_hca_filter f = parse_ok("=mlx5_1");
  cr_expect(f.exact);
  cr_expect(ib_hca_match(&f, "mlx5_1", 1));
  cr_expect_not(ib_hca_match(&f, "mlx5_10", 1), "exact: no prefix match");
}

Test(ib_hca, exclude) {
  ib_hca_filter f = parse_ok("^mlx5_2,mlx5_3:2");
  cr_expect(f.exclude);
  cr_expect_not(ib_hca_match(&f, "mlx5_2", 1));
  cr_expect_not(ib_hca_match(&f, "mlx5_3", 2));
  cr_expect(ib_hca_match(&f, "mlx5_3", 1), "only port 2 excluded");
  cr_expect(ib_hca_match(&f, "mlx5_0", 1));
  f = parse_ok("^=mlx5_1");
  cr_expect(f.exclude && f.exact);
  cr_expect_not(ib_hca_match(&f, "mlx5_1", 1));
  cr_expect(ib_hca_match(&f, "mlx5_10", 1), "exact exclude spares mlx5_10");
}

Test(ib_hca, bad_specs_are_named) {
  const char *bad[] = {"mlx5_0:", "mlx5_0:x", "mlx5_0:0", "mlx5_0:256",
                       "a,,b",    "^",        "=",        ":1"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ib_hca_filter f;
    cr_expect_eq(ib_hca_parse(bad[i], &f), BRAID_ERR_INVALID_ARG,
                 "\"%s\" should be rejected", bad[i]);
    cr_expect_neq(strstr(err_msg(), "BRAID_IB_HCA"), NULL,
                  "error for \"%s\" should name the variable: %s", bad[i],
                  err_msg());
  }
  char big[2048] = "";
  for (int i = 0; i < IB_HCA_MAX + 1; i++)
    strcat(big, i ? ",d" : "d");
  ib_hca_filter f;
  cr_expect_eq(ib_hca_parse(big, &f), BRAID_ERR_INVALID_ARG, "too many");
}

/* ---- GIDs ------------------------------------------------------------- */

Test(ib_gid, auto_prefers_rocev2_ipv4) {
  uint8_t g[4][16];
  memset(g, 0, sizeof(g));
  /* 0: link-local v1, 1: IPv4-mapped v1, 2: global v2, 3: IPv4-mapped v2 */
  g[0][0] = 0xfe, g[0][1] = 0x80, g[0][15] = 1;
  g[1][10] = g[1][11] = 0xff, g[1][12] = 198, g[1][13] = 18;
  g[2][0] = 0xfd, g[2][15] = 2;
  g[3][10] = g[3][11] = 0xff, g[3][12] = 198, g[3][13] = 18, g[3][15] = 3;
  int v2[4] = {0, 0, 1, 1};
  cr_expect_eq(ib_gid_auto(4, (const uint8_t(*)[16])g, v2), 3);
  v2[3] = 0;
  cr_expect_eq(ib_gid_auto(4, (const uint8_t(*)[16])g, v2), 2);
  v2[2] = 0;
  cr_expect_eq(ib_gid_auto(4, (const uint8_t(*)[16])g, v2), 1,
               "global before link-local");
  cr_expect(ib_gid_is_ipv4(g[1]));
  cr_expect_not(ib_gid_is_ipv4(g[2]));
  uint8_t z[2][16];
  memset(z, 0, sizeof(z));
  int zv[2] = {1, 1};
  cr_expect_eq(ib_gid_auto(2, (const uint8_t(*)[16])z, zv), -1, "all empty");
}

/* ---- credits and slots ------------------------------------------------ */

Test(ib_flow, credits_bound_sends) {
  ib_tx_flow t;
  ib_tx_init(&t, 4);
  uint32_t slot;
  uint64_t seq;
  for (uint32_t i = 0; i < 4; i++) {
    cr_assert_eq(ib_tx_take(&t, &slot, &seq), 0);
    cr_expect_eq(slot, i);
    cr_expect_eq(seq, i + 1);
  }
  cr_expect_eq(ib_tx_credits(&t), 0u);
  cr_expect_eq(ib_tx_take(&t, &slot, &seq), -1, "no credit left");
  cr_expect_eq(ib_tx_ack(&t, 2), 0);
  cr_expect_eq(ib_tx_credits(&t), 2u);
  cr_expect_eq(ib_tx_take(&t, &slot, &seq), 0);
  cr_expect_eq(slot, 0u, "ring wraps to slot 0");
  cr_expect_eq(ib_tx_ack(&t, 1), -1, "counter may not go back");
  cr_expect_eq(ib_tx_ack(&t, 6), -1, "counter may not pass the sends");
  cr_expect_eq(t.acked, 2u, "a bad ack changes nothing");
  cr_expect_not(ib_tx_done(&t, 1));
  cr_expect_eq(ib_tx_complete(&t), 0);
  cr_expect(ib_tx_done(&t, 1));
  for (int i = 0; i < 4; i++)
    cr_expect_eq(ib_tx_complete(&t), 0);
  cr_expect_eq(ib_tx_complete(&t), -1, "more completions than sends");
}

Test(ib_flow, receiver_ring_and_credit_batches) {
  ib_rx_flow r;
  cr_assert_eq(ib_rx_init(&r, 4), 0);
  uint32_t slot, len;
  cr_expect_eq(ib_rx_head(&r, &slot, &len), -1, "nothing yet");
  for (uint32_t i = 0; i < 4; i++)
    cr_expect_eq(ib_rx_arrive(&r, 100 + i), 0);
  cr_expect_eq(ib_rx_arrive(&r, 9), -1, "a fifth message overruns 4 slots");
  cr_expect_eq(ib_rx_head(&r, &slot, &len), 0);
  cr_expect_eq(slot, 0u);
  cr_expect_eq(len, 100u);
  cr_expect_eq(ib_rx_consume(&r), 0, "1 of a batch of 2");
  cr_expect_eq(ib_rx_consume(&r), 1, "batch of nslots/2 reached");
  cr_expect_eq(ib_rx_announce(&r), 2u);
  cr_expect_eq(ib_rx_head(&r, &slot, &len), 0);
  cr_expect_eq(slot, 2u);
  cr_expect_eq(len, 102u);
  cr_expect_eq(ib_rx_arrive(&r, 200), 0, "slot 0 is free again");
  ib_rx_free(&r);
}

/* Sender and receiver driven together in random order: the receiver sees
 * every message once, in order, in the slot the sender picked, and the
 * sender never overruns. */
Test(ib_flow, simulated_pair_random_schedule) {
  for (uint32_t nslots = 1; nslots <= 8; nslots++) {
    ib_tx_flow t;
    ib_rx_flow r;
    ib_tx_init(&t, nslots);
    cr_assert_eq(ib_rx_init(&r, nslots), 0);
    uint32_t *wire_slot = calloc(nslots, sizeof(uint32_t));
    uint64_t published = 0, next_expected = 0;
    srand(nslots * 7919u);
    int sent = 0;
    while (next_expected < 500) {
      int what = rand() % 3;
      if (what == 0 && sent < 500) {
        uint32_t slot;
        uint64_t seq;
        if (ib_tx_take(&t, &slot, &seq) == 0) {
          cr_assert_eq(slot, (seq - 1) % nslots);
          cr_assert_eq(ib_rx_arrive(&r, (uint32_t)seq), 0,
                       "overrun at seq %llu", (unsigned long long)seq);
          wire_slot[slot] = (uint32_t)seq;
          ib_tx_complete(&t);
          sent++;
        }
      } else if (what == 1) {
        uint32_t slot, len;
        if (ib_rx_head(&r, &slot, &len) == 0) {
          cr_assert_eq(len, next_expected + 1, "out of order");
          cr_assert_eq(wire_slot[slot], len, "wrong slot");
          next_expected++;
          if (ib_rx_consume(&r))
            published = ib_rx_announce(&r);
        }
      } else {
        cr_assert_eq(ib_tx_ack(&t, published), 0);
      }
    }
    ib_rx_free(&r);
    free(wire_slot);
  }
}

/* ---- connection state machine ----------------------------------------- */

Test(ib_conn, happy_path_and_illegal_steps) {
  ib_conn_state s = IB_CONN_INIT;
  cr_expect_eq(ib_conn_step(&s, IB_EV_RTS), -1, "RTS before anything");
  cr_expect_eq(s, IB_CONN_INIT);
  cr_expect_eq(ib_conn_step(&s, IB_EV_CREATED), 0);
  cr_expect_eq(ib_conn_step(&s, IB_EV_RTR), -1, "RTR before peer info");
  cr_expect_eq(ib_conn_step(&s, IB_EV_PEER_INFO), 0);
  cr_expect_eq(ib_conn_step(&s, IB_EV_PEER_INFO), -1, "peer info twice");
  cr_expect_eq(ib_conn_step(&s, IB_EV_RTR), 0);
  cr_expect_eq(ib_conn_step(&s, IB_EV_RTS), 0);
  cr_expect_eq(s, IB_CONN_RTS);
  cr_expect_str_eq(ib_conn_state_name(s), "connected");
  cr_expect_eq(ib_conn_step(&s, IB_EV_CREATED), -1);
  cr_expect_eq(ib_conn_step(&s, IB_EV_FAIL), 0);
  cr_expect_eq(s, IB_CONN_ERROR);
  cr_expect_eq(ib_conn_step(&s, IB_EV_RTS), -1, "no way back from error");
  cr_expect_eq(ib_conn_step(&s, IB_EV_CLOSE), 0);
  cr_expect_eq(ib_conn_step(&s, IB_EV_FAIL), -1, "closed stays closed");
  cr_expect_eq(s, IB_CONN_CLOSED);
}

/* ---- wire format ------------------------------------------------------ */

static ib_wire_info sample(void) {
  ib_wire_info w;
  memset(&w, 0, sizeof(w));
  w.qpn = 0x123456;
  w.psn = 0xabcdef;
  w.lid = 0xbeef;
  w.port = 2;
  w.mtu = 5;
  for (int i = 0; i < 16; i++)
    w.gid[i] = (uint8_t)(i * 17);
  w.slots_addr = 0x7f0011223344ull;
  w.slots_rkey = 0xdeadbeef;
  w.credit_addr = 0x7f0055667788ull;
  w.credit_rkey = 0x12345678;
  w.nslots = 8;
  w.slot_bytes = (1u << 20) + 3;
  w.rank = 3;
  w.channel = 1;
  return w;
}

Test(ib_wire, round_trip) {
  ib_wire_info w = sample(), back;
  uint8_t buf[IB_WIRE_BYTES];
  ib_wire_pack(&w, buf);
  cr_assert_eq(ib_wire_unpack(buf, &back, 8, (1u << 20) + 3, 3, 1),
               BRAID_SUCCESS, "%s", err_msg());
  cr_expect_eq(memcmp(&w, &back, sizeof(w)), 0, "fields differ after unpack");
  cr_expect_eq(buf[0], 0x42, "little-endian magic");
}

Test(ib_wire, mismatches_are_named) {
  ib_wire_info w = sample(), back;
  uint8_t buf[IB_WIRE_BYTES];
  ib_wire_pack(&w, buf);
  cr_expect_eq(ib_wire_unpack(buf, &back, 4, (1u << 20) + 3, 3, 1),
               BRAID_ERR_INVALID_ARG);
  cr_expect_neq(strstr(err_msg(), "slots"), NULL, "%s", err_msg());
  cr_expect_eq(ib_wire_unpack(buf, &back, 8, 4096, 3, 1),
               BRAID_ERR_INVALID_ARG);
  cr_expect_eq(ib_wire_unpack(buf, &back, 8, (1u << 20) + 3, 2, 1),
               BRAID_ERR_INVALID_ARG);
  cr_expect_neq(strstr(err_msg(), "rank 3"), NULL, "%s", err_msg());
  buf[0] ^= 1;
  cr_expect_eq(ib_wire_unpack(buf, &back, 8, (1u << 20) + 3, 3, 1),
               BRAID_ERR_INVALID_ARG);
  cr_expect_neq(strstr(err_msg(), "magic"), NULL, "%s", err_msg());
  w.qpn = 0;
  ib_wire_pack(&w, buf);
  cr_expect_eq(ib_wire_unpack(buf, &back, 8, (1u << 20) + 3, 3, 1),
               BRAID_ERR_INVALID_ARG, "QPN 0 is invalid");
}

/* ---- registration cache ----------------------------------------------- */

typedef struct fake_dev {
  int regs, deregs, live, fail;
  size_t last_len;
} fake_dev;

static int fake_reg(void *ctx, void *addr, size_t len, void **handle,
                    void **key) {
  fake_dev *d = ctx;
  if (d->fail)
    return -1;
  d->regs++;
  d->live++;
  d->last_len = len;
  *handle = addr != NULL ? addr : (void *)1;
  *key = (void *)(uintptr_t)(0x1000 + d->regs);
  return 0;
}

static void fake_dereg(void *ctx, void *handle) {
  fake_dev *d = ctx;
  (void)handle;
  d->deregs++;
  d->live--;
}

Test(regcache, hits_misses_alignment) {
  fake_dev d = {0};
  tp_regcache c;
  rc_init(&c, 4, fake_reg, fake_dereg, &d);
  char *buf = aligned_alloc(4096, 4 * 4096);
  void *k1, *k2;
  int e1, e2;
  cr_assert_eq(rc_get(&c, buf + 100, 200, &k1, &e1), 0);
  cr_expect_eq(d.regs, 1);
  cr_expect_eq(d.last_len, 4096u, "registration is page-aligned");
  cr_assert_eq(rc_get(&c, buf + 1000, 3000, &k2, &e2), 0);
  cr_expect_eq(d.regs, 1, "inside the same page: a hit");
  cr_expect_eq(k1, k2);
  cr_expect_eq(c.hits, 1u);
  rc_put(&c, e1);
  rc_put(&c, e2);
  cr_assert_eq(rc_get(&c, buf + 4000, 200, &k2, &e2), 0);
  cr_expect_eq(d.regs, 2, "crossing a page end is a new registration");
  cr_expect_eq(d.last_len, 8192u);
  rc_put(&c, e2);
  void *k0;
  int e0;
  cr_expect_eq(rc_get(&c, NULL, 0, &k0, &e0), 0, "empty range");
  cr_expect_null(k0);
  cr_expect_eq(e0, -1);
  rc_free(&c);
  cr_expect_eq(d.live, 0, "everything deregistered");
  free(buf);
}

Test(regcache, lru_eviction_spares_busy_entries) {
  fake_dev d = {0};
  tp_regcache c;
  rc_init(&c, 2, fake_reg, fake_dereg, &d);
  char *buf = aligned_alloc(4096, 8 * 4096);
  void *k;
  int ea, eb, ec;
  cr_assert_eq(rc_get(&c, buf, 10, &k, &ea), 0);            /* page 0, busy */
  cr_assert_eq(rc_get(&c, buf + 2 * 4096, 10, &k, &eb), 0); /* page 2 */
  rc_put(&c, eb);
  cr_assert_eq(rc_get(&c, buf + 4 * 4096, 10, &k, &ec), 0); /* evicts page 2 */
  cr_expect_eq(c.evictions, 1u);
  cr_expect_eq(d.deregs, 1);
  int e;
  cr_assert_eq(rc_get(&c, buf + 5, 1, &k, &e), 0);
  cr_expect_eq(d.regs, 3, "page 0 (busy) survived the eviction");
  rc_put(&c, e);
  rc_put(&c, ea);
  rc_put(&c, ec);
  cr_expect_eq(rc_invalidate(&c, buf, 8 * 4096), 2, "two idle entries");
  cr_expect_eq(d.live, 0);
  d.fail = 1;
  cr_expect_eq(rc_get(&c, buf, 10, &k, &e), -1, "register failure surfaces");
  rc_free(&c);
  free(buf);
}

Test(regcache, grows_when_all_entries_busy) {
  fake_dev d = {0};
  tp_regcache c;
  rc_init(&c, 1, fake_reg, fake_dereg, &d);
  char *buf = aligned_alloc(4096, 20 * 4096);
  int e[10];
  void *k;
  for (int i = 0; i < 10; i++)
    cr_assert_eq(rc_get(&c, buf + 2 * i * 4096, 10, &k, &e[i]), 0);
  cr_expect_eq(d.live, 10, "busy entries are never evicted");
  for (int i = 0; i < 10; i++)
    rc_put(&c, e[i]);
  rc_free(&c);
  cr_expect_eq(d.live, 0);
  free(buf);
}
