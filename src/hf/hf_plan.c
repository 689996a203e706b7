/* The export's plan (unroll/hf.h): every exported parameter's Hugging Face tensor, the shards,
 * config.json. */
#include "hf_plan.h"

#include "unroll/alloc.h"
#include "unroll/ckd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the model's parameters ------------------------------------------------------------ */

/* The path below the model: the conversion plan's output path without the tree's wrappers
 * (params/params/ of a Linen state, model/ or base/ and the trailing value of NNX ones). */
static char *model_path(const ur_plan_path *p)
{
    size_t a = 0, b = p->len, n = 0;
    char *out, *w;
    while (a < b && (strcmp(p->comp[a], "params") == 0 || strcmp(p->comp[a], "model") == 0 ||
                     strcmp(p->comp[a], "base") == 0)) {
        a++;
    }
    if (b > a && strcmp(p->comp[b - 1], "value") == 0) {
        b--;
    }
    for (size_t i = a; i < b; i++) {
        n += strlen(p->comp[i]) + 1;
    }
    out = ur_malloc(n + 1);
    if (out == NULL) {
        return NULL;
    }
    w = out;
    for (size_t i = a; i < b; i++) {
        size_t k = strlen(p->comp[i]);
        memcpy(w, p->comp[i], k);
        w += k;
        *w++ = i + 1 < b ? '/' : '\0';
    }
    if (w == out) {
        *w = '\0';
    }
    return out;
}

char *hf_sink_path(const char *const *comp, size_t len)
{
    size_t n = 1;
    char *out, *w;
    for (size_t i = 0; i < len; i++) {
        n += strlen(comp[i]) + 1;
    }
    out = ur_malloc(n);
    if (out == NULL) {
        return NULL;
    }
    w = out;
    *w = '\0';
    for (size_t i = 0; i < len; i++) {
        size_t k = strlen(comp[i]);
        memcpy(w, comp[i], k);
        w += k;
        *w++ = i + 1 < len ? '/' : '\0';
    }
    return out;
}

/* One exported parameter: its output leaf (as the sink is told it) and shape. */
static int add_param(ur_hf_plan *p, const ur_plan_path *out, const ur_plan_leaf *leaf,
                     const ur_plan_action *a, ur_err *err)
{
    hf_param *q;
    int k = 0;
    if (p->n_params == p->cap_params) {
        hf_param *more = ur_grow_to(p->params, &p->cap_params, p->n_params + 1, sizeof *more);
        if (more == NULL) {
            return ur_err_oom(err);
        }
        p->params = more;
    }
    q = &p->params[p->n_params];
    memset(q, 0, sizeof *q);
    q->dtype = leaf->dtype;
    for (size_t d = 0; d < leaf->rank; d++) {
        int layer_axis = 0;
        if (a->kind == UR_PLAN_UNSTACK) {
            size_t n_axes = a->n_axes > 1 ? a->n_axes : 1;
            for (size_t x = 0; x < n_axes; x++) {
                layer_axis |= (a->n_axes > 1 ? a->axes[x] : a->axis) == d;
            }
        }
        if (!layer_axis) {
            q->shape[k++] = leaf->shape[d];
        }
    }
    q->rank = k;
    q->sink_path = hf_sink_path(out->comp, out->len);
    q->path = model_path(out);
    if (q->sink_path == NULL || q->path == NULL) {
        ur_free(q->sink_path);
        ur_free(q->path);
        return ur_err_oom(err);
    }
    p->n_params++;
    return UR_OK;
}

