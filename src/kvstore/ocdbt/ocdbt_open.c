/* ur_kvstore_open_auto: what TensorStore's and Orbax's auto-detection do — a directory with
 * manifest.ocdbt is an OCDBT database, anything else a plain directory. */
#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/kvstore.h"
#include "unroll/ocdbt.h"

int ur_kvstore_open_auto(ur_kvstore **out, const char *dir, ur_err *err)
{
    char *manifest = ur_path_join(dir, "manifest.ocdbt");
    int is_ocdbt;

    if (manifest == NULL) {
        return ur_err_oom(err);
    }
    is_ocdbt = ur_fs_exists(manifest);
    ur_free(manifest);
    return is_ocdbt ? ur_ocdbt_open(out, dir, err) : ur_kvstore_file_open(out, dir, 0, err);
}
