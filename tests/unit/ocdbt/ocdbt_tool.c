/* Test-only driver for the OCDBT layer (built with the tests, never installed).
 *
 *   ocdbt_tool write [--max-inline N] [--max-node N] [--target-size N] [--max-held N] [--raw]
 *                    [--level L] [--resume] [--commit-every N] DST
 *       read records from stdin and write them into a new OCDBT database DST (--resume:
 *       continue the database there, ur_ocdbt_resume), committing after every N records
 *       (ur_ocdbt_writer_snapshot, each a new generation) and at the end
 *   ocdbt_tool dump DIR
 *       write every key and value of DIR (OCDBT or plain directory) to stdout as records
 *
 * Record: u32le key length, key bytes, u64le value length, value bytes. */
#include "unroll/alloc.h"
#include "unroll/buf.h"
#include "unroll/kvstore.h"
#include "unroll/ocdbt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const ur_err *err)
{
    char line[1200];
    fprintf(stderr, "ocdbt_tool: %s\n", ur_err_format(err, line, sizeof line));
    return 1;
}

static int read_exact(void *p, size_t n)
{
    return n == 0 || fread(p, 1, n, stdin) == n;
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static int cmd_write(int argc, char **argv)
{
    ur_ocdbt_write_opts opts;
    const char *dst = NULL;
    ur_kvstore *kv = NULL;
    ur_err err;
    uint8_t hdr[8];
    char *key = NULL;
    uint8_t *val = NULL;
    size_t val_cap = 0, kept = 0, every = 0, n = 0;
    int rc = UR_OK, resume = 0;

    ur_ocdbt_write_opts_init(&opts);
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--max-inline") == 0 && i + 1 < argc) {
            opts.max_inline_value_bytes = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--max-node") == 0 && i + 1 < argc) {
            opts.max_decoded_node_bytes = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--target-size") == 0 && i + 1 < argc) {
            opts.target_data_file_size = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--max-held") == 0 && i + 1 < argc) {
            opts.max_held_inline_bytes = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--level") == 0 && i + 1 < argc) {
            opts.zstd_level = (int)strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--raw") == 0) {
            opts.compress = 0;
        } else if (strcmp(argv[i], "--resume") == 0) {
            resume = 1;
        } else if (strcmp(argv[i], "--commit-every") == 0 && i + 1 < argc) {
            every = (size_t)strtoull(argv[++i], NULL, 10);
        } else {
            dst = argv[i];
        }
    }
    if (dst == NULL) {
        fprintf(stderr, "usage: ocdbt_tool write [options] DST < records\n");
        return 2;
    }
    ur_err_clear(&err);
    rc = resume ? ur_ocdbt_resume(&kv, dst, &opts, &kept, &err)
                : ur_ocdbt_create(&kv, dst, &opts, &err);
    if (rc < 0) {
        return fail(&err);
    }
    while (rc == UR_OK && read_exact(hdr, 4)) {
        size_t klen = (size_t)le(hdr, 4), vlen;
        key = ur_malloc(klen + 1);
        if (key == NULL || !read_exact(key, klen) || !read_exact(hdr, 8)) {
            rc = ur_err_set(&err, UR_EIO, "bad record on stdin");
            break;
        }
        key[klen] = '\0';
        vlen = (size_t)le(hdr, 8);
        if (vlen > val_cap) {
            uint8_t *nv = ur_realloc(val, vlen);
            if (nv == NULL) {
                rc = ur_err_oom(&err);
                break;
            }
            val = nv;
            val_cap = vlen;
        }
        if (!read_exact(val, vlen)) {
            rc = ur_err_set(&err, UR_EIO, "bad record on stdin");
            break;
        }
        rc = ur_kvstore_write(kv, key, val, vlen, &err);
        ur_free(key);
        key = NULL;
        if (rc == UR_OK && every > 0 && ++n % every == 0) {
            rc = ur_ocdbt_writer_snapshot(kv, &err);
        }
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_commit(kv, &err);
    }
    ur_free(key);
    ur_free(val);
    ur_kvstore_close(kv);
    return rc < 0 ? fail(&err) : 0;
}

typedef struct {
    ur_kvstore *kv;
    ur_buf buf;
    ur_err *err;
} dump_ctx;

static int dump_one(void *ctx, const char *key, uint64_t size)
{
    dump_ctx *d = ctx;
    uint8_t hdr[8];
    size_t klen = strlen(key);
    int rc;
    ur_buf_reset(&d->buf);
    rc = ur_kvstore_read(d->kv, key, &d->buf, d->err);
    if (rc < 0) {
        return rc;
    }
    if (d->buf.len != size) {
        return ur_err_set(d->err, UR_EINTERNAL, "%s: listed size %llu, read %zu", key,
                          (unsigned long long)size, d->buf.len);
    }
    for (int i = 0; i < 4; i++) {
        hdr[i] = (uint8_t)(klen >> (8 * i));
    }
    fwrite(hdr, 1, 4, stdout);
    fwrite(key, 1, klen, stdout);
    for (int i = 0; i < 8; i++) {
        hdr[i] = (uint8_t)((uint64_t)d->buf.len >> (8 * i));
    }
    fwrite(hdr, 1, 8, stdout);
    if (d->buf.len > 0) {
        fwrite(d->buf.data, 1, d->buf.len, stdout);
    }
    return UR_OK;
}

static int cmd_dump(const char *dir)
{
    dump_ctx d;
    ur_err err;
    int rc;
    ur_err_clear(&err);
    memset(&d, 0, sizeof d);
    d.err = &err;
    ur_buf_init(&d.buf, 0);
    rc = ur_kvstore_open_auto(&d.kv, dir, &err);
    if (rc == UR_OK) {
        rc = ur_kvstore_list(d.kv, "", dump_one, &d, &err);
    }
    ur_buf_dispose(&d.buf);
    ur_kvstore_close(d.kv);
    if (fflush(stdout) != 0) {
        return 1;
    }
    return rc < 0 ? fail(&err) : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "write") == 0) {
        return cmd_write(argc, argv);
    }
    if (argc == 3 && strcmp(argv[1], "dump") == 0) {
        return cmd_dump(argv[2]);
    }
    fprintf(stderr, "usage: ocdbt_tool write [options] DST < records | ocdbt_tool dump DIR\n");
    return 2;
}