static int gather_params(ur_hf_plan *p, const ur_plan *plan, const ur_plan_leaf *leaves,
                         ur_err *err)
{
    int rc = UR_OK;
    for (size_t i = 0; i < plan->n_actions && rc == UR_OK; i++) {
        const ur_plan_action *a = &plan->actions[i];
        if (a->kind == UR_PLAN_DROP || a->kind == UR_PLAN_REPLICATE ||
            leaves[i].dtype == UR_DT_INVALID) {
            continue;
        }
        for (size_t o = 0; o < a->n_out && rc == UR_OK; o++) {
            if (a->out[o].len > 0) {
                rc = add_param(p, &a->out[o], &leaves[i], a, err);
            }
        }
    }
    /* the model's view: path -> shape, for the family's setup and config */
    hf_model *m = &p->model;
    m->shapes = ur_calloc(p->n_params + 1, sizeof *m->shapes);
    m->ranks = ur_calloc(p->n_params + 1, sizeof *m->ranks);
    if (rc == UR_OK && (m->shapes == NULL || m->ranks == NULL)) {
        rc = ur_err_oom(err);
    }
    for (size_t i = 0; i < p->n_params && rc == UR_OK; i++) {
        size_t had;
        m->shapes[i] = p->params[i].shape;
        m->ranks[i] = p->params[i].rank;
        rc = ur_strmap_put(&m->by_path, p->params[i].path, strlen(p->params[i].path), i, &had,
                           err);
        if (rc == 1) {
            rc = ur_err_set(err, UR_EINVAL, "Hugging Face export: parameter '%s' twice",
                            p->params[i].path);
        }
        if (rc == UR_OK) {
            rc = ur_strmap_put(&p->by_sink_path, p->params[i].sink_path,
                               strlen(p->params[i].sink_path), i, NULL, err);
            rc = rc == 1 ? UR_OK : rc;
        }
    }
    m->n = p->n_params;
    return rc;
}

/* ---- the tensors --------------------------------------------------------------------- */

static int rule_holds(const hf_model *m, const hf_rule *r)
{
    unsigned when = r->when & ~(unsigned)HF_PLACE_BITS;
    return (when & m->flags) == when;
}

static float op_value(const hf_rule *r, const hf_param *q, const hf_model *m)
{
    int rank = 0;
    const uint64_t *e;
    switch (r->op) {
    case HF_OP_MUL_SQRT_HEAD_DIM:
        /* np.float32(np.sqrt(head_dim)): the square root in double, rounded once */
        return (float)sqrt((double)q->shape[q->rank - 1]);
    case HF_OP_SUB_ONE:
        return -1.0f;
    case HF_OP_DIV_SQRT_EMB_BF16:
    case HF_OP_DIV_SQRT_EMB: {
        /* np.bfloat16(hidden_size ** 0.5), or np.float32 */
        e = hf_model_shape(m, "token_embedder/embedding", &rank);
        float f = (float)sqrt((double)(e != NULL && rank == 2 ? e[1] : 1));
        uint32_t bits;
        if (r->op == HF_OP_DIV_SQRT_EMB_BF16) {
            memcpy(&bits, &f, 4);
            bits = (uint32_t)ur_tensor_cast_f32_to_bf16(bits) << 16;
            memcpy(&f, &bits, 4);
        }
        /* jax divides by a constant as XLA computes it, times the reciprocal in float32
         * (MaxText's exporter's float32 embedding differs from a true division in the last
         * bit of 4 values in 10) */
        return 1.0f / f;
    }
    default:
        return 0;
    }
}

static const char *op_text(hf_op op)
{
    return op == HF_OP_MUL_SQRT_HEAD_DIM   ? "x * sqrt(head_dim)"
           : op == HF_OP_SUB_ONE           ? "x - 1"
           : op == HF_OP_DIV_SQRT_EMB_BF16 ? "x / bfloat16(sqrt(hidden_size))"
           : op == HF_OP_DIV_SQRT_EMB      ? "x / sqrt(hidden_size)"
                                           : "";
}

/* `pattern` with each "{name}" replaced by the size the family's setup named (ur_free it);
 * NULL when a name is unknown, out of memory, or too long. */
