/* Llama 4, text: MaxText's llama4 decoder block (llama4-17b-16e, llama4-17b-128e) as
 * transformers' Llama4ForCausalLM. MaxText 0.2.5's exporter has no mapping for it; this one
 * follows transformers' Llama4 checkpoint layout.
 *
 * Attention kernels are flattened over their heads and transposed to [out, in], unscaled
 * (this block scales the scores in the forward pass) and not reordered (MaxText rotates
 * interleaved pairs, LLaMARotaryEmbedding, as Llama 4's complex rotation does). A MoE layer
 * (interleave_moe_layer_step) has the router [emb, experts] transposed, a shared expert, and
 * the routed experts stacked as MaxText holds them: gate_up_proj [experts, emb, 2 * mlp] is
 * wi_0's and wi_1's columns concatenated (each written to its columns as its chunks come),
 * down_proj is wo [experts, mlp, emb] as it is. A dense layer has the gated MLP.
 * config.json has the NoPE interval (every nope_layer_interval-th layer unrotated, with
 * temperature tuning), the chunked attention's window and the MoE interval. */
#include "hf_impl.h"

#include <stdio.h>
#include <string.h>

#define L(mt) "decoder/layers_{i}/" mt
#define H(hf) "model.layers.{i}." hf
#define MOE "Llama4MoEBlock_0/"

static const hf_rule rules[] = {
    {L("self_attention/query/kernel"), H("self_attn.q_proj.weight"), "e h d -> (h d) e",
     HF_OP_NONE, 0},
    {L("self_attention/key/kernel"), H("self_attn.k_proj.weight"), "e h d -> (h d) e", HF_OP_NONE,
     0},
    {L("self_attention/value/kernel"), H("self_attn.v_proj.weight"), "e h d -> (h d) e",
     HF_OP_NONE, 0},
    {L("self_attention/out/kernel"), H("self_attn.o_proj.weight"), "h d e -> e (h d)", HF_OP_NONE,
     0},
    {L("pre_self_attention_layer_norm/scale"), H("input_layernorm.weight"), "e -> e", HF_OP_NONE,
     0},
    {L("post_self_attention_layer_norm/scale"), H("post_attention_layernorm.weight"), "e -> e",
     HF_OP_NONE, 0},
    /* a dense layer's MLP */
    {L("mlp/wi_0/kernel"), H("feed_forward.gate_proj.weight"), "e m -> m e", HF_OP_NONE,
     HF_SOME_LAYERS},
    {L("mlp/wi_1/kernel"), H("feed_forward.up_proj.weight"), "e m -> m e", HF_OP_NONE,
     HF_SOME_LAYERS},
    {L("mlp/wo/kernel"), H("feed_forward.down_proj.weight"), "m e -> e m", HF_OP_NONE,
     HF_SOME_LAYERS},
    /* a MoE layer's */
    {L(MOE "MoeBlock_0/gate/kernel"), H("feed_forward.router.weight"), "e x -> x e", HF_OP_NONE,
     HF_SOME_LAYERS},
    {L(MOE "MoeBlock_0/wi_0"), H("feed_forward.experts.gate_up_proj"), "x e m -> x e m",
     HF_OP_NONE, HF_SOME_LAYERS | HF_FIRST_COLS},
    {L(MOE "MoeBlock_0/wi_1"), H("feed_forward.experts.gate_up_proj"), "x e m -> x e m",
     HF_OP_NONE, HF_SOME_LAYERS | HF_LAST_COLS},
    {L(MOE "MoeBlock_0/wo"), H("feed_forward.experts.down_proj"), "x m e -> x m e", HF_OP_NONE,
     HF_SOME_LAYERS},
    {L(MOE "shared_experts/wi_0/kernel"), H("feed_forward.shared_expert.gate_proj.weight"),
     "e m -> m e", HF_OP_NONE, HF_SOME_LAYERS},
    {L(MOE "shared_experts/wi_1/kernel"), H("feed_forward.shared_expert.up_proj.weight"),
     "e m -> m e", HF_OP_NONE, HF_SOME_LAYERS},
    {L(MOE "shared_experts/wo/kernel"), H("feed_forward.shared_expert.down_proj.weight"),
     "m e -> e m", HF_OP_NONE, HF_SOME_LAYERS},
};

