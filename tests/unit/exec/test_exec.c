/* The executor against a naive reference (and through a second, in-memory output sink): a real
 * (C-written) Orbax checkpoint holding a float32 tensor with one or several layer axes is run
 * through hand-made plans (UNSTACK on one axis, on three axes as a pipeline stack has them, COPY,
 * REPLICATE), with several thread counts and memory limits small enough to force slab streaming;
 * every output element must equal the input element it comes from, cast to bfloat16. */
#define _POSIX_C_SOURCE 200809L
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/exec.h"
#include "unroll/fs.h"
#include "unroll/orbax.h"
#include "unroll/plan.h"
#include "unroll/sink.h"
#include "unroll/tensor.h"

#include <stdlib.h>

enum { RANK = 5 };
static const uint64_t SMALL_SHAPE[RANK] = {2, 3, 5, 4, 7}; /* [R, S, E, L, M] */
static const uint64_t SMALL_CHUNK[RANK] = {1, 2, 3, 4, 4}; /* odd, with edge chunks */
/* Chunks of ~3 MB, decoded in many steps: the split runs while the chunk is decoded. */
static const uint64_t BIG_SHAPE[RANK] = {64, 1, 2, 3, 2000};
static const uint64_t BIG_CHUNK[RANK] = {64, 1, 2, 3, 2000};
static const uint64_t *SHAPE = SMALL_SHAPE, *CHUNK = SMALL_CHUNK;
static const char *input = "in"; /* the input checkpoint under scratch */
/* 1: UNSTACK outputs with an odd index are discarded slices (an empty out path: gemma4's MTP
 * block, of which only local layer 0 is written) */
static int discard_odd;
static char scratch[256];

static float value_at(const uint64_t *i)
{
    if (SHAPE == BIG_SHAPE) {
        /* random mantissas: poorly compressible, so a chunk is decoded in many steps */
        uint64_t h = ((((i[0] * 7 + i[1]) * 11 + i[2]) * 13 + i[3]) * 2003 + i[4]) + 1;
        uint32_t bits;
        float f;
        h *= 0x9e3779b97f4a7c15ull;
        bits = 0x3f800000u | (uint32_t)(h >> 41);
        memcpy(&f, &bits, 4);
        return f;
    }
    /* distinct, exactly representable values; a few need rounding to bf16 */
    return (float)((((i[0] * 3 + i[1]) * 5 + i[2]) * 4 + i[3]) * 7 + i[4]) * 1.00390625f;
}

static void make_input(const char *step_dir)
{
    ur_orbax_writer *w = NULL;
    ur_orbax_write_opts o;
    ur_zarr_array *arr = NULL;
    ur_orbax_key path[1] = {{"x", UR_ORBAX_KEY_DICT}};
    const ur_zarr_info *info;
    float *chunk;
    ur_err err;

    ur_orbax_write_opts_init(&o);
    assert_int_equal(ur_orbax_writer_create(&w, step_dir, &o, &err), UR_OK);
    assert_int_equal(
        ur_orbax_writer_add_array(w, path, 1, UR_DT_FLOAT32, RANK, SHAPE, CHUNK, NULL, &arr, &err),
        UR_OK);
    info = ur_zarr_array_info(arr);
    chunk = ur_malloc(info->chunk_bytes);
    for (uint64_t c = 0; c < info->chunk_count; c++) {
        uint64_t idx[RANK], rest = c;
        for (int d = RANK - 1; d >= 0; d--) {
            idx[d] = rest % info->grid[d];
            rest /= info->grid[d];
        }
        for (uint64_t e = 0; e < info->chunk_bytes / 4; e++) {
            uint64_t pos[RANK], r2 = e;
            for (int d = RANK - 1; d >= 0; d--) {
                pos[d] = idx[d] * CHUNK[d] + r2 % CHUNK[d];
                r2 /= CHUNK[d];
            }
            chunk[e] = value_at(pos);
        }
        assert_int_equal(ur_zarr_array_write_chunk(arr, idx, chunk, &err), UR_OK);
    }
    ur_free(chunk);
    assert_int_equal(ur_orbax_writer_commit(w, &err), UR_OK);
}

