/* The plan's view of an Orbax checkpoint: each leaf's key path, dtype, shape, placeholder
 * kind and partition spec, as ur_plan_build takes them (include/unroll/plan_orbax.h). The
 * plan itself never sees an Orbax type, so it stays a pure function of this list. */
#include "unroll/alloc.h"
#include "unroll/json.h"
#include "unroll/plan_orbax.h"

#include <string.h>

static int placeholder_of(ur_orbax_value_type vt)
{
    switch (vt) {
    case UR_ORBAX_VALUE_NONE:
        return UR_PLAN_PLACEHOLDER_NONE;
    case UR_ORBAX_VALUE_EMPTY_DICT:
        return UR_PLAN_PLACEHOLDER_EMPTY_DICT;
    case UR_ORBAX_VALUE_EMPTY_LIST:
        return UR_PLAN_PLACEHOLDER_EMPTY_LIST;
    default:
        return UR_PLAN_NOT_PLACEHOLDER;
    }
}

void ur_plan_orbax_leaves_dispose(ur_plan_leaves *l)
{
    ur_free(l->comps_);
    ur_free(l->seqs_);
    ur_free(l->specs_);
    ur_free(l->leaves);
    memset(l, 0, sizeof *l);
}

/* A named sharding's spec as the plan takes it: one entry per axis of the array. */
static int has_spec(const ur_orbax_leaf *o)
{
    return o->sharding.kind == UR_ORBAX_SHARDING_NAMED && o->has_array && o->rank > 0;
}

int ur_plan_orbax_leaves(ur_plan_leaves *l, const ur_orbax_ckpt *ck, ur_err *err)
{
    size_t n = ur_orbax_ckpt_leaf_count(ck), total = 0, used = 0, n_spec = 0, spec_used = 0;

    memset(l, 0, sizeof *l);
    for (size_t i = 0; i < n; i++) {
        const ur_orbax_leaf *o = ur_orbax_ckpt_leaf(ck, i);
        total += o->depth;
        n_spec += has_spec(o) ? (size_t)o->rank : 0;
    }
    l->leaves = ur_calloc(n ? n : 1, sizeof *l->leaves);
    l->comps_ = ur_calloc(total ? total : 1, sizeof *l->comps_);
    l->seqs_ = ur_calloc(total ? total : 1, 1);
    l->specs_ = ur_calloc(n_spec ? n_spec : 1, sizeof *l->specs_);
    if (l->leaves == NULL || l->comps_ == NULL || l->seqs_ == NULL || l->specs_ == NULL) {
        ur_plan_orbax_leaves_dispose(l);
        return ur_err_oom(err);
    }
    for (size_t i = 0; i < n; i++) {
        const ur_orbax_leaf *o = ur_orbax_ckpt_leaf(ck, i);
        ur_plan_leaf *p = &l->leaves[i];
        for (size_t k = 0; k < o->depth; k++) {
            l->comps_[used + k] = o->path[k].key;
            l->seqs_[used + k] = o->path[k].type == UR_ORBAX_KEY_SEQUENCE;
        }
        p->path = l->comps_ + used;
        p->seq = l->seqs_ + used;
        p->path_len = o->depth;
        used += o->depth;
        p->dtype = o->has_array ? o->dtype : UR_DT_INVALID;
        p->placeholder = placeholder_of(o->value_type);
        p->rank = o->has_array ? (size_t)o->rank : 0;
        p->shape = p->rank > 0 ? o->shape : NULL; /* o->shape has rank entries */
        p->has_spec = o->sharding.kind == UR_ORBAX_SHARDING_NAMED;
        if (has_spec(o)) {
            const char **sp = l->specs_ + spec_used;
            for (int d = 0; d < o->sharding.spec_rank && d < o->rank; d++) {
                sp[d] = o->sharding.spec[d];
            }
            p->spec = sp;
            spec_used += (size_t)o->rank;
        }
    }
    l->n = n;
    return UR_OK;
}

/* One member of the input's custom_metadata carried into the output's: every one but
 * scan_layers (which the output states itself), its value's text as the input wrote it. */
static int carry_member(void *ctx, const char *key, const char *value, size_t len, ur_err *err)
{
    ur_buf *b = ctx;
    int rc;
    if (strcmp(key, "scan_layers") == 0) {
        return UR_OK;
    }
    rc = ur_buf_append_str(b, ", ", err);
    if (rc == UR_OK) {
        rc = ur_json_put_string(b, key, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(b, ": ", err);
    }
    return rc == UR_OK ? ur_buf_append(b, value, len, err) : rc;
}

int ur_plan_orbax_custom_metadata(char **out, const ur_orbax_ckpt *ck, int scanned, ur_err *err)
{
    const ur_orbax_step_meta *sm = ur_orbax_ckpt_step_meta(ck);
    const char *in = sm != NULL ? sm->custom_metadata_json : NULL;
    ur_buf b;
    /* first, as MaxText's own save puts it (checkpointing.save_checkpoint) */
    int rc;
    ur_buf_init(&b, 0);
    rc = ur_buf_printf(&b, err, "{\"scan_layers\": %s", scanned ? "true" : "false");
    if (rc == UR_OK && in != NULL) {
        rc = ur_json_each_member(in, strlen(in), carry_member, &b, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(&b, '}', err);
    }
    if (rc == UR_OK && (*out = ur_buf_detach(&b, NULL)) == NULL) {
        rc = ur_err_oom(err);
    }
    ur_buf_dispose(&b);
    return rc;
}
