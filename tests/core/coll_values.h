/*
 * The correctness matrix's values (coll_values.c): what each rank puts in
 * each element of each dtype, what a reduction of them must give, exactly
 * computed, and the checks of a buffer against them. Used by coll_matrix.c
 * (tests/core and, on device buffers, tests/cuda).
 */
#ifndef BRAID_TESTS_CORE_COLL_VALUES_H
#define BRAID_TESTS_CORE_COLL_VALUES_H

#include <stddef.h>
#include <stdint.h>

#include "braid.h"

#define EXPECT (-1) /* "rank" of the reduction's expected values */

extern int g_rank, g_n;
extern long g_pass, g_fail;

uint16_t f2h(float f);
float h2f(uint16_t h);
double f82d(uint8_t x, int e5m2);
uint8_t f2f8(double v, int e5m2);
void put(void *buf, size_t i, braid_dtype dt, int64_t x);
double get(const void *buf, size_t i, braid_dtype dt);
double as_dtype(int64_t x, braid_dtype dt);
int is_fp8(braid_dtype dt);
int vop_of(braid_dtype dt, int op);
size_t bool_period(void);
int64_t val(int r, size_t i, int op);
int64_t reduce_expect_slow(size_t i, int op);
int64_t reduce_expect(size_t i, int op);
double want_reduce(size_t i, int op, braid_dtype dt);
double want_data(int r, size_t i, braid_dtype dt);
size_t period_of(int op);
void fill(void *buf, size_t n, braid_dtype dt, int r, int op, size_t i0);
int matches(const void *buf, size_t n, braid_dtype dt, int r, int op,
            size_t i0);
int blocks_match(const void *buf, size_t n, braid_dtype dt, int nb,
                 int same_start);
int report(const char *what, braid_dtype dt, int op, size_t count, int inplace,
           size_t i, double got, double want);

#endif
