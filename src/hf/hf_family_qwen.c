/* Qwen3, Qwen3-MoE and Qwen2.5: MaxText's qwen3, qwen3_moe and qwen2 decoder blocks (qwen3-*,
 * qwen3-30b-a3b, qwen3-235b-a22b, qwen3-coder-480b-a35b, qwen2.5-* models) as transformers'
 * Qwen3ForCausalLM, Qwen3MoeForCausalLM and Qwen2ForCausalLM, as MaxText's exporter maps them
 * (QWEN_MAXTEXT_TO_HF_PARAM_MAPPING and its hooks).
 *
 * Kernels are transposed to [out, in], the attention kernels flattened over their heads; no
 * RoPE reordering (MaxText rotates halves here, as Hugging Face does) and no query scale
 * (these blocks scale the query in the forward pass, query_pre_attn_scalar, not in the kernel).
 * Qwen3 adds per-head query and key norms, Qwen2.5 biases on the query, key and value.
 * Qwen3-MoE's layers have routed experts in place of the MLP: the router, and each expert's
 * three kernels (MaxText's [experts, in, out] arrays, cut by expert) as a tensor of its own,
 * as MaxText's exporter writes them (transformers fuses them as it loads). */
#include "hf_impl.h"

#include "unroll/alloc.h"

#include <string.h>

static const hf_rule rules[] = {
    {"decoder/layers_{i}/self_attention/query/kernel", "model.layers.{i}.self_attn.q_proj.weight",
     "e h d -> (h d) e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/self_attention/key/kernel", "model.layers.{i}.self_attn.k_proj.weight",
     "e h d -> (h d) e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/self_attention/value/kernel", "model.layers.{i}.self_attn.v_proj.weight",
     "e h d -> (h d) e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/self_attention/out/kernel", "model.layers.{i}.self_attn.o_proj.weight",
     "h d e -> e (h d)", HF_OP_NONE, 0},
    {"decoder/layers_{i}/self_attention/query/bias", "model.layers.{i}.self_attn.q_proj.bias",
     "h d -> (h d)", HF_OP_NONE, HF_IF_ATTENTION_BIAS},
    {"decoder/layers_{i}/self_attention/key/bias", "model.layers.{i}.self_attn.k_proj.bias",
     "h d -> (h d)", HF_OP_NONE, HF_IF_ATTENTION_BIAS},
    {"decoder/layers_{i}/self_attention/value/bias", "model.layers.{i}.self_attn.v_proj.bias",
     "h d -> (h d)", HF_OP_NONE, HF_IF_ATTENTION_BIAS},
    {"decoder/layers_{i}/self_attention/query_norm/scale",
     "model.layers.{i}.self_attn.q_norm.weight", "d -> d", HF_OP_NONE, HF_IF_QK_NORM},
    {"decoder/layers_{i}/self_attention/key_norm/scale",
     "model.layers.{i}.self_attn.k_norm.weight", "d -> d", HF_OP_NONE, HF_IF_QK_NORM},
    {"decoder/layers_{i}/moe_block/gate/kernel", "model.layers.{i}.mlp.gate.weight", "e x -> x e",
     HF_OP_NONE, HF_IF_EXPERTS},
    {"decoder/layers_{i}/moe_block/wi_0", "model.layers.{i}.mlp.experts.{e}.gate_proj.weight",
     "e m -> m e", HF_OP_NONE, HF_IF_EXPERTS},
    {"decoder/layers_{i}/moe_block/wi_1", "model.layers.{i}.mlp.experts.{e}.up_proj.weight",
     "e m -> m e", HF_OP_NONE, HF_IF_EXPERTS},
    {"decoder/layers_{i}/moe_block/wo", "model.layers.{i}.mlp.experts.{e}.down_proj.weight",
     "m e -> e m", HF_OP_NONE, HF_IF_EXPERTS},
};

static int applies_qwen3(const ur_settings *s)
{
    return strcmp(s->decoder_block, "qwen3") == 0;
}

static int applies_qwen3_moe(const ur_settings *s)
{
    return strcmp(s->decoder_block, "qwen3_moe") == 0;
}

static int applies_qwen2(const ur_settings *s)
{
    return strcmp(s->decoder_block, "qwen2") == 0;
}

/* What these Hugging Face classes cannot hold: another RoPE, experts in the dense ones (or
 * none, or shared ones, in Qwen3-MoE's), the query and key norms in Qwen2 or the biases in
 * Qwen3. */
