/* Test-only driver for the interop tests (tests/interop/test_zarr.py):
 *
 *   zarr_tool read  <dir> <prefix> [format]           header line + whole array
 *   zarr_tool box   <dir> <prefix> <start> <count>    header line + that box
 *   zarr_tool chunk <dir> <prefix> <idx>              header line + one decoded chunk
 *   zarr_tool stream <dir> <prefix> <idx> [pieces]    the same through ur_zarr_chunk_stream,
 *                                                      read in pieces of the given sizes
 *                                                      (comma-separated, cycled; default
 *                                                      the whole chunk); the header also
 *                                                      has "incremental":0|1
 *   zarr_tool write <dir> <prefix> <2|3> <dtype> <shape> <chunk_shape> [zstd_level]
 *                                                      raw C-order bytes on stdin
 *   zarr_tool stored <dir> <prefix>                   stored bytes, one line
 *
 * Shapes are comma-separated ("-" for rank 0). The header line is JSON:
 * {"dtype":"float32","shape":[..],"chunk_shape":[..],"zarr_format":3,"nbytes":N}
 * then exactly N raw little-endian bytes follow. Errors: one line on stderr
 * "error: <code>: <message>", exit status 1. The directory is a plain kvstore_file. */
#include "unroll/alloc.h"
#include "unroll/kvstore.h"
#include "unroll/zarr.h"
#include "zarr/zarr_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const ur_err *err)
{
    char buf[1200];
    fprintf(stderr, "error: %s: %s\n", ur_code_name(err->code),
            ur_err_format(err, buf, sizeof(buf)));
    return 1;
}

