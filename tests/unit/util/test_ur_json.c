/* ur_json: cJSON through ur_malloc; out of memory is UR_ENOMEM, never "invalid JSON". */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/json.h"

#include <cjson/cJSON.h>
#include <string.h>

static const char k_doc[] = "{\"tree_metadata\": {\"('params', 'w')\": {\"key_metadata\": "
                            "[{\"key\": \"params\", \"key_type\": 2}], \"value_metadata\": "
                            "{\"value_type\": \"jax.Array\", \"skip_deserialize\": false}}}, "
                            "\"use_zarr3\": true, \"list\": [1, 2.5, \"x\", null, true]}  \n";

static void test_ur_json__parses_and_rejects(void **state)
{
    cJSON *root = NULL;
    ur_err err;
    (void)state;
    assert_int_equal(ur_json_parse(&root, k_doc, strlen(k_doc), &err), UR_OK);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(root, "use_zarr3")));
    cJSON_Delete(root);
    assert_int_equal(ur_json_parse(&root, "{\"a\": [1, 2}", 12, &err), UR_ECORRUPT);
    assert_non_null(strstr(err.msg, "invalid JSON near byte"));
    assert_int_equal(ur_json_parse(&root, "{} x", 4, &err), UR_ECORRUPT);
    assert_non_null(strstr(err.msg, "trailing bytes after JSON at 3"));
}

/* Fail allocation n for n = 0, 1, ... until the parse succeeds: each failure must be
 * UR_ENOMEM "out of memory" (cJSON returns NULL for it as for a syntax error). */
static void test_ur_json__oom_is_enomem(void **state)
{
    long n;
    (void)state;
    for (n = 0;; n++) {
        cJSON *root = NULL;
        ur_err err;
        int rc;
        ur_alloc_fail_after(n);
        rc = ur_json_parse(&root, k_doc, strlen(k_doc), &err);
        ur_alloc_fail_after(-1);
        if (rc == UR_OK) {
            cJSON_Delete(root);
            break;
        }
        assert_int_equal(rc, UR_ENOMEM);
        assert_string_equal(err.msg, "out of memory");
        assert_true(n < 10000);
    }
    assert_true(n > 10); /* every node was allocated through ur_malloc */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_json__parses_and_rejects),
        cmocka_unit_test(test_ur_json__oom_is_enomem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
