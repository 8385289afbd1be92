/*
 * deadline.c: deadlines and queue-delay dispatch through the C ABI (issue 17; docs/design.md
 * §5.9, §4.10), from real C, plain, under ASan + UBSan and under valgrind (tests/c/run.sh).
 *
 *   c36_passed_deadline_is_refused_timeout  C36 step 3 and the exact edge: HG_STATUS_TIMEOUT at
 *                             once, no ticket, the detail's bound HG_BOUND_DEADLINE; never
 *                             INVALID_ARGUMENT; one ns left with the permit free is granted
 *   c36_deadline_bounds_the_queue_wait  C36 steps 1-2, 5 and 7: hg_bulkhead_queue_wait_ms says
 *                             what to arm (min of the timeout and the deadline less
 *                             min_service_time_ms), retries under one deadline end with it
 *   c36_no_deadline_spellings C36 step 6: has_deadline 0, HG_DEADLINE_NONE, a huge finite one
 *   request_and_config_structs  hg_request's deadline fields (a bad has_deadline, reserved, an
 *                             older struct without them = no deadline), hg_config's new fields
 *                             (checks name the bad field), hg_limits' queue-delay fields
 *   codel_and_lifo            queue-delay shedding (HG_STATUS_SHED through a polled ticket) and
 *                             adaptive LIFO on a bulkhead built with queue_delay_target_ms,
 *                             switched by hg_bulkhead_apply_limits
 *   call_timeout_within       hg_bulkhead_call_timeout_within_ms caps call_timeout_ms
 *
 * Time is virtual (a host clock the test owns); nothing sleeps.
 */
#include <stdatomic.h>
#include <stddef.h>

#include "hgtest.h"

#define MS 1000000ull
#define S (1000 * MS)

static _Atomic uint64_t now_ns;

static uint64_t vclock(void *user_data) {
    (void)user_data;
    return atomic_load(&now_ns);
}

/* Limit 1, queue 2, queue timeout 60 s, min_service_time_ms, on the virtual clock at 1000 s. */
static hg_bulkhead *c36(uint64_t min_service_ms) {
    atomic_store(&now_ns, 1000 * S);
    hg_config c;
    if (hg_config_default(&c) != HG_STATUS_OK) abort();
    c.max_concurrent = 1;
    c.max_queue = 2;
    c.queue_timeout_ms = 60000;
    c.min_service_time_ms = min_service_ms;
    hg_bulkhead *bh = NULL;
    if (hg_bulkhead_new_with_clock(&c, vclock, NULL, &bh) != HG_STATUS_OK) abort();
    return bh;
}

static hg_request with_deadline(uint64_t deadline_ns) {
    hg_request r;
    if (hg_request_default(&r) != HG_STATUS_OK) abort();
    r.has_deadline = 1;
    r.deadline_ns = deadline_ns;
    return r;
}

static hg_stats stats(const hg_bulkhead *bh) {
    hg_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = (uint32_t)sizeof s;
    if (hg_bulkhead_stats(bh, &s) != HG_STATUS_OK) abort();
    return s;
}

static uint64_t wait_ms(const hg_bulkhead *bh, const hg_request *r) {
    uint64_t ms = 12345;
    CHECK_STATUS(hg_bulkhead_queue_wait_ms(bh, r, &ms), HG_STATUS_OK);
    return ms;
}

static void c36_passed_deadline_is_refused_timeout(void) {
    hg_bulkhead *bh = c36(0);
    hg_permit *p = NULL;
    hg_ticket t = 0;
    hg_rejection d;
    memset(&d, 0, sizeof d);
    d.struct_size = (uint32_t)sizeof d;
    /* Passed (5 s ago), exactly now, and at 0: HG_STATUS_TIMEOUT at once, with the permit free. */
    uint64_t deadlines[] = {995 * S, 1000 * S, 0};
    for (size_t i = 0; i < 3; i++) {
        hg_request r = with_deadline(deadlines[i]);
        r.detail = &d;
        CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_TIMEOUT);
        CHECK_STATUS(hg_bulkhead_enqueue_request(bh, &r, &p, &t), HG_STATUS_TIMEOUT);
        CHECK(p == NULL);
        CHECK_EQ_U64(d.bound, HG_BOUND_DEADLINE);
    }
    hg_stats s = stats(bh);
    CHECK_EQ_U64(s.rejected[HG_REASON_TIMEOUT], 6);
    CHECK_EQ_U64(s.queued, 0);
    CHECK_EQ_U64(s.active, 0);
    /* One ns left, the permit free: granted. */
    hg_request r = with_deadline(1000 * S + 1);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_OK);
    hg_permit_free(p);
    hg_bulkhead_free(bh);
}

