/* What the Hugging Face room's files share (not installed): a family's table and the model a
 * plan describes. */
#ifndef UR_HF_IMPL_H
#define UR_HF_IMPL_H

#include "unroll/buf.h"
#include "unroll/hf.h"
#include "unroll/strmap.h"
#include "unroll/tensor.h"

typedef struct hf_json hf_json;

/* Arithmetic a rule applies, after the cast to the exported dtype (computed in float32 and
 * rounded back to it, as MaxText's exporter restores its input in weight_dtype and its hooks
 * compute): unroll/hf.h's ur_hf_arith, named here as the tables name it. */
typedef ur_hf_arith hf_op;
#define HF_OP_NONE UR_HF_ARITH_NONE
#define HF_OP_MUL_SQRT_HEAD_DIM UR_HF_ARITH_MUL_SQRT_HEAD_DIM
#define HF_OP_SUB_ONE UR_HF_ARITH_SUB_ONE
#define HF_OP_DIV_SQRT_EMB_BF16 UR_HF_ARITH_DIV_SQRT_EMB_BF16
#define HF_OP_DIV_SQRT_EMB UR_HF_ARITH_DIV_SQRT_EMB

/* The most experts a parameter split by an "{e}" rule may have (MaxText's largest: 384). */
#define HF_MAX_EXPERTS 4096
/* The most tensors one parameter gives (the pieces of a fused kernel: Qwen3.5's qkvz, 4). */
#define HF_MAX_PIECES 8
/* The most sizes a family names for its patterns. */
#define HF_MAX_SIZES 16

/* When a rule holds (all the bits it names must hold for the model). */
enum {
    HF_IF_ROPE_INTERLEAVED = 1, /* MaxText rotates interleaved pairs (LLaMARotaryEmbedding):
                                 * each head's evens then odds, as Hugging Face rotates halves */
    HF_IF_ROPE_HALVES = 2,      /* MaxText rotates halves (RotaryEmbedding), as Hugging Face */
    HF_IF_UNTIED = 4,           /* a separate output projection (logits_via_embedding=false) */
    HF_IF_QUERY_SCALED = 8,     /* MaxText folded 1/sqrt(head_dim) into the query kernel */
    HF_IF_QUERY_UNSCALED = 16,
    HF_IF_QK_NORM = 32,        /* per-head query and key norms (use_qk_norm) */
    HF_IF_ATTENTION_BIAS = 64, /* query, key and value biases (attention_bias) */
    HF_IF_DENSE_MLP = 128,     /* a dense MLP in every layer: set before a family's setup,
                            * which clears it where routed experts take its place */
    HF_IF_EXPERTS = 256,       /* routed experts (num_experts > 1) */
    HF_IF_ROUTED_BIAS = 512,   /* the router's score-correction bias (routed_bias) */
    HF_IF_LOW_RANK_QUERY = 1024, /* the query through a low-rank projection (q_lora_rank > 0) */
    HF_IF_FULL_QUERY = 2048,     /* a full-rank query kernel (q_lora_rank 0) */
    HF_IF_INDEXER = 4096,        /* DeepSeek-V3.2's sparse-attention indexer (use_indexer) */
    HF_IF_VISION = 8192,         /* a vision encoder beside the decoder (use_multimodal) */
    /* not conditions (rule_holds ignores them), but which layers a rule is for: */
    /* a layer may lack the parameter (Gemma 4's global layers, whose key is also their value,
     * have no value kernel) */
    HF_SOME_LAYERS = 1 << 16,
    /* the model's first dense_layers layers only (DeepSeek's dense_layers_{i}) */
    HF_DENSE_LAYERS = 1 << 17,
    /* the layers after them, MaxText's {i} counting from 0 there (DeepSeek's moe_layers_{i}:
     * Hugging Face's layer {i} + dense_layers) */
    HF_AFTER_DENSE = 1 << 18,
    /* a vision encoder's: its {i} is the encoder's layer, counted apart from the decoder's
     * (hf_model.vision_layers) */
    HF_VISION_LAYERS = 1 << 25,
    /* nor these, but what of its tensor the rule's parameter fills (none: all of it): one of
     * several pieces joined into it (ur_rearrange_box_join), a rule naming the tensor for each
     * piece, numbered from 0 by HF_PIECE(k); the pieces' rearranged shapes agree but on the
     * joined axis. HF_JOIN_EVERY: interleaved along the last axis, pieces of one shape, which
     * is then n times the piece's (gpt-oss's gate_up_proj, wi_0 at even positions, wi_1 at
     * odd ones). HF_JOIN_ROWS: concatenated along the second-to-last axis, a kernel's rows
     * ([..., out, in]; Gemma 4's gate_up_proj [experts, 2 * mlp, emb], wi_0's rows then
     * wi_1's; Qwen3.5's in_proj_qkv, three pieces of one fused kernel). HF_JOIN_COLS: along
     * the last axis, a [..., in, out] kernel's columns (Llama 4's gate_up_proj
     * [experts, emb, 2 * mlp]). */
    HF_JOIN_EVERY = 1 << 19,
    HF_JOIN_ROWS = 1 << 20,
    HF_JOIN_COLS = 1 << 21,
};
#define HF_PIECE_SHIFT 22 /* bits 22..24: the piece's number, 0 to 7 */
#define HF_PIECE(k) ((unsigned)(k) << HF_PIECE_SHIFT)
#define HF_PIECE_OF(when) ((int)(((when) >> HF_PIECE_SHIFT) & 7u))
#define HF_JOIN_BITS (HF_JOIN_EVERY | HF_JOIN_ROWS | HF_JOIN_COLS)
#define HF_EVENS (HF_JOIN_EVERY | HF_PIECE(0))
#define HF_ODDS (HF_JOIN_EVERY | HF_PIECE(1))
#define HF_FIRST_ROWS (HF_JOIN_ROWS | HF_PIECE(0))
#define HF_LAST_ROWS (HF_JOIN_ROWS | HF_PIECE(1))
#define HF_FIRST_COLS (HF_JOIN_COLS | HF_PIECE(0))
#define HF_LAST_COLS (HF_JOIN_COLS | HF_PIECE(1))
#define HF_LAYER_BITS (HF_SOME_LAYERS | HF_DENSE_LAYERS | HF_AFTER_DENSE | HF_VISION_LAYERS)
#define HF_PART_BITS (HF_JOIN_BITS | HF_PIECE(7))
#define HF_PLACE_BITS (HF_LAYER_BITS | HF_PART_BITS)

