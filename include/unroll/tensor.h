/* Tensor views and the strided copy / unstack kernel with the cast to bfloat16 fused in.
 *
 * A view describes elements already in memory: dtype, shape, strides (in elements, may be
 * negative or zero) and the address of element [0, ..., 0]. Views are plain stack values; the
 * kernels never allocate and never keep a pointer to a view (docs/conventions.md §5).
 *
 * Casts (dst dtype <- src dtype) the kernels perform:
 *   - identity for every dtype of dtype.h (a byte copy of each element);
 *   - float32, float64, float16 -> bfloat16, bit-identical to JAX's `x.astype(jnp.bfloat16)`
 *     in JAX's default configuration (jax_enable_x64 off): round to nearest even, overflow to
 *     +-Inf, subnormals kept, +-0 and +-Inf kept, every NaN becomes the quiet NaN of the same
 *     sign (0x7fc0 / 0xffc0; payloads are not kept, as ml_dtypes and XLA do).
 *     float64 goes through float32 first (round to nearest even, subnormals kept), which is what
 *     JAX does: without x64 the array is float32 before astype runs. ml_dtypes' direct
 *     `np.float64 -> bfloat16` rounds once and so differs by one ulp where the float32 step
 *     lands on a bfloat16 tie (about 1 in 130,000 random doubles; 1 + 2^-8 + 2^-30 gives
 *     0x3f80 here and in JAX, 0x3f81 in ml_dtypes). With jax_enable_x64 on, XLA:CPU also goes
 *     through float32 but flushes float32-subnormal results to zero; that mode is not matched.
 *   - every float8 format of dtype.h -> bfloat16, exact (each float8 value is a bfloat16);
 *     a NaN becomes the quiet NaN of its sign, the sign-less NaN of the fnuz formats and of
 *     float8_e8m0fnu +NaN (0x7fc0): JAX's astype for all 256 codes of each format.
 *   - bfloat16 -> float32, exact (a Hugging Face export of bfloat16 parameters in float32).
 * The float64 and float16 conversions use the C floating-point environment's default
 * (round-to-nearest, no flush-to-zero); a caller must not change it. */
#ifndef UNROLL_TENSOR_H
#define UNROLL_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "unroll/dtype.h"
#include "unroll/err.h"

typedef struct ur_tensor_view {
    ur_dtype dtype;
    int rank;                      /* 0 .. UR_MAX_RANK; rank 0 is a scalar (one element) */
    uint64_t shape[UR_MAX_RANK];   /* entries [rank, UR_MAX_RANK) are ignored */
    int64_t strides[UR_MAX_RANK];  /* in elements, not bytes */
    void *data;                    /* element [0, ..., 0]; may be NULL when a dim is 0 */
} ur_tensor_view;

/* --- views (tensor_view.c) ------------------------------------------------------------- */

/* Fill *out with a dense C-order (row-major) view of `data`. Fails with UR_EINVAL (out
 * untouched) on a bad dtype or rank, or when the element count, byte size or a stride would
 * overflow. */
int ur_tensor_view_init_dense(ur_tensor_view *out, ur_dtype dtype, int rank, const uint64_t *shape,
                              void *data, ur_err *err);

/* Element count of the view (product of the shape; 1 for rank 0). UR_EINVAL on overflow or a
 * bad rank. */
int ur_tensor_view_numel(uint64_t *out, const ur_tensor_view *v, ur_err *err);

/* Bytes of a dense buffer holding the view's elements (numel * dtype size). UR_EINVAL on
 * overflow of size_t, a bad dtype or rank. */
int ur_tensor_view_nbytes(size_t *out, const ur_tensor_view *v, ur_err *err);

/* *out = v with `axis` fixed at `index` and dropped (numpy's take(v, index, axis)). `out` may
 * alias `v`. UR_EINVAL when axis or index is out of range. */
int ur_tensor_view_take(ur_tensor_view *out, const ur_tensor_view *v, int axis, uint64_t index,
                        ur_err *err);

