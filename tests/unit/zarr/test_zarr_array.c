/* zarr_array: create/write/read through a kvstore (memory and file), the real Orbax
 * arrays, missing and damaged chunks, I/O faults, allocation failures and threads. */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/kvstore.h"
#include "unroll/zarr.h"
#include "zarr/zarr_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static ur_kvstore *mem(void)
{
    ur_kvstore *kv = NULL;
    assert_int_equal(ur_kvstore_mem_new(&kv, NULL), UR_OK);
    return kv;
}

static void spec_init(ur_zarr_spec *s, int fmt, ur_dtype dt, int rank, const uint64_t *shape,
                      const uint64_t *chunk)
{
    memset(s, 0, sizeof *s);
    s->zarr_format = fmt;
    s->dtype = dt;
    s->rank = rank;
    for (int d = 0; d < rank; d++) {
        s->shape[d] = shape[d];
        s->chunk_shape[d] = chunk[d];
    }
}

/* Write `data` (dense, whole array) chunk by chunk. */
static void write_all(ur_zarr_array *a, const uint8_t *data)
{
    const ur_zarr_info *in = ur_zarr_array_info(a);
    size_t isz = ur_dtype_size(in->dtype);
    uint64_t idx[UR_MAX_RANK] = {0}, zero[UR_MAX_RANK] = {0}, lo[UR_MAX_RANK], cnt[UR_MAX_RANK];
    uint8_t *chunk = ur_malloc(in->chunk_bytes);
    for (uint64_t k = 0; k < in->chunk_count; k++) {
        uint64_t r = k;
        for (int d = in->rank - 1; d >= 0; d--) {
            idx[d] = r % in->grid[d];
            r /= in->grid[d];
        }
        for (int d = 0; d < in->rank; d++) {
            lo[d] = idx[d] * in->chunk_shape[d];
            cnt[d] = in->shape[d] - lo[d] < in->chunk_shape[d] ? in->shape[d] - lo[d]
                                                               : in->chunk_shape[d];
        }
        memset(chunk, 0x77, in->chunk_bytes); /* padding holds junk: it must not matter */
        ur_zarr_chunk_grid__copy_box(chunk, in->chunk_shape, zero, data, in->shape, lo, cnt,
                                     in->rank, isz);
        assert_int_equal(ur_zarr_array_write_chunk(a, idx, chunk, NULL), UR_OK);
    }
    ur_free(chunk);
}

static void test_zarr_array__round_trip_every_dtype_both_formats(void **state)
{
    const uint64_t shape[3] = {5, 3, 7}, chunk[3] = {2, 3, 4}, start[3] = {0, 0, 0};
    (void)state;
    for (int fmt = 2; fmt <= 3; fmt++) {
        for (int dt = 1; dt < UR_DT_COUNT_; dt++) {
            if (dt == UR_DT_UINT4 || dt == UR_DT_FLOAT8_E4M3) {
                continue; /* refused by create: see test_zarr_array__create_refuses */
            }
            ur_kvstore *kv = mem();
            ur_zarr_array *a = NULL, *b = NULL;
            ur_zarr_spec s;
            size_t isz = ur_dtype_size((ur_dtype)dt), n = 105 * isz;
            uint8_t *data = ur_malloc(n), *back = ur_malloc(n);
            for (size_t i = 0; i < n; i++) {
                data[i] = (uint8_t)(i * 13 + 1);
            }
            spec_init(&s, fmt, (ur_dtype)dt, 3, shape, chunk);
            assert_int_equal(ur_zarr_array_create(&a, kv, "p.q.r", &s, NULL), UR_OK);
            write_all(a, data);
            assert_int_equal(ur_zarr_array_open(&b, kv, "p.q.r", 0, NULL), UR_OK);
            const ur_zarr_info *in = ur_zarr_array_info(b);
            assert_int_equal(in->zarr_format, fmt);
            assert_int_equal(in->dtype, dt);
            assert_int_equal(in->chunk_count, 3 * 1 * 2);
            assert_int_equal(in->chunk_bytes, 24 * isz);
            assert_int_equal(in->nbytes, n);
            assert_int_equal(ur_zarr_array_read_box(b, start, shape, back, NULL), UR_OK);
            if (memcmp(data, back, n) != 0) {
                fail_msg("format %d dtype %s differs", fmt, ur_dtype_name((ur_dtype)dt));
            }
            ur_zarr_array_close(a);
            ur_zarr_array_close(b);
            ur_kvstore_close(kv);
            ur_free(data);
            ur_free(back);
        }
    }
}