/* One line of a family's table: a MaxText parameter (its path below the model, "{i}" for a
 * layer's index) becomes a Hugging Face tensor ("{i}" the same index) through a rearrangement
 * (unroll/tensor.h) and an arithmetic op. A name with "{e}" makes one tensor per index of the
 * parameter's axis 0 (its experts, [experts, ...]): the rearrangement applies to each expert's
 * slice. The pattern's "{name}" is a size the family's setup named (hf_model_set_size): the
 * heads of a fused kernel, a piece's range in a head's block. Rules that follow the first one
 * of a parameter with the same MaxText path give it more tensors: the pieces of a fused
 * kernel, each keeping its range ("b[{lo}:{hi}]"), at most HF_MAX_PIECES. A rule whose hf is
 * NULL leaves its parameter out (one MaxText has and Hugging Face has no place for, as
 * MaxText's exporter maps it to None: DeepSeek-V4's hyper-connection norms). */
typedef struct {
    const char *mt;
    const char *hf;
    const char *pattern;
    hf_op op;
    unsigned when; /* HF_IF_* bits, 0: always; and HF_LAYER_BITS, HF_EVENS or HF_ODDS */
} hf_rule;

/* The model being exported, as the family's setup and config see it. */
typedef struct hf_model {
    const ur_settings *s;
    unsigned flags; /* the HF_IF_* bits that hold */
    ur_dtype weight_dtype;
    /* the MaxText parameters, below the model: path -> index into shapes */
    ur_strmap by_path;
    char **paths;
    const uint64_t **shapes;
    int *ranks;
    size_t n;
    int64_t n_layers; /* 1 + the largest {i} a rule matched; 0 when none */
    int64_t vision_layers; /* the same for the vision encoder's rules (HF_VISION_LAYERS) */
    int64_t n_experts; /* the largest expert axis an "{e}" rule split; 0 when none */
    /* config.json's intermediate_size where the model has no dense MLP (routed experts in
     * every layer): set by the family's setup, from what its architecture means by it */
    uint64_t intermediate_size;
    int per_layer;    /* Hugging Face layers per MaxText layer (gemma2's pairs: 2); 0: 1 */
    int64_t dense_layers; /* the first layers, before HF_AFTER_DENSE rules' (set by setup) */
    /* the Hugging Face vocabulary where it differs from MaxText's (0: the embedding's rows):
     * the embedding (token_embedder/embedding, [vocab, emb]) gets that many rows, zeros past
     * MaxText's, MaxText's past it left out */
    uint64_t vocab_rows;
    /* sizes the rules' patterns name ("{name}"), set by the family's setup */
    struct {
        const char *name;
        uint64_t v;
    } size[HF_MAX_SIZES];
    int n_sizes;
} hf_model;

/* Name a size for the rules' patterns ("{name}"; name a static string). UR_EINTERNAL when
 * there are more than HF_MAX_SIZES. */
