/* Qwen3-Next and Qwen3.5: MaxText's qwen3_next decoder block (qwen3-next-80b-a3b) as
 * transformers' Qwen3NextForCausalLM, and its qwen3_5 block (qwen3.5-35b-a3b,
 * qwen3.5-397b-a17b: the same layers) as Qwen3_5MoeForConditionalGeneration's language model,
 * as MaxText's exporter maps them (QWEN3_NEXT_ and QWEN3_5_MAXTEXT_TO_HF_PARAM_MAPPING and
 * their hooks). Qwen3.5 differs in the names (model.language_model.), in its fused input
 * projections, which Hugging Face holds as pieces (below), and in its experts, stacked.
 *
 * Blocks of inhomogeneous_layer_cycle_interval layers: linear-attention layers (Gated
 * DeltaNet: the fused qkvz and ba input projections, a depthwise causal convolution, A_log,
 * dt_bias, a gated norm and the output projection), then one full-attention layer whose query
 * kernel also gives the output gate (each head's [query, gate], as transformers splits it) and
 * whose query and key are normed. Every layer has routed experts (each expert's kernels a
 * tensor of their own, as for Qwen3-MoE) and a shared expert with its sigmoid gate. Kernels
 * are transposed to [out, in]; the convolution [kernel, 1, channels] becomes [channels, 1,
 * kernel]; norms are stored as transformers uses them (1 + scale), so they are copied. Which
 * layers are which comes from the checkpoint (config.json's layer_types), so remainder layers
 * past the last block export too. */
#include "hf_impl.h"

#include "unroll/alloc.h"

#include <stdio.h>
#include <string.h>

#define L(mt) "decoder/layers_{i}/" mt
#define H(hf) "model.layers.{i}." hf
#define H35(hf) "model.language_model.layers.{i}." hf

static const hf_rule rules[] = {
    {L("input_layernorm/scale"), H("input_layernorm.weight"), "e -> e", HF_OP_NONE, 0},
    {L("post_attention_layernorm/scale"), H("post_attention_layernorm.weight"), "e -> e",
     HF_OP_NONE, 0},
    /* the linear-attention layers' */
    {L("attention/in_proj_qkvz/kernel"), H("linear_attn.in_proj_qkvz.weight"), "e x -> x e",
     HF_OP_NONE, HF_SOME_LAYERS},
    {L("attention/in_proj_ba/kernel"), H("linear_attn.in_proj_ba.weight"), "e x -> x e",
     HF_OP_NONE, HF_SOME_LAYERS},
    {L("attention/conv1d/kernel"), H("linear_attn.conv1d.weight"), "k o c -> c o k", HF_OP_NONE,
     HF_SOME_LAYERS},
    {L("attention/A_log"), H("linear_attn.A_log"), "x -> x", HF_OP_NONE, HF_SOME_LAYERS},
    {L("attention/dt_bias"), H("linear_attn.dt_bias"), "x -> x", HF_OP_NONE, HF_SOME_LAYERS},
    {L("attention/norm/rms_norm/scale"), H("linear_attn.norm.weight"), "d -> d", HF_OP_NONE,
     HF_SOME_LAYERS},
    {L("attention/out_proj/kernel"), H("linear_attn.out_proj.weight"), "x e -> e x", HF_OP_NONE,
     HF_SOME_LAYERS},
    /* the full-attention layers' */
    {L("attention/attention/query/kernel"), H("self_attn.q_proj.weight"), "e h d -> (h d) e",
     HF_OP_NONE, HF_SOME_LAYERS},
    {L("attention/attention/key/kernel"), H("self_attn.k_proj.weight"), "e h d -> (h d) e",
     HF_OP_NONE, HF_SOME_LAYERS},
    {L("attention/attention/value/kernel"), H("self_attn.v_proj.weight"), "e h d -> (h d) e",
     HF_OP_NONE, HF_SOME_LAYERS},
    {L("attention/attention/out/kernel"), H("self_attn.o_proj.weight"), "x e -> e x", HF_OP_NONE,
     HF_SOME_LAYERS},
    {L("attention/attention/query_norm/scale"), H("self_attn.q_norm.weight"), "d -> d", HF_OP_NONE,
     HF_SOME_LAYERS},
    {L("attention/attention/key_norm/scale"), H("self_attn.k_norm.weight"), "d -> d", HF_OP_NONE,
     HF_SOME_LAYERS},
    /* every layer's experts */
    {L("mlp/routed_experts/gate/kernel"), H("mlp.gate.weight"), "e x -> x e", HF_OP_NONE, 0},
    {L("mlp/routed_experts/wi_0"), H("mlp.experts.{e}.gate_proj.weight"), "e m -> m e", HF_OP_NONE,
     0},
    {L("mlp/routed_experts/wi_1"), H("mlp.experts.{e}.up_proj.weight"), "e m -> m e", HF_OP_NONE,
     0},
    {L("mlp/routed_experts/wo"), H("mlp.experts.{e}.down_proj.weight"), "m e -> e m", HF_OP_NONE,
     0},
    {L("mlp/shared_expert/wi_0/kernel"), H("mlp.shared_expert.gate_proj.weight"), "e m -> m e",
     HF_OP_NONE, 0},
    {L("mlp/shared_expert/wi_1/kernel"), H("mlp.shared_expert.up_proj.weight"), "e m -> m e",
     HF_OP_NONE, 0},
    {L("mlp/shared_expert/wo/kernel"), H("mlp.shared_expert.down_proj.weight"), "m e -> e m",
     HF_OP_NONE, 0},
    {L("mlp/shared_expert_gate/kernel"), H("mlp.shared_expert_gate.weight"), "e x -> x e",
     HF_OP_NONE, 0},
};

