/* MaxText layout families, as data for the planner (src/maxtext/plan.c). Private to the plan
 * layer.
 *
 * A family is one descriptor in a file of its own, src/maxtext/family_<name>.c, listed once in
 * the table of src/maxtext/family.c (first row whose `applies` is true wins). It says:
 *   - the config keys it reads that are nobody else's (`keys`: first_num_dense_layers, the
 *     pipeline keys, ...), typed and checked once per plan (ur_family_keys_resolve), so that
 *     a family's key lives in its own file and not in the public ur_settings;
 *   - which configs it is (`applies`: decoder_block, inhomogeneous_layer_cycle_interval, ...);
 *   - its scanned groups (`setup`: ur_plan_group name decoder/<name>, layer count, and the
 *     scanned -> unscanned name mapping: decoder/<name>/R slice i ->
 *     decoder/<out_name>_<first_out + i * cycle + j>/R for sub-layer layers_<j> of a block of
 *     `cycle`, or decoder/<name>_<i>/R when out_name is NULL);
 *   - leaves of shapes the group mapping does not cover (`leaf`: nested scans, remainders,
 *     pipeline stacks), with their layer-index formula
 *     out[lin] = layers_<(lin / div) * mul + lin % div + add> (ur_plan__unstack);
 *   - what must be present once every leaf is planned (`finish`).
 * ur_plan_build (plan.c) is the walk that does everything else (layouts, drops, casts, copies,
 * the plain and block groups, byte counts) and calls these hooks. */
#ifndef UNROLL_PLAN_FAMILY_H
#define UNROLL_PLAN_FAMILY_H

#include "unroll/config.h"
#include "unroll/plan.h"

/* ---- the families' own config keys (declared in family_<name>.c, resolved in family.c) ---- */

typedef enum {
    UR_FAMILY_KEY_INT,     /* ur_config_get_int */
    UR_FAMILY_KEY_BOOL,    /* ur_config_get_bool, read as 0 or 1 */
    UR_FAMILY_KEY_INT_LIST /* ur_config_get_int_list; absent or null: empty */
} ur_family_key_type;

/* One config key a family reads. The object is the key's identity: a family reads its value
 * with ur_family_int(w->k, &its_key); a key another file reads too is declared extern below. */
typedef struct {
    const char *name;
    ur_family_key_type type;
    int64_t dflt; /* absent from the config (INT, BOOL): MaxText's default (types.py) */
    int64_t min;  /* INT: a smaller value is refused, the message naming the key */
} ur_family_key;

#define UR_FAMILY_MAX_KEYS 32

/* The values of every family's keys for one config (whichever family it turns out to be, so
 * that a bad value is refused for any config, as pydantic refuses it). */
typedef struct {
    size_t n;
    struct {
        const ur_family_key *key;
        int64_t v;     /* INT, BOOL */
        int64_t *list; /* INT_LIST: owned, n_list items (NULL when empty) */
        size_t n_list;
    } e[UR_FAMILY_MAX_KEYS];
} ur_family_keys;

/* Every key of the table's families (and the pipeline's) from cfg, each at its default when
 * cfg is NULL or lacks it. Disposed with ur_family_keys_dispose, also after a failure.
 * UR_EINVAL: a value of the wrong type or below the key's min (message names the key);
 * UR_ENOMEM. */
int ur_family_keys_resolve(ur_family_keys *out, const ur_config *cfg, ur_err *err);
void ur_family_keys_dispose(ur_family_keys *k);
/* The value of an INT or BOOL key (asserts that some family declares it). */
int64_t ur_family_int(const ur_family_keys *k, const ur_family_key *key);
/* The items of an INT_LIST key, borrowed from k; *n their count. */
const int64_t *ur_family_list(const ur_family_keys *k, const ur_family_key *key, size_t *n);
/* Set an INT or BOOL key's value (the unit tests' way to a config). */
void ur_family_keys_set(ur_family_keys *k, const ur_family_key *key, int64_t v);

/* The keys read outside the file that declares them. */
extern const ur_family_key ur_key_first_num_dense_layers;             /* family_deepseek.c */
extern const ur_family_key ur_key_inhomogeneous_layer_cycle_interval; /* family_cycle.c */
extern const ur_family_key ur_key_engram_layers;            /* family_deepseek_engram.c */
extern const ur_family_key ur_key_ici_pipeline_parallelism; /* family_pipeline.c */
extern const ur_family_key ur_key_dcn_pipeline_parallelism; /* family_pipeline.c */

/* Components of a key path, with their list-index marks (NULL: all dict keys). */
typedef struct {
    const char *const *c;
    size_t n;
    const unsigned char *seq;
} ur_plan_span;

