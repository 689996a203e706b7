/* The family matchers of `unroll verify` (src/verify/verify_family_*.c) on small in-memory
 * trees: for each output leaf, which input leaf it is paired with, and at which index on which
 * axes. No checkpoint is read: the leaf lists are built here, and only the pairing (the
 * oracle's mapping) is checked, not values. */
#include "ur_test.h"

#include "verify/verify_family.h"

#define MAX_LEAVES 32
#define MAX_DEPTH 12

/* An in-memory tree: leaves with their key components. */
typedef struct {
    ur_orbax_leaf leaf[MAX_LEAVES];
    ur_orbax_key keys[MAX_LEAVES][MAX_DEPTH];
    uint64_t shape[MAX_LEAVES][UR_MAX_RANK]; /* the leaves' shapes point here */
    char text[MAX_LEAVES][256];
    size_t n;
} tree;

/* Add "a/b/c" with shape "8,2,16" (float32 array). */
static void add(tree *t, const char *path, const char *shape)
{
    ur_orbax_leaf *l = &t->leaf[t->n];
    char *p = t->text[t->n];
    size_t d = 0;
    assert_true(t->n < MAX_LEAVES);
    memset(l, 0, sizeof *l);
    snprintf(p, sizeof t->text[0], "%s", path);
    for (char *c = p;;) {
        char *slash = strchr(c, '/');
        assert_true(d < MAX_DEPTH);
        t->keys[t->n][d].key = c;
        t->keys[t->n][d].type = UR_ORBAX_KEY_DICT;
        d++;
        if (slash == NULL) {
            break;
        }
        *slash = '\0';
        c = slash + 1;
    }
    l->path = t->keys[t->n];
    l->depth = d;
    l->value_type = UR_ORBAX_VALUE_JAX_ARRAY;
    l->value_type_name = "jax.Array";
    l->has_array = 1;
    l->dtype = UR_DT_FLOAT32;
    l->shape = t->shape[t->n];
    for (const char *s = shape; *s != '\0';) {
        uint64_t v = 0;
        while (*s >= '0' && *s <= '9') {
            v = v * 10 + (uint64_t)(*s++ - '0');
        }
        assert_true(l->rank < UR_MAX_RANK);
        t->shape[t->n][l->rank++] = v;
        if (*s == ',') {
            s++;
        }
    }
    t->n++;
}

typedef struct {
    tree in, out;
    verifier vf;
    ur_verify_opts opts;
    ur_verify_report rep;
} fixture;

static void start(fixture *f)
{
    ur_err err;
    ur_verify_opts_init(&f->opts);
    assert_int_equal(ur_verify__init(&f->vf, f->in.leaf, f->in.n, f->out.leaf, f->out.n, &f->opts,
                                     &f->rep, &err),
                     UR_OK);
}

static void stop(fixture *f)
{
    ur_verify__dispose(&f->vf);
    ur_verify_report_dispose(&f->rep);
}

/* The pairing of output leaf `name` (its model path, without the params/params wrapper). */
static vpair pair_of(fixture *f, const char *name)
{
    char buf[512];
    ur_err err;
    vpair p;
    for (size_t i = 0; i < f->vf.out.n; i++) {
        ur_verify__leaf_name(&f->vf.out.v[i], buf, sizeof buf);
        if (strcmp(buf, name) == 0) {
            assert_int_equal(ur_verify__match(&f->vf, &f->vf.out.v[i], &p, &err), UR_OK);
            return p;
        }
    }
    fail_msg("no output leaf %s", name);
    memset(&p, 0, sizeof p);
    return p;
}

static void expect_src(const vpair *p, const char *name)
{
    char buf[512];
    assert_non_null(p->src);
    ur_verify__leaf_name(p->src, buf, sizeof buf);
    assert_string_equal(buf, name);
}

/* VPAIR_SLICES of `src` with the given axes, indices and slice. */
static void expect_slices(const vpair *p, const char *src, int nfix, const int *fax,
                          const int64_t *fidx, int64_t slice, int64_t n_slices)
{
    assert_int_equal(p->kind, VPAIR_SLICES);
    expect_src(p, src);
    assert_int_equal(p->nfix, nfix);
    for (int m = 0; m < nfix; m++) {
        assert_int_equal(p->fax[m], fax[m]);
        assert_int_equal(p->fidx[m], fidx[m]);
    }
    assert_int_equal(p->slice, slice);
    assert_int_equal(p->n_slices, n_slices);
}

