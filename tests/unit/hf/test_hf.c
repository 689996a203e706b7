/* The Hugging Face export (unroll/hf.h) on a plan made by hand: the llama family's names,
 * shapes and shards, config.json, what it refuses; and its sink fed chunk by chunk, the shards
 * read back and held to the transforms computed element by element. */
#include "ur_test.h"

#include "hf/hf_impl.h"
#include "unroll/config.h"
#include "unroll/fs.h"
#include "unroll/hf.h"
#include "unroll/kvstore.h"
#include "unroll/safetensors.h"

#include <math.h>
#include <unistd.h>

#define E 8
#define H 2
#define KV 1
#define D 4
#define M 6
#define V 10

typedef struct {
    const char *path; /* below params/params/ */
    int rank;
    uint64_t shape[3];
} param;

/* What a Llama-like model has outside its MLP: the top level and layer 0's attention. */
#define LLAMA_TOP                                                                                 \
    {"token_embedder/embedding", 2, {V, E}}, {"decoder/decoder_norm/scale", 1, {E}},              \
        {"decoder/logits_dense/kernel", 2, {E, V}},                                               \
        {"decoder/layers_0/pre_self_attention_layer_norm/scale", 1, {E}},                         \
        {"decoder/layers_0/post_self_attention_layer_norm/scale", 1, {E}},                        \
        {"decoder/layers_0/self_attention/query/kernel", 3, {E, H, D}},                           \
        {"decoder/layers_0/self_attention/key/kernel", 3, {E, KV, D}},                            \
        {"decoder/layers_0/self_attention/value/kernel", 3, {E, KV, D}},                          \
    {                                                                                             \
        "decoder/layers_0/self_attention/out/kernel", 3,                                          \
        {                                                                                         \
            H, D, E                                                                               \
        }                                                                                         \
    }

static const param LLAMA[] = {
    LLAMA_TOP,
    {"decoder/layers_0/mlp/wi_0/kernel", 2, {E, M}},
    {"decoder/layers_0/mlp/wi_1/kernel", 2, {E, M}},
    {"decoder/layers_0/mlp/wo/kernel", 2, {M, E}},
};
#define N_LLAMA (sizeof LLAMA / sizeof LLAMA[0])

/* A plan that copies each parameter to params/params/<path> (float32), and its leaves. */
#define MAX_PARAMS 48
typedef struct {
    ur_plan plan;
    ur_plan_leaf leaves[MAX_PARAMS];
    ur_plan_action actions[MAX_PARAMS];
    ur_plan_path paths[MAX_PARAMS];
    const char *comps[MAX_PARAMS][12];
    char words[MAX_PARAMS][256];
} fake_plan;

static void make_plan(fake_plan *f, const param *ps, size_t n)
{
    memset(f, 0, sizeof *f);
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        snprintf(f->words[i], sizeof f->words[i], "%s", ps[i].path);
        f->comps[i][k++] = "params";
        f->comps[i][k++] = "params";
        for (char *s = strtok(f->words[i], "/"); s != NULL; s = strtok(NULL, "/")) {
            f->comps[i][k++] = s;
        }
        f->paths[i].comp = f->comps[i];
        f->paths[i].len = k;
        f->leaves[i].path = f->comps[i];
        f->leaves[i].path_len = k;
        f->leaves[i].dtype = UR_DT_FLOAT32;
        f->leaves[i].rank = (size_t)ps[i].rank;
        f->leaves[i].shape = ps[i].shape;
        f->actions[i].kind = UR_PLAN_COPY;
        f->actions[i].out_dtype = UR_DT_FLOAT32;
        f->actions[i].n_out = 1;
        f->actions[i].out = &f->paths[i];
    }
    f->plan.n_actions = n;
    f->plan.actions = f->actions;
}

static ur_settings llama_settings(void)
{
    ur_settings s;
    memset(&s, 0, sizeof s);
    s.decoder_block = "llama2";
    s.model_name = "default";
    return s;
}

static void test_hf__llama_plan(void **state)
{
    fake_plan f;
    ur_settings s = llama_settings();
    ur_hf_opts o = {UR_DT_BFLOAT16, 0, 0, NULL};
    ur_hf_plan *p;
    ur_hf_summary sum;
    ur_hf_tensor_info t;
    (void)state;
    make_plan(&f, LLAMA, N_LLAMA);
    assert_int_equal(ur_hf_plan_build(&p, &f.plan, f.leaves, &s, &o, NULL), UR_OK);
    ur_hf_plan_summary(p, &sum);
    assert_string_equal(sum.architecture, "LlamaForCausalLM");
    assert_int_equal(sum.n_tensors, N_LLAMA);
    assert_int_equal(sum.n_shards, 1);
    /* sorted by name: lm_head first; q_proj [H*D, E] from the query with its arithmetic */
    assert_int_equal(ur_hf_plan_tensor(p, 0, &t), 1);
    assert_string_equal(t.name, "lm_head.weight");
    assert_int_equal(t.shape[0], V);
    for (size_t i = 0; ur_hf_plan_tensor(p, i, &t); i++) {
        if (strcmp(t.name, "model.layers.0.self_attn.q_proj.weight") == 0) {
            assert_int_equal(t.rank, 2);
            assert_int_equal(t.shape[0], H * D);
            assert_int_equal(t.shape[1], E);
            assert_string_equal(t.op, "x * sqrt(head_dim)");
            assert_string_equal(t.shard, "model.safetensors");
            assert_int_equal(t.dtype, UR_DT_BFLOAT16);
        }
    }
    assert_int_equal(ur_hf_plan_tensor(p, N_LLAMA, &t), 0);
    ur_hf_plan_free(p);
}

/* Shards cut as MaxText's exporter cuts them: by name, a new one when the next tensor would
 * pass the size; several shards get numbered names and an index. */
static void test_hf__shards_and_meta(void **state)
{
    fake_plan f;
    ur_settings s = llama_settings();
    ur_hf_opts o = {UR_DT_FLOAT32, 4 * E * V, 0, NULL};
    ur_hf_plan *p;
    ur_hf_summary sum;
    ur_hf_tensor_info t;
    char dir[256], *cfg, *idx;
    ur_buf b;
    (void)state;
    make_plan(&f, LLAMA, N_LLAMA);
    assert_int_equal(ur_hf_plan_build(&p, &f.plan, f.leaves, &s, &o, NULL), UR_OK);
    ur_hf_plan_summary(p, &sum);
    assert_true(sum.n_shards > 2);
    assert_int_equal(ur_hf_plan_tensor(p, 0, &t), 1);
    assert_memory_equal(t.shard, "model-00001-of-0000", 19);
    ur_test_scratch_dir(dir, sizeof dir, "hf_meta");
    assert_int_equal(ur_hf_write_meta(p, dir, NULL), UR_OK);
    cfg = ur_path_join(dir, "config.json");
    idx = ur_path_join(dir, "model.safetensors.index.json");
    ur_buf_init(&b, 0);
    assert_int_equal(ur_fs_read_file(&b, cfg, 1 << 20, NULL), UR_OK);
    assert_int_equal(ur_buf_append_byte(&b, '\0', NULL), UR_OK); /* for strstr */
    assert_non_null(strstr((const char *)b.data, "\"num_hidden_layers\": 1,"));
    assert_non_null(strstr((const char *)b.data, "\"hidden_size\": 8,"));
    assert_non_null(strstr((const char *)b.data, "\"rms_norm_eps\": 1e-05,"));
    assert_non_null(strstr((const char *)b.data, "\"rope_theta\": 10000.0,"));
    ur_buf_reset(&b);
    assert_int_equal(ur_fs_read_file(&b, idx, 1 << 20, NULL), UR_OK);
    assert_int_equal(ur_buf_append_byte(&b, '\0', NULL), UR_OK);
    assert_non_null(strstr((const char *)b.data, "\"total_size\": "));
    assert_non_null(strstr((const char *)b.data, "\"lm_head.weight\": \"model-00001-of-"));
    ur_buf_dispose(&b);
    free(cfg);
    free(idx);
    (void)ur_fs_remove_tree(dir, NULL);
    ur_hf_plan_free(p);
}

static int build_err(const param *ps, size_t n, const char *block, ur_dtype dt, ur_err *err)
{
    fake_plan f;
    ur_settings s = llama_settings();
    ur_hf_opts o = {dt, 0, 0, NULL};
    ur_hf_plan *p = NULL;
    int rc;
    s.decoder_block = block;
    make_plan(&f, ps, n);
    rc = ur_hf_plan_build(&p, &f.plan, f.leaves, &s, &o, err);
    ur_hf_plan_free(p);
    return rc;
}

static void test_hf__refusals(void **state)
{
    param extra[N_LLAMA + 1];
    ur_err err;
    (void)state;
    /* a parameter the family has no place for */
    memcpy(extra, LLAMA, sizeof LLAMA);
    extra[N_LLAMA] = (param){"decoder/layers_0/mlp/extra/kernel", 2, {E, M}};
    assert_int_equal(build_err(extra, N_LLAMA + 1, "llama2", UR_DT_FLOAT32, &err),
                     UR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "decoder/layers_0/mlp/extra/kernel"));
    /* a tensor the family needs and the checkpoint lacks (wi_1) */
    memcpy(extra, LLAMA, sizeof LLAMA);
    memmove(&extra[10], &extra[11], sizeof extra[0]);
    assert_int_equal(build_err(extra, N_LLAMA - 1, "llama2", UR_DT_FLOAT32, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "wi_1"));
    /* a decoder block without a mapping; a weight dtype the export does not write */
    assert_int_equal(build_err(LLAMA, N_LLAMA, "simple", UR_DT_FLOAT32, &err), UR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "simple"));
    assert_int_equal(build_err(LLAMA, N_LLAMA, "llama2", UR_DT_INT8, &err), UR_EINVAL);
}