/* One build in progress: what the hooks read, and the state a family keeps between them. */
typedef struct {
    ur_plan *plan;
    const ur_settings *s;
    const ur_family_keys *k; /* the families' own keys of the config */
    const ur_plan_leaf *leaves;
    size_t n;
    int lora;
    int params_only; /* a param-only checkpoint (load_parameters_path) */
    ur_plan_span prefix, suffix; /* the output wrapper around the model path */
    /* The family's own state (a struct of its file, at most this size: see UR_FAMILY_STATE);
     * zeroed before `setup`. */
    union {
        int64_t i[8];
        void *p;
    } state;
} ur_plan_walk;

/* The family's state struct T inside walk w; each family file that keeps state states
 * UR_FAMILY_STATE_FITS(T) once, so that a state too large fails to compile. */
#define UR_FAMILY_STATE(T, w) ((T *)(void *)&(w)->state)
#define UR_FAMILY_STATE_FITS(T)                                                                   \
    _Static_assert(sizeof(T) <= sizeof(((ur_plan_walk *)0)->state), #T " fits "                   \
                                                                       "ur_plan_walk.state")

/* One kept leaf of the model tree, path[st..en) being its model path; g: the group whose
 * name is path[st + 1] (-1: none); elems: its element count. */
typedef struct {
    const ur_plan_leaf *l;
    ur_plan_action *a;
    size_t st, en;
    int g;
    uint64_t elems;
    int aux; /* a non-parameter variable (nnx_aux/model/P, plan.c is_aux): not cast, and
              * stacked on axis 0 by a plain scan; refused where a family's hook unstacks it */
} ur_plan_item;

typedef struct ur_plan_family {
    const char *name;
    /* The config keys it owns (NULL-terminated; NULL: none). A key has one owner; another
     * file that reads it names it through its extern declaration above. */
    const ur_family_key *const *keys;
    /* 1: this family is the config's layout */
    int (*applies)(const ur_settings *s, const ur_family_keys *k);
    /* Set plan->groups / n_groups (and the family state). UR_EINVAL / UR_EUNSUPPORTED: a
     * config the family cannot unroll (message names the keys). */
    int (*setup)(ur_plan_walk *w, ur_err *err);
    /* Optional: plan an unrolled decoder/... leaf the groups do not describe; *done = 1 when
     * it did (the action is then complete), 0 to leave it to the walk. */
    int (*leaf)(ur_plan_walk *w, const ur_plan_item *it, int *done, ur_err *err);
    /* Optional: checks after the last leaf (e.g. a remainder that must be present). */
    int (*finish)(ur_plan_walk *w, ur_err *err);
    /* Optional, when unrolling: plan a leaf of the multi-token-prediction layer's transformer
     * layer, mtp_block/mtp_layer_<k>/mtp_<k>_transformer_layer/R (R = path[rest..en)). MaxText
     * builds that layer from get_decoder_layers()[-1] (models.py), the scannable block of
     * several layers when the family has one and scan_layers is true, a single decoder layer
     * otherwise. *done = 1 when it planned the leaf; 0 (or no hook: plain, deepseek, gemma3,
     * whose layer class is the same scanned or not) leaves it to the walk, which copies it. */
    int (*mtp_leaf)(ur_plan_walk *w, const ur_plan_item *it, size_t rest, int *done, ur_err *err);
    /* Its checkpoints may hold pipeline stacks (ici/dcn_pipeline_parallelism > 1). */
    int pipelinable;
    /* It is the pipeline layout itself: decoder/pipeline_module is its group, and its setup
     * checks the layer counts (the walk's generic tree and count checks are skipped). */
    int pipeline;
    /* It scans blocks inside a scan (gemma4, qwen3-next): a non-parameter variable (nnx_aux)
     * under decoder/ is refused, its axes there not being known. */
    int nested;
    /* Optional: 1 when a leaf (its path's components [st, en) below the model) of a
     * param-only checkpoint, which holds them among the parameters, is one of the family's
     * non-parameter variables: without a partition spec saying otherwise, a scan stacked it on
     * axis 0, and it keeps its dtype, as under a training state's nnx_aux. (A training state
     * keeps them under nnx_aux; a parameter there of the same name is an older MaxText's.) */
    int (*aux_leaf)(const ur_plan_leaf *l, size_t st, size_t en);
} ur_plan_family;

/* ---- the table (family.c) ---------------------------------------------------------------- */

/* The family of the config: the pipeline layout when unrolling with pipeline parallelism,
 * else the first row of the table that applies (the plain family applies to everything). */
const ur_plan_family *ur_family_find(const ur_settings *s, const ur_family_keys *k);
/* The decoder_block family, pipeline aside. */
const ur_plan_family *ur_family_find_block(const ur_settings *s, const ur_family_keys *k);

