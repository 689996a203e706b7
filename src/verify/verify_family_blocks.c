/* verify: plain scanned groups and blocks of sub-layers (verify_family.h). The families that
 * write these shapes: every plain decoder_block (decoder/layers), deepseek (dense_layers and
 * moe_layers, each its own output name), inhomogeneous cycles and gemma3 (decoder/layers/
 * layers_<j>/R blocks), deepseek4 (unscanned decoder/layers_<i> hash layers, then
 * decoder/scanned_blocks/layers_<j>/R) and gemma3's unscanned remainder:
 *
 *   output D/X_<g>/R      <- input D/X/R, layer g on the axis whose removal gives the output
 *                            shape and whose length is the group's layer count
 *   output D/layers_<g>/R <- input D/layers/layers_<j>/R (or layer_<j>, or
 *                            D/scanned_blocks/layers_<j>/R), block b, where g = H + b*K + j
 *                            (K sub-layers per block, H unscanned D/layers_<i> before them), or
 *                            D/layers_remainder/layers_<j>/R for the layers after the last block
 *
 * Each group's K, H and remainder are read from the input tree (the table below), not from a
 * config. */
#include "verify_family.h"

#include "unroll/alloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The table of output group D/X_<g> (D = q[0..dlen)), built on first use: the scanned node D/X
 * or D/scanned_blocks, K from its layers_<j> children, H from unscanned D/X_<i>, the remainder
 * from D/layers_remainder/layers_<j>, the scan length from the output's largest g. */
int ur_verify_family_blocks__table(verifier *vf, const char *const *q, size_t dlen, const char *x,
                                   size_t xl, int *out, ur_err *err)
{
    char *dkey = ur_verify__key_of(q, dlen);
    table *t;
    if (dkey == NULL) {
        return ur_err_oom(err);
    }
    for (size_t i = 0; i < vf->n_tables; i++) {
        t = &vf->tables[i];
        if (t->dlen == dlen && strcmp(t->dkey, dkey) == 0 && strlen(t->x) == xl &&
            memcmp(t->x, x, xl) == 0) {
            ur_free(dkey);
            *out = (int)i;
            return UR_OK;
        }
    }
    t = ur_grow(vf->tables, &vf->cap_tables, vf->n_tables, sizeof *t, 8);
    if (t == NULL) {
        ur_free(dkey);
        return ur_err_oom(err);
    }
    vf->tables = t;
    t = &vf->tables[vf->n_tables];
    memset(t, 0, sizeof *t);
    t->dkey = dkey;
    t->dlen = dlen;
    t->x = ur_strndup(x, xl);
    if (t->x == NULL) {
        ur_free(dkey);
        return ur_err_oom(err);
    }
    vf->n_tables++;
    if (ur_verify__any_under(&vf->in, q, dlen, t->x)) {
        t->g = t->x;
    } else if (strcmp(t->x, "layers") == 0 &&
               ur_verify__any_under(&vf->in, q, dlen, "scanned_blocks")) {
        t->g = "scanned_blocks";
    }
    t->k = 1;
    if (t->g != NULL) {
        /* a block of sub-layers when every leaf under D/G continues with layers_<j> */
        int64_t kmax = -1;
        int all = 1;
        for (size_t i = 0; i < vf->in.n; i++) {
            const vleaf *v = &vf->in.v[i];
            int64_t j;
            if (!ur_verify__has_prefix(v, q, dlen) || v->len <= dlen + 1 ||
                strcmp(v->comp[dlen], t->g) != 0) {
                continue;
            }
            if (v->len > dlen + 2 && ur_verify__sub_index(v->comp[dlen + 1], &j)) {
                kmax = j > kmax ? j : kmax;
            } else {
                all = 0;
            }
        }
        if (all && kmax >= 0) {
            t->k = kmax + 1;
        }
        t->h = ur_verify__max_index_under(&vf->in, q, dlen, t->x, xl, 1) + 1;
    }
    if (strcmp(t->x, "layers") == 0 &&
        ur_verify__any_under(&vf->in, q, dlen, "layers_remainder")) {
        const char **dr = vf->scratch;
        memcpy(dr, q, dlen * sizeof *dr);
        dr[dlen] = "layers_remainder";
        t->r = ur_verify__max_index_under(&vf->in, dr, dlen + 1, "layers", 6, 1) + 1;
    }
    t->n_out = ur_verify__max_index_under(&vf->out, q, dlen, t->x, xl, 1) + 1;
    t->n = (t->n_out - t->h - t->r) / t->k;
    if (t->n < 0 || t->g == NULL) {
        t->n = 0;
    }
    *out = (int)(vf->n_tables - 1);
    return UR_OK;
}

/* D/X_<g>/R from the group's scanned node (whole layer, or sub-layer g % K of block g / K), or
 * from the remainder. */
static int match_blocks(verifier *vf, const vleaf *o, size_t k, int64_t g, int tbl, vpair *out,
                        ur_err *err)
{
    const char **c = vf->scratch;
    const table *t = &vf->tables[tbl];
    size_t rest = o->len - k - 1;
    int64_t gg = g - t->h;
    vleaf *src;
    (void)err;
    memcpy(c, o->comp, k * sizeof *c);
    if (t->g != NULL && t->k == 1 && gg >= 0 && gg < t->n) {
        c[k] = t->g;
        memcpy(c + k + 1, o->comp + k + 1, rest * sizeof *c);
        src = ur_verify__find_in(vf, c, o->len);
        if (src != NULL) {
            src->rest = k + 1;
            out->kind = VPAIR_LAYER;
            out->src = src;
            out->tbl = tbl;
            out->layer = gg;
            return UR_OK;
        }
    } else if (t->g != NULL && gg >= 0 && gg < t->n * t->k) {
        char s1[32], s2[32];
        snprintf(s1, sizeof s1, "layers_%" PRId64, gg % t->k);
        snprintf(s2, sizeof s2, "layer_%" PRId64, gg % t->k);
        c[k] = t->g;
        memcpy(c + k + 2, o->comp + k + 1, rest * sizeof *c);
        c[k + 1] = s1;
        src = ur_verify__find_in(vf, c, o->len + 1);
        if (src == NULL) {
            c[k + 1] = s2;
            src = ur_verify__find_in(vf, c, o->len + 1);
        }
        if (src != NULL) {
            src->sub = gg % t->k;
            src->rest = k + 2;
            out->kind = VPAIR_LAYER;
            out->src = src;
            out->tbl = tbl;
            out->layer = gg / t->k;
            return UR_OK;
        }
    }
    gg = g - t->h - t->n * t->k;
    if (t->r > 0 && gg >= 0 && gg < t->r) {
        char s1[32];
        snprintf(s1, sizeof s1, "layers_%" PRId64, gg);
        c[k] = "layers_remainder";
        c[k + 1] = s1;
        memcpy(c + k + 2, o->comp + k + 1, rest * sizeof *c);
        src = ur_verify__find_in(vf, c, o->len + 1);
        if (src != NULL) {
            out->kind = VPAIR_LAYER; /* an unscanned layer: the whole leaf */
            out->src = src;
            out->tbl = -1;
            out->layer = 0;
            return UR_OK;
        }
    }
    return UR_OK;
}

const ur_verify_family ur_verify_family_blocks = {
    .name = "plain groups, blocks of sub-layers, unscanned remainder",
    .under = NULL,
    .layers_only = 0,
    .match = match_blocks,
};