/* Qwen3.5's. MaxText's fused in_proj_qkvz kernel [emb, key_heads * block] holds, for each key
 * head, its query (key_dim), its key (key_dim), then its value heads' values and gates
 * (vpk * value_dim each, vpk value heads per key head); Hugging Face's in_proj_qkv is every
 * head's query, then every head's key, then every value, and in_proj_z the gates: each piece
 * keeps its range of every head's block ("b[lo:hi]", the sizes named by setup_35), and the
 * three of in_proj_qkv are joined along its rows. in_proj_ba [emb, key_heads * 2 * vpk] the
 * same: b, then a. The experts stay stacked: gate_up_proj [experts, 2 * mlp, emb] is wi_0's
 * rows then wi_1's, down_proj [experts, emb, mlp] each expert's wo transposed. */
#define QKVZ L("attention/in_proj_qkvz/kernel")
#define BA L("attention/in_proj_ba/kernel")
static const hf_rule rules_35[] = {
    {"token_embedder/embedding", "model.language_model.embed_tokens.weight", "v e -> v e",
     HF_OP_NONE, 0},
    {"decoder/decoder_norm/scale", "model.language_model.norm.weight", "e -> e", HF_OP_NONE, 0},
    {"decoder/logits_dense/kernel", "lm_head.weight", "e v -> v e", HF_OP_NONE, HF_IF_UNTIED},
    {L("input_layernorm/scale"), H35("input_layernorm.weight"), "e -> e", HF_OP_NONE, 0},
    {L("post_attention_layernorm/scale"), H35("post_attention_layernorm.weight"), "e -> e",
     HF_OP_NONE, 0},
    {QKVZ, H35("linear_attn.in_proj_qkv.weight"), "e ({kh} b) -> ({kh} b[0:{dk}]) e", HF_OP_NONE,
     HF_SOME_LAYERS | HF_JOIN_ROWS | HF_PIECE(0)},
    {QKVZ, H35("linear_attn.in_proj_qkv.weight"), "e ({kh} b) -> ({kh} b[{dk}:{k_end}]) e",
     HF_OP_NONE, HF_SOME_LAYERS | HF_JOIN_ROWS | HF_PIECE(1)},
    {QKVZ, H35("linear_attn.in_proj_qkv.weight"), "e ({kh} b) -> ({kh} b[{k_end}:{v_end}]) e",
     HF_OP_NONE, HF_SOME_LAYERS | HF_JOIN_ROWS | HF_PIECE(2)},
    {QKVZ, H35("linear_attn.in_proj_z.weight"), "e ({kh} b) -> ({kh} b[{v_end}:]) e", HF_OP_NONE,
     HF_SOME_LAYERS},
    {BA, H35("linear_attn.in_proj_b.weight"), "e ({kh} c) -> ({kh} c[0:{vpk}]) e", HF_OP_NONE,
     HF_SOME_LAYERS},
    {BA, H35("linear_attn.in_proj_a.weight"), "e ({kh} c) -> ({kh} c[{vpk}:]) e", HF_OP_NONE,
     HF_SOME_LAYERS},
    {L("attention/conv1d/kernel"), H35("linear_attn.conv1d.weight"), "k o c -> c o k", HF_OP_NONE,
     HF_SOME_LAYERS},
    {L("attention/A_log"), H35("linear_attn.A_log"), "x -> x", HF_OP_NONE, HF_SOME_LAYERS},
    {L("attention/dt_bias"), H35("linear_attn.dt_bias"), "x -> x", HF_OP_NONE, HF_SOME_LAYERS},
    {L("attention/norm/rms_norm/scale"), H35("linear_attn.norm.weight"), "d -> d", HF_OP_NONE,
     HF_SOME_LAYERS},
    {L("attention/out_proj/kernel"), H35("linear_attn.out_proj.weight"), "x e -> e x", HF_OP_NONE,
     HF_SOME_LAYERS},
    {L("attention/attention/query/kernel"), H35("self_attn.q_proj.weight"), "e h d -> (h d) e",
     HF_OP_NONE, HF_SOME_LAYERS},
    {L("attention/attention/key/kernel"), H35("self_attn.k_proj.weight"), "e h d -> (h d) e",
     HF_OP_NONE, HF_SOME_LAYERS},
    {L("attention/attention/value/kernel"), H35("self_attn.v_proj.weight"), "e h d -> (h d) e",
     HF_OP_NONE, HF_SOME_LAYERS},
    {L("attention/attention/out/kernel"), H35("self_attn.o_proj.weight"), "x e -> e x", HF_OP_NONE,
     HF_SOME_LAYERS},
    {L("attention/attention/query_norm/scale"), H35("self_attn.q_norm.weight"), "d -> d",
     HF_OP_NONE, HF_SOME_LAYERS},
    {L("attention/attention/key_norm/scale"), H35("self_attn.k_norm.weight"), "d -> d", HF_OP_NONE,
     HF_SOME_LAYERS},
    {L("mlp/routed_experts/gate/kernel"), H35("mlp.gate.weight"), "e x -> x e", HF_OP_NONE, 0},
    {L("mlp/routed_experts/wi_0"), H35("mlp.experts.gate_up_proj"), "x e m -> x m e", HF_OP_NONE,
     HF_FIRST_ROWS},
    {L("mlp/routed_experts/wi_1"), H35("mlp.experts.gate_up_proj"), "x e m -> x m e", HF_OP_NONE,
     HF_LAST_ROWS},
    {L("mlp/routed_experts/wo"), H35("mlp.experts.down_proj"), "x m e -> x e m", HF_OP_NONE, 0},
    {L("mlp/shared_expert/wi_0/kernel"), H35("mlp.shared_expert.gate_proj.weight"), "e m -> m e",
     HF_OP_NONE, 0},
    {L("mlp/shared_expert/wi_1/kernel"), H35("mlp.shared_expert.up_proj.weight"), "e m -> m e",
     HF_OP_NONE, 0},
    {L("mlp/shared_expert/wo/kernel"), H35("mlp.shared_expert.down_proj.weight"), "m e -> e m",
     HF_OP_NONE, 0},
    {L("mlp/shared_expert_gate/kernel"), H35("mlp.shared_expert_gate.weight"), "e x -> x e",
     HF_OP_NONE, 0},
};

