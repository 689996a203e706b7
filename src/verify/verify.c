/* `unroll verify`: every output leaf against the slice of the input it must come from.
 * See include/unroll/verify.h for the correspondence. Nothing here uses plan.c or the
 * planner's family descriptors: the source of each output leaf is found from the output's
 * names and shapes alone, by the family matchers of verify_family_*.c (verify_family.h);
 * this file holds the leaf sets, the table of each output group, the value comparison and the
 * report. */
#include "verify_compare.h"
#include "verify_family.h"

#include "unroll/verify.h"

#include "unroll/alloc.h"
#include "unroll/ckd.h"
#include "unroll/strmap.h"
#include "unroll/tensor.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- report ----------------------------------------------------------------------------- */

ur_verify_issue *ur_verify__issue(verifier *vf, ur_verify_issue_kind kind, const char *leaf,
                                  const char *source)
{
    ur_verify_report *rep = vf->rep;
    size_t max = vf->opts->max_issues ? vf->opts->max_issues : 20, at;
    ur_verify_issue *is;
    if (kind != UR_VERIFY_VALUE) {
        rep->n_issues_total++;
    }
    if (rep->issues == NULL) {
        rep->issues = ur_calloc(max, sizeof *rep->issues);
        vf->issue_keys = ur_calloc(max, sizeof *vf->issue_keys);
        if (rep->issues == NULL || vf->issue_keys == NULL) {
            ur_free(rep->issues);
            rep->issues = NULL;
            return NULL; /* the count above still records it */
        }
    }
    /* after every kept issue of a key up to this one (most often: at the end) */
    at = rep->n_issues;
    while (at > 0 && vf->issue_keys[at - 1] > vf->issue_key) {
        at--;
    }
    if (at >= max) {
        return NULL;
    }
    if (rep->n_issues == max) {
        rep->n_issues--; /* the last one was found after this one would have been */
    }
    memmove(&rep->issues[at + 1], &rep->issues[at], (rep->n_issues - at) * sizeof *rep->issues);
    memmove(&vf->issue_keys[at + 1], &vf->issue_keys[at],
            (rep->n_issues - at) * sizeof *vf->issue_keys);
    rep->n_issues++;
    vf->issue_keys[at] = vf->issue_key;
    is = &rep->issues[at];
    memset(is, 0, sizeof *is);
    is->kind = kind;
    snprintf(is->leaf, sizeof is->leaf, "%s", leaf ? leaf : "");
    snprintf(is->source, sizeof is->source, "%s", source ? source : "");
    return is;
}

static const char *kind_name(ur_verify_issue_kind k)
{
    switch (k) {
    case UR_VERIFY_VALUE:
        return "mismatch";
    case UR_VERIFY_MISSING:
        return "missing";
    case UR_VERIFY_EXTRA:
        return "extra";
    case UR_VERIFY_SHAPE:
        return "shape";
    case UR_VERIFY_DTYPE:
        return "dtype";
    case UR_VERIFY_KIND:
        return "kind";
    }
    return "?";
}

char *ur_verify_issue_format(const ur_verify_issue *is, char *buf, size_t n)
{
    char idx[256];
    size_t used = 0;
    idx[0] = '\0';
    if (is->kind == UR_VERIFY_VALUE) {
        int k = snprintf(idx, sizeof idx, " index [");
        used = k > 0 ? (size_t)k : 0;
        for (int d = 0; d < is->rank && used < sizeof idx; d++) {
            k = snprintf(idx + used, sizeof idx - used, "%s%" PRIu64, d ? ", " : "", is->index[d]);
            used += k > 0 ? (size_t)k : 0;
        }
        if (used < sizeof idx) {
            snprintf(idx + used, sizeof idx - used, "]");
        }
    }
    snprintf(buf, n, "%s: leaf '%s'%s%s%s%s%s%s%s%s", kind_name(is->kind), is->leaf, idx,
             is->expected[0] ? ": expected " : "", is->expected, is->got[0] ? ", got " : "",
             is->got, is->source[0] ? " (source: " : "", is->source, is->source[0] ? ")" : "");
    return buf;
}

void ur_verify_opts_init(ur_verify_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->param_scan_axis = 1;
    opts->max_issues = 20;
}

void ur_verify_report_dispose(ur_verify_report *rep)
{
    if (rep == NULL) {
        return;
    }
    ur_free(rep->issues);
    memset(rep, 0, sizeof *rep);
}

/* ---- names -------------------------------------------------------------------------------- */

void ur_verify__join(const char *const *c, size_t n, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && used + 1 < cap; i++) {
        int k = snprintf(buf + used, cap - used, "%s%s", i ? "/" : "", c[i]);
        if (k < 0) {
            break;
        }
        used += (size_t)k;
    }
}

void ur_verify__leaf_name(const vleaf *l, char *buf, size_t cap)
{
    ur_verify__join(l->comp, l->len, buf, cap);
}

/* "X_<g>": 1 and the parts when s is a name, an underscore and a decimal index. */
int ur_verify__split_index(const char *s, size_t *xlen, int64_t *g)
{
    const char *u = strrchr(s, '_');
    const char *p;
    int64_t v = 0;
    if (u == NULL || u == s || u[1] == '\0' || (u[1] == '0' && u[2] != '\0')) {
        return 0;
    }
    for (p = u + 1; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10) {
            return 0;
        }
        v = v * 10 + (*p - '0');
    }
    *xlen = (size_t)(u - s);
    *g = v;
    return 1;
}

/* "layers_<j>" or "layer_<j>" (a sub-layer of a scanned block). */
int ur_verify__sub_index(const char *s, int64_t *j)
{
    size_t xl;
    return ur_verify__split_index(s, &xl, j) &&
           ((xl == 6 && memcmp(s, "layers", 6) == 0) || (xl == 5 && memcmp(s, "layer", 5) == 0));
}

char *ur_verify__key_of(const char *const *c, size_t n)
{
    size_t len = 1;
    char *k, *p;
    for (size_t i = 0; i < n; i++) {
        len += strlen(c[i]) + 1;
    }
    k = ur_malloc(len);
    if (k == NULL) {
        return NULL;
    }
    p = k;
    for (size_t i = 0; i < n; i++) {
        size_t m = strlen(c[i]);
        memcpy(p, c[i], m);
        p += m;
        if (i + 1 < n) {
            *p++ = UR_VERIFY_SEP;
        }
    }
    *p = '\0';
    return k;
}

int ur_verify__is_placeholder(const ur_orbax_leaf *l)
{
    switch (l->value_type) {
    case UR_ORBAX_VALUE_NONE:
    case UR_ORBAX_VALUE_EMPTY_DICT:
    case UR_ORBAX_VALUE_EMPTY_LIST:
    case UR_ORBAX_VALUE_EMPTY_TUPLE:
    case UR_ORBAX_VALUE_EMPTY_NAMED_TUPLE:
        return 1;
    default:
        return 0;
    }
}

static int comp_is(const ur_orbax_leaf *l, size_t i, const char *s)
{
    return l->depth > i && strcmp(l->path[i].key, s) == 0;
}

