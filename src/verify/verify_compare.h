/* The value comparison of `unroll verify` (verify.c finds the pairs; this compares
 * them), spread over the cores: with 100,000 small leaves, opening each pair of arrays
 * (two zarr metadata parses) and reading its chunks was half of a verify, on one thread.
 *
 * A comparison is a group: one input leaf and the output leaves that come from it (the
 * layers of a stacked leaf, or one output leaf). It is driven by the input's chunks: each
 * input chunk is decoded once, as a stream, piece by piece (UR_VCMP_PIECE_BYTES, or the
 * output chunks of every member in it when those are larger), and every member whose slice
 * lies in a piece is compared there, output chunk by output chunk. A stacked leaf whose
 * chunks hold all its layers (one device shard of Orbax: up to 2 GiB) was decoded once per
 * layer when each output leaf read its own input box: 19 times at 19 layers. Memory per
 * thread: one piece of an input chunk, one output chunk and its expected values.
 *
 * The matching thread submits groups in the order it finds them; helper threads run them
 * concurrently (the submitting thread too, when every place in the queue is taken); their
 * results are handed back to `apply` on the submitting thread, member by member in the order
 * submitted. Each member's issues carry its tag (verify.c's issue key), so the report
 * keeps the first issues in output-leaf order whatever order the groups run in. */
#ifndef UNROLL_PLAN_VERIFY_COMPARE_H
#define UNROLL_PLAN_VERIFY_COMPARE_H

#include "unroll/orbax.h"
#include "unroll/verify.h"

#define UR_VCMP_VALUE_ISSUES 3 /* value issues reported per output leaf */
#define UR_VCMP_MAX_FIX 3      /* input axes indexed by a slice */

/* Output leaf o is the group's input leaf with index fidx[m] taken on input axis fax[m] for
 * m < nfix (fax increasing; nfix 0: the whole input). The names label its issues; tag is
 * handed back with its result. */
typedef struct {
    const ur_orbax_leaf *o;
    int nfix;
    int fax[UR_VCMP_MAX_FIX];
    int64_t fidx[UR_VCMP_MAX_FIX];
    const char *oname, *src;
    size_t tag;
} ur_vcmp_member;

/* Members m[0..n) of input leaf i, cast to `want`. */
typedef struct {
    const ur_orbax_leaf *i;
    ur_dtype want;
    size_t n;
    const ur_vcmp_member *m;
    /* Its buffers are large (UR_VCMP_EXCLUSIVE_BYTES or more): it runs alone, on the
     * submitting thread once every earlier comparison is done, so that the memory held for
     * comparisons stays what one thread would hold for the largest, whatever the cores. */
    int exclusive;
} ur_vcmp_group;

#define UR_VCMP_EXCLUSIVE_BYTES ((uint64_t)32 << 20)
/* Input bytes a piece of a chunk holds, where the output's chunks allow it. */
#define UR_VCMP_PIECE_BYTES ((uint64_t)16 << 20)

typedef struct {
    uint64_t elements, elements_bad;
    int bad_leaf; /* some element differs */
    int n_value;  /* issues in value[] */
    /* The first differences in output-chunk order (the output's chunks in C order, the
     * elements of each in C order), whatever order the input's chunks visit them in: at[k]
     * is value[k]'s place (output chunk, element within it). */
    ur_verify_issue value[UR_VCMP_VALUE_ISSUES];
    uint64_t at[UR_VCMP_VALUE_ISSUES][2];
} ur_vcmp_result;

typedef struct ur_vcmp ur_vcmp;
/* Called on the submitting thread, in submission order, with a member's tag. */
typedef void (*ur_vcmp_apply_fn)(void *ctx, size_t tag, const ur_vcmp_result *res);

/* A comparer of arrays of `in` and `out` with `helpers` helper threads (0: every comparison
 * runs in submit), decoding input chunks in pieces of piece_bytes (0: UR_VCMP_PIECE_BYTES). */
int ur_vcmp_create(ur_vcmp **out_cmp, ur_orbax_ckpt *in, ur_orbax_ckpt *out, int helpers,
                   uint64_t piece_bytes, ur_vcmp_apply_fn apply, void *ctx, ur_err *err);
/* Queue one group (copied, names included). A negative code: an earlier comparison failed
 * (the first one's error), or this one when it ran here; submit no more then. */
int ur_vcmp_submit(ur_vcmp *c, const ur_vcmp_group *g, ur_err *err);
/* Wait for every comparison and apply the rest; the first failure's error, if any. */
int ur_vcmp_finish(ur_vcmp *c, ur_err *err);
/* Input chunks decoded by the comparisons handed back so far (for the report and tests:
 * each chunk a group reads counts once). */
uint64_t ur_vcmp_chunks_decoded(ur_vcmp *c);
void ur_vcmp_free(ur_vcmp *c);

#endif
