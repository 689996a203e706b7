/* The Google Cloud Storage kvstore: `gs://bucket/prefix` through the GCS JSON API, opened with
 * ur_kvstore_open_url (unroll/kvstore.h). Keys are object names below the prefix. Reads are
 * media downloads (ranged where a range is asked for; a whole object is checked against the
 * CRC-32C GCS gives in x-goog-hash); listing follows pageToken; writes are simple uploads up to
 * one resumable piece (UR_GCS_CHUNK_DEFAULT, or UNROLL_GCS_CHUNK_BYTES) and resumable uploads
 * in such pieces beyond, each checked against the CRC-32C GCS reports for the stored object.
 * HTTP goes through unroll/http.h (retries, backoff).
 *
 * The server is https://storage.googleapis.com, or STORAGE_EMULATOR_HOST (an emulator: no
 * credentials are sent), or UNROLL_GCS_ENDPOINT (another endpoint, e.g. a private one:
 * credentials as usual). Credentials are found as Google's client libraries find them
 * (GOOGLE_APPLICATION_CREDENTIALS, the gcloud ADC file, the GCE metadata server, else
 * anonymous; src/kvstore/gcs/gcs_auth.c). */
#ifndef UNROLL_KVSTORE_GCS_H
#define UNROLL_KVSTORE_GCS_H

#include "unroll/kvstore.h"

#include <stddef.h>

/* A resumable upload's piece, a 256 KiB multiple (GCS's rule); values up to one piece go up in
 * a single request. Either way a dropped connection resends at most this many bytes (a single
 * request is retried whole, a piece from what GCS kept). 512 MiB: TensorStore writes every
 * object, of any size, in one request, and Google's Python client sends 100 MiB pieces; fewer
 * round trips per object, and fake-gcs-server hashes a session's whole content on every piece
 * (bench/README.md, "Google Cloud Storage"): with 128 MiB pieces gs->gs of a 1 GiB-parameter
 * checkpoint (one 425 MB data file, four pieces) took 2.3x the read+write floor, in one request
 * about 1.1x ("Buckets at the read+write floor"). Not larger: a resend stays bounded, and the
 * object is in memory either way. UNROLL_GCS_CHUNK_BYTES overrides it (a 256 KiB multiple; the
 * tests use small pieces). */
#define UR_GCS_CHUNK_DEFAULT ((size_t)512 << 20)
#define UR_GCS_CHUNK_MIN ((size_t)256 << 10)

/* Which credentials a GCS store uses: "service_account", "authorized_user", "metadata",
 * "anonymous" or "emulator"; NULL for a store that is not a GCS one. */
const char *ur_kvstore_gcs_auth_kind(const ur_kvstore *kv);

#endif