static ur_pool paths; /* the outputs of the one action of a test */

/* Build outputs "out_<k>" for an action over `axes` (or COPY/REPLICATE when n_axes == 0). */
static void fill_action(ur_plan_action *a, ur_plan_kind kind, const size_t *axes, size_t n_axes,
                        size_t n_out)
{
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->out_dtype = UR_DT_BFLOAT16;
    a->group = -1;
    a->n_axes = n_axes;
    for (size_t m = 0; m < n_axes; m++) {
        a->axes[m] = axes[m];
    }
    a->axis = n_axes ? axes[n_axes - 1] : 0;
    a->n_out = n_out;
    ur_pool_init(&paths);
    a->out = ur_pool_alloc(&paths, n_out * sizeof *a->out, NULL);
    for (size_t k = 0; k < n_out; k++) {
        char name[32];
        if (discard_odd && kind == UR_PLAN_UNSTACK && k % 2 == 1) {
            continue; /* len 0 (the pool's memory is zeroed): not written */
        }
        const char **comp = ur_pool_alloc(&paths, sizeof *comp, NULL);
        snprintf(name, sizeof name, "out_%zu", k);
        comp[0] = ur_pool_intern(&paths, name, strlen(name), NULL);
        a->out[k].len = 1;
        a->out[k].comp = comp;
    }
}

static void free_action(ur_plan_action *a)
{
    a->out = NULL;
    ur_pool_dispose(&paths);
}

/* Run the one-action plan and compare every output with the reference slicing. */
static void run_and_check(ur_plan_kind kind, const size_t *axes, size_t n_axes, int threads,
                          uint64_t limit)
{
    char in_dir[300], out_dir[300], out_items[320];
    ur_orbax_ckpt *in = NULL, *out = NULL;
    ur_orbax_writer *w = NULL;
    ur_orbax_write_opts o;
    ur_plan plan;
    ur_plan_action act;
    ur_exec_opts eo;
    ur_exec_stats st;
    ur_err err;
    size_t n_out = 1, n_written = 0;
    uint8_t is_layer[RANK] = {0};

    snprintf(in_dir, sizeof in_dir, "%s/%s/0/items", scratch, input);
    snprintf(out_dir, sizeof out_dir, "%s/out", scratch);
    snprintf(out_items, sizeof out_items, "%s/out/items", scratch);
    ur_fs_remove_tree(out_dir, NULL);
    for (size_t m = 0; m < n_axes; m++) {
        n_out *= SHAPE[axes[m]];
        is_layer[axes[m]] = 1;
    }
    if (kind == UR_PLAN_REPLICATE) {
        n_out = 3;
    }
    fill_action(&act, kind, axes, n_axes, n_out);
    memset(&plan, 0, sizeof plan);
    plan.n_actions = 1;
    plan.actions = &act;
    assert_int_equal(ur_orbax_ckpt_open(&in, in_dir, 0, &err), UR_OK);
    ur_orbax_write_opts_init(&o);
    assert_int_equal(ur_orbax_writer_create(&w, out_dir, &o, &err), UR_OK);
    memset(&eo, 0, sizeof eo);
    eo.threads = threads;
    eo.memory_limit = limit;
    if (ur_exec_run(&plan, in, w, &eo, &st, &err) != UR_OK) {
        fail_msg("exec: %s", err.msg);
    }
    assert_int_equal(ur_orbax_writer_commit(w, &err), UR_OK);

    assert_int_equal(ur_orbax_ckpt_open(&out, out_items, 0, &err), UR_OK);
    for (size_t k = 0; k < n_out; k++) {
        n_written += act.out[k].len > 0;
    }
    assert_int_equal(ur_orbax_ckpt_leaf_count(out), n_written);
    for (size_t k = 0; k < n_out; k++) {
        char name[32];
        const ur_orbax_leaf *leaf;
        ur_zarr_array *arr = NULL;
        uint64_t start[RANK] = {0}, oshape[RANK], layer[RANK] = {0}, rest = k, n = 1;
        uint16_t *got;
        int orank = 0;
        snprintf(name, sizeof name, "out_%zu", k);
        if (act.out[k].len == 0) {
            assert_int_equal(ur_orbax_ckpt_find(out, name, &leaf, &err), UR_ENOTFOUND);
            continue;
        }
        assert_int_equal(ur_orbax_ckpt_find(out, name, &leaf, &err), UR_OK);
        for (int d = RANK - 1; d >= 0; d--) {
            if (is_layer[d]) {
                layer[d] = rest % SHAPE[d];
                rest /= SHAPE[d];
            }
        }
        for (int d = 0; d < RANK; d++) {
            if (!is_layer[d]) {
                oshape[orank++] = SHAPE[d];
                n *= SHAPE[d];
            }
        }
        assert_int_equal(leaf->rank, orank);
        assert_int_equal(leaf->dtype, UR_DT_BFLOAT16);
        assert_int_equal(ur_orbax_ckpt_open_array(out, leaf, &arr, &err), UR_OK);
        got = ur_malloc(n * 2);
        assert_int_equal(ur_zarr_array_read_box(arr, start, oshape, got, &err), UR_OK);
        for (uint64_t e = 0; e < n; e++) {
            uint64_t pos[RANK], r2 = e;
            float f;
            uint32_t bits;
            for (int d = RANK - 1; d >= 0; d--) {
                if (is_layer[d]) {
                    pos[d] = layer[d];
                } else {
                    pos[d] = r2 % SHAPE[d];
                    r2 /= SHAPE[d];
                }
            }
            f = value_at(pos);
            memcpy(&bits, &f, 4);
            if (got[e] != ur_tensor_cast_f32_to_bf16(bits)) {
                fail_msg("output %zu element %llu: got %04x, want %04x (threads %d, limit %llu)",
                         k, (unsigned long long)e, got[e], ur_tensor_cast_f32_to_bf16(bits),
                         threads, (unsigned long long)limit);
            }
        }
        ur_free(got);
        ur_zarr_array_close(arr);
    }
    ur_orbax_ckpt_close(out);
    ur_orbax_ckpt_close(in);
    free_action(&act);
}