static void test_zarr_array__rank0_and_keys(void **state)
{
    ur_kvstore *kv = mem();
    ur_zarr_array *a = NULL;
    ur_zarr_spec s;
    char key[64];
    int64_t v = -42, back = 0;
    uint64_t size;
    (void)state;
    for (int fmt = 2; fmt <= 3; fmt++) {
        spec_init(&s, fmt, UR_DT_INT64, 0, NULL, NULL);
        assert_int_equal(ur_zarr_array_create(&a, kv, "step", &s, NULL), UR_OK);
        assert_int_equal(ur_zarr_array_chunk_key(a, NULL, key, sizeof key, NULL), UR_OK);
        assert_string_equal(key, fmt == 3 ? "step/c" : "step/0");
        assert_int_equal(ur_zarr_array_write_chunk(a, NULL, &v, NULL), UR_OK);
        assert_int_equal(ur_zarr_array_read_box(a, NULL, NULL, &back, NULL), UR_OK);
        assert_int_equal(back, -42);
        assert_int_equal(
            ur_kvstore_size(kv, fmt == 3 ? "step/zarr.json" : "step/.zarray", &size, NULL), UR_OK);
        ur_zarr_array_close(a);
    }
    ur_kvstore_close(kv);
}

static void test_zarr_array__golden_orbax_arrays(void **state)
{
    static const char *const dirs[] = {"orbax_v0", "orbax_v1"};
    (void)state;
    for (int i = 0; i < 2; i++) {
        char root[512];
        ur_kvstore *kv = NULL;
        ur_zarr_array *a = NULL;
        int32_t v[8];
        uint64_t start = 2, count = 5, stored;
        snprintf(root, sizeof root, "%s/zarr/%s", UR_TEST_DATA_DIR, dirs[i]);
        assert_int_equal(ur_kvstore_file_open(&kv, root, 0, NULL), UR_OK);
        assert_int_equal(ur_zarr_array_open(&a, kv, "a", 0, NULL), UR_OK);
        assert_int_equal(ur_zarr_array_info(a)->zarr_format, 2 + i);
        assert_int_equal(ur_zarr_array_read_box(a, &start, &count, v, NULL), UR_OK);
        for (int k = 0; k < 5; k++) {
            assert_int_equal(v[k], k + 2);
        }
        assert_int_equal(ur_zarr_array_stored_bytes(a, &stored, NULL), UR_OK);
        assert_int_equal(stored, i ? 61 : 41);
        ur_zarr_array_close(a);
        assert_int_equal(ur_zarr_array_open(&a, kv, "b.c", 0, NULL), UR_OK);
        start = 0;
        count = 3;
        assert_int_equal(ur_zarr_array_read_box(a, &start, &count, v, NULL), UR_OK);
        assert_int_equal(v[0], 1);
        assert_int_equal(v[2], 3);
        ur_zarr_array_close(a);
        /* The wrong version is not found, naming what was looked for. */
        ur_err err;
        assert_int_equal(ur_zarr_array_open(&a, kv, "a", i ? 2 : 3, &err), UR_ENOTFOUND);
        assert_non_null(strstr(err.msg, i ? ".zarray" : "zarr.json"));
        ur_kvstore_close(kv);
    }
}