/* The source's layer-index formula: slice s -> layers_<(s / pdiv) * pmul + s % pdiv + padd>. */
static int64_t layer_of(const vleaf *v, int64_t s)
{
    return (s / v->pdiv) * v->pmul + s % v->pdiv + v->padd;
}

static void test_verify_family__plain_and_deepseek_groups(void **state)
{
    static fixture f;
    vpair p;
    char name[64];
    (void)state;
    memset(&f, 0, sizeof f);
    add(&f.in, "params/params/token_embedder/embedding", "32,8");
    add(&f.in, "params/params/decoder/layers/mlp/wi/kernel", "8,4,16");
    add(&f.in, "params/params/decoder/dense_layers/mlp/kernel", "8,1,16");
    add(&f.in, "params/params/decoder/moe_layers/mlp/kernel", "8,3,16");
    add(&f.out, "params/params/token_embedder/embedding", "32,8");
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "params/params/decoder/layers_%d/mlp/wi/kernel", i);
        add(&f.out, name, "8,16");
    }
    add(&f.out, "params/params/decoder/dense_layers_0/mlp/kernel", "8,16");
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "params/params/decoder/moe_layers_%d/mlp/kernel", i);
        add(&f.out, name, "8,16");
    }
    start(&f);
    /* the same path: the whole leaf */
    p = pair_of(&f, "token_embedder/embedding");
    assert_int_equal(p.kind, VPAIR_LAYER);
    assert_int_equal(p.tbl, -1);
    expect_src(&p, "token_embedder/embedding");
    /* layer 2 of decoder/layers (4 layers, one per output) */
    p = pair_of(&f, "decoder/layers_2/mlp/wi/kernel");
    assert_int_equal(p.kind, VPAIR_LAYER);
    expect_src(&p, "decoder/layers/mlp/wi/kernel");
    assert_int_equal(p.layer, 2);
    assert_true(p.tbl >= 0);
    assert_int_equal(f.vf.tables[p.tbl].n, 4);
    assert_int_equal(f.vf.tables[p.tbl].k, 1);
    /* deepseek: each group keeps its name, indices restart at 0 */
    p = pair_of(&f, "decoder/moe_layers_2/mlp/kernel");
    expect_src(&p, "decoder/moe_layers/mlp/kernel");
    assert_int_equal(p.layer, 2);
    assert_int_equal(f.vf.tables[p.tbl].n, 3);
    p = pair_of(&f, "decoder/dense_layers_0/mlp/kernel");
    expect_src(&p, "decoder/dense_layers/mlp/kernel");
    assert_int_equal(p.layer, 0);
    stop(&f);
}

/* gemma3 (and inhomogeneous cycles): blocks of 6 sub-layers, then an unscanned remainder */
static void test_verify_family__blocks_and_gemma3_remainder(void **state)
{
    static fixture f;
    vpair p;
    char name[96];
    (void)state;
    memset(&f, 0, sizeof f);
    for (int j = 0; j < 6; j++) {
        snprintf(name, sizeof name, "params/params/decoder/layers/layers_%d/mlp/wo", j);
        add(&f.in, name, "4,2,6");
    }
    add(&f.in, "params/params/decoder/layers_remainder/layers_0/mlp/wo", "4,6");
    add(&f.in, "params/params/decoder/layers_remainder/layers_1/mlp/wo", "4,6");
    for (int g = 0; g < 14; g++) {
        snprintf(name, sizeof name, "params/params/decoder/layers_%d/mlp/wo", g);
        add(&f.out, name, "4,6");
    }
    start(&f);
    /* layer 7 = block 1, sub-layer 1 */
    p = pair_of(&f, "decoder/layers_7/mlp/wo");
    assert_int_equal(p.kind, VPAIR_LAYER);
    expect_src(&p, "decoder/layers/layers_1/mlp/wo");
    assert_int_equal(p.layer, 1);
    assert_int_equal(p.src->sub, 1);
    assert_int_equal(f.vf.tables[p.tbl].k, 6);
    assert_int_equal(f.vf.tables[p.tbl].n, 2);
    assert_int_equal(f.vf.tables[p.tbl].r, 2);
    /* layers 12, 13: the remainder, copied whole */
    p = pair_of(&f, "decoder/layers_13/mlp/wo");
    assert_int_equal(p.kind, VPAIR_LAYER);
    assert_int_equal(p.tbl, -1);
    expect_src(&p, "decoder/layers_remainder/layers_1/mlp/wo");
    p = pair_of(&f, "decoder/layers_12/mlp/wo");
    expect_src(&p, "decoder/layers_remainder/layers_0/mlp/wo");
    stop(&f);
}