static char *expand_sizes(const char *pattern, const hf_model *m)
{
    char out[256];
    size_t n = 0;
    for (const char *c = pattern; *c != '\0';) {
        const char *end = *c == '{' ? strchr(c, '}') : NULL;
        if (end == NULL) {
            if (n + 1 >= sizeof out) {
                return NULL;
            }
            out[n++] = *c++;
            continue;
        }
        int k = 0;
        while (k < m->n_sizes && (strlen(m->size[k].name) != (size_t)(end - c - 1) ||
                                  strncmp(m->size[k].name, c + 1, (size_t)(end - c - 1)) != 0)) {
            k++;
        }
        int w = k < m->n_sizes
                    ? snprintf(out + n, sizeof out - n, "%llu", (unsigned long long)m->size[k].v)
                    : -1;
        if (w < 0 || (size_t)w >= sizeof out - n) {
            return NULL;
        }
        n += (size_t)w;
        c = end + 1;
    }
    out[n] = '\0';
    return ur_strdup(out);
}

int hf_model_set_size(hf_model *m, const char *name, uint64_t v, ur_err *err)
{
    if (m->n_sizes == HF_MAX_SIZES) {
        return ur_err_set(err, UR_EINTERNAL, "Hugging Face export: more than %d named sizes",
                          HF_MAX_SIZES);
    }
    m->size[m->n_sizes].name = name;
    m->size[m->n_sizes++].v = v;
    return UR_OK;
}

/* The tensor of parameter pi that rule r names for `layer` (and `expert`: the slice of the
 * parameter's axis 0, -1 for all of it). */
static int add_tensor(ur_hf_plan *p, size_t pi, const hf_rule *r, int64_t layer, int64_t expert,
                      ur_err *err)
{
    hf_param *q = &p->params[pi];
    hf_tensor *t;
    char name[512];
    uint64_t shape[UR_MAX_RANK];
    int rank = q->rank, rc;

    if (!hf_expand(r->hf, layer, expert, name, sizeof name)) {
        return ur_err_set(err, UR_EINVAL, "Hugging Face export: a tensor name too long");
    }
    if (p->n == p->cap) {
        hf_tensor *more = ur_grow_to(p->t, &p->cap, p->n + 1, sizeof *more);
        if (more == NULL) {
            return ur_err_oom(err);
        }
        p->t = more;
    }
    t = &p->t[p->n++]; /* counted now, so that the plan frees what it holds on an error */
    memset(t, 0, sizeof *t);
    t->param = pi;
    t->expert = expert;
    t->rule = r;
    t->in_dtype = q->dtype;
    t->dtype = p->dtype;
    t->op = r->op == HF_OP_NONE      ? UR_TENSOR_OP_NONE
            : r->op == HF_OP_SUB_ONE ? UR_TENSOR_OP_ADD
                                     : UR_TENSOR_OP_MUL;
    t->op_value = op_value(r, q, &p->model);
    if (expert >= 0) {
        rank--;
        memcpy(shape, q->shape + 1, (size_t)rank * sizeof *shape);
    } else {
        memcpy(shape, q->shape, sizeof shape);
    }
    if (p->model.vocab_rows > 0 && strcmp(q->path, "token_embedder/embedding") == 0) {
        /* the tensor has the vocabulary's rows: MaxText's beyond it are left out, and those
         * it lacks stay zeros (the file's unwritten bytes) */
        t->keep = q->shape[0] < p->model.vocab_rows ? q->shape[0] : p->model.vocab_rows;
        shape[0] = p->model.vocab_rows;
    }
    t->pattern = expand_sizes(r->pattern, &p->model);
    if (t->pattern == NULL) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export: parameter '%s': pattern '%s' names a size the "
                          "family did not set, or is too long",
                          q->path, r->pattern);
    }
    rc = ur_rearrange_parse(&t->re, t->pattern, rank, shape, err);
    if (rc < 0) {
        return ur_err_wrap(err, "Hugging Face export: parameter '%s'", q->path);
    }
    if (t->op != UR_TENSOR_OP_NONE && !ur_dtype_is_float(q->dtype)) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: parameter '%s': %s "
                          "arithmetic on %s",
                          q->path, op_text(r->op), ur_dtype_name(q->dtype));
    }
    if (!ur_tensor_cast_supported(p->dtype, q->dtype) && p->dtype != q->dtype) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: parameter '%s': no cast "
                          "from %s to %s",
                          q->path, ur_dtype_name(q->dtype), ur_dtype_name(p->dtype));
    }
    t->name = ur_strdup(name);
    if (t->name == NULL) {
        return ur_err_oom(err);
    }
    /* a piece's place in its tensor: set by join_pieces once every piece is known */
    t->parts = 1;
    t->part = HF_PIECE_OF(r->when);
    memcpy(t->shape, t->re.out_shape, sizeof t->shape);
    t->nbytes = ur_dtype_size(p->dtype);
    for (int d = 0; d < t->re.out_rank; d++) {
        t->nbytes *= t->shape[d];
    }
    t->placed = t->keep > 0 ? t->nbytes / shape[0] * t->keep : t->nbytes;
    if (r->when & HF_VISION_LAYERS) {
        if (layer + 1 > p->model.vision_layers) {
            p->model.vision_layers = layer + 1;
        }
    } else if (layer + 1 > p->model.n_layers) {
        p->model.n_layers = layer + 1;
    }
    return UR_OK;
}