static void test_zarr_array__missing_chunks_and_edge_padding(void **state)
{
    const uint64_t shape[2] = {3, 5}, chunk[2] = {2, 2};
    ur_kvstore *kv = mem();
    ur_zarr_array *a = NULL;
    ur_zarr_meta m;
    float buf[4], all[15];
    const float ones[4] = {1, 1, 1, 1};
    uint64_t idx[2] = {1, 2}, start[2] = {0, 0};
    ur_err err;
    (void)state;
    /* zarr3 with fill value 2.5 and plain bytes codec. */
    memset(&m, 0, sizeof m);
    m.zarr_format = 3;
    m.dtype = UR_DT_FLOAT32;
    m.rank = 2;
    memcpy(m.shape, shape, sizeof shape);
    memcpy(m.chunk_shape, chunk, sizeof chunk);
    m.sep = '/';
    assert_int_equal(ur_zarr_dtype__from_double(UR_DT_FLOAT32, 2.5, m.fill, NULL), UR_OK);
    assert_int_equal(ur_zarr_array__create_meta(&a, kv, "w", &m, NULL), UR_OK);
    assert_int_equal(ur_zarr_array_write_chunk(a, idx, ones, NULL), UR_OK);
    /* Edge chunk (1, 2) holds one valid element; the rest reads as the fill value. */
    assert_int_equal(ur_zarr_array_read_chunk(a, idx, buf, NULL), UR_OK);
    assert_true(buf[0] == 1.0f && buf[1] == 2.5f && buf[2] == 2.5f && buf[3] == 2.5f);
    assert_int_equal(ur_zarr_array_read_box(a, start, shape, all, NULL), UR_OK);
    assert_true(all[14] == 1.0f && all[0] == 2.5f && all[13] == 2.5f);
    /* Orbax mode: a missing chunk is damage (exit 4), named with its array and key. */
    ur_zarr_array_set_fill_missing(a, 0);
    assert_int_equal(ur_zarr_array_read_box(a, start, shape, all, &err), UR_ECORRUPT);
    assert_non_null(strstr(err.msg, "zarr array 'w' chunk 'w/c/0/0': chunk is missing"));
    assert_int_equal(ur_zarr_array_read_chunk(a, idx, buf, NULL), UR_OK);
    /* Out-of-range requests are caller errors. */
    idx[1] = 3;
    assert_int_equal(ur_zarr_array_read_chunk(a, idx, buf, &err), UR_EINVAL);
    uint64_t big[2] = {3, 6};
    assert_int_equal(ur_zarr_array_read_box(a, start, big, all, &err), UR_EINVAL);
    ur_zarr_array_close(a);
    ur_kvstore_close(kv);
}

static void test_zarr_array__damaged_chunk_names_array_and_key(void **state)
{
    const uint64_t shape[1] = {8}, chunk[1] = {4}, idx[1] = {1}, start[1] = {0};
    const uint8_t junk[5] = {1, 2, 3, 4, 5};
    uint8_t out[32];
    ur_err err;
    (void)state;
    for (int fmt = 2; fmt <= 3; fmt++) {
        ur_kvstore *kv = mem();
        ur_zarr_array *a = NULL;
        ur_zarr_spec s;
        int32_t v[4] = {1, 2, 3, 4};
        ur_buf enc;
        spec_init(&s, fmt, UR_DT_INT32, 1, shape, chunk);
        assert_int_equal(ur_zarr_array_create(&a, kv, "layer.w", &s, NULL), UR_OK);
        assert_int_equal(ur_zarr_array_write_chunk(a, start, v, NULL), UR_OK);
        const char *key = fmt == 3 ? "layer.w/c/1" : "layer.w/1";
        assert_int_equal(ur_kvstore_write(kv, key, junk, sizeof junk, NULL), UR_OK);
        assert_int_equal(ur_zarr_array_read_chunk(a, idx, out, &err), UR_ECORRUPT);
        assert_non_null(strstr(err.msg, "layer.w"));
        assert_non_null(strstr(err.msg, key));
        /* A valid encoding of a 3-element chunk is the wrong size. */
        ur_zarr_array *small = NULL;
        uint64_t sh3[1] = {3};
        spec_init(&s, fmt, UR_DT_INT32, 1, sh3, sh3);
        assert_int_equal(ur_zarr_array_create(&small, kv, "other", &s, NULL), UR_OK);
        ur_buf_init(&enc, 0);
        assert_int_equal(ur_zarr_array_encode_chunk(small, v, &enc, NULL), UR_OK);
        assert_int_equal(ur_kvstore_write(kv, key, enc.data, enc.len, NULL), UR_OK);
        assert_int_equal(ur_zarr_array_read_chunk(a, idx, out, &err), UR_ECORRUPT);
        assert_non_null(strstr(err.msg, key));
        ur_buf_dispose(&enc);
        ur_zarr_array_close(small);
        ur_zarr_array_close(a);
        ur_kvstore_close(kv);
    }
}

static void test_zarr_array__damaged_metadata_through_open(void **state)
{
    ur_kvstore *kv = mem();
    ur_zarr_array *a = NULL;
    ur_err err;
    const char *bad = "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[1e300]}";
    (void)state;
    assert_int_equal(ur_kvstore_write(kv, "x.y/zarr.json", bad, strlen(bad), NULL), UR_OK);
    assert_int_equal(ur_zarr_array_open(&a, kv, "x.y", 0, &err), UR_ECORRUPT);
    assert_non_null(strstr(err.msg, "x.y"));
    assert_non_null(strstr(err.where, "x.y/zarr.json"));
    assert_int_equal(ur_zarr_array_open(&a, kv, "nope", 0, &err), UR_ENOTFOUND);
    assert_non_null(strstr(err.msg, "nope"));
    assert_null(a);
    ur_kvstore_close(kv);
}