#undef QKVZ
#undef BA
#undef L
#undef H
#undef H35

static int applies(const ur_settings *s)
{
    return strcmp(s->decoder_block, "qwen3_next") == 0;
}

static int applies_35(const ur_settings *s)
{
    return strcmp(s->decoder_block, "qwen3_5") == 0;
}

#define QUERY "attention/attention/query/kernel"
#define KEY "attention/attention/key/kernel"
#define CONV "attention/conv1d/kernel"

/* What Qwen3NextForCausalLM cannot hold: another RoPE, no shared expert (it always has one),
 * unnormalized top-k weights. */
static int setup_block(hf_model *m, const char *block, ur_err *err)
{
    const ur_settings *s = m->s;
    int rank = 0;
    const uint64_t *shared = hf_model_shape(m, "decoder/layers_0/mlp/shared_expert/wi_0/kernel",
                                            &rank);
    const char *why = strcmp(hf_cfg_str(s, "rope_type", "default"), "default") != 0 ? "rope_type"
                      : hf_cfg_int(s, "shared_experts", 0) < 1 ? "no shared expert"
                      : !hf_cfg_bool(s, "norm_topk_prob", 0)   ? "norm_topk_prob false"
                      : hf_cfg_int(s, "num_experts", 1) < 2    ? "num_experts < 2"
                                                               : NULL;
    if (why != NULL) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: decoder_block %s with %s has no Hugging Face "
                          "mapping here",
                          block, why);
    }
    if (shared == NULL || rank != 2) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export: the checkpoint lacks layer 0's "
                          "mlp/shared_expert/wi_0/kernel [emb, mlp] of a %s model",
                          block);
    }
    m->flags = (m->flags & ~(unsigned)HF_IF_DENSE_MLP) | HF_IF_EXPERTS;
    m->flags |= hf_cfg_bool(s, "logits_via_embedding", 0) ? 0 : HF_IF_UNTIED;
    m->intermediate_size = shared[1];
    return UR_OK;
}