static const uint64_t limits[] = {0, 4096, 64, 16};
static const int threads[] = {1, 2, 3};

/* ---- a second output sink --------------------------------------------------------------
 * An output format other than Orbax is one implementation of unroll/sink.h: this one keeps
 * every array in memory (dense, C order) and a hash of the write sequence, so the test checks
 * both what the executor produced and that its order does not depend on the thread count. */
typedef struct ur_sink_array {
    char name[32];
    int rank;
    uint64_t shape[RANK], chunk[RANK];
    size_t item;
    uint8_t *data;
    struct ur_sink_array *next;
} mem_array;

typedef struct {
    mem_array *done; /* finished arrays */
    uint64_t hash;   /* FNV-1a over (name, chunk index, bytes) in write order */
    int begun, finished, dropped, writes, fail_at;
} mem_sink;

static void mem_hash(mem_sink *m, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        m->hash = (m->hash ^ b[i]) * 0x100000001b3ull;
    }
}

static int mem_reserve(void *self, size_t n, ur_err *err)
{
    (void)self, (void)n, (void)err;
    return UR_OK;
}

static int mem_add_scalar(void *self, const ur_sink_path *p, ur_dtype dt, const void *v,
                          ur_err *err)
{
    (void)self, (void)p, (void)dt, (void)v;
    return ur_err_set(err, UR_EINVAL, "no scalars here");
}

static int mem_add_empty(void *self, const ur_sink_path *p, ur_sink_empty kind, ur_err *err)
{
    (void)self, (void)p, (void)kind;
    return ur_err_set(err, UR_EINVAL, "no empty leaves here");
}