/* ---- leaf sets ---------------------------------------------------------------------------- */

typedef enum { WRAP_PARAMS2, WRAP_PARAMS1, WRAP_MODEL, WRAP_VALUE } wrapping;

/* The leaves of a checkpoint, or of an array (the unit tests' in-memory trees). */
typedef struct {
    const ur_orbax_ckpt *ck;
    const ur_orbax_leaf *arr;
    size_t n;
} leaf_list;

static leaf_list list_of_ckpt(const ur_orbax_ckpt *ck)
{
    leaf_list ll = {ck, NULL, ur_orbax_ckpt_leaf_count(ck)};
    return ll;
}

static const ur_orbax_leaf *list_leaf(const leaf_list *ll, size_t i)
{
    return ll->ck != NULL ? ur_orbax_ckpt_leaf(ll->ck, i) : &ll->arr[i];
}

static wrapping wrapping_of(const leaf_list *ll)
{
    size_t n = ll->n;
    int p1 = 0, model = 0;
    for (size_t i = 0; i < n; i++) {
        const ur_orbax_leaf *l = list_leaf(ll, i);
        if (comp_is(l, 0, "params") && comp_is(l, 1, "params") && l->depth > 2) {
            return WRAP_PARAMS2;
        }
        p1 |= comp_is(l, 0, "params") && l->depth > 1;
        model |= comp_is(l, 0, "model") && l->depth > 1;
    }
    return p1 ? WRAP_PARAMS1 : model ? WRAP_MODEL : WRAP_VALUE;
}

static void vset_dispose(vset *s)
{
    ur_free(s->v);
    ur_free(s->comps);
    ur_idxset_dispose(&s->by_key);
    ur_strmap_dispose(&s->nodes);
    ur_pool_dispose(&s->pool);
    memset(s, 0, sizeof *s);
}

/* Enter leaf s->v[i] into the maps: its key, and each proper prefix of it (the keys of the
 * nodes above it; they point into the leaf's key, no copies). Lookups by path are then
 * constant time rather than a scan of every leaf per output leaf. */
/* A path as the by_key set looks it up: k[0..n). */
typedef struct {
    const char *k;
    size_t n;
} key_span;

static int key_match(const void *ctx, size_t i, const void *key)
{
    const vleaf *v = &((const vset *)ctx)->v[i];
    const key_span *q = key;
    return strncmp(v->key, q->k, q->n) == 0 && v->key[q->n] == '\0';
}

static uint64_t key_rehash(const void *ctx, size_t i)
{
    const char *k = ((const vset *)ctx)->v[i].key;
    return ur_strmap_hash(k, strlen(k));
}

static ur_idxset_keys leaf_keys(const vset *s)
{
    ur_idxset_keys k = {key_match, key_rehash, s};
    return k;
}

/* The index of the leaf whose key is k[0..n), or SIZE_MAX. */
static size_t find_key(const vset *s, const char *k, size_t n)
{
    ur_idxset_keys keys = leaf_keys(s);
    key_span q = {k, n};
    return ur_idxset_find(&s->by_key, &keys, ur_strmap_hash(k, n), &q);
}

/* 1 when the node just above key k[0..len) is not in s->nodes yet (each node is entered with
 * every node above it, so the nearest one says for all). */
static int has_new_node(const vset *s, const char *k, size_t len)
{
    size_t unused;
    for (size_t p = len; p-- > 0;) {
        if (k[p] == UR_VERIFY_SEP) {
            return !ur_strmap_get(&s->nodes, k, p, &unused);
        }
    }
    return 0;
}

static int index_leaf(vset *s, size_t i, ur_err *err)
{
    const vleaf *v = &s->v[i];
    size_t len = strlen(v->key);
    int rc = UR_OK;
    if (s->keyed) {
        ur_idxset_keys keys = leaf_keys(s);
        key_span q = {v->key, len};
        /* the first leaf of a path wins (1: one is there already) */
        rc = ur_idxset_add(&s->by_key, &keys, ur_strmap_hash(v->key, len), i, &q, NULL, err);
    }
    for (size_t p = 0; rc >= 0 && p < len; p++) {
        if (v->key[p] == UR_VERIFY_SEP) {
            rc = ur_strmap_put(&s->nodes, v->key, p, 0, NULL, err);
        }
    }
    return rc < 0 ? rc : UR_OK;
}

/* The model-path leaves of a checkpoint. For the output, `extras` gets the indices of the
 * top-level step / opt_state leaves and `bad` the leaves outside the wrapper. */
