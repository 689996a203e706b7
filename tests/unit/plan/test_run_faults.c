/* The run protocol into an object store, failed at every store operation in turn.
 *
 * The output is the memory store "mem://faults" (an object store with a conditional create and
 * nothing else, as S3 and GCS are); the input is the example checkpoint. For each scenario (one
 * process; one process with --resume; 2, 3 and 4 processes run one after the other) a fault-free
 * run gives the reference objects and the number of store operations each process makes. Then
 * for each process j and each of its operations k:
 *
 *   1. the processes run in order, process j's k-th store operation failing, either alone
 *      ("once": a dropped request the HTTP layer gave up on) or with every later one of that
 *      process ("dies": the process is killed there and issues nothing more);
 *   2. whatever that left must never be taken for a different checkpoint: either no step is
 *      committed (no commit_success.txt at the step), or every object of the reference is
 *      there with the reference's bytes (and anything else is unroll's own bookkeeping,
 *      "unroll-*");
 *   3. process j is run again without faults (its $TMPDIR kept, or emptied as on a replacement
 *      machine: alternately), and the store must then hold exactly the reference's objects
 *      (a one-process run without --resume may refuse to write over a step already
 *      published, which then is the reference).
 *
 * Time stamps come from SOURCE_DATE_EPOCH, so two runs write the same bytes. */
#define _POSIX_C_SOURCE 200809L
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/buf.h"
#include "unroll/fs.h"
#include "unroll/kvstore.h"
#include "unroll/plan_run.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXAMPLE UR_TEST_DATA_DIR "/example"
#define EXAMPLE_ITEMS EXAMPLE "/checkpoints/9/items"
#define CKDIR "out/r/checkpoints/"
#define MAX_PROCS 4

static char scratch[256];
static ur_kvstore *bucket;

/* ---- the store's objects ---------------------------------------------------------------- */

typedef struct {
    char **keys;
    ur_buf *vals;
    size_t n, cap;
} snapshot;

static int add_key(void *ctx, const char *key, uint64_t size)
{
    snapshot *s = ctx;
    (void)size;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->keys = realloc(s->keys, s->cap * sizeof *s->keys);
        s->vals = realloc(s->vals, s->cap * sizeof *s->vals);
        assert_non_null(s->keys);
        assert_non_null(s->vals);
    }
    s->keys[s->n] = ur_strdup(key);
    ur_buf_init(&s->vals[s->n], 0);
    s->n++;
    return 0;
}

static void take_snapshot(snapshot *s)
{
    ur_err err;
    memset(s, 0, sizeof *s);
    assert_int_equal(ur_kvstore_list(bucket, "", add_key, s, &err), UR_OK);
    for (size_t i = 0; i < s->n; i++) {
        assert_int_equal(ur_kvstore_read(bucket, s->keys[i], &s->vals[i], &err), UR_OK);
    }
}

static void snapshot_dispose(snapshot *s)
{
    for (size_t i = 0; i < s->n; i++) {
        ur_free(s->keys[i]);
        ur_buf_dispose(&s->vals[i]);
    }
    free(s->keys);
    free(s->vals);
    memset(s, 0, sizeof *s);
}

static const ur_buf *lookup(const snapshot *s, const char *key)
{
    for (size_t i = 0; i < s->n; i++) {
        if (strcmp(s->keys[i], key) == 0) {
            return &s->vals[i];
        }
    }
    return NULL;
}

static int same_bytes(const ur_buf *a, const ur_buf *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/* unroll's own objects (claim, run text, staged shares), never read as checkpoint content */
static int bookkeeping(const char *key)
{
    return strstr(key, "unroll-") != NULL;
}

static void empty_bucket(void)
{
    snapshot s;
    ur_err err;
    take_snapshot(&s);
    for (size_t i = 0; i < s.n; i++) {
        assert_int_equal(ur_kvstore_delete(bucket, s.keys[i], &err), UR_OK);
    }
    snapshot_dispose(&s);
}

/* The marker of the run's first unit, written last ("0", or "base/0" with adapters). */
static const char *marker = CKDIR "0/commit_success.txt";

static int is_committed(void)
{
    uint64_t size;
    return ur_kvstore_size(bucket, marker, &size, NULL) == UR_OK;
}

/* What a reader sees: nothing committed, or the reference's objects, byte for byte. 0 when
 * it is neither (and says what differs). */
static int nothing_or_reference(const snapshot *ref, const char *what)
{
    snapshot now;
    int ok = 1;
    take_snapshot(&now);
    if (lookup(&now, marker) != NULL) {
        for (size_t i = 0; ok && i < ref->n; i++) {
            const ur_buf *v = lookup(&now, ref->keys[i]);
            if (v == NULL || !same_bytes(v, &ref->vals[i])) {
                fprintf(stderr, "%s: committed, but %s is %s\n", what, ref->keys[i],
                        v == NULL ? "missing" : "not the reference's");
                ok = 0;
            }
        }
        for (size_t i = 0; ok && i < now.n; i++) {
            if (lookup(ref, now.keys[i]) == NULL && !bookkeeping(now.keys[i])) {
                fprintf(stderr, "%s: committed, with a stray %s\n", what, now.keys[i]);
                ok = 0;
            }
        }
    }
    snapshot_dispose(&now);
    return ok;
}

/* Exactly the reference's objects. */
static int is_reference(const snapshot *ref, const char *what)
{
    snapshot now;
    int ok = 1;
    take_snapshot(&now);
    for (size_t i = 0; i < now.n; i++) {
        const ur_buf *v = lookup(ref, now.keys[i]);
        if (v == NULL || !same_bytes(v, &now.vals[i])) {
            fprintf(stderr, "%s: %s %s\n", what, now.keys[i],
                    v == NULL ? "is not in the reference" : "differs from the reference");
            ok = 0;
            break;
        }
    }
    if (ok && now.n != ref->n) {
        fprintf(stderr, "%s: %zu objects, the reference has %zu\n", what, now.n, ref->n);
        ok = 0;
    }
    snapshot_dispose(&now);
    return ok;
}

/* ---- runs ------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int count; /* processes (1: one) */
    int resume;
    int lora; /* with two adapters (units base/0, loras/<id>/0, loras/<id>/adapter_config.json) */
} scenario;