static int mem_begin(void *self, const ur_sink_path *p, ur_dtype dt, int rank,
                     const uint64_t *shape, const uint64_t *chunk, ur_sink_array **out,
                     ur_err *err)
{
    mem_sink *m = self;
    mem_array *a = ur_calloc(1, sizeof *a);
    size_t n = 1;
    assert_non_null(a);
    assert_int_equal(dt, UR_DT_BFLOAT16);
    assert_int_equal(p->len, 1);
    snprintf(a->name, sizeof a->name, "%s", p->comp[0]);
    a->rank = rank;
    a->item = ur_dtype_size(dt);
    for (int d = 0; d < rank; d++) {
        a->shape[d] = shape[d];
        a->chunk[d] = chunk[d];
        n *= shape[d];
    }
    a->data = ur_calloc(n ? n : 1, a->item);
    __atomic_add_fetch(&m->begun, 1, __ATOMIC_RELAXED); /* begun on any worker */
    *out = a;
    (void)err;
    return UR_OK;
}

/* The stored form is the chunk's grid index (as encode_chunk is told it), then the raw chunk:
 * write_chunk checks that index against its own. */
static int mem_encode(void *self, ur_sink_array *a, const uint64_t *idx, const void *raw,
                      ur_buf *out, ur_err *err)
{
    size_t n = a->item;
    int rc = ur_buf_append(out, idx, (size_t)a->rank * sizeof idx[0], err);
    (void)self;
    for (int d = 0; d < a->rank; d++) {
        n *= a->chunk[d];
    }
    return rc == UR_OK ? ur_buf_append(out, raw, n, err) : rc;
}

static int mem_write(void *self, ur_sink_array *a, const uint64_t *idx, const void *enc,
                     size_t len, ur_err *err)
{
    mem_sink *m = self;
    size_t head = (size_t)a->rank * sizeof idx[0];
    const uint8_t *src = (const uint8_t *)enc + head;
    uint64_t pos[RANK] = {0};
    size_t n = (len - head) / a->item;
    if (++m->writes == m->fail_at) {
        return ur_err_set(err, UR_EIO, "disk full (write %d)", m->writes);
    }
    if (len < head || memcmp(enc, idx, head) != 0) {
        return ur_err_set(err, UR_EINTERNAL, "%s: encoded for another chunk", a->name);
    }
    len -= head;
    mem_hash(m, a->name, strlen(a->name));
    mem_hash(m, idx, (size_t)a->rank * sizeof idx[0]);
    mem_hash(m, src, len);
    for (size_t e = 0; e < n; e++) { /* the chunk's elements inside the array */
        uint64_t lin = 0, r = e;
        int inside = 1;
        for (int d = a->rank - 1; d >= 0; d--) {
            pos[d] = idx[d] * a->chunk[d] + r % a->chunk[d];
            r /= a->chunk[d];
            inside &= pos[d] < a->shape[d];
        }
        for (int d = 0; d < a->rank; d++) {
            lin = lin * a->shape[d] + pos[d];
        }
        if (inside) {
            memcpy(a->data + lin * a->item, src + e * a->item, a->item);
        }
    }
    return UR_OK;
}

static int mem_finish_array(void *self, ur_sink_array *a, ur_err *err)
{
    mem_sink *m = self;
    (void)err;
    m->finished++;
    mem_hash(m, a->name, strlen(a->name));
    a->next = m->done;
    m->done = a;
    return UR_OK;
}

static void mem_drop(void *self, ur_sink_array *a)
{
    mem_sink *m = self;
    if (a != NULL) {
        __atomic_add_fetch(&m->dropped, 1, __ATOMIC_RELAXED);
        ur_free(a->data);
        ur_free(a);
    }
}

static void mem_abort(void *self)
{
    mem_sink *m = self;
    while (m->done != NULL) {
        mem_array *a = m->done;
        m->done = a->next;
        ur_free(a->data);
        ur_free(a);
    }
}

static int mem_finish(void *self, ur_err *err)
{
    (void)err;
    mem_abort(self);
    return UR_OK;
}

static const ur_sink_ops mem_ops = {mem_reserve, mem_add_scalar, mem_add_empty,    mem_begin,
                                    mem_encode,  mem_write,      mem_finish_array, mem_drop,
                                    mem_finish,  mem_abort};

/* Unstack axis 3 into the memory sink: the result is checked element by element; returns the
 * write sequence's hash, which must not depend on the thread count. */