/* *out = the sub-box v[start[0]:start[0]+count[0], ...] (rank unchanged). `out` may alias `v`.
 * UR_EINVAL when the box does not fit in v's shape. */
int ur_tensor_view_slice(ur_tensor_view *out, const ur_tensor_view *v, const uint64_t *start,
                         const uint64_t *count, ur_err *err);

/* 1 when the elements form one dense C-order run (size-1 dims and empty views count as
 * dense), else 0. */
int ur_tensor_view_is_dense(const ur_tensor_view *v);

/* --- casts (tensor_cast.c) ------------------------------------------------------------- */

/* 1 when the kernels can convert `src` elements to `dst` elements (see the list above). */
int ur_tensor_cast_supported(ur_dtype dst, ur_dtype src);

/* Scalar conversions to bfloat16 bits, the same as the kernels (little-endian bit patterns). */
uint16_t ur_tensor_cast_f32_to_bf16(uint32_t f32_bits);
uint16_t ur_tensor_cast_f64_to_bf16(uint64_t f64_bits);
uint16_t ur_tensor_cast_f16_to_bf16(uint16_t f16_bits);

/* Convert n dense elements: dst[i] = cast(src[i]). Buffers must not overlap and need no
 * alignment. UR_EUNSUPPORTED for a pair ur_tensor_cast_supported rejects. */
int ur_tensor_cast_dense(void *dst, ur_dtype dst_dtype, const void *src, ur_dtype src_dtype,
                         size_t n, ur_err *err);

/* --- kernels (tensor_copy.c, tensor_unstack.c) ----------------------------------------- */

/* dst[idx] = cast(src[idx]) for every index of the common shape, any strides on either side.
 * dst and src must have the same rank and shape and must not overlap. Walks src in its memory
 * order and makes the innermost loop a contiguous run whenever the strides allow.
 * UR_EINVAL (shape/rank mismatch, bad view, byte offsets overflowing), UR_EUNSUPPORTED
 * (dtype pair); nothing is written on failure. Never allocates. */
int ur_tensor_copy(const ur_tensor_view *dst, const ur_tensor_view *src, ur_err *err);

/* dsts[i] = cast(take(src, i, axis)) for every i in [0, n), n == src->shape[axis], in one pass
 * over src in its memory order (the per-layer split of a scanned tensor). Each dsts[i] has
 * src's shape without `axis`; dsts may differ in data pointer, and when they also share one
 * dtype and one set of strides (the usual case) the pass is fused; otherwise each slice is
 * copied on its own. No dst may overlap src or another dst. Errors as ur_tensor_copy. */
int ur_tensor_unstack(const ur_tensor_view *dsts, size_t n, const ur_tensor_view *src, int axis,
                      ur_err *err);

/* --- rearrangements (tensor_rearrange.c) ------------------------------------------------
 * An einops-style pattern over a tensor of known shape: the input's axes named in order, an
 * axis split into named parts by a parenthesized group (at most one part of unknown size per
 * group; a number is a part of that size), then "->" and the output's axes, each a part or a
 * parenthesized group of parts merged into one axis. Every part appears once on each side.
 *   "e h d -> (h d) e"            [emb, heads, head_dim] -> [heads*head_dim, emb]
 *   "e h (k 2) -> (h 2 k) e"      the same, each head's pairs split into evens then odds
 * A part on the output side may keep a range of itself, "name[lo:hi]" (hi left out: to the
 * part's end), the output then leaving the rest out (a fused kernel cut into its pieces):
 *   "e (4 b) -> (4 b[8:16]) e"    [emb, 4*b] -> rows 8..15 of each of 4 blocks, [4*8, emb]
 * The output is a view of the input: out = reshape(transpose(reshape(in, parts), perm)), with
 * the kept ranges sliced out before the last reshape. */
