/* Tensor views: dense construction, take (select one index along an axis), sub-box. */
#include "unroll/tensor.h"

#include "unroll/ckd.h"

#include "tensor_impl.h"

#include <string.h>

int ur_tensor__check_view(const ur_tensor_view *v, const char *what, ur_err *err)
{
    if (v == NULL) {
        return ur_err_set(err, UR_EINVAL, "tensor: %s view is NULL", what);
    }
    if (v->rank < 0 || v->rank > UR_MAX_RANK) {
        return ur_err_set(err, UR_EINVAL, "tensor: %s rank %d outside [0, %d]", what, v->rank,
                          UR_MAX_RANK);
    }
    if (ur_dtype_size(v->dtype) == 0) {
        return ur_err_set(err, UR_EINVAL, "tensor: %s has an invalid dtype (%d)", what,
                          (int)v->dtype);
    }
    return UR_OK;
}

int ur_tensor_view_init_dense(ur_tensor_view *out, ur_dtype dtype, int rank, const uint64_t *shape,
                              void *data, ur_err *err)
{
    ur_tensor_view v;
    uint64_t stride = 1;
    size_t nbytes;
    int rc;

    memset(&v, 0, sizeof v);
    v.dtype = dtype;
    v.rank = rank;
    v.data = data;
    rc = ur_tensor__check_view(&v, "dense", err);
    if (rc < 0) {
        return rc;
    }
    /* A zero dim counts as 1 for the strides (as numpy does), so empty views get strides too;
     * every stride, also of an empty view, must fit int64. */
    for (int d = rank - 1; d >= 0; d--) {
        v.shape[d] = shape[d];
        v.strides[d] = (int64_t)stride;
        if (ur_ckd_mul64(&stride, stride, shape[d] > 1 ? shape[d] : 1) ||
            stride > (uint64_t)INT64_MAX) {
            return ur_err_set(err, UR_EINVAL, "tensor: dense strides overflow at dim %d", d);
        }
    }
    rc = ur_tensor_view_nbytes(&nbytes, &v, err);
    if (rc < 0) {
        return rc;
    }
    *out = v;
    return UR_OK;
}

int ur_tensor_view_numel(uint64_t *out, const ur_tensor_view *v, ur_err *err)
{
    uint64_t n = 1;
    int rc = ur_tensor__check_view(v, "numel", err);

    if (rc < 0) {
        return rc;
    }
    for (int d = 0; d < v->rank; d++) {
        if (v->shape[d] == 0) {
            *out = 0;
            return UR_OK;
        }
    }
    for (int d = 0; d < v->rank; d++) {
        if (ur_ckd_mul64(&n, n, v->shape[d])) {
            return ur_err_set(err, UR_EINVAL, "tensor: element count overflows");
        }
    }
    *out = n;
    return UR_OK;
}

int ur_tensor_view_nbytes(size_t *out, const ur_tensor_view *v, ur_err *err)
{
    uint64_t n;
    size_t bytes;
    int rc = ur_tensor_view_numel(&n, v, err);

    if (rc < 0) {
        return rc;
    }
    if (n > SIZE_MAX || ur_ckd_mul(&bytes, (size_t)n, ur_dtype_size(v->dtype))) {
        return ur_err_set(err, UR_EINVAL, "tensor: byte size overflows");
    }
    *out = bytes;
    return UR_OK;
}

int ur_tensor_view_take(ur_tensor_view *out, const ur_tensor_view *v, int axis, uint64_t index,
                        ur_err *err)
{
    ur_tensor_view r;
    int rc = ur_tensor__check_view(v, "take", err);

    if (rc < 0) {
        return rc;
    }
    if (axis < 0 || axis >= v->rank) {
        return ur_err_set(err, UR_EINVAL, "tensor: take axis %d outside [0, %d)", axis, v->rank);
    }
    if (index >= v->shape[axis]) {
        return ur_err_set(err, UR_EINVAL, "tensor: take index %llu >= %llu on axis %d",
                          (unsigned long long)index, (unsigned long long)v->shape[axis], axis);
    }
    memset(&r, 0, sizeof r);
    r.dtype = v->dtype;
    r.rank = v->rank - 1;
    for (int d = 0, o = 0; d < v->rank; d++) {
        if (d != axis) {
            r.shape[o] = v->shape[d];
            r.strides[o] = v->strides[d];
            o++;
        }
    }
    /* index < shape, so the offset is in bounds of the caller's memory if the view is; the
     * pointer arithmetic is done in bytes as the view's own strides define it. */
    r.data = (char *)v->data +
             (ptrdiff_t)index * (ptrdiff_t)v->strides[axis] * (ptrdiff_t)ur_dtype_size(v->dtype);
    *out = r;
    return UR_OK;
}

int ur_tensor_view_slice(ur_tensor_view *out, const ur_tensor_view *v, const uint64_t *start,
                         const uint64_t *count, ur_err *err)
{
    ur_tensor_view r;
    ptrdiff_t off = 0;
    int rc = ur_tensor__check_view(v, "slice", err);

    if (rc < 0) {
        return rc;
    }
    for (int d = 0; d < v->rank; d++) {
        if (start[d] > v->shape[d] || count[d] > v->shape[d] - start[d]) {
            return ur_err_set(err, UR_EINVAL,
                              "tensor: slice [%llu, +%llu) outside dim %d of size %llu",
                              (unsigned long long)start[d], (unsigned long long)count[d], d,
                              (unsigned long long)v->shape[d]);
        }
    }
    r = *v;
    for (int d = 0; d < v->rank; d++) {
        r.shape[d] = count[d];
        if (count[d] > 0) {
            off += (ptrdiff_t)start[d] * (ptrdiff_t)v->strides[d];
        }
    }
    r.data = (char *)v->data + off * (ptrdiff_t)ur_dtype_size(v->dtype);
    *out = r;
    return UR_OK;
}

int ur_tensor_view_is_dense(const ur_tensor_view *v)
{
    int64_t expect = 1;

    for (int d = 0; d < v->rank; d++) {
        if (v->shape[d] == 0) {
            return 1;
        }
    }
    for (int d = v->rank - 1; d >= 0; d--) {
        if (v->shape[d] == 1) {
            continue;
        }
        if (v->strides[d] != expect) {
            return 0;
        }
        expect *= (int64_t)v->shape[d];
    }
    return 1;
}
