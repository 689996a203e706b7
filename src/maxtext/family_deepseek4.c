/* DeepSeek 4 (decoder_block deepseek4): first_num_hash_layers unscanned layers
 * decoder/layers_<i> (copied as they are), then decoder/scanned_blocks of blocks of 2
 * sub-layers: block b, sub-layer layers_<j> -> decoder/layers_<H + 2b + j>. */
#include "family.h"

#include <stdint.h>
#include <string.h>

static const ur_family_key k_first_num_hash_layers = {"first_num_hash_layers", UR_FAMILY_KEY_INT,
                                                      0, INT64_MIN};

static const ur_family_key *const k_keys[] = {&k_first_num_hash_layers, NULL};

static int applies(const ur_settings *s, const ur_family_keys *k)
{
    (void)k;
    return strcmp(s->decoder_block, "deepseek4") == 0;
}

static int setup(ur_plan_walk *w, ur_err *err)
{
    int64_t nl = w->s->num_decoder_layers;
    int64_t h = ur_family_int(w->k, &k_first_num_hash_layers);
    if (h < 0 || h > nl) {
        return ur_err_set(err, UR_EINVAL,
                          "first_num_hash_layers=%lld does not fit num_decoder_layers=%lld",
                          (long long)h, (long long)nl);
    }
    w->plan->n_groups = 1;
    ur_plan__group_set(&w->plan->groups[0], "scanned_blocks", (nl - h) / 2, 2, h, "layers");
    if ((nl - h) % 2 != 0 && w->plan->unrolled) {
        return ur_err_set(err, UR_EINVAL,
                          "deepseek4: %lld layers after %lld hash layers is odd; MaxText "
                          "scans them in blocks of 2",
                          (long long)(nl - h), (long long)h);
    }
    return UR_OK;
}

/* The multi-token-prediction layer: MaxText builds it from the scannable block when
 * scan_layers is true (nnx_decoders.py get_decoder_layers, get_scannable). */
static int mtp_leaf(ur_plan_walk *w, const ur_plan_item *it, size_t rest, int *done, ur_err *err)
{
    (void)rest;
    (void)done;
    return ur_plan__mtp_unsupported(w, it, err);
}

const ur_plan_family ur_family_deepseek4 = {
    .name = "deepseek4",
    .keys = k_keys,
    .applies = applies,
    .setup = setup,
    .mtp_leaf = mtp_leaf,
    /* the scanned blocks' router bias (MoEBiasVar: stacked on axis 0), in a param-only
     * checkpoint at its parameter path; the hash layers' Tid2EidVar is never stacked */
    .aux_leaf = ur_plan__router_bias,
};