/* use_multimodal=true: vision_encoder/ is not scanned (MaxText 0.2.5 has no scanned vision
 * encoder), so its leaves pair with themselves whole, even llama4's layers_<j> with an axis of
 * the block count beside a scanned decoder block */
static void test_verify_family__vision_encoder_whole(void **state)
{
    static const char *const vit =
        "params/params/vision_encoder/Llama4VisionModel_0/"
        "Llama4VisionEncoder_0/layers_1/self_attention_vision/query/kernel";
    static fixture f;
    vpair p;
    char name[96];
    (void)state;
    memset(&f, 0, sizeof f);
    for (int j = 0; j < 4; j++) {
        snprintf(name, sizeof name, "params/params/decoder/layers/layers_%d/mlp/wo", j);
        add(&f.in, name, "4,2,6");
    }
    add(&f.in, vit, "16,2,8");
    for (int g = 0; g < 8; g++) {
        snprintf(name, sizeof name, "params/params/decoder/layers_%d/mlp/wo", g);
        add(&f.out, name, "4,6");
    }
    add(&f.out, vit, "16,2,8");
    start(&f);
    p = pair_of(&f, vit + strlen("params/params/"));
    assert_int_equal(p.kind, VPAIR_LAYER);
    assert_int_equal(p.tbl, -1);
    expect_src(&p, vit + strlen("params/params/"));
    /* the decoder beside it: layer 5 = block 1, sub-layer 1 */
    p = pair_of(&f, "decoder/layers_5/mlp/wo");
    expect_src(&p, "decoder/layers/layers_1/mlp/wo");
    assert_int_equal(p.layer, 1);
    stop(&f);
}

/* deepseek4: one unscanned hash layer, then scanned_blocks of 2 */
static void test_verify_family__deepseek4_hash_layers(void **state)
{
    static fixture f;
    vpair p;
    char name[96];
    (void)state;
    memset(&f, 0, sizeof f);
    add(&f.in, "params/params/decoder/layers_0/mlp/wo", "4,6");
    add(&f.in, "params/params/decoder/scanned_blocks/layers_0/mlp/wo", "4,2,6");
    add(&f.in, "params/params/decoder/scanned_blocks/layers_1/mlp/wo", "4,2,6");
    for (int g = 0; g < 5; g++) {
        snprintf(name, sizeof name, "params/params/decoder/layers_%d/mlp/wo", g);
        add(&f.out, name, "4,6");
    }
    start(&f);
    p = pair_of(&f, "decoder/layers_0/mlp/wo");
    assert_int_equal(p.tbl, -1);
    expect_src(&p, "decoder/layers_0/mlp/wo");
    /* layer 4 = H 1 + block 1 * 2 + sub-layer 1 */
    p = pair_of(&f, "decoder/layers_4/mlp/wo");
    assert_int_equal(p.kind, VPAIR_LAYER);
    expect_src(&p, "decoder/scanned_blocks/layers_1/mlp/wo");
    assert_int_equal(p.layer, 1);
    assert_int_equal(f.vf.tables[p.tbl].h, 1);
    assert_int_equal(f.vf.tables[p.tbl].k, 2);
    p = pair_of(&f, "decoder/layers_1/mlp/wo");
    expect_src(&p, "decoder/scanned_blocks/layers_0/mlp/wo");
    assert_int_equal(p.layer, 0);
    stop(&f);
}

/* gemma4: 14 layers = 2 blocks of (5 local + 1 global) + 2 remainder; the global layers have
 * head dim 32, the local ones 16, so each output is matched to the stack it resembles */
