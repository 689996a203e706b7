/* Gemma 2: MaxText's gemma2 decoder block (gemma2-2b, -9b, -27b) as transformers'
 * Gemma2ForCausalLM, as MaxText's exporter maps it (GEMMA2_MAXTEXT_TO_HF_PARAM_MAPPING and
 * its hooks).
 *
 * One MaxText layer is a pair: its "_local" half (sliding window) is Hugging Face's layer 2i,
 * its "_global" half layer 2i + 1. As in Gemma 3, every RMSNorm scale is Hugging Face's
 * weight plus one, and the embedding is stored multiplied by sqrt(hidden_size) (here the
 * float32 root) and padded to 256128 rows, of which Hugging Face's vocabulary keeps 256000.
 * MaxText folds 1/sqrt(head_dim) into the query kernel and leaves the scores unscaled: the
 * query is multiplied back, and config.json's query_pre_attn_scalar is head_dim, so that
 * transformers computes what MaxText computes (its own table's 224 and 144 for -9b and -27b
 * would scale the scores differently from MaxText's forward pass). */
#include "hf_impl.h"

#include "unroll/alloc.h"

#include <string.h>

/* a part of the pair, both halves */
#define PAIR(part, rest, hf, pattern, op)                                                         \
    {"decoder/layers_{i}/" part "_local/" rest, "model.layers.{2i}." hf, pattern, op, 0},         \
    {                                                                                             \
        "decoder/layers_{i}/" part "_global/" rest, "model.layers.{2i+1}." hf, pattern, op, 0     \
    }
#define NORM(part, hf) PAIR(part, "scale", hf ".weight", "e -> e", HF_OP_SUB_ONE)

static const hf_rule rules[] = {
    {"token_embedder/embedding", "model.embed_tokens.weight", "v e -> v e", HF_OP_DIV_SQRT_EMB, 0},
    {"decoder/decoder_norm/scale", "model.norm.weight", "e -> e", HF_OP_SUB_ONE, 0},
    {"decoder/logits_dense/kernel", "lm_head.weight", "e v -> v e", HF_OP_NONE, HF_IF_UNTIED},
    NORM("pre_self_attention_norm", "input_layernorm"),
    NORM("post_self_attention_norm", "post_attention_layernorm"),
    NORM("pre_ffw_norm", "pre_feedforward_layernorm"),
    NORM("post_ffw_norm", "post_feedforward_layernorm"),
    PAIR("self_attention", "query/kernel", "self_attn.q_proj.weight", "e h d -> (h d) e",
         HF_OP_MUL_SQRT_HEAD_DIM),
    PAIR("self_attention", "key/kernel", "self_attn.k_proj.weight", "e h d -> (h d) e",
         HF_OP_NONE),
    PAIR("self_attention", "value/kernel", "self_attn.v_proj.weight", "e h d -> (h d) e",
         HF_OP_NONE),
    PAIR("self_attention", "out/kernel", "self_attn.o_proj.weight", "h d e -> e (h d)",
         HF_OP_NONE),
    PAIR("mlp", "wi_0/kernel", "mlp.gate_proj.weight", "e m -> m e", HF_OP_NONE),
    PAIR("mlp", "wi_1/kernel", "mlp.up_proj.weight", "e m -> m e", HF_OP_NONE),
    PAIR("mlp", "wo/kernel", "mlp.down_proj.weight", "m e -> e m", HF_OP_NONE),
};

/* MaxText pads Gemma's 256000-token vocabulary to 256128 rows. */
#define PADDED_VOCAB 256128
#define VOCAB 256000

static int applies(const ur_settings *s)
{
    return strcmp(s->decoder_block, "gemma2") == 0;
}

static int setup(hf_model *m, ur_err *err)
{
    const ur_settings *s = m->s;
    double local = hf_cfg_float(s, "local_rope_max_timescale", -1);
    int rank = 0;
    const uint64_t *e = hf_model_shape(m, "token_embedder/embedding", &rank);

    /* Gemma2Config has one RoPE for both kinds of layer */
    if (local > 0 && local != hf_cfg_float(s, "rope_max_timescale", 10000)) {
        return ur_err_set(
            err, UR_EUNSUPPORTED,
            "Hugging Face export: decoder_block gemma2 with a local_rope_max_timescale "
            "of its own has no place in Gemma2ForCausalLM");
    }
    if (!hf_cfg_bool(s, "use_post_attn_norm", 1) || !hf_cfg_bool(s, "use_post_ffw_norm", 1)) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: decoder_block gemma2 without its post-attention "
                          "or post-MLP norm has no place in Gemma2ForCausalLM");
    }
    m->per_layer = 2;
    m->vocab_rows = e != NULL && rank == 2 && e[0] == PADDED_VOCAB ? VOCAB : 0;
    m->flags |= hf_cfg_bool(s, "logits_via_embedding", 1) ? 0 : HF_IF_UNTIED;
    return UR_OK;
}

static int config(const hf_model *m, hf_json *j, ur_err *err)
{
    static const char *const arch = "Gemma2ForCausalLM";
    const ur_settings *s = m->s;
    double factor = hf_cfg_float(s, "rope_linear_scaling_factor", 1);
    int rank = 0;
    const uint64_t *q = hf_model_shape(m, "decoder/layers_0/self_attention_local/query/kernel",
                                       &rank);
    int rc = hf_json_strs(j, NULL, "architectures", &arch, 1, err);

    if (rc == UR_OK) {
        rc = hf_json_str(j, NULL, "model_type", "gemma2", err);
    }
    if (rc == UR_OK) {
        rc = hf_config_text(m, j, NULL, 8192, err); /* Gemma 2's context */
    }
    if (rc == UR_OK) {
        rc = hf_config_gemma(m, j, NULL, q != NULL && rank == 3 ? (int64_t)q[2] : 256, err);
    }
    if (rc == UR_OK) {
        rc = hf_config_layer_types(m, j, NULL, 2, err); /* local, then global */
    }
    if (rc == UR_OK) {
        rc = hf_config_rope(m, j, NULL, factor != 1 ? "linear" : "default", err);
    }
    if (rc == UR_OK && factor != 1) {
        rc = hf_json_float(j, "rope_parameters", "factor", factor, err);
    }
    return rc;
}

const hf_family hf_family_gemma2 = {.name = "gemma2",
                                    .architecture = "Gemma2ForCausalLM",
                                    .applies = applies,
                                    .setup = setup,
                                    .rules = rules,
                                    .n_rules = sizeof rules / sizeof rules[0],
                                    .config = config};
