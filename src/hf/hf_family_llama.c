/* Llama, Mistral and Mixtral: MaxText's llama2, mistral and mixtral decoder blocks (llama2,
 * llama3, llama3.1, llama3.3, mistral, mixtral models) as transformers' LlamaForCausalLM,
 * MistralForCausalLM and MixtralForCausalLM.
 *
 * The query and key kernels [emb, heads, head_dim] become [heads * head_dim, emb]; where
 * MaxText rotates interleaved pairs (LLaMARotaryEmbedding: llama3.1 models, rope_type
 * llama3.1) each head's dimensions are reordered evens then odds, since Hugging Face rotates
 * the two halves; where MaxText rotates halves (RotaryEmbedding: the others) they stay. MaxText
 * folds 1/sqrt(head_dim) into the query kernel (attention scores unscaled), Hugging Face
 * scales the scores: the query is multiplied back. MaxText's exporter does the same for
 * llama3.1 (LLAMA31_MAXTEXT_TO_HF_PARAM_HOOK_FN: scale, then adjust_rope, then reshape).
 * Mixtral's layers have routed experts in place of the MLP: the router, and each expert's
 * three kernels (MaxText's [experts, in, out] arrays, cut by expert) as w1, w3 and w2, as
 * MaxText's exporter names them (MIXTRAL_MAXTEXT_TO_HF_PARAM_MAPPING). */
#include "hf_impl.h"

#include <string.h>

#define Q_INTERLEAVED "e h (k 2) -> (h 2 k) e"
#define Q_HALVES "e h d -> (h d) e"

static const hf_rule rules[] = {
    {"decoder/layers_{i}/self_attention/query/kernel", "model.layers.{i}.self_attn.q_proj.weight",
     Q_INTERLEAVED, HF_OP_MUL_SQRT_HEAD_DIM, HF_IF_ROPE_INTERLEAVED | HF_IF_QUERY_SCALED},
    {"decoder/layers_{i}/self_attention/query/kernel", "model.layers.{i}.self_attn.q_proj.weight",
     Q_INTERLEAVED, HF_OP_NONE, HF_IF_ROPE_INTERLEAVED | HF_IF_QUERY_UNSCALED},
    {"decoder/layers_{i}/self_attention/query/kernel", "model.layers.{i}.self_attn.q_proj.weight",
     Q_HALVES, HF_OP_MUL_SQRT_HEAD_DIM, HF_IF_ROPE_HALVES | HF_IF_QUERY_SCALED},
    {"decoder/layers_{i}/self_attention/query/kernel", "model.layers.{i}.self_attn.q_proj.weight",
     Q_HALVES, HF_OP_NONE, HF_IF_ROPE_HALVES | HF_IF_QUERY_UNSCALED},
    {"decoder/layers_{i}/self_attention/key/kernel", "model.layers.{i}.self_attn.k_proj.weight",
     Q_INTERLEAVED, HF_OP_NONE, HF_IF_ROPE_INTERLEAVED},
    {"decoder/layers_{i}/self_attention/key/kernel", "model.layers.{i}.self_attn.k_proj.weight",
     Q_HALVES, HF_OP_NONE, HF_IF_ROPE_HALVES},
    {"decoder/layers_{i}/self_attention/value/kernel", "model.layers.{i}.self_attn.v_proj.weight",
     "e h d -> (h d) e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/self_attention/out/kernel", "model.layers.{i}.self_attn.o_proj.weight",
     "h d e -> e (h d)", HF_OP_NONE, 0},
#define MOE(mt, hf) "decoder/layers_{i}/MoeBlock_0/" mt, "model.layers.{i}.block_sparse_moe." hf
    {MOE("gate/kernel", "gate.weight"), "e x -> x e", HF_OP_NONE, HF_IF_EXPERTS},
    {MOE("wi_0", "experts.{e}.w1.weight"), "e m -> m e", HF_OP_NONE, HF_IF_EXPERTS},
    {MOE("wi_1", "experts.{e}.w3.weight"), "e m -> m e", HF_OP_NONE, HF_IF_EXPERTS},
    {MOE("wo", "experts.{e}.w2.weight"), "m e -> e m", HF_OP_NONE, HF_IF_EXPERTS},
#undef MOE
};

static int applies_llama(const ur_settings *s)
{
    return strcmp(s->decoder_block, "llama2") == 0;
}

static int applies_mistral(const ur_settings *s)
{
    return strcmp(s->decoder_block, "mistral") == 0;
}

static int applies_mixtral(const ur_settings *s)
{
    return strcmp(s->decoder_block, "mixtral") == 0;
}

static const char *architecture(const ur_settings *s)
{
    return applies_llama(s)     ? "LlamaForCausalLM"
           : applies_mixtral(s) ? "MixtralForCausalLM"
                                : "MistralForCausalLM";
}

/* 1 when MaxText rotates interleaved pairs for these settings (attentions.py: model_name
 * llama3.1*, or rope_type llama3.1*: LLaMARotaryEmbedding). */
static int rope_interleaved(const ur_settings *s)
{
    return hf_starts(s->model_name, "llama3.1") ||
           hf_starts(hf_cfg_str(s, "rope_type", "default"), "llama3.1");
}