static int vset_build(vset *s, const leaf_list *ll, int is_output, verifier *vf, ur_err *err)
{
    size_t n = ll->n, depth = 0;
    wrapping w = wrapping_of(ll);
    int irc;
    char name[1024];

    for (size_t i = 0; i < n; i++) {
        size_t d = list_leaf(ll, i)->depth;
        depth = d > depth ? d : depth;
    }
    s->v = ur_calloc(n ? n : 1, sizeof *s->v);
    /* a leaf's whole path, of which the set keeps the model path (in its pool: the wrapper's
     * components, "params"/"params", were a third of every leaf's) */
    s->comps = ur_calloc(depth ? depth : 1, sizeof *s->comps);
    if (n >= UR_IDXSET_MAX) { /* by_key's limit */
        return ur_err_set(err, UR_EUNSUPPORTED, "more than %zu leaves", UR_IDXSET_MAX);
    }
    /* only input leaves are looked up by path (ur_verify__find_in); the output's are
     * walked in order, and its nodes asked for (ur_verify__any_under) */
    if (s->v == NULL || s->comps == NULL) {
        return ur_err_oom(err);
    }
    s->keyed = !is_output;
    if (s->keyed) {
        ur_idxset_keys keys = leaf_keys(s);
        irc = ur_idxset_reserve(&s->by_key, &keys, n, err);
        if (irc < 0) {
            return irc;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const ur_orbax_leaf *l = list_leaf(ll, i);
        size_t st = 0, en = l->depth;
        int keep = 1, aux = 0;
        vleaf *v;
        for (size_t k = 0; k < l->depth; k++) {
            s->comps[k] = l->path[k].key;
            s->sep_inside |= strchr(l->path[k].key, UR_VERIFY_SEP) != NULL;
        }
        switch (w) {
        case WRAP_PARAMS2:
            keep = comp_is(l, 0, "params") && comp_is(l, 1, "params");
            /* a training state's non-parameter variables, which unroll keeps (plan.c) */
            aux = !is_output && comp_is(l, 0, "nnx_aux") && comp_is(l, 1, "model");
            keep |= aux;
            st = 2;
            break;
        case WRAP_PARAMS1:
            keep = comp_is(l, 0, "params");
            st = 1;
            break;
        case WRAP_MODEL:
            keep = comp_is(l, 0, "model");
            st = 1;
            break;
        case WRAP_VALUE:
            st = !is_output && comp_is(l, 0, "base") ? 1 : 0;
            break;
        }
        if (keep && (w == WRAP_MODEL || w == WRAP_VALUE)) {
            if (en > st && strcmp(l->path[en - 1].key, "value") == 0) {
                en--;
            } else if (is_output) {
                keep = 0;
            }
        }
        for (size_t k = st; keep && k < en; k++) {
            if (!is_output && strcmp(l->path[k].key, "rngs") == 0) {
                keep = 0;
            }
        }
        if (keep && !l->has_array && !ur_verify__is_placeholder(l)) {
            keep = 0;
        }
        if (keep && en <= st) {
            keep = 0;
        }
        if (!keep && is_output) {
            /* step = 0 and opt_state = {} beside a params wrapper (the Linen decode state) */
            int lin = w == WRAP_PARAMS2 || w == WRAP_PARAMS1;
            ur_verify__join(s->comps, l->depth, name, sizeof name);
            if (lin && l->depth == 1 && strcmp(l->path[0].key, "opt_state") == 0) {
                if (l->value_type != UR_ORBAX_VALUE_EMPTY_DICT) {
                    ur_verify_issue *is = ur_verify__issue(vf, UR_VERIFY_KIND, name, NULL);
                    if (is) {
                        snprintf(is->expected, sizeof is->expected, "an empty dict");
                        snprintf(is->got, sizeof is->got, "%s", l->value_type_name);
                    }
                }
            } else if (lin && l->depth == 1 && strcmp(l->path[0].key, "step") == 0) {
                int64_t val = -1;
                int ok = 0;
                if (vf->out_ck != NULL && l->has_array && l->rank == 0 &&
                    ur_dtype_size(l->dtype) <= 8 && !ur_dtype_is_float(l->dtype)) {
                    ur_zarr_array *a = NULL;
                    unsigned char b[8] = {0};
                    uint64_t none[1] = {0};
                    int rc = ur_orbax_ckpt_open_array(vf->out_ck, l, &a, err);
                    if (rc == UR_OK) {
                        rc = ur_zarr_array_read_box(a, none, none, b, err);
                    }
                    ur_zarr_array_close(a);
                    if (rc < 0) {
                        return rc;
                    }
                    memcpy(&val, b, sizeof val); /* little-endian host; upper bytes zero */
                    ok = val == 0;
                }
                if (!ok) {
                    ur_verify_issue *is = ur_verify__issue(vf, UR_VERIFY_KIND, name, NULL);
                    if (is) {
                        snprintf(is->expected, sizeof is->expected, "an integer scalar 0");
                        snprintf(is->got, sizeof is->got, "%s %s", l->value_type_name,
                                 l->has_array ? ur_dtype_name(l->dtype) : "");
                    }
                }
            } else {
                ur_verify__issue(vf, UR_VERIFY_EXTRA, name, "outside the params tree");
            }
            vf->rep->leaves_out++;
        }
        if (keep) {
            const char **comp = ur_pool_alloc(&s->pool, (en - st) * sizeof *comp, err);
            char *key;
            if (comp == NULL) {
                return ur_err_oom(err);
            }
            memcpy(comp, s->comps + st, (en - st) * sizeof *comp);
            v = &s->v[s->n++];
            v->leaf = l;
            v->comp = comp;
            v->len = en - st;
            v->first = st;
            v->aux = aux;
            v->table = -1;
            v->sub = -1;
            key = ur_verify__key_of(v->comp, v->len);
            if (key == NULL) {
                return ur_err_oom(err);
            }
            /* an output leaf's key only serves its set's nodes: kept when it brings one
             * (its siblings share it), NULL otherwise */
            if (!is_output || has_new_node(s, key, strlen(key))) {
                v->key = ur_pool_strndup(&s->pool, key, strlen(key), err);
                irc = v->key == NULL ? UR_ENOMEM : index_leaf(s, s->n - 1, err);
            } else {
                irc = UR_OK;
            }
            ur_free(key);
            if (irc < 0) {
                return irc;
            }
        }
    }
    return UR_OK;
}

/* c[0..n) joined with UR_VERIFY_SEP into buf; its length, or SIZE_MAX when it does not fit. */
static size_t join_key(const char *const *c, size_t n, char *buf, size_t cap)
{
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        size_t m = strlen(c[i]);
        if (used + m + 1 > cap) {
            return SIZE_MAX;
        }
        if (i > 0) {
            buf[used++] = UR_VERIFY_SEP;
        }
        memcpy(buf + used, c[i], m);
        used += m;
    }
    return used;
}

static int same_path(const vleaf *v, const char *const *c, size_t n)
{
    size_t k = 0;
    if (v->len != n) {
        return 0;
    }
    while (k < n && strcmp(v->comp[k], c[k]) == 0) {
        k++;
    }
    return k == n;
}

/* The input leaf with model path `c` (n components), or NULL. */
vleaf *ur_verify__find_in(verifier *vf, const char *const *c, size_t n)
{
    char buf[4096];
    size_t len = vf->in.sep_inside ? SIZE_MAX : join_key(c, n, buf, sizeof buf), at;
    if (len != SIZE_MAX) {
        /* no leaf holds UR_VERIFY_SEP, so keys name paths one to one (a query holding
         * UR_VERIFY_SEP can only find a different path, which same_path rejects) */
        at = find_key(&vf->in, buf, len);
        if (at != SIZE_MAX && same_path(&vf->in.v[at], c, n)) {
            return &vf->in.v[at];
        }
        return NULL;
    }
    for (size_t i = 0; i < vf->in.n; i++) {
        vleaf *v = &vf->in.v[i];
        if (v->len != n) {
            continue;
        }
        size_t k = 0;
        while (k < n && strcmp(v->comp[k], c[k]) == 0) {
            k++;
        }
        if (k == n) {
            return v;
        }
    }
    return NULL;
}

int ur_verify__has_prefix(const vleaf *v, const char *const *d, size_t dlen)
{
    if (v->len < dlen) {
        return 0;
    }
    for (size_t k = 0; k < dlen; k++) {
        if (strcmp(v->comp[k], d[k]) != 0) {
            return 0;
        }
    }
    return 1;
}

/* ---- layer tables ------------------------------------------------------------------------- */

int64_t ur_verify__max_index_under(const vset *s, const char *const *d, size_t dlen, const char *x,
                                   size_t xl, int need_more)
{
    int64_t best = -1;
    for (size_t i = 0; i < s->n; i++) {
        const vleaf *v = &s->v[i];
        size_t l2;
        int64_t g;
        if (!ur_verify__has_prefix(v, d, dlen) || v->len <= dlen + (size_t)need_more) {
            continue;
        }
        if (ur_verify__split_index(v->comp[dlen], &l2, &g) && l2 == xl &&
            memcmp(v->comp[dlen], x, xl) == 0 && g > best) {
            best = g;
        }
    }
    return best;
}