static uint64_t run_mem(int n_threads, uint64_t limit, int fail_at, int *rc_out)
{
    static const size_t ax[] = {3};
    char in_dir[300];
    ur_orbax_ckpt *in = NULL;
    ur_plan plan;
    ur_plan_action act;
    ur_exec_opts eo;
    ur_exec_stats st;
    ur_err err;
    mem_sink m;
    ur_sink sink = {&mem_ops, &m};
    uint64_t hash;

    memset(&m, 0, sizeof m);
    m.hash = 0xcbf29ce484222325ull;
    m.fail_at = fail_at;
    snprintf(in_dir, sizeof in_dir, "%s/%s/0/items", scratch, input);
    fill_action(&act, UR_PLAN_UNSTACK, ax, 1, (size_t)SHAPE[3]);
    memset(&plan, 0, sizeof plan);
    plan.n_actions = 1;
    plan.actions = &act;
    assert_int_equal(ur_orbax_ckpt_open(&in, in_dir, 0, &err), UR_OK);
    memset(&eo, 0, sizeof eo);
    eo.threads = n_threads;
    eo.memory_limit = limit;
    *rc_out = ur_exec_run_sink(&plan, in, &sink, &eo, &st, &err);
    /* every array begun is finished or dropped, whatever happened */
    assert_int_equal(m.begun, m.finished + m.dropped);
    if (*rc_out == UR_OK) {
        assert_int_equal(m.finished, (int)SHAPE[3]);
        for (mem_array *a = m.done; a != NULL; a = a->next) {
            uint64_t layer = strtoull(a->name + 4, NULL, 10), n = 1;
            for (int d = 0; d < a->rank; d++) {
                n *= a->shape[d];
            }
            for (uint64_t e = 0; e < n; e++) {
                uint64_t pos[RANK], r = e;
                uint16_t got;
                uint32_t bits;
                float f;
                for (int d = RANK - 1; d >= 0; d--) {
                    if (d == 3) {
                        pos[d] = layer;
                    } else {
                        pos[d] = r % SHAPE[d];
                        r /= SHAPE[d];
                    }
                }
                f = value_at(pos);
                memcpy(&bits, &f, 4);
                memcpy(&got, a->data + e * 2, 2);
                assert_int_equal(got, ur_tensor_cast_f32_to_bf16(bits));
            }
        }
        assert_int_equal(sink.ops->finish(sink.self, &err), UR_OK);
    } else {
        assert_int_equal(err.code, UR_EIO);
        assert_non_null(strstr(err.msg, "disk full"));
        sink.ops->abort(sink.self);
    }
    hash = m.hash;
    ur_orbax_ckpt_close(in);
    free_action(&act);
    return hash;
}

static void test_exec__second_sink(void **state)
{
    int rc;
    (void)state;
    for (size_t l = 0; l < sizeof limits / sizeof limits[0]; l++) {
        /* A tight limit is split between the threads and sets the output chunking, so only
         * with the default limit (chunks fit every share) is the sequence the same. */
        uint64_t want = run_mem(1, limits[l], 0, &rc);
        assert_int_equal(rc, UR_OK);
        for (size_t t = 1; t < sizeof threads / sizeof threads[0]; t++) {
            uint64_t got = run_mem(threads[t], limits[l], 0, &rc);
            assert_int_equal(rc, UR_OK);
            assert_true(limits[l] != 0 || got == want);
        }
    }
    /* a sink that fails: the run stops with its error, and nothing is left begun */
    for (int at = 1; at < 40; at += 7) {
        (void)run_mem(2, 64, at, &rc);
        assert_int_equal(rc, UR_EIO);
    }
}

static int setup(void **state)
{
    char in_step[300];
    (void)state;
    strcpy(scratch, "/tmp/ur_exec_XXXXXX");
    if (mkdtemp(scratch) == NULL) {
        return -1;
    }
    snprintf(in_step, sizeof in_step, "%s/in/0", scratch);
    make_input(in_step);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return ur_fs_remove_tree(scratch, NULL) == UR_OK ? 0 : -1;
}

static void sweep(ur_plan_kind kind, const size_t *axes, size_t n_axes)
{
    for (size_t l = 0; l < sizeof limits / sizeof limits[0]; l++) {
        for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
            run_and_check(kind, axes, n_axes, threads[t], limits[l]);
        }
    }
}

