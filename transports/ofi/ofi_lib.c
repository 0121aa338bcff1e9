/*
 * libfabric, opened when the ofi transport is first needed (the probe of a
 * communicator with ranks on other hosts, or its setup), not when libbraid
 * loads. Debian's libfabric links the PSM providers, whose libraries'
 * constructors calibrate a clock in 782 sleeps of 125 us and narrow the
 * process to CPU 0 meanwhile: a program linked with libfabric took 0.20 s
 * to start where one without took 0.00 (`/usr/bin/time`, an empty main).
 * Every program, test and Python import of braid paid it; now only a
 * process that looks for a network fabric does, once.
 *
 * The few functions of libfabric's that are symbols (the rest are inline
 * calls through the objects' operation tables) are looked up here, and
 * what loading it does to the process's signals is undone (ofi_fn, below).
 */
#include "transports/ofi/ofi_int.h"

#ifdef BRAID_HAVE_OFI

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

ofi_lib ofi_fn;

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static int lib_ok;        /* every function found */
static char lib_why[256]; /* else why not */

/* The signals whose handlers libinfinipath (a PSM provider's library)
 * installs from its constructor: they write a backtrace file into the
 * working directory and call exit() inside the handler, which can deadlock
 * a rank that its launcher sends SIGTERM. */
static const int psm_sigs[] = {SIGINT, SIGILL,  SIGABRT,
                               SIGBUS, SIGSEGV, SIGTERM};
#define NSIGS (sizeof psm_sigs / sizeof *psm_sigs)

/* Whether the handler of `sa` lives in libinfinipath. */
static int psm_handler(const struct sigaction *sa) {
  if (sa->sa_handler == SIG_DFL || sa->sa_handler == SIG_IGN)
    return 0;
  void *fn = (sa->sa_flags & SA_SIGINFO) ? (void *)sa->sa_sigaction
                                         : (void *)sa->sa_handler;
  Dl_info di;
  return dladdr(fn, &di) != 0 && di.dli_fname != NULL &&
         strstr(di.dli_fname, "libinfinipath") != NULL;
}

/* Stores dlsym(h, name) in the function pointer at fnp; 0 if missing. */
static int sym(void *h, const char *name, void *fnp) {
  void *p = dlsym(h, name);
  if (p == NULL) {
    snprintf(lib_why, sizeof lib_why, "libfabric.so.1 has no %s", name);
    return 0;
  }
  memcpy(fnp, &p, sizeof p);
  return 1;
}

static void lib_open(void) {
  struct sigaction before[NSIGS];
  for (size_t i = 0; i < NSIGS; i++)
    (void)sigaction(psm_sigs[i], NULL, &before[i]);
  void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    snprintf(lib_why, sizeof lib_why, "%s", e ? e : "dlopen failed");
    return;
  }
  /* what the program had before, where the providers replaced it (its own
   * handlers stay: Python's KeyboardInterrupt, a debugger's) */
  for (size_t i = 0; i < NSIGS; i++) {
    struct sigaction now;
    if (sigaction(psm_sigs[i], NULL, &now) == 0 && psm_handler(&now))
      (void)sigaction(psm_sigs[i], &before[i], NULL);
  }
  if (!sym(h, "fi_getinfo", &ofi_fn.getinfo) ||
      !sym(h, "fi_freeinfo", &ofi_fn.freeinfo) ||
      !sym(h, "fi_dupinfo", &ofi_fn.dupinfo) ||
      !sym(h, "fi_fabric", &ofi_fn.fabric) ||
      !sym(h, "fi_strerror", &ofi_fn.strerror))
    return; /* lib_why says which; the library stays loaded */
  lib_ok = 1;
}

braid_result ofi_lib_load(void) {
  (void)pthread_once(&lib_once, lib_open);
  if (!lib_ok)
    return ERR(BRAID_ERR_UNSUPPORTED,
               "ofi: cannot load libfabric (%s): install libfabric1, or use "
               "BRAID_TRANSPORT=tcp",
               lib_why[0] ? lib_why : "unknown reason");
  return BRAID_SUCCESS;
}

#endif /* BRAID_HAVE_OFI */
