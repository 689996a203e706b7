/* Gemma 3: MaxText's gemma3 decoder block (gemma3-4b, -12b, -27b) as transformers'
 * Gemma3ForConditionalGeneration, as MaxText's exporter maps it
 * (GEMMA3_MAXTEXT_TO_HF_PARAM_MAPPING and its hooks): the language model under
 * "model.language_model.", kernels transposed to [out, in] and flattened over their heads.
 *
 * MaxText stores what Hugging Face computes differently: every RMSNorm scale is Hugging
 * Face's weight plus one (Gemma's norm multiplies by 1 + weight), and the embedding is
 * stored multiplied by sqrt(hidden_size), which Hugging Face's forward pass applies itself
 * (the exporter divides by that root rounded to bfloat16, as it does). MaxText scales the
 * query in the forward pass (query_pre_attn_scalar), not in the kernel, and rotates halves:
 * no reordering. Five sliding-window layers, then a global one, repeated; the global ones'
 * RoPE has its own theta and a linear scaling. A text-only export (use_multimodal=false) has
 * no vision tower, as MaxText's exporter's has none: transformers loads it with a fresh one.
 * A multimodal one (use_multimodal) has the SigLIP tower and the projector, as the exporter
 * writes them: the patch convolution [kh, kw, in, out] as [out, in, kh, kw], the position
 * embedding without its leading axis, attention kernels flattened over their heads and
 * transposed, their biases flattened, the MLP's kernels transposed, LayerNorms copied, the
 * projection as it is and its soft-embedding norm less one. */
#include "hf_impl.h"

#include "unroll/alloc.h"

#include <stdio.h>
#include <string.h>

#define LM "model.language_model."
#define NORM(mt, hf)                                                                              \
    {                                                                                             \
        "decoder/layers_{i}/" mt "/scale", LM "layers.{i}." hf ".weight", "e -> e",               \
            HF_OP_SUB_ONE, 0                                                                      \
    }

