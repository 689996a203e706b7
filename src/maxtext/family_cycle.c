/* Inhomogeneous layer cycles (inhomogeneous_layer_cycle_interval K > 1: llama4, gpt-oss,
 * olmo3, ...): decoder/layers holds N / K blocks of K sub-layers decoder/layers/layers_<j>/R
 * (or layer_<j>); block b, sub-layer j -> decoder/layers_<K*b + j>/R. N must be a multiple of
 * K: MaxText's scan would drop the rest. */
#include "family.h"

#include <stdint.h>
#include <string.h>

/* Read by the Qwen3-Next and pipeline families and the walk too (family.h). */
const ur_family_key ur_key_inhomogeneous_layer_cycle_interval = {
    "inhomogeneous_layer_cycle_interval", UR_FAMILY_KEY_INT, 1, INT64_MIN};

static const ur_family_key *const k_keys[] = {&ur_key_inhomogeneous_layer_cycle_interval, NULL};

static int applies(const ur_settings *s, const ur_family_keys *k)
{
    (void)s;
    return ur_plan__cycle(k) > 1;
}

static int setup(ur_plan_walk *w, ur_err *err)
{
    int64_t nl = w->s->num_decoder_layers;
    int64_t k = ur_plan__cycle(w->k);
    w->plan->n_groups = 1;
    ur_plan__group_set(&w->plan->groups[0], "layers", nl / k, k, 0, "layers");
    if (nl % k != 0 && w->plan->unrolled) {
        return ur_err_set(err, UR_EINVAL,
                          "num_decoder_layers=%lld is not a multiple of "
                          "inhomogeneous_layer_cycle_interval=%lld: MaxText's scan would "
                          "drop the last %lld layers",
                          (long long)nl, (long long)k, (long long)(nl % k));
    }
    return UR_OK;
}

/* The multi-token-prediction layer: MaxText builds it from the scannable block when
 * scan_layers is true for these decoder blocks (nnx_decoders.py get_decoder_layers,
 * get_scannable); another decoder_block with a cycle keeps one layer class, and its MTP leaves
 * are copied. */
static int mtp_leaf(ur_plan_walk *w, const ur_plan_item *it, size_t rest, int *done, ur_err *err)
{
    static const char *const k_scannable[] = {"gpt_oss", "llama4", "olmo3", "qwen3_5", "envy"};
    (void)rest;
    (void)done;
    for (size_t i = 0; i < sizeof k_scannable / sizeof k_scannable[0]; i++) {
        if (strcmp(w->s->decoder_block, k_scannable[i]) == 0) {
            return ur_plan__mtp_unsupported(w, it, err);
        }
    }
    return UR_OK;
}

const ur_plan_family ur_family_cycle = {
    .name = "cycle",
    .keys = k_keys,
    .applies = applies,
    .setup = setup,
    .mtp_leaf = mtp_leaf,
};
