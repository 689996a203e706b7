/* verify: pipeline stacks (verify_family.h), as MaxText's pipeline parallelism writes them
 * (nnx_decoders.py _init_pipeline_generic, pipeline.py):
 *
 *   output D/layers_<g>/R <- a pipeline stack D/pipeline_module/layers/... of shape
 *                            [R?, S, ..., lps?, ...], g = (r*S + s)*lps + j, then
 *                            D/layers_outside_pipeline/R for the layers after it */
#include "verify_family.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Output D/layers_<g>/R (D = o->comp[0..k)) when the input has D/pipeline_module: find the
 * stage leaf D/pipeline_module/layers/{R, scanned_layers/R, layers_<j>/R}. Its layer axes
 * are read from shapes: the input has (rank of o) + n more axes, n = 1 ([stages, ...]) or 2
 * ([repeats, stages, ...]) in front, plus for scanned_layers a layers_per_stage axis (the one
 * whose removal leaves o's shape, param_scan_axis of the stage leaf preferred). P = repeats x
 * stages x layers per stage layers come from the stack, layer (r * stages + s) * lps + j (the
 * order pipeline.py runs them in); layers P.. from D/layers_outside_pipeline/R. out->kind
 * stays VPAIR_NONE when there is no such stage leaf. */
static int match_pipe(verifier *vf, const vleaf *o, size_t k, int64_t g, int tbl, vpair *out,
                      ur_err *err)
{
    const char **c = vf->scratch;
    char sj[32];
    size_t rest = o->len - k - 1;
    vleaf *pi = NULL;
    int scanned = 0, seq = 0;
    int64_t kseq = 0, reps = 1, stages, lps = 1, p;
    int lead, ri, ro = o->leaf->rank, lax = -1;
    int fax[3];
    int64_t fidx[3];
    int nfix = 0;

    (void)err;

    memcpy(c, o->comp, k * sizeof *c);
    c[k] = "pipeline_module";
    c[k + 1] = "layers";
    memcpy(c + k + 2, o->comp + k + 1, rest * sizeof *c);
    pi = ur_plan_verify__find_in(vf, c, k + 2 + rest);
    if (pi == NULL) {
        c[k + 2] = "scanned_layers";
        memcpy(c + k + 3, o->comp + k + 1, rest * sizeof *c);
        pi = ur_plan_verify__find_in(vf, c, k + 3 + rest);
        scanned = pi != NULL;
    }
    if (pi == NULL) {
        kseq = ur_plan_verify__max_index_under(&vf->in, c, k + 2, "layers", 6, 1) + 1;
        c[k + 2] = "layers_0";
        pi = kseq > 0 ? ur_plan_verify__find_in(vf, c, k + 3 + rest) : NULL;
        seq = pi != NULL;
    }
    if (pi == NULL || ur_plan_verify__is_placeholder(pi->leaf) ||
        ur_plan_verify__is_placeholder(o->leaf)) {
        return UR_OK;
    }
    ri = pi->leaf->rank;
    lead = ri - ro - scanned;
    if (lead < 1 || lead > 2) {
        return UR_OK;
    }
    if (lead == 2) {
        reps = (int64_t)pi->leaf->shape[0];
    }
    stages = (int64_t)pi->leaf->shape[lead - 1];
    if (scanned) {
        for (int a = lead; a < ri; a++) {
            int ok = 1;
            for (int d = lead, q = 0; ok && d < ri; d++) {
                if (d != a) {
                    ok = pi->leaf->shape[d] == o->leaf->shape[q++];
                }
            }
            if (ok && (lax < 0 || a == lead + vf->opts->param_scan_axis)) {
                lax = a;
            }
        }
        if (lax < 0) {
            return UR_OK;
        }
        lps = (int64_t)pi->leaf->shape[lax];
    } else if (seq) {
        lps = kseq;
    }
    p = reps * stages * lps;
    vf->tables[tbl].pipe = 1;
    if (g >= p) {
        /* D/layers_outside_pipeline/R, layer g - P */
        const table *t = &vf->tables[tbl];
        int64_t n_outside = t->n_out - p;
        vleaf *oi;
        int axis;
        c[k] = "layers_outside_pipeline";
        memcpy(c + k + 1, o->comp + k + 1, rest * sizeof *c);
        oi = ur_plan_verify__find_in(vf, c, o->len);
        if (oi == NULL || ur_plan_verify__is_placeholder(oi->leaf)) {
            return UR_OK; /* not matched */
        }
        axis = ur_plan_verify__layer_axis(vf, o, oi, n_outside);
        if (axis < 0) {
            char oname[1024], iname[1024], a[256], b[256];
            ur_verify_issue *is;
            oi->hits++;
            ur_plan_verify__leaf_name(o, oname, sizeof oname);
            ur_plan_verify__leaf_name(oi, iname, sizeof iname);
            is = ur_plan_verify__issue(vf, UR_VERIFY_SHAPE, oname, iname);
            if (is) {
                ur_plan_verify__shape_str(a, sizeof a, oi->leaf->shape, oi->leaf->rank);
                ur_plan_verify__shape_str(b, sizeof b, o->leaf->shape, o->leaf->rank);
                if (snprintf(is->expected, sizeof is->expected,
                             "input %.80s less an axis of length %" PRId64
                             " (layers after the %" PRId64 " pipelined)",
                             a, n_outside, p) < 0 ||
                    snprintf(is->got, sizeof is->got, "%.120s", b) < 0) {
                    is->got[0] = '\0';
                }
            }
            out->kind = VPAIR_DONE; /* found, and reported */
            out->src = oi;
            return UR_OK;
        }
        fax[0] = axis;
        fidx[0] = g - p;
        oi->pdlen = k;
        oi->rest = k + 1;
        oi->pdiv = 1;
        oi->pmul = 1;
        oi->padd = p;
        return ur_plan_verify__slices(out, oi, 1, fax, fidx, g - p, n_outside);
    }
    if (lead == 2) {
        fax[nfix] = 0;
        fidx[nfix++] = g / (stages * lps);
    }
    fax[nfix] = lead - 1;
    fidx[nfix++] = (g / lps) % stages;
    pi->pdlen = k;
    pi->rest = k + 2 + (size_t)scanned;
    pi->pdiv = 1;
    pi->pmul = 1;
    pi->padd = 0;
    if (scanned) {
        fax[nfix] = lax;
        fidx[nfix++] = g % lps;
        return ur_plan_verify__slices(out, pi, nfix, fax, fidx, g, p);
    }
    if (seq) {
        snprintf(sj, sizeof sj, "layers_%" PRId64, g % lps);
        c[k + 2] = sj;
        pi = ur_plan_verify__find_in(vf, c, k + 3 + rest);
        if (pi == NULL) {
            return UR_OK; /* not matched */
        }
        pi->pdlen = k;
        pi->rest = k + 3;
        pi->pdiv = 1;
        pi->pmul = lps;
        pi->padd = g % lps;
        return ur_plan_verify__slices(out, pi, nfix, fax, fidx, g / lps, p / lps);
    }
    return ur_plan_verify__slices(out, pi, nfix, fax, fidx, g, p);
}

const ur_verify_family ur_verify_family_pipeline = {
    .name = "pipeline stacks",
    .under = "pipeline_module",
    .layers_only = 1,
    .match = match_pipe,
};