static int setup(hf_model *m, ur_err *err)
{
    return setup_block(m, "qwen3_next", err);
}

/* The linear attention's heads and head dims (MaxText's gdn_* keys and their defaults). */
typedef struct {
    int64_t kh, vh, dk, dv;
} gdn_sizes;

static gdn_sizes gdn_of(const ur_settings *s)
{
    gdn_sizes g = {
        hf_cfg_int(s, "gdn_num_key_heads", 16), hf_cfg_int(s, "gdn_num_value_heads", 32),
        hf_cfg_int(s, "gdn_key_head_dim", 128), hf_cfg_int(s, "gdn_value_head_dim", 128)};
    return g;
}

/* Qwen3.5: Qwen3-Next's checks, and the sizes that cut the fused projections into their
 * pieces (rules_35), checked against the first linear-attention layer's kernels. */
static int setup_35(hf_model *m, ur_err *err)
{
    gdn_sizes g = gdn_of(m->s);
    int rc = setup_block(m, "qwen3_5", err), rq = 0, rb = 0;
    const uint64_t *qkvz = NULL, *ba = NULL;
    if (rc < 0) {
        return rc;
    }
    if (g.kh < 1 || g.dk < 1 || g.dv < 1 || g.vh < g.kh || g.vh % g.kh != 0) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export (qwen3_5): gdn_num_value_heads %lld is not a "
                          "multiple of gdn_num_key_heads %lld (or a size is < 1)",
                          (long long)g.vh, (long long)g.kh);
    }
    uint64_t vd = (uint64_t)(g.vh / g.kh * g.dv), kd = (uint64_t)g.dk, kh = (uint64_t)g.kh;
    for (int64_t i = 0; qkvz == NULL && i < (int64_t)m->n + 1; i++) {
        qkvz = hf_model_layer_shape(m, i, "attention/in_proj_qkvz/kernel", &rq);
        ba = hf_model_layer_shape(m, i, "attention/in_proj_ba/kernel", &rb);
    }
    if (qkvz != NULL && (rq != 2 || qkvz[1] != kh * (2 * kd + 2 * vd) || ba == NULL || rb != 2 ||
                         ba[1] != 2 * (uint64_t)g.vh)) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export (qwen3_5): in_proj_qkvz [emb, %llu] or in_proj_ba "
                          "is not what gdn_num_key_heads %lld, gdn_num_value_heads %lld, "
                          "gdn_key_head_dim %lld and gdn_value_head_dim %lld make",
                          (unsigned long long)(rq == 2 ? qkvz[1] : 0), (long long)g.kh,
                          (long long)g.vh, (long long)g.dk, (long long)g.dv);
    }
    const struct {
        const char *name;
        uint64_t v;
    } sizes[] = {{"kh", kh},
                 {"dk", kd},
                 {"k_end", 2 * kd},
                 {"v_end", 2 * kd + vd},
                 {"vpk", (uint64_t)(g.vh / g.kh)}};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && rc == UR_OK; k++) {
        rc = hf_model_set_size(m, sizes[k].name, sizes[k].v, err);
    }
    return rc;
}