/* The sink: every parameter fed in chunks (edge chunks included), the shard read back, each
 * tensor held to its transform computed element by element. */
static void test_hf__sink_places_chunks(void **state)
{
    fake_plan f;
    ur_settings s = llama_settings();
    ur_hf_opts o = {UR_DT_FLOAT32, 0, 0, NULL};
    ur_hf_plan *p;
    ur_sink sink;
    char dir[256];
    float *data[N_LLAMA];
    ur_kvstore *kv;
    ur_st_header h;
    (void)state;
    make_plan(&f, LLAMA, N_LLAMA);
    assert_int_equal(ur_hf_plan_build(&p, &f.plan, f.leaves, &s, &o, NULL), UR_OK);
    ur_test_scratch_dir(dir, sizeof dir, "hf_sink");
    assert_int_equal(ur_hf_sink_open(&sink, p, dir, NULL), UR_OK);
    for (size_t i = 0; i < N_LLAMA; i++) {
        const param *q = &LLAMA[i];
        uint64_t n = 1, chunk[3], grid[3], idx[3] = {0};
        ur_sink_array *a;
        ur_sink_path sp = {f.paths[i].comp, NULL, f.paths[i].len};
        for (int d = 0; d < q->rank; d++) {
            n *= q->shape[d];
            chunk[d] = d == 0 ? 3 : q->shape[d]; /* 3 rows a chunk: edge chunks on axis 0 */
            grid[d] = (q->shape[d] + chunk[d] - 1) / chunk[d];
        }
        data[i] = malloc(n * sizeof(float));
        for (uint64_t e = 0; e < n; e++) {
            data[i][e] = (float)(i * 1000 + e) * 0.25f - 3.0f;
        }
        assert_int_equal(sink.ops->begin_array(sink.self, &sp, UR_DT_FLOAT32, q->rank, q->shape,
                                               chunk, &a, NULL),
                         UR_OK);
        for (idx[0] = 0; idx[0] < grid[0]; idx[0]++) {
            uint64_t row = n / q->shape[0], cn = chunk[0] * row;
            float *raw = calloc(cn, sizeof(float));
            uint64_t rows = q->shape[0] - idx[0] * 3 < 3 ? q->shape[0] - idx[0] * 3 : 3;
            ur_buf out;
            memcpy(raw, data[i] + idx[0] * 3 * row, rows * row * sizeof(float));
            ur_buf_init(&out, 0);
            assert_int_equal(sink.ops->encode_chunk(sink.self, a, idx, raw, &out, NULL), UR_OK);
            assert_int_equal(sink.ops->write_chunk(sink.self, a, idx, out.data, out.len, NULL),
                             UR_OK);
            ur_buf_dispose(&out);
            free(raw);
        }
        assert_int_equal(sink.ops->finish_array(sink.self, a, NULL), UR_OK);
    }
    assert_int_equal(sink.ops->finish(sink.self, NULL), UR_OK);
    assert_int_equal(ur_kvstore_file_open(&kv, dir, 0, NULL), UR_OK);
    assert_int_equal(ur_st_header_read(&h, kv, "model.safetensors", NULL), UR_OK);
    /* q_proj[h*D + d][e] = query[e][h][d] * float32(sqrt(D)) */
    {
        const ur_st_entry *t = ur_st_header_find(&h, "model.layers.0.self_attn.q_proj.weight");
        float got[H * D * E];
        assert_non_null(t);
        assert_int_equal(
            ur_kvstore_read_range(kv, "model.safetensors", t->begin, sizeof got, got, NULL),
            UR_OK);
        for (int hh = 0; hh < H; hh++) {
            for (int d = 0; d < D; d++) {
                for (int e = 0; e < E; e++) {
                    float want = data[5][(e * H + hh) * D + d] * (float)sqrt((double)D);
                    assert_true(got[(hh * D + d) * E + e] == want);
                }
            }
        }
    }
    /* o_proj[e][h*D + d] = out[h][d][e]; down_proj[e][m] = wo[m][e] */
    {
        const ur_st_entry *t = ur_st_header_find(&h, "model.layers.0.self_attn.o_proj.weight");
        float got[E * H * D];
        assert_int_equal(
            ur_kvstore_read_range(kv, "model.safetensors", t->begin, sizeof got, got, NULL),
            UR_OK);
        for (int e = 0; e < E; e++) {
            for (int hd = 0; hd < H * D; hd++) {
                assert_true(got[e * H * D + hd] == data[8][hd * E + e]);
            }
        }
        t = ur_st_header_find(&h, "model.layers.0.mlp.down_proj.weight");
        float w[E * M];
        assert_int_equal(
            ur_kvstore_read_range(kv, "model.safetensors", t->begin, sizeof w, w, NULL), UR_OK);
        for (int e = 0; e < E; e++) {
            for (int m = 0; m < M; m++) {
                assert_true(w[e * M + m] == data[11][m * E + e]);
            }
        }
    }
    ur_st_header_dispose(&h);
    ur_kvstore_close(kv);
    assert_int_equal(ur_hf_write_meta(p, dir, NULL), UR_OK);
    assert_int_equal(ur_hf_check_folder(dir, NULL), UR_OK);
    for (size_t i = 0; i < N_LLAMA; i++) {
        free(data[i]);
    }
    (void)ur_fs_remove_tree(dir, NULL);
    ur_hf_plan_free(p);
}

/* A tensor not written whole fails the finish; a folder without its config or with a shard cut
 * short fails the check that comes before publication. */
static void test_hf__incomplete(void **state)
{
    fake_plan f;
    ur_settings s = llama_settings();
    ur_hf_opts o = {UR_DT_FLOAT32, 0, 0, NULL};
    ur_hf_plan *p;
    ur_sink sink;
    char dir[256], *shard;
    ur_err err;
    (void)state;
    make_plan(&f, LLAMA, N_LLAMA);
    assert_int_equal(ur_hf_plan_build(&p, &f.plan, f.leaves, &s, &o, NULL), UR_OK);
    ur_test_scratch_dir(dir, sizeof dir, "hf_incomplete");
    assert_int_equal(ur_hf_sink_open(&sink, p, dir, NULL), UR_OK);
    assert_int_equal(sink.ops->finish(sink.self, &err), UR_EINTERNAL);
    assert_non_null(strstr(err.msg, "lm_head.weight"));
    assert_int_equal(ur_hf_check_folder(dir, &err), UR_EIO); /* no config.json */
    assert_int_equal(ur_hf_write_meta(p, dir, NULL), UR_OK);
    assert_int_equal(ur_hf_check_folder(dir, NULL), UR_OK);
    shard = ur_path_join(dir, "model.safetensors");
    assert_int_equal(truncate(shard, 100), 0);
    assert_int_equal(ur_hf_check_folder(dir, &err), UR_EIO);
    assert_non_null(strstr(err.msg, "model.safetensors"));
    free(shard);
    (void)ur_fs_remove_tree(dir, NULL);
    ur_hf_plan_free(p);
}

/* config.json as json.dumps(indent=2, sort_keys=True) prints it: keys sorted at every depth,
 * objects nested by path, floats as Python's repr. */
static void test_hf__config_json(void **state)
{
    const char *types[] = {"sliding_attention", "full_attention"};
    const char *want = "{\n"
                       "  \"a\": 1,\n"
                       "  \"layer_types\": [\n"
                       "    \"sliding_attention\",\n"
                       "    \"full_attention\"\n"
                       "  ],\n"
                       "  \"rope_parameters\": {\n"
                       "    \"full_attention\": {\n"
                       "      \"factor\": 8.0,\n"
                       "      \"rope_type\": \"yarn\"\n"
                       "    },\n"
                       "    \"rope_theta\": 500000.0,\n"
                       "    \"sliding_attention\": {\n"
                       "      \"beta_fast\": 32.0,\n"
                       "      \"eps\": 1e-06\n"
                       "    }\n"
                       "  },\n"
                       "  \"sliding_window\": null,\n"
                       "  \"z\": true\n"
                       "}\n";
    hf_json *j;
    ur_buf out;
    (void)state;
    ur_buf_init(&out, 0);
    assert_int_equal(hf_json_new(&j, NULL), UR_OK);
    assert_int_equal(hf_json_bool(j, NULL, "z", 1, NULL), UR_OK);
    assert_int_equal(hf_json_float(j, "rope_parameters/sliding_attention", "eps", 1e-6, NULL),
                     UR_OK);
    assert_int_equal(hf_json_str(j, "rope_parameters/full_attention", "rope_type", "yarn", NULL),
                     UR_OK);
    assert_int_equal(hf_json_float(j, "rope_parameters", "rope_theta", 500000, NULL), UR_OK);
    assert_int_equal(hf_json_float(j, "rope_parameters/full_attention", "factor", 8, NULL), UR_OK);
    assert_int_equal(hf_json_float(j, "rope_parameters/sliding_attention", "beta_fast", 32, NULL),
                     UR_OK);
    assert_int_equal(hf_json_strs(j, NULL, "layer_types", types, 2, NULL), UR_OK);
    assert_int_equal(hf_json_null(j, NULL, "sliding_window", NULL), UR_OK);
    assert_int_equal(hf_json_int(j, NULL, "a", 1, NULL), UR_OK);
    assert_int_equal(hf_json_print(j, &out, NULL), UR_OK);
    assert_int_equal(out.len, strlen(want));
    assert_memory_equal(out.data, want, out.len);
    hf_json_free(j);
    ur_buf_dispose(&out);
}

