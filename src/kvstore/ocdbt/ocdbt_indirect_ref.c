/* IndirectDataReference (spec §3.2): (data file index, offset, length) — a byte range of a
 * data file. Arrays of references are stored column-wise (all file indices, then all offsets,
 * then all lengths); the codecs of the containing objects read the columns.
 * TensorStore: format/indirect_data_reference.cc. */
#include "ocdbt_format.h"

int ur_ocdbt_ref_is_missing(const ur_ocdbt_ref *r)
{
    return r->offset == UINT64_MAX && r->length == UINT64_MAX;
}

int ur_ocdbt_ref_validate(const ur_ocdbt_ref *r, size_t n_files, uint64_t at, ur_err *err)
{
    if (r->file >= n_files) {
        return ur_err_set_at(err, UR_ECORRUPT, at, "data file index %llu outside [0, %zu)",
                             (unsigned long long)r->file, n_files);
    }
    if (r->offset > UR_OCDBT_MAX_REF_END || r->length > UR_OCDBT_MAX_REF_END - r->offset) {
        return ur_err_set_at(err, UR_ECORRUPT, at,
                             "invalid reference: offset %llu + length %llu exceeds 2^63-1",
                             (unsigned long long)r->offset, (unsigned long long)r->length);
    }
    return UR_OK;
}
