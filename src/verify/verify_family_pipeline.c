/* verify: pipeline stacks (verify_family.h), as MaxText's pipeline parallelism writes them
 * (nnx_decoders.py _init_pipeline_generic and _init_pipeline_deepseek, pipeline.py):
 *
 *   output D/layers_<g>/R     <- a pipeline stack D/pipeline_module/layers/... of shape
 *                                [R?, S, ..., lps?, ...], g = (r*S + s)*lps + j, then
 *                                D/layers_outside_pipeline/R for the layers after it
 *   output D/moe_layers_<g>/R <- DeepSeek: D/moe_layers_outside_pipeline/R for its first MoE
 *                                layers (run before the pipeline), then the stack for the
 *                                others (g - those = (r*S + s)*lps + j); D/dense_layers is a
 *                                plain group (verify_family_blocks.c) */
#include "verify_family.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The stack leaf for output o (D = o->comp[0..k)): D/pipeline_module/layers/{R,
 * scanned_layers/R, layers_<j>/R}; its layer axes read from shapes (the input has (rank of o)
 * + lead more axes, lead = 1 ([stages, ...]) or 2 ([repeats, stages, ...]), plus for
 * scanned_layers a layers_per_stage axis: the one whose removal leaves o's shape,
 * param_scan_axis of the stage leaf preferred). */
typedef struct {
    vleaf *leaf;
    int scanned, seq, lead, lax;
    int64_t reps, stages, lps;
} stack;

/* 1 and *sk when the input has a stack leaf for o that fits its shape. */
static int find_stack(verifier *vf, const vleaf *o, size_t k, stack *sk)
{
    const char **c = vf->scratch;
    size_t rest = o->len - k - 1;
    vleaf *pi;
    int ri, ro = o->leaf->rank;

    memset(sk, 0, sizeof *sk);
    sk->lax = -1;
    sk->reps = 1;
    sk->lps = 1;
    memcpy(c, o->comp, k * sizeof *c);
    c[k] = "pipeline_module";
    c[k + 1] = "layers";
    memcpy(c + k + 2, o->comp + k + 1, rest * sizeof *c);
    pi = ur_verify__find_in(vf, c, k + 2 + rest);
    if (pi == NULL) {
        c[k + 2] = "scanned_layers";
        memcpy(c + k + 3, o->comp + k + 1, rest * sizeof *c);
        pi = ur_verify__find_in(vf, c, k + 3 + rest);
        sk->scanned = pi != NULL;
    }
    if (pi == NULL) {
        int64_t kseq = ur_verify__max_index_under(&vf->in, c, k + 2, "layers", 6, 1) + 1;
        c[k + 2] = "layers_0";
        pi = kseq > 0 ? ur_verify__find_in(vf, c, k + 3 + rest) : NULL;
        sk->seq = pi != NULL;
        sk->lps = kseq;
    }
    if (pi == NULL || ur_verify__is_placeholder(pi->leaf) || ur_verify__is_placeholder(o->leaf)) {
        return 0;
    }
    ri = pi->leaf->rank;
    sk->leaf = pi;
    sk->lead = ri - ro - sk->scanned;
    if (sk->lead < 1 || sk->lead > 2) {
        return 0;
    }
    if (sk->lead == 2) {
        sk->reps = (int64_t)pi->leaf->shape[0];
    }
    sk->stages = (int64_t)pi->leaf->shape[sk->lead - 1];
    if (sk->scanned) {
        for (int a = sk->lead; a < ri; a++) {
            int ok = 1;
            for (int d = sk->lead, q = 0; ok && d < ri; d++) {
                if (d != a) {
                    ok = pi->leaf->shape[d] == o->leaf->shape[q++];
                }
            }
            if (ok && (sk->lax < 0 || a == sk->lead + vf->opts->param_scan_axis)) {
                sk->lax = a;
            }
        }
        if (sk->lax < 0) {
            return 0;
        }
        sk->lps = (int64_t)pi->leaf->shape[sk->lax];
    }
    return 1;
}

/* The outside group's leaf for output o, D/<outside>/R, and its layer axis and count read
 * from shapes (the axis whose removal leaves o's shape, param_scan_axis preferred; -1 and 0
 * when none fits). NULL when the input has no such leaf. */
static vleaf *find_outside(verifier *vf, const vleaf *o, size_t k, const char *outside, int *axis,
                           int64_t *n)
{
    const char **c = vf->scratch;
    vleaf *oi;
    memcpy(c, o->comp, k * sizeof *c);
    c[k] = outside;
    memcpy(c + k + 1, o->comp + k + 1, (o->len - k - 1) * sizeof *c);
    oi = ur_verify__find_in(vf, c, o->len);
    *axis = -1;
    *n = 0;
    if (oi == NULL || ur_verify__is_placeholder(oi->leaf)) {
        return NULL;
    }
    *axis = ur_verify__run_axis(o, oi, 1, vf->opts->param_scan_axis);
    if (*axis >= 0) {
        *n = (int64_t)oi->leaf->shape[*axis];
    }
    return oi;
}

/* Output o is layer idx of the outside group oi, whose first layer is output index `first`
 * (o->comp[k] = <x>_<first + idx>); a shape that does not fit is reported here. */