/* Mixtral: a layer's experts [X, E, M] cut into one tensor per expert, fed in chunks of 3
 * experts and 5 rows (edge chunks on both axes, a chunk spanning experts); each expert's
 * tensor is its slice transposed. A parameter split by experts without an experts' axis is
 * refused. */
#define X 5
static const param MIXTRAL[] = {
    LLAMA_TOP,
    {"decoder/layers_0/MoeBlock_0/gate/kernel", 2, {E, X}},
    {"decoder/layers_0/MoeBlock_0/wi_0", 3, {X, E, M}},
    {"decoder/layers_0/MoeBlock_0/wi_1", 3, {X, E, M}},
    {"decoder/layers_0/MoeBlock_0/wo", 3, {X, M, E}},
};
#define N_MIXTRAL (sizeof MIXTRAL / sizeof MIXTRAL[0])

/* Parameter q (values data) fed to the sink in chunks of 3 on axes 0 and 1. */
/* feed with chunks of `chunk` (NULL: 3 on each of the first two axes, the rest whole) */
static void feed_chunks(ur_sink *sink, const fake_plan *f, size_t i, const param *q,
                        const float *data, const uint64_t *chunk_of)
{
    uint64_t chunk[3], grid[3], idx[3] = {0}, cn = 1, strides[3];
    ur_sink_array *a;
    ur_sink_path sp = {f->paths[i].comp, NULL, f->paths[i].len};
    for (int d = q->rank - 1, st = 1; d >= 0; d--) {
        chunk[d] = chunk_of != NULL ? chunk_of[d] : d < 2 && q->shape[d] > 3 ? 3 : q->shape[d];
        grid[d] = (q->shape[d] + chunk[d] - 1) / chunk[d];
        cn *= chunk[d];
        strides[d] = (uint64_t)st;
        st *= (int)q->shape[d];
    }
    assert_int_equal(
        sink->ops->begin_array(sink->self, &sp, UR_DT_FLOAT32, q->rank, q->shape, chunk, &a, NULL),
        UR_OK);
    for (uint64_t c = 0, n_chunks = q->rank > 1 ? grid[0] * grid[1] : grid[0]; c < n_chunks; c++) {
        float *raw = calloc(cn, sizeof(float));
        ur_buf out;
        idx[0] = q->rank > 1 ? c / grid[1] : c;
        idx[1] = q->rank > 1 ? c % grid[1] : 0;
        /* the chunk, dense in its full chunk shape (zeros past the array's edge) */
        for (uint64_t k = 0; k < cn; k++) {
            uint64_t rem = k, at = 0;
            int inside = 1;
            for (int d = q->rank - 1; d >= 0; d--) {
                uint64_t v = idx[d] * chunk[d] + rem % chunk[d];
                rem /= chunk[d];
                inside &= v < q->shape[d];
                at += v * strides[d];
            }
            raw[k] = inside ? data[at] : 0.0f;
        }
        ur_buf_init(&out, 0);
        assert_int_equal(sink->ops->encode_chunk(sink->self, a, idx, raw, &out, NULL), UR_OK);
        assert_int_equal(sink->ops->write_chunk(sink->self, a, idx, out.data, out.len, NULL),
                         UR_OK);
        ur_buf_dispose(&out);
        free(raw);
    }
    assert_int_equal(sink->ops->finish_array(sink->self, a, NULL), UR_OK);
}

static void feed(ur_sink *sink, const fake_plan *f, size_t i, const param *q, const float *data)
{
    feed_chunks(sink, f, i, q, data, NULL);
}

static void test_hf__experts_split(void **state)
{
    fake_plan f;
    ur_settings s = llama_settings();
    ur_hf_opts o = {UR_DT_FLOAT32, 0, 0, NULL};
    ur_hf_plan *p;
    ur_hf_summary sum;
    ur_hf_tensor_info t;
    ur_sink sink;
    ur_kvstore *kv;
    ur_st_header h;
    ur_err err;
    char dir[256];
    float *data[N_MIXTRAL];
    (void)state;
    s.decoder_block = "mixtral";
    make_plan(&f, MIXTRAL, N_MIXTRAL);
    assert_int_equal(ur_hf_plan_build(&p, &f.plan, f.leaves, &s, &o, NULL), UR_OK);
    ur_hf_plan_summary(p, &sum);
    assert_string_equal(sum.architecture, "MixtralForCausalLM");
    assert_int_equal(sum.n_tensors, N_MIXTRAL - 3 + 3 * X);
    for (size_t i = 0; ur_hf_plan_tensor(p, i, &t); i++) {
        if (strcmp(t.name, "model.layers.0.block_sparse_moe.experts.3.w2.weight") == 0) {
            assert_int_equal(t.expert, 3);
            assert_int_equal(t.rank, 2);
            assert_int_equal(t.shape[0], E);
            assert_int_equal(t.shape[1], M);
            assert_int_equal(t.src_rank, 3);
            assert_int_equal(t.src_rows, M);
        }
    }
    ur_test_scratch_dir(dir, sizeof dir, "hf_experts");
    assert_int_equal(ur_hf_sink_open(&sink, p, dir, NULL), UR_OK);
    for (size_t i = 0; i < N_MIXTRAL; i++) {
        uint64_t n = 1;
        for (int d = 0; d < MIXTRAL[i].rank; d++) {
            n *= MIXTRAL[i].shape[d];
        }
        data[i] = malloc(n * sizeof(float));
        for (uint64_t e = 0; e < n; e++) {
            data[i][e] = (float)(i * 1000 + e) * 0.5f - 7.0f;
        }
        feed(&sink, &f, i, &MIXTRAL[i], data[i]);
    }
    assert_int_equal(sink.ops->finish(sink.self, NULL), UR_OK);
    assert_int_equal(ur_kvstore_file_open(&kv, dir, 0, NULL), UR_OK);
    assert_int_equal(ur_st_header_read(&h, kv, "model.safetensors", NULL), UR_OK);
    for (int x = 0; x < X; x++) {
        char name[128];
        float w1[M * E], w2[E * M];
        const ur_st_entry *t1, *t2;
        snprintf(name, sizeof name, "model.layers.0.block_sparse_moe.experts.%d.w1.weight", x);
        t1 = ur_st_header_find(&h, name);
        snprintf(name, sizeof name, "model.layers.0.block_sparse_moe.experts.%d.w2.weight", x);
        t2 = ur_st_header_find(&h, name);
        assert_non_null(t1);
        assert_non_null(t2);
        assert_int_equal(
            ur_kvstore_read_range(kv, "model.safetensors", t1->begin, sizeof w1, w1, NULL), UR_OK);
        assert_int_equal(
            ur_kvstore_read_range(kv, "model.safetensors", t2->begin, sizeof w2, w2, NULL), UR_OK);
        for (int m = 0; m < M; m++) {
            for (int e = 0; e < E; e++) {
                /* w1[m][e] = wi_0[x][e][m]; w2[e][m] = wo[x][m][e] */
                assert_true(w1[m * E + e] == data[10][(x * E + e) * M + m]);
                assert_true(w2[e * M + m] == data[12][(x * M + m) * E + e]);
            }
        }
    }
    ur_st_header_dispose(&h);
    ur_kvstore_close(kv);
    for (size_t i = 0; i < N_MIXTRAL; i++) {
        free(data[i]);
    }
    (void)ur_fs_remove_tree(dir, NULL);
    ur_hf_plan_free(p);

    /* an expert kernel of rank 1 has no slice to make */
    {
        param bad[N_MIXTRAL];
        memcpy(bad, MIXTRAL, sizeof bad);
        bad[12].rank = 1;
        bad[12].shape[0] = X;
        make_plan(&f, bad, N_MIXTRAL);
        assert_int_equal(ur_hf_plan_build(&p, &f.plan, f.leaves, &s, &o, &err), UR_EINVAL);
        assert_non_null(strstr(err.msg, "MoeBlock_0/wo"));
    }
}

/* DeepSeek: the dense layers (dense_layers_{i}) are Hugging Face's first ones, the MoE layers
 * (moe_layers_{i}, counted from 0) come after them; a dense layer past first_num_dense_layers,
 * a MoE layer's missing tensor and a router bias the settings have but the checkpoint lacks
 * are refused. */
#define DS_ATTN(L)                                                                                \
    {"decoder/" L "/pre_self_attention_layer_norm/scale", 1, {E}},                                \
        {"decoder/" L "/post_self_attention_layer_norm/scale", 1, {E}},                           \
        {"decoder/" L "/self_attention/wq_a/kernel", 2, {E, 4}},                                  \
        {"decoder/" L "/self_attention/q_norm/scale", 1, {4}},                                    \
        {"decoder/" L "/self_attention/wq_b/kernel", 3, {4, H, 6}},                               \
        {"decoder/" L "/self_attention/wkv_a/kernel", 2, {E, 6}},                                 \
        {"decoder/" L "/self_attention/kv_norm/scale", 1, {4}},                                   \
        {"decoder/" L "/self_attention/wkv_b/kernel", 3, {4, H, 8}},                              \
    {                                                                                             \
        "decoder/" L "/self_attention/out/kernel", 3,                                             \
        {                                                                                         \
            H, 4, E                                                                               \
        }                                                                                         \
    }