/* Parameter pi's tensors under rule r (MaxText's layer `layer`): one, or one per expert where
 * the rule names them. */
static int add_tensors(ur_hf_plan *p, size_t pi, const hf_rule *r, int64_t layer, ur_err *err)
{
    hf_param *q = &p->params[pi];
    int rc;
    if ((r->when & HF_DENSE_LAYERS) && layer >= p->model.dense_layers) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export: parameter '%s' of a dense layer past the first "
                          "%lld",
                          q->path, (long long)p->model.dense_layers);
    }
    if ((r->when & HF_AFTER_DENSE) && layer >= 0) {
        layer += p->model.dense_layers;
    }
    if (strstr(r->hf, "{e}") == NULL) {
        return add_tensor(p, pi, r, layer, -1, err);
    }
    if (q->experts != NULL) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export: parameter '%s' split by experts twice", q->path);
    }
    if (q->rank < 2 || q->shape[0] == 0 || q->shape[0] > HF_MAX_EXPERTS) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export: parameter '%s' is not [experts, ...] with 1 to %d "
                          "experts",
                          q->path, HF_MAX_EXPERTS);
    }
    q->experts = ur_calloc((size_t)q->shape[0], sizeof *q->experts);
    if (q->experts == NULL) {
        return ur_err_oom(err);
    }
    if ((int64_t)q->shape[0] > p->model.n_experts) {
        p->model.n_experts = (int64_t)q->shape[0];
    }
    rc = UR_OK;
    for (uint64_t e = 0; e < q->shape[0] && rc == UR_OK; e++) {
        rc = add_tensor(p, pi, r, layer, (int64_t)e, err);
    }
    return rc;
}

static int map_params(ur_hf_plan *p, ur_err *err)
{
    const hf_family *f = p->fam;
    int rc = UR_OK;
    for (size_t i = 0; i < p->n_params && rc == UR_OK; i++) {
        const hf_rule *hit = NULL;
        int64_t layer = -1;
        for (size_t k = 0; k < f->n_shared + f->n_rules && hit == NULL; k++) {
            const hf_rule *r = hf_family_rule(f, k);
            if (rule_holds(&p->model, r) && hf_match(r->mt, p->params[i].path, &layer)) {
                hit = r;
            }
        }
        if (hit == NULL) {
            rc = ur_err_set(err, UR_EUNSUPPORTED,
                            "Hugging Face export (%s): parameter '%s' has no place in %s", f->name,
                            p->params[i].path, f->architecture);
            break;
        }
        if (hit->hf == NULL) {
            continue; /* a parameter Hugging Face has no place for, left out */
        }
        /* the first rule of the parameter, then the pieces the rules after it cut from it
         * (only rules that keep a range: another whole copy is a table's mistake) */
        size_t k = 0;
        while (hf_family_rule(f, k) != hit) {
            k++;
        }
        for (; k < f->n_shared + f->n_rules && rc == UR_OK; k++) {
            const hf_rule *r = hf_family_rule(f, k);
            if (r == hit ||
                (strcmp(r->mt, hit->mt) == 0 && rule_holds(&p->model, r) &&
                 strchr(hit->pattern, '[') != NULL && strchr(r->pattern, '[') != NULL)) {
                rc = add_tensors(p, i, r, layer, err);
            }
        }
    }
    return rc;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const hf_tensor *)a)->name, ((const hf_tensor *)b)->name);
}