static void test_zarr_array__create_refuses(void **state)
{
    ur_kvstore *kv = mem();
    ur_zarr_array *a = NULL;
    ur_zarr_spec s;
    const uint64_t shape[1] = {4}, chunk0[1] = {0};
    ur_err err;
    (void)state;
    spec_init(&s, 3, UR_DT_UINT4, 1, shape, shape);
    assert_int_equal(ur_zarr_array_create(&a, kv, "a", &s, &err), UR_EUNSUPPORTED);
    spec_init(&s, 3, UR_DT_INT32, 1, shape, chunk0);
    assert_int_equal(ur_zarr_array_create(&a, kv, "a", &s, &err), UR_EINVAL);
    spec_init(&s, 4, UR_DT_INT32, 1, shape, shape);
    assert_int_equal(ur_zarr_array_create(&a, kv, "a", &s, &err), UR_EINVAL);
    assert_null(a);
    ur_kvstore_close(kv);
}

/* I/O faults from kvstore_mem: every failing read or write surfaces as UR_EIO. */
static void test_zarr_array__io_faults(void **state)
{
    const uint64_t shape[2] = {4, 4}, chunk[2] = {2, 2}, start[2] = {0, 0};
    uint16_t data[16], back[16];
    int eio = 0;
    (void)state;
    for (int i = 0; i < 16; i++) {
        data[i] = (uint16_t)(i * 257);
    }
    for (unsigned fail = 1; fail < 20; fail++) {
        for (int which = 0; which < 2; which++) {
            ur_kvstore *kv = mem();
            ur_zarr_array *a = NULL, *b = NULL;
            ur_zarr_spec s;
            ur_err err;
            int rc;
            spec_init(&s, 3, UR_DT_BFLOAT16, 2, shape, chunk);
            ur_kvstore_mem_fail_at(kv, which ? fail : 0, which ? 0 : fail);
            rc = ur_zarr_array_create(&a, kv, "t", &s, &err);
            if (rc == UR_OK) {
                uint16_t c[4];
                for (uint64_t k = 0; rc == UR_OK && k < 4; k++) {
                    uint64_t idx[2] = {k / 2, k % 2}, z[2] = {0, 0},
                             lo[2] = {idx[0] * 2, idx[1] * 2};
                    ur_zarr_chunk_grid__copy_box((uint8_t *)c, chunk, z, (uint8_t *)data, shape,
                                                 lo, chunk, 2, 2);
                    rc = ur_zarr_array_write_chunk(a, idx, c, &err);
                }
            }
            if (rc == UR_OK) {
                rc = ur_zarr_array_open(&b, kv, "t", 3, &err);
            }
            if (rc == UR_OK) {
                rc = ur_zarr_array_read_box(b, start, shape, back, &err);
            }
            assert_true(rc == UR_OK || rc == UR_EIO);
            eio += rc == UR_EIO;
            if (rc == UR_OK) {
                assert_memory_equal(data, back, sizeof data);
            }
            ur_zarr_array_close(a);
            ur_zarr_array_close(b);
            ur_kvstore_close(kv);
        }
    }
    assert_int_equal(eio, 10); /* 5 writes (metadata + 4 shards), 5 reads */
}

