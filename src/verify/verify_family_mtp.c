/* verify: the multi-token-prediction layer (verify_family.h). Its source is found from names
 * and shapes, as for the decoder's layers, without the planner's family descriptors:
 *
 *   output P/R, P = .../mtp_block/mtp_layer_<k>/mtp_<k>_transformer_layer
 *     <- input P/R (the same path: a layer class that is the same scanned or not), or
 *     <- input P/local_layers/R, local layer 0: a scanned block whose local layers are
 *        stacked (gemma4: the unscanned model's MTP layer is one local layer, built with the
 *        arguments of the block's local layers and run first on the MTP projection's output,
 *        maxtext 0.2.5 gemma4.py Gemma4DecoderLayer defaults, Gemma4ScannableBlock). The
 *        block's other local layers and its global_layer are not carried: they are not
 *        reported missing when the output holds P but nothing under P/global_layer. */
#include "verify_family.h"

#include <string.h>

/* 1 when c[k] is mtp_<n>_transformer_layer under mtp_block/mtp_layer_<n>. */
static int mtp_layer_at(const char *const *c, size_t k)
{
    const char *n;
    size_t nl;
    if (k < 2 || strcmp(c[k - 2], "mtp_block") != 0 || strncmp(c[k - 1], "mtp_layer_", 10) != 0) {
        return 0;
    }
    n = c[k - 1] + 10;
    nl = strlen(n);
    return nl > 0 && strncmp(c[k], "mtp_", 4) == 0 && strncmp(c[k] + 4, n, nl) == 0 &&
           strcmp(c[k] + 4 + nl, "_transformer_layer") == 0;
}

int ur_verify_family_mtp__match(verifier *vf, const vleaf *o, vpair *out, ur_err *err)
{
    const char **c = vf->scratch;
    vleaf *lo;
    int axis, fax[1];
    int64_t fidx[1] = {0};
    (void)err;
    for (size_t k = 0; k + 1 < o->len; k++) {
        if (!mtp_layer_at(o->comp, k)) {
            continue;
        }
        memcpy(c, o->comp, (k + 1) * sizeof *c);
        c[k + 1] = "local_layers";
        memcpy(c + k + 2, o->comp + k + 1, (o->len - k - 1) * sizeof *c);
        lo = ur_verify__find_in(vf, c, o->len + 1);
        if (lo == NULL || ur_verify__is_placeholder(lo->leaf) ||
            ur_verify__is_placeholder(o->leaf)) {
            return UR_OK;
        }
        axis = ur_verify__run_axis(o, lo, 1, vf->opts->param_scan_axis);
        if (axis < 0) {
            return UR_OK;
        }
        fax[0] = axis;
        lo->pdlen = k + 1;
        lo->rest = k + 2;
        lo->pdiv = 1;
        lo->pmul = 1;
        lo->padd = 0;
        /* one slice of one: the other local layers are not carried */
        return ur_verify__slices(out, lo, 1, fax, fidx, 0, 1);
    }
    return UR_OK;
}

int ur_verify_family_mtp__not_carried(const verifier *vf, const vleaf *v)
{
    for (size_t k = 0; k + 2 < v->len; k++) {
        if (mtp_layer_at(v->comp, k) && strcmp(v->comp[k + 1], "global_layer") == 0) {
            return ur_verify__any_under(&vf->out, v->comp, k, v->comp[k]) &&
                   !ur_verify__any_under(&vf->out, v->comp, k + 1, "global_layer");
        }
    }
    return 0;
}