static void test_verify_family__gemma4_head_dims(void **state)
{
    static fixture f;
    vpair p;
    char name[96];
    (void)state;
    memset(&f, 0, sizeof f);
    add(&f.in, "params/params/decoder/scanned_blocks/local_layers/attn/q", "8,2,5,4,16");
    add(&f.in, "params/params/decoder/scanned_blocks/global_layer/attn/q", "8,2,4,32");
    add(&f.in, "params/params/decoder/layers_remainder/local_layers/attn/q", "8,2,4,16");
    for (int g = 0; g < 14; g++) {
        snprintf(name, sizeof name, "params/params/decoder/layers_%d/attn/q", g);
        add(&f.out, name, g < 12 && g % 6 == 5 ? "8,4,32" : "8,4,16");
    }
    start(&f);
    /* layer 7: block 1, local 1 -> axes 1 (block) and 2 (local), slice 1 * 5 + 1 */
    p = pair_of(&f, "decoder/layers_7/attn/q");
    expect_slices(&p, "decoder/scanned_blocks/local_layers/attn/q", 2, (int[]){1, 2},
                  (int64_t[]){1, 1}, 6, 10);
    assert_int_equal(layer_of(p.src, 6), 7);
    /* layer 11: the global layer of block 1, shaped [8, 4, 32] */
    p = pair_of(&f, "decoder/layers_11/attn/q");
    expect_slices(&p, "decoder/scanned_blocks/global_layer/attn/q", 1, (int[]){1}, (int64_t[]){1},
                  1, 2);
    assert_int_equal(layer_of(p.src, 1), 11);
    assert_int_equal(layer_of(p.src, 0), 5);
    /* layer 13: remainder layer 1 */
    p = pair_of(&f, "decoder/layers_13/attn/q");
    expect_slices(&p, "decoder/layers_remainder/local_layers/attn/q", 1, (int[]){1},
                  (int64_t[]){1}, 1, 2);
    assert_int_equal(layer_of(p.src, 1), 13);
    stop(&f);
}

/* gemma4: a global layer written with the local head dim has no source */
static void test_verify_family__gemma4_wrong_head_dim_unmatched(void **state)
{
    static fixture f;
    vpair p;
    char name[96];
    (void)state;
    memset(&f, 0, sizeof f);
    add(&f.in, "params/params/decoder/scanned_blocks/local_layers/attn/q", "8,1,5,4,16");
    add(&f.in, "params/params/decoder/scanned_blocks/global_layer/attn/q", "8,1,4,32");
    for (int g = 0; g < 6; g++) {
        snprintf(name, sizeof name, "params/params/decoder/layers_%d/attn/q", g);
        add(&f.out, name, "8,4,16");
    }
    start(&f);
    p = pair_of(&f, "decoder/layers_4/attn/q");
    assert_int_equal(p.kind, VPAIR_SLICES);
    p = pair_of(&f, "decoder/layers_5/attn/q");
    assert_int_equal(p.kind, VPAIR_NONE);
    stop(&f);
}

/* qwen3-next, K = 4, 10 layers: 2 blocks of (3 linear-attention + 1 full-attention) in
 * decoder/layers, then 2 remainder layers; modules only the local or only the global layer has */
