/* verify: DeepSeek Engram's layer stacks (verify_family.h), read from names and shapes alone.
 * A scanned DeepSeek model with Engram holds, under D, scanned chunks X_<a>_<b> (layers a..b,
 * stacked) around unscanned Engram layers X_engram_<k>, X being dense_layers or moe_layers and
 * the indices absolute; the unscanned model names its layers X_<i> from 0 for each X:
 *
 *   output D/X_<g>/R <- input D/X_<a>_<b>/R, slice L - a (a <= L <= b) on the axis whose
 *                       removal gives the output shape, or
 *                    <- input D/X_engram_<L>/R, the whole leaf
 *
 * with L = g + low, low the smallest index among the input's D/X_<a>_<b> and D/X_engram_<a>
 * (the MoE layers start after the dense ones). The Engram weights of an Engram layer
 * (D/X_engram_<L>/engram/..., .../engram_layer_norm/...) are not carried when the output has
 * D/X_<L - low> and nothing under its engram or engram_layer_norm: MaxText's unscanned
 * DeepSeek model has no Engram. */
#include "verify_family.h"

#include "unroll/alloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* c = X "_" ("<a>_<b>" | "engram_<a>"): 1 and the parts. */
static int chunk_name(const char *c, const char *x, size_t xl, int64_t *a, int64_t *b, int *engram)
{
    char *end;
    if (strncmp(c, x, xl) != 0 || c[xl] != '_') {
        return 0;
    }
    c += xl + 1;
    *engram = strncmp(c, "engram_", 7) == 0;
    c += *engram ? 7 : 0;
    if (*c < '0' || *c > '9') {
        return 0;
    }
    *a = (int64_t)strtoll(c, &end, 10);
    if (*engram) {
        *b = *a;
        return *end == '\0';
    }
    if (*end != '_' || end[1] < '0' || end[1] > '9') {
        return 0;
    }
    *b = (int64_t)strtoll(end + 1, &end, 10);
    return *end == '\0' && *b >= *a;
}

/* The table's chunks, from the input under D = q[0..dlen) (once). */
static int read_chunks(verifier *vf, table *t, const char *const *q, size_t dlen, ur_err *err)
{
    size_t xl = strlen(t->x), cap = 0;
    if (t->chunks_read) {
        return UR_OK;
    }
    t->chunks_read = 1;
    for (size_t i = 0; i < vf->in.n; i++) {
        const vleaf *v = &vf->in.v[i];
        int64_t a, b;
        int engram, known = 0;
        int64_t *p;
        if (!ur_verify__has_prefix(v, q, dlen) || v->len <= dlen + 1 ||
            !chunk_name(v->comp[dlen], t->x, xl, &a, &b, &engram)) {
            continue;
        }
        for (size_t j = 0; j < t->n_chunks && !known; j++) {
            known = t->chunks[3 * j] == a && t->chunks[3 * j + 1] == b &&
                    t->chunks[3 * j + 2] == engram;
        }
        if (known) {
            continue;
        }
        p = ur_grow(t->chunks, &cap, t->n_chunks, 3 * sizeof *p, 8); /* (a, b, engram) */
        if (p == NULL) {
            return ur_err_oom(err);
        }
        t->chunks = p;
        t->chunks[3 * t->n_chunks] = a;
        t->chunks[3 * t->n_chunks + 1] = b;
        t->chunks[3 * t->n_chunks + 2] = engram;
        t->low = t->n_chunks == 0 || a < t->low ? a : t->low;
        t->n_chunks++;
    }
    return UR_OK;
}

static int match_engram(verifier *vf, const vleaf *o, size_t k, int64_t g, int tbl, vpair *out,
                        ur_err *err)
{
    const char **c = vf->scratch;
    table *t = &vf->tables[tbl];
    size_t rest = o->len - k - 1;
    char name[128];
    int64_t l;
    int rc = read_chunks(vf, t, o->comp, k, err);
    if (rc < 0 || t->n_chunks == 0) {
        return rc;
    }
    t->pipe = 1; /* its layers count towards num_decoder_layers */
    l = g + t->low;
    memcpy(c, o->comp, k * sizeof *c);
    memcpy(c + k + 1, o->comp + k + 1, rest * sizeof *c);
    c[k] = name;
    for (size_t j = 0; j < t->n_chunks; j++) {
        int64_t a = t->chunks[3 * j], b = t->chunks[3 * j + 1];
        int engram = (int)t->chunks[3 * j + 2];
        vleaf *src;
        int fax[1];
        int64_t fidx[1];
        if (l < a || l > b) {
            continue;
        }
        if (engram) {
            snprintf(name, sizeof name, "%s_engram_%" PRId64, t->x, a);
        } else {
            snprintf(name, sizeof name, "%s_%" PRId64 "_%" PRId64, t->x, a, b);
        }
        src = ur_verify__find_in(vf, c, o->len);
        if (src == NULL) {
            continue;
        }
        if (engram) {
            out->kind = VPAIR_LAYER; /* an unscanned layer: the whole leaf */
            out->src = src;
            out->tbl = -1;
            return UR_OK;
        }
        fax[0] = ur_verify__layer_axis(vf, o, src, b - a + 1);
        if (fax[0] < 0) {
            continue;
        }
        fidx[0] = l - a;
        src->pdlen = k;
        src->rest = k + 1;
        src->pdiv = 1;
        src->pmul = 1;
        src->padd = a - t->low;
        return ur_verify__slices(out, src, 1, fax, fidx, l - a, b - a + 1);
    }
    return UR_OK;
}

int ur_verify_family_engram__not_carried(verifier *vf, const vleaf *v, ur_err *err)
{
    for (size_t k = 0; k + 2 < v->len; k++) {
        const char *e = strstr(v->comp[k], "_engram_");
        char name[128];
        int64_t a, b;
        int engram, ti;
        table *t;
        if (e == NULL || (strcmp(v->comp[k + 1], "engram") != 0 &&
                          strcmp(v->comp[k + 1], "engram_layer_norm") != 0)) {
            continue;
        }
        if (ur_verify_family_blocks__table(vf, v->comp, k, v->comp[k], (size_t)(e - v->comp[k]),
                                           &ti, err) < 0) {
            return 0;
        }
        t = &vf->tables[ti];
        if (!chunk_name(v->comp[k], t->x, strlen(t->x), &a, &b, &engram) || !engram ||
            read_chunks(vf, t, v->comp, k, err) < 0) {
            return 0;
        }
        snprintf(name, sizeof name, "%s_%" PRId64, t->x, a - t->low);
        if (!ur_verify__any_under(&vf->out, v->comp, k, name)) {
            return 0;
        }
        /* the output's layer, with nothing under its engram or engram_layer_norm */
        memcpy(vf->scratch, v->comp, k * sizeof *vf->scratch);
        vf->scratch[k] = name;
        return !ur_verify__any_under(&vf->out, vf->scratch, k + 1, "engram") &&
               !ur_verify__any_under(&vf->out, vf->scratch, k + 1, "engram_layer_norm");
    }
    return 0;
}

const ur_verify_family ur_verify_family_engram = {
    .name = "DeepSeek Engram chunks and Engram layers",
    .under = NULL,
    .layers_only = 0,
    .match = match_engram,
};