int ur_verify__any_under(const vset *s, const char *const *d, size_t dlen, const char *node)
{
    char buf[4096];
    const char *c[UR_MAX_RANK + 73];
    size_t len = SIZE_MAX, unused;
    if (!s->sep_inside && dlen + 1 <= sizeof c / sizeof c[0]) {
        memcpy(c, d, dlen * sizeof *c);
        c[dlen] = node;
        len = join_key(c, dlen + 1, buf, sizeof buf);
    }
    if (len != SIZE_MAX) {
        /* a node of the tree is a proper prefix of some leaf's key: one lookup */
        return ur_strmap_get(&s->nodes, buf, len, &unused);
    }
    for (size_t i = 0; i < s->n; i++) {
        const vleaf *v = &s->v[i];
        if (ur_verify__has_prefix(v, d, dlen) && v->len > dlen + 1 &&
            strcmp(v->comp[dlen], node) == 0) {
            return 1;
        }
    }
    return 0;
}

/* ---- values ------------------------------------------------------------------------------- */

static ur_dtype cast_of(ur_dtype in)
{
    return ur_dtype_is_float(in) ? UR_DT_BFLOAT16 : in;
}

/* The dtype input leaf i is written in: params are cast, non-parameter variables kept. */
static ur_dtype out_dtype_of(const vleaf *i)
{
    return i->aux ? i->leaf->dtype : cast_of(i->leaf->dtype);
}

/* The elements of one chunk of leaf l (UINT64_MAX when the leaf does not say its chunks). */
static uint64_t chunk_elements(const ur_orbax_leaf *l)
{
    uint64_t nel = 1;
    if (l->rank > 0 && (l->chunk_shape == NULL || l->shape == NULL)) {
        return UINT64_MAX;
    }
    for (int d = 0; d < l->rank; d++) {
        uint64_t c = l->chunk_shape[d] < l->shape[d] ? l->chunk_shape[d] : l->shape[d];
        if (ur_ckd_mul64(&nel, nel, c)) {
            return UINT64_MAX;
        }
    }
    return nel;
}

/* The buffers a comparison of output leaf `o` (index fidx on the nfix axes fax of input leaf
 * `i`) holds (verify_compare.c): a piece of an input chunk, at most UR_VCMP_PIECE_BYTES
 * unless the output's chunks in it are larger, and an output chunk with what it must hold
 * (UINT64_MAX when a leaf does not say its chunks). */
static uint64_t compare_bytes(const ur_orbax_leaf *o, const ur_orbax_leaf *i, int nfix,
                              const int *fax, ur_dtype want)
{
    uint64_t ne_o = chunk_elements(o), ne_i = chunk_elements(i), across = 1, a, piece;
    uint64_t isz = ur_dtype_size(i->dtype), per = 2 * (uint64_t)ur_dtype_size(want);
    if (ne_o == UINT64_MAX || ne_i == UINT64_MAX) {
        return UINT64_MAX;
    }
    for (int m = 0; m < nfix; m++) {
        if (fax[m] >= 0 && fax[m] < i->rank) {
            across *= i->chunk_shape[fax[m]] < i->shape[fax[m]] ? i->chunk_shape[fax[m]]
                                                                : i->shape[fax[m]];
        }
    }
    if (ur_ckd_mul64(&a, ne_o, per) || ur_ckd_mul64(&piece, ne_o, across) ||
        ur_ckd_mul64(&piece, piece, isz) || ur_ckd_mul64(&ne_i, ne_i, isz)) {
        return UINT64_MAX;
    }
    piece = piece > UR_VCMP_PIECE_BYTES ? piece : UR_VCMP_PIECE_BYTES;
    piece = piece < ne_i ? piece : ne_i;
    return ur_ckd_add64(&a, a, piece) ? UINT64_MAX : a;
}

/* Below this many bytes in a decoded input chunk, the output leaves sliced from it are
 * compared one by one, each decoding the chunks it needs (a few microseconds each), rather
 * than held back for their group: 100,000 small leaves keep no records. */
#define GROUP_BYTES ((uint64_t)256 << 10)
/* Groups held back at once (the oldest is compared when one more comes), and members in one
 * group (a larger one is compared in parts, each decoding the chunks again). */
#define MAX_PENDING 64
#define MAX_MEMBERS 256

/* The output leaves taken so far from one input leaf, held back until all its slices are
 * found: its chunks are then decoded once for all of them (verify_compare.h). */
struct vpend {
    const vleaf *src;
    size_t expect; /* members that complete it */
    size_t n, cap;
    ur_vcmp_member *m;
    char **names; /* each member's two names, in one ur_malloc */
};

/* Whether leaf i's chunks hold several slices on axes fax[0..nfix) and are worth decoding
 * once for all of them. */
static int worth_grouping(const ur_orbax_leaf *i, int nfix, const int *fax)
{
    uint64_t ne = chunk_elements(i), across = 1;
    if (ne == UINT64_MAX) {
        return 1;
    }
    for (int m = 0; m < nfix; m++) {
        if (fax[m] >= 0 && fax[m] < i->rank) {
            across *= i->chunk_shape[fax[m]] < i->shape[fax[m]] ? i->chunk_shape[fax[m]]
                                                                : i->shape[fax[m]];
        }
    }
    return across > 1 && ne >= GROUP_BYTES / ur_dtype_size(i->dtype);
}

static void pend_dispose(struct vpend *p)
{
    for (size_t k = 0; k < p->n; k++) {
        ur_free(p->names[k]);
    }
    ur_free(p->m);
    ur_free(p->names);
    memset(p, 0, sizeof *p);
}

/* Compare held-back group p now (and forget it). */
static int pend_flush(verifier *vf, size_t p, ur_err *err)
{
    struct vpend *g = &vf->pend[p];
    ur_vcmp_group grp;
    uint64_t bytes = 0;
    int rc;
    memset(&grp, 0, sizeof grp);
    grp.i = g->src->leaf;
    grp.want = out_dtype_of(g->src);
    grp.n = g->n;
    grp.m = g->m;
    for (size_t k = 0; k < g->n; k++) {
        uint64_t b = compare_bytes(g->m[k].o, grp.i, g->m[k].nfix, g->m[k].fax, grp.want);
        bytes = b > bytes ? b : bytes;
    }
    grp.exclusive = bytes >= UR_VCMP_EXCLUSIVE_BYTES;
    rc = ur_vcmp_submit(vf->cmp, &grp, err);
    pend_dispose(g);
    memmove(&vf->pend[p], &vf->pend[p + 1], (vf->n_pend - p - 1) * sizeof *vf->pend);
    vf->n_pend--;
    return rc;
}

