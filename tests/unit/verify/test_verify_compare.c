/* `unroll verify`'s value comparison by input chunk (src/verify/verify_compare.c) on C-written
 * checkpoints: a stacked fp32 leaf [A, L, B] whose chunks hold every layer, and its L
 * unrolled bf16 layers with output chunks that split the input's, read whole or in pieces
 * cut on either axis. Each input chunk must be decoded once for all the layers, and a difference
 * in one layer's part of a shared chunk must be reported for that layer, at its index, the first
 * issues in output-leaf order and, within a leaf, in output-chunk order (what comparing output
 * chunk by output chunk gave). */
#define _POSIX_C_SOURCE 200809L
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/orbax.h"
#include "unroll/verify.h"

enum { A = 128, L = 4, B = 256, IN_CHUNK_B = 128 };

/* The ways of reading the input tried on each case: the output's chunk rows on axis A and
 * verify's piece size (0: the default, the whole 256 KiB chunk at once). 16 KiB: pieces of
 * 64 rows (an output chunk's); 1 KiB with one-row output chunks: pieces of one row and two
 * layers, cut on the layer axis. */
static const struct {
    uint64_t out_chunk_a, piece_bytes;
} ways[] = {{64, 0}, {64, 16 << 10}, {1, 1 << 10}, {1, 0}};

static char scratch[256];

/* Exact in bfloat16 (integers below 256, halved), so the expected output is the top half. */
static float value_at(uint64_t a, uint64_t l, uint64_t b)
{
    return (float)((a * 7 + l * 3 + b) % 251) * 0.5f;
}

static uint16_t bf16_of(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (uint16_t)(bits >> 16);
}

static void key_path(ur_orbax_key *p, const char *layer)
{
    static const char *const head[] = {"params", "params", "decoder"};
    for (int k = 0; k < 3; k++) {
        p[k].key = head[k];
        p[k].type = UR_ORBAX_KEY_DICT;
    }
    p[3].key = layer;
    p[3].type = UR_ORBAX_KEY_DICT;
    p[4].key = "w";
    p[4].type = UR_ORBAX_KEY_DICT;
}

/* The input: params/params/decoder/layers/w [A, L, B] fp32, chunks [A, L, IN_CHUNK_B] (two,
 * 256 KiB each: every layer in each). */
static void write_input(const char *step_dir)
{
    static const uint64_t shape[3] = {A, L, B}, chunk[3] = {A, L, IN_CHUNK_B};
    ur_orbax_writer *w = NULL;
    ur_orbax_write_opts o;
    ur_zarr_array *arr = NULL;
    ur_orbax_key path[5];
    float *buf = ur_malloc((size_t)A * L * IN_CHUNK_B * sizeof *buf);
    ur_err err;

    assert_non_null(buf);
    key_path(path, "layers");
    ur_orbax_write_opts_init(&o);
    assert_int_equal(ur_orbax_writer_create(&w, step_dir, &o, &err), UR_OK);
    assert_int_equal(
        ur_orbax_writer_add_array(w, path, 5, UR_DT_FLOAT32, 3, shape, chunk, NULL, &arr, &err),
        UR_OK);
    for (uint64_t c = 0; c < B / IN_CHUNK_B; c++) {
        uint64_t idx[3] = {0, 0, c}, e = 0;
        for (uint64_t a = 0; a < A; a++) {
            for (uint64_t l = 0; l < L; l++) {
                for (uint64_t b = 0; b < IN_CHUNK_B; b++) {
                    buf[e++] = value_at(a, l, c * IN_CHUNK_B + b);
                }
            }
        }
        assert_int_equal(ur_zarr_array_write_chunk(arr, idx, buf, &err), UR_OK);
    }
    ur_free(buf);
    assert_int_equal(ur_orbax_writer_commit(w, &err), UR_OK);
}

/* One changed element of the output: layer l at [a, b] (l < 0: none). */
typedef struct {
    int64_t l;
    uint64_t a, b;
} change;

/* The output: params/params/decoder/layers_<l>/w [A, B] bf16, chunks [oa, IN_CHUNK_B]
 * (several in each input chunk), with the changes applied. */
static void write_output(const char *step_dir, uint64_t oa, const change *ch, size_t n_ch)
{
    static const uint64_t shape[2] = {A, B};
    const uint64_t chunk[2] = {oa, IN_CHUNK_B};
    ur_orbax_writer *w = NULL;
    ur_orbax_write_opts o;
    uint16_t *buf = ur_malloc((size_t)oa * IN_CHUNK_B * sizeof *buf);
    ur_err err;

    assert_non_null(buf);
    ur_orbax_write_opts_init(&o);
    assert_int_equal(ur_orbax_writer_create(&w, step_dir, &o, &err), UR_OK);
    for (uint64_t l = 0; l < L; l++) {
        char name[32];
        ur_orbax_key path[5];
        ur_zarr_array *arr = NULL;
        snprintf(name, sizeof name, "layers_%d", (int)l);
        key_path(path, name);
        assert_int_equal(ur_orbax_writer_add_array(w, path, 5, UR_DT_BFLOAT16, 2, shape, chunk,
                                                   NULL, &arr, &err),
                         UR_OK);
        for (uint64_t ca = 0; ca < A / oa; ca++) {
            for (uint64_t cb = 0; cb < B / IN_CHUNK_B; cb++) {
                uint64_t idx[2] = {ca, cb}, e = 0;
                for (uint64_t a = ca * oa; a < (ca + 1) * oa; a++) {
                    for (uint64_t b = cb * IN_CHUNK_B; b < (cb + 1) * IN_CHUNK_B; b++) {
                        uint16_t v = bf16_of(value_at(a, l, b));
                        for (size_t k = 0; k < n_ch; k++) {
                            if (ch[k].l == (int64_t)l && ch[k].a == a && ch[k].b == b) {
                                v ^= 0x0040; /* another value, still a number */
                            }
                        }
                        buf[e++] = v;
                    }
                }
                assert_int_equal(ur_zarr_array_write_chunk(arr, idx, buf, &err), UR_OK);
            }
        }
    }
    ur_free(buf);
    assert_int_equal(ur_orbax_writer_commit(w, &err), UR_OK);
}

