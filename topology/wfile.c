/*
 * Files written whole or not at all (topo.h, topo_wfile): beside the path,
 * then renamed onto it. Used by the topology writers (io.c, topo_save) and
 * the schedule files (collectives/sched_file.c), apart from the parsers so
 * that the fuzz targets link it alone.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/log.h"
#include "topology/topo.h"

braid_result topo_wfile_open(topo_wfile *w, const char *path) {
  memset(w, 0, sizeof *w);
  w->path = path;
  if (!strcmp(path, "-")) {
    w->f = stdout;
    return BRAID_SUCCESS;
  }
  struct stat st;
  int exists = stat(path, &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    w->f = fopen(path, "w");
  } else {
    size_t n = strlen(path) + 16;
    if ((w->tmp = malloc(n)) == NULL)
      return ERR(BRAID_ERR_NOMEM, "%s: no memory", path);
    snprintf(w->tmp, n, "%s.tmpXXXXXX", path);
    int fd = mkstemp(w->tmp); /* 0600: given the file's mode, or 0644 */
    if (fd >= 0)
      (void)fchmod(fd, exists ? st.st_mode & 07777 : 0644);
    w->f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (fd >= 0 && w->f == NULL)
      close(fd);
  }
  if (w->f == NULL) {
    int err = errno;
    if (w->tmp != NULL)
      unlink(w->tmp);
    free(w->tmp);
    w->tmp = NULL;
    return ERR(BRAID_ERR_SYSTEM, "%s: cannot write: %s", path, strerror(err));
  }
  return BRAID_SUCCESS;
}

braid_result topo_wfile_close(topo_wfile *w, int failed) {
  int err = 0;
  if (w->f == NULL)
    return BRAID_SUCCESS;
  if (fflush(w->f) != 0 || ferror(w->f))
    err = errno ? errno : EIO;
  if (w->f != stdout && fclose(w->f) != 0 && !err)
    err = errno ? errno : EIO;
  w->f = NULL;
  if (!failed && !err && w->tmp != NULL && rename(w->tmp, w->path) != 0)
    err = errno;
  if (w->tmp != NULL && (failed || err))
    unlink(w->tmp);
  free(w->tmp);
  w->tmp = NULL;
  if (err && !failed)
    return ERR(BRAID_ERR_SYSTEM, "%s: cannot write: %s", w->path,
               strerror(err));
  return BRAID_SUCCESS;
}
