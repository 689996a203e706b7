/* Unstack: every slice take(src, i, axis) into its own destination, in one pass over src.
 *
 * When all destinations share dtype and strides (the per-layer output chunks the streaming
 * code passes), the split is a dim of the copy loop nest (tensor_copy.c) that moves to the
 * next destination's base pointer, so src is read once in memory order. Otherwise each slice
 * is copied on its own (same bytes moved, src read in n strided passes). */
#include "unroll/tensor.h"

#include "tensor_impl.h"

/* Same layout for the fused pass: equal strides on every dim of size > 1. */
static int same_layout(const ur_tensor_view *a, const ur_tensor_view *b)
{
    if (a->dtype != b->dtype) {
        return 0;
    }
    for (int d = 0; d < a->rank; d++) {
        if (a->shape[d] > 1 && a->strides[d] != b->strides[d]) {
            return 0;
        }
    }
    return 1;
}

int ur_tensor_unstack(const ur_tensor_view *dsts, size_t n, const ur_tensor_view *src, int axis,
                      ur_err *err)
{
    ur_tensor__kernel k = {0};
    ur_tensor__loop lp;
    int fused = 1;
    int empty;
    int rc;

    rc = ur_tensor__check_view(src, "unstack src", err);
    if (rc < 0) {
        return rc;
    }
    if (axis < 0 || axis >= src->rank) {
        return ur_err_set(err, UR_EINVAL, "tensor: unstack axis %d outside [0, %d)", axis,
                          src->rank);
    }
    if (n != src->shape[axis]) {
        return ur_err_set(err, UR_EINVAL, "tensor: unstack into %zu views, axis %d has %llu", n,
                          axis, (unsigned long long)src->shape[axis]);
    }
    if (n > 0 && dsts == NULL) {
        return ur_err_set(err, UR_EINVAL, "tensor: unstack dsts is NULL");
    }
    /* Check every destination before writing anything. */
    for (size_t i = 0; i < n; i++) {
        const ur_tensor_view *dv = &dsts[i];

        rc = ur_tensor__check_view(dv, "unstack dst", err);
        if (rc < 0) {
            return rc;
        }
        if (dv->rank != src->rank - 1) {
            return ur_err_set(err, UR_EINVAL, "tensor: unstack dst %zu has rank %d, want %d", i,
                              dv->rank, src->rank - 1);
        }
        for (int d = 0, o = 0; d < src->rank; d++) {
            if (d == axis) {
                continue;
            }
            if (dv->shape[o] != src->shape[d]) {
                return ur_err_set(
                    err, UR_EINVAL, "tensor: unstack dst %zu dim %d: %llu, want %llu", i, o,
                    (unsigned long long)dv->shape[o], (unsigned long long)src->shape[d]);
            }
            o++;
        }
        rc = ur_tensor__kernel_get(&k, dv->dtype, src->dtype, err);
        if (rc < 0) {
            return ur_err_wrap(err, "unstack dst %zu", i);
        }
        fused &= same_layout(dv, &dsts[0]);
    }
    if (n == 0) {
        return UR_OK;
    }
    if (fused) {
        rc = ur_tensor__kernel_get(&k, dsts[0].dtype, src->dtype, err);
        if (rc < 0) {
            return rc;
        }
        rc = ur_tensor__loop_build(&lp, &empty, &dsts[0], src, axis, &k, err);
        if (rc < 0 || empty) {
            return rc;
        }
        ur_tensor__loop_run(&lp, &k, dsts, src->data);
        return UR_OK;
    }
    /* Validate all the per-slice copies first so that a failure writes nothing. */
    for (size_t i = 0; i < n; i++) {
        ur_tensor_view slice;

        rc = ur_tensor_view_take(&slice, src, axis, i, err);
        if (rc < 0) {
            return rc;
        }
        rc = ur_tensor__kernel_get(&k, dsts[i].dtype, src->dtype, err);
        if (rc < 0) {
            return rc;
        }
        rc = ur_tensor__loop_build(&lp, &empty, &dsts[i], &slice, -1, &k, err);
        if (rc < 0) {
            return ur_err_wrap(err, "unstack dst %zu", i);
        }
    }
    for (size_t i = 0; i < n; i++) {
        ur_tensor_view slice;

        rc = ur_tensor_view_take(&slice, src, axis, i, err);
        if (rc < 0) {
            return rc;
        }
        rc = ur_tensor_copy(&dsts[i], &slice, err);
        if (rc < 0) {
            return rc;
        }
    }
    return UR_OK;
}
