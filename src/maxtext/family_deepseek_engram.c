/* DeepSeek with Engram (decoder_block deepseek, engram_layers not empty). maxtext 0.2.5
 * nnx_decoders.py _init_scanned_deepseek_engram walks the dense layers [0, D) and then the MoE
 * layers [D, N) (D = first_num_dense_layers, N = num_decoder_layers): a layer k listed in
 * engram_layers is one unscanned layer decoder/<kind>_layers_engram_<k> (built with
 * layer_idx=k: the only layers that have an Engram), and each run [a, b] between them is a
 * scanned chunk decoder/<kind>_layers_<a>_<b> of b - a + 1 layers (absolute indices, stacked
 * on param_scan_axis like any scan). The scan_layers=false model (_init_sequential_deepseek)
 * is decoder/dense_layers_<i> (i < D) and decoder/moe_layers_<i - D>, its layers built with
 * no layer_idx, hence with no Engram at all:
 *
 *   decoder/<kind>_layers_<a>_<b>/R, slice i  -> decoder/<kind>_layers_<a + i - off>/R
 *   decoder/<kind>_layers_engram_<k>/R        -> decoder/<kind>_layers_<k - off>/R
 *   decoder/<kind>_layers_engram_<k>/{engram,engram_layer_norm}/...  dropped
 *
 * off = 0 for dense, D for MoE. The chunks and Engram layers are the config's: a name MaxText
 * would not build for it, or one missing, is refused. */
#include "family.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char k_engram_dropped[] =
    "Engram: MaxText's scan_layers=false DeepSeek model builds no Engram (its layers get no "
    "layer_idx), so it has no place for these weights";

/* The layers built with an Engram, as listed (pydantic list[int]); the walk reads it too, to
 * refuse Engram chunks under a config without it (family.h). */
const ur_family_key ur_key_engram_layers = {"engram_layers", UR_FAMILY_KEY_INT_LIST, 0, INT64_MIN};

static const ur_family_key *const k_keys[] = {&ur_key_engram_layers, NULL};

/* What this file reads of the config: engram_layers, D and N. */
typedef struct {
    const int64_t *layers;
    size_t n;
    int64_t dense, nl;
} engram_cfg;

static engram_cfg engram_cfg_of(const ur_plan_walk *w)
{
    engram_cfg e;
    e.layers = ur_family_list(w->k, &ur_key_engram_layers, &e.n);
    e.dense = ur_family_int(w->k, &ur_key_first_num_dense_layers);
    e.nl = w->s->num_decoder_layers;
    return e;
}

static int applies(const ur_settings *s, const ur_family_keys *k)
{
    size_t n;
    (void)ur_family_list(k, &ur_key_engram_layers, &n);
    return strcmp(s->decoder_block, "deepseek") == 0 && n > 0;
}

static int is_engram(const engram_cfg *e, int64_t k)
{
    for (size_t i = 0; i < e->n; i++) {
        if (e->layers[i] == k) {
            return 1;
        }
    }
    return 0;
}

/* The layers of one kind: [lo, hi) and the offset of its unscanned names. */
typedef struct {
    const char *name; /* "dense_layers", "moe_layers" */
    int64_t lo, hi;
} kind;

static kind kind_of(const engram_cfg *e, int moe)
{
    kind k = {moe ? "moe_layers" : "dense_layers", moe ? e->dense : 0, moe ? e->nl : e->dense};
    return k;
}

/* _find_next_boundary: the next Engram layer after `cur`, or the end of the kind. */
static int64_t next_boundary(const engram_cfg *e, int64_t cur, int64_t end)
{
    int64_t b = end;
    for (size_t i = 0; i < e->n; i++) {
        if (e->layers[i] > cur && e->layers[i] < b) {
            b = e->layers[i];
        }
    }
    return b;
}

/* 1 when MaxText builds [a, b] as one chunk (a == b and *engram: the Engram layer a). */
static int built(const engram_cfg *e, const kind *kd, int64_t a, int64_t b, int engram)
{
    int64_t cur = kd->lo;
    while (cur < kd->hi) {
        if (is_engram(e, cur)) {
            if (engram && a == cur && b == cur) {
                return 1;
            }
            cur++;
        } else {
            int64_t nb = next_boundary(e, cur, kd->hi);
            if (!engram && a == cur && b == nb - 1) {
                return 1;
            }
            cur = nb;
        }
    }
    return 0;
}

/* A decimal index as MaxText writes one (no sign, no leading zero), at most 9 digits. */
static int index_at(const char *c, int64_t *v, const char **end)
{
    size_t n = 0;
    *v = 0;
    while (c[n] >= '0' && c[n] <= '9' && n < 10) {
        *v = *v * 10 + (c[n] - '0');
        n++;
    }
    *end = c + n;
    return n > 0 && n < 10 && !(n > 1 && c[0] == '0');
}

