/* Fuzz target: OCDBT data-file table (prefix-compressed paths). The first input byte picks the
 * transitive path put in front of every entry ("" or "sub/"); the rest is the table. A table
 * that decodes (without transitive part) and re-encodes decodes again to the same entries. */
#include "fuzz_common.h"

#include "kvstore/ocdbt/ocdbt_format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ur_ocdbt_table t;
    ur_buf again;
    ur_rd rd;
    ur_err err;
    const char *transitive;
    size_t tlen;
    int rc;

    if (size < 1) {
        return 0;
    }
    transitive = (data[0] & 1) ? "sub/" : "";
    tlen = strlen(transitive);
    memset(&t, 0, sizeof t);
    ur_err_clear(&err);
    ur_rd_init(&rd, data + 1, size - 1);
    rc = ur_ocdbt_table_decode(&t, &rd, transitive, tlen, &err);
    fz_check_err(rc, &err);
    if (rc == UR_OK) {
        for (size_t i = 0; i < t.n; i++) {
            fz_check(t.f[i].len == strlen(t.f[i].path));
            fz_check(t.f[i].base_len <= t.f[i].len);
            fz_check(t.f[i].len >= tlen && memcmp(t.f[i].path, transitive, tlen) == 0);
        }
        if (tlen == 0) {
            ur_buf_init(&again, 0);
            if (ur_ocdbt_table_encode(&again, &t, &err) == UR_OK) {
                ur_ocdbt_table t2;
                ur_rd rd2;
                memset(&t2, 0, sizeof t2);
                ur_rd_init(&rd2, again.data, again.len);
                fz_check(ur_ocdbt_table_decode(&t2, &rd2, "", 0, &err) == UR_OK);
                fz_check(rd2.pos == again.len && t2.n == t.n);
                for (size_t i = 0; i < t.n; i++) {
                    fz_check(t2.f[i].len == t.f[i].len && t2.f[i].base_len == t.f[i].base_len);
                    fz_check(memcmp(t2.f[i].path, t.f[i].path, t.f[i].len) == 0);
                }
                ur_ocdbt_table_dispose(&t2);
            }
            ur_buf_dispose(&again);
        }
        ur_ocdbt_table_dispose(&t);
    }
    return 0;
}