static void test_verify_family__qwen3_next_nested_remainder(void **state)
{
    static fixture f;
    vpair p;
    char name[96];
    (void)state;
    memset(&f, 0, sizeof f);
    add(&f.in, "params/params/decoder/layers/local_layers/attn/w", "8,2,3,8");
    add(&f.in, "params/params/decoder/layers/local_layers/linear/a", "8,2,3,8");
    add(&f.in, "params/params/decoder/layers/global_layer/attn/w", "8,2,8");
    add(&f.in, "params/params/decoder/layers/global_layer/full/q", "8,2,8");
    add(&f.in, "params/params/decoder/layers_remainder/local_layers/attn/w", "8,2,8");
    add(&f.in, "params/params/decoder/layers_remainder/local_layers/linear/a", "8,2,8");
    for (int g = 0; g < 10; g++) {
        int global = g < 8 && g % 4 == 3;
        snprintf(name, sizeof name, "params/params/decoder/layers_%d/attn/w", g);
        add(&f.out, name, "8,8");
        snprintf(name, sizeof name, "params/params/decoder/layers_%d/%s", g,
                 global ? "full/q" : "linear/a");
        add(&f.out, name, "8,8");
    }
    start(&f);
    /* a module only the global layer has: block 0's global layer is layer 3 */
    p = pair_of(&f, "decoder/layers_3/full/q");
    expect_slices(&p, "decoder/layers/global_layer/full/q", 1, (int[]){1}, (int64_t[]){0}, 0, 2);
    assert_int_equal(layer_of(p.src, 1), 7);
    /* a module only the local layers have: layer 6 = block 1, local 2 */
    p = pair_of(&f, "decoder/layers_6/linear/a");
    expect_slices(&p, "decoder/layers/local_layers/linear/a", 2, (int[]){1, 2}, (int64_t[]){1, 2},
                  5, 6);
    assert_int_equal(layer_of(p.src, 5), 6);
    p = pair_of(&f, "decoder/layers_7/attn/w");
    expect_slices(&p, "decoder/layers/global_layer/attn/w", 1, (int[]){1}, (int64_t[]){1}, 1, 2);
    /* the remainder: layers 8 and 9 */
    p = pair_of(&f, "decoder/layers_9/linear/a");
    expect_slices(&p, "decoder/layers_remainder/local_layers/linear/a", 1, (int[]){1},
                  (int64_t[]){1}, 1, 2);
    assert_int_equal(layer_of(p.src, 1), 9);
    p = pair_of(&f, "decoder/layers_8/attn/w");
    expect_slices(&p, "decoder/layers_remainder/local_layers/attn/w", 1, (int[]){1},
                  (int64_t[]){0}, 0, 2);
    stop(&f);
}

/* pipeline: [repeats 2, stages 3, ...] stacks for layers 0..5, then layers_outside_pipeline */
static void test_verify_family__pipeline_repeats_and_outside(void **state)
{
    static fixture f;
    vpair p;
    char name[96];
    (void)state;
    memset(&f, 0, sizeof f);
    add(&f.in, "params/params/decoder/pipeline_module/layers/mlp/k", "2,3,8,16");
    add(&f.in, "params/params/decoder/layers_outside_pipeline/mlp/k", "8,2,16");
    for (int g = 0; g < 8; g++) {
        snprintf(name, sizeof name, "params/params/decoder/layers_%d/mlp/k", g);
        add(&f.out, name, "8,16");
    }
    start(&f);
    /* layer 4 = repeat 1, stage 1 */
    p = pair_of(&f, "decoder/layers_4/mlp/k");
    expect_slices(&p, "decoder/pipeline_module/layers/mlp/k", 2, (int[]){0, 1}, (int64_t[]){1, 1},
                  4, 6);
    /* layer 7 = outside layer 1 */
    p = pair_of(&f, "decoder/layers_7/mlp/k");
    expect_slices(&p, "decoder/layers_outside_pipeline/mlp/k", 1, (int[]){1}, (int64_t[]){1}, 1,
                  2);
    assert_int_equal(layer_of(p.src, 1), 7);
    stop(&f);
}

/* DeepSeek pipelined: dense_layers (a plain group, whatever the stack holds under the same
 * name), moe_layers_outside_pipeline for MoE layers 0..1, then the [stages 2, ...] stack for
 * MoE layers 2..3 */
static void test_verify_family__pipeline_deepseek(void **state)
{
    static fixture f;
    vpair p;
    char name[96];
    (void)state;
    memset(&f, 0, sizeof f);
    add(&f.in, "params/params/decoder/dense_layers/mlp/k", "8,1,16");
    add(&f.in, "params/params/decoder/moe_layers_outside_pipeline/mlp/k", "8,2,16");
    add(&f.in, "params/params/decoder/pipeline_module/layers/mlp/k", "2,8,16");
    add(&f.out, "params/params/decoder/dense_layers_0/mlp/k", "8,16");
    for (int g = 0; g < 4; g++) {
        snprintf(name, sizeof name, "params/params/decoder/moe_layers_%d/mlp/k", g);
        add(&f.out, name, "8,16");
    }
    start(&f);
    p = pair_of(&f, "decoder/dense_layers_0/mlp/k");
    assert_int_equal(p.kind, VPAIR_LAYER);
    expect_src(&p, "decoder/dense_layers/mlp/k");
    /* MoE layer 1 = outside layer 1 (outside layers run first) */
    p = pair_of(&f, "decoder/moe_layers_1/mlp/k");
    expect_slices(&p, "decoder/moe_layers_outside_pipeline/mlp/k", 1, (int[]){1}, (int64_t[]){1},
                  1, 2);
    assert_int_equal(layer_of(p.src, 1), 1);
    assert_string_equal(p.src->pname, "moe_layers");
    /* MoE layer 3 = stage 1 of the stack, the stack's layers from output index 2 */
    p = pair_of(&f, "decoder/moe_layers_3/mlp/k");
    expect_slices(&p, "decoder/pipeline_module/layers/mlp/k", 1, (int[]){0}, (int64_t[]){1}, 1, 2);
    assert_int_equal(layer_of(p.src, 1), 3);
    assert_string_equal(p.src->pname, "moe_layers");
    stop(&f);
}