/* layer_types: a layer with a query kernel is a full-attention one, one with the convolution
 * a linear-attention one; each has exactly one of the two. */
static int layer_types(const hf_model *m, hf_json *j, const char *in, int64_t *full, ur_err *err)
{
    int64_t n = hf_model_layers(m);
    const char **types = ur_calloc((size_t)n + 1, sizeof *types);
    int rc = types != NULL ? UR_OK : ur_err_oom(err);
    *full = -1;
    for (int64_t i = 0; i < n && rc == UR_OK; i++) {
        int rank = 0, q = hf_model_layer_shape(m, i, QUERY, &rank) != NULL,
            c = hf_model_layer_shape(m, i, CONV, &rank) != NULL;
        if (q == c) {
            rc = ur_err_set(
                err, UR_EINVAL, "Hugging Face export (qwen3_next): decoder/layers_%lld has %s",
                (long long)i, q ? "both a query kernel and a convolution" : "no attention");
        }
        types[i] = q ? "full_attention" : "linear_attention";
        if (q && *full < 0) {
            *full = i;
        }
    }
    if (rc == UR_OK && *full < 0) {
        rc = ur_err_set(err, UR_EINVAL,
                        "Hugging Face export (qwen3_next): no full-attention layer (" QUERY ")");
    }
    if (rc == UR_OK) {
        rc = hf_json_strs(j, in, "layer_types", types, (size_t)n, err);
    }
    ur_free(types);
    return rc;
}

/* The linear attention's sizes, inside `in`: the convolution's kernel, the heads and head
 * dims (of keys and values: A_log [value heads], the gated norm [value head dim], the key
 * sizes as the config gives them). */
static int linear_config(const hf_model *m, hf_json *j, const char *in, ur_err *err)
{
    gdn_sizes g = gdn_of(m->s);
    int64_t lin = 0;
    int rank = 0;
    const uint64_t *conv = NULL;
    while (lin < hf_model_layers(m) &&
           (conv = hf_model_layer_shape(m, lin, CONV, &rank)) == NULL) {
        lin++;
    }
    const hf_json_int_entry ints[] = {
        {"linear_conv_kernel_dim", conv != NULL && rank == 3
                                       ? (int64_t)conv[0]
                                       : hf_cfg_int(m->s, "gdn_conv_kernel_dim", 4)},
        {"linear_key_head_dim", g.dk},
        {"linear_value_head_dim", g.dv},
        {"linear_num_key_heads", g.kh},
        {"linear_num_value_heads", g.vh},
    };
    return hf_json_ints(j, in, ints, sizeof ints / sizeof ints[0], err);
}

/* The language model's entries, inside `in` (NULL: top level): layer_types, the
 * full-attention layers' sizes from the first one's kernels (the query's last axis is twice
 * the head dim: each head's query, then its output gate), the experts' from layer 0's, the
 * linear attention's, RoPE with its partial rotary factor. */
static int text_config(const hf_model *m, hf_json *j, const char *in, const char *block,
                       ur_err *err)
{
    const ur_settings *s = m->s;
    int64_t full = -1;
    int re = 0, rq = 0, rk = 0, rw = 0;
    const uint64_t *e = hf_model_shape(m, "token_embedder/embedding", &re);
    const uint64_t *wi = hf_model_shape(m, "decoder/layers_0/mlp/routed_experts/wi_0", &rw);
    const uint64_t *q, *k;
    char rope[96];
    int rc = layer_types(m, j, in, &full, err);
    if (rc < 0) {
        return rc;
    }
    q = hf_model_layer_shape(m, full, QUERY, &rq);
    k = hf_model_layer_shape(m, full, KEY, &rk);
    if (e == NULL || re != 2 || wi == NULL || rw != 3 || rq != 3 || rk != 3 || q[2] != 2 * k[2]) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export (%s): the checkpoint lacks the embedding or layer "
                          "0's routed wi_0, or layer %lld's query [emb, heads, 2 * head_dim] and "
                          "key [emb, kv heads, head_dim] kernels",
                          block, (long long)full);
    }
    const hf_json_int_entry ints[] = {
        {"vocab_size", (int64_t)e[0]},
        {"hidden_size", (int64_t)e[1]},
        {"num_attention_heads", (int64_t)q[1]},
        {"num_key_value_heads", (int64_t)k[1]},
        {"head_dim", (int64_t)k[2]},
        {"num_hidden_layers", hf_model_layers(m)},
        {"shared_expert_intermediate_size", (int64_t)m->intermediate_size},
        {"moe_intermediate_size", (int64_t)wi[2]},
        {"num_experts", (int64_t)wi[0]},
        {"num_experts_per_tok", hf_cfg_int(s, "num_experts_per_tok", 1)},
        {"max_position_embeddings", hf_cfg_int(s, "max_target_length", 2048)},
    };
    if (rc == UR_OK) {
        rc = hf_json_ints(j, in, ints, sizeof ints / sizeof ints[0], err);
    }
    if (rc == UR_OK) {
        rc = hf_config_basics(m, j, in, 1e-6, err);
    }
    if (rc == UR_OK) {
        rc = linear_config(m, j, in, err);
    }
    if (rc == UR_OK) {
        rc = hf_config_rope(m, j, in, "default", err);
    }
    hf_rope_object(in, rope, sizeof rope);
    return rc == UR_OK ? hf_json_float(j, rope, "partial_rotary_factor",
                                       hf_cfg_float(s, "partial_rotary_factor", 1.0), err)
                       : rc;
}