/* Hold member m (from input leaf i, which has n_slices slices) back for i's group. */
static int pend_add(verifier *vf, const vleaf *i, const ur_vcmp_member *m, int64_t n_slices,
                    ur_err *err)
{
    struct vpend *g = NULL;
    size_t lo = strlen(m->oname) + 1, ls = strlen(m->src) + 1;
    char *names;
    int rc;
    for (size_t p = 0; p < vf->n_pend && g == NULL; p++) {
        g = vf->pend[p].src == i ? &vf->pend[p] : NULL;
    }
    if (g == NULL) {
        if (vf->n_pend == MAX_PENDING && (rc = pend_flush(vf, 0, err)) < 0) {
            return rc;
        }
        if (vf->pend == NULL) {
            vf->pend = ur_calloc(MAX_PENDING, sizeof *vf->pend);
            if (vf->pend == NULL) {
                return ur_err_oom(err);
            }
        }
        g = &vf->pend[vf->n_pend++];
        memset(g, 0, sizeof *g);
        g->src = i;
        g->expect = n_slices > 0 && (uint64_t)n_slices < MAX_MEMBERS ? (size_t)n_slices
                                                                     : MAX_MEMBERS;
    }
    if (g->n == g->cap) {
        size_t cap_m = g->cap, cap_n = g->cap;
        ur_vcmp_member *nm = ur_grow(g->m, &cap_m, g->n, sizeof *nm, 8);
        char **nn;
        if (nm == NULL) {
            return ur_err_oom(err);
        }
        g->m = nm;
        nn = ur_grow(g->names, &cap_n, g->n, sizeof *nn, 8);
        if (nn == NULL) {
            return ur_err_oom(err);
        }
        g->names = nn;
        g->cap = cap_m < cap_n ? cap_m : cap_n;
    }
    names = ur_malloc(lo + ls);
    if (names == NULL) {
        return ur_err_oom(err);
    }
    memcpy(names, m->oname, lo);
    memcpy(names + lo, m->src, ls);
    g->names[g->n] = names;
    g->m[g->n] = *m;
    g->m[g->n].oname = names;
    g->m[g->n].src = names + lo;
    g->n++;
    return g->n >= g->expect ? pend_flush(vf, (size_t)(g - vf->pend), err) : UR_OK;
}

/* Output leaf `o` against input leaf `i` (index fidx[m] taken on axis fax[m] for m < nfix,
 * fax increasing; nfix 0: whole; n_slices: the slices of i that output leaves take),
 * compared on the verifier's comparer (verify_compare.h), now or with the other slices of
 * i; its result comes back to apply_compare. */
static int compare_values(verifier *vf, const vleaf *o, const vleaf *i, int nfix, const int *fax,
                          const int64_t *fidx, int64_t n_slices, const char *oname,
                          const char *src, ur_err *err)
{
    ur_vcmp_member m;
    ur_vcmp_group grp;
    memset(&m, 0, sizeof m);
    m.o = o->leaf;
    m.nfix = nfix;
    for (int k = 0; k < nfix && k < UR_VCMP_MAX_FIX; k++) {
        m.fax[k] = fax[k];
        m.fidx[k] = fidx[k];
    }
    m.oname = oname;
    m.src = src;
    m.tag = (size_t)vf->issue_key;
    if (nfix > 0 && worth_grouping(i->leaf, nfix, fax)) {
        return pend_add(vf, i, &m, n_slices, err);
    }
    memset(&grp, 0, sizeof grp);
    grp.i = i->leaf;
    grp.want = out_dtype_of(i);
    grp.n = 1;
    grp.m = &m;
    grp.exclusive = compare_bytes(o->leaf, i->leaf, nfix, fax, grp.want) >=
                    UR_VCMP_EXCLUSIVE_BYTES;
    return ur_vcmp_submit(vf->cmp, &grp, err);
}

/* A comparison's result, in the report (on the matching thread, in output-leaf order). */
static void apply_compare(void *ctx, size_t tag, const ur_vcmp_result *res)
{
    verifier *vf = ctx;
    uint64_t key = vf->issue_key;
    vf->rep->arrays_compared++;
    vf->rep->elements += res->elements;
    vf->rep->elements_bad += res->elements_bad;
    if (res->bad_leaf) {
        vf->rep->n_issues_total++;
    }
    vf->issue_key = (uint64_t)tag + 1; /* after its leaf's other issues */
    for (int k = 0; k < res->n_value; k++) {
        ur_verify_issue *is = ur_verify__issue(vf, UR_VERIFY_VALUE, NULL, NULL);
        if (is != NULL) {
            *is = res->value[k];
        }
    }
    vf->issue_key = key;
}

/* ---- matching ----------------------------------------------------------------------------- */

void ur_verify__shape_str(char *buf, size_t n, const uint64_t *s, int rank)
{
    size_t used = 0;
    int k = snprintf(buf, n, "[");
    used = k > 0 ? (size_t)k : 0;
    for (int d = 0; d < rank && used < n; d++) {
        k = snprintf(buf + used, n - used, "%s%" PRIu64, d ? ", " : "", s[d]);
        used += k > 0 ? (size_t)k : 0;
    }
    if (used < n) {
        snprintf(buf + used, n - used, "]");
    }
}

/* The layer axis of input leaf i for output leaf o: removing it gives o's shape and its
 * length is n. Several fit: param_scan_axis if it is one of them, else the first. */
int ur_verify__layer_axis(const verifier *vf, const vleaf *o, const vleaf *i, int64_t n)
{
    int first = -1;
    if (o->leaf->rank + 1 != i->leaf->rank) {
        return -1;
    }
    for (int a = 0; a < i->leaf->rank; a++) {
        int ok = i->leaf->shape[a] == (uint64_t)n;
        for (int d = 0, k = 0; ok && d < i->leaf->rank; d++) {
            if (d != a) {
                ok = i->leaf->shape[d] == o->leaf->shape[k++];
            }
        }
        if (ok && a == (i->aux ? 0 : vf->opts->param_scan_axis)) {
            return a;
        }
        if (ok && first < 0) {
            first = a;
        }
    }
    return first;
}

/* The components output o shares with its source i at their ends (below the layer group)
 * must be the same kind of key: a list index written as a dict key restores as a dict
 * {'0': ...} where the model has a list. Returns 0 after reporting a difference. */
static int key_types_agree(verifier *vf, const vleaf *o, const vleaf *i, const char *oname,
                           const char *src)
{
    size_t n = o->len < i->len ? o->len : i->len;
    for (size_t j = 1; j <= n; j++) {
        const ur_orbax_key *ko = &o->leaf->path[o->first + o->len - j];
        const ur_orbax_key *ki = &i->leaf->path[i->first + i->len - j];
        ur_verify_issue *is;
        if (strcmp(ko->key, ki->key) != 0) {
            break;
        }
        if (ko->type == ki->type) {
            continue;
        }
        is = ur_verify__issue(vf, UR_VERIFY_KIND, oname, src);
        if (is) {
            static const char *const what[] = {"?", "a list index", "a dict key"};
            snprintf(is->expected, sizeof is->expected, "'%.64s' %s", ki->key,
                     what[ki->type == UR_ORBAX_KEY_SEQUENCE ? 1 : 2]);
            snprintf(is->got, sizeof is->got, "%s",
                     what[ko->type == UR_ORBAX_KEY_SEQUENCE ? 1 : 2]);
        }
        return 0;
    }
    return 1;
}