static int setup(hf_model *m, ur_err *err)
{
    const ur_settings *s = m->s;
    int qwen3 = !applies_qwen2(s), moe = applies_qwen3_moe(s);
    int64_t experts = hf_cfg_int(s, "num_experts", 1);
    const char *rope = hf_cfg_str(s, "rope_type", "default");
    const char *why = strcmp(rope, "default") != 0                    ? "rope_type"
                      : !moe && experts > 1                           ? "num_experts > 1"
                      : moe && experts < 2                            ? "num_experts < 2"
                      : moe && hf_cfg_int(s, "shared_experts", 0) > 0 ? "shared_experts"
                      : qwen3 && hf_cfg_bool(s, "attention_bias", 0)  ? "attention_bias"
                      : !qwen3 && hf_cfg_bool(s, "use_qk_norm", 0)    ? "use_qk_norm"
                                                                      : NULL;
    if (why != NULL) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: decoder_block %s with %s has no Hugging Face "
                          "mapping here",
                          s->decoder_block, why);
    }
    m->flags |= hf_cfg_bool(s, "logits_via_embedding", 0) ? 0 : HF_IF_UNTIED;
    m->flags |= hf_cfg_bool(s, "use_qk_norm", 0) ? HF_IF_QK_NORM : 0;
    m->flags |= hf_cfg_bool(s, "attention_bias", 0) ? HF_IF_ATTENTION_BIAS : 0;
    if (moe) {
        /* intermediate_size: a dense layer's (it has none), as Qwen3-MoE's own configs
         * give it and MaxText's exporter checks it: mlp_dim times the experts a token gets
         * (qwen3-30b-a3b: 768 x 8 = 6144) */
        m->flags = (m->flags & ~(unsigned)HF_IF_DENSE_MLP) | HF_IF_EXPERTS;
        m->intermediate_size = (uint64_t)(hf_cfg_int(s, "base_mlp_dim", 0) *
                                          hf_cfg_int(s, "num_experts_per_tok", 1));
    }
    return UR_OK;
}

/* Qwen's attention-window entries: full attention in every layer. */
static int windows(const hf_model *m, hf_json *j, ur_err *err)
{
    int rc = hf_json_bool(j, NULL, "use_sliding_window", 0, err);
    if (rc == UR_OK) {
        rc = hf_json_null(j, NULL, "sliding_window", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "max_window_layers", m->n_layers, err);
    }
    if (rc == UR_OK) {
        const char **types = ur_calloc((size_t)m->n_layers + 1, sizeof *types);
        if (types == NULL) {
            return ur_err_oom(err);
        }
        for (int64_t i = 0; i < m->n_layers; i++) {
            types[i] = "full_attention";
        }
        rc = hf_json_strs(j, NULL, "layer_types", types, (size_t)m->n_layers, err);
        ur_free(types);
    }
    return rc;
}

static int config_qwen3(const hf_model *m, hf_json *j, ur_err *err)
{
    int rc = hf_config_decoder(m, j, "Qwen3ForCausalLM", "qwen3", 0, err);
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "attention_bias", 0, err);
    }
    if (rc == UR_OK) {
        rc = windows(m, j, err);
    }
    return rc == UR_OK ? hf_config_rope(m, j, NULL, "default", err) : rc;
}

/* Qwen3-MoE: every layer's MLP routed (decoder_sparse_step 1, no mlp_only_layers), the
 * experts' sizes from layer 0's kernels. */
static int config_qwen3_moe(const hf_model *m, hf_json *j, ur_err *err)
{
    const ur_settings *s = m->s;
    int rank = 0;
    const uint64_t *wi = hf_model_shape(m, "decoder/layers_0/moe_block/wi_0", &rank);
    int rc;
    if (wi == NULL || rank != 3) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export: the checkpoint lacks layer 0's moe_block/wi_0 "
                          "[experts, emb, mlp] of a qwen3_moe model");
    }
    rc = hf_config_decoder(m, j, "Qwen3MoeForCausalLM", "qwen3_moe", 0, err);
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "num_experts", (int64_t)wi[0], err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "moe_intermediate_size", (int64_t)wi[2], err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "num_experts_per_tok", hf_cfg_int(s, "num_experts_per_tok", 1),
                         err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "norm_topk_prob", hf_cfg_bool(s, "norm_topk_prob", 0), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "decoder_sparse_step", 1, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_strs(j, NULL, "mlp_only_layers", NULL, 0, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "output_router_logits", 0, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, NULL, "router_aux_loss_coef", 0.001, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "attention_bias", 0, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "use_sliding_window", 0, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_null(j, NULL, "sliding_window", err);
    }
    return rc == UR_OK ? hf_config_rope(m, j, NULL, "default", err) : rc;
}

static int config_qwen2(const hf_model *m, hf_json *j, ur_err *err)
{
    int rc = hf_config_decoder(m, j, "Qwen2ForCausalLM", "qwen2", 0, err);
    if (rc == UR_OK) {
        rc = windows(m, j, err);
    }
    return rc == UR_OK ? hf_config_rope(m, j, NULL, "default", err) : rc;
}

/* The three share the table and its setup; the class and config.json's writer differ. */
#define FAMILY(nm, arch, app, cfg)                                                                \
    {                                                                                             \
        .name = (nm), .architecture = (arch), .applies = (app), .setup = setup,                   \
        .shared = hf_rules_llama_like, .n_shared = HF_N_RULES_LLAMA_LIKE, .rules = rules,         \
        .n_rules = sizeof rules / sizeof rules[0], .config = (cfg)                                \
    }
const hf_family hf_family_qwen3 = FAMILY("qwen3", "Qwen3ForCausalLM", applies_qwen3, config_qwen3);
const hf_family hf_family_qwen3_moe = FAMILY("qwen3_moe", "Qwen3MoeForCausalLM", applies_qwen3_moe,
                                             config_qwen3_moe);
const hf_family hf_family_qwen2 = FAMILY("qwen2", "Qwen2ForCausalLM", applies_qwen2, config_qwen2);