/* pipeline with scan_layers_per_stage: [stages 3, ..., layers_per_stage 2 at param_scan_axis] */
static void test_verify_family__pipeline_scanned_stage(void **state)
{
    static fixture f;
    vpair p;
    char name[96];
    (void)state;
    memset(&f, 0, sizeof f);
    add(&f.in, "params/params/decoder/pipeline_module/layers/scanned_layers/mlp/k", "3,8,2,16");
    for (int g = 0; g < 6; g++) {
        snprintf(name, sizeof name, "params/params/decoder/layers_%d/mlp/k", g);
        add(&f.out, name, "8,16");
    }
    start(&f);
    /* layer 3 = stage 1, layer 1 of the stage */
    p = pair_of(&f, "decoder/layers_3/mlp/k");
    expect_slices(&p, "decoder/pipeline_module/layers/scanned_layers/mlp/k", 2, (int[]){0, 2},
                  (int64_t[]){1, 1}, 3, 6);
    stop(&f);
}

/* The report keeps the first issues in output-leaf order whatever order they are found in
 * (a leaf's values are compared on another thread while later leaves are matched): an
 * issue of an earlier leaf found late goes before the later leaves' and pushes the last one
 * out when the report is full. */
/* The MTP layer: the same path (deepseek), or local layer 0 of a scanned MTP block (gemma4),
 * whose global layer is then not carried (not missing); still missing when the output has it. */
static void test_verify_family__mtp_layer(void **state)
{
    static fixture f;
    static const char *const mtp = "params/params/mtp_block/mtp_layer_1/mtp_1_transformer_layer";
    char a[160], b[160];
    vpair p;
    (void)state;
    memset(&f, 0, sizeof f);
    snprintf(a, sizeof a, "%s/local_layers/attn/q", mtp);
    add(&f.in, a, "8,5,4,16");
    snprintf(a, sizeof a, "%s/global_layer/attn/q", mtp);
    add(&f.in, a, "8,4,32");
    add(&f.in, "params/params/mtp_block/mtp_layer_1/mtp_1_final_norm/scale", "8");
    snprintf(b, sizeof b, "%s/attn/q", mtp);
    add(&f.out, b, "8,4,16");
    add(&f.out, "params/params/mtp_block/mtp_layer_1/mtp_1_final_norm/scale", "8");
    start(&f);
    p = pair_of(&f, "mtp_block/mtp_layer_1/mtp_1_transformer_layer/attn/q");
    expect_slices(&p, "mtp_block/mtp_layer_1/mtp_1_transformer_layer/local_layers/attn/q", 1,
                  (int[]){1}, (int64_t[]){0}, 0, 1);
    p = pair_of(&f, "mtp_block/mtp_layer_1/mtp_1_final_norm/scale");
    assert_int_equal(p.kind, VPAIR_LAYER);
    assert_int_equal(ur_verify_family_mtp__not_carried(&f.vf, &f.vf.in.v[1]), 1);
    assert_int_equal(ur_verify_family_mtp__not_carried(&f.vf, &f.vf.in.v[0]), 0);
    assert_int_equal(ur_verify_family_mtp__not_carried(&f.vf, &f.vf.in.v[2]), 0);
    stop(&f);
    /* an output that keeps the scanned block: every leaf by its own path, nothing dropped */
    memset(&f, 0, sizeof f);
    snprintf(a, sizeof a, "%s/global_layer/attn/q", mtp);
    add(&f.in, a, "8,4,32");
    add(&f.out, a, "8,4,32");
    start(&f);
    p = pair_of(&f, "mtp_block/mtp_layer_1/mtp_1_transformer_layer/global_layer/attn/q");
    assert_int_equal(p.kind, VPAIR_LAYER);
    assert_int_equal(ur_verify_family_mtp__not_carried(&f.vf, &f.vf.in.v[0]), 0);
    stop(&f);
    /* a mismatched name (mtp_2_ under mtp_layer_1) is no MTP layer */
    memset(&f, 0, sizeof f);
    add(&f.in, "params/params/mtp_block/mtp_layer_1/mtp_2_transformer_layer/local_layers/q",
        "8,5,4");
    add(&f.out, "params/params/mtp_block/mtp_layer_1/mtp_2_transformer_layer/q", "8,4");
    start(&f);
    p = pair_of(&f, "mtp_block/mtp_layer_1/mtp_2_transformer_layer/q");
    assert_int_equal(p.kind, VPAIR_NONE);
    stop(&f);
}