static const hf_rule rules[] = {
    {"token_embedder/embedding", LM "embed_tokens.weight", "v e -> v e", HF_OP_DIV_SQRT_EMB_BF16,
     0},
    {"decoder/decoder_norm/scale", LM "norm.weight", "e -> e", HF_OP_SUB_ONE, 0},
    {"decoder/logits_dense/kernel", "lm_head.weight", "e v -> v e", HF_OP_NONE, HF_IF_UNTIED},
    NORM("pre_self_attention_norm", "input_layernorm"),
    NORM("post_self_attention_norm", "post_attention_layernorm"),
    NORM("pre_ffw_norm", "pre_feedforward_layernorm"),
    NORM("post_ffw_norm", "post_feedforward_layernorm"),
    NORM("self_attention/query_norm", "self_attn.q_norm"),
    NORM("self_attention/key_norm", "self_attn.k_norm"),
    {"decoder/layers_{i}/self_attention/query/kernel", LM "layers.{i}.self_attn.q_proj.weight",
     "e h d -> (h d) e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/self_attention/key/kernel", LM "layers.{i}.self_attn.k_proj.weight",
     "e h d -> (h d) e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/self_attention/value/kernel", LM "layers.{i}.self_attn.v_proj.weight",
     "e h d -> (h d) e", HF_OP_NONE, 0},
    {"decoder/layers_{i}/self_attention/out/kernel", LM "layers.{i}.self_attn.o_proj.weight",
     "h d e -> e (h d)", HF_OP_NONE, 0},
    {"decoder/layers_{i}/mlp/wi_0/kernel", LM "layers.{i}.mlp.gate_proj.weight", "e m -> m e",
     HF_OP_NONE, 0},
    {"decoder/layers_{i}/mlp/wi_1/kernel", LM "layers.{i}.mlp.up_proj.weight", "e m -> m e",
     HF_OP_NONE, 0},
    {"decoder/layers_{i}/mlp/wo/kernel", LM "layers.{i}.mlp.down_proj.weight", "m e -> e m",
     HF_OP_NONE, 0},
#define ENC "vision_encoder/Gemma3VisionEncoderLayer_0/"
#define TOWER "model.vision_tower.vision_model."
#define VIS(mt, hf, pattern)                                                                      \
    {                                                                                             \
        ENC "Transformer/encoderblock_{i}/" mt, TOWER "encoder.layers.{i}." hf, pattern,          \
            HF_OP_NONE, HF_IF_VISION | HF_VISION_LAYERS                                           \
    }
    {ENC "embedding/kernel", TOWER "embeddings.patch_embedding.weight", "h w c o -> o c h w",
     HF_OP_NONE, HF_IF_VISION},
    {ENC "embedding/bias", TOWER "embeddings.patch_embedding.bias", "o -> o", HF_OP_NONE,
     HF_IF_VISION},
    {ENC "pos_embedding", TOWER "embeddings.position_embedding.weight", "b n d -> (b n) d",
     HF_OP_NONE, HF_IF_VISION},
    {ENC "Transformer/encoder_norm/scale", TOWER "post_layernorm.weight", "d -> d", HF_OP_NONE,
     HF_IF_VISION},
    {ENC "Transformer/encoder_norm/bias", TOWER "post_layernorm.bias", "d -> d", HF_OP_NONE,
     HF_IF_VISION},
    {"vision_encoder/VisionEmbedder_0/mm_input_projection/w",
     "model.multi_modal_projector.mm_input_projection_weight", "v t -> v t", HF_OP_NONE,
     HF_IF_VISION},
    {"vision_encoder/VisionEmbedder_0/mm_soft_embedding_norm/scale",
     "model.multi_modal_projector.mm_soft_emb_norm.weight", "v -> v", HF_OP_SUB_ONE, HF_IF_VISION},
    VIS("LayerNorm_0/scale", "layer_norm1.weight", "d -> d"),
    VIS("LayerNorm_0/bias", "layer_norm1.bias", "d -> d"),
    VIS("LayerNorm_1/scale", "layer_norm2.weight", "d -> d"),
    VIS("LayerNorm_1/bias", "layer_norm2.bias", "d -> d"),
    VIS("MultiHeadDotProductAttention_0/query/kernel", "self_attn.q_proj.weight",
        "e h d -> (h d) e"),
    VIS("MultiHeadDotProductAttention_0/query/bias", "self_attn.q_proj.bias", "h d -> (h d)"),
    VIS("MultiHeadDotProductAttention_0/key/kernel", "self_attn.k_proj.weight",
        "e h d -> (h d) e"),
    VIS("MultiHeadDotProductAttention_0/key/bias", "self_attn.k_proj.bias", "h d -> (h d)"),
    VIS("MultiHeadDotProductAttention_0/value/kernel", "self_attn.v_proj.weight",
        "e h d -> (h d) e"),
    VIS("MultiHeadDotProductAttention_0/value/bias", "self_attn.v_proj.bias", "h d -> (h d)"),
    VIS("MultiHeadDotProductAttention_0/out/kernel", "self_attn.out_proj.weight",
        "h d e -> e (h d)"),
    VIS("MultiHeadDotProductAttention_0/out/bias", "self_attn.out_proj.bias", "e -> e"),
    VIS("MlpBlockViT_0/Dense_0/kernel", "mlp.fc1.weight", "e m -> m e"),
    VIS("MlpBlockViT_0/Dense_0/bias", "mlp.fc1.bias", "m -> m"),
    VIS("MlpBlockViT_0/Dense_1/kernel", "mlp.fc2.weight", "m e -> e m"),
    VIS("MlpBlockViT_0/Dense_1/bias", "mlp.fc2.bias", "e -> e"),
#undef VIS
#undef TOWER
#undef ENC
};

/* gemma3.py's GEMMA3_ATTENTION_PATTERN: five sliding, then one global. */
#define CYCLE 6
#define TEXT "text_config"

static int applies(const ur_settings *s)
{
    return strcmp(s->decoder_block, "gemma3") == 0;
}

/* Hugging Face scales scores by query_pre_attn_scalar ** -0.5; MaxText multiplies the
 * query by gemma3.py's get_query_pre_attn_scalar: head_dim ** -0.5 for gemma3-4b and
 * -12b, (emb // heads) ** -0.5 for gemma3-27b, and refuses any other model (0 here). */
static int64_t query_pre_attn_scalar(const hf_model *m)
{
    const ur_settings *s = m->s;
    int rank = 0;
    const uint64_t *q = hf_model_shape(m, "decoder/layers_0/self_attention/query/kernel", &rank);
    if (s->model_name == NULL || q == NULL || rank != 3) {
        return 0;
    }
    if (strcmp(s->model_name, "gemma3-4b") == 0 || strcmp(s->model_name, "gemma3-12b") == 0) {
        return (int64_t)q[2];
    }
    if (strcmp(s->model_name, "gemma3-27b") == 0) {
        int64_t heads = hf_cfg_int(s, "base_num_query_heads", 0);
        return heads > 0 ? hf_cfg_int(s, "base_emb_dim", 0) / heads : 0;
    }
    return 0;
}