int hf_model_set_size(hf_model *m, const char *name, uint64_t v, ur_err *err);

/* The Hugging Face model's layer count. */
int64_t hf_model_layers(const hf_model *m);

/* The shape of MaxText parameter `path` (below the model), NULL when the model has none. */
const uint64_t *hf_model_shape(const hf_model *m, const char *path, int *rank);
/* The same for layer i's parameter `what` (below decoder/layers_i/). */
const uint64_t *hf_model_layer_shape(const hf_model *m, int64_t i, const char *what, int *rank);

typedef struct hf_family {
    const char *name;
    const char *architecture; /* config.json's "architectures" */
    int (*applies)(const ur_settings *s);
    /* m->flags from the settings. */
    int (*setup)(hf_model *m, ur_err *err);
    /* the rules it shares with other families (NULL: none), then its own */
    const hf_rule *shared;
    size_t n_shared;
    const hf_rule *rules;
    size_t n_rules;
    /* config.json's entries (hf_json_*). */
    int (*config)(const hf_model *m, hf_json *j, ur_err *err);
} hf_family;

/* Rule k of a family: its shared rules first, then its own (k < n_shared + n_rules). */
const hf_rule *hf_family_rule(const hf_family *f, size_t k);

/* The first HF_N_RULES_TOP rules of hf_rules_llama_like are every decoder's top level: the
 * embedding, the final norm and the untied output projection. */
#define HF_N_RULES_TOP 3

/* The rules of the parts every Llama-like decoder has, as MaxText names them: the embedding,
 * the final norm, the untied output projection and a layer's gated MLP (the first
 * HF_N_RULES_DECODER_BASE: every decoder's), then a pre-norm layer's two norms. */
#define HF_N_RULES_DECODER_BASE 6
#define HF_N_RULES_LLAMA_LIKE 8
extern const hf_rule hf_rules_llama_like[HF_N_RULES_LLAMA_LIKE];

/* The family that exports models of these settings, or NULL. */
const hf_family *hf_family_for(const ur_settings *s);

/* ---- what the families share (hf_family.c) ---- */
/* A config key of the model's settings, or dflt when the config has none (or not of that
 * type). */
int hf_cfg_bool(const ur_settings *s, const char *key, int dflt);
int64_t hf_cfg_int(const ur_settings *s, const char *key, int64_t dflt);
const char *hf_cfg_str(const ur_settings *s, const char *key, const char *dflt);
double hf_cfg_float(const ur_settings *s, const char *key, double dflt);
/* 1 when s starts with prefix (s may be NULL). */
int hf_starts(const char *s, const char *prefix);
/* config.json's entries every decoder-only family has, from the parameters' shapes (the
 * embedding [vocab, emb], layer 0's query [emb, heads, head_dim], key [emb, kv_heads,
 * head_dim] and wi_0 [emb, mlp]) and the settings: architectures, model_type, sizes, heads,
 * hidden_act silu, rms_norm_eps, max_position_embeddings (max_positions, else
 * max_target_length, else 2048), tie_word_embeddings, dtype and transformers' defaults. */
int hf_config_decoder(const hf_model *m, hf_json *j, const char *architecture,
                      const char *model_type, int64_t max_positions, ur_err *err);
/* The same entries but architectures, model_type and hidden_act, inside object `in` (NULL:
 * the top level; "text_config" for a multimodal architecture's language model). */
int hf_config_text(const hf_model *m, hf_json *j, const char *in, int64_t max_positions,
                   ur_err *err);
/* layer_types inside `in` (NULL: top level): a cycle of `cycle` layers, sliding-window ones
 * then one of full attention, over the Hugging Face model's layers. */
int hf_config_layer_types(const hf_model *m, hf_json *j, const char *in, int cycle, ur_err *err);
/* The top level of a multimodal architecture's config.json (its language model in
 * text_config): architectures, model_type, tie_word_embeddings and dtype. */
int hf_config_multimodal(const hf_model *m, hf_json *j, const char *architecture,
                         const char *model_type, ur_err *err);
/* What Gemma 2 and 3 share, inside `in`: the tanh GELU (MaxText's "gelu" is flax's,
 * tanh-approximated), query_pre_attn_scalar, no attention bias, the soft caps (null when
 * unset) and the window (sliding_window_size: a key within that many positions, as MaxText's
 * mask). */
int hf_config_gemma(const hf_model *m, hf_json *j, const char *in, int64_t query_pre_attn_scalar,
                    ur_err *err);
/* A vision tower's size in config.json: the Hugging Face key, MaxText's *_for_vit key, and
 * the family's default when the config has none. */