static int parse_dims(const char *s, uint64_t *out)
{
    int n = 0;
    if (strcmp(s, "-") == 0 || s[0] == '\0') {
        return 0;
    }
    while (*s) {
        char *end;
        if (n == UR_MAX_RANK) {
            return -1;
        }
        out[n++] = strtoull(s, &end, 10);
        if (end == s) {
            return -1;
        }
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

static void header(const ur_zarr_info *in, const uint64_t *shape, uint64_t nbytes,
                   const char *extra)
{
    printf("{\"dtype\":\"%s\",\"shape\":[", ur_dtype_name(in->dtype));
    for (int d = 0; d < in->rank; d++) {
        printf("%s%llu", d ? "," : "", (unsigned long long)shape[d]);
    }
    printf("],\"chunk_shape\":[");
    for (int d = 0; d < in->rank; d++) {
        printf("%s%llu", d ? "," : "", (unsigned long long)in->chunk_shape[d]);
    }
    printf("],\"zarr_format\":%d,\"nbytes\":%llu%s}\n", in->zarr_format,
           (unsigned long long)nbytes, extra);
}

/* Read chunk idx through a chunk stream in pieces[k % np] bytes (np 0: all at once). */
static int stream_chunk(ur_zarr_array *a, const uint64_t *idx, const uint64_t *pieces, int np,
                        ur_err *err)
{
    const ur_zarr_info *in = ur_zarr_array_info(a);
    ur_zarr_chunk_stream *s = NULL;
    uint8_t *buf = ur_malloc(in->chunk_bytes ? in->chunk_bytes : 1);
    size_t pos = 0;
    int rc, k = 0;

    if (buf == NULL) {
        return ur_err_oom(err);
    }
    rc = ur_zarr_chunk_stream_open(&s, a, idx, err);
    while (rc == UR_OK && pos < in->chunk_bytes) {
        size_t n = in->chunk_bytes - pos;
        if (np > 0 && pieces[k % np] < n) {
            n = (size_t)pieces[k % np];
        }
        k++;
        rc = ur_zarr_chunk_stream_read(s, buf + pos, n, err);
        pos += n;
    }
    if (rc == UR_OK) {
        header(in, in->chunk_shape, in->chunk_bytes,
               ur_zarr_chunk_stream_is_incremental(s) ? ",\"incremental\":1"
                                                      : ",\"incremental\":0");
        fwrite(buf, 1, in->chunk_bytes, stdout);
    }
    ur_zarr_chunk_stream_close(s);
    ur_free(buf);
    return rc;
}

static int cmd_read(int argc, char **argv, ur_err *err)
{
    ur_kvstore *kv = NULL;
    ur_zarr_array *a = NULL;
    uint64_t start[UR_MAX_RANK] = {0}, count[UR_MAX_RANK], n;
    const char *mode = argv[1];
    int rc, fmt = 0;
    uint8_t *buf = NULL;

    if (strcmp(mode, "read") == 0 && argc > 4) {
        fmt = atoi(argv[4]);
    }
    rc = ur_kvstore_file_open(&kv, argv[2], 0, err);
    if (rc == UR_OK) {
        rc = ur_zarr_array_open(&a, kv, argv[3], fmt, err);
    }
    if (rc < 0) {
        goto out;
    }
    const ur_zarr_info *in = ur_zarr_array_info(a);
    n = ur_dtype_size(in->dtype);
    if (strcmp(mode, "chunk") == 0) {
        if (argc < 5 || parse_dims(argv[4], start) != in->rank) {
            rc = ur_err_set(err, UR_EINVAL, "bad chunk index");
            goto out;
        }
        buf = ur_malloc(in->chunk_bytes);
        rc = buf ? ur_zarr_array_read_chunk(a, start, buf, err) : ur_err_oom(err);
        if (rc == UR_OK) {
            header(in, in->chunk_shape, in->chunk_bytes, "");
            fwrite(buf, 1, in->chunk_bytes, stdout);
        }
        goto out;
    }
    if (strcmp(mode, "stream") == 0) {
        uint64_t pieces[UR_MAX_RANK];
        int np = argc > 5 ? parse_dims(argv[5], pieces) : 0;
        if (argc < 5 || parse_dims(argv[4], start) != in->rank || np < 0) {
            rc = ur_err_set(err, UR_EINVAL, "bad chunk index or piece sizes");
            goto out;
        }
        for (int i = 0; i < np; i++) {
            if (pieces[i] == 0) {
                rc = ur_err_set(err, UR_EINVAL, "piece size 0");
                goto out;
            }
        }
        rc = stream_chunk(a, start, pieces, np, err);
        goto out;
    }
    if (strcmp(mode, "box") == 0) {
        if (argc < 6 || parse_dims(argv[4], start) != in->rank ||
            parse_dims(argv[5], count) != in->rank) {
            rc = ur_err_set(err, UR_EINVAL, "bad box");
            goto out;
        }
    } else {
        memcpy(count, in->shape, sizeof(count));
    }
    for (int d = 0; d < in->rank; d++) {
        n *= count[d];
    }
    buf = ur_malloc((size_t)n);
    rc = buf ? ur_zarr_array_read_box(a, start, count, buf, err) : ur_err_oom(err);
    if (rc == UR_OK) {
        header(in, count, n, "");
        fwrite(buf, 1, (size_t)n, stdout);
    }
out:
    ur_free(buf);
    ur_zarr_array_close(a);
    ur_kvstore_close(kv);
    return rc;
}

static int cmd_write(int argc, char **argv, ur_err *err)
{
    ur_kvstore *kv = NULL;
    ur_zarr_array *a = NULL;
    ur_zarr_spec spec;
    uint8_t *all = NULL, *chunk = NULL;
    uint64_t idx[UR_MAX_RANK] = {0}, zero[UR_MAX_RANK] = {0}, lo[UR_MAX_RANK], cnt[UR_MAX_RANK];
    size_t total, got;
    int rc;

    memset(&spec, 0, sizeof(spec));
    if (argc < 8) {
        return ur_err_set(err, UR_EINVAL, "write needs 6 arguments");
    }
    spec.zarr_format = atoi(argv[4]);
    spec.dtype = ur_dtype_from_name(argv[5]);
    spec.rank = parse_dims(argv[6], spec.shape);
    if (parse_dims(argv[7], spec.chunk_shape) != spec.rank || spec.rank < 0) {
        return ur_err_set(err, UR_EINVAL, "shape and chunk_shape ranks differ");
    }
    spec.zstd_level = argc > 8 ? atoi(argv[8]) : 0;
    rc = ur_kvstore_file_open(&kv, argv[2], 1, err);
    if (rc == UR_OK) {
        rc = ur_zarr_array_create(&a, kv, argv[3], &spec, err);
    }
    if (rc < 0) {
        goto out;
    }
    const ur_zarr_info *in = ur_zarr_array_info(a);
    total = (size_t)in->nbytes;
    all = ur_malloc(total + 1);
    chunk = ur_calloc(1, in->chunk_bytes);
    if (all == NULL || chunk == NULL) {
        rc = ur_err_oom(err);
        goto out;
    }
    got = fread(all, 1, total + 1, stdin);
    if (got != total) {
        rc = ur_err_set(err, UR_EINVAL, "stdin has %zu bytes, expected %zu", got, total);
        goto out;
    }
    if (in->chunk_count == 0) {
        goto commit;
    }
    for (;;) {
        for (int d = 0; d < in->rank; d++) {
            lo[d] = idx[d] * in->chunk_shape[d];
            cnt[d] = in->shape[d] - lo[d] < in->chunk_shape[d] ? in->shape[d] - lo[d]
                                                               : in->chunk_shape[d];
        }
        memset(chunk, 0, in->chunk_bytes);
        ur_zarr_chunk_grid__copy_box(chunk, in->chunk_shape, zero, all, in->shape, lo, cnt,
                                     in->rank, ur_dtype_size(in->dtype));
        rc = ur_zarr_array_write_chunk(a, idx, chunk, err);
        if (rc < 0) {
            goto out;
        }
        int d = in->rank - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < in->grid[d]) {
                break;
            }
            idx[d] = 0;
        }
        if (d < 0) {
            break;
        }
    }
commit:
    rc = ur_kvstore_commit(kv, err);
out:
    ur_free(all);
    ur_free(chunk);
    ur_zarr_array_close(a);
    ur_kvstore_close(kv);
    return rc;
}