static void test_exec__unstack_one_axis(void **state)
{
    static const size_t ax[] = {3};
    (void)state;
    sweep(UR_PLAN_UNSTACK, ax, 1);
}

static void test_exec__unstack_outer_axis(void **state)
{
    static const size_t ax[] = {0};
    (void)state;
    sweep(UR_PLAN_UNSTACK, ax, 1);
}

/* Discarded slices (an empty out path) are not written; the others are as before. */
static void test_exec__unstack_discarded_slices(void **state)
{
    static const size_t ax[] = {3};
    static const size_t ax3[] = {0, 1, 3};
    (void)state;
    discard_odd = 1;
    for (size_t t = 0; t < 2; t++) {
        run_and_check(UR_PLAN_UNSTACK, ax, 1, threads[t], limits[t]);
        run_and_check(UR_PLAN_UNSTACK, ax3, 3, threads[t + 1], limits[t + 2]);
    }
    discard_odd = 0;
}

static void test_exec__unstack_pipeline_axes(void **state)
{
    /* [repeats, stages, E, layers_per_stage, M]: out[(r*S + s)*lps + j] */
    static const size_t ax[] = {0, 1, 3};
    (void)state;
    sweep(UR_PLAN_UNSTACK, ax, 3);
}

/* Large chunks, whole (no memory limit) and in slabs: the one-pass decode-and-split path on
 * each kind of action, against the same reference. */
static void test_exec__large_chunks(void **state)
{
    static const size_t inner[] = {3}, outer[] = {0};
    static const uint64_t big_limits[] = {0, 1 << 20};
    char step[300];
    (void)state;
    SHAPE = BIG_SHAPE;
    CHUNK = BIG_CHUNK;
    input = "big";
    snprintf(step, sizeof step, "%s/big/0", scratch);
    make_input(step);
    for (size_t l = 0; l < 2; l++) {
        for (int t = 1; t <= 2; t++) {
            run_and_check(UR_PLAN_UNSTACK, inner, 1, t, big_limits[l]);
            run_and_check(UR_PLAN_UNSTACK, outer, 1, t, big_limits[l]);
            run_and_check(UR_PLAN_COPY, NULL, 0, t, big_limits[l]);
        }
    }
    SHAPE = SMALL_SHAPE;
    CHUNK = SMALL_CHUNK;
    input = "in";
}

/* The default memory limit grows with the thread count, within [256 MiB, RAM / 4]. */
static void test_exec__default_memory(void **state)
{
    const uint64_t MiB = 1 << 20, GiB = MiB << 10;
    (void)state;
    assert_int_equal(ur_exec_default_memory(1, 16 * GiB), 256 * MiB);
    assert_int_equal(ur_exec_default_memory(2, 16 * GiB), 256 * MiB);
    assert_int_equal(ur_exec_default_memory(8, 16 * GiB), 1024 * MiB);
    assert_int_equal(ur_exec_default_memory(64, 16 * GiB), 4 * GiB); /* RAM / 4 */
    assert_int_equal(ur_exec_default_memory(64, 0), 8 * GiB); /* RAM unknown */
    assert_int_equal(ur_exec_default_memory(64, 512 * MiB), 256 * MiB); /* a tiny machine */
    assert_int_equal(ur_exec_default_memory(0, 16 * GiB), 256 * MiB);
}

static void test_exec__copy_and_replicate(void **state)
{
    (void)state;
    sweep(UR_PLAN_COPY, NULL, 0);
    sweep(UR_PLAN_REPLICATE, NULL, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exec__unstack_one_axis),
        cmocka_unit_test(test_exec__unstack_outer_axis),
        cmocka_unit_test(test_exec__unstack_discarded_slices),
        cmocka_unit_test(test_exec__unstack_pipeline_axes),
        cmocka_unit_test(test_exec__large_chunks),
        cmocka_unit_test(test_exec__default_memory),
        cmocka_unit_test(test_exec__copy_and_replicate),
        cmocka_unit_test(test_exec__second_sink),
    };
    return cmocka_run_group_tests_name("exec", tests, setup, teardown);
}
