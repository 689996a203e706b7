/* `unroll verify` of a Hugging Face folder (unroll/verify.h, ur_verify_hf_run).
 *
 * What the folder must hold comes from the export's plan (each tensor's name, dtype, shape,
 * MaxText parameter, rearrangement and arithmetic: the family's table, docs/huggingface.md);
 * everything else is worked out here, apart from the export's code:
 *   - which slice of which input leaf the parameter is: the verifier's own pairing
 *     (verify.c, verify_family_*.c), as for an Orbax output;
 *   - where each element lands: the rearrangement's parts walked one element at a time in the
 *     tensor's order (an odometer over the parts), not tensor_rearrange.c's boxes;
 *   - its value: the cast to the tensor's dtype, then the arithmetic in float32 rounded back,
 *     one element at a time, with the constants computed here from the shapes;
 *   - a piece of a fused kernel (Qwen3.5's in_proj_qkvz cut into query, key, value and
 *     gate) walks only the range its pattern keeps of a part ("b[lo:hi]"), from lo;
 *   - a tensor joined from pieces (gpt-oss's and Gemma 4's gate_up_proj, Qwen3.5's
 *     in_proj_qkv) is checked once per piece, each against its own parameter, element x of
 *     the piece at the tensor's (x / inner) * run + at + x % inner (joined_at).
 * The tensor is read in pieces along its first part (piece_bytes each), each piece's input
 * box read whole, so memory is about two pieces whatever the model's size. */
#include "verify_family.h"

#include "unroll/alloc.h"
#include "unroll/hf.h"
#include "unroll/kvstore.h"
#include "unroll/safetensors.h"
#include "unroll/tensor.h"
#include "unroll/zarr.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define INDEX "model.safetensors.index.json"
#define SINGLE "model.safetensors"
#define VALUE_ISSUES 3 /* value issues reported per tensor */

/* The folder's shards and their headers. */
typedef struct {
    char **file;
    ur_st_header *h;
    size_t n;
    uint8_t **used; /* per file, per entry: a plan tensor named it */
} folder;

static void folder_dispose(folder *f)
{
    for (size_t i = 0; i < f->n; i++) {
        ur_free(f->file[i]);
        ur_st_header_dispose(&f->h[i]);
        ur_free(f->used[i]);
    }
    ur_free(f->file);
    ur_free(f->h);
    ur_free(f->used);
}

static int add_file(folder *f, ur_kvstore *kv, const char *name, ur_err *err)
{
    for (size_t i = 0; i < f->n; i++) {
        if (strcmp(f->file[i], name) == 0) {
            return UR_OK;
        }
    }
    char **file = ur_realloc(f->file, (f->n + 1) * sizeof *file);
    ur_st_header *h = file != NULL ? ur_realloc(f->h, (f->n + 1) * sizeof *h) : NULL;
    uint8_t **used = h != NULL ? ur_realloc(f->used, (f->n + 1) * sizeof *used) : NULL;
    if (file != NULL) {
        f->file = file;
    }
    if (h != NULL) {
        f->h = h;
    }
    if (used == NULL) {
        return ur_err_oom(err);
    }
    f->used = used;
    memset(&f->h[f->n], 0, sizeof f->h[f->n]);
    f->used[f->n] = NULL;
    f->file[f->n] = ur_strdup(name);
    if (f->file[f->n] == NULL) {
        return ur_err_oom(err);
    }
    f->n++;
    int rc = ur_st_header_read(&f->h[f->n - 1], kv, name, err);
    if (rc == UR_OK) {
        f->used[f->n - 1] = ur_calloc(f->h[f->n - 1].n + 1, 1);
        rc = f->used[f->n - 1] != NULL ? UR_OK : ur_err_oom(err);
    }
    return rc < 0 ? ur_err_wrap(err, "%s", name) : rc;
}