/* DeepSeek Engram: chunks X_<a>_<b> (absolute indices) around unscanned X_engram_<k>; the
 * output's X_<g> counts from the kind's first layer; the Engram weights are not carried. */
static void test_verify_family__deepseek_engram(void **state)
{
    static fixture f;
    vpair p;
    ur_err err;
    (void)state;
    memset(&f, 0, sizeof f);
    add(&f.in, "params/params/decoder/dense_layers_0_0/mlp/wi", "8,1,16");
    add(&f.in, "params/params/decoder/dense_layers_engram_1/mlp/wi", "8,16");
    add(&f.in, "params/params/decoder/dense_layers_engram_1/engram/value_proj/kernel", "32,8");
    add(&f.in, "params/params/decoder/dense_layers_engram_1/engram_layer_norm/scale", "8");
    add(&f.in, "params/params/decoder/dense_layers_2_2/mlp/wi", "8,1,16");
    add(&f.in, "params/params/decoder/moe_layers_engram_3/attn/q", "8,4");
    add(&f.in, "params/params/decoder/moe_layers_engram_3/engram/short_conv/conv/kernel",
        "4,1,16");
    add(&f.in, "params/params/decoder/moe_layers_4_5/attn/q", "8,2,4");
    for (int i = 0; i < 3; i++) {
        char name[96];
        snprintf(name, sizeof name, "params/params/decoder/dense_layers_%d/mlp/wi", i);
        add(&f.out, name, "8,16");
        snprintf(name, sizeof name, "params/params/decoder/moe_layers_%d/attn/q", i);
        add(&f.out, name, "8,4");
    }
    start(&f);
    p = pair_of(&f, "decoder/dense_layers_0/mlp/wi");
    expect_slices(&p, "decoder/dense_layers_0_0/mlp/wi", 1, (int[]){1}, (int64_t[]){0}, 0, 1);
    p = pair_of(&f, "decoder/dense_layers_1/mlp/wi");
    assert_int_equal(p.kind, VPAIR_LAYER);
    assert_int_equal(p.tbl, -1);
    expect_src(&p, "decoder/dense_layers_engram_1/mlp/wi");
    p = pair_of(&f, "decoder/dense_layers_2/mlp/wi");
    expect_slices(&p, "decoder/dense_layers_2_2/mlp/wi", 1, (int[]){1}, (int64_t[]){0}, 0, 1);
    /* MoE: layer 3 is moe_layers_0 (the Engram layer), 4 and 5 the chunk's slices 0 and 1 */
    p = pair_of(&f, "decoder/moe_layers_0/attn/q");
    assert_int_equal(p.kind, VPAIR_LAYER);
    expect_src(&p, "decoder/moe_layers_engram_3/attn/q");
    p = pair_of(&f, "decoder/moe_layers_2/attn/q");
    expect_slices(&p, "decoder/moe_layers_4_5/attn/q", 1, (int[]){1}, (int64_t[]){1}, 1, 2);
    assert_int_equal(layer_of(p.src, 0), 1); /* the report names moe_layers_1 for slice 0 */
    /* the Engram weights: not carried; the layers' own weights are */
    assert_int_equal(ur_verify_family_engram__not_carried(&f.vf, &f.vf.in.v[2], &err), 1);
    assert_int_equal(ur_verify_family_engram__not_carried(&f.vf, &f.vf.in.v[3], &err), 1);
    assert_int_equal(ur_verify_family_engram__not_carried(&f.vf, &f.vf.in.v[6], &err), 1);
    assert_int_equal(ur_verify_family_engram__not_carried(&f.vf, &f.vf.in.v[1], &err), 0);
    assert_int_equal(ur_verify_family_engram__not_carried(&f.vf, &f.vf.in.v[5], &err), 0);
    stop(&f);
    /* an output that lacks the Engram layer, or keeps some of its Engram: missing, not
     * passed over */
    memset(&f, 0, sizeof f);
    add(&f.in, "params/params/decoder/dense_layers_engram_0/engram/value_proj/kernel", "32,8");
    add(&f.in, "params/params/decoder/dense_layers_engram_0/mlp/wi", "8,16");
    add(&f.out, "params/params/decoder/dense_layers_1/mlp/wi", "8,16");
    start(&f);
    assert_int_equal(ur_verify_family_engram__not_carried(&f.vf, &f.vf.in.v[0], &err), 0);
    stop(&f);
    memset(&f, 0, sizeof f);
    add(&f.in, "params/params/decoder/dense_layers_engram_0/engram/value_proj/kernel", "32,8");
    add(&f.in, "params/params/decoder/dense_layers_engram_0/engram/value_proj/bias", "8");
    add(&f.out, "params/params/decoder/dense_layers_0/engram/value_proj/bias", "8");
    start(&f);
    assert_int_equal(ur_verify_family_engram__not_carried(&f.vf, &f.vf.in.v[0], &err), 0);
    stop(&f);
    /* a chunk of the wrong length for the output's shape: unmatched */
    memset(&f, 0, sizeof f);
    add(&f.in, "params/params/decoder/moe_layers_4_5/attn/q", "8,3,4");
    add(&f.out, "params/params/decoder/moe_layers_0/attn/q", "8,4");
    start(&f);
    p = pair_of(&f, "decoder/moe_layers_0/attn/q");
    assert_int_equal(p.kind, VPAIR_NONE);
    stop(&f);
}

