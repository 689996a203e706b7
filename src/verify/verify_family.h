/* `unroll verify`'s knowledge of the layout families, private to src/verify/. The
 * verifier (verify.c) is the oracle of the planner (plan.c, family_*.c) and shares no
 * code with it: it finds the source of each output leaf from the output's names and the
 * input's names and shapes alone, never from decoder_block. Its families are therefore the
 * input shapes an unrolled decoder/layers_<g> can come from, one file each:
 *
 *   verify_family_blocks.c    plain scanned groups (llama2..., deepseek's dense/moe layers),
 *                             blocks of sub-layers (inhomogeneous cycles, gemma3, deepseek4's
 *                             scanned_blocks after its unscanned hash layers), gemma3's
 *                             unscanned layers_remainder
 *   verify_family_nested.c    nested scans: gemma4 (scanned_blocks/{local_layers,
 *                             global_layer}) and qwen3-next (layers/{local_layers,
 *                             global_layer}), each with layers_remainder/local_layers
 *   verify_family_pipeline.c  pipeline stacks (pipeline_module + layers_outside_pipeline)
 *   verify_family_mtp.c       the multi-token-prediction layer, from a scanned MTP block
 *   verify_family_engram.c    DeepSeek Engram: chunks X_<a>_<b> around unscanned
 *                             X_engram_<k>, whose Engram weights the output does not carry
 *
 * chosen through the table in verify_family.c. A matcher is pure: it reads the two leaf
 * sets and returns a pairing (which input leaf, which index on which axes) that the core
 * then checks value by value; tests/unit/verify/test_verify_family.c feeds it in-memory trees. */
#ifndef UNROLL_PLAN_VERIFY_FAMILY_H
#define UNROLL_PLAN_VERIFY_FAMILY_H

#include "unroll/buf.h"
#include "unroll/idxset.h"
#include "unroll/orbax.h"
#include "unroll/pool.h"
#include "unroll/strmap.h"
#include "unroll/verify.h"

#define UR_VERIFY_SEP '\x1f' /* joins key components into one string (never in a MaxText key) */

/* One leaf of either checkpoint, by its model path. */
typedef struct {
    const ur_orbax_leaf *leaf;
    const char *const *comp; /* model path components */
    size_t len;
    size_t first; /* comp[0] is leaf->path[first] */
    const char *key; /* components joined with UR_VERIFY_SEP (in the set's pool); an output
                      * leaf's only when it brought a node to its set, else NULL */
    /* input only */
    int aux;          /* a non-parameter variable (nnx_aux/model/P): kept in its dtype, and a
              * scan stacks it on axis 0 (see plan.c is_aux) */
    int table;        /* the scanned group it was sliced from, -1: none (yet) */
    int64_t sub;      /* cycle sub-layer j, -1: not a cycle leaf */
    size_t rest;      /* first component after the group (and sub-layer) */
    size_t hits;      /* output leaves taken from it */
    uint8_t *seen;    /* scanned: which layers were found in the output (table's n; in the
                    * set's pool) */
    int64_t n_slices; /* pipeline stack / nested / layers_outside_pipeline: slices in `seen` */
    /* ... their output: comp[0..pdlen)/<pname>_<(slice / pdiv) * pmul + slice % pdiv + padd>/
     * comp[rest..] (the family's layer-index formula, for the report of missing layers;
     * pname NULL: layers) */
    size_t pdlen;
    const char *pname;
    int64_t pdiv, pmul, padd;
} vleaf;

typedef struct {
    vleaf *v;
    size_t n;
    const char **comps; /* scratch: the whole path of the leaf being entered */
    /* v[i].key -> i (the first leaf of a path), the keys compared where they are (a string
     * map's 32-byte slots were 25 MB at 300,000 leaves); the input's only (empty in the
     * output's set: keyed 0) */
    ur_idxset by_key;
    int keyed;
    ur_strmap nodes;    /* interior nodes: every proper prefix of a key (value unused) */
    int sep_inside;     /* a component holds the separator: keys are ambiguous, maps unused */
    ur_pool pool;       /* the leaves' model paths, keys and `seen` flags */
} vset;

