/* The table of layout families (src/maxtext/family.c): which descriptor each config gets. */
#include "ur_test.h"

#include "maxtext/family.h"

/* the descriptors (family.c names them only in its table) */
extern const ur_plan_family ur_family_plain, ur_family_deepseek, ur_family_gemma3,
    ur_family_gemma4, ur_family_deepseek4, ur_family_cycle, ur_family_qwen3_next;

/* A config of decoder_block `block` and cycle interval `cycle`: the settings, and the
 * families' keys at their defaults but the cycle. */
typedef struct {
    ur_settings s;
    ur_family_keys k;
} fam_cfg;

static fam_cfg settings(const char *block, int64_t cycle)
{
    fam_cfg c;
    ur_err err;
    memset(&c.s, 0, sizeof c.s);
    c.s.decoder_block = block;
    c.s.num_decoder_layers = 12;
    c.s.scan_layers = 1;
    c.s.force_unroll = 1;
    assert_int_equal(ur_family_keys_resolve(&c.k, NULL, &err), UR_OK);
    ur_family_keys_set(&c.k, &ur_key_inhomogeneous_layer_cycle_interval, cycle);
    return c;
}

static void test_family__table_rows(void **state)
{
    fam_cfg c;
    (void)state;
    c = settings("llama2", 1);
    assert_ptr_equal(ur_family_find(&c.s, &c.k), &ur_family_plain);
    c = settings("deepseek", 1);
    assert_ptr_equal(ur_family_find(&c.s, &c.k), &ur_family_deepseek);
    c = settings("gemma3", 1);
    assert_ptr_equal(ur_family_find(&c.s, &c.k), &ur_family_gemma3);
    c = settings("gemma4", 1);
    assert_ptr_equal(ur_family_find(&c.s, &c.k), &ur_family_gemma4);
    c = settings("deepseek4", 1);
    assert_ptr_equal(ur_family_find(&c.s, &c.k), &ur_family_deepseek4);
    c = settings("llama4", 4);
    assert_ptr_equal(ur_family_find(&c.s, &c.k), &ur_family_cycle);
    /* qwen3-next is nested only with a cycle; without one it is plain */
    c = settings("qwen3_next", 4);
    assert_ptr_equal(ur_family_find(&c.s, &c.k), &ur_family_qwen3_next);
    c = settings("qwen3_next", 1);
    assert_ptr_equal(ur_family_find(&c.s, &c.k), &ur_family_plain);
}

static void test_family__pipeline_first_when_unrolled(void **state)
{
    fam_cfg c = settings("llama2", 1);
    (void)state;
    ur_family_keys_set(&c.k, &ur_key_ici_pipeline_parallelism, 2);
    assert_ptr_equal(ur_family_find(&c.s, &c.k), &ur_family_pipeline);
    assert_ptr_equal(ur_family_find_block(&c.s, &c.k), &ur_family_plain);
    /* not unrolled: the stacks are copied, the decoder_block family applies */
    c.s.force_unroll = 0;
    assert_ptr_equal(ur_family_find(&c.s, &c.k), &ur_family_plain);
    /* only the plain family and DeepSeek are pipelined */
    c = settings("gemma3", 1);
    assert_int_equal(ur_family_find_block(&c.s, &c.k)->pipelinable, 0);
    c = settings("llama2", 1);
    assert_int_equal(ur_family_find_block(&c.s, &c.k)->pipelinable, 1);
    c = settings("deepseek", 1);
    assert_int_equal(ur_family_find_block(&c.s, &c.k)->pipelinable, 1);
    ur_family_keys_set(&c.k, &ur_key_ici_pipeline_parallelism, 2);
    assert_ptr_equal(ur_family_find(&c.s, &c.k), &ur_family_pipeline);
}

/* Each family's keys, gathered from the table (no config: MaxText's defaults, types.py). */
static void test_family__keys_declared_by_their_families(void **state)
{
    static const struct {
        const char *name;
        int64_t dflt;
    } k_want[] = {
        {"first_num_dense_layers", 0},   {"inhomogeneous_layer_cycle_interval", 1},
        {"first_num_hash_layers", 0},    {"ici_pipeline_parallelism", 1},
        {"dcn_pipeline_parallelism", 1}, {"num_layers_per_pipeline_stage", 1},
        {"num_pipeline_repeats", -1},    {"pipeline_parallel_layers", -1},
        {"scan_layers_per_stage", 0},    {"engram_layers", 0},
    };
    ur_family_keys k;
    ur_err err;
    size_t n = 5;
    (void)state;
    assert_int_equal(ur_family_keys_resolve(&k, NULL, &err), UR_OK);
    assert_int_equal(k.n, sizeof k_want / sizeof k_want[0]);
    for (size_t i = 0; i < sizeof k_want / sizeof k_want[0]; i++) {
        size_t j = 0;
        while (j < k.n && strcmp(k.e[j].key->name, k_want[i].name) != 0) {
            j++;
        }
        if (j == k.n) {
            fail_msg("no family declares '%s'", k_want[i].name);
        }
        assert_int_equal(k.e[j].v, k_want[i].dflt);
    }
    assert_null(ur_family_list(&k, &ur_key_engram_layers, &n));
    assert_int_equal(n, 0);
    assert_int_equal(ur_family_int(&k, &ur_key_first_num_dense_layers), 0);
    ur_family_keys_dispose(&k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family__table_rows),
        cmocka_unit_test(test_family__pipeline_first_when_unrolled),
        cmocka_unit_test(test_family__keys_declared_by_their_families),
    };
    return cmocka_run_group_tests_name("family", tests, NULL, NULL);
}