static int setup(hf_model *m, ur_err *err)
{
    const ur_settings *s = m->s;
    if (!hf_cfg_bool(s, "use_post_attn_norm", 1) || !hf_cfg_bool(s, "use_post_ffw_norm", 1)) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: decoder_block gemma3 without its post-attention "
                          "or post-MLP norm has no place in Gemma3ForConditionalGeneration");
    }
    m->flags |= hf_cfg_bool(s, "logits_via_embedding", 1) ? 0 : HF_IF_UNTIED;
    m->flags |= hf_cfg_bool(s, "use_multimodal", 0) ? HF_IF_VISION : 0;
    return UR_OK;
}

/* config.json's text_config entries beyond every decoder's. */
static int text_config(const hf_model *m, hf_json *j, ur_err *err)
{
    const ur_settings *s = m->s;
    double theta = hf_cfg_float(s, "rope_max_timescale", 10000);
    double local = hf_cfg_float(s, "local_rope_max_timescale", 0);
    double factor = hf_cfg_float(s, "rope_linear_scaling_factor", 1);
    int64_t scalar = query_pre_attn_scalar(m);
    int rc = UR_OK;

    if (scalar <= 0) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "Hugging Face export: model_name %s: MaxText scales gemma3's query "
                          "for gemma3-4b, gemma3-12b and gemma3-27b only",
                          s->model_name != NULL ? s->model_name : "(none)");
    }
    rc = hf_json_str(j, TEXT, "model_type", "gemma3_text", err);
    if (rc == UR_OK) {
        rc = hf_config_gemma(m, j, TEXT, scalar, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_bool(j, TEXT, "use_bidirectional_attention", 0, err);
    }
    /* the global layers' RoPE: rope_max_timescale, scaled linearly; the sliding ones':
     * local_rope_max_timescale when positive, unscaled (attentions.py) */
    if (rc == UR_OK) {
        rc = hf_json_str(j, TEXT "/rope_parameters/full_attention", "rope_type",
                         factor != 1 ? "linear" : "default", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, TEXT "/rope_parameters/full_attention", "rope_theta", theta, err);
    }
    if (rc == UR_OK && factor != 1) {
        rc = hf_json_float(j, TEXT "/rope_parameters/full_attention", "factor", factor, err);
    }
    if (rc == UR_OK) {
        rc = hf_json_str(j, TEXT "/rope_parameters/sliding_attention", "rope_type", "default",
                         err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, TEXT "/rope_parameters/sliding_attention", "rope_theta",
                           local > 0 ? local : theta, err);
    }
    return rc;
}

/* The vision tower's shape from MaxText's *_for_vit keys (gemma3's SigLIP by default), so
 * that the configuration is the model's even where the export has no vision weights. */
static int vision_config(const hf_model *m, hf_json *j, ur_err *err)
{
    static const hf_vit_key vit[] = {
        {"hidden_size", "hidden_size_for_vit", 1152},
        {"intermediate_size", "intermediate_size_for_vit", 4304},
        {"num_hidden_layers", "num_hidden_layers_for_vit", 27},
        {"num_attention_heads", "num_attention_heads_for_vit", 16},
        {"image_size", "image_size_for_vit", 896},
        {"patch_size", "patch_size_for_vit", 14},
        {"num_channels", "num_channels_for_vit", 3},
    };
    int rc = hf_config_vision(m, j, "siglip_vision_model", vit, sizeof vit / sizeof vit[0], err);
    if (rc == UR_OK) {
        rc = hf_json_str(j, "vision_config", "hidden_act", "gelu_pytorch_tanh", err);
    }
    if (rc == UR_OK) {
        rc = hf_json_float(j, "vision_config", "layer_norm_eps", 1e-6, err);
    }
    return rc == UR_OK ? hf_json_bool(j, "vision_config", "vision_use_head", 0, err) : rc;
}

static int config(const hf_model *m, hf_json *j, ur_err *err)
{
    int rc = hf_config_multimodal(m, j, "Gemma3ForConditionalGeneration", "gemma3", err);
    if (rc == UR_OK) {
        /* Gemma 3's context */
        rc = hf_config_text(m, j, TEXT, 131072, err);
    }
    if (rc == UR_OK) {
        rc = text_config(m, j, err);
    }
    if (rc == UR_OK) {
        rc = hf_config_layer_types(m, j, TEXT, CYCLE, err);
    }
    return rc == UR_OK ? vision_config(m, j, err) : rc;
}

const hf_family hf_family_gemma3 = {.name = "gemma3",
                                    .architecture = "Gemma3ForConditionalGeneration",
                                    .applies = applies,
                                    .setup = setup,
                                    .rules = rules,
                                    .n_rules = sizeof rules / sizeof rules[0],
                                    .config = config};