/* The layers of output group D/X_<g>: where each g comes from in the input. */
typedef struct {
    char *dkey;    /* D joined */
    size_t dlen;   /* components of D */
    char *x;       /* X */
    const char *g; /* the scanned node under D in the input (X or "scanned_blocks"), or NULL */
    int64_t k;     /* sub-layers per block (1: a plain group) */
    int64_t h;     /* unscanned D/X_<i> before the blocks */
    int64_t r;     /* D/layers_remainder/layers_<j> after the blocks */
    int64_t n_out; /* output layers (max g + 1) */
    int64_t n;     /* scan length: (n_out - h - r) / k */
    int pipe;      /* D/layers_<g> come from a stack of their own (pipeline, nested blocks) */
    /* DeepSeek Engram (verify_family_engram.c): the input's D/X_<a>_<b> and D/X_engram_<a>,
     * read on first use, as (a, b, engram) triples; `low`: the smallest a */
    int chunks_read;
    size_t n_chunks;
    int64_t *chunks;
    int64_t low;
} table;

typedef struct {
    ur_orbax_ckpt *in_ck, *out_ck;
    vset in, out;
    table *tables;
    size_t n_tables, cap_tables;
    const ur_verify_opts *opts;
    ur_verify_report *rep;
    struct ur_vcmp *cmp; /* the value comparisons (verify_compare.h) */
    /* Output leaves held back until the other slices of their input leaf are found, so that
     * its chunks are decoded once for all (verify.c compare_values). */
    struct vpend *pend;
    size_t n_pend;
    /* The report keeps the first issues in output-leaf order, whatever order they are
     * found in (a leaf's values are compared on another thread while later leaves are
     * matched): each kept issue's key, and the key of the issues being found now. */
    uint64_t *issue_keys;
    uint64_t issue_key;
    /* Key-path scratch for the matchers, sized to the deepest output leaf + 3 (no limit);
     * each matcher fills what it uses before it reads it. */
    const char **scratch;
} verifier;

/* Where an output leaf comes from. */
typedef enum {
    VPAIR_NONE,   /* no source found (yet) */
    VPAIR_LAYER,  /* src, layer `layer` of table `tbl` (the axis found from shapes); tbl -1:
                  * the whole leaf */
    VPAIR_SLICES, /* src at index fidx[m] on axis fax[m], m < nfix: slice `slice` of n_slices */
    VPAIR_DONE    /* the matcher found the source and reported the issue itself */
} vpair_kind;

typedef struct {
    vpair_kind kind;
    vleaf *src;
    int tbl;
    int64_t layer;
    int nfix;
    int fax[3];
    int64_t fidx[3];
    int64_t slice, n_slices;
} vpair;

/* One row of the table: output D/X_<g> (X at o->comp[k], table tbl) from an input stack. */
typedef struct {
    const char *name;  /* the MaxText families it reads, for messages and readers */
    const char *under; /* tried only when the input has D/<under> (NULL: always) */
    int layers_only;   /* tried only for X = "layers" */
    int (*match)(verifier *vf, const vleaf *o, size_t k, int64_t g, int tbl, vpair *out,
                 ur_err *err);
} ur_verify_family;

/* ---- the table (verify_family.c) ---------------------------------------------------------- */
extern const ur_verify_family *const ur_verify_family_table[];
extern const size_t ur_verify_family_count;

/* ---- the blocks family's tables (verify_family_blocks.c) ---------------------------------- */

/* The table for output D/X_<g> (D = q[0..dlen)), built on first use (verify_family_blocks.c):
 * the scanned node, sub-layers per block, unscanned head and remainder, read from the tree. */
int ur_verify_family_blocks__table(verifier *vf, const char *const *q, size_t dlen, const char *x,
                                   size_t xl, int *out, ur_err *err);

/* ---- the multi-token-prediction layer (verify_family_mtp.c) -------------------------------- */

/* Output .../mtp_block/mtp_layer_<k>/mtp_<k>_transformer_layer/R from local layer 0 of the
 * input's .../local_layers/R (a scanned MTP block); out->kind stays VPAIR_NONE otherwise. */
