/* Element-type table. */
#include "unroll/dtype.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
    int is_float;
} dtypes[UR_DT_COUNT_] = {
    [UR_DT_INVALID] = {"invalid", 0, 0},
    [UR_DT_BOOL] = {"bool", 1, 0},
    [UR_DT_INT4] = {"int4", 1, 0},
    [UR_DT_INT8] = {"int8", 1, 0},
    [UR_DT_INT16] = {"int16", 2, 0},
    [UR_DT_INT32] = {"int32", 4, 0},
    [UR_DT_INT64] = {"int64", 8, 0},
    [UR_DT_UINT4] = {"uint4", 1, 0},
    [UR_DT_UINT8] = {"uint8", 1, 0},
    [UR_DT_UINT16] = {"uint16", 2, 0},
    [UR_DT_UINT32] = {"uint32", 4, 0},
    [UR_DT_UINT64] = {"uint64", 8, 0},
    [UR_DT_FLOAT16] = {"float16", 2, 1},
    [UR_DT_BFLOAT16] = {"bfloat16", 2, 1},
    [UR_DT_FLOAT32] = {"float32", 4, 1},
    [UR_DT_FLOAT64] = {"float64", 8, 1},
    [UR_DT_COMPLEX64] = {"complex64", 8, 0},
    [UR_DT_COMPLEX128] = {"complex128", 16, 0},
    [UR_DT_FLOAT8_E3M4] = {"float8_e3m4", 1, 1},
    [UR_DT_FLOAT8_E4M3] = {"float8_e4m3", 1, 1},
    [UR_DT_FLOAT8_E4M3FN] = {"float8_e4m3fn", 1, 1},
    [UR_DT_FLOAT8_E4M3FNUZ] = {"float8_e4m3fnuz", 1, 1},
    [UR_DT_FLOAT8_E4M3B11FNUZ] = {"float8_e4m3b11fnuz", 1, 1},
    [UR_DT_FLOAT8_E5M2] = {"float8_e5m2", 1, 1},
    [UR_DT_FLOAT8_E5M2FNUZ] = {"float8_e5m2fnuz", 1, 1},
    [UR_DT_FLOAT8_E8M0FNU] = {"float8_e8m0fnu", 1, 1},
};

size_t ur_dtype_size(ur_dtype dt)
{
    return (unsigned)dt < UR_DT_COUNT_ ? dtypes[dt].size : 0;
}

const char *ur_dtype_name(ur_dtype dt)
{
    return (unsigned)dt < UR_DT_COUNT_ ? dtypes[dt].name : "invalid";
}

ur_dtype ur_dtype_from_name(const char *name)
{
    for (int i = 1; i < UR_DT_COUNT_; i++) {
        if (strcmp(dtypes[i].name, name) == 0) {
            return (ur_dtype)i;
        }
    }
    return UR_DT_INVALID;
}

int ur_dtype_is_float(ur_dtype dt)
{
    return (unsigned)dt < UR_DT_COUNT_ ? dtypes[dt].is_float : 0;
}