static void test_zarr_array__oom(void **state)
{
    const uint64_t shape[2] = {3, 5}, chunk[2] = {2, 3}, start[2] = {0, 0};
    int32_t data[15], back[15];
    (void)state;
    for (int i = 0; i < 15; i++) {
        data[i] = i * 1000 - 7;
    }
    for (int fmt = 2; fmt <= 3; fmt++) {
        for (long k = 0;; k++) {
            ur_kvstore *kv = mem();
            ur_zarr_array *a = NULL, *b = NULL;
            ur_zarr_spec s;
            int rc;
            spec_init(&s, fmt, UR_DT_INT32, 2, shape, chunk);
            ur_alloc_fail_after(k);
            rc = ur_zarr_array_create(&a, kv, "o", &s, NULL);
            for (uint64_t c = 0; rc == UR_OK && c < 4; c++) {
                int32_t cbuf[6] = {0};
                uint64_t idx[2] = {c / 2, c % 2}, z[2] = {0, 0}, lo[2] = {idx[0] * 2, idx[1] * 3};
                uint64_t cnt[2] = {lo[0] + 2 > 3 ? 1 : 2, lo[1] + 3 > 5 ? 2 : 3};
                ur_zarr_chunk_grid__copy_box((uint8_t *)cbuf, chunk, z, (uint8_t *)data, shape, lo,
                                             cnt, 2, 4);
                rc = ur_zarr_array_write_chunk(a, idx, cbuf, NULL);
            }
            if (rc == UR_OK) {
                rc = ur_zarr_array_open(&b, kv, "o", 0, NULL);
            }
            if (rc == UR_OK) {
                rc = ur_zarr_array_read_box(b, start, shape, back, NULL);
            }
            ur_alloc_fail_after(-1);
            ur_zarr_array_close(a);
            ur_zarr_array_close(b);
            ur_kvstore_close(kv);
            if (rc == UR_OK) {
                assert_memory_equal(data, back, sizeof data);
                break;
            }
            assert_int_equal(rc, UR_ENOMEM);
            assert_true(k < 5000);
        }
    }
}

typedef struct thread_arg {
    ur_zarr_array *a;
    const float *want;
    int rc;
} thread_arg;

static void *reader(void *p)
{
    thread_arg *t = p;
    const ur_zarr_info *in = ur_zarr_array_info(t->a);
    float back[64 * 48];
    uint64_t start[2] = {0, 0};
    t->rc = 0;
    for (int it = 0; it < 20 && t->rc == 0; it++) {
        if (ur_zarr_array_read_box(t->a, start, in->shape, back, NULL) != UR_OK ||
            memcmp(back, t->want, sizeof back) != 0) {
            t->rc = 1;
        }
    }
    return NULL;
}