typedef struct {
    int in_rank;
    int n_parts;
    uint64_t part_size[UR_MAX_RANK]; /* in input order */
    /* the range of each part the output keeps, [cut_lo, cut_lo + cut_len) (in input order;
     * the whole part where the pattern names no range) */
    uint64_t cut_lo[UR_MAX_RANK];
    uint64_t cut_len[UR_MAX_RANK];
    int part_axis[UR_MAX_RANK];      /* the input axis each part is of */
    int perm[UR_MAX_RANK];           /* the output's parts, in its order */
    int out_rank;
    int out_group_end[UR_MAX_RANK];  /* output axis j is perm[end(j-1) .. end(j)) */
    uint64_t out_shape[UR_MAX_RANK];
} ur_rearrange;

/* Read `pattern` for an input of `shape`. UR_EINVAL naming the pattern and what is wrong. */
int ur_rearrange_parse(ur_rearrange *r, const char *pattern, int rank, const uint64_t *shape,
                       ur_err *err);

/* Where a box of the input lands: `rank` parts in the output's order, the extent in each of
 * the box's elements the output keeps, their strides (in elements) in a dense C-order buffer
 * of the box and the first one's place there (src_offset: 0 unless a kept range cuts the
 * box), the output's strides, and the output element that first element lands on. An extent
 * of 0: none of the box is kept. */
typedef struct {
    int rank;
    uint64_t shape[UR_MAX_RANK];
    int64_t src_stride[UR_MAX_RANK];
    int64_t dst_stride[UR_MAX_RANK];
    uint64_t src_offset;
    uint64_t offset;
} ur_rearrange_box_map;

/* Map the box [start, start + count) of the input (in_rank entries each), held at the start
 * of a dense C-order buffer of buf_shape (>= count: a chunk padded at the array's edge).
 * UR_EUNSUPPORTED when the box cuts a split axis inside a part (only the outermost part of a
 * group may be cut). */
int ur_rearrange_box(const ur_rearrange *r, const uint64_t *start, const uint64_t *count,
                     const uint64_t *buf_shape, ur_rearrange_box_map *m, ur_err *err);

/* The output as one of the parts joined into a larger tensor: each index of the axes before
 * the joined one holds a run of `inner` elements of the output at position `at` of a run of
 * `run` elements of the joined tensor (at + inner <= run), the other parts filling the rest.
 * inner = the product of the output's sizes from axis a on: the parts concatenated along axis
 * a, of any sizes there (Gemma 4's fused gate and up kernels, [experts, 2 * mlp, emb];
 * Qwen3.5's in_proj_qkv rows, from one fused kernel's query, key and value pieces); inner = 1,
 * run = n, at = k: n parts interleaved along the last axis (gpt-oss's: the gate at even
 * positions, the up projection at odd ones). Element x of the output (in C order) is element
 * (x / inner) * run + at + x % inner of the joined tensor. Makes m, a map into the output, a
 * map into the joined tensor: strides of at least `inner` (multiples of it) are multiplied by
 * run / inner; the box's elements may then land apart (innermost stride n when inner is 1).
 * UR_EINVAL when inner is 0, at + inner > run, a stride of at least inner is not a multiple of
 * it, or the offsets would overflow. */
int ur_rearrange_box_join(ur_rearrange_box_map *m, uint64_t inner, uint64_t run, uint64_t at,
                          ur_err *err);

/* --- element-wise arithmetic (tensor_cast.c) --------------------------------------------- */

typedef enum {
    UR_TENSOR_OP_NONE = 0,
    UR_TENSOR_OP_MUL,
    UR_TENSOR_OP_DIV,
    UR_TENSOR_OP_ADD
} ur_tensor_op;

/* x = x OP c for n dense elements of a float32 or bfloat16 buffer, computed in float32 and
 * rounded back to the buffer's dtype (round to nearest even), as numpy/JAX compute
 * `x.astype(float32) OP c` then `.astype(dtype)`. UR_EUNSUPPORTED for another dtype. */
int ur_tensor_apply(void *data, ur_dtype dtype, size_t n, ur_tensor_op op, float c, ur_err *err);

#endif