static char adapters[256];
static char adapters_arg[300];

static int run_process(const scenario *sc, int index, ur_err *err)
{
    const char *ov[] = {"load_full_state_path=" EXAMPLE_ITEMS,
                        "base_output_directory=mem://faults/out", "run_name=r",
                        "force_unroll=true", adapters_arg};
    ur_run_opts o;
    ur_run_report rep;
    int rc;

    memset(&o, 0, sizeof o);
    o.config.config_path = EXAMPLE "/unroll.yml";
    o.config.overrides = ov;
    o.config.n_overrides = sizeof ov / sizeof ov[0] - (sc->lora ? 0 : 1);
    o.threads = 1;
    o.process_count = sc->count > 1 ? sc->count : 0;
    o.process_index = index;
    o.resume = sc->resume;
    ur_err_clear(err);
    rc = ur_plan_run(&rep, &o, err);
    ur_plan_run_report_dispose(&rep);
    return rc;
}

static void empty_tmpdir(void)
{
    ur_err err;
    assert_int_equal(ur_fs_remove_tree(scratch, &err), UR_OK);
    assert_int_equal(ur_fs_mkdirs(scratch, &err), UR_OK);
}

/* Every process of the scenario, process `faulty` with its store operation `at` failing (0:
 * none); ops[] gets each process's operation count. */
static void run_all(const scenario *sc, int faulty, unsigned at, int once, unsigned ops[])
{
    for (int i = 0; i < sc->count; i++) {
        ur_err err;
        int rc;
        ur_kvstore_mem_fault(bucket, i == faulty ? at : 0, once);
        rc = run_process(sc, i, &err);
        if (ops != NULL) {
            ops[i] = ur_kvstore_mem_ops(bucket);
        }
        if (at == 0 && rc != UR_OK) {
            fail_msg("%s, process %d without faults: %s", sc->name, i, err.msg);
        }
    }
    ur_kvstore_mem_fault(bucket, 0, 0);
}

static unsigned checked_runs;

/* UR_FAULTS_CASE="<scenario>:<process>:<operation>:<once>" runs that one case (to reproduce
 * a failure, with UR_MEM_TRACE=1 for the store's operations). */
static int wanted(const scenario *sc, int j, unsigned k, int once)
{
    const char *only = getenv("UR_FAULTS_CASE");
    char want[160];
    if (only == NULL) {
        return 1;
    }
    snprintf(want, sizeof want, "%s:%d:%u:%d", sc->name, j, k, once);
    return strcmp(only, want) == 0;
}