#define DS_MOE(L)                                                                                 \
    {"decoder/" L "/DeepSeekMoeBlock_0/shared_experts/wi_0/kernel", 2, {E, M}},                   \
        {"decoder/" L "/DeepSeekMoeBlock_0/shared_experts/wi_1/kernel", 2, {E, M}},               \
        {"decoder/" L "/DeepSeekMoeBlock_0/shared_experts/wo/kernel", 2, {M, E}},                 \
        {"decoder/" L "/DeepSeekMoeBlock_0/MoeBlock_0/gate/kernel", 2, {E, X}},                   \
        {"decoder/" L "/DeepSeekMoeBlock_0/MoeBlock_0/wi_0", 3, {X, E, M}},                       \
        {"decoder/" L "/DeepSeekMoeBlock_0/MoeBlock_0/wi_1", 3, {X, E, M}},                       \
    {                                                                                             \
        "decoder/" L "/DeepSeekMoeBlock_0/MoeBlock_0/wo", 3,                                      \
        {                                                                                         \
            X, M, E                                                                               \
        }                                                                                         \
    }
static const param DEEPSEEK[] = {
    {"token_embedder/embedding", 2, {V, E}},
    {"decoder/decoder_norm/scale", 1, {E}},
    {"decoder/logits_dense/kernel", 2, {E, V}},
    DS_ATTN("dense_layers_0"),
    {"decoder/dense_layers_0/mlp/wi_0/kernel", 2, {E, M}},
    {"decoder/dense_layers_0/mlp/wi_1/kernel", 2, {E, M}},
    {"decoder/dense_layers_0/mlp/wo/kernel", 2, {M, E}},
    DS_ATTN("moe_layers_0"),
    DS_MOE("moe_layers_0"),
    DS_ATTN("dense_layers_1"), /* the last 9: a second dense layer */
};
#define N_DEEPSEEK (sizeof DEEPSEEK / sizeof DEEPSEEK[0])

/* A configuration loaded from `text`, written to dir/name. */
static ur_config *yml_config(const char *dir, const char *name, const char *text)
{
    char yml[300];
    FILE *f;
    ur_config *cfg = NULL;
    ur_config_opts o;
    snprintf(yml, sizeof yml, "%s/%s", dir, name);
    f = fopen(yml, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    memset(&o, 0, sizeof o);
    o.config_path = yml;
    o.cwd = "/tmp";
    o.now = 1700000000;
    assert_int_equal(ur_config_load(&cfg, &o, NULL), UR_OK);
    return cfg;
}

static ur_config *deepseek_config(const char *dir, const char *extra)
{
    char text[512];
    snprintf(text, sizeof text,
             "decoder_block: deepseek\nmodel_name: default\nfirst_num_dense_layers: 1\n"
             "base_num_decoder_layers: 2\nrouted_score_func: sigmoid\nq_lora_rank: 4\n"
             "qk_rope_head_dim: 2\nv_head_dim: 4\nrouted_bias: %s\n",
             extra);
    return yml_config(dir, "deepseek.yml", text);
}

static void test_hf__deepseek_layers(void **state)
{
    fake_plan *f = calloc(1, sizeof *f);
    ur_hf_opts o = {UR_DT_FLOAT32, 0, 0, NULL};
    ur_hf_plan *p;
    ur_hf_tensor_info t;
    ur_err err;
    char dir[256];
    int seen = 0;
    ur_config *cfg;
    ur_settings ds;
    (void)state;
    assert_true(N_DEEPSEEK <= 48);
    ur_test_scratch_dir(dir, sizeof dir, "hf_deepseek");
    cfg = deepseek_config(dir, "false");
    make_plan(f, DEEPSEEK, N_DEEPSEEK - 9);
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, ur_config_settings(cfg), &o, NULL),
                     UR_OK);
    for (size_t i = 0; ur_hf_plan_tensor(p, i, &t); i++) {
        if (strcmp(t.name, "model.layers.0.mlp.gate_proj.weight") == 0) {
            assert_string_equal(t.source, "decoder/dense_layers_0/mlp/wi_0/kernel");
            seen |= 1;
        } else if (strcmp(t.name, "model.layers.1.self_attn.q_b_proj.weight") == 0) {
            assert_string_equal(t.source, "decoder/moe_layers_0/self_attention/wq_b/kernel");
            assert_int_equal(t.shape[0], H * 6);
            seen |= 2;
        } else if (strcmp(t.name, "model.layers.1.mlp.experts.4.down_proj.weight") == 0) {
            assert_int_equal(t.expert, 4);
            seen |= 4;
        }
    }
    assert_int_equal(seen, 7);
    ur_hf_plan_free(p);
    /* a second dense layer where the config says one */
    make_plan(f, DEEPSEEK, N_DEEPSEEK);
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, ur_config_settings(cfg), &o, &err),
                     UR_EINVAL);
    assert_non_null(strstr(err.msg, "dense_layers_1"));
    /* the MoE layer without its output projection */
    make_plan(f, DEEPSEEK, N_DEEPSEEK - 9);
    for (size_t i = 0; i < f->plan.n_actions; i++) {
        if (strcmp(DEEPSEEK[i].path, "decoder/moe_layers_0/self_attention/out/kernel") == 0) {
            f->actions[i].kind = UR_PLAN_DROP;
        }
    }
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, ur_config_settings(cfg), &o, &err),
                     UR_EINVAL);
    assert_non_null(strstr(err.msg, "decoder/moe_layers_0/self_attention/out/kernel"));
    assert_non_null(strstr(err.msg, "model.layers.1.self_attn.o_proj.weight"));
    ur_config_free(cfg);
    /* routed_bias without the bias; and a bias MaxText ignores for a model not routed by
     * V3's rule (model_name default) */
    cfg = deepseek_config(dir, "true");
    ds = *ur_config_settings(cfg);
    ds.model_name = "deepseek3-tiny";
    make_plan(f, DEEPSEEK, N_DEEPSEEK - 9);
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, &ds, &o, &err), UR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "routed_bias but no router bias among the parameters"));
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, ur_config_settings(cfg), &o, &err),
                     UR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "MaxText ignores for this model_name"));
    ur_config_free(cfg);
    /* V3.2 (use_indexer): DeepseekV32ForCausalLM, whose indexer the checkpoint must have */
    cfg = deepseek_config(dir, "false\nuse_indexer: true");
    make_plan(f, DEEPSEEK, N_DEEPSEEK - 9);
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, ur_config_settings(cfg), &o, &err),
                     UR_EINVAL);
    assert_non_null(strstr(err.msg, "(deepseek_v32)"));
    assert_non_null(strstr(err.msg, "self_attention/indexer/"));
    ur_config_free(cfg);
    (void)ur_fs_remove_tree(dir, NULL);
    free(f);
}

/* gpt-oss: the gate and up kernels (and biases) interleaved into one tensor, fed in chunks
 * of their own in any order: gate_up_proj[x][e][2m] is wi_0[x][e][m], [2m + 1] wi_1's; the
 * folder lists the tensor once; without its odd part the tensor is refused, naming it; and a
 * model without attention sinks is refused. */
#define GPT_OSS(L)                                                                                \
    {"decoder/" L "/pre_self_attention_layer_norm/scale", 1, {E}},                                \
        {"decoder/" L "/post_self_attention_layer_norm/scale", 1, {E}},                           \
        {"decoder/" L "/GptOssAttention/query/kernel", 3, {E, H, D}},                             \
        {"decoder/" L "/GptOssAttention/key/kernel", 3, {E, KV, D}},                              \
        {"decoder/" L "/GptOssAttention/value/kernel", 3, {E, KV, D}},                            \
        {"decoder/" L "/GptOssAttention/out/kernel", 3, {H, D, E}},                               \
        {"decoder/" L "/GptOssAttention/query/bias", 2, {H, D}},                                  \
        {"decoder/" L "/GptOssAttention/key/bias", 2, {KV, D}},                                   \
        {"decoder/" L "/GptOssAttention/value/bias", 2, {KV, D}},                                 \
        {"decoder/" L "/GptOssAttention/out/bias", 1, {E}},                                       \
        {"decoder/" L "/GptOssAttention/sinks", 1, {H}},                                          \
        {"decoder/" L "/GptOssMlp/gate/kernel", 2, {E, X}},                                       \
        {"decoder/" L "/GptOssMlp/gate/bias", 1, {X}},                                            \
        {"decoder/" L "/GptOssMlp/wo", 3, {X, M, E}},                                             \
        {"decoder/" L "/GptOssMlp/wo_bias", 2, {X, E}},                                           \
        {"decoder/" L "/GptOssMlp/wi_0", 3, {X, E, M}},                                           \
        {"decoder/" L "/GptOssMlp/wi_0_bias", 2, {X, M}},                                         \
        {"decoder/" L "/GptOssMlp/wi_1_bias", 2, {X, M}},                                         \
    {                                                                                             \
        "decoder/" L "/GptOssMlp/wi_1", 3,                                                        \
        {                                                                                         \
            X, E, M                                                                               \
        }                                                                                         \
    }
