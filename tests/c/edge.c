/*
 * edge.c: load shedding and the metric set through the C ABI (issue 18; docs/design.md
 * §4.11, §8.3), from real C, plain, under ASan + UBSan and under valgrind (tests/c/run.sh).
 *
 *   load_shedding_sheds_non_critical_classes  hg_config's shed_* fields, hg_bulkhead_report_load:
 *                             a non-critical class is refused HG_STATUS_SHED with bound
 *                             HG_BOUND_OVERLOAD while the CPU signal is over its threshold, a
 *                             critical one passes; the hg_stats load_* fields
 *   load_config_is_checked    bad thresholds name their field; reserved3; a NaN lag report is
 *                             ignored
 *   c35_queue_wait_histogram  C35 steps 1-3 and 5 on a virtual clock: hg_stats'
 *                             queue_wait_histogram (the hullguard_queue_wait_seconds buckets)
 *                             counts W1's 90 ms wait once; the timed-out W2 and the unqueued W3
 *                             add nothing; `queued` follows the live waiters
 */
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>

#include "hgtest.h"

#define MS 1000000ull

static _Atomic uint64_t now_ns;

static uint64_t vclock(void *user_data) {
    (void)user_data;
    return atomic_load(&now_ns);
}

static hg_stats stats(const hg_bulkhead *bh) {
    hg_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = (uint32_t)sizeof s;
    if (hg_bulkhead_stats(bh, &s) != HG_STATUS_OK) abort();
    return s;
}

static hg_request request_of(uint32_t class_index) {
    hg_request r;
    if (hg_request_default(&r) != HG_STATUS_OK) abort();
    r.class_index = class_index;
    r.timeout_ms = 0;
    return r;
}

static void load_shedding_sheds_non_critical_classes(void) {
    hg_config c;
    CHECK_STATUS(hg_config_default(&c), HG_STATUS_OK);
    CHECK_EQ_U64(c.critical_priority, 1);
    c.max_concurrent = 2;
    c.shed_cpu_threshold = 0.8;
    c.shed_lag_threshold_ms = 50;
    c.critical_priority = 10;
    hg_class k[2];
    CHECK_STATUS(hg_class_default(&k[0]), HG_STATUS_OK);
    k[1] = k[0];
    k[0].priority = 10; /* 0: critical; 1: best effort */
    hg_class_table t;
    memset(&t, 0, sizeof t);
    t.struct_size = (uint32_t)sizeof t;
    t.classes = k;
    t.classes_len = 2;
    hg_bulkhead *bh = NULL;
    CHECK_STATUS(hg_bulkhead_new_with_classes(&c, &t, NULL, NULL, &bh), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_report_load(NULL, 1.0, 1.0), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_report_load(bh, NAN, 0.95), HG_STATUS_OK); /* CPU over */
    hg_rejection d;
    memset(&d, 0, sizeof d);
    d.struct_size = (uint32_t)sizeof d;
    hg_request batch = request_of(1);
    batch.detail = &d;
    hg_permit *p = NULL, *q = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &batch, &p), HG_STATUS_SHED);
    CHECK(p == NULL);
    CHECK_EQ_U64(d.reason, HG_REASON_SHED);
    CHECK_EQ_U64(d.bound, HG_BOUND_OVERLOAD);
    CHECK(d.class_present);
    CHECK_EQ_U64(d.class_index, 1);
    CHECK(strcmp(hg_bound_name(HG_BOUND_OVERLOAD), "overload") == 0);
    hg_request critical = request_of(0);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &critical, &p), HG_STATUS_OK);
    hg_stats s = stats(bh);
    CHECK(s.load_present);
    CHECK(s.load_overloaded);
    CHECK_EQ_U64(s.load_cpu_permille, 950);
    CHECK_EQ_U64(s.load_event_loop_lag_ns, 0);
    CHECK_EQ_U64(s.load_shed_total, 1);
    CHECK_EQ_U64(s.rejected[HG_REASON_SHED], 1);
    /* The CPU falls, the lag rises over its threshold: still shed; then both fall. */
    CHECK_STATUS(hg_bulkhead_report_load(bh, 120.0, 0.2), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &batch, &q), HG_STATUS_SHED);
    CHECK_STATUS(hg_bulkhead_report_load(bh, 2.0, -1.0), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &batch, &q), HG_STATUS_OK);
    s = stats(bh);
    CHECK(!s.load_overloaded);
    CHECK_EQ_U64(s.load_event_loop_lag_ns, 2 * MS);
    CHECK_EQ_U64(s.load_cpu_permille, 200);
    CHECK_EQ_U64(s.load_shed_total, 2);
    hg_permit_free(p);
    hg_permit_free(q);
    hg_bulkhead_free(bh);
}

