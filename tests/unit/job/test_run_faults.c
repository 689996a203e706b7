/* The run protocol, failed at every step in turn.
 *
 * Two destinations: the memory store "mem://faults" (an object store with a conditional create
 * and nothing else, as S3 and GCS are), failed at each store operation; and a directory, failed
 * at each file-system call that changes something or opens a file (fs_faults.c, linked in with
 * --wrap). The input is the example checkpoint. For each scenario (one process; one process
 * with --resume; 2, 3 and 4 processes run one after the other; LoRA with two adapters) a
 * fault-free run gives the reference output and the number of operations each process makes.
 * Then for each process j and each of its operations k:
 *
 *   1. the processes run in order, process j's k-th operation failing, either alone ("once":
 *      a request the HTTP layer gave up on, a full disk) or with every later one of that
 *      process ("dies": the process is killed there and does nothing more);
 *   2. what that left must never be taken for a different checkpoint. A bucket: either no
 *      step is committed (no commit_success.txt at the first unit) or every object of the
 *      reference is there with the reference's bytes, anything else being unroll's own
 *      bookkeeping ("unroll-*"). A directory: each unit (a step directory, an adapter's
 *      config) is absent or the reference's, whole;
 *   3. process j is run again without faults (its $TMPDIR kept, or emptied as on a replacement
 *      machine: alternately), unless it reported success after a single failure (a scheduler
 *      reruns what failed), and the destination must then hold exactly the reference (a
 *      one-process bucket run without --resume may refuse to write over a step already
 *      published, which then is the reference).
 *
 * Time stamps come from SOURCE_DATE_EPOCH, so two runs write the same bytes. */
#define _POSIX_C_SOURCE 200809L
#include "ur_test.h"

#include "fs_faults.h"

#include "unroll/alloc.h"
#include "unroll/buf.h"
#include "unroll/fs.h"
#include "unroll/job.h"
#include "unroll/kvstore.h"

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

/* The destination: the bucket, or the directory <scratch>/out (through a file store on
 * scratch); its objects are the keys below "out/" either way. */
static int local_dest;

static ur_kvstore *open_dest(void)
{
    ur_kvstore *kv = bucket;
    ur_err err;
    if (local_dest) {
        assert_int_equal(ur_kvstore_file_open(&kv, scratch, 1, &err), UR_OK);
    }
    return kv;
}

static void close_dest(ur_kvstore *kv)
{
    if (kv != bucket) {
        ur_kvstore_close(kv);
    }
}