static const param GPT_OSS_PARAMS[] = {
    {"token_embedder/embedding", 2, {V, E}},
    {"decoder/decoder_norm/scale", 1, {E}},
    {"decoder/logits_dense/kernel", 2, {E, V}},
    GPT_OSS("layers_0"),
    GPT_OSS("layers_1"),
};
#define N_GPT_OSS (sizeof GPT_OSS_PARAMS / sizeof GPT_OSS_PARAMS[0])

static ur_config *gpt_oss_config(const char *dir, const char *sink)
{
    char text[512];
    snprintf(text, sizeof text,
             "decoder_block: gpt_oss\nmodel_name: default\nbase_num_decoder_layers: 2\n"
             "inhomogeneous_layer_cycle_interval: 2\nrope_type: yarn\n"
             "mlp_activations_limit: 7.0\nattention_sink: %s\n",
             sink);
    return yml_config(dir, "gpt_oss.yml", text);
}

static void test_hf__gpt_oss_interleaved(void **state)
{
    fake_plan *f = calloc(1, sizeof *f);
    ur_hf_opts o = {UR_DT_FLOAT32, 0, 0, NULL};
    ur_hf_plan *p;
    ur_hf_summary sum;
    ur_hf_tensor_info t;
    ur_sink sink;
    ur_kvstore *kv;
    ur_st_header h;
    ur_err err;
    char dir[256];
    float *data[N_GPT_OSS];
    size_t parts = 0;
    ur_config *cfg;
    (void)state;
    assert_true(N_GPT_OSS <= MAX_PARAMS);
    ur_test_scratch_dir(dir, sizeof dir, "hf_gpt_oss");
    cfg = gpt_oss_config(dir, "true");
    make_plan(f, GPT_OSS_PARAMS, N_GPT_OSS);
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, ur_config_settings(cfg), &o, NULL),
                     UR_OK);
    ur_hf_plan_summary(p, &sum);
    assert_string_equal(sum.architecture, "GptOssForCausalLM");
    assert_int_equal(sum.n_tensors, N_GPT_OSS - 4); /* two pairs a layer made one */
    for (size_t i = 0; ur_hf_plan_tensor(p, i, &t); i++) {
        if (strcmp(t.name, "model.layers.1.mlp.experts.gate_up_proj") == 0) {
            assert_int_equal(t.parts, 2);
            assert_string_equal(t.source, t.part ? "decoder/layers_1/GptOssMlp/wi_1"
                                                 : "decoder/layers_1/GptOssMlp/wi_0");
            assert_int_equal(t.rank, 3);
            assert_int_equal(t.shape[2], 2 * M);
            parts |= 1u << t.part;
        }
    }
    assert_int_equal(parts, 3);
    assert_int_equal(ur_hf_sink_open(&sink, p, dir, NULL), UR_OK);
    /* the odd parts first, then the rest: the order chunks come in does not matter */
    for (size_t k = 0; k < 2 * N_GPT_OSS; k++) {
        size_t i = k % N_GPT_OSS;
        int odd = strstr(GPT_OSS_PARAMS[i].path, "wi_1") != NULL;
        uint64_t n = 1;
        if ((k < N_GPT_OSS) != odd) {
            continue;
        }
        for (int d = 0; d < GPT_OSS_PARAMS[i].rank; d++) {
            n *= GPT_OSS_PARAMS[i].shape[d];
        }
        data[i] = malloc(n * sizeof(float));
        for (uint64_t e = 0; e < n; e++) {
            data[i][e] = (float)(i * 1000 + e) * 0.25f + 1.0f;
        }
        feed(&sink, f, i, &GPT_OSS_PARAMS[i], data[i]);
    }
    assert_int_equal(sink.ops->finish(sink.self, NULL), UR_OK);
    assert_int_equal(ur_hf_write_meta(p, dir, NULL), UR_OK);
    assert_int_equal(ur_hf_check_folder(dir, NULL), UR_OK);
    assert_int_equal(ur_kvstore_file_open(&kv, dir, 0, NULL), UR_OK);
    assert_int_equal(ur_st_header_read(&h, kv, "model.safetensors", NULL), UR_OK);
    assert_int_equal(h.n, N_GPT_OSS - 4);
    {
        size_t w0 = 3 + 19 + 15, w1 = 3 + 19 + 18, b0 = 3 + 19 + 16, b1 = 3 + 19 + 17;
        float gu[X * E * 2 * M], gub[X * 2 * M];
        const ur_st_entry *tw = ur_st_header_find(&h, "model.layers.1.mlp.experts.gate_up_proj");
        const ur_st_entry *tb = ur_st_header_find(&h,
                                                  "model.layers.1.mlp.experts.gate_up_proj_bias");
        assert_string_equal(GPT_OSS_PARAMS[w0].path, "decoder/layers_1/GptOssMlp/wi_0");
        assert_string_equal(GPT_OSS_PARAMS[w1].path, "decoder/layers_1/GptOssMlp/wi_1");
        assert_string_equal(GPT_OSS_PARAMS[b0].path, "decoder/layers_1/GptOssMlp/wi_0_bias");
        assert_string_equal(GPT_OSS_PARAMS[b1].path, "decoder/layers_1/GptOssMlp/wi_1_bias");
        assert_non_null(tw);
        assert_non_null(tb);
        assert_int_equal(tw->end - tw->begin, sizeof gu);
        assert_int_equal(
            ur_kvstore_read_range(kv, "model.safetensors", tw->begin, sizeof gu, gu, NULL), UR_OK);
        assert_int_equal(
            ur_kvstore_read_range(kv, "model.safetensors", tb->begin, sizeof gub, gub, NULL),
            UR_OK);
        for (int x = 0; x < X; x++) {
            for (int m = 0; m < M; m++) {
                assert_true(gub[x * 2 * M + 2 * m] == data[b0][x * M + m]);
                assert_true(gub[x * 2 * M + 2 * m + 1] == data[b1][x * M + m]);
                for (int e = 0; e < E; e++) {
                    assert_true(gu[(x * E + e) * 2 * M + 2 * m] == data[w0][(x * E + e) * M + m]);
                    assert_true(gu[(x * E + e) * 2 * M + 2 * m + 1] ==
                                data[w1][(x * E + e) * M + m]);
                }
            }
        }
    }
    ur_st_header_dispose(&h);
    ur_kvstore_close(kv);
    for (size_t i = 0; i < N_GPT_OSS; i++) {
        free(data[i]);
    }
    ur_hf_plan_free(p);
    /* a fused tensor without its up projection */
    make_plan(f, GPT_OSS_PARAMS, N_GPT_OSS);
    for (size_t i = 0; i < f->plan.n_actions; i++) {
        if (strcmp(GPT_OSS_PARAMS[i].path, "decoder/layers_1/GptOssMlp/wi_1") == 0) {
            f->actions[i].kind = UR_PLAN_DROP;
        }
    }
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, ur_config_settings(cfg), &o, &err),
                     UR_EINVAL);
    assert_non_null(strstr(err.msg, "model.layers.1.mlp.experts.gate_up_proj"));
    ur_config_free(cfg);
    /* no sinks: transformers' GptOss always has them */
    cfg = gpt_oss_config(dir, "false");
    make_plan(f, GPT_OSS_PARAMS, N_GPT_OSS);
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, ur_config_settings(cfg), &o, &err),
                     UR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "no attention_sink"));
    ur_config_free(cfg);
    (void)ur_fs_remove_tree(dir, NULL);
    free(f);
}

/* Qwen3-Next: which layers are linear attention and which full comes from the checkpoint
 * (layer_types in config.json), the full layer's sizes from its own kernels (the query's last
 * axis twice the head dim: the output gate), the convolution [kernel, 1, channels] written
 * [channels, 1, kernel]; a layer with neither attention is refused, naming it. */
#define Q3N_MOE(L)                                                                                \
    {"decoder/" L "/input_layernorm/scale", 1, {E}},                                              \
        {"decoder/" L "/post_attention_layernorm/scale", 1, {E}},                                 \
        {"decoder/" L "/mlp/routed_experts/gate/kernel", 2, {E, X}},                              \
        {"decoder/" L "/mlp/routed_experts/wi_0", 3, {X, E, M}},                                  \
        {"decoder/" L "/mlp/routed_experts/wi_1", 3, {X, E, M}},                                  \
        {"decoder/" L "/mlp/routed_experts/wo", 3, {X, M, E}},                                    \
        {"decoder/" L "/mlp/shared_expert/wi_0/kernel", 2, {E, 3}},                               \
        {"decoder/" L "/mlp/shared_expert/wi_1/kernel", 2, {E, 3}},                               \
        {"decoder/" L "/mlp/shared_expert/wo/kernel", 2, {3, E}},                                 \
    {                                                                                             \
        "decoder/" L "/mlp/shared_expert_gate/kernel", 2,                                         \
        {                                                                                         \
            E, 1                                                                                  \
        }                                                                                         \
    }
