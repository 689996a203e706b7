/* One function run on a second thread while the calling thread does other work: the
 * serial stretches of a run of many small arrays (the output's metadata and its OCDBT
 * B+tree at the commit, the two checkpoints' metadata in verify) are independent pieces of
 * work, and two cores do two of them at once. Where no thread can be started, ur_side_start
 * runs the function itself before it returns: the results are the same, only later. */
#ifndef UNROLL_SIDE_H
#define UNROLL_SIDE_H

#include "unroll/err.h"

#include <pthread.h>

typedef struct {
    int (*fn)(void *ctx, ur_err *err);
    void *ctx;
    int rc;     /* fn's result, once joined */
    ur_err err; /* fn's error, once joined */
    pthread_t tid;
    int started;
} ur_side;

/* Start fn(ctx) on a second thread (or run it now). */
void ur_side_start(ur_side *s, int (*fn)(void *ctx, ur_err *err), void *ctx);
/* Wait for it; returns its result (its error in s->err). */
int ur_side_join(ur_side *s);

#endif