static void take_snapshot(snapshot *s)
{
    ur_kvstore *kv = open_dest();
    ur_err err;
    int rc;
    memset(s, 0, sizeof *s);
    rc = ur_kvstore_list(kv, "out/", add_key, s, &err);
    assert_true(rc == UR_OK || rc == UR_ENOTFOUND);
    for (size_t i = 0; i < s->n; i++) {
        assert_int_equal(ur_kvstore_read(kv, s->keys[i], &s->vals[i], &err), UR_OK);
    }
    close_dest(kv);
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

/* unroll's own objects (claim, run text, staged shares; beside a directory: the lock, the
 * staging directories), never read as checkpoint content */
static int bookkeeping(const char *key)
{
    return strstr(key, "unroll-") != NULL;
}

static void empty_dest(void)
{
    snapshot s;
    ur_err err;
    if (local_dest) {
        char *out = ur_path_joinf(scratch, "out");
        assert_int_equal(ur_fs_remove_tree(out, &err), UR_OK);
        ur_free(out);
        return;
    }
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
    ur_kvstore *kv = open_dest();
    uint64_t size;
    int found = ur_kvstore_size(kv, marker, &size, NULL) == UR_OK;
    close_dest(kv);
    return found;
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

/* The unit a key of the output belongs to: its step directory ("out/r/checkpoints/base/0/"),
 * or the key itself (a file unit: an adapter_config.json); its length. */
static size_t unit_of(const char *key)
{
    const char *step = strstr(key + strlen(CKDIR), "0/");
    while (step != NULL && step[-1] != '/') {
        step = strstr(step + 1, "0/");
    }
    return step != NULL ? (size_t)(step + 2 - key) : strlen(key);
}

/* A directory destination: units move into place one rename each, so each unit (not the set:
 * a kill between the renames of a LoRA run's units is put right by the rerun's journal
 * recovery) is either absent or the reference's, whole. */
static int units_whole_or_absent(const snapshot *ref, const char *what)
{
    snapshot now;
    int ok = 1;
    take_snapshot(&now);
    for (size_t i = 0; ok && i < ref->n; i++) {
        size_t ulen = unit_of(ref->keys[i]);
        int here = 0, want = 0, equal = 0;
        for (size_t j = 0; j < ref->n; j++) {
            if (strncmp(ref->keys[j], ref->keys[i], ulen) == 0) {
                const ur_buf *v = lookup(&now, ref->keys[j]);
                want++;
                here += v != NULL;
                equal += v != NULL && same_bytes(v, &ref->vals[j]);
            }
        }
        for (size_t j = 0; j < now.n; j++) {
            if (strncmp(now.keys[j], ref->keys[i], ulen) == 0 &&
                lookup(ref, now.keys[j]) == NULL && !bookkeeping(now.keys[j])) {
                here++; /* a stray object inside the unit */
            }
        }
        if (here != 0 && (here != want || equal != want)) {
            fprintf(stderr, "%s: the unit %.*s is neither absent nor the reference's\n", what,
                    (int)ulen, ref->keys[i]);
            ok = 0;
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
    for (size_t i = 0; !ok && getenv("UR_FAULTS_TRACE") != NULL && i < now.n; i++) {
        fprintf(stderr, "  now: %s\n", now.keys[i]);
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
    int local; /* into the directory <scratch>/out, failing file-system calls (fs_faults.c) */
} scenario;

static char adapters[256];
static char adapters_arg[300];
static char local_arg[300];

static int run_process(const scenario *sc, int index, ur_err *err)
{
    const char *ov[] = {"load_full_state_path=" EXAMPLE_ITEMS,
                        sc->local ? local_arg : "base_output_directory=mem://faults/out",
                        "run_name=r", "force_unroll=true", adapters_arg};
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
    rc = ur_job_run(&rep, &o, err);
    ur_job_run_report_dispose(&rep);
    return rc;
}

static char tmpdir[300];

static void empty_tmpdir(void)
{
    ur_err err;
    assert_int_equal(ur_fs_remove_tree(tmpdir, &err), UR_OK);
    assert_int_equal(ur_fs_mkdirs(tmpdir, &err), UR_OK);
}

static void arm(const scenario *sc, unsigned at, int once)
{
    if (sc->local) {
        fs_faults_arm(at, once);
    } else {
        ur_kvstore_mem_fault(bucket, at, once);
    }
}

/* Stop injecting; the operations counted since arm. */
static unsigned disarm(const scenario *sc)
{
    unsigned n = sc->local ? fs_faults_disarm() : ur_kvstore_mem_ops(bucket);
    ur_kvstore_mem_fault(bucket, 0, 0);
    return n;
}

/* Every process of the scenario, process `faulty` with its store operation `at` failing (0:
 * none); ops[] gets each process's operation count. Returns process `faulty`'s result. */
static int run_all(const scenario *sc, int faulty, unsigned at, int once, unsigned ops[])
{
    int faulty_rc = UR_OK;
    for (int i = 0; i < sc->count; i++) {
        ur_err err;
        int rc;
        arm(sc, i == faulty ? at : 0, once);
        rc = run_process(sc, i, &err);
        {
            unsigned n = disarm(sc);
            if (ops != NULL) {
                ops[i] = n;
            }
        }
        if (at == 0 && rc != UR_OK) {
            fail_msg("%s, process %d without faults: %s", sc->name, i, err.msg);
        }
        if (i == faulty) {
            faulty_rc = rc;
        }
    }
    return faulty_rc;
}

static unsigned checked_runs;

/* Every operation in the native run (ctest); every 13th under AddressSanitizer (its pass runs
 * the whole suite again, ~3x slower), every 97th under valgrind (~50x). */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* UR_FAULTS_CASE="<scenario>:<process>:<operation>:<once>" runs that one case (to reproduce
 * a failure: UR_MEM_TRACE=1 or UR_FS_TRACE=1 writes each store operation or file-system call,
 * UR_FAULTS_TRACE=1 the objects left after the rerun). */
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
    unsigned stride = ur_test_under_valgrind() ? 97 : UNDER_ASAN ? 13 : 1;
    snapshot ref;

    marker = sc->lora ? CKDIR "base/0/commit_success.txt" : CKDIR "0/commit_success.txt";
    local_dest = sc->local;
    empty_dest();
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
                empty_dest();
                empty_tmpdir();
                rc = run_all(sc, j, k, once, NULL);
                if (!(sc->local ? units_whole_or_absent(&ref, what)
                                : nothing_or_reference(&ref, what))) {
                    fail_msg("%s: a reader would take the output for a checkpoint", what);
                }
                if (rc == UR_OK && once) {
                    /* the one failure did not fail the process (a clean-up step): a scheduler
                     * does not run it again, so the run is published; a bookkeeping object
                     * whose delete failed may stay (a claim left so is taken over by a rerun
                     * of the same command). A process that "died" is run again whatever it
                     * returned: a dead process returns nothing. */
                    if (!is_committed() || !nothing_or_reference(&ref, what)) {
                        fail_msg("%s: it succeeded, but did not publish the reference", what);
                    }
                    checked_runs++;
                    continue;
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
                if (rc != UR_OK && !(sc->count == 1 && !sc->resume && !sc->local && committed &&
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

static void test_run_faults__dir_one_process(void **state)
{
    static const scenario sc = {"directory, one process", 1, 0, 0, 1};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__dir_one_process_resume(void **state)
{
    static const scenario sc = {"directory, one process --resume", 1, 1, 0, 1};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__dir_three_processes(void **state)
{
    static const scenario sc = {"directory, 3 processes", 3, 0, 0, 1};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__dir_lora_two_processes(void **state)
{
    static const scenario sc = {"directory, LoRA, 2 processes", 2, 0, 1, 1};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__lora_one_process(void **state)
{
    static const scenario sc = {"LoRA, one process", 1, 0, 1, 0};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__lora_three_processes(void **state)
{
    static const scenario sc = {"LoRA, 3 processes", 3, 0, 1, 0};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__one_process(void **state)
{
    static const scenario sc = {"one process", 1, 0, 0, 0};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__one_process_resume(void **state)
{
    static const scenario sc = {"one process --resume", 1, 1, 0, 0};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__two_processes(void **state)
{
    static const scenario sc = {"2 processes", 2, 0, 0, 0};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__three_processes(void **state)
{
    static const scenario sc = {"3 processes", 3, 0, 0, 0};
    (void)state;
    fail_every_operation(&sc);
}

static void test_run_faults__four_processes(void **state)
{
    static const scenario sc = {"4 processes", 4, 0, 0, 0};
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
    if (mkdtemp(scratch) == NULL) {
        return -1;
    }
    snprintf(tmpdir, sizeof tmpdir, "%s/tmp", scratch);
    snprintf(local_arg, sizeof local_arg, "base_output_directory=%s/out", scratch);
    if (ur_fs_mkdirs(tmpdir, &err) != UR_OK || setenv("TMPDIR", tmpdir, 1) != 0 ||
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
        cmocka_unit_test(test_run_faults__dir_one_process),
        cmocka_unit_test(test_run_faults__dir_one_process_resume),
        cmocka_unit_test(test_run_faults__dir_three_processes),
        cmocka_unit_test(test_run_faults__dir_lora_two_processes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