static void test_verify_family__issues_kept_in_leaf_order(void **state)
{
    static const uint64_t keys[] = {4, 6, 3, 6, 9, 5, 2};
    static const char *const want[] = {"k2", "k3", "k4", "k5"};
    fixture f;
    (void)state;
    memset(&f, 0, sizeof f);
    add(&f.in, "params/params/decoder/w", "4");
    add(&f.out, "params/params/decoder/w", "4");
    start(&f);
    f.opts.max_issues = 4;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        char name[8];
        snprintf(name, sizeof name, "k%u", (unsigned)keys[k]);
        f.vf.issue_key = keys[k];
        ur_verify__issue(&f.vf, UR_VERIFY_EXTRA, name, NULL);
    }
    assert_int_equal(f.rep.n_issues_total, 7);
    assert_int_equal(f.rep.n_issues, 4);
    for (size_t k = 0; k < 4; k++) {
        assert_string_equal(f.rep.issues[k].leaf, want[k]);
    }
    stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verify_family__plain_and_deepseek_groups),
        cmocka_unit_test(test_verify_family__blocks_and_gemma3_remainder),
        cmocka_unit_test(test_verify_family__vision_encoder_whole),
        cmocka_unit_test(test_verify_family__deepseek4_hash_layers),
        cmocka_unit_test(test_verify_family__gemma4_head_dims),
        cmocka_unit_test(test_verify_family__gemma4_wrong_head_dim_unmatched),
        cmocka_unit_test(test_verify_family__qwen3_next_nested_remainder),
        cmocka_unit_test(test_verify_family__pipeline_repeats_and_outside),
        cmocka_unit_test(test_verify_family__pipeline_scanned_stage),
        cmocka_unit_test(test_verify_family__pipeline_deepseek),
        cmocka_unit_test(test_verify_family__mtp_layer),
        cmocka_unit_test(test_verify_family__deepseek_engram),
        cmocka_unit_test(test_verify_family__issues_kept_in_leaf_order),
    };
    return cmocka_run_group_tests_name("verify_family", tests, NULL, NULL);
}