static const param QWEN3_NEXT[] = {
    {"token_embedder/embedding", 2, {V, E}},
    {"decoder/decoder_norm/scale", 1, {E}},
    {"decoder/logits_dense/kernel", 2, {E, V}},
    Q3N_MOE("layers_0"),
    {"decoder/layers_0/attention/in_proj_qkvz/kernel", 2, {E, 16}},
    {"decoder/layers_0/attention/in_proj_ba/kernel", 2, {E, 4}},
    {"decoder/layers_0/attention/conv1d/kernel", 3, {4, 1, 12}},
    {"decoder/layers_0/attention/A_log", 1, {2}},
    {"decoder/layers_0/attention/dt_bias", 1, {2}},
    {"decoder/layers_0/attention/norm/rms_norm/scale", 1, {2}},
    {"decoder/layers_0/attention/out_proj/kernel", 2, {4, E}},
    Q3N_MOE("layers_1"),
    {"decoder/layers_1/attention/attention/query/kernel", 3, {E, H, 2 * D}},
    {"decoder/layers_1/attention/attention/key/kernel", 3, {E, KV, D}},
    {"decoder/layers_1/attention/attention/value/kernel", 3, {E, KV, D}},
    {"decoder/layers_1/attention/attention/out/kernel", 2, {H * D, E}},
    {"decoder/layers_1/attention/attention/query_norm/scale", 1, {D}},
    {"decoder/layers_1/attention/attention/key_norm/scale", 1, {D}},
};
#define N_QWEN3_NEXT (sizeof QWEN3_NEXT / sizeof QWEN3_NEXT[0])

static void test_hf__qwen3_next_layers(void **state)
{
    fake_plan *f = calloc(1, sizeof *f);
    ur_hf_opts o = {UR_DT_FLOAT32, 0, 0, NULL};
    ur_hf_plan *p;
    ur_hf_tensor_info t;
    ur_config *cfg = NULL;
    ur_err err;
    ur_buf text;
    char dir[256];
    int seen = 0;
    (void)state;
    assert_true(N_QWEN3_NEXT <= MAX_PARAMS);
    ur_test_scratch_dir(dir, sizeof dir, "hf_qwen3_next");
    cfg = yml_config(
        dir, "qwen3_next.yml",
        "decoder_block: qwen3_next\nmodel_name: default\nbase_num_decoder_layers: 2\n"
        "num_experts: 5\nnum_experts_per_tok: 2\nshared_experts: 1\n"
        "norm_topk_prob: true\npartial_rotary_factor: 0.25\nlogits_via_embedding: false\n");
    make_plan(f, QWEN3_NEXT, N_QWEN3_NEXT);
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, ur_config_settings(cfg), &o, NULL),
                     UR_OK);
    for (size_t i = 0; ur_hf_plan_tensor(p, i, &t); i++) {
        if (strcmp(t.name, "model.layers.0.linear_attn.conv1d.weight") == 0) {
            assert_int_equal(t.rank, 3);
            assert_int_equal(t.shape[0], 12);
            assert_int_equal(t.shape[1], 1);
            assert_int_equal(t.shape[2], 4);
            seen |= 1;
        } else if (strcmp(t.name, "model.layers.1.self_attn.q_proj.weight") == 0) {
            assert_int_equal(t.shape[0], H * 2 * D);
            seen |= 2;
        } else if (strcmp(t.name, "model.layers.1.mlp.experts.4.down_proj.weight") == 0) {
            seen |= 4;
        }
    }
    assert_int_equal(seen, 7);
    assert_int_equal(ur_hf_write_meta(p, dir, NULL), UR_OK);
    ur_buf_init(&text, 0);
    {
        char path[300];
        snprintf(path, sizeof path, "%s/config.json", dir);
        assert_int_equal(ur_fs_read_file(&text, path, 1 << 20, NULL), UR_OK);
    }
    assert_int_equal(ur_buf_append(&text, "", 1, NULL), UR_OK);
    assert_non_null(
        strstr((const char *)text.data,
               "\"layer_types\": [\n    \"linear_attention\",\n    \"full_attention\"\n"));
    assert_non_null(strstr((const char *)text.data, "\"head_dim\": 4,"));
    assert_non_null(strstr((const char *)text.data, "\"num_attention_heads\": 2,"));
    assert_non_null(strstr((const char *)text.data, "\"linear_conv_kernel_dim\": 4,"));
    assert_non_null(strstr((const char *)text.data, "\"partial_rotary_factor\": 0.25,"));
    assert_non_null(strstr((const char *)text.data, "\"shared_expert_intermediate_size\": 3,"));
    ur_buf_dispose(&text);
    ur_hf_plan_free(p);
    /* layer 1 without its attention */
    make_plan(f, QWEN3_NEXT, N_QWEN3_NEXT - 6);
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, ur_config_settings(cfg), &o, &err),
                     UR_EINVAL);
    assert_non_null(strstr(err.msg, "decoder/layers_1 has no attention"));
    ur_config_free(cfg);
    (void)ur_fs_remove_tree(dir, NULL);
    free(f);
}

/* Qwen3.5 (Qwen3-Next's parameters): the fused in_proj_qkvz [emb, key_heads * block] cut into
 * in_proj_qkv (every key head's query, then keys, then values, joined along its rows) and
 * in_proj_z, in_proj_ba into in_proj_b and in_proj_a, as MaxText's exporter's hooks compute
 * them (concat_qkvz_and_transpose: the kernel transposed, [heads, block, emb], each piece's
 * range of the block), fed in chunks of one head's block then of the whole kernel; 2 key heads
 * of 1 query/key dim and 3 value dims (2 value heads per key head... here one, of 3), so that
 * the pieces differ in size; a kernel that the gdn sizes do not make is refused. */
static void test_hf__qwen3_5_pieces(void **state)
{
    enum { KH = 2, DK = 1, VD = 3, BLK = 2 * DK + 2 * VD };
    fake_plan *f = calloc(1, sizeof *f);
    ur_hf_opts o = {UR_DT_FLOAT32, 0, 0, NULL};
    ur_hf_plan *p;
    ur_config *cfg;
    ur_sink sink;
    ur_kvstore *kv;
    ur_st_header h;
    ur_err err;
    char dir[256];
    float *data[N_QWEN3_NEXT], qkv[(KH * (2 * DK + VD)) * E], z[KH * VD * E], b[KH * E], a[KH * E];
    const ur_st_entry *t;
    (void)state;
    ur_test_scratch_dir(dir, sizeof dir, "hf_qwen3_5");
    cfg = yml_config(dir, "qwen3_5.yml",
                     "decoder_block: qwen3_5\nmodel_name: default\nbase_num_decoder_layers: 2\n"
                     "num_experts: 5\nnum_experts_per_tok: 2\nshared_experts: 1\n"
                     "norm_topk_prob: true\npartial_rotary_factor: 0.25\n"
                     "logits_via_embedding: false\ngdn_num_key_heads: 2\n"
                     "gdn_num_value_heads: 2\ngdn_key_head_dim: 1\ngdn_value_head_dim: 3\n");
    make_plan(f, QWEN3_NEXT, N_QWEN3_NEXT);
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, ur_config_settings(cfg), &o, NULL),
                     UR_OK);
    assert_int_equal(ur_hf_sink_open(&sink, p, dir, NULL), UR_OK);
    for (size_t i = 0; i < N_QWEN3_NEXT; i++) {
        const uint64_t one_block[2] = {3, BLK}; /* a head's block a chunk */
        uint64_t n = 1;
        for (int d = 0; d < QWEN3_NEXT[i].rank; d++) {
            n *= QWEN3_NEXT[i].shape[d];
        }
        data[i] = malloc(n * sizeof(float));
        for (uint64_t e = 0; e < n; e++) {
            data[i][e] = (float)(i * 1000 + e);
        }
        feed_chunks(&sink, f, i, &QWEN3_NEXT[i], data[i],
                    strstr(QWEN3_NEXT[i].path, "in_proj_qkvz") != NULL ? one_block
                    : QWEN3_NEXT[i].rank == 2                          ? QWEN3_NEXT[i].shape
                                                                       : NULL);
    }
    assert_int_equal(sink.ops->finish(sink.self, NULL), UR_OK);
    assert_int_equal(ur_kvstore_file_open(&kv, dir, 0, NULL), UR_OK);
    assert_int_equal(ur_st_header_read(&h, kv, "model.safetensors", NULL), UR_OK);
    const struct {
        const char *name;
        float *out;
        size_t bytes;
        uint64_t rows;
    } want[] = {
        {"model.language_model.layers.0.linear_attn.in_proj_qkv.weight", qkv, sizeof qkv,
         KH * (2 * DK + VD)},
        {"model.language_model.layers.0.linear_attn.in_proj_z.weight", z, sizeof z, KH * VD},
        {"model.language_model.layers.0.linear_attn.in_proj_b.weight", b, sizeof b, KH},
        {"model.language_model.layers.0.linear_attn.in_proj_a.weight", a, sizeof a, KH},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        t = ur_st_header_find(&h, want[k].name);
        assert_non_null(t);
        assert_int_equal(t->rank, 2);
        assert_int_equal(t->shape[0], want[k].rows);
        assert_int_equal(t->shape[1], E);
        assert_int_equal(ur_kvstore_read_range(kv, "model.safetensors", t->begin, want[k].bytes,
                                               want[k].out, NULL),
                         UR_OK);
    }
    /* the exporter's arithmetic: column c = head * BLK + j of the kernel [E, KH * BLK] */
    const float *qkvz = NULL, *ba = NULL;
    for (size_t i = 0; i < N_QWEN3_NEXT; i++) {
        qkvz = strstr(QWEN3_NEXT[i].path, "in_proj_qkvz") != NULL ? data[i] : qkvz;
        ba = strstr(QWEN3_NEXT[i].path, "in_proj_ba") != NULL ? data[i] : ba;
    }
    assert_non_null(qkvz);
    assert_non_null(ba);
    for (int e = 0; e < E; e++) {
        for (int hd = 0; hd < KH; hd++) {
            assert_true(qkv[(hd * DK) * E + e] == qkvz[e * KH * BLK + hd * BLK]);
            assert_true(qkv[(KH * DK + hd * DK) * E + e] == qkvz[e * KH * BLK + hd * BLK + DK]);
            for (int v = 0; v < VD; v++) {
                assert_true(qkv[(2 * KH * DK + hd * VD + v) * E + e] ==
                            qkvz[e * KH * BLK + hd * BLK + 2 * DK + v]);
                assert_true(z[(hd * VD + v) * E + e] ==
                            qkvz[e * KH * BLK + hd * BLK + 2 * DK + VD + v]);
            }
            assert_true(b[hd * E + e] == ba[e * 2 * KH + hd * 2]);
            assert_true(a[hd * E + e] == ba[e * 2 * KH + hd * 2 + 1]);
        }
    }
    t = ur_st_header_find(&h, "model.language_model.layers.1.mlp.experts.gate_up_proj");
    assert_non_null(t);
    assert_int_equal(t->shape[1], 2 * M);
    ur_st_header_dispose(&h);
    ur_kvstore_close(kv);
    for (size_t i = 0; i < N_QWEN3_NEXT; i++) {
        free(data[i]);
    }
    ur_hf_plan_free(p);
    ur_config_free(cfg);
    /* key heads that do not make the kernel's width */
    cfg = yml_config(dir, "qwen3_5.yml",
                     "decoder_block: qwen3_5\nmodel_name: default\nbase_num_decoder_layers: 2\n"
                     "num_experts: 5\nshared_experts: 1\nnorm_topk_prob: true\n"
                     "gdn_num_key_heads: 2\ngdn_num_value_heads: 2\ngdn_key_head_dim: 2\n"
                     "gdn_value_head_dim: 3\n");
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, ur_config_settings(cfg), &o, &err),
                     UR_EINVAL);
    assert_non_null(strstr(err.msg, "in_proj_qkvz [emb, 16]"));
    ur_config_free(cfg);
    (void)ur_fs_remove_tree(dir, NULL);
    free(f);
}

