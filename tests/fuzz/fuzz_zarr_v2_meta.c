/* Fuzz target: zarr v2 `.zarray` (ur_zarr_meta__parse_v2), with emit round trip. */
#include "fuzz_zarr_meta_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fz_zarr_meta_run(data, size, ur_zarr_meta__parse_v2);
}