/* Check one output leaf against its source. */
static int check_pair(verifier *vf, const vleaf *o, vleaf *i, int tbl, int64_t layer, ur_err *err)
{
    char oname[1024], iname[1024], src[1200], a[256], b[256];
    const table *t = tbl >= 0 ? &vf->tables[tbl] : NULL;
    int axis = -1;
    ur_verify_issue *is;

    ur_verify__leaf_name(o, oname, sizeof oname);
    ur_verify__leaf_name(i, iname, sizeof iname);
    if (t != NULL) {
        snprintf(src, sizeof src, "%s[layer %" PRId64 " of %" PRId64 "]", iname, layer, t->n);
        if (i->seen == NULL) {
            i->seen = ur_pool_alloc(&vf->in.pool, (size_t)(t->n ? t->n : 1), err);
            if (i->seen == NULL) {
                return ur_err_oom(err);
            }
            i->table = tbl;
        }
        if (layer < t->n) {
            i->seen[layer] = 1;
        }
    } else {
        snprintf(src, sizeof src, "%s", iname);
    }
    i->hits++;
    if (!key_types_agree(vf, o, i, oname, src)) {
        return UR_OK;
    }

    if (ur_verify__is_placeholder(o->leaf) || ur_verify__is_placeholder(i->leaf)) {
        if (o->leaf->value_type != i->leaf->value_type) {
            is = ur_verify__issue(vf, UR_VERIFY_KIND, oname, src);
            if (is) {
                snprintf(is->expected, sizeof is->expected, "%s", i->leaf->value_type_name);
                snprintf(is->got, sizeof is->got, "%s", o->leaf->value_type_name);
            }
        }
        return UR_OK;
    }
    if (t != NULL && i->leaf->rank == 0) {
        /* as the conversion says (plan.c): a scanned model stacks every array of the group */
        ur_verify__join(i->comp, t->dlen + 1, a, sizeof a);
        return ur_err_set(err, UR_ECORRUPT,
                          "leaf '%s': rank-0 leaf under the scanned group %s has no layer axis "
                          "(a scanned model stacks every parameter of the group)",
                          iname, a);
    }
    if (o->leaf->dtype != out_dtype_of(i)) {
        is = ur_verify__issue(vf, UR_VERIFY_DTYPE, oname, src);
        if (is) {
            snprintf(is->expected, sizeof is->expected, "%s", ur_dtype_name(out_dtype_of(i)));
            snprintf(is->got, sizeof is->got, "%s", ur_dtype_name(o->leaf->dtype));
        }
        return UR_OK;
    }
    if (t != NULL) {
        axis = ur_verify__layer_axis(vf, o, i, t->n);
        if (axis < 0) {
            is = ur_verify__issue(vf, UR_VERIFY_SHAPE, oname, src);
            if (is) {
                ur_verify__shape_str(a, sizeof a, i->leaf->shape, i->leaf->rank);
                ur_verify__shape_str(b, sizeof b, o->leaf->shape, o->leaf->rank);
                if (snprintf(is->expected, sizeof is->expected,
                             "input %.80s less an axis of length %" PRId64, a, t->n) < 0 ||
                    snprintf(is->got, sizeof is->got, "%.120s", b) < 0) {
                    is->got[0] = '\0';
                }
            }
            return UR_OK;
        }
        snprintf(src + strlen(src) - 1, sizeof src - strlen(src) + 1, ", axis %d]", axis);
    } else if (o->leaf->rank != i->leaf->rank ||
               memcmp(o->leaf->shape, i->leaf->shape,
                      (size_t)o->leaf->rank * sizeof o->leaf->shape[0]) != 0) {
        is = ur_verify__issue(vf, UR_VERIFY_SHAPE, oname, src);
        if (is) {
            ur_verify__shape_str(is->expected, sizeof is->expected, i->leaf->shape, i->leaf->rank);
            ur_verify__shape_str(is->got, sizeof is->got, o->leaf->shape, o->leaf->rank);
        }
        return UR_OK;
    }
    if (!ur_tensor_cast_supported(out_dtype_of(i), i->leaf->dtype)) {
        is = ur_verify__issue(vf, UR_VERIFY_DTYPE, oname, src);
        if (is) {
            snprintf(is->expected, sizeof is->expected, "a dtype unroll can cast (not %s)",
                     ur_dtype_name(i->leaf->dtype));
        }
        return UR_OK;
    }
    return compare_values(vf, o, i, axis >= 0 ? 1 : 0, &axis, &layer, t != NULL ? t->n : 0, oname,
                          src, err);
}

/* ---- slices (pipeline stacks, nested blocks) ---------------------------------------------- */

/* Check output leaf o against slice `slice` (of n_slices) of input leaf i: index fidx[m] on
 * axis fax[m], the other axes equal to o's. */
static int check_slices(verifier *vf, const vleaf *o, vleaf *i, int nfix, const int *fax,
                        const int64_t *fidx, int64_t slice, int64_t n_slices, ur_err *err)
{
    char oname[1024], iname[1024], src[1200], a[256], b[256];
    ur_verify_issue *is;
    int ok;

    ur_verify__leaf_name(o, oname, sizeof oname);
    ur_verify__leaf_name(i, iname, sizeof iname);
    if (nfix == 3) {
        snprintf(src, sizeof src, "%s[%" PRId64 ", %" PRId64 ", %" PRId64 " on axes %d, %d, %d]",
                 iname, fidx[0], fidx[1], fidx[2], fax[0], fax[1], fax[2]);
    } else if (nfix == 2) {
        snprintf(src, sizeof src, "%s[%" PRId64 ", %" PRId64 " on axes %d, %d]", iname, fidx[0],
                 fidx[1], fax[0], fax[1]);
    } else {
        snprintf(src, sizeof src, "%s[%" PRId64 " on axis %d]", iname, fidx[0], fax[0]);
    }
    if (i->seen == NULL) {
        i->seen = ur_pool_alloc(&vf->in.pool, (size_t)(n_slices > 0 ? n_slices : 1), err);
        if (i->seen == NULL) {
            return ur_err_oom(err);
        }
        i->n_slices = n_slices;
    }
    if (i->n_slices != n_slices) {
        is = ur_verify__issue(vf, UR_VERIFY_SHAPE, oname, src);
        if (is) {
            snprintf(is->expected, sizeof is->expected, "%" PRId64 " layers from the input leaf",
                     i->n_slices);
            snprintf(is->got, sizeof is->got, "%" PRId64, n_slices);
        }
        return UR_OK;
    }
    if (slice >= 0 && slice < n_slices) {
        i->seen[slice] = 1;
    }
    i->hits++;
    if (!key_types_agree(vf, o, i, oname, src)) {
        return UR_OK;
    }
    if (ur_verify__is_placeholder(o->leaf) || ur_verify__is_placeholder(i->leaf)) {
        is = ur_verify__issue(vf, UR_VERIFY_KIND, oname, src);
        if (is) {
            snprintf(is->expected, sizeof is->expected, "an array slice");
            snprintf(is->got, sizeof is->got, "%s", o->leaf->value_type_name);
        }
        return UR_OK;
    }
    if (o->leaf->dtype != out_dtype_of(i) ||
        !ur_tensor_cast_supported(out_dtype_of(i), i->leaf->dtype)) {
        is = ur_verify__issue(vf, UR_VERIFY_DTYPE, oname, src);
        if (is) {
            snprintf(is->expected, sizeof is->expected, "%s", ur_dtype_name(out_dtype_of(i)));
            snprintf(is->got, sizeof is->got, "%s", ur_dtype_name(o->leaf->dtype));
        }
        return UR_OK;
    }
    ok = o->leaf->rank + nfix == i->leaf->rank;
    for (int d = 0, k = 0, m = 0; ok && d < i->leaf->rank; d++) {
        if (m < nfix && d == fax[m]) {
            ok = fidx[m] >= 0 && (uint64_t)fidx[m] < i->leaf->shape[d];
            m++;
        } else {
            ok = i->leaf->shape[d] == o->leaf->shape[k++];
        }
    }
    if (!ok) {
        is = ur_verify__issue(vf, UR_VERIFY_SHAPE, oname, src);
        if (is) {
            ur_verify__shape_str(a, sizeof a, i->leaf->shape, i->leaf->rank);
            ur_verify__shape_str(b, sizeof b, o->leaf->shape, o->leaf->rank);
            if (snprintf(is->expected, sizeof is->expected, "input %.80s less its layer axes", a) <
                    0 ||
                snprintf(is->got, sizeof is->got, "%.120s", b) < 0) {
                is->got[0] = '\0';
            }
        }
        return UR_OK;
    }
    return compare_values(vf, o, i, nfix, fax, fidx, n_slices, oname, src, err);
}