/* DeepSeek-V4, one hash-routed layer: each hyper-connection's three parts joined as MaxText's
 * exporter joins them (hc_attn_fn: the alphas [k * emb, k], [k * emb, k], [k * emb, k * k]
 * transposed, one under the other; hc_attn_base: the betas end to end, res_beta flattened;
 * hc_attn_scale: the three scales), the pieces fed in chunks of their own; the norm the
 * exporter drops is left out; config.json's layer and MLP types from the layer's parameters. */
#define HC(mod)                                                                                   \
    {"decoder/layers_0/" mod "/pre_alpha", 2, {4 * E, 4}},                                        \
        {"decoder/layers_0/" mod "/post_alpha", 2, {4 * E, 4}},                                   \
        {"decoder/layers_0/" mod "/res_alpha", 2, {4 * E, 16}},                                   \
        {"decoder/layers_0/" mod "/pre_beta", 1, {4}},                                            \
        {"decoder/layers_0/" mod "/post_beta", 1, {4}},                                           \
        {"decoder/layers_0/" mod "/res_beta", 2, {4, 4}},                                         \
        {"decoder/layers_0/" mod "/pre_alpha_scale", 1, {1}},                                     \
        {"decoder/layers_0/" mod "/post_alpha_scale", 1, {1}},                                    \
        {"decoder/layers_0/" mod "/res_alpha_scale", 1, {1}},                                     \
    {                                                                                             \
        "decoder/layers_0/" mod "/mhc_norm/scale", 1,                                             \
        {                                                                                         \
            4 * E                                                                                 \
        }                                                                                         \
    }
static const param DEEPSEEK4[] = {
    {"token_embedder/embedding", 2, {V, E}},
    {"decoder/decoder_norm/scale", 1, {E}},
    {"decoder/logits_dense/kernel", 2, {E, V}},
    {"decoder/hc_head/hc_fn", 2, {4 * E, 4}},
    {"decoder/hc_head/hc_base", 1, {4}},
    {"decoder/hc_head/hc_scale", 1, {1}},
    {"decoder/layers_0/pre_self_attention_layer_norm/scale", 1, {E}},
    {"decoder/layers_0/post_self_attention_layer_norm/scale", 1, {E}},
    HC("mhc_attention"),
    HC("mhc_mlp"),
    {"decoder/layers_0/self_attention/q_norm/scale", 1, {M}},
    {"decoder/layers_0/self_attention/kv_norm/scale", 1, {D}},
    {"decoder/layers_0/self_attention/wq_a/kernel", 2, {E, M}},
    {"decoder/layers_0/self_attention/wq_b/kernel", 3, {M, H, D}},
    {"decoder/layers_0/self_attention/wkv/kernel", 3, {E, 1, D}},
    {"decoder/layers_0/self_attention/sinks", 1, {H}},
    {"decoder/layers_0/self_attention/o_a_proj/kernel", 3, {2, H *D / 2, 3}},
    {"decoder/layers_0/self_attention/o_b_proj/kernel", 2, {6, E}},
    {"decoder/layers_0/mlp/MoeBlock_0/gate/kernel", 2, {E, X}},
    {"decoder/layers_0/mlp/MoeBlock_0/tid2eid", 2, {V, 2}},
    {"decoder/layers_0/mlp/shared_experts/wi_0/kernel", 2, {E, M}},
    {"decoder/layers_0/mlp/shared_experts/wi_1/kernel", 2, {E, M}},
    {"decoder/layers_0/mlp/shared_experts/wo/kernel", 2, {M, E}},
    {"decoder/layers_0/mlp/MoeBlock_0/wi_0", 3, {X, E, M}},
    {"decoder/layers_0/mlp/MoeBlock_0/wi_1", 3, {X, E, M}},
    {"decoder/layers_0/mlp/MoeBlock_0/wo", 3, {X, M, E}},
};
#undef HC
#define N_DEEPSEEK4 (sizeof DEEPSEEK4 / sizeof DEEPSEEK4[0])

/* The index of DEEPSEEK4's parameter whose path ends with `tail`. */
static size_t ds4_param(const char *tail)
{
    for (size_t i = 0; i < N_DEEPSEEK4; i++) {
        size_t n = strlen(DEEPSEEK4[i].path), k = strlen(tail);
        if (n >= k && strcmp(DEEPSEEK4[i].path + n - k, tail) == 0) {
            return i;
        }
    }
    fail_msg("no parameter %s", tail);
    return 0;
}

