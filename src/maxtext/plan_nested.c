/* Nested blocks, the shape gemma4 and qwen3-next share (family_gemma4.c, family_qwen3_next.c):
 * blocks of K layers with a nested scan over the K - 1 local ones, as MaxText 0.2.5 builds
 * them (gemma4.py Gemma4ScannableBlock, K = 6, group scanned_blocks; qwen3.py
 * Qwen3NextScannableBlock, K = inhomogeneous_layer_cycle_interval, group layers, the
 * linear-attention layers local and the full-attention layer last):
 *
 *   decoder/<group>/local_layers/R       block axis at param_scan_axis, the nested scan's
 *                                        K - 1 local layers right after it:
 *                                        block b, local i -> decoder/layers_<Kb + i>/R
 *   decoder/<group>/global_layer/R       block axis -> decoder/layers_<Kb + K - 1>/R
 *   decoder/layers_remainder/local_layers/R
 *                                        the last N % K layers (all local: blocks start on a
 *                                        cycle boundary) at param_scan_axis -> layers_<K(N/K) + i>
 */
#include "family.h"

#include <string.h>

UR_FAMILY_STATE_FITS(ur_plan_nested_state);

int ur_plan_nested__leaf(ur_plan_walk *w, const ur_plan_item *it, ur_err *err)
{
    ur_plan_nested_state *ns = UR_FAMILY_STATE(ur_plan_nested_state, w);
    ur_plan *plan = w->plan;
    const ur_settings *s = w->s;
    const ur_plan_leaf *l = it->l;
    ur_plan_action *a = it->a;
    size_t st = it->st;
    size_t en = it->en;
    int blocks = strcmp(l->path[st + 1], plan->groups[0].name) == 0;
    size_t psa = (size_t)s->param_scan_axis;
    int64_t nb = plan->groups[0].n_layers;
    uint64_t kk = (uint64_t)plan->groups[0].cycle;
    int local = en - st >= 4 && strcmp(l->path[st + 2], "local_layers") == 0;
    int global = en - st >= 4 && strcmp(l->path[st + 2], "global_layer") == 0;
    uint64_t want[2];
    char name[512];
    char shape[256];

    ur_plan_path_format(l->path, l->path_len, name, sizeof name);
    if (!blocks && ns->n_remainder == 0 && l->dtype == UR_DT_INVALID) {
        ur_plan__drop(w, it, "empty layers_remainder"); /* the empty remainder NNX builds */
        return UR_OK;
    }
    if (!local && !(blocks && global)) {
        return ur_err_set(err, UR_EINVAL,
                          "leaf '%s': %s holds its layers under decoder/%s/"
                          "{local_layers,global_layer}/ and decoder/layers_remainder/"
                          "local_layers/",
                          name, s->decoder_block, plan->groups[0].name);
    }
    a->n_axes = 0;
    if (blocks) {
        want[a->n_axes] = (uint64_t)nb;
        a->axes[a->n_axes++] = psa;
        if (local) {
            want[a->n_axes] = kk - 1;
            a->axes[a->n_axes++] = psa + 1;
        }
    } else {
        want[a->n_axes] = (uint64_t)ns->n_remainder;
        a->axes[a->n_axes++] = psa;
        ns->remainder_seen = 1;
    }
    for (size_t m = 0; m < a->n_axes; m++) {
        if (l->dtype == UR_DT_INVALID || a->axes[m] >= l->rank ||
            l->shape[a->axes[m]] != want[m]) {
            ur_plan__shape_format(l, shape, sizeof shape);
            return ur_err_set(err, UR_EINVAL,
                              "leaf '%s' shape %s: expected length %llu on axis %zu (%s with "
                              "num_decoder_layers=%lld: %lld blocks of %llu local + 1 global "
                              "layers, %lld remainder layers)",
                              name, shape, (unsigned long long)want[m], a->axes[m],
                              s->decoder_block, (long long)s->num_decoder_layers, (long long)nb,
                              (unsigned long long)(kk - 1), (long long)ns->n_remainder);
        }
    }
    if (!blocks) {
        return ur_plan__unstack(w, it, 0, st + 3, want[0], 1, 1, ns->remainder_first, err);
    }
    if (local) {
        return ur_plan__unstack(w, it, 0, st + 3, want[0] * (kk - 1), (int64_t)(kk - 1),
                                (int64_t)kk, 0, err);
    }
    return ur_plan__unstack(w, it, 0, st + 3, want[0], 1, (int64_t)kk, (int64_t)(kk - 1), err);
}

int ur_plan_nested__finish(ur_plan_walk *w, ur_err *err)
{
    const ur_plan_nested_state *ns = UR_FAMILY_STATE(ur_plan_nested_state, w);
    if (w->plan->unrolled && !w->lora && ns->n_remainder > 0 && !ns->remainder_seen) {
        return ur_err_set(err, UR_EINVAL,
                          "missing decoder/layers_remainder/local_layers in the input checkpoint "
                          "(%s with num_decoder_layers=%lld has %lld layers after the blocks "
                          "of %lld)",
                          w->s->decoder_block, (long long)w->s->num_decoder_layers,
                          (long long)ns->n_remainder, (long long)w->plan->groups[0].cycle);
    }
    return UR_OK;
}