/* The shards the index names (every one), or model.safetensors. */
static int folder_read(folder *f, ur_kvstore *kv, ur_err *err)
{
    ur_buf text;
    int found = 0, rc;
    ur_buf_init(&text, 0);
    rc = ur_kvstore_read_opt(kv, INDEX, (size_t)64 << 20, &text, &found, err);
    if (rc == UR_OK && !found) {
        rc = add_file(f, kv, SINGLE, err);
    } else if (rc == UR_OK) {
        cJSON *doc = cJSON_ParseWithLength((const char *)text.data, text.len);
        const cJSON *map = cJSON_GetObjectItemCaseSensitive(doc, "weight_map"), *v;
        if (!cJSON_IsObject(map)) {
            rc = ur_err_set(err, UR_ECORRUPT, "%s: no weight_map object", INDEX);
        }
        cJSON_ArrayForEach(v, map)
        {
            if (rc == UR_OK) {
                rc = cJSON_IsString(v)
                         ? add_file(f, kv, v->valuestring, err)
                         : ur_err_set(err, UR_ECORRUPT, "%s: the shard of %s is not a string",
                                      INDEX, v->string);
            }
        }
        cJSON_Delete(doc);
    }
    ur_buf_dispose(&text);
    return rc;
}

static const ur_st_entry *folder_find(folder *f, const char *name, size_t *file)
{
    for (size_t i = 0; i < f->n; i++) {
        const ur_st_entry *e = ur_st_header_find(&f->h[i], name);
        if (e != NULL) {
            f->used[i][e - f->h[i].e] = 1;
            *file = i;
            return e;
        }
    }
    return NULL;
}

/* ---- the expected values ------------------------------------------------------------------ */