/* By name, then part (the plan's order). */
static int by_name_part(const void *a, const void *b)
{
    int c = by_name(a, b);
    return c != 0 ? c : ((const hf_tensor *)a)->part - ((const hf_tensor *)b)->part;
}

/* Entry i is a later piece of the tensor entry i - part stands for (join_pieces has made
 * sure that a name's entries are its pieces 0 .. parts-1, in order). */
static int follows(const ur_hf_plan *p, size_t i)
{
    return p->t[i].part > 0;
}

/* The pieces t[i .. i+n) of one tensor (piece numbers 0 .. n-1, one join, rearranged shapes
 * that agree but on the joined axis): each one's place in the tensor, and the tensor's
 * shape. 0 when they do not make a whole tensor. */
static int join_one(hf_tensor *t, size_t n)
{
    unsigned join = t[0].rule->when & HF_JOIN_BITS;
    int rank = t[0].re.out_rank;
    int axis = join == HF_JOIN_ROWS ? rank - 2 : rank - 1;
    uint64_t run = 0, extent = 0;
    if (n == 1 && join == 0 && t[0].part == 0) {
        return 1; /* a whole tensor */
    }
    if (n < 2 || join == 0 || axis < 0 || n > HF_PIECE_OF(~0u) + 1) {
        return 0;
    }
    for (size_t j = 0; j < n; j++) {
        if ((size_t)t[j].part != j || (t[j].rule->when & HF_JOIN_BITS) != join ||
            t[j].re.out_rank != rank || t[j].keep > 0 || t[j].dtype != t[0].dtype) {
            return 0;
        }
        for (int d = 0; d < rank; d++) {
            if (t[j].re.out_shape[d] != t[0].re.out_shape[d] &&
                (d != axis || join == HF_JOIN_EVERY)) {
                return 0;
            }
        }
        t[j].inner = 1;
        for (int d = axis; join != HF_JOIN_EVERY && d < rank; d++) {
            t[j].inner *= t[j].re.out_shape[d];
        }
        t[j].at = join == HF_JOIN_EVERY ? j : run;
        run += t[j].inner;
        extent += t[j].re.out_shape[axis];
    }
    /* (placed stays the piece's own bytes, as add_tensor counted them) */
    for (size_t j = 0; j < n; j++) {
        t[j].parts = (int)n;
        t[j].run = run;
        memcpy(t[j].shape, t[0].re.out_shape, sizeof t[j].shape);
        t[j].shape[axis] = extent;
        t[j].nbytes = ur_dtype_size(t[j].dtype);
        for (int d = 0; d < rank; d++) {
            t[j].nbytes *= t[j].shape[d];
        }
    }
    return 1;
}

/* Entries of one name are the pieces 0 .. n-1 of one tensor, joined as their rules say: two
 * parameters mapped to one whole tensor, or pieces missing or of shapes that do not join, are
 * the family's or the checkpoint's fault. */
static int join_pieces(ur_hf_plan *p, ur_err *err)
{
    for (size_t i = 0; i < p->n;) {
        size_t k = i + 1;
        while (k < p->n && strcmp(p->t[k].name, p->t[i].name) == 0) {
            k++;
        }
        if (!join_one(&p->t[i], k - i)) {
            return ur_err_set(err, UR_EINVAL,
                              "Hugging Face export: tensor %s is not made whole by its "
                              "parameters ('%s'%s)",
                              p->t[i].name, p->params[p->t[i].param].path,
                              k - i > 1 ? " and others" : "");
        }
        i = k;
    }
    return UR_OK;
}

/* Every tensor the family's applicable rules name for layers 0 .. n_layers-1 (the vision
 * encoder's: 0 .. vision_layers-1; and experts 0 .. n_experts-1) is there. */
