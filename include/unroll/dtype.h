/* Element types, named as TensorStore names them ("float32", "bfloat16", ...). Shared by the
 * zarr layer (which maps them to zarr dtype strings) and the tensor kernels. In memory an
 * element is always little-endian, one per `ur_dtype_size` bytes (int4 and uint4 take one
 * byte each, as TensorStore holds them in memory). */
#ifndef UNROLL_DTYPE_H
#define UNROLL_DTYPE_H

#include <stddef.h>

#define UR_MAX_RANK 32

typedef enum {
    UR_DT_INVALID = 0,
    UR_DT_BOOL,
    UR_DT_INT4,
    UR_DT_INT8,
    UR_DT_INT16,
    UR_DT_INT32,
    UR_DT_INT64,
    UR_DT_UINT4,
    UR_DT_UINT8,
    UR_DT_UINT16,
    UR_DT_UINT32,
    UR_DT_UINT64,
    UR_DT_FLOAT16,
    UR_DT_BFLOAT16,
    UR_DT_FLOAT32,
    UR_DT_FLOAT64,
    UR_DT_COMPLEX64,
    UR_DT_COMPLEX128,
    UR_DT_FLOAT8_E3M4,
    UR_DT_FLOAT8_E4M3,
    UR_DT_FLOAT8_E4M3FN,
    UR_DT_FLOAT8_E4M3FNUZ,
    UR_DT_FLOAT8_E4M3B11FNUZ,
    UR_DT_FLOAT8_E5M2,
    UR_DT_FLOAT8_E5M2FNUZ,
    UR_DT_FLOAT8_E8M0FNU,
    UR_DT_COUNT_
} ur_dtype;

/* Bytes per element in memory; 0 for UR_DT_INVALID. */
size_t ur_dtype_size(ur_dtype dt);
/* TensorStore's name ("bfloat16"), or "invalid". */
const char *ur_dtype_name(ur_dtype dt);
/* Inverse of ur_dtype_name; UR_DT_INVALID when unknown. */
ur_dtype ur_dtype_from_name(const char *name);
/* 1 for float16/bfloat16/float32/float64 and the float8 variants. */
int ur_dtype_is_float(ur_dtype dt);

#endif