typedef struct {
    const char *hf, *mt;
    int64_t dflt;
} hf_vit_key;
/* vision_config's model_type and sizes (so that the configuration is the model's even where
 * the export has no vision weights). */
int hf_config_vision(const hf_model *m, hf_json *j, const char *model_type, const hf_vit_key *keys,
                     size_t n, ur_err *err);
/* rope_parameters' rope_theta (rope_max_timescale) and rope_type, inside `in` (NULL: top
 * level). */
int hf_config_rope(const hf_model *m, hf_json *j, const char *in, const char *rope_type,
                   ur_err *err);
/* The path of "rope_parameters" inside `in` ("a/rope_parameters"; NULL: the top level's),
 * into out (size n), for a family's own entries there. */
void hf_rope_object(const char *in, char *out, size_t n);
/* YaRN's entries inside `in` as MaxText computes it: factor (rope_factor, else `factor`), the
 * original context, beta_fast, beta_slow, truncate (rope_truncate, else `truncate`), and
 * attention_factor 1 where MaxText does not scale the rotated output
 * (rope_attention_scaling false). */
int hf_config_yarn(const hf_model *m, hf_json *j, const char *in, double factor, int truncate,
                   ur_err *err);
/* rope_parameters' llama3 scaling as LLaMARotaryEmbedding applies it (use_scale): factor 8,
 * frequency factors 1 and 4, 8192 original positions. */
int hf_config_llama3_scaling(hf_json *j, ur_err *err);
/* The entries of a config.json written without hf_config_decoder, inside `in` (NULL: top
 * level): the SiLU activation, rms_norm_eps (normalization_layer_epsilon, else eps),
 * tie_word_embeddings, no attention bias, dtype. */
int hf_config_basics(const hf_model *m, hf_json *j, const char *in, double eps, ur_err *err);

/* Match `path` against pattern `pat` ("{i}" matches a decimal index): 1 and *layer (-1 when
 * the pattern has none), else 0. */
int hf_match(const char *pat, const char *path, int64_t *layer);
/* `pat` with "{i}" replaced by layer ("{2i}" by 2 * layer, "{2i+1}" by 2 * layer + 1: the
 * pairs of layers one MaxText layer holds) and "{e}" by expert, into out (size n); 0 when it
 * does not fit. */
int hf_expand(const char *pat, int64_t layer, int64_t expert, char *out, size_t n);

/* ---- config.json (hf_json.c): entries written with sorted keys, as transformers writes
 * config.json (json.dumps(indent=2, sort_keys=True)) ---- */
int hf_json_new(hf_json **out, ur_err *err);
void hf_json_free(hf_json *j);
/* Add "key": value at the top level, or inside the object `in` (NULL: the top level;
 * "a/b": object b inside object a; an object is made on first use). */
int hf_json_int(hf_json *j, const char *in, const char *key, int64_t v, ur_err *err);
int hf_json_float(hf_json *j, const char *in, const char *key, double v, ur_err *err);
int hf_json_bool(hf_json *j, const char *in, const char *key, int v, ur_err *err);
int hf_json_str(hf_json *j, const char *in, const char *key, const char *v, ur_err *err);
int hf_json_null(hf_json *j, const char *in, const char *key, ur_err *err);
/* Entries "key": v of a table, inside `in` (as hf_json_int). */
typedef struct {
    const char *key;
    int64_t v;
} hf_json_int_entry;
int hf_json_ints(hf_json *j, const char *in, const hf_json_int_entry *e, size_t n, ur_err *err);
/* a list of strings */
int hf_json_strs(hf_json *j, const char *in, const char *key, const char *const *v, size_t n,
                 ur_err *err);
/* The document, indented by 2, keys sorted, a newline at the end. */
int hf_json_print(const hf_json *j, ur_buf *out, ur_err *err);

/* Python's repr of a float ("1e-05", "500000.0", "0.02"), into out. */
void hf_float_repr(double v, char *out, size_t n);

extern const hf_family hf_family_llama;
extern const hf_family hf_family_mistral;
extern const hf_family hf_family_mixtral;
extern const hf_family hf_family_qwen3;
extern const hf_family hf_family_qwen3_moe;
extern const hf_family hf_family_qwen2;
extern const hf_family hf_family_olmo3;
extern const hf_family hf_family_gemma2;
extern const hf_family hf_family_gemma3;
extern const hf_family hf_family_gemma4;
extern const hf_family hf_family_deepseek;
extern const hf_family hf_family_deepseek_v2;
extern const hf_family hf_family_deepseek_v32;
extern const hf_family hf_family_gpt_oss;
extern const hf_family hf_family_qwen3_next;
extern const hf_family hf_family_qwen3_5;
extern const hf_family hf_family_deepseek4;
extern const hf_family hf_family_llama4;

#endif