static void c36_deadline_bounds_the_queue_wait(void) {
    hg_bulkhead *bh = c36(0);
    hg_permit *h = NULL, *p = NULL;
    hg_ticket t1 = 0, t2 = 0;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &h), HG_STATUS_OK);
    /* Steps 1-2: a 5 s deadline; with the 60 s timeout, and with none: 5 s to arm. */
    hg_request w1 = with_deadline(1005 * S);
    hg_request w2 = with_deadline(1005 * S);
    w2.timeout_ms = HG_TIMEOUT_INFINITE;
    CHECK_EQ_U64(wait_ms(bh, &w1), 5000);
    CHECK_EQ_U64(wait_ms(bh, &w2), 5000);
    CHECK_STATUS(hg_bulkhead_enqueue_request(bh, &w1, &p, &t1), HG_STATUS_QUEUED);
    CHECK_STATUS(hg_bulkhead_enqueue_request(bh, &w2, &p, &t2), HG_STATUS_QUEUED);
    /* The host's timers at 5 s. */
    atomic_store(&now_ns, 1005 * S);
    CHECK_STATUS(hg_ticket_cancel_reason(bh, t1, HG_REASON_TIMEOUT), HG_STATUS_OK);
    CHECK_STATUS(hg_ticket_cancel_reason(bh, t2, HG_REASON_TIMEOUT), HG_STATUS_OK);
    CHECK_EQ_U64(stats(bh).queued, 0);
    /* Step 5: retries with 3 s each under a deadline at 1015 s: 3, 3, 3, then the 1 s left. */
    uint64_t want[] = {3000, 3000, 3000, 1000};
    for (size_t i = 0; i < 4; i++) {
        hg_request a = with_deadline(1015 * S);
        a.timeout_ms = 3000;
        CHECK_EQ_U64(wait_ms(bh, &a), want[i]);
        CHECK_STATUS(hg_bulkhead_enqueue_request(bh, &a, &p, &t1), HG_STATUS_QUEUED);
        atomic_fetch_add(&now_ns, want[i] * MS);
        CHECK_STATUS(hg_ticket_cancel_reason(bh, t1, HG_REASON_TIMEOUT), HG_STATUS_OK);
    }
    hg_request late = with_deadline(1015 * S);
    late.timeout_ms = 3000;
    CHECK_STATUS(hg_bulkhead_enqueue_request(bh, &late, &p, &t1), HG_STATUS_TIMEOUT);
    hg_permit_free(h);
    hg_bulkhead_free(bh);

    /* Step 7: min_service_time_ms 2000: a 5 s deadline waits 3 s; 2 s left: refused now. */
    bh = c36(2000);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &h), HG_STATUS_OK);
    hg_request w4 = with_deadline(1005 * S);
    CHECK_EQ_U64(wait_ms(bh, &w4), 3000);
    CHECK_STATUS(hg_bulkhead_enqueue_request(bh, &w4, &p, &t1), HG_STATUS_QUEUED);
    hg_request close = with_deadline(1002 * S);
    CHECK_EQ_U64(wait_ms(bh, &close), 0);
    hg_request sub_ms = with_deadline(1002 * S + 500000); /* 0.5 ms of waiting: rounded up */
    CHECK_EQ_U64(wait_ms(bh, &sub_ms), 1);
    CHECK_STATUS(hg_bulkhead_enqueue_request(bh, &close, &p, &t2), HG_STATUS_TIMEOUT);
    CHECK_EQ_U64(stats(bh).queued, 1);
    CHECK_STATUS(hg_ticket_cancel(bh, t1), HG_STATUS_OK);
    hg_permit_free(h);
    hg_bulkhead_free(bh);
}

