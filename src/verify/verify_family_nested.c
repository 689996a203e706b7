/* verify: nested scans (verify_family.h), the shape gemma4 (decoder/scanned_blocks, blocks of
 * 6: 5 local + 1 global layer, global_head_dim may differ from head_dim) and qwen3-next
 * (decoder/layers, blocks of K = inhomogeneous_layer_cycle_interval: K - 1 linear-attention
 * layers + 1 full-attention layer, each kind with modules of its own) share:
 *
 *   output D/layers_<g>/R <- D/<blocks>/local_layers/R (two axes: block b, local i,
 *                            g = K*b + i), D/<blocks>/global_layer/R (g = K*b + K - 1), then
 *                            D/layers_remainder/local_layers/R (g = K*(N/K) + i) */
#include "verify_family.h"

#include <string.h>

/* gemma4 and qwen3-next: output D/layers_<g>/R (D = o->comp[0..k)) from
 * D/<blocks>/local_layers/R (block axis, then the nested scan's local-layer axis right after
 * it), D/<blocks>/global_layer/R (block axis) and D/layers_remainder/local_layers/R, <blocks>
 * being scanned_blocks (gemma4) or layers (qwen3-next). Blocks of K = locals + 1 layers: block
 * b, local i -> g = b*K + i, global -> b*K + K - 1 (the local layers run first); then the
 * remainder. The axes are found from shapes; the local and the global layers may differ in
 * shape (gemma4's global_head_dim), so each is matched against o on its own and K is read from
 * the local stack whichever o resembles. */

/* The nested scan's local-layer count: D/local_layers/R leaves (D = d[0..dlen)) with nb blocks
 * on axis a hold it on axis a + 1; -1: none. */
static int64_t nested_locals(const vset *s, const char *const *d, size_t dlen, int64_t nb, int a)
{
    for (size_t i = 0; i < s->n; i++) {
        const vleaf *v = &s->v[i];
        if (ur_verify__has_prefix(v, d, dlen) && v->len > dlen + 1 &&
            strcmp(v->comp[dlen], "local_layers") == 0 && !ur_verify__is_placeholder(v->leaf) &&
            v->leaf->rank > a + 1 && (int64_t)v->leaf->shape[a] == nb) {
            return (int64_t)v->leaf->shape[a + 1];
        }
    }
    return -1;
}

static int match_nested(verifier *vf, const vleaf *o, size_t k, int64_t g, int tbl,
                        const char *blocks, vpair *out)
{
    const char **c = vf->scratch;
    size_t rest = o->len - k - 1;
    vleaf *lo, *gl, *rm;
    int la, ga = -1;
    int64_t nb, nl, kk, fidx[2];
    int fax[2];

    if (ur_verify__is_placeholder(o->leaf)) {
        return UR_OK;
    }
    memcpy(c, o->comp, k * sizeof *c);
    c[k] = blocks;
    c[k + 1] = "local_layers";
    memcpy(c + k + 2, o->comp + k + 1, rest * sizeof *c);
    lo = ur_verify__find_in(vf, c, o->len + 1);
    c[k + 1] = "global_layer";
    gl = ur_verify__find_in(vf, c, o->len + 1);
    c[k] = "layers_remainder";
    c[k + 1] = "local_layers";
    rm = ur_verify__find_in(vf, c, o->len + 1);
    if (lo != NULL && ur_verify__is_placeholder(lo->leaf)) {
        lo = NULL;
    }
    if (gl != NULL && ur_verify__is_placeholder(gl->leaf)) {
        gl = NULL;
    }
    la = lo != NULL ? ur_verify__run_axis(o, lo, 2, vf->opts->param_scan_axis) : -1;
    ga = gl != NULL ? ur_verify__run_axis(o, gl, 1, vf->opts->param_scan_axis) : -1;
    c[k] = blocks;
    if (la >= 0) {
        nb = (int64_t)lo->leaf->shape[la];
        nl = (int64_t)lo->leaf->shape[la + 1];
    } else if (ga >= 0) {
        /* o is shaped like the global layer only (gemma4's global_head_dim), or only the global
         * layer has this module (qwen3-next's full attention): the local stack's axes sit where
         * the global layer's are */
        nb = (int64_t)gl->leaf->shape[ga];
        nl = nested_locals(&vf->in, c, k + 1, nb, ga);
        if (nl < 0) {
            return UR_OK;
        }
    } else {
        return UR_OK;
    }
    if (ga >= 0 && (int64_t)gl->leaf->shape[ga] != nb) {
        ga = -1;
    }
    /* qwen3-next's local (linear-attention) layers have modules the global one lacks */
    kk = nl + (gl != NULL || ur_verify__any_under(&vf->in, c, k + 1, "global_layer") ? 1 : 0);
    vf->tables[tbl].pipe = 1;
    if (g < nb * kk && g % kk < nl) {
        if (la < 0) {
            return UR_OK; /* not matched */
        }
        fax[0] = la;
        fax[1] = la + 1;
        fidx[0] = g / kk;
        fidx[1] = g % kk;
        lo->pdlen = k;
        lo->rest = k + 2;
        lo->pdiv = nl;
        lo->pmul = kk;
        lo->padd = 0;
        return ur_verify__slices(out, lo, 2, fax, fidx, fidx[0] * nl + fidx[1], nb * nl);
    }
    if (g < nb * kk) {
        if (ga < 0) {
            return UR_OK; /* not matched */
        }
        fax[0] = ga;
        fidx[0] = g / kk;
        gl->pdlen = k;
        gl->rest = k + 2;
        gl->pdiv = 1;
        gl->pmul = kk;
        gl->padd = nl;
        return ur_verify__slices(out, gl, 1, fax, fidx, fidx[0], nb);
    }
    if (rm != NULL && !ur_verify__is_placeholder(rm->leaf)) {
        int64_t n_rem = vf->tables[tbl].n_out - nb * kk;
        int ra = ur_verify__layer_axis(vf, o, rm, n_rem);
        if (ra >= 0) {
            fax[0] = ra;
            fidx[0] = g - nb * kk;
            rm->pdlen = k;
            rm->rest = k + 2;
            rm->pdiv = 1;
            rm->pmul = 1;
            rm->padd = nb * kk;
            return ur_verify__slices(out, rm, 1, fax, fidx, fidx[0], n_rem);
        }
    }
    return UR_OK; /* not matched */
}

static int match_gemma4(verifier *vf, const vleaf *o, size_t k, int64_t g, int tbl, vpair *out,
                        ur_err *err)
{
    (void)err;
    return match_nested(vf, o, k, g, tbl, "scanned_blocks", out);
}

static int match_qwen3_next(verifier *vf, const vleaf *o, size_t k, int64_t g, int tbl, vpair *out,
                            ur_err *err)
{
    (void)err;
    return match_nested(vf, o, k, g, tbl, "layers", out);
}

const ur_verify_family ur_verify_family_gemma4 = {
    .name = "gemma4 nested blocks",
    .under = "scanned_blocks",
    .layers_only = 1,
    .match = match_gemma4,
};

const ur_verify_family ur_verify_family_qwen3_next = {
    .name = "qwen3-next nested blocks",
    .under = "layers",
    .layers_only = 1,
    .match = match_qwen3_next,
};