int ur_verify_family_mtp__match(verifier *vf, const vleaf *o, vpair *out, ur_err *err);
/* 1 when input leaf v is a scanned MTP block's global layer that the output, which unrolled
 * that MTP layer, does not carry (not missing). */
int ur_verify_family_mtp__not_carried(const verifier *vf, const vleaf *v);

/* ---- DeepSeek Engram (verify_family_engram.c) ---------------------------------------------- */

/* 1 when input leaf v is the Engram (D/X_engram_<k>/engram/... or .../engram_layer_norm/...) of
 * an Engram layer that the output carries as D/X_<k - low> with no Engram under it: the
 * unscanned model has none (not missing). UR_ENOMEM aside (then 0 and *err set). */
int ur_verify_family_engram__not_carried(verifier *vf, const vleaf *v, ur_err *err);

/* ---- what the core lends the families (verify.c) ------------------------------------- */
ur_verify_issue *ur_verify__issue(verifier *vf, ur_verify_issue_kind kind, const char *leaf,
                                  const char *source);
void ur_verify__join(const char *const *c, size_t n, char *buf, size_t cap);
void ur_verify__leaf_name(const vleaf *l, char *buf, size_t cap);
void ur_verify__shape_str(char *buf, size_t n, const uint64_t *s, int rank);
/* "X_<g>": 1 and the parts when s is a name, an underscore and a decimal index. */
int ur_verify__split_index(const char *s, size_t *xlen, int64_t *g);
/* "layers_<j>" or "layer_<j>" (a sub-layer of a scanned block). */
int ur_verify__sub_index(const char *s, int64_t *j);
char *ur_verify__key_of(const char *const *c, size_t n);
int ur_verify__is_placeholder(const ur_orbax_leaf *l);
int ur_verify__has_prefix(const vleaf *v, const char *const *d, size_t dlen);
/* The input leaf with model path c[0..n), or NULL. */
vleaf *ur_verify__find_in(verifier *vf, const char *const *c, size_t n);
/* The largest g of a leaf D/X_<g>/... (with more than need_more components after it), -1. */
int64_t ur_verify__max_index_under(const vset *s, const char *const *d, size_t dlen, const char *x,
                                   size_t xl, int need_more);
/* 1 when some leaf lies under D/node (D = d[0..dlen)). */
int ur_verify__any_under(const vset *s, const char *const *d, size_t dlen, const char *node);
/* The layer axis of input i for output o: removing it gives o's shape and its length is n;
 * several: param_scan_axis if one of them, else the first; -1: none. */
int ur_verify__layer_axis(const verifier *vf, const vleaf *o, const vleaf *i, int64_t n);
/* The axis a of i (rank o + n) such that removing a..a+n-1 leaves o's shape; pref preferred. */
int ur_verify__run_axis(const vleaf *o, const vleaf *i, int n, int64_t pref);
/* *out = VPAIR_SLICES of src: index fidx[m] on axis fax[m] (m < nfix <= 3), slice of n_slices.
 * Returns UR_OK. */
int ur_verify__slices(vpair *out, vleaf *src, int nfix, const int *fax, const int64_t *fidx,
                      int64_t slice, int64_t n_slices);

/* ---- for the unit tests: a verifier over in-memory leaves, and the pairing alone ----------- */
/* Leaf sets from arrays (no checkpoint: only model-path leaves may be given). */
int ur_verify__init(verifier *vf, const ur_orbax_leaf *in, size_t n_in, const ur_orbax_leaf *out,
                    size_t n_out, const ur_verify_opts *opts, ur_verify_report *rep, ur_err *err);
void ur_verify__dispose(verifier *vf);
/* A verifier of the input checkpoint in_ck against in-memory output leaves (model paths):
 * the Hugging Face check (verify_hf.c) pairs each tensor's MaxText parameter so. */
int ur_verify__init_in(verifier *vf, ur_orbax_ckpt *in_ck, const ur_orbax_leaf *out, size_t n_out,
                       const ur_verify_opts *opts, ur_verify_report *rep, ur_err *err);
/* The source of output leaf o through the family table (nothing read, nothing compared). */
int ur_verify__match(verifier *vf, const vleaf *o, vpair *out, ur_err *err);

#endif