static void c36_no_deadline_spellings(void) {
    hg_bulkhead *bh = c36(0);
    hg_permit *h = NULL, *p = NULL;
    hg_ticket t = 0;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &h), HG_STATUS_OK);
    hg_request none;
    hg_request_default(&none);
    hg_request max = with_deadline(HG_DEADLINE_NONE);
    hg_request huge = with_deadline(1000 * S + (1ull << 62));
    CHECK_EQ_U64(wait_ms(bh, &none), 60000);
    CHECK_EQ_U64(wait_ms(bh, &max), 60000);
    CHECK_EQ_U64(wait_ms(bh, &huge), 60000);
    CHECK_STATUS(hg_bulkhead_enqueue_request(bh, &max, &p, &t), HG_STATUS_QUEUED);
    atomic_fetch_add(&now_ns, 30 * S);
    CHECK_STATUS(hg_permit_release(h), HG_STATUS_OK);
    CHECK_STATUS(hg_ticket_poll(bh, t, &p), HG_STATUS_OK);
    hg_permit_free(p);
    hg_permit_free(h);
    hg_bulkhead_free(bh);
}

static void request_and_config_structs(void) {
    hg_bulkhead *bh = c36(0);
    hg_permit *p = NULL;
    /* has_deadline other than 0/1, a reserved field set: INVALID_ARGUMENT, nothing counted. */
    hg_request r = with_deadline(0);
    r.has_deadline = 2;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_INVALID_ARGUMENT);
    r.has_deadline = 1;
    r.reserved = 1;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_U64(stats(bh).rejected[HG_REASON_TIMEOUT], 0);
    /* An older struct (up to `detail`) with a passed deadline in its unread tail: no deadline. */
    r = with_deadline(0);
    r.struct_size = (uint32_t)offsetof(hg_request, deadline_ns);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_OK);
    hg_permit_free(p);
    /* A size ending inside deadline_ns is refused. */
    r.struct_size = (uint32_t)offsetof(hg_request, deadline_ns) + 4;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_INVALID_ARGUMENT);
    hg_bulkhead_free(bh);

    /* hg_config: LIFO without a target, a queue-delay target without a clock-less check (the
     * default clock is the host's, so it is accepted), reserved2. */
    hg_config c;
    hg_config_default(&c);
    const char *bad = NULL;
    c.adaptive_lifo = true;
    CHECK_STATUS(hg_config_check(&c, &bad), HG_STATUS_INVALID_ARGUMENT);
    CHECK(bad != NULL && strcmp(bad, "adaptive_lifo") == 0);
    c.queue_delay_target_ms = 5;
    CHECK_STATUS(hg_config_check(&c, &bad), HG_STATUS_OK);
    c.reserved2[3] = 1;
    CHECK_STATUS(hg_config_check(&c, &bad), HG_STATUS_INVALID_ARGUMENT);
    CHECK(bad != NULL && strcmp(bad, "reserved2") == 0);
    c.reserved2[3] = 0;
    /* A size ending inside the deadline group (no header ever did): refused, naming it. */
    c.struct_size = (uint32_t)offsetof(hg_config, queue_delay_target_ms);
    CHECK_STATUS(hg_config_check(&c, &bad), HG_STATUS_INVALID_ARGUMENT);
    CHECK(bad != NULL && strcmp(bad, "struct_size") == 0);
    c.struct_size = (uint32_t)offsetof(hg_config, min_service_time_ms); /* the older header */
    CHECK_STATUS(hg_config_check(&c, &bad), HG_STATUS_OK);
    c.struct_size = (uint32_t)sizeof c;
    c.min_service_time_ms = HG_TIMEOUT_INFINITE;
    CHECK_STATUS(hg_config_check(&c, &bad), HG_STATUS_INVALID_ARGUMENT);
    CHECK(bad != NULL && strcmp(bad, "min_service_time_ms") == 0);

    /* hg_limits' queue-delay fields: only on a bulkhead with queue-delay dispatch. */
    bh = c36(0);
    hg_limits l;
    hg_limits_default(&l);
    l.revision = 1;
    l.has_queue_delay = 1;
    l.queue_delay_target_ms = 10;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_INVALID_ARGUMENT);
    hg_bulkhead_free(bh);
}

/* Limit 1, queue 8, queue_delay_target_ms 10, interval 100, on the virtual clock at 0. */
static hg_bulkhead *codel(void) {
    atomic_store(&now_ns, 0);
    hg_config c;
    hg_config_default(&c);
    c.max_concurrent = 1;
    c.max_queue = 8;
    c.queue_timeout_ms = HG_TIMEOUT_INFINITE;
    c.queue_delay_target_ms = 10;
    c.queue_delay_interval_ms = 100;
    hg_bulkhead *bh = NULL;
    if (hg_bulkhead_new_with_clock(&c, vclock, NULL, &bh) != HG_STATUS_OK) abort();
    return bh;
}