static int setup(hf_model *m, ur_err *err)
{
    const ur_settings *s = m->s;
    const char *rope = hf_cfg_str(s, "rope_type", "default");
    if (!rope_interleaved(s) && strcmp(rope, "default") != 0) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: rope_type %s of decoder_block %s has no "
                          "Hugging Face mapping here",
                          rope, s->decoder_block);
    }
    if (hf_cfg_bool(s, "use_qk_norm", 0) || hf_cfg_bool(s, "attention_bias", 0)) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: decoder_block %s with use_qk_norm or "
                          "attention_bias has no place in %s",
                          s->decoder_block, architecture(s));
    }
    if (applies_mixtral(s)) {
        /* intermediate_size is the experts' (Mixtral's MLP is its experts) */
        int rank = 0;
        const uint64_t *wi = hf_model_shape(m, "decoder/layers_0/MoeBlock_0/wi_0", &rank);
        m->flags = (m->flags & ~(unsigned)HF_IF_DENSE_MLP) | HF_IF_EXPERTS;
        m->intermediate_size = wi != NULL && rank == 3 ? wi[2] : 0;
    }
    m->flags |= rope_interleaved(s) ? HF_IF_ROPE_INTERLEAVED : HF_IF_ROPE_HALVES;
    m->flags |= HF_IF_QUERY_SCALED;
    m->flags |= hf_cfg_bool(s, "logits_via_embedding", 0) ? 0 : HF_IF_UNTIED;
    return UR_OK;
}

/* Mixtral's routing: num_experts_per_tok of num_local_experts, from the router's shape. */
static int config_experts(const hf_model *m, hf_json *j, ur_err *err)
{
    int rank = 0;
    const uint64_t *gate = hf_model_shape(m, "decoder/layers_0/MoeBlock_0/gate/kernel", &rank);
    int rc;
    if (gate == NULL || rank != 2) {
        return ur_err_set(err, UR_EINVAL,
                          "Hugging Face export: the checkpoint lacks layer 0's "
                          "MoeBlock_0/gate/kernel [emb, experts] of a mixtral model");
    }
    rc = hf_json_int(j, NULL, "num_local_experts", (int64_t)gate[1], err);
    if (rc == UR_OK) {
        rc = hf_json_int(j, NULL, "num_experts_per_tok",
                         hf_cfg_int(m->s, "num_experts_per_tok", 1), err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, NULL, "output_router_logits", 0, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, NULL, "router_aux_loss_coef", 0.001, err);
    }
    return rc == UR_OK ? hf_json_float(j, NULL, "router_jitter_noise", 0.0, err) : rc;
}

static int config(const hf_model *m, hf_json *j, ur_err *err)
{
    const ur_settings *s = m->s;
    int scaled = rope_interleaved(s) && hf_cfg_bool(s, "rope_use_scale", 1);
    int mistral = !applies_llama(s);
    /* the llama3 scaling's 8192 original positions need a longer context (Llama 3.1's) */
    int rc = hf_config_decoder(m, j, architecture(s),
                               applies_llama(s)     ? "llama"
                               : applies_mixtral(s) ? "mixtral"
                                                    : "mistral",
                               scaled ? 131072 : 0, err);
    if (rc == UR_OK && applies_mixtral(s)) {
        rc = config_experts(m, j, err);
    }
    if (mistral) {
        if (rc == UR_OK) {
            rc = hf_json_null(j, NULL, "sliding_window", err);
        }
    } else {
        if (rc == UR_OK) {
            rc = hf_json_bool(j, NULL, "attention_bias", 0, err);
        }
        if (rc == UR_OK) {
            rc = hf_json_bool(j, NULL, "mlp_bias", 0, err);
        }
        if (rc == UR_OK) {
            rc = hf_json_int(j, NULL, "pretraining_tp", 1, err);
        }
    }
    /* transformers 5's rope_parameters (as MaxText's exporter writes them): the theta, and
     * LLaMARotaryEmbedding's scaling (factor 8, frequency factors 1 and 4, 8192 positions) */
    if (rc == UR_OK) {
        rc = hf_config_rope(m, j, NULL, scaled ? "llama3" : "default", err);
    }
    return rc == UR_OK && scaled ? hf_config_llama3_scaling(j, err) : rc;
}

/* The three share the table, its setup and config.json's writer: only the class differs. */
#define FAMILY(nm, arch, app)                                                                     \
    {                                                                                             \
        .name = (nm), .architecture = (arch), .applies = (app), .setup = setup,                   \
        .shared = hf_rules_llama_like, .n_shared = HF_N_RULES_LLAMA_LIKE, .rules = rules,         \
        .n_rules = sizeof rules / sizeof rules[0], .config = config                               \
    }
const hf_family hf_family_llama = FAMILY("llama", "LlamaForCausalLM", applies_llama);
const hf_family hf_family_mistral = FAMILY("mistral", "MistralForCausalLM", applies_mistral);
const hf_family hf_family_mixtral = FAMILY("mixtral", "MixtralForCausalLM", applies_mixtral);
