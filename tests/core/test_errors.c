/*
 * The library's error idiom (src/log.h, docs/CONTRIBUTING.md "Errors"): ERR
 * records one message per thread and gives the result back, ERR_WRAP puts a
 * prefix before the message found below, CHECKR propagates, and comm_fail
 * gives the message to the communicator as well.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/comm.h"
#include "src/log.h"

static braid_result leaf(int v) {
  if (v < 0)
    return ERR(BRAID_ERR_INVALID_ARG, "leaf: v is %d, below 0", v);
  return BRAID_SUCCESS;
}

static braid_result middle(int v) {
  CHECKR(leaf(v));
  return BRAID_SUCCESS;
}

static braid_result top(int v) {
  braid_result r = middle(v);
  if (r != BRAID_SUCCESS)
    return ERR_WRAP(r, "top(%d)", v);
  return r;
}

Test(errors, err_records_and_returns) {
  err_clear();
  cr_assert_str_eq(err_msg(), "");
  cr_assert_eq(middle(1), BRAID_SUCCESS);
  cr_assert_str_eq(err_msg(), "", "a success records nothing");
  cr_assert_eq(middle(-3), BRAID_ERR_INVALID_ARG);
  cr_assert_str_eq(err_msg(), "leaf: v is -3, below 0");
  cr_assert_eq(leaf(-4), BRAID_ERR_INVALID_ARG);
  cr_assert_str_eq(err_msg(), "leaf: v is -4, below 0", "the last one wins");
}

Test(errors, wrap_prefixes_the_message_below) {
  err_clear();
  cr_assert_eq(top(-2), BRAID_ERR_INVALID_ARG);
  cr_assert_str_eq(err_msg(), "top(-2): leaf: v is -2, below 0");
  err_clear();
  (void)ERR_WRAP(BRAID_ERR_TIMEOUT, "waiting");
  cr_assert_str_eq(err_msg(), "waiting: timed out",
                   "with nothing below, the result's name follows");
  cr_assert_str_eq(err_why(BRAID_ERR_NOMEM), "waiting: timed out");
  err_clear();
  cr_assert_str_eq(err_why(BRAID_ERR_NOMEM), "out of memory");
}

Test(errors, long_messages_are_cut_not_overrun) {
  char big[2000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  (void)ERR(BRAID_ERR_SYSTEM, "%s", big);
  cr_assert_eq(strlen(err_msg()), 511);
  (void)ERR_WRAP(BRAID_ERR_SYSTEM, "%s", big);
  cr_assert_eq(strlen(err_msg()), 511);
  (void)ERR(BRAID_ERR_SYSTEM, "short");
  (void)ERR_WRAP(BRAID_ERR_SYSTEM, "%.505s", big);
  cr_assert_eq(strlen(err_msg()), 511);
  cr_assert(strstr(err_msg(), ": sho") != NULL, "%s", err_msg());
}

Test(errors, the_message_may_name_itself) {
  (void)ERR(BRAID_ERR_REMOTE, "peer 3 left");
  (void)ERR(BRAID_ERR_REMOTE, "setup: %s (%d)", err_msg(), 2);
  cr_assert_str_eq(err_msg(), "setup: peer 3 left (2)");
  (void)ERR_WRAP(BRAID_ERR_REMOTE, "again %s", err_msg());
  cr_assert_str_eq(err_msg(),
                   "again setup: peer 3 left (2): setup: peer 3 left (2)");
}

static void *other_thread(void *arg) {
  (void)arg;
  (void)ERR(BRAID_ERR_REMOTE, "the other thread's failure");
  return NULL;
}

Test(errors, one_message_per_thread) {
  (void)ERR(BRAID_ERR_INVALID_ARG, "this thread's failure");
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, other_thread, NULL), 0);
  pthread_join(t, NULL);
  cr_assert_str_eq(err_msg(), "this thread's failure");
}

Test(errors, the_communicator_keeps_the_message) {
  braid_comm c;
  memset(&c, 0, sizeof c);
  pthread_mutex_init(&c.err_lock, NULL);
  err_clear();
  cr_assert_eq(middle(-1), BRAID_ERR_INVALID_ARG);
  cr_assert_eq(comm_fail(&c, BRAID_ERR_INVALID_ARG, "setup: %s", err_msg()),
               BRAID_ERR_INVALID_ARG);
  cr_assert_str_eq(braid_comm_last_error(&c), "setup: leaf: v is -1, below 0");
  cr_assert_str_eq(err_msg(), "setup: leaf: v is -1, below 0");
  cr_assert_eq(comm_fail(&c, BRAID_ERR_NOMEM, "no room for %d", 7),
               BRAID_ERR_NOMEM);
  cr_assert_str_eq(braid_comm_last_error(&c), "no room for 7");
  pthread_mutex_destroy(&c.err_lock);
}

/* A call refused for a NULL communicator leaves its reason as the calling
 * thread's last error (braid_comm_last_error(NULL)), not an earlier one's:
 * braid_comm_get_async_error did not. */
