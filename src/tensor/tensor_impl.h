/* Internals shared by the tensor layer's files: the per-dtype-pair run kernels
 * (tensor_cast.c) and the loop nest both kernels walk (tensor_copy.c). */
#ifndef UNROLL_TENSOR_IMPL_H
#define UNROLL_TENSOR_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "unroll/tensor.h"

/* Convert n elements: dst[i * dstep] = cast(src[i * sstep]), steps in bytes. The dense
 * variant ignores the steps (they equal the element sizes). */
typedef void (*ur_tensor__run_fn)(char *dst, ptrdiff_t dstep, const char *src, ptrdiff_t sstep,
                                  size_t n);

typedef struct {
    ur_tensor__run_fn dense;
    ur_tensor__run_fn strided;
    size_t dsize; /* bytes per dst element */
    size_t ssize; /* bytes per src element */
} ur_tensor__kernel;

/* The kernel for dst <- src, or UR_EUNSUPPORTED. */
int ur_tensor__kernel_get(ur_tensor__kernel *out, ur_dtype dst, ur_dtype src, ur_err *err);

/* A loop nest over the elements of src, outermost dim first, sizes > 1 only (at least one
 * dim). Dim `split` (or -1) selects the destination view instead of stepping dst. */
typedef struct {
    int nd;
    int split;
    uint64_t n[UR_MAX_RANK + 1];
    int64_t ss[UR_MAX_RANK + 1]; /* src byte strides */
    int64_t ds[UR_MAX_RANK + 1]; /* dst byte strides; unused at `split` */
} ur_tensor__loop;

/* Validate a view's rank and dtype (tensor_view.c). */
int ur_tensor__check_view(const ur_tensor_view *v, const char *what, ur_err *err);

/* Build the loop for copying src into dst (axis = -1; same rank) or into the unstack
 * destinations shaped like `dst` (dst has src's rank - 1, `axis` is src's split axis).
 * Sets *empty when src has no elements (the loop is then unset). */
int ur_tensor__loop_build(ur_tensor__loop *lp, int *empty, const ur_tensor_view *dst,
                          const ur_tensor_view *src, int axis, const ur_tensor__kernel *k,
                          ur_err *err);

/* Run the loop: dsts[j].data is the base of the j-th destination (only dsts[0] without a
 * split dim). */
void ur_tensor__loop_run(const ur_tensor__loop *lp, const ur_tensor__kernel *k,
                         const ur_tensor_view *dsts, const void *src);

#endif
