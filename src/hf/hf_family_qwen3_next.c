/* Qwen3-Next: MaxText's qwen3_next decoder block (qwen3-next-80b-a3b) as transformers'
 * Qwen3NextForCausalLM, as MaxText's exporter maps it (QWEN3_NEXT_MAXTEXT_TO_HF_PARAM_MAPPING
 * and its hooks).
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

#undef L
#undef H

static int applies(const ur_settings *s)
{
    return strcmp(s->decoder_block, "qwen3_next") == 0;
}

/* The shape of layer i's parameter `what` (below decoder/layers_i/), NULL when it has none. */
static const uint64_t *layer_shape(const hf_model *m, int64_t i, const char *what, int *rank)
{
    char path[160];
    snprintf(path, sizeof path, "decoder/layers_%lld/%s", (long long)i, what);
    return hf_model_shape(m, path, rank);
}

#define QUERY "attention/attention/query/kernel"
#define KEY "attention/attention/key/kernel"
#define CONV "attention/conv1d/kernel"

/* What Qwen3NextForCausalLM cannot hold: another RoPE, no shared expert (it always has one),
 * unnormalized top-k weights. */
static int setup(hf_model *m, ur_err *err)
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
                          "Hugging Face export: decoder_block qwen3_next with %s has no Hugging "
                          "Face mapping here",
                          why);
    }
    if (shared == NULL || rank != 2) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export: the checkpoint lacks layer 0's "
                          "mlp/shared_expert/wi_0/kernel [emb, mlp] of a qwen3_next model");
    }
    m->flags = (m->flags & ~(unsigned)HF_IF_DENSE_MLP) | HF_IF_EXPERTS;
    m->flags |= hf_cfg_bool(s, "logits_via_embedding", 0) ? 0 : HF_IF_UNTIED;
    m->intermediate_size = shared[1];
    return UR_OK;
}

/* layer_types: a layer with a query kernel is a full-attention one, one with the convolution
 * a linear-attention one; each has exactly one of the two. */
static int layer_types(const hf_model *m, hf_json *j, int64_t *full, ur_err *err)
{
    int64_t n = hf_model_layers(m);
    const char **types = ur_calloc((size_t)n + 1, sizeof *types);
    int rc = types != NULL ? UR_OK : ur_err_oom(err);
    *full = -1;
    for (int64_t i = 0; i < n && rc == UR_OK; i++) {
        int rank = 0, q = layer_shape(m, i, QUERY, &rank) != NULL,
            c = layer_shape(m, i, CONV, &rank) != NULL;
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
        rc = hf_json_strs(j, NULL, "layer_types", types, (size_t)n, err);
    }
    ur_free(types);
    return rc;
}

/* The linear attention's sizes: the convolution's kernel, the heads and head dims (of keys
 * and values: A_log [value heads], the gated norm [value head dim], the key sizes as the
 * config gives them). */
static int linear_config(const hf_model *m, hf_json *j, ur_err *err)
{
    const ur_settings *s = m->s;
    int64_t lin = 0;
    int rank = 0;
    const uint64_t *conv = NULL;
    while (lin < hf_model_layers(m) && (conv = layer_shape(m, lin, CONV, &rank)) == NULL) {
        lin++;
    }
    int rc = hf_json_int(j, NULL, "linear_conv_kernel_dim",
                         conv != NULL && rank == 3 ? (int64_t)conv[0]
                                                   : hf_cfg_int(s, "gdn_conv_kernel_dim", 4),
                         err);
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "linear_key_head_dim", hf_cfg_int(s, "gdn_key_head_dim", 128),
                         err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "linear_value_head_dim",
                         hf_cfg_int(s, "gdn_value_head_dim", 128), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "linear_num_key_heads", hf_cfg_int(s, "gdn_num_key_heads", 16),
                         err);
    }
    return rc == UR_OK ? hf_json_int(j, NULL, "linear_num_value_heads",
                                     hf_cfg_int(s, "gdn_num_value_heads", 32), err)
                       : rc;
}

/* The full-attention layers' sizes from the first one's kernels (the query's last axis is
 * twice the head dim: each head's query, then its output gate), the experts' from layer 0's. */
static int config(const hf_model *m, hf_json *j, ur_err *err)
{
    const ur_settings *s = m->s;
    const char *arch = "Qwen3NextForCausalLM";
    int64_t full = -1;
    int re = 0, rq = 0, rk = 0, rw = 0;
    const uint64_t *e = hf_model_shape(m, "token_embedder/embedding", &re);
    const uint64_t *wi = hf_model_shape(m, "decoder/layers_0/mlp/routed_experts/wi_0", &rw);
    const uint64_t *q, *k;
    int rc = hf_json_strs(j, NULL, "architectures", &arch, 1, err);
    if (rc == UR_OK) {
        rc = layer_types(m, j, &full, err);
    }
    if (rc < 0) {
        return rc;
    }
    q = layer_shape(m, full, QUERY, &rq);
    k = layer_shape(m, full, KEY, &rk);
    if (e == NULL || re != 2 || wi == NULL || rw != 3 || rq != 3 || rk != 3 || q[2] != 2 * k[2]) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export (qwen3_next): the checkpoint lacks the embedding "
                          "or layer 0's routed wi_0, or layer %lld's query [emb, heads, 2 * "
                          "head_dim] and key [emb, kv heads, head_dim] kernels",
                          (long long)full);
    }
    const struct {
        const char *key;
        int64_t v;
    } ints[] = {
        {"vocab_size", (int64_t)e[0]},
        {"hidden_size", (int64_t)e[1]},
        {"num_attention_heads", (int64_t)q[1]},
        {"num_key_value_heads", (int64_t)k[1]},
        {"head_dim", (int64_t)k[2]},
        {"num_hidden_layers", hf_model_layers(m)},
        {"intermediate_size", (int64_t)m->intermediate_size},
        {"shared_expert_intermediate_size", (int64_t)m->intermediate_size},
        {"moe_intermediate_size", (int64_t)wi[2]},
        {"num_experts", (int64_t)wi[0]},
        {"num_experts_per_tok", hf_cfg_int(s, "num_experts_per_tok", 1)},
        {"decoder_sparse_step", 1},
        {"max_position_embeddings", hf_cfg_int(s, "max_target_length", 2048)},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0] && rc == UR_OK; i++) {
        rc = hf_json_int(j, NULL, ints[i].key, ints[i].v, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, NULL, "model_type", "qwen3_next", err);
    }
    if (rc == UR_OK) {
        rc = hf_config_basics(m, j, 1e-6, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "norm_topk_prob", 1, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_strs(j, NULL, "mlp_only_layers", NULL, 0, err);
    }
    if (rc == UR_OK) {
        rc = linear_config(m, j, err);
    }
    if (rc == UR_OK) {
        rc = hf_config_rope(m, j, "default", err);
    }
    return rc == UR_OK ? hf_json_float(j, "rope_parameters", "partial_rotary_factor",
                                       hf_cfg_float(s, "partial_rotary_factor", 1.0), err)
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