#undef L
#undef H

static int applies(const ur_settings *s)
{
    return strcmp(s->decoder_block, "llama4") == 0;
}

/* What Llama4ForCausalLM cannot hold: a RoPE other than llama3.1's (scaled or not), a MoE
 * layer without its one shared expert, key and query norms other than its L2 norm. */
static int setup(hf_model *m, ur_err *err)
{
    const ur_settings *s = m->s;
    const char *rope = hf_cfg_str(s, "rope_type", "default");
    const char *why = !hf_starts(rope, "llama3.1")              ? "a rope_type other than llama3.1"
                      : hf_cfg_int(s, "shared_experts", 1) != 1 ? "shared_experts other than 1"
                      : hf_cfg_bool(s, "attention_bias", 0)     ? "attention_bias"
                      : hf_cfg_int(s, "num_experts", 1) < 2     ? "num_experts < 2"
                                                                : NULL;
    if (why != NULL) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: decoder_block llama4 with %s has no place in "
                          "Llama4ForCausalLM",
                          why);
    }
    m->flags |= hf_cfg_bool(s, "logits_via_embedding", 0) ? 0 : HF_IF_UNTIED;
    return UR_OK;
}

/* The first MoE layer's parameter `what` (below the MoE block), and the first dense layer's
 * MLP width (0: none). */
static const uint64_t *moe_shape(const hf_model *m, const char *what, int *rank)
{
    char path[160];
    for (int64_t i = 0; i < m->n_layers; i++) {
        const uint64_t *sh;
        snprintf(path, sizeof path, "decoder/layers_%lld/" MOE "%s", (long long)i, what);
        sh = hf_model_shape(m, path, rank);
        if (sh != NULL) {
            return sh;
        }
    }
    return NULL;
}

static int64_t dense_width(const hf_model *m)
{
    char path[160];
    for (int64_t i = 0; i < m->n_layers; i++) {
        int rank = 0;
        const uint64_t *sh;
        snprintf(path, sizeof path, "decoder/layers_%lld/mlp/wi_0/kernel", (long long)i);
        sh = hf_model_shape(m, path, &rank);
        if (sh != NULL && rank == 2) {
            return (int64_t)sh[1];
        }
    }
    return 0;
}

/* Every layer has its dense MLP or its experts (the table's rules for either hold for some
 * layers only), and the MoE layers are those transformers places at interleave_moe_layer_step
 * (its moe_layers: every step-th layer, the last of each step). */
static int check_layers(const hf_model *m, ur_err *err)
{
    int64_t step = hf_cfg_int(m->s, "interleave_moe_layer_step", 1);
    for (int64_t i = 0; i < m->n_layers; i++) {
        char path[160];
        int rank = 0, dense, moe, want = step > 0 && (i + 1) % step == 0;
        snprintf(path, sizeof path, "decoder/layers_%lld/mlp/wi_0/kernel", (long long)i);
        dense = hf_model_shape(m, path, &rank) != NULL;
        snprintf(path, sizeof path, "decoder/layers_%lld/" MOE "MoeBlock_0/wi_0", (long long)i);
        moe = hf_model_shape(m, path, &rank) != NULL;
        if (dense == moe || moe != want) {
            return ur_err_set(err, UR_EINVAL,
                              "Hugging Face export (llama4): decoder/layers_%lld has %s where "
                              "interleave_moe_layer_step %lld wants %s",
                              (long long)i,
                              dense && moe ? "an MLP and experts"
                              : dense      ? "an MLP"
                              : moe        ? "experts"
                                           : "neither an MLP nor experts",
                              (long long)step, want ? "experts" : "an MLP");
        }
    }
    return UR_OK;
}

