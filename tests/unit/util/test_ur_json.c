/* ur_json: cJSON through ur_malloc; out of memory is UR_ENOMEM, never "invalid JSON". */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/buf.h"
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

/* Collects "key=value;" for each member. */
static int collect(void *ctx, const char *key, const char *value, size_t len, ur_err *err)
{
    ur_buf *b = ctx;
    int rc = ur_buf_printf(b, err, "%s=%.*s;", key, (int)len, value);
    return rc;
}

static int walk(const char *doc, ur_buf *b, ur_err *err)
{
    ur_buf_reset(b);
    int rc = ur_json_each_member(doc, strlen(doc), collect, b, err);
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(b, 0, err);
    }
    return rc;
}

/* The member walk hands over each value's text in order, keys unescaped, and refuses an
 * object whose own syntax is wrong rather than stopping early with what it has. */
/* Trees parsed in a scratch region: the same trees; nodes that do not fit come from the heap
 * and are freed by cJSON_Delete as usual (a leak is what the sanitizers would report); after
 * a reset the region is reused; with allocation failures armed the region stands aside. */
static void test_ur_json__scratch(void **state)
{
    ur_json_scratch s;
    ur_buf big;
    ur_err err;
    cJSON *a = NULL, *b = NULL;
    (void)state;
    ur_buf_init(&big, 0);
    ur_json_scratch_init(&s, 1024);
    assert_non_null(s.base);
    ur_json_scratch_use(&s);
    for (int round = 0; round < 3; round++) {
        assert_int_equal(ur_json_parse(&a, k_doc, strlen(k_doc), &err), UR_OK);
        assert_true(s.used > 0);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "use_zarr3")));
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(a, "list")), 5);
        cJSON_Delete(a);
        ur_json_scratch_reset(&s);
        assert_int_equal(s.used, 0);
    }
    /* a document larger than the region: the rest from the heap */
    assert_int_equal(ur_buf_append_str(&big, "[", &err), UR_OK);
    for (int i = 0; i < 2000; i++) {
        assert_int_equal(ur_buf_printf(&big, &err, "%s{\"k\": %d}", i ? ", " : "", i), UR_OK);
    }
    assert_int_equal(ur_buf_append_str(&big, "]", &err), UR_OK);
    assert_int_equal(ur_json_parse(&b, (const char *)big.data, big.len, &err), UR_OK);
    assert_int_equal(cJSON_GetArraySize(b), 2000);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(b, 1999), "k")->valueint,
                     1999);
    cJSON_Delete(b);
    ur_json_scratch_reset(&s);
    ur_json_scratch_use(NULL);
    ur_json_scratch_dispose(&s);
    assert_null(s.base);
    /* armed failures: no region, and a failed allocation is still UR_ENOMEM */
    ur_alloc_fail_after(0);
    ur_json_scratch_init(&s, 1024);
    ur_json_scratch_use(&s);
    assert_int_equal(ur_json_parse(&a, k_doc, strlen(k_doc), &err), UR_ENOMEM);
    ur_alloc_fail_after(-1);
    assert_null(s.base);
    ur_json_scratch_use(NULL);
    ur_json_scratch_dispose(&s);
    ur_buf_dispose(&big);
}

static void test_ur_json__each_member(void **state)
{
    static const char *const bad[] = {
        "",
        "[1]",
        "{",
        "{\"a\"}",
        "{\"a\":}",
        "{\"a\":1,}",
        "{\"a\":1 \"b\":2}",
        "{\"a\":{}\"b\":2}",
        "{\"a\":1} x",
        "{\"a\":\"x}",
        "{a:1}",
        "{\"a\":[1,{]}",
    };
    ur_buf b;
    ur_err err;
    (void)state;
    ur_buf_init(&b, 0);
    assert_int_equal(walk(" { } ", &b, &err), UR_OK);
    assert_string_equal((const char *)b.data, "");
    assert_int_equal(
        walk("{\"a\": 1, \"b\\u0041\\\"\" :{\"c\": [1, \"}]\"]} , \"d\":\"x\\\"y\"}", &b, &err),
        UR_OK);
    assert_string_equal((const char *)b.data, "a=1;bA\"={\"c\": [1, \"}]\"]};d=\"x\\\"y\";");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = walk(bad[i], &b, &err);
        if (rc == UR_OK) {
            fail_msg("accepted %s", bad[i]);
        }
        assert_int_equal(rc, UR_ECORRUPT);
    }
    ur_buf_dispose(&b);
}

/* Collects "index=value;" for each element. */
static int collect_element(void *ctx, size_t i, const char *value, size_t len, ur_err *err)
{
    return ur_buf_printf(ctx, err, "%zu=%.*s;", i, (int)len, value);
}

static int walk_array(const char *doc, ur_buf *b, ur_err *err)
{
    ur_buf_reset(b);
    int rc = ur_json_each_element(doc, strlen(doc), collect_element, b, err);
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(b, 0, err);
    }
    return rc;
}

/* The element walk, as the member walk: each element's text in order, and an array whose
 * own syntax is wrong refused. */
static void test_ur_json__each_element(void **state)
{
    static const char *const bad[] = {
        "", "{}", "[", "[1,]", "[1 2]", "[{}{}]", "[1] x", "[\"x]", "[[1,{]]", ",",
    };
    ur_buf b;
    ur_err err;
    (void)state;
    ur_buf_init(&b, 0);
    assert_int_equal(walk_array(" [ ] ", &b, &err), UR_OK);
    assert_string_equal((const char *)b.data, "");
    assert_int_equal(walk_array("[1, {\"a\": [\"]\"]} ,\"x\\\"y\", null]", &b, &err), UR_OK);
    assert_string_equal((const char *)b.data, "0=1;1={\"a\": [\"]\"]};2=\"x\\\"y\";3=null;");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = walk_array(bad[i], &b, &err);
        if (rc == UR_OK) {
            fail_msg("accepted %s", bad[i]);
        }
        assert_int_equal(rc, UR_ECORRUPT);
    }
    ur_buf_dispose(&b);
}

/* A string unroll writes: UTF-8 as it is, the quote, the backslash and control bytes escaped;
 * cJSON reads the original back. */
static void test_ur_json__put_string(void **state)
{
    static const char in[] = "a\"b\\c\n\x01 caf\xc3\xa9";
    ur_buf b;
    ur_err err;
    cJSON *j = NULL;
    (void)state;
    ur_buf_init(&b, 0);
    assert_int_equal(ur_json_put_string(&b, in, &err), UR_OK);
    assert_int_equal(ur_buf_append(&b, "", 1, &err), UR_OK);
    assert_string_equal((const char *)b.data, "\"a\\\"b\\\\c\\u000a\\u0001 caf\xc3\xa9\"");
    assert_int_equal(ur_json_parse(&j, (const char *)b.data, b.len - 1, &err), UR_OK);
    assert_true(cJSON_IsString(j));
    assert_string_equal(j->valuestring, in);
    cJSON_Delete(j);
    ur_buf_dispose(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_json__parses_and_rejects),
        cmocka_unit_test(test_ur_json__oom_is_enomem),
        cmocka_unit_test(test_ur_json__scratch),
        cmocka_unit_test(test_ur_json__each_member),
        cmocka_unit_test(test_ur_json__each_element),
        cmocka_unit_test(test_ur_json__put_string),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