static int check_complete(ur_hf_plan *p, ur_err *err)
{
    const hf_family *f = p->fam;
    for (size_t k = 0; k < f->n_shared + f->n_rules; k++) {
        const hf_rule *r = hf_family_rule(f, k);
        if (r->hf == NULL) {
            continue;
        }
        int layered = strstr(r->hf, "{i}") != NULL;
        int64_t experts = strstr(r->hf, "{e}") != NULL ? p->model.n_experts : 1;
        /* the Hugging Face layers [first, end) the rule is for, MaxText's {i} less first */
        int64_t first = r->when & HF_AFTER_DENSE ? p->model.dense_layers : 0;
        int64_t end = !layered                     ? 1
                      : r->when & HF_DENSE_LAYERS  ? p->model.dense_layers
                      : r->when & HF_VISION_LAYERS ? p->model.vision_layers
                                                   : p->model.n_layers;
        if (!rule_holds(&p->model, r) || (r->when & HF_SOME_LAYERS)) {
            continue;
        }
        for (int64_t x = first * experts; x < end * experts; x++) {
            int64_t l = x / experts;
            char name[512];
            hf_tensor key;
            if (!hf_expand(r->hf, l, x % experts, name, sizeof name)) {
                return ur_err_set(err, UR_EINVAL, "Hugging Face export: a tensor name too long");
            }
            key.name = name;
            const hf_tensor *hit = bsearch(&key, p->t, p->n, sizeof *p->t, by_name);
            while (hit != NULL && hit > p->t && strcmp(hit[-1].name, name) == 0) {
                hit--;
            }
            /* a piece's rule: its own piece of the tensor */
            while (hit != NULL && hit->rule != r) {
                hit = hit + 1 < p->t + p->n && strcmp(hit[1].name, name) == 0 ? hit + 1 : NULL;
            }
            if (hit == NULL) {
                char mt[512];
                (void)hf_expand(r->mt, l - first, -1, mt, sizeof mt);
                return ur_err_set(err, UR_EINVAL,
                                  "Hugging Face export (%s): the checkpoint has no '%s' for %s",
                                  f->name, mt, name);
            }
        }
    }
    return UR_OK;
}

/* MaxText's exporter's cut: tensors by name, a new shard when the next one would pass the
 * size (a tensor larger than the size has a shard of its own). */
static int cut_shards(ur_hf_plan *p, uint64_t max, ur_err *err)
{
    uint64_t cur = 0;
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (follows(p, i)) {
            p->t[i].shard = p->t[i - 1].shard; /* a part: its tensor's place */
            continue;
        }
        if (i > 0 && cur + p->t[i].nbytes > max) {
            n++;
            cur = 0;
        }
        p->t[i].shard = n;
        cur += p->t[i].nbytes;
    }
    p->n_shards = p->n > 0 ? n + 1 : 0;
    p->shards = ur_calloc(p->n_shards ? p->n_shards : 1, sizeof *p->shards);
    if (p->shards == NULL) {
        return ur_err_oom(err);
    }
    for (size_t s = 0; s < p->n_shards; s++) {
        char name[64];
        if (p->n_shards == 1) {
            snprintf(name, sizeof name, "model.safetensors");
        } else {
            snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, p->n_shards);
        }
        p->shards[s].file = ur_strdup(name);
        if (p->shards[s].file == NULL) {
            return ur_err_oom(err);
        }
    }
    return UR_OK;
}

static int lay_out(ur_hf_plan *p, ur_err *err)
{
    ur_st_decl *d = ur_calloc(p->n ? p->n : 1, sizeof *d);
    int rc = d != NULL ? UR_OK : ur_err_oom(err);
    size_t at = 0;
    for (size_t s = 0; s < p->n_shards && rc == UR_OK; s++) {
        size_t first = at, k = 0;
        while (at < p->n && p->t[at].shard == s) {
            if (!follows(p, at)) {
                d[k].name = p->t[at].name;
                d[k].dtype = p->t[at].dtype;
                d[k].rank = p->t[at].re.out_rank;
                d[k].shape = p->t[at].shape;
                k++;
            }
            at++;
        }
        rc = ur_st_layout_build(&p->shards[s].layout, d, k, err);
        for (size_t i = first, j = 0; i < at && rc == UR_OK; i++) {
            p->t[i].offset = follows(p, i) ? p->t[i - 1].offset : p->shards[s].layout.offset[j++];
        }
    }
    ur_free(d);
    return rc;
}