static int config(const hf_model *m, hf_json *j, ur_err *err)
{
    const ur_settings *s = m->s;
    const char *arch = "Llama4ForCausalLM";
    int scaled = hf_cfg_bool(s, "rope_use_scale", 1), rank = 0, rq = 0, rk = 0, re = 0;
    const uint64_t *wi = moe_shape(m, "MoeBlock_0/wi_0", &rank);
    const uint64_t *q = hf_model_shape(m, "decoder/layers_0/self_attention/query/kernel", &rq);
    const uint64_t *k = hf_model_shape(m, "decoder/layers_0/self_attention/key/kernel", &rk);
    const uint64_t *e = hf_model_shape(m, "token_embedder/embedding", &re);
    int64_t dense = dense_width(m);
    int rc = check_layers(m, err);
    if (rc < 0) {
        return rc;
    }
    if (wi == NULL || rank != 3 || q == NULL || rq != 3 || k == NULL || rk != 3 || e == NULL ||
        re != 2) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export: the checkpoint lacks the embedding, layer 0's "
                          "query and key kernels or a MoE layer's experts of a llama4 model");
    }
    const hf_json_int_entry ints[] = {
        {"vocab_size", (int64_t)e[0]},
        {"hidden_size", (int64_t)e[1]},
        {"num_attention_heads", (int64_t)q[1]},
        {"num_key_value_heads", (int64_t)k[1]},
        {"head_dim", (int64_t)q[2]},
        {"num_hidden_layers", m->n_layers},
        {"intermediate_size", (int64_t)wi[2]},
        {"intermediate_size_mlp", dense > 0 ? dense : hf_cfg_int(s, "base_mlp_dim", 0)},
        {"num_local_experts", (int64_t)wi[0]},
        {"num_experts_per_tok", hf_cfg_int(s, "num_experts_per_tok", 1)},
        {"interleave_moe_layer_step", hf_cfg_int(s, "interleave_moe_layer_step", 1)},
        {"no_rope_layer_interval", hf_cfg_int(s, "nope_layer_interval", 4)},
        {"attention_chunk_size", hf_cfg_int(s, "chunk_attn_window_size", 8192)},
        {"floor_scale", 8192}, /* MaxText's temperature_tuning_floor_scale for llama4 */
        {"max_position_embeddings", scaled ? 131072 : hf_cfg_int(s, "max_target_length", 2048)},
    };
    rc = hf_json_strs(j, NULL, "architectures", &arch, 1, err);
    if (rc == UR_OK) {
        rc = hf_json_ints(j, NULL, ints, sizeof ints / sizeof ints[0], err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, NULL, "model_type", "llama4_text", err);
    }
    if (rc == UR_OK) {
        rc = hf_config_basics(m, j, NULL, 1e-5, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "use_qk_norm", hf_cfg_bool(s, "use_qk_norm", 1), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "attn_temperature_tuning",
                          hf_cfg_bool(s, "temperature_tuning", 0), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, NULL, "attn_scale", 0.1, err); /* temperature_tuning_scale */
    }
    /* LLaMARotaryEmbedding: llama3's scaling (factor 8, frequency factors 1 and 4, 8192
     * positions) where rope_use_scale */
    if (rc == UR_OK) {
        rc = hf_config_rope(m, j, NULL, scaled ? "llama3" : "default", err);
    }
    return rc == UR_OK && scaled ? hf_config_llama3_scaling(j, err) : rc;
}

const hf_family hf_family_llama4 = {.name = "llama4",
                                    .architecture = "Llama4ForCausalLM",
                                    .applies = applies,
                                    .setup = setup,
                                    .shared = hf_rules_llama_like,
                                    .n_shared = HF_N_RULES_TOP,
                                    .rules = rules,
                                    .n_rules = sizeof rules / sizeof rules[0],
                                    .config = config};
