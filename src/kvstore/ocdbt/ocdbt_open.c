/* ur_kvstore_open_auto: what TensorStore's and Orbax's auto-detection do — a location with
 * manifest.ocdbt is an OCDBT database (read through the location's store), anything else the
 * plain store. */
#include "unroll/kvstore.h"
#include "unroll/ocdbt.h"

int ur_kvstore_open_auto(ur_kvstore **out, const char *dir, ur_err *err)
{
    ur_kvstore *base = NULL;
    uint64_t size;
    ur_err probe;
    int rc = ur_kvstore_open_url(&base, dir, 0, err);

    if (rc < 0) {
        return rc;
    }
    ur_err_clear(&probe);
    rc = ur_kvstore_size(base, "manifest.ocdbt", &size, &probe);
    if (rc == UR_OK) {
        return ur_ocdbt_open_kv(out, base, 1, dir, err);
    }
    if (rc != UR_ENOTFOUND) {
        /* the store cannot answer (access denied, unreachable): say so rather than list */
        if (err != NULL) {
            *err = probe;
        }
        ur_kvstore_close(base);
        return rc;
    }
    *out = base;
    return UR_OK;
}
