/*
 * Logging (BRAID_DEBUG, BRAID_DEBUG_SUBSYS, BRAID_DEBUG_FILE) and error
 * propagation. Levels: NONE < WARN < INFO < TRACE.
 */
#ifndef BRAID_SRC_LOG_H
#define BRAID_SRC_LOG_H

#include <stdarg.h>
#include <stddef.h>

#include "braid.h"

enum log_level { LOG_NONE = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_TRACE = 3 };
enum log_subsys {
  LOG_INIT = 1u << 0,
  LOG_BOOT = 1u << 1,
  LOG_NET = 1u << 2,
  LOG_SHM = 1u << 3,
  LOG_COLL = 1u << 4,
  LOG_SCHED = 1u << 5,
  LOG_TOPO = 1u << 6,
  LOG_ENV = 1u << 7,
  LOG_ALL = 0xffffffffu
};

extern int log_level_now;
void log_msg(int level, unsigned subsys, const char *file, int line,
             const char *fmt, ...) __attribute__((format(printf, 5, 6)));
int log_enabled(int level, unsigned subsys);
/* A file name from a pattern: %h the host name, %p the pid, and %r `rank`
 * and %c `comm` when given (rank >= 0, comm not NULL; else kept as is). */
void log_path(const char *pattern, int rank, const char *comm, char *out,
              size_t len);
/* Called once by cfg_get() with the BRAID_DEBUG* values. */
void log_configure(const char *level, const char *subsys, const char *file);

#define WARN(sub, ...) log_msg(LOG_WARN, sub, __FILE__, __LINE__, __VA_ARGS__)
#define INFO(sub, ...)                                                         \
  do {                                                                         \
    if (log_level_now >= LOG_INFO)                                             \
      log_msg(LOG_INFO, sub, __FILE__, __LINE__, __VA_ARGS__);                 \
  } while (0)
#define TRACE(sub, ...)                                                        \
  do {                                                                         \
    if (log_level_now >= LOG_TRACE)                                            \
      log_msg(LOG_TRACE, sub, __FILE__, __LINE__, __VA_ARGS__);                \
  } while (0)

/* ---- Errors: the library's one idiom (docs/CONTRIBUTING.md, "Errors") ----
 * A function that can fail returns a braid_result (a transport's vtable
 * adds TP_AGAIN, "not yet", to those codes). Where a failure is found, the
 * code says once what went wrong and returns:
 *
 *     return ERR(BRAID_ERR_INVALID_ARG, "root %d is not a rank", root);
 *
 * ERR records the message for the calling thread (replacing any earlier
 * one), logs it with file:line at TRACE and gives the result back. Callers
 * propagate the result with CHECKR, or keep it and go to their cleanup;
 * ERR_WRAP puts a prefix before the message found below ("topology: ...").
 * In src/, the failure point with a communicator at hand is comm_fail
 * (src/comm.h): ERR, and the message becomes the communicator's last error,
 * which braid_comm_last_error returns; a failure from below reaches it as
 * comm_fail(c, r, "prefix: %s", err_msg()). */
braid_result err_at(const char *file, int line, braid_result r, const char *fmt,
                    ...) __attribute__((format(printf, 4, 5)));
braid_result err_wrap_at(const char *file, int line, braid_result r,
                         const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* err_at with its arguments in ap: for a module's own failure helper that
 * also notes where the failure was (a parser's position, a state's result). */
braid_result err_vat(const char *file, int line, braid_result r,
                     const char *fmt, va_list ap);
/* The result is the macro's own value (r evaluated once), so that the
 * compiler and the static analyzer see a failure leave as a failure. */
#define ERR(r, ...)                                                            \
  __extension__({                                                              \
    braid_result err_r__ = (r);                                                \
    (void)err_at(__FILE__, __LINE__, err_r__, __VA_ARGS__);                    \
    err_r__;                                                                   \
  })
#define ERR_WRAP(r, ...)                                                       \
  __extension__({                                                              \
    braid_result err_r__ = (r);                                                \
    (void)err_wrap_at(__FILE__, __LINE__, err_r__, __VA_ARGS__);               \
    err_r__;                                                                   \
  })
/* The calling thread's last message ("" when none since err_clear). */
const char *err_msg(void);
/* err_msg, or r's name when no message was recorded. */
const char *err_why(braid_result r);
void err_clear(void);

/* Propagate a non-success result, noting file:line at TRACE. */
#define CHECKR(expr)                                                           \
  do {                                                                         \
    braid_result r__ = (expr);                                                 \
    if (r__ != BRAID_SUCCESS) {                                                \
      TRACE(LOG_ALL, "%s -> %s", #expr, braid_result_string(r__));             \
      return r__;                                                              \
    }                                                                          \
  } while (0)

#endif
