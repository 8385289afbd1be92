/*
 * smoke.c: the C ABI end to end, once each: create, acquire (try / blocking / async), release,
 * stats, close, registry, origin key, version. Also the program `make c-test` builds against
 * an installed copy (pkg-config) to check the install.
 */
#include "hgtest.h"

static int cb_calls;
static hg_status cb_status;
static hg_permit *cb_permit;

static void on_settle(hg_status status, hg_permit *permit, void *user_data) {
    CHECK(user_data == (void *)&cb_calls);
    cb_calls++;
    cb_status = status;
    cb_permit = permit;
}

static void smoke_bulkhead(void) {
    hg_bulkhead *bh = hg_test_new(2, 4, 30000);
    hg_permit *a = NULL, *b = NULL, *c = NULL;

    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &a), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_acquire_timeout(bh, 1, HG_TIMEOUT_DEFAULT, &b), HG_STATUS_OK);
    CHECK_EQ_U64(hg_permit_weight(a), 1);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &c), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK(c == NULL);

    /* Full: an async acquire queues; a release grants it through the callback. */
    hg_ticket t = 0;
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, HG_TIMEOUT_DEFAULT, on_settle, &cb_calls, &c, &t),
                 HG_STATUS_QUEUED);
    CHECK(cb_calls == 0);
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.queued, 1);
    CHECK_STATUS(hg_permit_release(a), HG_STATUS_OK);
    CHECK(cb_calls == 1);
    CHECK_STATUS(cb_status, HG_STATUS_OK);
    CHECK(cb_permit != NULL);
    CHECK_EQ_U64(hg_permit_weight(cb_permit), 1);

    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.active, 2);
    CHECK_EQ_U64(s.queued, 0);
    CHECK_EQ_U64(s.admitted_total, 3);
    CHECK_EQ_U64(s.rejected[HG_REASON_CONCURRENCY_LIMIT], 1);
    CHECK_EQ_U64(s.queue_wait_count, 1);
    CHECK_I2(bh);

    hg_permit_free(a);
    CHECK_STATUS(hg_permit_release_outcome(b, HG_OUTCOME_FAILURE), HG_STATUS_OK);
    hg_permit_free(b);
    CHECK_STATUS(hg_permit_release(cb_permit), HG_STATUS_OK);
    hg_permit_free(cb_permit);

    hg_drain_result d;
    CHECK_STATUS(hg_bulkhead_drain(bh, 0, &d), HG_STATUS_OK);
    CHECK(d.drained);
    CHECK_STATUS(hg_bulkhead_close(bh), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &c), HG_STATUS_SHUTDOWN);
    s = hg_test_stats(bh);
    CHECK_EQ_I64(s.available, 2);
    CHECK_EQ_U64(s.leaked_total, 0);
    hg_bulkhead_free(bh);
}

static void smoke_registry_and_origin(void) {
    hg_config d;
    hg_registry *reg = NULL;
    CHECK_STATUS(hg_config_default(&d), HG_STATUS_OK);
    d.max_concurrent = 1;
    d.max_queue = 0;
    CHECK_STATUS(hg_registry_new(&d, NULL, 0, 16, &reg), HG_STATUS_OK);

    char key[128];
    size_t len = 0;
    const char *url = "HTTPS://Api.Example.com/v1/chat?x=1";
    CHECK_STATUS(hg_origin_key(url, strlen(url), key, sizeof key, &len), HG_STATUS_OK);
    CHECK(strcmp(key, "https://api.example.com:443") == 0);
    CHECK_EQ_U64(len, strlen("https://api.example.com:443"));

    hg_permit *p = NULL, *q = NULL;
    CHECK_STATUS(hg_registry_try_acquire(reg, key, len, 1, &p), HG_STATUS_OK);
    CHECK_STATUS(hg_registry_try_acquire(reg, key, len, 1, &q), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK_STATUS(hg_registry_try_acquire(reg, "other", 5, 1, &q), HG_STATUS_OK);
    hg_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    CHECK_STATUS(hg_registry_stats(reg, key, len, &s), HG_STATUS_OK);
    CHECK_EQ_U64(s.active, 1);
    CHECK_EQ_U64(s.rejected[HG_REASON_CONCURRENCY_LIMIT], 1);
    hg_permit_free(p); /* releases (counted as leaked) */
    CHECK_STATUS(hg_permit_release(q), HG_STATUS_OK);
    hg_permit_free(q);
    CHECK_STATUS(hg_registry_stats(reg, key, len, &s), HG_STATUS_OK);
    CHECK_EQ_U64(s.leaked_total, 1);
    CHECK_EQ_I64(s.available, 1);
    hg_registry_free(reg);
}

static void smoke_version_and_names(void) {
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", HG_VERSION_MAJOR, HG_VERSION_MINOR, HG_VERSION_PATCH);
    CHECK(strcmp(hg_version(), want) == 0);
    CHECK(strcmp(hg_reason_name(HG_REASON_QUEUE_LIMIT), "queue_limit") == 0);
    CHECK(strcmp(hg_status_message(HG_STATUS_OK), "ok") == 0);
}

int main(int argc, char **argv) {
    (void)argc;
    RUN(smoke_bulkhead);
    RUN(smoke_registry_and_origin);
    RUN(smoke_version_and_names);
    return hg_test_summary(argv[0]);
}
