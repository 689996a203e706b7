/* Test-only: convert raw little-endian elements of the dtype named in argv[1] (float32,
 * float64, float16, bfloat16 or a float8 format), read from stdin, to raw bfloat16 on stdout,
 * through ur_tensor_copy on rank-1 views. Used by tests/interop/test_tensor_cast.py. Exit 0 on
 * success, 2 on usage errors, 1 on other failures. */
#include <stdio.h>
#include <string.h>

#include "unroll/alloc.h"
#include "unroll/tensor.h"

int main(int argc, char **argv)
{
    ur_dtype sdt;
    size_t cap = 1 << 20, len = 0, esz, n;
    unsigned char *in = NULL, *out = NULL;
    ur_tensor_view s, d;
    uint64_t shape[1];
    ur_err err;
    int status = 1;

    if (argc != 2 || (sdt = ur_dtype_from_name(argv[1])) == UR_DT_INVALID ||
        !ur_tensor_cast_supported(UR_DT_BFLOAT16, sdt)) {
        fprintf(stderr,
                "usage: tensor_cast_tool float32|float64|float16|bfloat16|float8_* <in >out\n");
        return 2;
    }
    in = ur_malloc(cap);
    if (in == NULL) {
        goto out;
    }
    for (;;) {
        size_t got = fread(in + len, 1, cap - len, stdin);
        len += got;
        if (len < cap) {
            break;
        }
        unsigned char *bigger = ur_realloc(in, cap * 2);
        if (bigger == NULL) {
            goto out;
        }
        in = bigger;
        cap *= 2;
    }
    if (ferror(stdin)) {
        fprintf(stderr, "tensor_cast_tool: read error\n");
        goto out;
    }
    esz = ur_dtype_size(sdt);
    if (len % esz != 0) {
        fprintf(stderr, "tensor_cast_tool: %zu bytes is not a whole number of %s\n", len, argv[1]);
        status = 2;
        goto out;
    }
    n = len / esz;
    out = ur_malloc(n * 2 + 1);
    if (out == NULL) {
        goto out;
    }
    shape[0] = n;
    if (ur_tensor_view_init_dense(&s, sdt, 1, shape, in, &err) < 0 ||
        ur_tensor_view_init_dense(&d, UR_DT_BFLOAT16, 1, shape, out, &err) < 0 ||
        ur_tensor_copy(&d, &s, &err) < 0) {
        fprintf(stderr, "tensor_cast_tool: %s\n", err.msg);
        goto out;
    }
    if (fwrite(out, 2, n, stdout) != n || fflush(stdout) != 0) {
        fprintf(stderr, "tensor_cast_tool: write error\n");
        goto out;
    }
    status = 0;
out:
    ur_free(in);
    ur_free(out);
    return status;
}
