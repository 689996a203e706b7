/* Test-only driver of the GCS kvstore for tests/interop/test_gcs.py (not installed):
 *
 *   gcs_tool get    gs://b/p KEY              value to stdout
 *   gcs_tool range  gs://b/p KEY OFF LEN      LEN bytes at OFF to stdout
 *   gcs_tool size   gs://b/p KEY
 *   gcs_tool ls     gs://b/p [PREFIX]         "<key>\t<size>" lines
 *   gcs_tool lsdir  gs://b/p [DIR/]           one level (ur_kvstore_list_dir): "<name>" or
 *                                             "<name>/" lines (any location, s3:// too)
 *   gcs_tool put    gs://b/p KEY FILE         write FILE's bytes
 *   gcs_tool create gs://b/p KEY FILE         conditional create: "created" or "exists"
 *                                             (ur_kvstore_create; any location, s3:// too)
 *   gcs_tool rm     gs://b/p KEY
 *   gcs_tool auth   gs://b/p                  the credentials kind, after one listing
 *
 * Exit status: 0 ok; 3 I/O (as unroll); 6 not found; 2 usage; 1 other. One stderr line. */
#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/kvstore_gcs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int print_entry(void *ctx, const char *key, uint64_t size)
{
    (void)ctx;
    printf("%s\t%llu\n", key, (unsigned long long)size);
    return 0;
}

static int print_name(void *ctx, const char *name, int is_dir)
{
    (void)ctx;
    printf("%s%s\n", name, is_dir ? "/" : "");
    return 0;
}

static int run(ur_kvstore *kv, int argc, char **argv, ur_err *err)
{
    const char *cmd = argv[1];
    int rc;
    if (strcmp(cmd, "get") == 0 && argc == 4) {
        ur_buf b;
        ur_buf_init(&b, 0);
        rc = ur_kvstore_read(kv, argv[3], &b, err);
        if (rc == UR_OK && b.len > 0) {
            fwrite(b.data, 1, b.len, stdout);
        }
        ur_buf_dispose(&b);
        return rc;
    }
    if (strcmp(cmd, "range") == 0 && argc == 6) {
        size_t len = strtoull(argv[5], NULL, 10);
        void *dst = ur_malloc(len + 1);
        rc = dst == NULL
                 ? ur_err_oom(err)
                 : ur_kvstore_read_range(kv, argv[3], strtoull(argv[4], NULL, 10), len, dst, err);
        if (rc == UR_OK) {
            fwrite(dst, 1, len, stdout);
        }
        ur_free(dst);
        return rc;
    }
    if (strcmp(cmd, "size") == 0 && argc == 4) {
        uint64_t size;
        rc = ur_kvstore_size(kv, argv[3], &size, err);
        if (rc == UR_OK) {
            printf("%llu\n", (unsigned long long)size);
        }
        return rc;
    }
    if (strcmp(cmd, "ls") == 0 && (argc == 3 || argc == 4)) {
        return ur_kvstore_list(kv, argc == 4 ? argv[3] : "", print_entry, NULL, err);
    }
    if (strcmp(cmd, "lsdir") == 0 && (argc == 3 || argc == 4)) {
        return ur_kvstore_list_dir(kv, argc == 4 ? argv[3] : "", print_name, NULL, err);
    }
    if ((strcmp(cmd, "put") == 0 || strcmp(cmd, "create") == 0) && argc == 5) {
        ur_buf b;
        ur_buf_init(&b, 0);
        rc = ur_fs_read_file(&b, argv[4], (size_t)1 << 34, err);
        if (rc == UR_OK && cmd[0] == 'p') {
            rc = ur_kvstore_write(kv, argv[3], b.data, b.len, err);
        } else if (rc == UR_OK) {
            rc = ur_kvstore_create(kv, argv[3], b.data, b.len, err);
            if (rc == UR_OK || rc == UR_EEXIST) {
                puts(rc == UR_EEXIST ? "exists" : "created");
                rc = UR_OK;
            }
        }
        if (rc == UR_OK) {
            rc = ur_kvstore_commit(kv, err);
        }
        ur_buf_dispose(&b);
        return rc;
    }
    if (strcmp(cmd, "rm") == 0 && argc == 4) {
        return ur_kvstore_delete(kv, argv[3], err);
    }
    if (strcmp(cmd, "auth") == 0 && argc == 3) {
        rc = ur_kvstore_list(kv, "", print_entry, NULL, err);
        if (rc == UR_OK) {
            fprintf(stderr, "auth: %s\n", ur_kvstore_gcs_auth_kind(kv));
        }
        return rc;
    }
    return ur_err_set(err, UR_EINVAL,
                      "usage: gcs_tool get|range|size|ls|lsdir|put|create|rm|auth "
                      "gs://bucket/prefix ...");
}

int main(int argc, char **argv)
{
    ur_kvstore *kv = NULL;
    ur_err err;
    char line[1200];
    int rc;

    ur_err_clear(&err);
    if (argc < 3) {
        fprintf(stderr, "usage: gcs_tool CMD gs://bucket/prefix ...\n");
        return 2;
    }
    rc = ur_kvstore_open_url(&kv, argv[2], 1, &err);
    if (rc == UR_OK) {
        rc = run(kv, argc, argv, &err);
    }
    ur_kvstore_close(kv);
    if (rc == UR_OK) {
        return 0;
    }
    if (rc > 0) { /* a listing callback's stop: not used here */
        return 1;
    }
    fprintf(stderr, "gcs_tool: %s\n", ur_err_format(&err, line, sizeof line));
    switch (rc) {
    case UR_EIO:
        return 3;
    case UR_ENOTFOUND:
        return 6;
    case UR_EINVAL:
        return 2;
    default:
        return 1;
    }
}