/* The axis a of input leaf i (rank o + n) such that removing axes a..a+n-1 leaves o's shape;
 * a == pref preferred; -1: none. */
int ur_verify__run_axis(const vleaf *o, const vleaf *i, int n, int64_t pref)
{
    int best = -1;
    if (o->leaf->rank + n != i->leaf->rank) {
        return -1;
    }
    for (int a = 0; a + n <= i->leaf->rank; a++) {
        int ok = 1;
        for (int d = 0, q = 0; ok && d < i->leaf->rank; d++) {
            if (d < a || d >= a + n) {
                ok = i->leaf->shape[d] == o->leaf->shape[q++];
            }
        }
        if (ok && (best < 0 || a == pref)) {
            best = a;
        }
    }
    return best;
}

int ur_verify__slices(vpair *out, vleaf *src, int nfix, const int *fax, const int64_t *fidx,
                      int64_t slice, int64_t n_slices)
{
    out->kind = VPAIR_SLICES;
    out->src = src;
    out->nfix = nfix;
    for (int m = 0; m < nfix; m++) {
        out->fax[m] = fax[m];
        out->fidx[m] = fidx[m];
    }
    out->slice = slice;
    out->n_slices = n_slices;
    return UR_OK;
}

int ur_verify__match(verifier *vf, const vleaf *o, vpair *out, ur_err *err)
{
    int rc;
    memset(out, 0, sizeof *out);
    out->src = ur_verify__find_in(vf, o->comp, o->len);
    if (out->src != NULL) {
        out->kind = VPAIR_LAYER; /* the same path: the whole leaf */
        out->tbl = -1;
        return UR_OK;
    }
    rc = ur_verify_family_mtp__match(vf, o, out, err);
    if (rc < 0 || out->kind != VPAIR_NONE) {
        return rc;
    }
    /* an unrolled layer D/X_<g>/R: each family of the table in turn */
    for (size_t k = 0; k < o->len; k++) {
        size_t xl;
        int64_t g;
        int ti = -1;
        if (!ur_verify__split_index(o->comp[k], &xl, &g)) {
            continue;
        }
        rc = ur_verify_family_blocks__table(vf, o->comp, k, o->comp[k], xl, &ti, err);
        if (rc < 0) {
            return rc;
        }
        for (size_t f = 0; f < ur_verify_family_count; f++) {
            const ur_verify_family *fam = ur_verify_family_table[f];
            if (fam->layers_only && (xl != 6 || memcmp(o->comp[k], "layers", 6) != 0)) {
                continue;
            }
            if (fam->under != NULL && !ur_verify__any_under(&vf->in, o->comp, k, fam->under)) {
                continue;
            }
            rc = fam->match(vf, o, k, g, ti, out, err);
            if (rc < 0 || out->kind != VPAIR_NONE) {
                return rc;
            }
        }
    }
    return UR_OK;
}

/* Find the source of output leaf o and check it. */
static int match_output(verifier *vf, const vleaf *o, ur_err *err)
{
    char oname[1024];
    vpair pair;
    int rc;

    vf->rep->leaves_out++;
    rc = ur_verify__match(vf, o, &pair, err);
    if (rc < 0) {
        return rc;
    }
    switch (pair.kind) {
    case VPAIR_LAYER:
        return check_pair(vf, o, pair.src, pair.tbl, pair.layer, err);
    case VPAIR_SLICES:
        return check_slices(vf, o, pair.src, pair.nfix, pair.fax, pair.fidx, pair.slice,
                            pair.n_slices, err);
    case VPAIR_DONE:
        return UR_OK;
    case VPAIR_NONE:
        break;
    }
    ur_verify__leaf_name(o, oname, sizeof oname);
    ur_verify__issue(vf, UR_VERIFY_EXTRA, oname, "no matching input leaf");
    return UR_OK;
}

/* Input leaves (or layers of them) that no output leaf came from. */
static void report_missing(verifier *vf)
{
    char iname[1024], oname[1100];
    ur_err oom;
    for (size_t i = 0; i < vf->in.n; i++) {
        const vleaf *v = &vf->in.v[i];
        ur_verify__leaf_name(v, iname, sizeof iname);
        if (v->hits == 0 && ur_verify_family_mtp__not_carried(vf, v)) {
            continue;
        }
        /* out of memory there: reported missing, never passed over */
        if (v->hits == 0 && ur_verify_family_engram__not_carried(vf, v, &oom)) {
            continue;
        }
        if (v->hits == 0) {
            ur_verify__issue(vf, UR_VERIFY_MISSING, "(no output leaf)", iname);
            continue;
        }
        for (int64_t b = 0; b < v->n_slices; b++) {
            char tail[1024], head[1024];
            if (v->seen[b]) {
                continue;
            }
            ur_verify__join(v->comp, v->pdlen, head, sizeof head);
            ur_verify__join(v->comp + v->rest, v->len - v->rest, tail, sizeof tail);
            if (snprintf(oname, sizeof oname, "%.500s%s%.40s_%" PRId64 "/%.400s", head,
                         v->pdlen ? "/" : "", v->pname ? v->pname : "layers",
                         (b / v->pdiv) * v->pmul + b % v->pdiv + v->padd, tail) < 0) {
                oname[0] = '\0';
            }
            ur_verify__issue(vf, UR_VERIFY_MISSING, oname, iname);
        }
        if (v->table >= 0) {
            const table *t = &vf->tables[v->table];
            for (int64_t b = 0; b < t->n; b++) {
                char tail[1024], head[1024];
                if (v->seen[b]) {
                    continue;
                }
                ur_verify__join(v->comp, t->dlen, head, sizeof head);
                ur_verify__join(v->comp + v->rest, v->len - v->rest, tail, sizeof tail);
                if (snprintf(oname, sizeof oname, "%.500s%s%.100s_%" PRId64 "/%.400s", head,
                             t->dlen ? "/" : "", t->x, t->h + b * t->k + (v->sub > 0 ? v->sub : 0),
                             tail) < 0) {
                    oname[0] = '\0';
                }
                ur_verify__issue(vf, UR_VERIFY_MISSING, oname, iname);
            }
        }
    }
}

