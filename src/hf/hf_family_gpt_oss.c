/* gpt-oss: MaxText's gpt_oss decoder block (gpt-oss-20b, gpt-oss-120b) as transformers'
 * GptOssForCausalLM, as MaxText's exporter maps it (GPT_OSS_MAXTEXT_TO_HF_PARAM_MAPPING and
 * its hooks).
 *
 * Blocks of two layers (sliding-window attention, then full), attention with biases and a
 * learned sink per head, and routed experts with biases in every layer. The attention kernels
 * are flattened over their heads and transposed to [out, in]; the experts stay as MaxText
 * stacks them, [experts, in, out], one tensor per kind, not cut by expert. The gate (wi_0) and
 * up (wi_1) kernels and biases are interleaved along the last axis into one tensor,
 * gate_up_proj: the gate at even positions, the up projection at odd ones (the exporter's
 * `interleave`), each written straight to its positions as its chunks arrive. No query scale
 * (this block scales the scores in the forward pass) and no RoPE reordering (halves, as
 * Hugging Face rotates). */
#include "hf_impl.h"

#include <string.h>

#define ATT(mt, hf) "decoder/layers_{i}/GptOssAttention/" mt, "model.layers.{i}.self_attn." hf
#define MLP(mt, hf) "decoder/layers_{i}/GptOssMlp/" mt, "model.layers.{i}.mlp." hf

static const hf_rule rules[] = {
    {ATT("query/kernel", "q_proj.weight"), "e h d -> (h d) e", HF_OP_NONE, 0},
    {ATT("key/kernel", "k_proj.weight"), "e h d -> (h d) e", HF_OP_NONE, 0},
    {ATT("value/kernel", "v_proj.weight"), "e h d -> (h d) e", HF_OP_NONE, 0},
    {ATT("out/kernel", "o_proj.weight"), "h d e -> e (h d)", HF_OP_NONE, 0},
    {ATT("query/bias", "q_proj.bias"), "h d -> (h d)", HF_OP_NONE, 0},
    {ATT("key/bias", "k_proj.bias"), "h d -> (h d)", HF_OP_NONE, 0},
    {ATT("value/bias", "v_proj.bias"), "h d -> (h d)", HF_OP_NONE, 0},
    {ATT("out/bias", "o_proj.bias"), "e -> e", HF_OP_NONE, 0},
    {ATT("sinks", "sinks"), "h -> h", HF_OP_NONE, 0},
    {MLP("gate/kernel", "router.weight"), "e x -> x e", HF_OP_NONE, 0},
    {MLP("gate/bias", "router.bias"), "x -> x", HF_OP_NONE, 0},
    {MLP("wi_0", "experts.gate_up_proj"), "x e m -> x e m", HF_OP_NONE, HF_EVENS},
    {MLP("wi_1", "experts.gate_up_proj"), "x e m -> x e m", HF_OP_NONE, HF_ODDS},
    {MLP("wi_0_bias", "experts.gate_up_proj_bias"), "x m -> x m", HF_OP_NONE, HF_EVENS},
    {MLP("wi_1_bias", "experts.gate_up_proj_bias"), "x m -> x m", HF_OP_NONE, HF_ODDS},
    {MLP("wo", "experts.down_proj"), "x m e -> x m e", HF_OP_NONE, 0},
    {MLP("wo_bias", "experts.down_proj_bias"), "x e -> x e", HF_OP_NONE, 0},
};

#undef ATT
#undef MLP

#define WI_0 "decoder/layers_0/GptOssMlp/wi_0"

static int applies(const ur_settings *s)
{
    return strcmp(s->decoder_block, "gpt_oss") == 0;
}

/* What GptOssForCausalLM cannot hold: another RoPE or layer cycle, no sinks, or an
 * unclamped activation (transformers always clamps at swiglu_limit). */
static int setup(hf_model *m, ur_err *err)
{
    const ur_settings *s = m->s;
    const char *rope = hf_cfg_str(s, "rope_type", "yarn");
    int rank = 0;
    const uint64_t *wi = hf_model_shape(m, WI_0, &rank);
    const char *why = strcmp(rope, "yarn") != 0 && strcmp(rope, "default") != 0 ? "rope_type"
                      : hf_cfg_bool(s, "rope_interleave", 0)                    ? "rope_interleave"
                      : hf_cfg_int(s, "inhomogeneous_layer_cycle_interval", 2) != 2
                          ? "inhomogeneous_layer_cycle_interval other than 2"
                      : !hf_cfg_bool(s, "attention_sink", 0) ? "no attention_sink"
                      : hf_cfg_float(s, "mlp_activations_limit", 0) <= 0
                          ? "no mlp_activations_limit"
                          : NULL;
    if (why != NULL) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: decoder_block gpt_oss with %s has no Hugging Face "
                          "mapping here",
                          why);
    }
    if (wi == NULL || rank != 3) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export: the checkpoint lacks layer 0's " WI_0
                          " [experts, emb, mlp] of a gpt_oss model");
    }
    m->flags = (m->flags & ~(unsigned)HF_IF_DENSE_MLP) | HF_IF_EXPERTS;
    m->flags |= hf_cfg_bool(s, "logits_via_embedding", 0) ? 0 : HF_IF_UNTIED;
    m->intermediate_size = wi[2];
    return UR_OK;
}

/* rope_parameters: MaxText's RoPE, YaRN with its settings (the rotation scaled by YaRN's
 * 0.1 ln(factor) + 1, Hugging Face's default, only where MaxText scales it). */
static int rope(const hf_model *m, hf_json *j, ur_err *err)
{
    const ur_settings *s = m->s;
    const char *in = "rope_parameters";
    int yarn = strcmp(hf_cfg_str(s, "rope_type", "yarn"), "yarn") == 0;
    int rc = hf_config_rope(m, j, NULL, yarn ? "yarn" : "default", err);
    if (!yarn || rc < 0) {
        return rc;
    }
    return hf_config_yarn(m, j, in, 32, 0, err);
}

/* The experts' sizes from layer 0's wi_0 [experts, emb, mlp]; a cycle of a sliding-window
 * layer then a full one. */
static int config(const hf_model *m, hf_json *j, ur_err *err)
{
    const ur_settings *s = m->s;
    int rank = 0;
    const uint64_t *wi = hf_model_shape(m, WI_0, &rank);
    int rc = hf_config_decoder(m, j, "GptOssForCausalLM", "gpt_oss",
                               hf_cfg_int(s, "max_position_embeddings", 131072), err);
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "num_local_experts", (int64_t)wi[0], err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "num_experts_per_tok", hf_cfg_int(s, "num_experts_per_tok", 4),
                         err);
    }
    if (rc == UR_OK) {
        rc = hf_config_layer_types(m, j, NULL, 2, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "sliding_window", hf_cfg_int(s, "sliding_window_size", 128),
                         err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "attention_bias", 1, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, NULL, "swiglu_limit", hf_cfg_float(s, "mlp_activations_limit", 7),
                           err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "output_router_logits", 0, err);
    }
    return rc == UR_OK ? rope(m, j, err) : rc;
}

const hf_family hf_family_gpt_oss = {.name = "gpt_oss",
                                     .architecture = "GptOssForCausalLM",
                                     .applies = applies,
                                     .setup = setup,
                                     .shared = hf_rules_llama_like,
                                     .n_shared = HF_N_RULES_LLAMA_LIKE,
                                     .rules = rules,
                                     .n_rules = sizeof rules / sizeof rules[0],
                                     .config = config};
