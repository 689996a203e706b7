/* Gemma 3 (decoder_block gemma3; GEMMA3_ATTENTION_PATTERN, 5 local + 1 global layers):
 * decoder/layers holds N / 6 blocks of 6 sub-layers decoder/layers/layers_<j>/R (block b,
 * sub-layer j -> decoder/layers_<6b + j>/R), and the N % 6 layers after the last block are
 * unscanned: decoder/layers_remainder/layers_<j>/R is copied to decoder/layers_<6(N/6) + j>/R. */
#include "family.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    int64_t n_remainder;
    int64_t remainder_first;
} gemma3_state;
UR_FAMILY_STATE_FITS(gemma3_state);

static int applies(const ur_settings *s, const ur_family_keys *k)
{
    (void)k;
    return strcmp(s->decoder_block, "gemma3") == 0;
}

static int setup(ur_plan_walk *w, ur_err *err)
{
    gemma3_state *st = UR_FAMILY_STATE(gemma3_state, w);
    int64_t nl = w->s->num_decoder_layers;
    (void)err;
    w->plan->n_groups = 1;
    ur_plan__group_set(&w->plan->groups[0], "layers", nl / 6, 6, 0, "layers");
    st->n_remainder = nl % 6;
    st->remainder_first = nl / 6 * 6;
    return UR_OK;
}

/* decoder/layers_remainder/layers_<j>/R: a copy to layer 6(N/6) + j; the empty remainder
 * NNX builds when N % 6 == 0 is dropped. */
static int leaf(ur_plan_walk *w, const ur_plan_item *it, int *done, ur_err *err)
{
    const gemma3_state *st = UR_FAMILY_STATE(gemma3_state, w);
    const ur_plan_leaf *l = it->l;
    int64_t j = 0;
    char name[512];
    char layer[64];
    if (it->g >= 0 || strcmp(l->path[it->st + 1], "layers_remainder") != 0) {
        return UR_OK;
    }
    *done = 1;
    if (it->en - it->st >= 4 && strncmp(l->path[it->st + 2], "layers_", 7) == 0 &&
        ur_plan__sub_layer(l->path[it->st + 2], st->n_remainder, &j)) {
        long long idx = (long long)st->remainder_first + (long long)j;
        snprintf(layer, sizeof layer, "layers_%lld", idx);
        return ur_plan__copy_to_layer(w, it, layer, it->st + 3, err);
    }
    if (st->n_remainder == 0 && l->dtype == UR_DT_INVALID) {
        ur_plan__drop(w, it, "empty layers_remainder");
        return UR_OK;
    }
    return ur_err_set(err, UR_EINVAL,
                      "leaf '%s': gemma3 with num_decoder_layers=%lld has %lld "
                      "remainder layers (decoder/layers_remainder/layers_0..%lld)",
                      ur_plan_path_format(l->path, l->path_len, name, sizeof name),
                      (long long)w->s->num_decoder_layers, (long long)st->n_remainder,
                      (long long)st->n_remainder - 1);
}

/* With a remainder, some leaf must have been copied from decoder/layers_remainder. */
static int finish(ur_plan_walk *w, ur_err *err)
{
    const gemma3_state *st = UR_FAMILY_STATE(gemma3_state, w);
    const ur_plan *plan = w->plan;
    int found = 0;
    if (!plan->unrolled || w->lora || st->n_remainder <= 0) {
        return UR_OK;
    }
    for (size_t i = 0; i < w->n && !found; i++) {
        const ur_plan_leaf *l = &w->leaves[i];
        found = plan->actions[i].kind == UR_PLAN_COPY && plan->actions[i].n_out == 1 &&
                l->path_len > 2;
        if (found) {
            found = 0;
            for (size_t c = 0; c + 1 < l->path_len; c++) {
                found |= strcmp(l->path[c], "decoder") == 0 &&
                         strcmp(l->path[c + 1], "layers_remainder") == 0;
            }
        }
    }
    if (!found) {
        return ur_err_set(err, UR_EINVAL,
                          "missing decoder/layers_remainder in the input checkpoint (gemma3 "
                          "with num_decoder_layers=%lld has %lld layers after the blocks of 6)",
                          (long long)w->s->num_decoder_layers, (long long)st->n_remainder);
    }
    return UR_OK;
}

const ur_plan_family ur_family_gemma3 = {
    .name = "gemma3",
    .applies = applies,
    .setup = setup,
    .leaf = leaf,
    .finish = finish,
};