static float f32_of_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint32_t bits_of_f32(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static float round_bf16(float f)
{
    return f32_of_bits((uint32_t)ur_tensor_cast_f32_to_bf16(bits_of_f32(f)) << 16);
}

/* The arithmetic's constant, from the parameter's shape: y = x * c, or x + c for SUB_ONE. */
static float arith_constant(const ur_hf_tensor_info *t)
{
    double last = t->src_rank > 0 ? (double)t->src_shape[t->src_rank - 1] : 1;
    switch (t->arith) {
    case UR_HF_ARITH_MUL_SQRT_HEAD_DIM:
        return (float)sqrt(last); /* np.float32(np.sqrt(head_dim)) */
    case UR_HF_ARITH_SUB_ONE:
        return -1.0f;
    case UR_HF_ARITH_DIV_SQRT_EMB_BF16:
        /* jax's x / c: x * float32(1 / c), c = bfloat16(sqrt(emb)) (emb: the embedding's
         * last axis) */
        return 1.0f / round_bf16((float)sqrt(last));
    case UR_HF_ARITH_DIV_SQRT_EMB:
        return 1.0f / (float)sqrt(last);
    default:
        return 0;
    }
}

/* Element i of an input buffer of dtype dt as float32 (float32 and bfloat16 only). */
static float load(const uint8_t *buf, size_t i, ur_dtype dt)
{
    if (dt == UR_DT_BFLOAT16) {
        uint16_t h;
        memcpy(&h, buf + 2 * i, 2);
        return f32_of_bits((uint32_t)h << 16);
    }
    float f;
    memcpy(&f, buf + 4 * i, 4);
    return f;
}

/* The expected bits of an element: cast to the tensor's dtype, then the arithmetic in float32,
 * rounded back (MaxText's exporter restores in weight_dtype, then its hooks compute). */
static uint32_t expect(float x, const ur_hf_tensor_info *t, float c)
{
    float v = t->dtype == UR_DT_BFLOAT16 ? round_bf16(x) : x;
    if (t->arith == UR_HF_ARITH_SUB_ONE) {
        v = v + c;
    } else if (t->arith != UR_HF_ARITH_NONE) {
        v = v * c;
    }
    return t->dtype == UR_DT_BFLOAT16 ? ur_tensor_cast_f32_to_bf16(bits_of_f32(v))
                                      : bits_of_f32(v);
}

/* ---- one tensor ----------------------------------------------------------------------------- */

/* The walk over a tensor's elements in its order: its parts (the rearrangement's, in the
 * tensor's order), each one's size, the parameter's axis it belongs to and its weight there
 * (the sizes of the parts after it within that axis). */
typedef struct {
    int n;
    uint64_t size[UR_MAX_RANK]; /* the range of it the tensor keeps */
    uint64_t lo[UR_MAX_RANK]; /* where that range starts */
    int axis[UR_MAX_RANK];
    uint64_t within[UR_MAX_RANK];
    int lead; /* part 0 is the most significant of its axis: a range of it is a range there */
} walk;

static void walk_init(walk *w, const ur_rearrange *re)
{
    memset(w, 0, sizeof *w);
    w->n = re->n_parts;
    for (int j = 0; j < re->n_parts; j++) {
        int p = re->perm[j];
        uint64_t inner = 1;
        for (int q = p + 1; q < re->n_parts && re->part_axis[q] == re->part_axis[p]; q++) {
            inner *= re->part_size[q];
        }
        w->size[j] = re->cut_len[p];
        w->lo[j] = re->cut_lo[p];
        w->axis[j] = re->part_axis[p];
        w->within[j] = inner;
        if (j == 0) {
            w->lead = p == 0 || re->part_axis[p - 1] != re->part_axis[p];
        }
    }
}

typedef struct {
    verifier *vf;
    const ur_hf_tensor_info *t;
    ur_zarr_array *arr;
    int nfix;
    const int *fax;
    const int64_t *fidx;
    ur_kvstore *kv;
    const char *file;
    const ur_st_entry *e;
    walk w;
    uint64_t rows; /* the parameter's rows that reach the tensor (past them: zeros) */
    int n_value;
    char src_name[1200];
} tcheck;

static void value_issue(tcheck *c, uint64_t flat, uint32_t want, uint32_t got)
{
    ur_verify_issue *is;
    c->vf->rep->elements_bad++;
    if (c->n_value++ >= VALUE_ISSUES) {
        return;
    }
    is = ur_verify__issue(c->vf, UR_VERIFY_VALUE, c->t->name, c->src_name);
    if (is == NULL) {
        return;
    }
    is->rank = c->t->rank;
    for (int d = c->t->rank - 1; d >= 0; d--) {
        is->index[d] = flat % c->t->shape[d];
        flat /= c->t->shape[d];
    }
    if (c->t->dtype == UR_DT_BFLOAT16) {
        snprintf(is->expected, sizeof is->expected, "0x%04x (%g)", (unsigned)want,
                 (double)f32_of_bits(want << 16));
        snprintf(is->got, sizeof is->got, "0x%04x (%g)", (unsigned)got,
                 (double)f32_of_bits(got << 16));
    } else {
        snprintf(is->expected, sizeof is->expected, "0x%08x (%g)", (unsigned)want,
                 (double)f32_of_bits(want));
        snprintf(is->got, sizeof is->got, "0x%08x (%g)", (unsigned)got, (double)f32_of_bits(got));
    }
}

/* Where element x of a piece lands in the tensor joined from its pieces (x itself for a
 * whole tensor). */
static uint64_t joined_at(const ur_hf_tensor_info *t, uint64_t x)
{
    uint64_t inner = t->inner > 0 ? t->inner : 1;
    return t->parts > 1 ? x / inner * t->run + t->at + x % inner : x;
}

/* Units [u0, u1) of part 0 (`unit` elements each): their box of the parameter read into `in`,
 * the tensor's bytes of them into `out`, compared element by element. */
static int check_piece(tcheck *c, uint64_t u0, uint64_t u1, uint64_t unit, ur_buf *in, ur_buf *out,
                       ur_err *err)
{
    const ur_hf_tensor_info *t = c->t;
    const walk *w = &c->w;
    int r = t->src_rank, rc = UR_OK;
    uint64_t lo[UR_MAX_RANK], cnt[UR_MAX_RANK], bs[UR_MAX_RANK];
    uint64_t start[UR_MAX_RANK], count[UR_MAX_RANK], digit[UR_MAX_RANK] = {0};
    uint64_t n_in = 1, base = 0, n = (u1 - u0) * unit;
    /* the tensor's elements the piece's land among (a part's are apart, joined_at) */
    uint64_t first = joined_at(t, u0 * unit),
             span = n > 0 ? joined_at(t, u1 * unit - 1) + 1 - first : 0;
    size_t isz = ur_dtype_size(t->src_dtype), osz = ur_dtype_size(t->dtype);
    float k = arith_constant(t);

    for (int a = 0; a < r; a++) {
        lo[a] = 0;
        cnt[a] = t->src_shape[a];
    }
    if (w->n > 0 && w->lead) {
        lo[w->axis[0]] = (w->lo[0] + u0) * w->within[0];
        cnt[w->axis[0]] = (u1 - u0) * w->within[0];
    }
    if (r > 0) {
        uint64_t end = lo[0] + cnt[0] < c->rows ? lo[0] + cnt[0] : c->rows;
        cnt[0] = end > lo[0] ? end - lo[0] : 0;
    }
    for (int a = r - 1; a >= 0; a--) {
        bs[a] = n_in;
        base += lo[a] * n_in;
        n_in *= cnt[a];
    }
    /* the input's box: the parameter's, with the layer's index on the fixed axes */
    for (int a = 0, s = 0, m = 0; a < r + c->nfix; a++) {
        if (m < c->nfix && c->fax[m] == a) {
            start[a] = (uint64_t)c->fidx[m++];
            count[a] = 1;
        } else {
            start[a] = lo[s];
            count[a] = cnt[s++];
        }
    }
    in->len = 0;
    out->len = 0;
    if (n_in > 0) {
        rc = ur_buf_reserve(in, n_in * isz, err);
        if (rc == UR_OK) {
            rc = ur_zarr_array_read_box(c->arr, start, count, in->data, err);
        }
    }
    if (rc == UR_OK) {
        rc = ur_buf_reserve(out, span * osz, err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_read_range(c->kv, c->file, c->e->begin + first * osz, (size_t)(span * osz),
                                   out->data, err);
    }
    if (rc < 0) {
        return rc;
    }
    digit[0] = u0;
    for (uint64_t e = 0; e < n; e++) {
        uint64_t at = 0, row = 0;
        uint32_t want = 0, got = 0;
        for (int j = 0; j < w->n; j++) {
            uint64_t v = (w->lo[j] + digit[j]) * w->within[j];
            at += v * bs[w->axis[j]];
            row += w->axis[j] == 0 ? v : 0;
        }
        if (r == 0 || row < c->rows) {
            want = expect(load(in->data, (size_t)(at - base), t->src_dtype), t, k);
        }
        uint64_t at_t = joined_at(t, u0 * unit + e);
        memcpy(&got, out->data + (at_t - first) * osz, osz);
        if (got != want) {
            value_issue(c, at_t, want, got);
        }
        for (int j = w->n - 1; j >= 0; j--) {
            if (++digit[j] < w->size[j] || j == 0) {
                break;
            }
            digit[j] = 0;
        }
    }
    c->vf->rep->elements += n;
    return UR_OK;
}

/* The shape the rearrangement applies to: the parameter's, with the vocabulary's rows where
 * the tensor's differs from MaxText's. */
static void parse_shape(const ur_hf_tensor_info *t, uint64_t *shape)
{
    memcpy(shape, t->src_shape, (size_t)t->src_rank * sizeof *shape);
    if (t->src_rank > 0 && t->vocab_rows > 0) {
        shape[0] = t->vocab_rows;
    }
}

static int check_values(tcheck *c, ur_err *err)
{
    const ur_hf_tensor_info *t = c->t;
    uint64_t n = 1, unit, per, piece = c->vf->opts->piece_bytes;
    size_t osz = ur_dtype_size(t->dtype);
    ur_buf in, out;
    int rc = UR_OK;

    for (int j = 0; j < c->w.n; j++) {
        n *= c->w.size[j]; /* the piece's elements (the whole tensor's, but for a piece) */
    }
    if (n == 0) {
        return UR_OK;
    }
    unit = c->w.n > 0 ? n / c->w.size[0] : 1;
    per = (piece ? piece : (uint64_t)16 << 20) / (unit * osz);
    per = per > 0 ? per : 1;
    ur_buf_init(&in, 0);
    ur_buf_init(&out, 0);
    for (uint64_t u = 0, units = c->w.n > 0 ? c->w.size[0] : 1; u < units && rc == UR_OK;
         u += per) {
        rc = check_piece(c, u, u + per < units ? u + per : units, unit, &in, &out, err);
    }
    ur_buf_dispose(&in);
    ur_buf_dispose(&out);
    return rc;
}

/* Tensor t of one expert as a tensor of the parameter's slice: the parameter's axis 0 (the
 * input's first axis not already fixed) added to c's fixed axes at the expert's index. */
static const ur_hf_tensor_info *expert_slice(const ur_hf_tensor_info *t, tcheck *c, int *fax,
                                             int64_t *fidx, ur_hf_tensor_info *out)
{
    int a = 0, m = 0;
    while (m < c->nfix && fax[m] == a) {
        m++;
        a++;
    }
    memmove(fax + m + 1, fax + m, (size_t)(c->nfix - m) * sizeof *fax);
    memmove(fidx + m + 1, fidx + m, (size_t)(c->nfix - m) * sizeof *fidx);
    fax[m] = a;
    fidx[m] = t->expert;
    c->nfix++;
    *out = *t;
    out->expert = -1;
    out->src_rank = t->src_rank - 1;
    out->src_shape = t->src_shape + 1;
    return out;
}

static int is_float(ur_dtype dt)
{
    return dt == UR_DT_FLOAT32 || dt == UR_DT_BFLOAT16;
}

/* Tensor t (the plan's k-th) against its parameter's slice. */
static int check_tensor(verifier *vf, folder *f, ur_kvstore *kv, const ur_hf_tensor_info *t,
                        const vleaf *o, ur_err *err)
{
    tcheck c;
    vpair pair;
    ur_rearrange re;
    ur_verify_issue *is;
    uint64_t shape[UR_MAX_RANK];
    char iname[1024];
    size_t file = 0;
    int fax[4] = {0};
    int64_t fidx[4] = {0};
    ur_hf_tensor_info slice;
    int rc;

    memset(&c, 0, sizeof c);
    c.e = folder_find(f, t->name, &file);
    if (c.e == NULL) {
        ur_verify__issue(vf, UR_VERIFY_MISSING, t->name, t->source);
        return UR_OK;
    }
    if (c.e->dtype != t->dtype || c.e->rank != t->rank ||
        memcmp(c.e->shape, t->shape, (size_t)t->rank * sizeof *t->shape) != 0) {
        int dt = c.e->dtype != t->dtype;
        is = ur_verify__issue(vf, dt ? UR_VERIFY_DTYPE : UR_VERIFY_SHAPE, t->name, t->source);
        if (is != NULL && dt) {
            snprintf(is->expected, sizeof is->expected, "%s", ur_dtype_name(t->dtype));
            snprintf(is->got, sizeof is->got, "%s", ur_dtype_name(c.e->dtype));
        } else if (is != NULL) {
            ur_verify__shape_str(is->expected, sizeof is->expected, t->shape, t->rank);
            ur_verify__shape_str(is->got, sizeof is->got, c.e->shape, c.e->rank);
        }
        return UR_OK;
    }
    /* the parameter's slice of the input, as the verifier pairs an unrolled leaf */
    rc = ur_verify__match(vf, o, &pair, err);
    if (rc < 0) {
        return rc;
    }
    if (pair.kind == VPAIR_LAYER && pair.tbl >= 0) {
        fax[0] = ur_verify__layer_axis(vf, o, pair.src, vf->tables[pair.tbl].n);
        fidx[0] = pair.layer;
        c.nfix = 1;
        if (fax[0] < 0) {
            pair.kind = VPAIR_NONE;
        }
    } else if (pair.kind == VPAIR_SLICES) {
        c.nfix = pair.nfix;
        memcpy(fax, pair.fax, sizeof pair.fax);
        memcpy(fidx, pair.fidx, sizeof pair.fidx);
    } else if (pair.kind == VPAIR_LAYER &&
               (pair.src->leaf->rank != t->src_rank ||
                memcmp(pair.src->leaf->shape, t->src_shape,
                       (size_t)t->src_rank * sizeof *t->src_shape) != 0)) {
        pair.kind = VPAIR_NONE;
    }
    if (pair.kind != VPAIR_LAYER && pair.kind != VPAIR_SLICES) {
        if (pair.kind != VPAIR_DONE) {
            ur_verify__issue(vf, UR_VERIFY_EXTRA, t->name, "no input leaf or slice of its shape");
        }
        return UR_OK;
    }
    pair.src->hits++;
    ur_verify__leaf_name(pair.src, iname, sizeof iname);
    snprintf(c.src_name, sizeof c.src_name, "%s of %s", t->source, iname);
    if (!is_float(pair.src->leaf->dtype) || pair.src->leaf->dtype != t->src_dtype ||
        !is_float(t->dtype)) {
        is = ur_verify__issue(vf, UR_VERIFY_DTYPE, t->name, c.src_name);
        if (is != NULL) {
            snprintf(is->expected, sizeof is->expected, "float32 or bfloat16, from %s",
                     ur_dtype_name(t->src_dtype));
            snprintf(is->got, sizeof is->got, "%s from %s", ur_dtype_name(t->dtype),
                     ur_dtype_name(pair.src->leaf->dtype));
        }
        return UR_OK;
    }
    if (t->expert >= 0) {
        /* an expert's tensor: the parameter's axis 0 fixed at its index as well */
        t = expert_slice(t, &c, fax, fidx, &slice);
    }
    parse_shape(t, shape);
    rc = ur_rearrange_parse(&re, t->pattern, t->src_rank, shape, err);
    if (rc < 0) {
        return ur_err_wrap(err, "tensor %s", t->name);
    }
    walk_init(&c.w, &re);
    c.vf = vf;
    c.t = t;
    c.kv = kv;
    c.file = f->file[file];
    c.fax = fax;
    c.fidx = fidx;
    c.rows = t->src_rank > 0 ? (t->src_rows < t->src_shape[0] ? t->src_rows : t->src_shape[0]) : 1;
    rc = ur_orbax_ckpt_open_array(vf->in_ck, pair.src->leaf, &c.arr, err);
    if (rc == UR_OK) {
        vf->rep->arrays_compared++;
        rc = check_values(&c, err);
    }
    ur_zarr_array_close(c.arr);
    if (rc == UR_OK && c.n_value > 0) {
        vf->rep->n_issues_total++;
    }
    return rc < 0 ? ur_err_wrap(err, "tensor %s (%s)", t->name, c.src_name) : rc;
}

/* ---- the folder ------------------------------------------------------------------------------
 */

/* The tensors' parameters as in-memory output leaves (params/params/<path>, as a param-only
 * checkpoint holds them), for the pairing. */
typedef struct {
    ur_orbax_leaf *leaf;
    ur_orbax_key *keys;
    char *text;
    size_t n;
} vleaves;

static void vleaves_dispose(vleaves *v)
{
    ur_free(v->leaf);
    ur_free(v->keys);
    ur_free(v->text);
}

static int vleaves_make(vleaves *v, const ur_hf_tensor_info *t, size_t n, ur_err *err)
{
    size_t chars = 0, comps = 0, kk = 0;
    char *p;
    for (size_t i = 0; i < n; i++) {
        chars += strlen(t[i].source) + 1;
        comps += 3; /* params/params/ (a param-only checkpoint's wrapper), then the path */
        for (const char *s = t[i].source; *s != '\0'; s++) {
            comps += *s == '/';
        }
    }
    v->leaf = ur_calloc(n + 1, sizeof *v->leaf);
    v->keys = ur_calloc(comps + 1, sizeof *v->keys);
    v->text = ur_malloc(chars + 1);
    if (v->leaf == NULL || v->keys == NULL || v->text == NULL) {
        return ur_err_oom(err);
    }
    p = v->text;
    for (size_t i = 0; i < n; i++) {
        ur_orbax_leaf *l = &v->leaf[i];
        size_t len = strlen(t[i].source);
        memcpy(p, t[i].source, len + 1);
        l->path = &v->keys[kk];
        for (int w = 0; w < 2; w++) {
            v->keys[kk].key = "params";
            v->keys[kk++].type = UR_ORBAX_KEY_DICT;
            l->depth++;
        }
        for (char *c = p;;) {
            char *slash = strchr(c, '/');
            v->keys[kk].key = c;
            v->keys[kk++].type = UR_ORBAX_KEY_DICT;
            l->depth++;
            if (slash == NULL) {
                break;
            }
            *slash = '\0';
            c = slash + 1;
        }
        p += len + 1;
        l->value_type = UR_ORBAX_VALUE_JAX_ARRAY;
        l->value_type_name = "jax.Array";
        l->has_array = 1;
        l->dtype = t[i].src_dtype;
        l->rank = t[i].src_rank;
        l->shape = t[i].src_shape;
    }
    v->n = n;
    return UR_OK;
}

/* The output leaf of the verifier's set made from source `name`, or NULL. */
static const vleaf *out_leaf(const verifier *vf, size_t guess, const char *name)
{
    char buf[1024];
    if (guess < vf->out.n) {
        ur_verify__leaf_name(&vf->out.v[guess], buf, sizeof buf);
        if (strcmp(buf, name) == 0) {
            return &vf->out.v[guess];
        }
    }
    for (size_t i = 0; i < vf->out.n; i++) {
        ur_verify__leaf_name(&vf->out.v[i], buf, sizeof buf);
        if (strcmp(buf, name) == 0) {
            return &vf->out.v[i];
        }
    }
    return NULL;
}

int ur_verify_hf_run(ur_verify_report *rep, ur_orbax_ckpt *in, const ur_hf_tensor_info *t,
                     size_t n, ur_kvstore *kv, const ur_verify_opts *opts, ur_err *err)
{
    verifier vf;
    vleaves vl;
    folder f;
    ur_verify_opts dflt;
    int rc;

    memset(&vl, 0, sizeof vl);
    memset(&f, 0, sizeof f);
    memset(&vf, 0, sizeof vf);
    if (opts == NULL) {
        ur_verify_opts_init(&dflt);
        opts = &dflt;
    }
    rc = vleaves_make(&vl, t, n, err);
    if (rc == UR_OK) {
        rc = ur_verify__init_in(&vf, in, vl.leaf, vl.n, opts, rep, err);
    }
    if (rc == UR_OK) {
        rc = folder_read(&f, kv, err);
    }
    for (size_t k = 0; k < n && rc == UR_OK; k++) {
        const vleaf *o = out_leaf(&vf, k, t[k].source);
        vf.issue_key = k + 1;
        rep->leaves_out++;
        rc = o != NULL ? check_tensor(&vf, &f, kv, &t[k], o, err)
                       : ur_err_set(err, UR_EINTERNAL, "verify: no leaf for %s", t[k].source);
    }
    /* tensors of the folder the plan does not name */
    vf.issue_key = UINT64_MAX;
    for (size_t i = 0; i < f.n && rc == UR_OK; i++) {
        for (size_t e = 0; e < f.h[i].n; e++) {
            if (!f.used[i][e]) {
                char where[600];
                snprintf(where, sizeof where, "in %s, not a tensor of this model's export",
                         f.file[i]);
                ur_verify__issue(&vf, UR_VERIFY_EXTRA, f.h[i].e[e].name, where);
            }
        }
    }
    if (rc == UR_OK) {
        rep->leaves_in = n;
    }
    folder_dispose(&f);
    vleaves_dispose(&vl);
    ur_verify__dispose(&vf);
    return rc;
}
