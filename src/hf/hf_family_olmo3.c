/* OLMo 3: MaxText's olmo3 decoder block (olmo3-7b, olmo3-32b) as transformers'
 * Olmo3ForCausalLM, as MaxText's exporter maps it (OLMO3_MAXTEXT_TO_HF_PARAM_MAPPING and its
 * hooks): kernels transposed to [out, in], the attention kernels flattened over their heads,
 * everything else as it is.
 *
 * A post-norm layer: its attention's and its MLP's outputs are normalized (no norm before
 * them). The query and key norms are over all heads at once (MaxText's GlobalRMSNorm for
 * olmo3 models), as Hugging Face's. Three sliding-window layers, then a global one, repeated.
 * The query is scaled in the forward pass (query_pre_attn_scalar), not in the kernel, and
 * MaxText rotates halves: no reordering. MaxText applies its RoPE (YaRN for the released
 * models) to every layer, so config.json gives both layer types the same rope_parameters. */
#include "hf_impl.h"

#include "unroll/alloc.h"

#include <stdio.h>
#include <string.h>

static const hf_rule rules[] = {
    {"decoder/layers_{i}/attention/query/kernel", "model.layers.{i}.self_attn.q_proj.weight",
     "e h d -> (h d) e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/attention/key/kernel", "model.layers.{i}.self_attn.k_proj.weight",
     "e h d -> (h d) e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/attention/value/kernel", "model.layers.{i}.self_attn.v_proj.weight",
     "e h d -> (h d) e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/attention/out/kernel", "model.layers.{i}.self_attn.o_proj.weight",
     "h d e -> e (h d)", HF_OP_NONE, 0},
    {"decoder/layers_{i}/attention/query_norm/scale", "model.layers.{i}.self_attn.q_norm.weight",
     "x -> x", HF_OP_NONE, 0},
    {"decoder/layers_{i}/attention/key_norm/scale", "model.layers.{i}.self_attn.k_norm.weight",
     "x -> x", HF_OP_NONE, 0},
    {"decoder/layers_{i}/post_self_attention_layer_norm/scale",
     "model.layers.{i}.post_attention_layernorm.weight", "e -> e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/post_mlp_layer_norm/scale",
     "model.layers.{i}.post_feedforward_layernorm.weight", "e -> e", HF_OP_NONE, 0},
};

/* olmo3.py's OLMO3_ATTENTION_PATTERN: sliding, sliding, sliding, global. */
#define CYCLE 4

static int applies(const ur_settings *s)
{
    return strcmp(s->decoder_block, "olmo3") == 0;
}

static int setup(hf_model *m, ur_err *err)
{
    const ur_settings *s = m->s;
    const char *rope = hf_cfg_str(s, "rope_type", "default");
    const char *why = strcmp(rope, "default") != 0 && strcmp(rope, "yarn") != 0 ? "rope_type"
                      : !hf_cfg_bool(s, "use_qk_norm", 0)                       ? "no use_qk_norm"
                      : hf_cfg_bool(s, "attention_bias", 0)                     ? "attention_bias"
                      : hf_cfg_bool(s, "rope_interleave", 0) && strcmp(rope, "yarn") == 0
                          ? "rope_interleave"
                      : hf_cfg_int(s, "inhomogeneous_layer_cycle_interval", CYCLE) != CYCLE
                          ? "inhomogeneous_layer_cycle_interval other than 4"
                          : NULL;
    if (why != NULL) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: decoder_block olmo3 with %s has no Hugging Face "
                          "mapping here",
                          why);
    }
    m->flags |= hf_cfg_bool(s, "logits_via_embedding", 0) ? 0 : HF_IF_UNTIED;
    return UR_OK;
}

/* One layer type's rope_parameters: MaxText's RoPE (default, or YaRN with its settings). */
static int rope(const hf_model *m, hf_json *j, const char *type, ur_err *err)
{
    const ur_settings *s = m->s;
    char in[64];
    int yarn = strcmp(hf_cfg_str(s, "rope_type", "default"), "yarn") == 0;
    int rc;
    snprintf(in, sizeof in, "rope_parameters/%s", type);
    rc = hf_json_str(j, in, "rope_type", yarn ? "yarn" : "default", err);
    if (rc == UR_OK) {
        rc = hf_json_float(j, in, "rope_theta", hf_cfg_float(s, "rope_max_timescale", 10000), err);
    }
    if (yarn && rc == UR_OK) {
        rc = hf_config_yarn(m, j, in, 40, 1, err);
    }
    return rc;
}

static int config(const hf_model *m, hf_json *j, ur_err *err)
{
    const ur_settings *s = m->s;
    int yarn = strcmp(hf_cfg_str(s, "rope_type", "default"), "yarn") == 0;
    int rc = hf_config_decoder(m, j, "Olmo3ForCausalLM", "olmo3",
                               yarn ? hf_cfg_int(s, "max_position_embeddings", 65536) : 0, err);
    if (rc == UR_OK) {
        rc = hf_config_layer_types(m, j, NULL, CYCLE, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "sliding_window", hf_cfg_int(s, "sliding_window_size", 4096),
                         err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "attention_bias", 0, err);
    }
    if (rc == UR_OK) {
        rc = rope(m, j, "full_attention", err);
    }
    return rc == UR_OK ? rope(m, j, "sliding_attention", err) : rc;
}

const hf_family hf_family_olmo3 = {.name = "olmo3",
                                   .architecture = "Olmo3ForCausalLM",
                                   .applies = applies,
                                   .setup = setup,
                                   .shared = hf_rules_llama_like,
                                   .n_shared = HF_N_RULES_DECODER_BASE,
                                   .rules = rules,
                                   .n_rules = sizeof rules / sizeof rules[0],
                                   .config = config};