static void codel_and_lifo(void) {
    hg_bulkhead *bh = codel();
    hg_permit *h = NULL, *p = NULL, *q = NULL;
    hg_ticket t[3];
    hg_request r;
    hg_request_default(&r);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &h), HG_STATUS_OK);
    for (int i = 0; i < 3; i++) CHECK_STATUS(hg_bulkhead_enqueue_request(bh, &r, &p, &t[i]), HG_STATUS_QUEUED);
    /* 150 ms: the first grant above target starts the interval; 260 ms: W1 shed, W2 granted. */
    atomic_store(&now_ns, 150 * MS);
    hg_permit_free(h);
    CHECK_STATUS(hg_ticket_poll(bh, t[0], &p), HG_STATUS_OK);
    atomic_store(&now_ns, 260 * MS);
    hg_permit_free(p);
    CHECK_STATUS(hg_ticket_poll(bh, t[1], &q), HG_STATUS_SHED);
    CHECK_STATUS(hg_ticket_poll(bh, t[2], &q), HG_STATUS_OK);
    CHECK_EQ_U64(stats(bh).rejected[HG_REASON_SHED], 1);
    /* Adaptive LIFO through hg_bulkhead_apply_limits: the newest first past the target. */
    hg_limits l;
    hg_limits_default(&l);
    l.revision = 1;
    l.has_queue_delay = 1;
    l.queue_delay_target_ms = 10;
    l.queue_delay_interval_ms = 100000;
    l.adaptive_lifo = 1;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_OK);
    for (int i = 0; i < 2; i++) CHECK_STATUS(hg_bulkhead_enqueue_request(bh, &r, &p, &t[i]), HG_STATUS_QUEUED);
    atomic_store(&now_ns, 300 * MS);
    hg_permit_free(q);
    CHECK_STATUS(hg_ticket_poll(bh, t[0], &p), HG_STATUS_QUEUED);
    CHECK_STATUS(hg_ticket_poll(bh, t[1], &p), HG_STATUS_OK);
    hg_permit_free(p);
    CHECK_STATUS(hg_ticket_poll(bh, t[0], &p), HG_STATUS_OK);
    hg_permit_free(p);
    /* Bad limits: LIFO without a target, adaptive_lifo 2. */
    l.revision = 2;
    l.queue_delay_target_ms = 0;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_INVALID_ARGUMENT);
    l.queue_delay_target_ms = 10;
    l.adaptive_lifo = 2;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_INVALID_ARGUMENT);
    hg_stats s = stats(bh);
    CHECK_EQ_U64(s.revision, 1);
    CHECK_EQ_U64(s.queued, 0);
    CHECK_EQ_U64(s.active, 0);
    hg_bulkhead_free(bh);
}

static void call_timeout_within(void) {
    atomic_store(&now_ns, S);
    hg_config c;
    hg_config_default(&c);
    c.call_timeout_ms = 2000;
    hg_bulkhead *bh = NULL;
    CHECK_STATUS(hg_bulkhead_new_with_clock(&c, vclock, NULL, &bh), HG_STATUS_OK);
    CHECK_EQ_U64(hg_bulkhead_call_timeout_within_ms(bh, S + 500 * MS), 500);
    CHECK_EQ_U64(hg_bulkhead_call_timeout_within_ms(bh, 10 * S), 2000);
    CHECK_EQ_U64(hg_bulkhead_call_timeout_within_ms(bh, HG_DEADLINE_NONE), 2000);
    CHECK_EQ_U64(hg_bulkhead_call_timeout_within_ms(bh, 0), 0);
    /* Under a millisecond left: 1 (rounded up), not 0 ("passed"). */
    CHECK_EQ_U64(hg_bulkhead_call_timeout_within_ms(bh, S + 500000), 1);
    CHECK_EQ_U64(hg_bulkhead_call_timeout_within_ms(NULL, 0), HG_TIMEOUT_INFINITE);
    hg_bulkhead_free(bh);
}

int main(int argc, char **argv) {
    (void)argc;
    RUN(c36_passed_deadline_is_refused_timeout);
    RUN(c36_deadline_bounds_the_queue_wait);
    RUN(c36_no_deadline_spellings);
    RUN(request_and_config_structs);
    RUN(codel_and_lifo);
    RUN(call_timeout_within);
    return hg_test_summary(argv[0]);
}