static void load_config_is_checked(void) {
    hg_config c;
    CHECK_STATUS(hg_config_default(&c), HG_STATUS_OK);
    const char *bad = NULL;
    c.shed_cpu_threshold = -0.5;
    CHECK_STATUS(hg_config_check(&c, &bad), HG_STATUS_INVALID_ARGUMENT);
    CHECK(bad && strcmp(bad, "shed_cpu_threshold") == 0);
    c.shed_cpu_threshold = 0.5;
    c.critical_priority = 256;
    CHECK_STATUS(hg_config_check(&c, &bad), HG_STATUS_INVALID_ARGUMENT);
    CHECK(bad && strcmp(bad, "critical_priority") == 0);
    c.critical_priority = 1;
    c.reserved3[2] = 1;
    CHECK_STATUS(hg_config_check(&c, &bad), HG_STATUS_INVALID_ARGUMENT);
    CHECK(bad && strcmp(bad, "reserved3") == 0);
    c.reserved3[2] = 0;
    CHECK_STATUS(hg_config_check(&c, &bad), HG_STATUS_OK);
    /* Without classes: a one-class table, non-critical (priority 0). */
    hg_bulkhead *bh = NULL;
    CHECK_STATUS(hg_bulkhead_new(&c, &bh), HG_STATUS_OK);
    hg_permit *p = NULL;
    CHECK_STATUS(hg_bulkhead_report_load(bh, 10.0, 0.9), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_SHED);
    /* The raw units API is shed too (review: it took class 0 without asking). */
    CHECK_STATUS(hg_bulkhead_try_acquire_units(bh, 1), HG_STATUS_SHED);
    /* NaN and negative readings leave a signal as it is. */
    CHECK_STATUS(hg_bulkhead_report_load(bh, NAN, -1.0), HG_STATUS_OK);
    hg_stats s = stats(bh);
    CHECK_EQ_U64(s.load_event_loop_lag_ns, 10 * MS);
    CHECK_EQ_U64(s.load_cpu_permille, 900);
    CHECK_EQ_U64(s.load_shed_total, 2);
    hg_bulkhead_free(bh);
}

static void c35_queue_wait_histogram(void) {
    atomic_store(&now_ns, 0);
    hg_config c;
    CHECK_STATUS(hg_config_default(&c), HG_STATUS_OK);
    c.max_concurrent = 1;
    c.max_queue = 10;
    hg_bulkhead *bh = NULL;
    CHECK_STATUS(hg_bulkhead_new_with_clock(&c, vclock, NULL, &bh), HG_STATUS_OK);
    hg_permit *h = NULL, *w1p = NULL, *w3 = NULL;
    hg_ticket w1 = 0, w2 = 0;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &h), HG_STATUS_OK);
    atomic_store(&now_ns, 10 * MS);
    CHECK_STATUS(hg_bulkhead_enqueue(bh, 1, &w1p, &w1), HG_STATUS_QUEUED);
    CHECK_EQ_U64(stats(bh).queued, 1);
    atomic_store(&now_ns, 20 * MS);
    CHECK_STATUS(hg_bulkhead_enqueue(bh, 1, &w1p, &w2), HG_STATUS_QUEUED);
    CHECK_EQ_U64(stats(bh).queued, 2);
    atomic_store(&now_ns, 70 * MS);
    CHECK_STATUS(hg_ticket_cancel_reason(bh, w2, HG_REASON_TIMEOUT), HG_STATUS_OK);
    CHECK_EQ_U64(stats(bh).queued, 1);
    atomic_store(&now_ns, 100 * MS);
    hg_permit_free(h);
    CHECK_EQ_U64(stats(bh).queued, 0);
    CHECK_STATUS(hg_ticket_poll(bh, w1, &w1p), HG_STATUS_OK);
    hg_stats s = stats(bh);
    CHECK_EQ_U64(s.queue_wait_count, 1);
    CHECK_EQ_U64(s.queue_wait_sum_ns, 90 * MS);
    /* 90 ms = 90 000 000 ns lies in [2^26, 2^27): bucket 17 (waits below 2^(10+17) ns). */
    uint64_t total = 0;
    for (size_t i = 0; i < 28; i++) {
        total += s.queue_wait_histogram[i];
        CHECK_EQ_U64(s.queue_wait_histogram[i], i == 17 ? 1 : 0);
    }
    CHECK_EQ_U64(total, s.queue_wait_count);
    atomic_store(&now_ns, 300 * MS);
    hg_permit_free(w1p);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &w3), HG_STATUS_OK);
    hg_permit_free(w3);
    s = stats(bh);
    CHECK_EQ_U64(s.queue_wait_count, 1);
    CHECK_EQ_U64(s.queue_wait_histogram[17], 1);
    hg_bulkhead_free(bh);
}

int main(int argc, char **argv) {
    (void)argc;
    RUN(load_shedding_sheds_non_critical_classes);
    RUN(load_config_is_checked);
    RUN(c35_queue_wait_histogram);
    return hg_test_summary(argv[0]);
}