Test(errors, a_null_communicator_is_the_threads_last_error) {
  braid_result ae = BRAID_SUCCESS;
  cr_assert_eq(braid_comm_abort(NULL), BRAID_ERR_INVALID_ARG);
  cr_assert(strstr(braid_comm_last_error(NULL), "braid_comm_abort") != NULL);
  cr_assert_eq(braid_comm_get_async_error(NULL, &ae), BRAID_ERR_INVALID_ARG);
  cr_assert_str_eq(braid_comm_last_error(NULL),
                   "braid_comm_get_async_error: comm is NULL");
}

/* A malformed BRAID_ALGO fails communicator creation, with the variable's
 * own message: creation went on, and the first collective inside it (an
 * allgather) failed instead, its message beginning "allgather: no
 * algorithm". (Criterion runs each test in a process of its own, which
 * reads the environment afresh.) */
Test(errors, a_bad_algorithm_filter_fails_init_by_name) {
  setenv("BRAID_ALGO", "bogus", 1);
  braid_unique_id id;
  cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
  braid_comm *c = NULL;
  braid_result r = braid_comm_init(&c, 1, &id, 0, NULL);
  cr_assert_eq(r, BRAID_ERR_INVALID_ARG, "init gave %s",
               braid_result_string(r));
  const char *m = braid_comm_last_error(c); /* c NULL: this thread's */
  cr_assert(strncmp(m, "BRAID_ALGO=bogus: ", 18) == 0 &&
                strstr(m, "unknown algorithm \"bogus\"") != NULL,
            "init's message: %s", m);
  if (c != NULL)
    braid_comm_destroy(c);
}

/* A unique id serves one rendezvous: making a second communicator with it,
 * as the same rank, is refused at once by name. It waited out the whole
 * timeout for a root that had closed, then named the root's address. */
Test(errors, an_id_used_twice_is_refused_at_once) {
  setenv("BRAID_TIMEOUT", "5", 1);
  braid_unique_id id;
  cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS);
  braid_comm *c = NULL, *c2 = NULL;
  cr_assert_eq(braid_comm_init(&c, 1, &id, 0, NULL), BRAID_SUCCESS, "%s",
               braid_comm_last_error(c));
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  braid_result r = braid_comm_init(&c2, 1, &id, 0, NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
  const char *m = braid_comm_last_error(c2);
  cr_expect_eq(r, BRAID_ERR_INVALID_ARG, "second init: %s: %s",
               braid_result_string(r), m);
  cr_expect(strstr(m, "serves one rendezvous") != NULL, "message: %s", m);
  cr_expect(s < 2.0, "refused after %.2f s", s);
  if (c2 != NULL)
    braid_comm_destroy(c2);
  braid_comm_destroy(c);
}