/* "<a>_<b>" or "engram_<k>" after the kind's name and '_': 1 and the parts. */
static int parse_chunk(const char *c, int64_t *a, int64_t *b, int *engram)
{
    const char *end;
    *engram = strncmp(c, "engram_", 7) == 0;
    if (*engram) {
        c += 7;
    }
    if (!index_at(c, a, &end)) {
        return 0;
    }
    if (*engram) {
        *b = *a;
        return *end == '\0';
    }
    return *end == '_' && index_at(end + 1, b, &end) && *end == '\0' && *b >= *a;
}

static int not_built(const ur_plan_walk *w, const char *name, ur_err *err)
{
    engram_cfg ec = engram_cfg_of(w);
    const engram_cfg *e = &ec;
    char list[256];
    size_t n = 0;
    list[0] = '\0';
    for (size_t i = 0; i < e->n && n < sizeof list; i++) {
        int m = snprintf(list + n, sizeof list - n, "%s%" PRId64, i ? "," : "", e->layers[i]);
        n += m > 0 ? (size_t)m : 0;
    }
    return ur_err_set(err, UR_EINVAL,
                      "decoder/%s: not a layer stack MaxText builds for engram_layers=[%.200s], "
                      "first_num_dense_layers=%lld, num_decoder_layers=%lld",
                      name, list, (long long)e->dense, (long long)e->nl);
}

static int setup(ur_plan_walk *w, ur_err *err)
{
    engram_cfg ec = engram_cfg_of(w);
    const engram_cfg *e = &ec;
    w->plan->n_groups = 0;
    if (w->plan->unrolled && e->dense > e->nl) {
        return ur_err_set(err, UR_EINVAL,
                          "first_num_dense_layers=%lld is more than num_decoder_layers=%lld",
                          (long long)e->dense, (long long)e->nl);
    }
    return UR_OK;
}

static int leaf(ur_plan_walk *w, const ur_plan_item *it, int *done, ur_err *err)
{
    engram_cfg ec = engram_cfg_of(w);
    const engram_cfg *e = &ec;
    const char *name = it->l->path[it->st + 1];
    char out[64];
    int64_t a, b;
    int engram;
    for (int moe = 0; moe < 2; moe++) {
        kind kd = kind_of(e, moe);
        size_t kl = strlen(kd.name);
        if (strncmp(name, kd.name, kl) != 0 || (name[kl] != '\0' && name[kl] != '_')) {
            continue;
        }
        if (name[kl] == '\0' || !parse_chunk(name + kl + 1, &a, &b, &engram) ||
            !built(e, &kd, a, b, engram)) {
            return not_built(w, name, err);
        }
        *done = 1;
        if (!engram) {
            return ur_plan__unstack_to(w, it, name, b - a + 1, kd.name, a - kd.lo, it->st + 2,
                                       err);
        }
        if (strcmp(it->l->path[it->st + 2], "engram") == 0 ||
            strcmp(it->l->path[it->st + 2], "engram_layer_norm") == 0) {
            ur_plan__leave_out(w, it, k_engram_dropped);
            return UR_OK;
        }
        snprintf(out, sizeof out, "%s_%" PRId64, kd.name, a - kd.lo);
        return ur_plan__copy_to_layer(w, it, out, it->st + 2, err);
    }
    return UR_OK;
}

/* 1 when some leaf has decoder/<name> in its path. */
static int present(const ur_plan_walk *w, const char *name)
{
    for (size_t i = 0; i < w->n; i++) {
        const ur_plan_leaf *l = &w->leaves[i];
        for (size_t c = 0; c + 1 < l->path_len; c++) {
            if (strcmp(l->path[c], "decoder") == 0 && strcmp(l->path[c + 1], name) == 0) {
                return 1;
            }
        }
    }
    return 0;
}

/* Every chunk and Engram layer MaxText builds for the config must be in the checkpoint
 * (generate_param_only_checkpoint's "Missing" check). */
static int finish(ur_plan_walk *w, ur_err *err)
{
    engram_cfg ec = engram_cfg_of(w);
    const engram_cfg *e = &ec;
    if (!w->plan->unrolled || w->lora) {
        return UR_OK;
    }
    for (int moe = 0; moe < 2; moe++) {
        kind kd = kind_of(e, moe);
        int64_t cur = kd.lo;
        while (cur < kd.hi) {
            char name[96];
            int64_t nb = is_engram(e, cur) ? cur + 1 : next_boundary(e, cur, kd.hi);
            if (is_engram(e, cur)) {
                snprintf(name, sizeof name, "%s_engram_%" PRId64, kd.name, cur);
            } else {
                snprintf(name, sizeof name, "%s_%" PRId64 "_%" PRId64, kd.name, cur, nb - 1);
            }
            if (!present(w, name)) {
                return ur_err_set(err, UR_EINVAL,
                                  "missing decoder/%s in the input checkpoint (engram_layers "
                                  "with scan_layers=true and force_unroll=true need the "
                                  "scanned Engram layout)",
                                  name);
            }
            cur = nb;
        }
    }
    return UR_OK;
}

const ur_plan_family ur_family_deepseek_engram = {
    .name = "deepseek-engram",
    .keys = k_keys,
    .applies = applies,
    .setup = setup,
    .leaf = leaf,
    .finish = finish,
    .aux_leaf = ur_plan__router_bias,
};