static void fail_every_operation(const scenario *sc)
{
    unsigned ops[MAX_PROCS] = {0};
    unsigned stride = ur_test_under_valgrind() ? 97 : 1; /* valgrind: ~50x slower */
    snapshot ref;

    marker = sc->lora ? CKDIR "base/0/commit_success.txt" : CKDIR "0/commit_success.txt";
    empty_bucket();
    empty_tmpdir();
    run_all(sc, -1, 0, 0, ops);
    take_snapshot(&ref);
    assert_non_null(lookup(&ref, marker));
    if (sc->lora) {
        assert_non_null(lookup(&ref, CKDIR "loras/b/adapter_config.json"));
        assert_non_null(lookup(&ref, CKDIR "loras/b/0/commit_success.txt"));
    }
    for (size_t i = 0; i < ref.n; i++) {
        /* a finished run leaves no claim and no staged shares (the run text it keeps,
         * unroll-run.txt, refuses a later run with other arguments) */
        if (getenv("UR_FAULTS_TRACE") != NULL) {
            fprintf(stderr, "reference: %s (%zu bytes)\n", ref.keys[i], ref.vals[i].len);
        }
        assert_null(strstr(ref.keys[i], "unroll-claim"));
        assert_null(strstr(ref.keys[i], "unroll-multi"));
    }

    for (int j = 0; j < sc->count; j++) {
        for (unsigned k = 1; k <= ops[j]; k += stride) {
            for (int once = 0; once <= 1; once++) {
                char what[128];
                ur_err err;
                int rc, committed;
                if (!wanted(sc, j, k, once)) {
                    continue;
                }
                snprintf(what, sizeof what, "%s, process %d, store operation %u of %u %s",
                         sc->name, j, k, ops[j], once ? "failing" : "and all after it failing");
                empty_bucket();
                empty_tmpdir();
                run_all(sc, j, k, once, NULL);
                if (!nothing_or_reference(&ref, what)) {
                    fail_msg("%s: a reader would take the output for a checkpoint", what);
                }
                if ((k + (unsigned)once) % 2 == 0) {
                    empty_tmpdir(); /* the rerun on a replacement machine */
                }
                committed = is_committed();
                rc = run_process(sc, j, &err);
                /* A single-process run never writes over a published step without --replace
                 * (an object store cannot swap it atomically): a run killed after its
                 * markers and its claim's delete leaves a published step that its rerun
                 * refuses. That step is the reference (checked above and below). */
                if (rc != UR_OK &&
                    !(sc->count == 1 && !sc->resume && committed &&
                      strstr(err.msg, "already holds") != NULL)) {
                    fail_msg("%s: the rerun failed: %s", what, err.msg);
                }
                if (!is_reference(&ref, what)) {
                    fail_msg("%s: the rerun did not leave the reference", what);
                }
                checked_runs++;
            }
        }
    }
    snapshot_dispose(&ref);
}

static void test_run_faults__lora_one_process(void **state)
{
    static const scenario sc = {"LoRA, one process", 1, 0, 1};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__lora_three_processes(void **state)
{
    static const scenario sc = {"LoRA, 3 processes", 3, 0, 1};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__one_process(void **state)
{
    static const scenario sc = {"one process", 1, 0, 0};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__one_process_resume(void **state)
{
    static const scenario sc = {"one process --resume", 1, 1, 0};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__two_processes(void **state)
{
    static const scenario sc = {"2 processes", 2, 0, 0};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__three_processes(void **state)
{
    static const scenario sc = {"3 processes", 3, 0, 0};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__four_processes(void **state)
{
    static const scenario sc = {"4 processes", 4, 0, 0};
    (void)state;
    fail_every_operation(&sc);
}

static int setup(void **state)
{
    ur_err err;
    (void)state;
    /* on tmpfs where there is one: the runs fsync their local files, hundreds of times */
    snprintf(scratch, sizeof scratch, "%s/ur_run_faults_XXXXXX",
             ur_fs_is_dir("/dev/shm") ? "/dev/shm" : "/tmp");
    if (mkdtemp(scratch) == NULL || setenv("TMPDIR", scratch, 1) != 0 ||
        setenv("SOURCE_DATE_EPOCH", "1700000000", 1) != 0) {
        return -1;
    }
    /* two adapters: the example checkpoint again (what they hold does not matter here) */
    snprintf(adapters, sizeof adapters, "/tmp/ur_run_faults_adapters_XXXXXX");
    if (mkdtemp(adapters) == NULL) {
        return -1;
    }
    for (const char *id = "a"; *id <= 'b'; id = *id == 'a' ? "b" : "c") {
        char *dir = ur_path_joinf(adapters, "%s", id), *step = ur_path_joinf(dir, "0"),
             *cfg = ur_path_joinf(dir, "adapter_config.json");
        int ok = dir != NULL && step != NULL && cfg != NULL && ur_fs_mkdirs(dir, &err) == UR_OK &&
                 symlink(EXAMPLE "/checkpoints/9", step) == 0 &&
                 ur_fs_write_file(cfg, "{\"r\": 4}\n", 9, &err) == UR_OK;
        ur_free(dir);
        ur_free(step);
        ur_free(cfg);
        if (!ok) {
            return -1;
        }
    }
    snprintf(adapters_arg, sizeof adapters_arg, "lora_input_adapters_path=%s", adapters);
    if (ur_kvstore_mem_new(&bucket, &err) != UR_OK ||
        ur_kvstore_mem_name(bucket, "faults", &err) != UR_OK) {
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ur_kvstore_close(bucket);
    fprintf(stderr, "run_faults: %u faulted runs checked\n", checked_runs);
    return ur_fs_remove_tree(scratch, NULL) == UR_OK && ur_fs_remove_tree(adapters, NULL) == UR_OK
               ? 0
               : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_faults__one_process),
        cmocka_unit_test(test_run_faults__one_process_resume),
        cmocka_unit_test(test_run_faults__two_processes),
        cmocka_unit_test(test_run_faults__three_processes),
        cmocka_unit_test(test_run_faults__four_processes),
        cmocka_unit_test(test_run_faults__lora_one_process),
        cmocka_unit_test(test_run_faults__lora_three_processes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
