/*
 * Schedule files: a schedule as JSON, to read and write (DESIGN §1, the fifth
 * consumer). The format is documented in docs/SCHEDULES.md. A file holds one
 * schedule object or an array of them.
 */
#ifndef BRAID_COLLECTIVES_SCHED_FILE_H
#define BRAID_COLLECTIVES_SCHED_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "schedule.h"
#include "src/log.h" /* braid_result; err_msg() reads the message */

/* Writes one schedule as a JSON object. 0 or -1 (I/O error). */
int sched_file_write(const sched *s, FILE *f);
/* Writes one schedule to the file at path, if a schedule file may hold it
 * (SCHED_FILE_MAX_* of ranks, channels, steps and bytes: what
 * sched_file_load takes). BRAID_SUCCESS, or an error with a message (ERR)
 * naming the path and the limit or the I/O error; nothing is left at path
 * then. */
braid_result sched_file_save(const sched *s, const char *path);
/* Writes several as a JSON array. */
int sched_file_write_all(sched *const *s, int n, FILE *f);

/* Parses JSON text (one object or an array). On success *out is an array of
 * *n schedules (free each with sched_free, then free the array). Errors
 * (BRAID_ERR_INVALID_ARG for a file braid refuses; ERR) name the file, line
 * and column, and what was wrong. Every schedule is run through the verifier
 * (out of place and in place) before it is returned: a schedule that fails
 * is an error naming its position in the file. */
braid_result sched_file_parse(const char *buf, size_t len, const char *fname,
                              sched ***out, int *n);
/* Reads the file and parses it; a file that cannot be read is
 * BRAID_ERR_SYSTEM ("path: cannot open: ..."). */
braid_result sched_file_load(const char *path, sched ***out, int *n);

#endif
