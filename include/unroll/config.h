/* MaxText's configuration read the way MaxText's pyconfig reads it (src/config/): the
 * merged config tree, the settings unroll and `verify` take from it, and typed look-ups of
 * any other key. No I/O but reading the YAML files. */
#ifndef UNROLL_CONFIG_H
#define UNROLL_CONFIG_H

#include "unroll/err.h"

#include <stddef.h>
#include <stdint.h>

/* ---- configuration (src/config/config.c) -------------------------------------------- */

typedef struct ur_config ur_config; /* opaque: the merged config tree */

typedef struct {
    const char *config_path;      /* the YAML config, e.g. .../configs/base.yml */
    const char *const *overrides; /* "key=value" strings, value parsed as YAML */
    size_t n_overrides;
    /* Environment as "NAME=value" strings, NULL-terminated, or NULL for none. Read for
     * M_<KEY> overrides (as pyconfig does) and JOBSET_NAME (default run_name). */
    const char *const *envp;
    /* Directory that "maxtext_output" (the default base_output_directory) is relative to;
     * NULL: the current directory. */
    const char *cwd;
    /* Seconds since the epoch for the default run_name "<model_name>_<YYYY-MM-DD-HH-MM>"
     * (local time); 0: now. */
    int64_t now;
} ur_config_opts;

/* One logical_axis_rules entry: logical axis name -> mesh axes (possibly none). */
typedef struct {
    const char *name;
    const char *const *mesh;
    size_t n_mesh;
} ur_axis_rule;

/* The resolved values of the keys unroll honours (strings borrowed from the config, never
 * NULL: "" when unset). Derived values are computed as MaxText's types.py computes them. */
typedef struct {
    const char *load_full_state_path;
    const char *load_parameters_path;
    const char *lora_input_adapters_path;
    const char *base_output_directory; /* "" -> abspath("maxtext_output") */
    const char *run_name;              /* "" -> $JOBSET_NAME or <model_name>_<date> */
    const char *checkpoint_dir;        /* <base_output_directory>/<run_name>/checkpoints/ */
    const char *model_name;
    const char *decoder_block;
    int force_unroll;
    int scan_layers;
    int pure_nnx;   /* absent from base.yml (NNX-only MaxText): 1 */
    int enable_nnx; /* absent from base.yml: 1 */
    int enable_checkpointing;
    int use_ocdbt; /* checkpoint_storage_use_ocdbt */
    int use_zarr3; /* checkpoint_storage_use_zarr3 */
    int64_t target_data_file_size; /* checkpoint_storage_target_data_file_size_bytes */
    int64_t param_scan_axis;
    int64_t global_parameter_scale;
    int64_t base_num_decoder_layers;
    int64_t num_decoder_layers; /* 2^(floor(log2(scale)) / 3) * base_num_decoder_layers */
    const ur_axis_rule *axis_rules; /* logical_axis_rules after MaxText's merge by name */
    size_t n_axis_rules;
    /* The config these settings were resolved from, for the keys only some layout families
     * read (first_num_dense_layers, the pipeline keys, ...): each family declares and types
     * its own (src/maxtext/family_<name>.c) and reads them with the getters below. NULL in
     * settings made by hand: every such key at its default. */
    const ur_config *config;
} ur_settings;

/* Load `opts->config_path` with its base_config chain, the model file named by model_name
 * (models/<name>.yml next to the config, else in ../models/) and the overrides, then resolve
 * the settings. The result is owned by the caller (ur_config_free).
 * UR_EINVAL: bad YAML, unknown key (the message names it), a key set differently in the
 * model file and on the command line (unless override_model_config=true), a value of the
 * wrong type, an invalid combination; UR_EIO: a file could not be read; UR_ENOMEM. */
int ur_config_load(ur_config **out, const ur_config_opts *opts, ur_err *err);
void ur_config_free(ur_config *cfg);

/* The resolved settings, borrowed from cfg. */
const ur_settings *ur_config_settings(const ur_config *cfg);

/* Typed getters for any top-level key of the merged config, coercing as pydantic's lax
 * mode does (e.g. 1 -> true, "16" -> 16, 2 -> 2.0). UR_ENOTFOUND: no such key;
 * UR_EINVAL: the value does not convert (message names the key). A null string is NULL. */
int ur_config_get_str(const ur_config *cfg, const char *key, const char **out, ur_err *err);
int ur_config_get_bool(const ur_config *cfg, const char *key, int *out, ur_err *err);
int ur_config_get_int(const ur_config *cfg, const char *key, int64_t *out, ur_err *err);
int ur_config_get_float(const ur_config *cfg, const char *key, double *out, ur_err *err);
/* A list of ints (pydantic list[int], lax: each item as ur_config_get_int coerces it); a
 * null or empty list: *out NULL, *n 0. *out is owned by the caller (ur_free). UR_ENOTFOUND:
 * no such key; UR_EINVAL: not a list, or an item that does not convert (message names the
 * key); UR_ENOMEM. */
int ur_config_get_int_list(const ur_config *cfg, const char *key, int64_t **out, size_t *n,
                           ur_err *err);

#endif
