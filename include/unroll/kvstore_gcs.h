/* The Google Cloud Storage kvstore: `gs://bucket/prefix` through the GCS JSON API. Keys are
 * object names below the prefix. Reads are ranged media downloads (a whole-object read is
 * checked against the CRC-32C GCS gives in x-goog-hash); listing follows pageToken; writes
 * are simple uploads up to UR_GCS_SIMPLE_MAX bytes, resumable uploads beyond, each checked
 * against the CRC-32C GCS reports for the stored object.
 *
 * The server is https://storage.googleapis.com, or STORAGE_EMULATOR_HOST (an emulator: no
 * credentials), or UNROLL_GCS_ENDPOINT (another endpoint, credentials as usual). Credentials
 * are found as Google's client libraries find them (src/kvstore/gcs/gcs_auth.c). */
#ifndef UNROLL_KVSTORE_GCS_H
#define UNROLL_KVSTORE_GCS_H

#include "unroll/kvstore.h"

#include <stddef.h>

#define UR_GCS_SIMPLE_MAX ((size_t)8 << 20)   /* larger values use a resumable upload */
#define UR_GCS_CHUNK      ((size_t)16 << 20)  /* resumable upload chunk, a 256 KiB multiple */

/* Nonzero when `url` starts with "gs://". */
int ur_kvstore_gcs_is_url(const char *url);

/* Open `gs://bucket[/prefix]`. UR_EINVAL for a malformed URL or unusable credentials file.
 * Nothing is fetched yet: the first request finds out whether the bucket can be reached. */
int ur_kvstore_gcs_open(ur_kvstore **out, const char *url, int writable, ur_err *err);

/* Delete `key`; UR_ENOTFOUND when absent. */
int ur_kvstore_gcs_delete(ur_kvstore *kv, const char *key, ur_err *err);

/* Write `key` only if no object has that name (ifGenerationMatch=0): UR_OK when written,
 * 1 when an object already exists (nothing written), < 0 on failure. */
int ur_kvstore_gcs_create(ur_kvstore *kv, const char *key, const void *data, size_t n,
                          ur_err *err);

/* Which credentials the store uses: "service_account", "authorized_user", "metadata",
 * "anonymous" or "emulator". */
const char *ur_kvstore_gcs_auth_kind(const ur_kvstore *kv);

#endif
