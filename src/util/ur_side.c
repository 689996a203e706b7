/* ur_side: one function on a second thread (see unroll/side.h). */
#include "unroll/side.h"

#include <string.h>

static void *side_main(void *arg)
{
    ur_side *s = arg;
    s->rc = s->fn(s->ctx, &s->err);
    return NULL;
}

void ur_side_start(ur_side *s, int (*fn)(void *ctx, ur_err *err), void *ctx)
{
    memset(s, 0, sizeof *s);
    s->fn = fn;
    s->ctx = ctx;
    ur_err_clear(&s->err);
    s->started = pthread_create(&s->tid, NULL, side_main, s) == 0;
    if (!s->started) {
        side_main(s);
    }
}

int ur_side_join(ur_side *s)
{
    if (s->started) {
        pthread_join(s->tid, NULL);
        s->started = 0;
    }
    return s->rc;
}
