/* Benchmark (built, not a test): ur_tensor_unstack of a dense [A, L, B] chunk on axis 1 into L
 * separate per-layer buffers, against memcpy of the same source bytes.
 *   bench_tensor_unstack [A L B [reps]]      default 1024 32 4096 3
 * Prints the best time of `reps` for each case, with GB/s of source bytes read and of all
 * bytes moved (read + written). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "unroll/alloc.h"
#include "unroll/tensor.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    const char *name;
    ur_dtype sdt, ddt;
} bench_case;

static void report(const char *name, double t, double rd, double wr)
{
    printf("%-28s %8.3f s  read %7.2f GB/s  read+write %7.2f GB/s\n", name, t, rd / t / 1e9,
           (rd + wr) / t / 1e9);
}

int main(int argc, char **argv)
{
    uint64_t a = 1024, l = 32, b = 4096;
    int reps = 3;
    static const bench_case cases[] = {
        {"unstack f32->bf16", UR_DT_FLOAT32, UR_DT_BFLOAT16},
        {"unstack bf16->bf16", UR_DT_BFLOAT16, UR_DT_BFLOAT16},
        {"unstack f32->f32", UR_DT_FLOAT32, UR_DT_FLOAT32},
        {"unstack f64->bf16 (half A)", UR_DT_FLOAT64, UR_DT_BFLOAT16},
        {"unstack f16->bf16", UR_DT_FLOAT16, UR_DT_BFLOAT16},
    };
    unsigned char *src, *copy, **dst;
    ur_tensor_view *dv;
    size_t sbytes, layer_bytes;
    double best;
    ur_err err;

    if (argc >= 4) {
        a = strtoull(argv[1], NULL, 10);
        l = strtoull(argv[2], NULL, 10);
        b = strtoull(argv[3], NULL, 10);
    }
    if (argc >= 5) {
        reps = atoi(argv[4]);
    }
    sbytes = (size_t)(a * l * b * 4);
    layer_bytes = (size_t)(a * b * 4);
    src = ur_malloc(sbytes);
    copy = ur_malloc(sbytes);
    dst = ur_calloc((size_t)l, sizeof *dst);
    dv = ur_calloc((size_t)l, sizeof *dv);
    if (src == NULL || copy == NULL || dst == NULL || dv == NULL) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (uint64_t i = 0; i < l; i++) {
        dst[i] = ur_malloc(layer_bytes);
        if (dst[i] == NULL) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        memset(dst[i], 0, layer_bytes);
    }
    for (size_t i = 0; i < sbytes / 4; i++) {
        float f = (float)(i % 1000003) * 0.001f - 17.0f;
        memcpy(src + 4 * i, &f, 4);
    }
    memset(copy, 0, sbytes);
    printf("src [%llu, %llu, %llu] float32 = %.1f MiB, axis 1 -> %llu dsts\n",
           (unsigned long long)a, (unsigned long long)l, (unsigned long long)b,
           (double)sbytes / 1048576.0, (unsigned long long)l);

    best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        memcpy(copy, src, sbytes);
        double t = now() - t0;
        best = t < best ? t : best;
    }
    report("memcpy (f32 bytes)", best, (double)sbytes, (double)sbytes);

    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint64_t ca = cases[c].sdt == UR_DT_FLOAT64 ? a / 2 : a;
        uint64_t shape[3] = {ca, l, b}, dshape[2] = {ca, b};
        ur_tensor_view sv;
        double rd = (double)(ca * l * b * ur_dtype_size(cases[c].sdt));
        double wr = (double)(ca * l * b * ur_dtype_size(cases[c].ddt));

        if (ur_tensor_view_init_dense(&sv, cases[c].sdt, 3, shape, src, &err) < 0) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        for (uint64_t i = 0; i < l; i++) {
            if (ur_tensor_view_init_dense(&dv[i], cases[c].ddt, 2, dshape, dst[i], &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
        }
        best = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            if (ur_tensor_unstack(dv, (size_t)l, &sv, 1, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            double t = now() - t0;
            best = t < best ? t : best;
        }
        report(cases[c].name, best, rd, wr);
    }
    for (uint64_t i = 0; i < l; i++) {
        ur_free(dst[i]);
    }
    ur_free(dst);
    ur_free(dv);
    ur_free(src);
    ur_free(copy);
    return 0;
}
