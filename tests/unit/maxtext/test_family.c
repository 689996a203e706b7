/* The table of layout families (src/maxtext/family.c): which descriptor each config gets. */
#include "ur_test.h"

#include "maxtext/family.h"

/* the descriptors (family.c names them only in its table) */
extern const ur_plan_family ur_family_plain, ur_family_deepseek, ur_family_gemma3,
    ur_family_gemma4, ur_family_deepseek4, ur_family_cycle, ur_family_qwen3_next;

static ur_settings settings(const char *block, int64_t cycle)
{
    ur_settings s;
    memset(&s, 0, sizeof s);
    s.decoder_block = block;
    s.inhomogeneous_layer_cycle_interval = cycle;
    s.num_decoder_layers = 12;
    s.scan_layers = 1;
    s.force_unroll = 1;
    s.ici_pipeline_parallelism = 1;
    s.dcn_pipeline_parallelism = 1;
    return s;
}

static void test_family__table_rows(void **state)
{
    ur_settings s;
    (void)state;
    s = settings("llama2", 1);
    assert_ptr_equal(ur_family_find(&s), &ur_family_plain);
    s = settings("deepseek", 1);
    assert_ptr_equal(ur_family_find(&s), &ur_family_deepseek);
    s = settings("gemma3", 1);
    assert_ptr_equal(ur_family_find(&s), &ur_family_gemma3);
    s = settings("gemma4", 1);
    assert_ptr_equal(ur_family_find(&s), &ur_family_gemma4);
    s = settings("deepseek4", 1);
    assert_ptr_equal(ur_family_find(&s), &ur_family_deepseek4);
    s = settings("llama4", 4);
    assert_ptr_equal(ur_family_find(&s), &ur_family_cycle);
    /* qwen3-next is nested only with a cycle; without one it is plain */
    s = settings("qwen3_next", 4);
    assert_ptr_equal(ur_family_find(&s), &ur_family_qwen3_next);
    s = settings("qwen3_next", 1);
    assert_ptr_equal(ur_family_find(&s), &ur_family_plain);
}

static void test_family__pipeline_first_when_unrolled(void **state)
{
    ur_settings s = settings("llama2", 1);
    (void)state;
    s.ici_pipeline_parallelism = 2;
    assert_ptr_equal(ur_family_find(&s), &ur_family_pipeline);
    assert_ptr_equal(ur_family_find_block(&s), &ur_family_plain);
    /* not unrolled: the stacks are copied, the decoder_block family applies */
    s.force_unroll = 0;
    assert_ptr_equal(ur_family_find(&s), &ur_family_plain);
    /* only the plain family and DeepSeek are pipelined */
    s = settings("gemma3", 1);
    assert_int_equal(ur_family_find_block(&s)->pipelinable, 0);
    s = settings("llama2", 1);
    assert_int_equal(ur_family_find_block(&s)->pipelinable, 1);
    s = settings("deepseek", 1);
    assert_int_equal(ur_family_find_block(&s)->pipelinable, 1);
    s.ici_pipeline_parallelism = 2;
    assert_ptr_equal(ur_family_find(&s), &ur_family_pipeline);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family__table_rows),
        cmocka_unit_test(test_family__pipeline_first_when_unrolled),
    };
    return cmocka_run_group_tests_name("family", tests, NULL, NULL);
}