/* MaxText's exporter refuses a model whose architecture is not its Hugging Face checkpoint's
 * unless told to override it (_validate_or_update_architecture): the keys that make it. */
static int check_architecture(const ur_settings *s, const ur_hf_opts *o, ur_err *err)
{
    static const char *const keys[] = {"base_emb_dim",
                                       "base_mlp_dim",
                                       "base_num_query_heads",
                                       "base_num_kv_heads",
                                       "base_num_decoder_layers",
                                       "head_dim",
                                       "vocab_size"};
    char diff[512] = "";
    size_t used = 0;
    if (o->canonical == NULL || o->override_architecture || s->config == NULL ||
        o->canonical->config == NULL) {
        return UR_OK;
    }
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int64_t a = 0, b = 0;
        if (ur_config_get_int(s->config, keys[i], &a, NULL) == UR_OK &&
            ur_config_get_int(o->canonical->config, keys[i], &b, NULL) == UR_OK && a != b &&
            used < sizeof diff) {
            used += (size_t)snprintf(diff + used, sizeof diff - used, "%s%s (%s: %lld, here %lld)",
                                     used ? ", " : "", keys[i], s->model_name, (long long)b,
                                     (long long)a);
        }
    }
    if (used == 0) {
        return UR_OK;
    }
    return ur_err_set(err, UR_EINVAL,
                      "Hugging Face export: the architecture differs from %s's: %s; pass "
                      "--override_model_architecture to export it as it is",
                      s->model_name, diff);
}