static int config(const hf_model *m, hf_json *j, ur_err *err)
{
    const char *arch = "Qwen3NextForCausalLM";
    int rc = hf_json_strs(j, NULL, "architectures", &arch, 1, err);
    if (rc == UR_OK) {
        rc = text_config(m, j, NULL, "qwen3_next", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, NULL, "model_type", "qwen3_next", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "intermediate_size", (int64_t)m->intermediate_size, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "decoder_sparse_step", 1, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "norm_topk_prob", 1, err);
    }
    return rc == UR_OK ? hf_json_strs(j, NULL, "mlp_only_layers", NULL, 0, err) : rc;
}

/* Qwen3_5MoeConfig: the language model in text_config (RoPE's mrope_interleaved as the
 * architecture has it; mrope_section left to transformers' default, [11, 11, 10], MaxText's
 * for both Qwen3.5 models: with text alone its three position streams are one, so the
 * sections do not change a logit), and the vision tower's sizes in vision_config, so that the
 * configuration is the model's although the export has no vision weights. */
static int config_35(const hf_model *m, hf_json *j, ur_err *err)
{
    static const hf_vit_key vit[] = {
        {"depth", "num_hidden_layers_for_vit", 27},
        {"hidden_size", "hidden_size_for_vit", 1152},
        {"intermediate_size", "intermediate_size_for_vit", 4304},
        {"num_heads", "num_attention_heads_for_vit", 16},
        {"in_channels", "num_channels_for_vit", 3},
        {"patch_size", "patch_size_for_vit", 16},
        {"spatial_merge_size", "spatial_merge_size_for_vit", 2},
        {"temporal_patch_size", "temporal_patch_size_for_vit", 2},
        {"out_hidden_size", "out_hidden_size_for_vit", 2048},
        {"num_position_embeddings", "num_position_embeddings_for_vit", 2304},
    };
    int rc = hf_config_multimodal(m, j, "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", err);
    if (rc == UR_OK) {
        rc = text_config(m, j, "text_config", "qwen3_5", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, "text_config", "model_type", "qwen3_5_moe_text", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, "text_config/rope_parameters", "mrope_interleaved", 1, err);
    }
    return rc == UR_OK
               ? hf_config_vision(m, j, "qwen3_5_moe_vision", vit, sizeof vit / sizeof vit[0], err)
               : rc;
}

const hf_family hf_family_qwen3_next = {.name = "qwen3_next",
                                        .architecture = "Qwen3NextForCausalLM",
                                        .applies = applies,
                                        .setup = setup,
                                        .shared = hf_rules_llama_like,
                                        .n_shared = HF_N_RULES_TOP,
                                        .rules = rules,
                                        .n_rules = sizeof rules / sizeof rules[0],
                                        .config = config};

const hf_family hf_family_qwen3_5 = {.name = "qwen3_5",
                                     .architecture = "Qwen3_5MoeForConditionalGeneration",
                                     .applies = applies_35,
                                     .setup = setup_35,
                                     .rules = rules_35,
                                     .n_rules = sizeof rules_35 / sizeof rules_35[0],
                                     .config = config_35};
