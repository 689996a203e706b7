/* unroll ls [--sizes] [--manifest] [--tree] [--cat KEY] <dir> [prefix]
 *
 * Lists the keys of an OCDBT database or a plain directory (ur_kvstore_open_auto), one per
 * line, optionally with value sizes; --manifest / --tree describe the OCDBT manifest and the
 * B+tree; --cat writes one value's bytes to stdout (for scripts and tests). */
#include "cli.h"

#include "unroll/alloc.h"
#include "unroll/buf.h"
#include "unroll/kvstore.h"
#include "unroll/ocdbt.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: unroll ls [--sizes] [--manifest] [--tree] [--cat KEY] <dir> [prefix]\n"
    "  List the keys of an OCDBT database (a directory with manifest.ocdbt) or of a plain\n"
    "  directory, in bytewise order, optionally only those starting with <prefix>.\n"
    "  --sizes     print each value's size in bytes after its key (tab-separated)\n"
    "  --manifest  print the OCDBT manifest: config, data files, versions, version-tree nodes\n"
    "  --tree      print the B+tree of the latest version: nodes, keys, value locations\n"
    "  --cat KEY   write the value of KEY to stdout (raw bytes) instead of listing\n"
    "              (also --cat=KEY)\n";

typedef struct {
    int sizes;
    unsigned long long count;
} ls_ctx;

static int print_key(void *ctx, const char *key, uint64_t size)
{
    ls_ctx *c = ctx;
    c->count++;
    if (c->sizes) {
        return printf("%s\t%" PRIu64 "\n", key, size) < 0;
    }
    return printf("%s\n", key) < 0;
}

static int write_out(const ur_buf *b)
{
    return b->len > 0 && fwrite(b->data, 1, b->len, stdout) != b->len;
}

int cli_cmd_ls(int argc, char **argv)
{
    const char *dir = NULL, *prefix = "", *cat = NULL;
    int sizes = 0, manifest = 0, tree = 0, rc, status = CLI_EXIT_OK;
    ur_kvstore *kv = NULL;
    ur_err err;
    ur_buf out;
    ls_ctx ctx;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--sizes") == 0) {
            sizes = 1;
        } else if (strcmp(a, "--manifest") == 0) {
            manifest = 1;
        } else if (strcmp(a, "--tree") == 0) {
            tree = 1;
        } else if (cli_opt_value(argc, argv, &i, NULL, "--cat", &cat)) {
            if (cat == NULL) {
                return cli_usage_error("--cat needs a key\n%s", usage);
            }
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            return CLI_EXIT_OK;
        } else if (a[0] == '-' && a[1] == '-') {
            return cli_usage_error("unknown option '%s'\n%s", a, usage);
        } else if (dir == NULL) {
            dir = a;
        } else if (prefix[0] == '\0') {
            prefix = a;
        } else {
            return cli_usage_error("too many arguments\n%s", usage);
        }
    }
    if (dir == NULL) {
        return cli_usage_error("missing <dir>\n%s", usage);
    }
    rc = cli_multi_show_status(dir); /* a multi-process run still being written */
    if (rc >= 0) {
        return rc;
    }
    ur_err_clear(&err);
    ur_buf_init(&out, 0);
    rc = ur_kvstore_open_auto(&kv, dir, &err);
    if (rc < 0) {
        return cli_fail(&err);
    }
    if (cat != NULL) {
        rc = ur_kvstore_read(kv, cat, &out, &err);
        if (rc == UR_OK && write_out(&out)) {
            rc = ur_err_set(&err, UR_EIO, "cannot write to stdout");
        }
        goto done;
    }
    if (manifest) {
        rc = ur_ocdbt_dump_manifest(kv, &out, &err);
        if (rc == UR_OK && write_out(&out)) {
            rc = ur_err_set(&err, UR_EIO, "cannot write to stdout");
        }
        ur_buf_reset(&out);
    }
    if (rc == UR_OK && tree) {
        rc = ur_ocdbt_dump_tree(kv, &out, &err);
        if (rc == UR_OK && write_out(&out)) {
            rc = ur_err_set(&err, UR_EIO, "cannot write to stdout");
        }
    }
    if (rc == UR_OK && !manifest && !tree) {
        ctx.sizes = sizes;
        ctx.count = 0;
        rc = ur_kvstore_list(kv, prefix, print_key, &ctx, &err);
        if (rc > 0) {
            rc = ur_err_set(&err, UR_EIO, "cannot write to stdout");
        }
    }
done:
    if (rc < 0) {
        status = cli_fail(&err);
    } else if (fflush(stdout) != 0) {
        ur_err_set(&err, UR_EIO, "cannot write to stdout");
        status = cli_fail(&err);
    }
    ur_buf_dispose(&out);
    ur_kvstore_close(kv);
    return status;
}