int ur_hf_plan_build(ur_hf_plan **out, const ur_plan *plan, const ur_plan_leaf *leaves,
                     const ur_settings *s, const ur_hf_opts *o, ur_err *err)
{
    ur_hf_plan *p = ur_calloc(1, sizeof *p);
    int rc = p != NULL ? UR_OK : ur_err_oom(err);

    *out = NULL;
    if (rc < 0) {
        return rc;
    }
    ur_strmap_init(&p->model.by_path);
    ur_strmap_init(&p->by_sink_path);
    p->model.s = s;
    p->dtype = o->weight_dtype;
    p->model.weight_dtype = o->weight_dtype;
    p->fam = hf_family_for(s);
    if (p->dtype != UR_DT_FLOAT32 && p->dtype != UR_DT_BFLOAT16) {
        rc = ur_err_set(err, UR_EINVAL,
                        "Hugging Face export: weight_dtype %s (float32 or "
                        "bfloat16)",
                        ur_dtype_name(p->dtype));
    } else if (p->fam == NULL) {
        rc = ur_err_set(err, UR_EUNSUPPORTED,
                        "Hugging Face export: no Hugging Face mapping for decoder_block %s "
                        "(model_name %s)",
                        s->decoder_block, s->model_name[0] ? s->model_name : "default");
    }
    if (rc == UR_OK) {
        rc = check_architecture(s, o, err);
    }
    if (rc == UR_OK) {
        rc = gather_params(p, plan, leaves, err);
    }
    if (rc == UR_OK) {
        p->model.flags = HF_IF_DENSE_MLP; /* until the family says its layers route experts */
        rc = p->fam->setup(&p->model, err);
    }
    if (rc == UR_OK) {
        rc = map_params(p, err);
    }
    if (rc == UR_OK && p->n == 0) {
        rc = ur_err_set(err, UR_EINVAL, "Hugging Face export: the checkpoint has no parameters");
    }
    if (rc == UR_OK) {
        qsort(p->t, p->n, sizeof *p->t, by_name_part);
        for (size_t i = 0; i < p->n && rc == UR_OK; i++) {
            hf_param *q = &p->params[p->t[i].param];
            if (p->t[i].expert >= 0) {
                q->experts[p->t[i].expert] = i;
            }
            if (p->t[i].expert <= 0 && q->n_tensors == HF_MAX_PIECES) {
                rc = ur_err_set(err, UR_EINVAL,
                                "Hugging Face export: parameter '%s' cut into more than %d "
                                "tensors",
                                q->path, HF_MAX_PIECES);
            } else if (p->t[i].expert <= 0) {
                q->tensor[q->n_tensors++] = i;
            }
        }
    }
    if (rc == UR_OK) {
        rc = join_pieces(p, err);
    }
    if (rc == UR_OK) {
        rc = check_complete(p, err);
    }
    if (rc == UR_OK) {
        rc = cut_shards(p, o->max_shard_size ? o->max_shard_size : UR_HF_MAX_SHARD_DEFAULT, err);
    }
    if (rc == UR_OK) {
        rc = lay_out(p, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_new(&p->config, err);
    }
    if (rc == UR_OK) {
        rc = p->fam->config(&p->model, p->config, err);
    }
    if (rc < 0) {
        ur_hf_plan_free(p);
        return rc;
    }
    for (size_t i = 0; i < p->n; i++) {
        p->bytes += follows(p, i) ? 0 : p->t[i].nbytes;
        p->n_tensors += !follows(p, i);
    }
    *out = p;
    return UR_OK;
}

void ur_hf_plan_free(ur_hf_plan *p)
{
    if (p == NULL) {
        return;
    }
    for (size_t i = 0; i < p->n_params; i++) {
        ur_free(p->params[i].path);
        ur_free(p->params[i].sink_path);
        ur_free(p->params[i].experts);
    }
    ur_free(p->params);
    for (size_t i = 0; i < p->n; i++) {
        ur_free(p->t[i].name);
        ur_free(p->t[i].pattern);
    }
    ur_free(p->t);
    for (size_t s = 0; s < p->n_shards; s++) {
        ur_free(p->shards[s].file);
        ur_st_layout_dispose(&p->shards[s].layout);
    }
    ur_free(p->shards);
    ur_strmap_dispose(&p->model.by_path);
    ur_strmap_dispose(&p->by_sink_path);
    ur_free(p->model.shapes);
    ur_free(p->model.ranks);
    hf_json_free(p->config);
    ur_free(p);
}

void ur_hf_plan_summary(const ur_hf_plan *p, ur_hf_summary *out)
{
    out->family = p->fam->name;
    out->architecture = p->fam->architecture;
    out->n_tensors = p->n_tensors;
    out->n_shards = p->n_shards;
    out->bytes = p->bytes;
}

int ur_hf_plan_tensor(const ur_hf_plan *p, size_t i, ur_hf_tensor_info *out)
{
    if (i >= p->n) {
        return 0;
    }
    const hf_tensor *t = &p->t[i];
    out->name = t->name;
    out->source = p->params[t->param].path;
    out->pattern = t->pattern;
    out->op = op_text(t->rule->op);
    out->arith = t->rule->op;
    out->dtype = t->dtype;
    out->expert = t->expert;
    out->parts = t->parts;
    out->part = t->part;
    out->inner = t->inner;
    out->run = t->run;
    out->at = t->at;
    out->src_rank = p->params[t->param].rank;
    out->src_shape = p->params[t->param].shape;
    out->src_dtype = p->params[t->param].dtype;
    out->vocab_rows = t->keep > 0 ? p->model.vocab_rows : 0;
    /* an expert's slice: its rows are the parameter's axis 1 (an "{e}" rule needs rank 2) */
    out->src_rows = t->keep > 0         ? t->keep
                    : t->expert >= 0    ? out->src_shape[1]
                    : out->src_rank > 0 ? out->src_shape[0]
                                        : 0;
    out->rank = t->re.out_rank;
    out->shape = t->shape;
    out->shard = p->shards[t->shard].file;
    return 1;
}