/* Verify a fresh output with the given changes against the input, read the way ways[w]
 * says. */
static void run_verify(size_t w, const change *ch, size_t n_ch, ur_verify_report *rep)
{
    char in_items[320], out_step[300], out_items[320];
    ur_orbax_ckpt *in = NULL, *out = NULL;
    ur_verify_opts opts;
    ur_err err;
    static int run;

    snprintf(in_items, sizeof in_items, "%s/in/0/items", scratch);
    snprintf(out_step, sizeof out_step, "%s/out%d", scratch, run++);
    snprintf(out_items, sizeof out_items, "%s/items", out_step);
    write_output(out_step, ways[w].out_chunk_a, ch, n_ch);
    assert_int_equal(ur_orbax_ckpt_open(&in, in_items, 0, &err), UR_OK);
    assert_int_equal(ur_orbax_ckpt_open(&out, out_items, 0, &err), UR_OK);
    ur_verify_opts_init(&opts);
    opts.num_decoder_layers = L;
    opts.piece_bytes = ways[w].piece_bytes;
    if (ur_verify_run(rep, in, out, &opts, &err) != UR_OK) {
        fail_msg("verify: %s", err.msg);
    }
    ur_orbax_ckpt_close(in);
    ur_orbax_ckpt_close(out);
}

static void test_verify_compare__each_input_chunk_decoded_once(void **state)
{
    (void)state;
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
        ur_verify_report rep;
        run_verify(w, NULL, 0, &rep);
        assert_int_equal(rep.n_issues_total, 0);
        assert_int_equal(rep.arrays_compared, L);
        assert_int_equal(rep.elements, (uint64_t)L * A * B);
        /* two input chunks, each holding all L layers: decoded once each, not once a layer */
        assert_int_equal(rep.chunks_decoded, B / IN_CHUNK_B);
        ur_verify_report_dispose(&rep);
    }
}

static void test_verify_compare__difference_in_one_layer_of_a_shared_chunk(void **state)
{
    /* layer 2, in the second input chunk, which every layer shares */
    const change ch[] = {{2, 5, 200}};
    (void)state;
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
        ur_verify_report rep;
        run_verify(w, ch, 1, &rep);
        assert_int_equal(rep.n_issues_total, 1);
        assert_int_equal(rep.elements_bad, 1);
        assert_int_equal(rep.n_issues, 1);
        assert_int_equal(rep.issues[0].kind, UR_VERIFY_VALUE);
        assert_string_equal(rep.issues[0].leaf, "decoder/layers_2/w");
        assert_non_null(strstr(rep.issues[0].source, "decoder/layers/w[layer 2"));
        assert_int_equal(rep.issues[0].rank, 2);
        assert_int_equal(rep.issues[0].index[0], 5);
        assert_int_equal(rep.issues[0].index[1], 200);
        assert_int_equal(rep.chunks_decoded, B / IN_CHUNK_B);
        ur_verify_report_dispose(&rep);
    }
}

static void test_verify_compare__issues_in_leaf_then_output_chunk_order(void **state)
{
    /* Found in input-chunk order: within layer 1, [100, 10] (input chunk 0, output chunk 2)
     * before [5, 200] (input chunk 1, output chunk 1). Reported in output-leaf order, and
     * within a leaf in output-chunk order: layer 1's [5, 200], [100, 10], then layer 3's. */
    const change ch[] = {{3, 0, 0}, {1, 100, 10}, {1, 5, 200}};
    (void)state;
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
        ur_verify_report rep;
        run_verify(w, ch, 3, &rep);
        assert_int_equal(rep.n_issues_total, 2); /* one per leaf that differs */
        assert_int_equal(rep.elements_bad, 3);
        assert_int_equal(rep.n_issues, 3);
        assert_string_equal(rep.issues[0].leaf, "decoder/layers_1/w");
        assert_int_equal(rep.issues[0].index[0], 5);
        assert_int_equal(rep.issues[0].index[1], 200);
        assert_string_equal(rep.issues[1].leaf, "decoder/layers_1/w");
        assert_int_equal(rep.issues[1].index[0], 100);
        assert_int_equal(rep.issues[1].index[1], 10);
        assert_string_equal(rep.issues[2].leaf, "decoder/layers_3/w");
        assert_int_equal(rep.issues[2].index[0], 0);
        assert_int_equal(rep.issues[2].index[1], 0);
        assert_int_equal(rep.chunks_decoded, B / IN_CHUNK_B);
        ur_verify_report_dispose(&rep);
    }
}

static int setup(void **state)
{
    char in_step[300];
    (void)state;
    strcpy(scratch, "/tmp/ur_verify_compare_XXXXXX");
    if (mkdtemp(scratch) == NULL) {
        return -1;
    }
    snprintf(in_step, sizeof in_step, "%s/in/0", scratch);
    write_input(in_step);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return ur_fs_remove_tree(scratch, NULL) == UR_OK ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verify_compare__each_input_chunk_decoded_once),
        cmocka_unit_test(test_verify_compare__difference_in_one_layer_of_a_shared_chunk),
        cmocka_unit_test(test_verify_compare__issues_in_leaf_then_output_chunk_order),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
