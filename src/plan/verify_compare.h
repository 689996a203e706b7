/* The value comparison of `unroll verify` (plan_verify.c finds the pairs; this compares
 * them), spread over the cores: with 100,000 small leaves, opening each pair of arrays
 * (two zarr metadata parses) and reading its chunks was half of a verify, on one thread.
 *
 * The matching thread submits comparisons in output-leaf order; helper threads run them
 * concurrently (the submitting thread too, when every place in the queue is taken); their
 * results are handed back to `apply` on the submitting thread, in the order submitted, so
 * the report is what one thread would write. */
#ifndef UNROLL_PLAN_VERIFY_COMPARE_H
#define UNROLL_PLAN_VERIFY_COMPARE_H

#include "unroll/orbax.h"
#include "unroll/plan_verify.h"

#define UR_VCMP_VALUE_ISSUES 3 /* value issues reported per output leaf */
#define UR_VCMP_MAX_FIX 3      /* input axes indexed by a slice */

/* Output leaf o against input leaf i, cast to `want`, with index fidx[m] taken on input axis
 * fax[m] for m < nfix (fax increasing; nfix 0: the whole input). The names label issues. */
typedef struct {
    const ur_orbax_leaf *o, *i;
    ur_dtype want;
    int nfix;
    int fax[UR_VCMP_MAX_FIX];
    int64_t fidx[UR_VCMP_MAX_FIX];
    const char *oname, *src;
    /* Its buffers are large (UR_VCMP_EXCLUSIVE_BYTES or more a chunk): it runs alone, on the
     * submitting thread once every earlier comparison is done, so that the memory held for
     * comparisons stays what one thread would hold for the largest, whatever the cores. */
    int exclusive;
} ur_vcmp_req;

#define UR_VCMP_EXCLUSIVE_BYTES ((uint64_t)16 << 20)

typedef struct {
    uint64_t elements, elements_bad;
    int bad_leaf; /* some element differs */
    int n_value;  /* issues in value[] */
    ur_verify_issue value[UR_VCMP_VALUE_ISSUES];
} ur_vcmp_result;

typedef struct ur_vcmp ur_vcmp;
/* Called on the submitting thread, in submission order, with the tag given to submit. */
typedef void (*ur_vcmp_apply_fn)(void *ctx, size_t tag, const ur_vcmp_result *res);

/* A comparer of arrays of `in` and `out` with `helpers` helper threads (0: every comparison
 * runs in submit). */
int ur_vcmp_create(ur_vcmp **out_cmp, ur_orbax_ckpt *in, ur_orbax_ckpt *out, int helpers,
                   ur_vcmp_apply_fn apply, void *ctx, ur_err *err);
/* Queue one comparison (its strings are copied). A negative code: an earlier comparison
 * failed (the first one's error), or this one when it ran here; submit no more then. */
int ur_vcmp_submit(ur_vcmp *c, size_t tag, const ur_vcmp_req *req, ur_err *err);
/* Wait for every comparison and apply the rest; the first failure's error, if any. */
int ur_vcmp_finish(ur_vcmp *c, ur_err *err);
void ur_vcmp_free(ur_vcmp *c);

#endif