static int cmd_stored(char **argv, ur_err *err)
{
    ur_kvstore *kv = NULL;
    ur_zarr_array *a = NULL;
    uint64_t n = 0;
    int rc = ur_kvstore_file_open(&kv, argv[2], 0, err);
    if (rc == UR_OK) {
        rc = ur_zarr_array_open(&a, kv, argv[3], 0, err);
    }
    if (rc == UR_OK) {
        rc = ur_zarr_array_stored_bytes(a, &n, err);
    }
    if (rc == UR_OK) {
        printf("%llu\n", (unsigned long long)n);
    }
    ur_zarr_array_close(a);
    ur_kvstore_close(kv);
    return rc;
}

int main(int argc, char **argv)
{
    ur_err err;
    int rc;

    ur_err_clear(&err);
    if (argc < 4) {
        fprintf(stderr,
                "usage: zarr_tool read|box|chunk|stream|write|stored <dir> <prefix> ...\n");
        return 2;
    }
    if (strcmp(argv[1], "write") == 0) {
        rc = cmd_write(argc, argv, &err);
    } else if (strcmp(argv[1], "stored") == 0) {
        rc = cmd_stored(argv, &err);
    } else if (strcmp(argv[1], "read") == 0 || strcmp(argv[1], "box") == 0 ||
               strcmp(argv[1], "chunk") == 0 || strcmp(argv[1], "stream") == 0) {
        rc = cmd_read(argc, argv, &err);
    } else {
        fprintf(stderr, "unknown command %s\n", argv[1]);
        return 2;
    }
    if (rc < 0) {
        return fail(&err);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