static void test_zarr_array__concurrent_reads(void **state)
{
    const uint64_t shape[2] = {64, 48}, chunk[2] = {16, 16};
    static float data[64 * 48];
    ur_kvstore *kv = mem();
    ur_zarr_array *a = NULL;
    ur_zarr_spec s;
    pthread_t th[4];
    thread_arg args[4];
    (void)state;
    for (int i = 0; i < 64 * 48; i++) {
        data[i] = (float)i * 0.5f;
    }
    spec_init(&s, 3, UR_DT_FLOAT32, 2, shape, chunk);
    assert_int_equal(ur_zarr_array_create(&a, kv, "t", &s, NULL), UR_OK);
    write_all(a, (const uint8_t *)data);
    for (int i = 0; i < 4; i++) {
        args[i].a = a;
        args[i].want = data;
        assert_int_equal(pthread_create(&th[i], NULL, reader, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(args[i].rc, 0);
    }
    ur_zarr_array_close(a);
    ur_kvstore_close(kv);
}

/* What a progressive reader saw: reports grow, each prefix is already final. */
typedef struct {
    const uint8_t *dst;
    const uint8_t *want; /* the chunk as ur_zarr_array_read_chunk reads it */
    size_t total;
    size_t last;
    int calls;
    int stop_at; /* return UR_EINVAL from this call (1-based); 0: never */
} seen;

static int on_ready(void *ctx, size_t n, ur_err *err)
{
    seen *sn = ctx;
    sn->calls++;
    assert_true(n > sn->last || (n == sn->total && sn->last < sn->total));
    assert_true(n <= sn->total);
    assert_memory_equal(sn->dst, sn->want, n);
    sn->last = n;
    if (sn->calls == sn->stop_at) {
        return ur_err_set(err, UR_EINVAL, "stopped by the reader");
    }
    return UR_OK;
}

/* Read every chunk both ways; returns how many reports the progressive reads made. */
static int check_progressive(ur_zarr_array *a, int stop_at)
{
    const ur_zarr_info *in = ur_zarr_array_info(a);
    uint8_t *want = ur_malloc(in->chunk_bytes), *got = ur_malloc(in->chunk_bytes);
    uint64_t idx[UR_MAX_RANK];
    int calls = 0;
    for (uint64_t k = 0; k < in->chunk_count; k++) {
        uint64_t r = k;
        ur_err e1, e2;
        int rc1, rc2;
        seen sn = {got, want, in->chunk_bytes, 0, 0, stop_at};
        for (int d = in->rank - 1; d >= 0; d--) {
            idx[d] = r % in->grid[d];
            r /= in->grid[d];
        }
        memset(want, 0, in->chunk_bytes);
        memset(got, 0xee, in->chunk_bytes);
        rc1 = ur_zarr_array_read_chunk(a, idx, want, &e1);
        rc2 = ur_zarr_array_read_chunk_progressive(a, idx, got, on_ready, &sn, &e2);
        if (stop_at != 0 && sn.calls == stop_at) {
            assert_int_equal(rc2, UR_EINVAL);
            assert_non_null(strstr(e2.msg, "stopped by the reader"));
        } else {
            assert_int_equal(rc2, rc1);
        }
        if (rc1 == UR_OK && rc2 == UR_OK) {
            assert_int_equal(sn.last, in->chunk_bytes);
            assert_memory_equal(got, want, in->chunk_bytes);
        } else if (rc2 != UR_EINVAL) {
            assert_string_equal(e2.msg, e1.msg); /* same error, same words */
        }
        calls += sn.calls;
    }
    ur_free(want);
    ur_free(got);
    return calls;
}

/* Progressive reads equal whole reads: chunks of many zstd blocks (reported piece by piece),
 * edge and missing chunks (reported once), zarr2 and gzip chains (decoded whole), damaged
 * frames (the same error as a whole read), and a reader that stops the read. */
static void test_zarr_array__progressive_reads(void **state)
{
    const uint64_t shape[2] = {700, 1000}, chunk[2] = {512, 1000}; /* 2 MB chunks + an edge */
    size_t n = 700 * 1000;
    float *data = ur_malloc(n * sizeof *data);
    (void)state;
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) { /* runs of ones (RLE blocks) between random floats */
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        data[i] = (i / 50000) % 3 == 0 ? 1.0f : (float)(x >> 8) * 1e-7f;
    }
    for (int fmt = 2; fmt <= 3; fmt++) {
        ur_kvstore *kv = mem();
        ur_zarr_array *a = NULL;
        ur_zarr_spec s;
        uint64_t idx[2] = {0, 0};
        ur_buf enc;
        int calls;
        spec_init(&s, fmt, UR_DT_FLOAT32, 2, shape, chunk);
        assert_int_equal(ur_zarr_array_create(&a, kv, "p", &s, NULL), UR_OK);
        write_all(a, (const uint8_t *)data);
        calls = check_progressive(a, 0);
        assert_true(calls >= 4); /* two chunks, the first one in several reports */
        assert_true(check_progressive(a, 2) > 0); /* a reader that stops at its 2nd report */
        /* a damaged frame: flip a byte in the middle of the stored chunk */
        char key[64];
        ur_buf_init(&enc, 0);
        assert_int_equal(ur_zarr_array_chunk_key(a, idx, key, sizeof key, NULL), UR_OK);
        assert_int_equal(ur_kvstore_read(kv, key, &enc, NULL), UR_OK);
        enc.data[enc.len / 2] ^= 0x5a;
        assert_int_equal(ur_kvstore_write(kv, key, enc.data, enc.len, NULL), UR_OK);
        check_progressive(a, 0);
        /* cut short */
        assert_int_equal(ur_kvstore_write(kv, key, enc.data, enc.len / 3, NULL), UR_OK);
        check_progressive(a, 0);
        ur_buf_dispose(&enc);
        ur_zarr_array_close(a);
        ur_kvstore_close(kv);
    }
    ur_free(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zarr_array__round_trip_every_dtype_both_formats),
        cmocka_unit_test(test_zarr_array__rank0_and_keys),
        cmocka_unit_test(test_zarr_array__golden_orbax_arrays),
        cmocka_unit_test(test_zarr_array__missing_chunks_and_edge_padding),
        cmocka_unit_test(test_zarr_array__damaged_chunk_names_array_and_key),
        cmocka_unit_test(test_zarr_array__damaged_metadata_through_open),
        cmocka_unit_test(test_zarr_array__create_refuses),
        cmocka_unit_test(test_zarr_array__io_faults),
        cmocka_unit_test(test_zarr_array__oom),
        cmocka_unit_test(test_zarr_array__concurrent_reads),
        cmocka_unit_test(test_zarr_array__progressive_reads),
    };
    return cmocka_run_group_tests_name("zarr_array", tests, NULL, NULL);
}