/* The pipeline layout (family_pipeline.c), tried before the table's rows. The others are
 * named only by their row in family.c. */
extern const ur_plan_family ur_family_pipeline;

/* ---- what the walk lends the families (plan.c) -------------------------------------------- */

/* The cycle interval K (1 when unset or 1). */
int64_t ur_plan__cycle(const ur_family_keys *k);
/* DeepSeek's router bias (routed_bias: a MoEBiasVar, not an nnx.Param), .../MoeBlock_0/gate/bias
 * (an aux_leaf). */
int ur_plan__router_bias(const ur_plan_leaf *l, size_t st, size_t en);
void ur_plan__group_set(ur_plan_group *g, const char *name, int64_t n_layers, int64_t cycle,
                        int64_t first_out, const char *out_name);
/* "layers_<j>" or "layer_<j>" with j < k: 1 and *j. */
int ur_plan__sub_layer(const char *c, int64_t k, int64_t *j);
/* "[4, 2, 6]" into buf. */
void ur_plan__shape_format(const ur_plan_leaf *leaf, char *buf, size_t n);
/* Components [from, to) of a leaf's path, list marks kept. */
ur_plan_span ur_plan__leaf_span(const ur_plan_leaf *l, size_t from, size_t to);
/* Make the item's action a DROP (a kept leaf turned out to be dropped). */
void ur_plan__drop(ur_plan_walk *w, const ur_plan_item *it, const char *why);
/* Drop it as a model array the unscanned model has no place for: counted in
 * summary.leaves_left_out (with `why`), which the run reports. */
void ur_plan__leave_out(ur_plan_walk *w, const ur_plan_item *it, const char *why);
/* Make it an UNSTACK on `axis` (length n) of which only slice `keep` is written, to
 * prefix/path[st..rest)/path[rest + 1..en)/suffix (the component path[rest] left out); the
 * other slices are discarded (ur_plan_path.len 0). */
int ur_plan__take(ur_plan_walk *w, const ur_plan_item *it, size_t axis, uint64_t keep, size_t rest,
                  ur_err *err);
/* The mtp_leaf of the block families whose MTP layer unroll cannot unroll: UR_EUNSUPPORTED. */
int ur_plan__mtp_unsupported(ur_plan_walk *w, const ur_plan_item *it, ur_err *err);
/* 1 when path[st..en) is mtp_block/mtp_layer_<k>/mtp_<k>_transformer_layer/R (R not empty);
 * *rest: the index of R's first component. */
int ur_plan__mtp_layer(const ur_plan_leaf *l, size_t st, size_t en, size_t *rest);
/* Make it a COPY to prefix/decoder/<layer>/path[rest..en)/suffix. */
int ur_plan__copy_to_layer(ur_plan_walk *w, const ur_plan_item *it, const char *layer, size_t rest,
                           ur_err *err);
/* Make it an UNSTACK over it->a->axes[0..n_axes) (set by the caller) of group g:
 * out[lin] = prefix/decoder/<X>_<(lin / div) * mul + lin % div + add>/path[rest..en)/suffix
 * for the C-order linear index lin < n_out, X the group's out_name ("layers" when NULL). */
int ur_plan__unstack(ur_plan_walk *w, const ur_plan_item *it, int g, size_t rest, uint64_t n_out,
                     int64_t div, int64_t mul, int64_t add, ur_err *err);

/* Make it an UNSTACK (an empty entry: a REPLICATE) on its layer axis (param_scan_axis, or
 * axis 0 for a non-parameter variable, unless its spec names another), whose length must be
 * nl: slice i to prefix/decoder/<out_name>_<first + i>/path[rest..en)/suffix. `stack` names
 * the input stack decoder/<stack> in messages. UR_EINVAL / UR_ECORRUPT: no such axis, or
 * another length. */
int ur_plan__unstack_to(ur_plan_walk *w, const ur_plan_item *it, const char *stack, int64_t nl,
                        const char *out_name, int64_t first, size_t rest, ur_err *err);

/* ---- nested blocks (plan_nested.c): gemma4 and qwen3-next ---------------------------------- */

/* Their state: the layers after the last block. */
typedef struct {
    int64_t n_remainder;
    int64_t remainder_first;
    int remainder_seen;
} ur_plan_nested_state;

/* decoder/<group>/{local_layers,global_layer}/R and decoder/layers_remainder/local_layers/R */
int ur_plan_nested__leaf(ur_plan_walk *w, const ur_plan_item *it, ur_err *err);
/* The remainder must be present when there is one. */
int ur_plan_nested__finish(ur_plan_walk *w, ur_err *err);

#endif