static int pair_outside(verifier *vf, const vleaf *o, size_t k, const char *x, vleaf *oi, int axis,
                        int64_t idx, int64_t n_outside, int64_t first, vpair *out)
{
    int fax[1];
    int64_t fidx[1];
    if (axis < 0) {
        char oname[1024], iname[1024], a[256], b[256];
        ur_verify_issue *is;
        oi->hits++;
        ur_verify__leaf_name(o, oname, sizeof oname);
        ur_verify__leaf_name(oi, iname, sizeof iname);
        is = ur_verify__issue(vf, UR_VERIFY_SHAPE, oname, iname);
        if (is) {
            ur_verify__shape_str(a, sizeof a, oi->leaf->shape, oi->leaf->rank);
            ur_verify__shape_str(b, sizeof b, o->leaf->shape, o->leaf->rank);
            if (snprintf(is->expected, sizeof is->expected,
                         "input %.80s less a layer axis (the layers outside the pipeline)",
                         a) < 0 ||
                snprintf(is->got, sizeof is->got, "%.120s", b) < 0) {
                is->got[0] = '\0';
            }
        }
        out->kind = VPAIR_DONE; /* found, and reported */
        out->src = oi;
        return UR_OK;
    }
    if (idx < 0 || idx >= n_outside) {
        return UR_OK; /* not matched: an extra output layer */
    }
    fax[0] = axis;
    fidx[0] = idx;
    oi->pdlen = k;
    oi->pname = x;
    oi->rest = k + 1;
    oi->pdiv = 1;
    oi->pmul = 1;
    oi->padd = first;
    return ur_verify__slices(out, oi, 1, fax, fidx, idx, n_outside);
}

/* Output o is layer gp of the stack (P = repeats x stages x lps layers, in the order
 * pipeline.py runs them: (r * stages + s) * lps + j), the stack's first layer being output
 * index `first`. */
static int pair_stack(verifier *vf, const vleaf *o, size_t k, const char *x, stack *sk, int64_t gp,
                      int64_t first, vpair *out)
{
    const char **c = vf->scratch;
    size_t rest = o->len - k - 1;
    int64_t p = sk->reps * sk->stages * sk->lps;
    vleaf *pi = sk->leaf;
    char sj[32];
    int fax[3];
    int64_t fidx[3];
    int nfix = 0;
    if (gp < 0 || gp >= p) {
        return UR_OK; /* not matched: an extra output layer */
    }
    if (sk->lead == 2) {
        fax[nfix] = 0;
        fidx[nfix++] = gp / (sk->stages * sk->lps);
    }
    fax[nfix] = sk->lead - 1;
    fidx[nfix++] = (gp / sk->lps) % sk->stages;
    if (sk->seq) {
        /* D/pipeline_module/layers/layers_<j>/R */
        memcpy(c, o->comp, k * sizeof *c);
        c[k] = "pipeline_module";
        c[k + 1] = "layers";
        snprintf(sj, sizeof sj, "layers_%" PRId64, gp % sk->lps);
        c[k + 2] = sj;
        memcpy(c + k + 3, o->comp + k + 1, rest * sizeof *c);
        pi = ur_verify__find_in(vf, c, k + 3 + rest);
        if (pi == NULL) {
            return UR_OK; /* not matched */
        }
    }
    pi->pdlen = k;
    pi->pname = x;
    pi->rest = k + 2 + (size_t)sk->scanned + (size_t)sk->seq;
    pi->pdiv = 1;
    pi->pmul = sk->seq ? sk->lps : 1;
    pi->padd = first + (sk->seq ? gp % sk->lps : 0);
    if (sk->scanned) {
        fax[nfix] = sk->lax;
        fidx[nfix++] = gp % sk->lps;
    }
    if (sk->seq) {
        return ur_verify__slices(out, pi, nfix, fax, fidx, gp / sk->lps, p / sk->lps);
    }
    return ur_verify__slices(out, pi, nfix, fax, fidx, gp, p);
}

/* Output D/layers_<g>/R or D/moe_layers_<g>/R (D = o->comp[0..k)) when the input has
 * D/pipeline_module: from the stack, or from the group outside the pipeline (after the stack
 * for layers, before it for DeepSeek's moe_layers). out->kind stays VPAIR_NONE when there is
 * no such stack leaf. */
static int match_pipe(verifier *vf, const vleaf *o, size_t k, int64_t g, int tbl, vpair *out,
                      ur_err *err)
{
    static const char *const names[2] = {"layers", "moe_layers"};
    static const char *const outside[2] = {"layers_outside_pipeline",
                                           "moe_layers_outside_pipeline"};
    stack sk;
    vleaf *oi;
    size_t xl;
    int64_t gi, p, n_outside;
    int moe, axis;

    (void)err;
    if (!ur_verify__split_index(o->comp[k], &xl, &gi)) {
        return UR_OK;
    }
    for (moe = 0; moe < 2; moe++) {
        if (strlen(names[moe]) == xl && memcmp(o->comp[k], names[moe], xl) == 0) {
            break;
        }
    }
    if (moe == 2 || !find_stack(vf, o, k, &sk)) {
        return UR_OK;
    }
    p = sk.reps * sk.stages * sk.lps;
    vf->tables[tbl].pipe = 1;
    oi = find_outside(vf, o, k, outside[moe], &axis, &n_outside);
    if (oi != NULL && axis < 0) {
        /* the count from the output instead, for the report */
        n_outside = vf->tables[tbl].n_out - p;
    }
    if (moe && g < n_outside) {
        return pair_outside(vf, o, k, names[moe], oi, axis, g, n_outside, 0, out);
    }
    if (!moe && g >= p) {
        return oi == NULL ? UR_OK
                          : pair_outside(vf, o, k, names[moe], oi, axis, g - p, n_outside, p, out);
    }
    return pair_stack(vf, o, k, names[moe], &sk, moe ? g - n_outside : g, moe ? n_outside : 0,
                      out);
}

const ur_verify_family ur_verify_family_pipeline = {
    .name = "pipeline stacks",
    .under = "pipeline_module",
    .layers_only = 0, /* layers and DeepSeek's moe_layers: match_pipe chooses */
    .match = match_pipe,
};