static void test_hf__deepseek4_hyper_connections(void **state)
{
    fake_plan *f = calloc(1, sizeof *f);
    ur_hf_opts o = {UR_DT_FLOAT32, 0, 0, NULL};
    ur_hf_plan *p;
    ur_config *cfg;
    ur_sink sink;
    ur_kvstore *kv;
    ur_st_header h;
    ur_buf text;
    char dir[256], path[300];
    float *data[N_DEEPSEEK4], fn[24 * 4 * E], base[24], scale[3];
    const ur_st_entry *t;
    (void)state;
    assert_true(N_DEEPSEEK4 <= MAX_PARAMS);
    ur_test_scratch_dir(dir, sizeof dir, "hf_deepseek4");
    cfg = yml_config(dir, "deepseek4.yml",
                     "decoder_block: deepseek4\nmodel_name: default\nbase_num_decoder_layers: 1\n"
                     "num_experts: 5\nnum_experts_per_tok: 2\nshared_experts: 1\n"
                     "routed_score_func: sqrtsoftplus\nlogits_via_embedding: false\n"
                     "first_num_hash_layers: 1\n");
    make_plan(f, DEEPSEEK4, N_DEEPSEEK4);
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, ur_config_settings(cfg), &o, NULL),
                     UR_OK);
    assert_int_equal(ur_hf_sink_open(&sink, p, dir, NULL), UR_OK);
    for (size_t i = N_DEEPSEEK4; i-- > 0;) { /* the last pieces first */
        uint64_t n = 1;
        for (int d = 0; d < DEEPSEEK4[i].rank; d++) {
            n *= DEEPSEEK4[i].shape[d];
        }
        data[i] = malloc(n * sizeof(float));
        for (uint64_t e = 0; e < n; e++) {
            data[i][e] = (float)(i * 1000 + e);
        }
        feed(&sink, f, i, &DEEPSEEK4[i], data[i]);
    }
    assert_int_equal(sink.ops->finish(sink.self, NULL), UR_OK);
    assert_int_equal(ur_hf_write_meta(p, dir, NULL), UR_OK);
    assert_int_equal(ur_kvstore_file_open(&kv, dir, 0, NULL), UR_OK);
    assert_int_equal(ur_st_header_read(&h, kv, "model.safetensors", NULL), UR_OK);
    t = ur_st_header_find(&h, "layers.0.hc_attn_fn");
    assert_non_null(t);
    assert_int_equal(t->shape[0], 24);
    assert_int_equal(t->shape[1], 4 * E);
    assert_int_equal(ur_kvstore_read_range(kv, "model.safetensors", t->begin, sizeof fn, fn, NULL),
                     UR_OK);
    {
        const float *pre = data[ds4_param("mhc_attention/pre_alpha")],
                    *post = data[ds4_param("mhc_attention/post_alpha")],
                    *res = data[ds4_param("mhc_attention/res_alpha")];
        for (int x = 0; x < 4 * E; x++) {
            for (int k = 0; k < 4; k++) {
                assert_true(fn[k * 4 * E + x] == pre[x * 4 + k]);
                assert_true(fn[(4 + k) * 4 * E + x] == post[x * 4 + k]);
            }
            for (int k = 0; k < 16; k++) {
                assert_true(fn[(8 + k) * 4 * E + x] == res[x * 16 + k]);
            }
        }
    }
    t = ur_st_header_find(&h, "layers.0.hc_ffn_base");
    assert_non_null(t);
    assert_int_equal(t->shape[0], 24);
    assert_int_equal(
        ur_kvstore_read_range(kv, "model.safetensors", t->begin, sizeof base, base, NULL), UR_OK);
    for (int k = 0; k < 24; k++) {
        const char *part = k < 4   ? "mhc_mlp/pre_beta"
                           : k < 8 ? "mhc_mlp/post_beta"
                                   : "mhc_mlp/res_beta";
        assert_true(base[k] == data[ds4_param(part)][k < 4 ? k : k < 8 ? k - 4 : k - 8]);
    }
    t = ur_st_header_find(&h, "layers.0.hc_attn_scale");
    assert_non_null(t);
    assert_int_equal(
        ur_kvstore_read_range(kv, "model.safetensors", t->begin, sizeof scale, scale, NULL),
        UR_OK);
    assert_true(scale[0] == data[ds4_param("mhc_attention/pre_alpha_scale")][0]);
    assert_true(scale[1] == data[ds4_param("mhc_attention/post_alpha_scale")][0]);
    assert_true(scale[2] == data[ds4_param("mhc_attention/res_alpha_scale")][0]);
    t = ur_st_header_find(&h, "layers.0.attn.wo_a.weight"); /* [groups * rank, in] */
    assert_non_null(t);
    assert_int_equal(t->shape[0], 6);
    assert_int_equal(t->shape[1], H * D / 2);
    assert_null(ur_st_header_find(&h, "layers.0.mhc_norm.weight"));
    ur_st_header_dispose(&h);
    ur_kvstore_close(kv);
    ur_buf_init(&text, 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(ur_fs_read_file(&text, path, 1 << 20, NULL), UR_OK);
    assert_int_equal(ur_buf_append(&text, "", 1, NULL), UR_OK);
    assert_non_null(strstr((const char *)text.data, "\"hash_moe\""));
    assert_non_null(strstr((const char *)text.data, "\"sliding_attention\""));
    assert_non_null(strstr((const char *)text.data, "\"hc_mult\": 4,"));
    assert_non_null(strstr((const char *)text.data, "\"o_groups\": 2,"));
    ur_buf_dispose(&text);
    for (size_t i = 0; i < N_DEEPSEEK4; i++) {
        free(data[i]);
    }
    ur_hf_plan_free(p);
    ur_config_free(cfg);
    (void)ur_fs_remove_tree(dir, NULL);
    free(f);
}

/* Llama 4: the routed experts' gate and up kernels concatenated along the columns of one
 * tensor, gate_up_proj[x][e][m] = wi_0[x][e][m] and [M + m] = wi_1's, fed in chunks of their
 * own; a layer with neither its MLP nor its experts is refused, naming it. */
static const param LLAMA4[] = {
    {"token_embedder/embedding", 2, {V, E}},
    {"decoder/decoder_norm/scale", 1, {E}},
    {"decoder/logits_dense/kernel", 2, {E, V}},
    {"decoder/layers_0/pre_self_attention_layer_norm/scale", 1, {E}},
    {"decoder/layers_0/post_self_attention_layer_norm/scale", 1, {E}},
    {"decoder/layers_0/self_attention/query/kernel", 3, {E, H, D}},
    {"decoder/layers_0/self_attention/key/kernel", 3, {E, KV, D}},
    {"decoder/layers_0/self_attention/value/kernel", 3, {E, KV, D}},
    {"decoder/layers_0/self_attention/out/kernel", 3, {H, D, E}},
    {"decoder/layers_0/Llama4MoEBlock_0/MoeBlock_0/gate/kernel", 2, {E, X}},
    {"decoder/layers_0/Llama4MoEBlock_0/MoeBlock_0/wo", 3, {X, M, E}},
    {"decoder/layers_0/Llama4MoEBlock_0/shared_experts/wi_0/kernel", 2, {E, M}},
    {"decoder/layers_0/Llama4MoEBlock_0/shared_experts/wi_1/kernel", 2, {E, M}},
    {"decoder/layers_0/Llama4MoEBlock_0/shared_experts/wo/kernel", 2, {M, E}},
    {"decoder/layers_0/Llama4MoEBlock_0/MoeBlock_0/wi_0", 3, {X, E, M}},
    {"decoder/layers_0/Llama4MoEBlock_0/MoeBlock_0/wi_1", 3, {X, E, M}},
};
#define N_LLAMA4 (sizeof LLAMA4 / sizeof LLAMA4[0])

static void test_hf__llama4_columns(void **state)
{
    fake_plan *f = calloc(1, sizeof *f);
    ur_hf_opts o = {UR_DT_FLOAT32, 0, 0, NULL};
    ur_hf_plan *p;
    ur_config *cfg = NULL;
    ur_sink sink;
    ur_kvstore *kv;
    ur_st_header h;
    ur_err err;
    char dir[256];
    float *data[N_LLAMA4], gu[X * E * 2 * M];
    const ur_st_entry *t;
    (void)state;
    ur_test_scratch_dir(dir, sizeof dir, "hf_llama4");
    cfg = yml_config(dir, "llama4.yml",
                     "decoder_block: llama4\nmodel_name: default\nbase_num_decoder_layers: 1\n"
                     "rope_type: llama3.1\nnum_experts: 5\nshared_experts: 1\n"
                     "logits_via_embedding: false\n");
    make_plan(f, LLAMA4, N_LLAMA4);
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, ur_config_settings(cfg), &o, NULL),
                     UR_OK);
    assert_int_equal(ur_hf_sink_open(&sink, p, dir, NULL), UR_OK);
    for (size_t i = N_LLAMA4; i-- > 0;) { /* wi_1 first */
        uint64_t n = 1;
        for (int d = 0; d < LLAMA4[i].rank; d++) {
            n *= LLAMA4[i].shape[d];
        }
        data[i] = malloc(n * sizeof(float));
        for (uint64_t e = 0; e < n; e++) {
            data[i][e] = (float)(i * 1000 + e) * 0.5f;
        }
        feed(&sink, f, i, &LLAMA4[i], data[i]);
    }
    assert_int_equal(sink.ops->finish(sink.self, NULL), UR_OK);
    assert_int_equal(ur_kvstore_file_open(&kv, dir, 0, NULL), UR_OK);
    assert_int_equal(ur_st_header_read(&h, kv, "model.safetensors", NULL), UR_OK);
    t = ur_st_header_find(&h, "model.layers.0.feed_forward.experts.gate_up_proj");
    assert_non_null(t);
    assert_int_equal(t->rank, 3);
    assert_int_equal(t->shape[2], 2 * M);
    assert_int_equal(ur_kvstore_read_range(kv, "model.safetensors", t->begin, sizeof gu, gu, NULL),
                     UR_OK);
    for (int x = 0; x < X; x++) {
        for (int e = 0; e < E; e++) {
            for (int m = 0; m < M; m++) {
                assert_true(gu[(x * E + e) * 2 * M + m] == data[14][(x * E + e) * M + m]);
                assert_true(gu[(x * E + e) * 2 * M + M + m] == data[15][(x * E + e) * M + m]);
            }
        }
    }
    ur_st_header_dispose(&h);
    ur_kvstore_close(kv);
    for (size_t i = 0; i < N_LLAMA4; i++) {
        free(data[i]);
    }
    ur_hf_plan_free(p);
    /* the layer without its experts (and no MLP) */
    make_plan(f, LLAMA4, 9);
    assert_int_equal(ur_hf_plan_build(&p, &f->plan, f->leaves, ur_config_settings(cfg), &o, &err),
                     UR_EINVAL);
    assert_non_null(strstr(err.msg, "decoder/layers_0 has neither an MLP nor experts"));
    ur_config_free(cfg);
    (void)ur_fs_remove_tree(dir, NULL);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf__llama_plan),
        cmocka_unit_test(test_hf__shards_and_meta),
        cmocka_unit_test(test_hf__refusals),
        cmocka_unit_test(test_hf__sink_places_chunks),
        cmocka_unit_test(test_hf__incomplete),
        cmocka_unit_test(test_hf__config_json),
        cmocka_unit_test(test_hf__experts_split),
        cmocka_unit_test(test_hf__deepseek_layers),
        cmocka_unit_test(test_hf__gpt_oss_interleaved),
        cmocka_unit_test(test_hf__qwen3_next_layers),
        cmocka_unit_test(test_hf__qwen3_5_pieces),
        cmocka_unit_test(test_hf__deepseek4_hyper_connections),
        cmocka_unit_test(test_hf__llama4_columns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