/* The layers of each parent must add up to num_decoder_layers. */
static void check_layer_count(verifier *vf)
{
    for (size_t i = 0; i < vf->n_tables; i++) {
        int64_t sum = 0;
        int first = 1, any = 0;
        for (size_t j = 0; j < vf->n_tables; j++) {
            const table *t = &vf->tables[j];
            if (strcmp(t->dkey, vf->tables[i].dkey) != 0) {
                continue;
            }
            if (j < i) {
                first = 0;
            }
            if (t->g != NULL || t->r > 0 || t->pipe) {
                any = 1;
                sum += t->n_out;
            }
        }
        if (first && any && sum != vf->opts->num_decoder_layers) {
            char d[600];
            ur_verify_issue *is;
            snprintf(d, sizeof d, "%s/*", vf->tables[i].dkey);
            for (char *p = d; *p; p++) {
                *p = *p == UR_VERIFY_SEP ? '/' : *p;
            }
            is = ur_verify__issue(vf, UR_VERIFY_SHAPE, d, "num_decoder_layers");
            if (is) {
                snprintf(is->expected, sizeof is->expected, "%" PRId64 " layers",
                         vf->opts->num_decoder_layers);
                snprintf(is->got, sizeof is->got, "%" PRId64, sum);
            }
        }
    }
}

static int scratch_alloc(verifier *vf, ur_err *err)
{
    size_t depth = 0;
    for (size_t i = 0; i < vf->out.n; i++) {
        depth = vf->out.v[i].len > depth ? vf->out.v[i].len : depth;
    }
    vf->scratch = ur_calloc(depth + 3, sizeof *vf->scratch);
    return vf->scratch == NULL ? ur_err_oom(err) : UR_OK;
}

/* The verifier over two leaf lists; ur_verify__dispose in any case. */
static int verifier_init(verifier *vf, ur_orbax_ckpt *in_ck, ur_orbax_ckpt *out_ck,
                         const leaf_list *in, const leaf_list *out, const ur_verify_opts *opts,
                         int helpers, ur_verify_report *rep, ur_err *err)
{
    int rc;
    memset(rep, 0, sizeof *rep);
    memset(vf, 0, sizeof *vf);
    vf->in_ck = in_ck;
    vf->out_ck = out_ck;
    vf->opts = opts;
    vf->rep = rep;
    rc = ur_vcmp_create(&vf->cmp, in_ck, out_ck, helpers, opts->piece_bytes, apply_compare, vf,
                        err);
    if (rc == UR_OK) {
        rc = vset_build(&vf->in, in, 0, vf, err);
    }
    if (rc == UR_OK) {
        rc = vset_build(&vf->out, out, 1, vf, err);
    }
    if (rc == UR_OK) {
        rc = scratch_alloc(vf, err);
    }
    if (rc == UR_OK) {
        rep->leaves_in = vf->in.n;
    }
    return rc;
}

int ur_verify__init(verifier *vf, const ur_orbax_leaf *in, size_t n_in, const ur_orbax_leaf *out,
                    size_t n_out, const ur_verify_opts *opts, ur_verify_report *rep, ur_err *err)
{
    leaf_list li = {NULL, in, n_in};
    leaf_list lo = {NULL, out, n_out};
    return verifier_init(vf, NULL, NULL, &li, &lo, opts, 0, rep, err);
}

int ur_verify__init_in(verifier *vf, ur_orbax_ckpt *in_ck, const ur_orbax_leaf *out, size_t n_out,
                       const ur_verify_opts *opts, ur_verify_report *rep, ur_err *err)
{
    leaf_list li = list_of_ckpt(in_ck);
    leaf_list lo = {NULL, out, n_out};
    return verifier_init(vf, in_ck, NULL, &li, &lo, opts, 0, rep, err);
}

void ur_verify__dispose(verifier *vf)
{
    vset_dispose(&vf->in);
    vset_dispose(&vf->out);
    for (size_t i = 0; i < vf->n_tables; i++) {
        ur_free(vf->tables[i].dkey);
        ur_free(vf->tables[i].x);
        ur_free(vf->tables[i].chunks);
    }
    ur_free(vf->tables);
    ur_free(vf->scratch);
    for (size_t p = 0; p < vf->n_pend; p++) {
        pend_dispose(&vf->pend[p]);
    }
    ur_free(vf->pend);
    ur_vcmp_free(vf->cmp);
    ur_free(vf->issue_keys);
    memset(vf, 0, sizeof *vf);
}

/* Helper threads of the comparer: one per other core (at most 7). */
static int cores_for_compare(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores > 8 ? 7 : cores > 1 ? (int)cores - 1 : 0;
}

int ur_verify_run(ur_verify_report *rep, ur_orbax_ckpt *in, ur_orbax_ckpt *out,
                  const ur_verify_opts *opts, ur_err *err)
{
    verifier vf;
    ur_verify_opts dflt;
    leaf_list li = list_of_ckpt(in);
    leaf_list lo = list_of_ckpt(out);
    int rc;

    if (opts == NULL) {
        ur_verify_opts_init(&dflt);
        opts = &dflt;
    }
    /* the values are compared on every core (verify_compare.h) */
    rc = verifier_init(&vf, in, out, &li, &lo, opts, cores_for_compare(), rep, err);
    if (rc < 0) {
        goto done;
    }
    for (size_t i = 0; i < vf.out.n && rc == UR_OK; i++) {
        vf.issue_key = 2 * (uint64_t)(i + 1); /* after set-up's issues; +1: its values' */
        rc = match_output(&vf, &vf.out.v[i], err);
    }
    while (rc == UR_OK && vf.n_pend > 0) {
        rc = pend_flush(&vf, 0, err); /* groups with slices missing */
    }
    if (rc == UR_OK) {
        rc = ur_vcmp_finish(vf.cmp, err);
    } else {
        ur_err first;
        /* a comparison of an earlier leaf that failed is the error one thread would meet */
        if (ur_vcmp_finish(vf.cmp, &first) < 0) {
            *err = first;
            rc = first.code < 0 ? first.code : UR_EINTERNAL;
        }
    }
    rep->chunks_decoded = ur_vcmp_chunks_decoded(vf.cmp);
    if (rc < 0) {
        goto done;
    }
    vf.issue_key = UINT64_MAX;
    report_missing(&vf);
    if (opts->num_decoder_layers > 0) {
        check_layer_count(&vf);
    }
done:
    ur_verify__dispose(&vf);
    return rc;
}
