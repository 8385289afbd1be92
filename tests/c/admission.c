/*
 * admission.c: gateway admission through the C ABI (issue 16; docs/design.md §4.5-4.9, §5,
 * §9.2), from real C, plain, under ASan + UBSan and under valgrind (tests/c/run.sh).
 *
 *   request_struct            hg_request: defaults, a too-small struct_size, an older struct
 *                             (no detail field), a newer one with a zero / non-zero tail, NULLs,
 *                             a class index or observe number out of range
 *   budget_and_detail         cost against a budget: grant, budget_limit with its hg_rejection
 *                             (bound, counts), invalid costs, the budget's hg_stats fields,
 *                             hg_bulkhead_set_budget, an hg_rejection too small to write
 *   dry_run                   hg_bulkhead_would_admit: admit now, would queue (position), reject
 *                             (status + detail); counts nothing
 *   blocking_and_async        hg_bulkhead_acquire_request (timeout 0: refused with detail),
 *                             hg_bulkhead_acquire_async_request (granted by a release, cancelled:
 *                             each callback exactly once)
 *   usage                     hg_permit_report_usage (shrank / grew / overran, decreased,
 *                             too large, released), hg_permit_refund, hg_permit_release_usage,
 *                             the settlement identity, cancel_on_overrun
 *   limits                    hg_bulkhead_apply_limits: revision rules (stale with the current
 *                             revision), the kill switch (bound kill_switch), invalid values,
 *                             struct sizes; hg_stats.revision
 *   classes_and_rates         hg_bulkhead_new_with_classes: an hg_class array (and a newer,
 *                             bigger element stride), floors, hg_bulkhead_class_stats, a rate
 *                             (rate_limit with retry_after_ms; a polling ticket granted by the
 *                             host's rate tick), class ceilings through apply_limits, bad tables
 *   observe_and_orphan        hg_bulkhead_set_observe (observed counts), hg_config.observe,
 *                             start_limit 0, hg_permit_orphan and max_orphaned
 *   registry_global_cap       hg_registry_new_with_options: one cap over every key,
 *                             hg_registry_try_acquire_request / _enqueue_request / key_stats /
 *                             global_stats / would_admit / apply_limits
 *   admission_events          hg_config.on_event: admit, reject, release, usage, reconfigure,
 *                             observe bypass, with their fields; none without on_event
 *   malformed_sizes_and_counts  struct sizes that end inside a pointer field, a detail too
 *                             small to write, huge array counts (hg_limits.classes, class
 *                             tables, registry overrides), outputs never written past their
 *                             size (canaries), the previous hg_stats size, a usage report whose
 *                             out cannot be written (changes nothing)
 *
 * Time is virtual (a host clock the test owns); nothing sleeps.
 */
#include <stdatomic.h>
#include <stddef.h>

#include "hgtest.h"

static _Atomic uint64_t now_ns;

static uint64_t vclock(void *user_data) {
    (void)user_data;
    return atomic_load(&now_ns);
}

static hg_config config(uint64_t max_concurrent, uint64_t max_queue, uint64_t budget) {
    hg_config c;
    if (hg_config_default(&c) != HG_STATUS_OK) abort();
    c.max_concurrent = max_concurrent;
    c.max_queue = max_queue;
    c.queue_timeout_ms = HG_TIMEOUT_INFINITE;
    c.budget = budget;
    return c;
}

static hg_bulkhead *new_bh(const hg_config *c) {
    hg_bulkhead *bh = NULL;
    hg_status s = hg_bulkhead_new_with_clock(c, vclock, NULL, &bh);
    if (s != HG_STATUS_OK) {
        fprintf(stderr, "hg_bulkhead_new_with_clock -> %u\n", (unsigned)s);
        abort();
    }
    return bh;
}

static hg_request request(uint64_t weight, uint64_t cost) {
    hg_request r;
    if (hg_request_default(&r) != HG_STATUS_OK) abort();
    r.weight = weight;
    r.cost = cost;
    return r;
}

static hg_rejection rejection(void) {
    hg_rejection d;
    memset(&d, 0, sizeof d);
    d.struct_size = (uint32_t)sizeof d;
    return d;
}

static void release(hg_permit *p) {
    CHECK_STATUS(hg_permit_release(p), HG_STATUS_OK);
    hg_permit_free(p);
}

/* ---- hg_request ---------------------------------------------------------------------------- */

static void request_struct(void) {
    hg_request r;
    CHECK_STATUS(hg_request_default(NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_request_default(&r), HG_STATUS_OK);
    CHECK_EQ_U64(r.struct_size, sizeof r);
    CHECK_EQ_U64(r.weight, 1);
    CHECK_EQ_U64(r.cost, 0);
    CHECK_EQ_U64(r.timeout_ms, HG_TIMEOUT_DEFAULT);
    CHECK(r.detail == NULL);

    hg_config c = config(2, 0, 0);
    hg_bulkhead *bh = new_bh(&c);
    hg_permit *p = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(NULL, &r, &p), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, NULL, &p), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, NULL), HG_STATUS_NULL_PARAMETER);

    /* Too small: everything up to timeout_ms is required. */
    hg_request small = r;
    small.struct_size = (uint32_t)offsetof(hg_request, timeout_ms);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &small, &p), HG_STATUS_INVALID_ARGUMENT);
    small.struct_size = 0;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &small, &p), HG_STATUS_INVALID_ARGUMENT);
    CHECK(p == NULL);

    /* An older caller without the detail field: its bytes there are never read. */
    hg_request old = r;
    old.struct_size = (uint32_t)offsetof(hg_request, detail);
    old.detail = (hg_rejection *)(uintptr_t)0x1; /* garbage the library must not touch */
    old.weight = 3;                              /* above max_concurrent: invalid, no detail */
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &old, &p), HG_STATUS_INVALID_ARGUMENT);
    old.weight = 2;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &old, &p), HG_STATUS_OK);
    hg_permit *q = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &old, &q), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK(q == NULL);
    release(p);

    /* A newer caller: a bigger struct with a zero tail is accepted, a non-zero tail refused. */
    struct {
        hg_request r;
        uint64_t future[2];
    } newer;
    memset(&newer, 0, sizeof newer);
    newer.r = r;
    newer.r.struct_size = (uint32_t)sizeof newer;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &newer.r, &p), HG_STATUS_OK);
    release(p);
    newer.future[1] = 7;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &newer.r, &p), HG_STATUS_INVALID_ARGUMENT);

    /* Out of range: a class index above 65535, an unknown observe number, weight 0. */
    hg_request bad = r;
    bad.class_index = 70000;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &bad, &p), HG_STATUS_INVALID_ARGUMENT);
    bad = r;
    bad.class_index = 3; /* no classes: only class 0 */
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &bad, &p), HG_STATUS_INVALID_ARGUMENT);
    bad = r;
    bad.observe = 9;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &bad, &p), HG_STATUS_INVALID_ARGUMENT);
    bad = r;
    bad.weight = 0;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &bad, &p), HG_STATUS_INVALID_ARGUMENT);
    bad = r;
    bad.cost = 1; /* no budget */
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &bad, &p), HG_STATUS_INVALID_ARGUMENT);
    CHECK(p != NULL); /* untouched by the refusals (the released permit's old value) */

    /* Nothing was leaked or double counted by the refusals. */
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.active, 0);
    CHECK_EQ_U64(s.admitted_total, 2);
    hg_bulkhead_free(bh);
}

/* ---- budget and rejection detail ------------------------------------------------------------ */

static void budget_and_detail(void) {
    hg_config c = config(4, 0, 10);
    hg_bulkhead *bh = new_bh(&c);
    hg_rejection d = rejection();
    hg_request r = request(1, 6);
    r.detail = &d;
    hg_permit *a = NULL, *p = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &a), HG_STATUS_OK);
    CHECK_EQ_U64(d.struct_size, sizeof d); /* untouched on a grant */
    CHECK_EQ_U64(d.reason, 0);
    r.cost = 5;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_BUDGET_LIMIT);
    CHECK(p == NULL);
    CHECK_EQ_U64(d.struct_size, sizeof d);
    CHECK_EQ_U64(d.reason, HG_REASON_BUDGET_LIMIT);
    CHECK_EQ_U64(d.bound, HG_BOUND_BUDGET);
    CHECK(strcmp(hg_bound_name(d.bound), "budget") == 0);
    CHECK(d.budget_present);
    CHECK_EQ_U64(d.budget_limit, 10);
    CHECK_EQ_U64(d.budget_in_use, 6);
    CHECK_EQ_I64(d.budget_available, 4);
    CHECK_EQ_U64(d.calls_limit, 4);
    CHECK_EQ_U64(d.calls_in_use, 1);
    CHECK_EQ_U64(d.retry_after_ms, HG_TIMEOUT_INFINITE);
    CHECK(!d.class_present);
    CHECK(strcmp(hg_bound_name(HG_BOUND_FLEET_LEASE), "fleet_lease") == 0);
    CHECK(hg_bound_name(18) == NULL);
    CHECK(hg_bound_name(UINT32_MAX) == NULL);
    CHECK(strcmp(hg_bound_name(HG_BOUND_KILL_SWITCH), "kill_switch") == 0);

    /* An older, smaller hg_rejection: only its bytes are written, struct_size says how many. */
    struct {
        hg_rejection d;
        uint8_t canary[8];
    } small;
    memset(&small, 0xab, sizeof small);
    small.d.struct_size = (uint32_t)offsetof(hg_rejection, bound);
    r.detail = &small.d;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_BUDGET_LIMIT);
    CHECK_EQ_U64(small.d.struct_size, offsetof(hg_rejection, bound));
    CHECK_EQ_U64(small.d.reason, HG_REASON_BUDGET_LIMIT);
    CHECK_EQ_U64(((uint8_t *)&small.d)[offsetof(hg_rejection, bound)], 0xab);

    /* Costs out of range are invalid (never budget_limit), and leave no detail. */
    r.detail = &d;
    d = rejection();
    r.cost = 11;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_U64(d.reason, 0);
    r.cost = UINT64_MAX;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_INVALID_ARGUMENT);

    hg_stats s = hg_test_stats(bh);
    CHECK(s.budget_present);
    CHECK_EQ_U64(s.budget_limit, 10);
    CHECK_EQ_U64(s.budget_max, 10);
    CHECK_EQ_U64(s.budget_in_use, 6);
    CHECK_EQ_I64(s.budget_available, 4);
    CHECK_EQ_U64(s.budget_reserved_total, 6);
    CHECK_EQ_U64(s.rejected[HG_REASON_BUDGET_LIMIT], 2);

    /* set_budget: growth admits, out of range is invalid; a bulkhead without one refuses. */
    CHECK_STATUS(hg_bulkhead_set_budget(bh, 11), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_bulkhead_set_budget(NULL, 5), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_set_budget(bh, 6), HG_STATUS_OK);
    r.cost = 1;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_BUDGET_LIMIT);
    CHECK_STATUS(hg_bulkhead_set_budget(bh, 10), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_OK);
    release(p);
    release(a);
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.budget_in_use, 0);
    CHECK_EQ_U64(s.budget_consumed_total, 7);
    hg_bulkhead_free(bh);

    hg_config plain = config(1, 0, 0);
    bh = new_bh(&plain);
    CHECK_STATUS(hg_bulkhead_set_budget(bh, 5), HG_STATUS_INVALID_ARGUMENT);
    CHECK(!hg_test_stats(bh).budget_present);
    hg_bulkhead_free(bh);

    /* The config's budget range, named by hg_config_check. */
    const char *field = NULL;
    hg_config bad = config(4, 0, HG_MAX_BUDGET + 1);
    CHECK_STATUS(hg_config_check(&bad, &field), HG_STATUS_INVALID_ARGUMENT);
    CHECK(field != NULL && strcmp(field, "budget") == 0);
    bad = config(4, 0, 0);
    bad.max_queued_cost = 5; /* needs a budget */
    CHECK_STATUS(hg_config_check(&bad, &field), HG_STATUS_INVALID_ARGUMENT);
    bad = config(4, 0, 10);
    bad.observe = 4;
    CHECK_STATUS(hg_config_check(&bad, &field), HG_STATUS_INVALID_ARGUMENT);
    CHECK(field != NULL && strcmp(field, "observe") == 0);
    /* An older caller (struct_size ends before budget): the admission fields are not read. */
    bad.struct_size = (uint32_t)offsetof(hg_config, budget);
    CHECK_STATUS(hg_config_check(&bad, &field), HG_STATUS_OK);
    bh = NULL;
    CHECK_STATUS(hg_bulkhead_new(&bad, &bh), HG_STATUS_OK);
    CHECK(!hg_test_stats(bh).budget_present);
    hg_bulkhead_free(bh);
}

/* ---- the dry run ------------------------------------------------------------------------- */

static void dry_run(void) {
    hg_config c = config(1, 2, 10);
    hg_bulkhead *bh = new_bh(&c);
    hg_would_admit w;
    memset(&w, 0, sizeof w);
    w.struct_size = (uint32_t)sizeof w;
    hg_request r = request(1, 4);
    CHECK_STATUS(hg_bulkhead_would_admit(bh, &r, &w), HG_STATUS_OK);
    CHECK_EQ_U64(w.decision, HG_WOULD_ADMIT_NOW);
    CHECK_EQ_U64(w.status, HG_STATUS_OK);
    hg_permit *a = NULL, *p = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &a), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_would_admit(bh, &r, &w), HG_STATUS_OK);
    CHECK_EQ_U64(w.decision, HG_WOULD_QUEUE);
    CHECK_EQ_U64(w.status, HG_STATUS_QUEUED);
    CHECK_EQ_U64(w.position, 1);
    CHECK_EQ_U64(w.ahead, 0);
    hg_ticket t = 0;
    CHECK_STATUS(hg_bulkhead_enqueue_request(bh, &r, &p, &t), HG_STATUS_QUEUED);
    CHECK_STATUS(hg_bulkhead_would_admit(bh, &r, &w), HG_STATUS_OK);
    CHECK_EQ_U64(w.position, 2);
    hg_rejection d = rejection();
    r.detail = &d;
    r.timeout_ms = 0;
    CHECK_STATUS(hg_bulkhead_would_admit(bh, &r, &w), HG_STATUS_OK);
    CHECK_EQ_U64(w.decision, HG_WOULD_REJECT);
    CHECK_EQ_U64(w.status, HG_STATUS_CONCURRENCY_LIMIT);
    CHECK_EQ_U64(d.reason, HG_REASON_CONCURRENCY_LIMIT);
    r.cost = 11;
    CHECK_STATUS(hg_bulkhead_would_admit(bh, &r, &w), HG_STATUS_OK);
    CHECK_EQ_U64(w.status, HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_bulkhead_would_admit(bh, &r, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_would_admit(bh, NULL, &w), HG_STATUS_NULL_PARAMETER);
    /* It counted nothing. */
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.admitted_total, 1);
    CHECK_EQ_U64(s.queued, 1);
    CHECK_EQ_U64(s.rejected[HG_REASON_CONCURRENCY_LIMIT], 0);
    CHECK_EQ_U64(s.budget_queued_cost, 4);
    release(a);
    CHECK_STATUS(hg_ticket_poll(bh, t, &p), HG_STATUS_OK);
    release(p);
    hg_bulkhead_free(bh);
}

/* ---- usage, refunds, settlement ----------------------------------------------------------- */

static hg_usage_report report(void) {
    hg_usage_report u;
    memset(&u, 0, sizeof u);
    u.struct_size = (uint32_t)sizeof u;
    return u;
}

static void usage(void) {
    hg_config c = config(4, 0, 100);
    c.cancel_on_overrun = true;
    hg_bulkhead *bh = new_bh(&c);
    hg_request r = request(1, 50);
    hg_permit *p = NULL, *q = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_OK);
    hg_usage_report u = report();
    CHECK_STATUS(hg_permit_report_usage(p, 10, 20, &u), HG_STATUS_OK);
    CHECK_EQ_U64(u.change, HG_HOLD_SHRANK);
    CHECK_EQ_U64(u.by, 20);
    CHECK_EQ_U64(u.held, 30);
    CHECK(!u.cancel);
    CHECK_STATUS(hg_permit_report_usage(p, 40, 30, &u), HG_STATUS_OK);
    CHECK_EQ_U64(u.change, HG_HOLD_GREW);
    CHECK_EQ_U64(u.by, 40);
    CHECK_STATUS(hg_permit_report_usage(p, 5, 0, &u), HG_STATUS_USAGE_DECREASED);
    CHECK_STATUS(hg_permit_report_usage(p, HG_MAX_BUDGET, 1, &u), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_permit_report_usage(p, 40, 30, NULL), HG_STATUS_OK); /* out is optional */
    CHECK_STATUS(hg_permit_report_usage(NULL, 1, 1, &u), HG_STATUS_NULL_PARAMETER);
    /* Another call takes the rest; growth past the budget is overrun and asks to cancel. */
    r.cost = 30;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &q), HG_STATUS_OK);
    CHECK(!hg_permit_cancel_requested(p));
    CHECK_STATUS(hg_permit_report_usage(p, 80, 0, &u), HG_STATUS_OK);
    CHECK_EQ_U64(u.change, HG_HOLD_OVERRAN);
    CHECK_EQ_U64(u.by, 10);
    CHECK_EQ_U64(u.overrun, 10);
    CHECK(u.cancel);
    CHECK(hg_permit_cancel_requested(p));
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.budget_overrun_held, 10);
    /* Refunds: 0 and more than held are invalid; the overrun part goes first. */
    CHECK_STATUS(hg_permit_refund(q, 0), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_permit_refund(q, 31), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_permit_refund(q, 10), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_refund(NULL, 1), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_permit_refund(p, 15), HG_STATUS_OK);
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.budget_overrun_held, 0);
    CHECK_EQ_U64(s.budget_in_use, 65 + 20);
    /* Settle: q used 12 of its 20; p its 80 (raised to its last report). */
    CHECK_STATUS(hg_permit_release_usage(q, HG_OUTCOME_SUCCESS, 12), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release_usage(q, HG_OUTCOME_SUCCESS, 12), HG_STATUS_ALREADY_RELEASED);
    CHECK_STATUS(hg_permit_release_usage(p, 99, 0), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_permit_release_usage(p, HG_OUTCOME_FAILURE, 1), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_report_usage(p, 90, 0, &u), HG_STATUS_ALREADY_RELEASED);
    CHECK_STATUS(hg_permit_refund(p, 1), HG_STATUS_ALREADY_RELEASED);
    CHECK_STATUS(hg_permit_release_usage(NULL, HG_OUTCOME_SUCCESS, 1), HG_STATUS_NULL_PARAMETER);
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.budget_in_use, 0);
    CHECK_EQ_U64(s.active, 0);
    CHECK_EQ_U64(s.released_twice_total, 1);
    /* C30: reserved + overrun == consumed + refunded + in_use + overrun_held. */
    CHECK_EQ_U64(s.budget_reserved_total + s.budget_overrun_total,
                 s.budget_consumed_total + s.budget_refunded_total + s.budget_in_use +
                     s.budget_overrun_held);
    hg_permit_free(p);
    hg_permit_free(q);
    hg_bulkhead_free(bh);
}

/* ---- revisioned limits ---------------------------------------------------------------------- */

static void limits(void) {
    hg_config c = config(4, 4, 100);
    hg_bulkhead *bh = new_bh(&c);
    hg_limits l;
    CHECK_STATUS(hg_limits_default(NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_limits_default(&l), HG_STATUS_OK);
    CHECK_EQ_U64(l.limit, HG_UNSET);
    CHECK_EQ_U64(l.queue_timeout_ms, HG_TIMEOUT_DEFAULT);
    uint64_t current = 0;
    l.current_revision = &current;
    l.revision = 3;
    l.limit = 2;
    l.budget = 50;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_OK);
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.revision, 3);
    CHECK_EQ_U64(s.limit, 2);
    CHECK_EQ_U64(s.budget_limit, 50);
    /* A stale or repeated revision changes nothing and names the revision in force. */
    l.limit = 1;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_STALE);
    CHECK_EQ_U64(current, 3);
    l.revision = 2;
    l.current_revision = NULL; /* optional */
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_STALE);
    CHECK_EQ_U64(hg_test_stats(bh).limit, 2);
    CHECK(strcmp(hg_status_message(HG_STATUS_STALE), "unknown status") != 0);
    /* Out of range: nothing changes. */
    l.revision = 4;
    l.limit = UINT64_MAX; /* above HG_MAX_PERMITS (above max_concurrent raises the ceiling) */
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_INVALID_ARGUMENT);
    l.limit = HG_UNSET;
    l.budget = 101;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_INVALID_ARGUMENT);
    l.budget = HG_UNSET;
    l.reserve_min_priority = 256; /* a priority is 0 .. 255 */
    l.has_reserve = 1;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_INVALID_ARGUMENT);
    l.has_reserve = 0;
    CHECK_EQ_U64(hg_test_stats(bh).revision, 3);
    /* Struct sizes: too small refused; a newer struct with a zero tail accepted. */
    hg_limits small = l;
    small.struct_size = (uint32_t)offsetof(hg_limits, units);
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &small), HG_STATUS_INVALID_ARGUMENT);
    struct {
        hg_limits l;
        uint64_t future;
    } newer;
    memset(&newer, 0, sizeof newer);
    newer.l = l;
    newer.l.struct_size = (uint32_t)sizeof newer;
    newer.future = 1;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &newer.l), HG_STATUS_INVALID_ARGUMENT);
    newer.future = 0;
    /* The kill switch: limit 0 refuses at once, bound kill_switch; holders keep theirs. */
    newer.l.limit = 0;
    newer.l.revision = 5;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &newer.l), HG_STATUS_OK);
    hg_rejection d = rejection();
    hg_request r = request(1, 0);
    r.detail = &d;
    hg_permit *p = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK_EQ_U64(d.bound, HG_BOUND_KILL_SWITCH);
    CHECK_EQ_U64(d.revision, 5);
    CHECK_STATUS(hg_bulkhead_apply_limits(NULL, &l), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, NULL), HG_STATUS_NULL_PARAMETER);
    hg_bulkhead_free(bh);
}

/* ---- classes and rates ---------------------------------------------------------------------- */

static void classes_and_rates(void) {
    atomic_store(&now_ns, 0);
    hg_config c = config(3, 4, 0);
    hg_class k[2];
    CHECK_STATUS(hg_class_default(NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_class_default(&k[0]), HG_STATUS_OK);
    CHECK_EQ_U64(k[0].ceiling, HG_UNSET);
    k[1] = k[0];
    k[0].priority = 10;
    k[0].floor = 1; /* interactive: one permit protected */
    hg_class_table t;
    memset(&t, 0, sizeof t);
    t.struct_size = (uint32_t)sizeof t;
    t.classes = k;
    t.classes_len = 2;
    hg_bulkhead *bh = NULL;
    CHECK_STATUS(hg_bulkhead_new_with_classes(&c, &t, vclock, NULL, &bh), HG_STATUS_OK);
    hg_request batch = request(1, 0);
    batch.class_index = 1;
    hg_permit *b1 = NULL, *b2 = NULL, *b3 = NULL, *i1 = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &batch, &b1), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &batch, &b2), HG_STATUS_OK);
    hg_rejection d = rejection();
    batch.detail = &d;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &batch, &b3), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK(d.class_present);
    CHECK_EQ_U64(d.class_index, 1);
    hg_request interactive = request(1, 0);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &interactive, &i1), HG_STATUS_OK);
    hg_class_stats cs;
    memset(&cs, 0, sizeof cs);
    cs.struct_size = (uint32_t)sizeof cs;
    CHECK_STATUS(hg_bulkhead_class_stats(bh, 1, &cs), HG_STATUS_OK);
    CHECK_EQ_U64(cs.in_flight, 2);
    CHECK_EQ_U64(cs.shared_permits_in_use, 2);
    CHECK_STATUS(hg_bulkhead_class_stats(bh, 0, &cs), HG_STATUS_OK);
    CHECK_EQ_U64(cs.priority, 10);
    CHECK_EQ_U64(cs.floor, 1);
    CHECK_EQ_U64(cs.in_flight, 1);
    CHECK_STATUS(hg_bulkhead_class_stats(bh, 2, &cs), HG_STATUS_INVALID_ARGUMENT);
    /* Class ceilings through hg_bulkhead_apply_limits: batch may hold 1 from now on. */
    hg_class_limits cl = {(uint32_t)sizeof cl, 1, 1, HG_UNSET};
    hg_limits lim;
    hg_limits_default(&lim);
    lim.revision = 1;
    lim.classes = &cl;
    lim.classes_len = 1;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &lim), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_class_stats(bh, 1, &cs), HG_STATUS_OK);
    CHECK_EQ_U64(cs.ceiling, 1);
    CHECK_EQ_U64(cs.in_flight, 2); /* holders keep theirs */
    cl.class_index = 7;
    lim.revision = 2;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &lim), HG_STATUS_INVALID_ARGUMENT);
    lim.classes = NULL;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &lim), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_class_stats(bh, 0, NULL), HG_STATUS_NULL_PARAMETER);
    batch.class_index = 2;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &batch, &b3), HG_STATUS_INVALID_ARGUMENT);
    release(b1);
    release(b2);
    release(i1);
    hg_bulkhead_free(bh);

    /* Bad tables. */
    hg_config plain = config(3, 4, 0);
    CHECK_STATUS(hg_bulkhead_class_stats(bh = new_bh(&plain), 0, &cs), HG_STATUS_INVALID_ARGUMENT);
    hg_bulkhead_free(bh);
    bh = NULL;
    CHECK_STATUS(hg_bulkhead_new_with_classes(&c, NULL, NULL, NULL, &bh), HG_STATUS_NULL_PARAMETER);
    hg_class_table bad = t;
    bad.classes_len = 0;
    CHECK_STATUS(hg_bulkhead_new_with_classes(&c, &bad, NULL, NULL, &bh), HG_STATUS_INVALID_ARGUMENT);
    bad.classes_len = 65;
    CHECK_STATUS(hg_bulkhead_new_with_classes(&c, &bad, NULL, NULL, &bh), HG_STATUS_INVALID_ARGUMENT);
    bad = t;
    bad.classes = NULL;
    CHECK_STATUS(hg_bulkhead_new_with_classes(&c, &bad, NULL, NULL, &bh), HG_STATUS_NULL_PARAMETER);
    k[0].priority = 256;
    CHECK_STATUS(hg_bulkhead_new_with_classes(&c, &t, NULL, NULL, &bh), HG_STATUS_INVALID_ARGUMENT);
    k[0].priority = 10;
    k[0].floor = 4; /* above the limit */
    CHECK_STATUS(hg_bulkhead_new_with_classes(&c, &t, NULL, NULL, &bh), HG_STATUS_INVALID_ARGUMENT);
    k[0].floor = 1;
    k[1].struct_size = 8; /* a stride that differs */
    CHECK_STATUS(hg_bulkhead_new_with_classes(&c, &t, NULL, NULL, &bh), HG_STATUS_INVALID_ARGUMENT);
    k[1].struct_size = k[0].struct_size;
    bad = t;
    bad.struct_size = 8;
    CHECK_STATUS(hg_bulkhead_new_with_classes(&c, &bad, NULL, NULL, &bh), HG_STATUS_INVALID_ARGUMENT);
    CHECK(bh == NULL);

    /* A newer, bigger hg_class (zero tail): the array's stride is its struct_size. */
    struct wide {
        hg_class k;
        uint64_t future;
    } w[2];
    memset(w, 0, sizeof w);
    for (int i = 0; i < 2; i++) {
        w[i].k = k[i];
        w[i].k.struct_size = (uint32_t)sizeof w[0];
    }
    t.classes = &w[0].k;
    CHECK_STATUS(hg_bulkhead_new_with_classes(&c, &t, vclock, NULL, &bh), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_class_stats(bh, 0, &cs), HG_STATUS_OK);
    CHECK_EQ_U64(cs.priority, 10);
    hg_bulkhead_free(bh);

    /* A rate: 1 request per 100 ms, burst 1, on virtual time. */
    atomic_store(&now_ns, 0);
    hg_class one;
    hg_class_default(&one);
    t.classes = &one;
    t.classes_len = 1;
    t.requests.amount = 1;
    t.requests.per_ms = 100;
    t.requests.burst = 1;
    CHECK_STATUS(hg_bulkhead_new_with_classes(&c, &t, vclock, NULL, &bh), HG_STATUS_OK);
    hg_request r = request(1, 0);
    hg_permit *a = NULL, *p = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &a), HG_STATUS_OK);
    d = rejection();
    r.detail = &d;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_RATE_LIMIT);
    CHECK_EQ_U64(d.bound, HG_BOUND_RATE);
    CHECK_EQ_U64(d.retry_after_ms, 100);
    CHECK_EQ_U64(d.retry_after_ns, 100000000u);
    CHECK(hg_bulkhead_rate_retry_after_ns(bh) <= 100000000u);
    /* A deadline before conformance: refused at once, never queued to time out later. */
    r.timeout_ms = 50;
    hg_ticket tk = 0;
    CHECK_STATUS(hg_bulkhead_enqueue_request(bh, &r, &p, &tk), HG_STATUS_RATE_LIMIT);
    r.timeout_ms = 150;
    CHECK_STATUS(hg_bulkhead_enqueue_request(bh, &r, &p, &tk), HG_STATUS_QUEUED);
    CHECK_EQ_U64(hg_bulkhead_rate_retry_after_ns(bh), 100000000u);
    atomic_store(&now_ns, 99000000u);
    CHECK_STATUS(hg_bulkhead_rate_tick(bh), HG_STATUS_OK);
    CHECK_STATUS(hg_ticket_poll(bh, tk, &p), HG_STATUS_QUEUED);
    atomic_store(&now_ns, 100000000u);
    CHECK_STATUS(hg_bulkhead_rate_tick(bh), HG_STATUS_OK);
    CHECK_STATUS(hg_ticket_poll(bh, tk, &p), HG_STATUS_OK);
    CHECK_EQ_U64(hg_test_stats(bh).rejected[HG_REASON_RATE_LIMIT], 2);
    CHECK_STATUS(hg_bulkhead_rate_tick(NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_EQ_U64(hg_bulkhead_rate_retry_after_ns(NULL), HG_TIMEOUT_INFINITE);
    release(a);
    release(p);
    hg_bulkhead_free(bh);
}

/* ---- observe mode, start limit, orphaning ----------------------------------------------------- */

static void observe_and_orphan(void) {
    hg_config c = config(1, 0, 0);
    hg_bulkhead *bh = new_bh(&c);
    hg_permit *a = NULL, *b = NULL;
    hg_request r = request(1, 0);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &a), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_set_observe(bh, 9), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_bulkhead_set_observe(bh, HG_OBSERVE_BUDGET), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_bulkhead_set_observe(NULL, HG_OBSERVE_ALL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_set_observe(bh, HG_OBSERVE_ALL), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &b), HG_STATUS_OK);
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.observe, HG_OBSERVE_ALL);
    CHECK_EQ_U64(s.observed[HG_REASON_CONCURRENCY_LIMIT], 1);
    CHECK_EQ_U64(s.active, 2);
    CHECK_STATUS(hg_bulkhead_set_observe(bh, HG_OBSERVE_OFF), HG_STATUS_OK);
    release(a);
    release(b);
    hg_bulkhead_free(bh);

    /* hg_config.observe and a fail-closed start. */
    c = config(2, 0, 0);
    c.observe = HG_OBSERVE_CONCURRENCY;
    c.start_limit = 0;
    bh = new_bh(&c);
    CHECK_EQ_U64(hg_test_stats(bh).limit, 0);
    CHECK_EQ_U64(hg_test_stats(bh).observe, HG_OBSERVE_CONCURRENCY);
    hg_bulkhead_free(bh);

    /* Orphaning: off by default; bounded by max_orphaned. */
    c = config(1, 0, 0);
    bh = new_bh(&c);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &a), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_orphan(a), HG_STATUS_ORPHAN_LIMIT);
    CHECK_STATUS(hg_permit_orphan(NULL), HG_STATUS_NULL_PARAMETER);
    release(a);
    hg_bulkhead_free(bh);
    c.max_orphaned = 1;
    bh = new_bh(&c);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &a), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_orphan(a), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_orphan(a), HG_STATUS_ALREADY_SETTLED);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &b), HG_STATUS_OK);
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.orphaned_in_flight, 1);
    CHECK_EQ_U64(s.active, 1);
    release(a); /* the orphaned work ended */
    CHECK_STATUS(hg_permit_orphan(a), HG_STATUS_ALREADY_RELEASED);
    CHECK_EQ_U64(hg_test_stats(bh).orphaned_in_flight, 0);
    release(b);
    hg_bulkhead_free(bh);
}

/* ---- a registry's global cap ---------------------------------------------------------------- */

static void registry_global_cap(void) {
    hg_config d = config(1, 4, 0);
    hg_registry_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = (uint32_t)sizeof o;
    o.max_keys = 8;
    o.global_limit = 2;
    o.global_max_queue = 4;
    o.now_ns = vclock;
    hg_registry *reg = NULL;
    hg_registry_options small = o;
    small.struct_size = 8;
    CHECK_STATUS(hg_registry_new_with_options(&d, NULL, 0, &small, &reg), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_registry_new_with_options(&d, NULL, 0, NULL, &reg), HG_STATUS_NULL_PARAMETER);
    hg_registry_options many = o;
    many.max_keys = 64; /* at most 63 keys under a cap */
    CHECK_STATUS(hg_registry_new_with_options(&d, NULL, 0, &many, &reg), HG_STATUS_INVALID_ARGUMENT);
    CHECK(reg == NULL);
    CHECK_STATUS(hg_registry_new_with_options(&d, NULL, 0, &o, &reg), HG_STATUS_OK);
    hg_request r = request(1, 0);
    hg_permit *a1 = NULL, *b1 = NULL, *p = NULL;
    hg_rejection det = rejection();
    r.detail = &det;
    CHECK_STATUS(hg_registry_try_acquire_request(reg, "a", 1, &r, &a1), HG_STATUS_OK);
    CHECK_STATUS(hg_registry_try_acquire_request(reg, "a", 1, &r, &p), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK_EQ_U64(det.bound, HG_BOUND_CLASS); /* a's own limit, not the cap */
    r.timeout_ms = HG_TIMEOUT_INFINITE;
    CHECK_STATUS(hg_registry_acquire_request(reg, "b", 1, &r, &b1), HG_STATUS_OK); /* free */
    r.timeout_ms = 0;
    CHECK_STATUS(hg_registry_acquire_request(reg, "c", 1, &r, &p), HG_STATUS_CONCURRENCY_LIMIT);
    r.timeout_ms = HG_TIMEOUT_DEFAULT;
    hg_bulkhead *queue = NULL;
    hg_ticket t = 0;
    CHECK_STATUS(hg_registry_enqueue_request(reg, "c", 1, &r, &p, &queue, &t), HG_STATUS_QUEUED);
    CHECK(queue != NULL);
    hg_class_stats cs;
    memset(&cs, 0, sizeof cs);
    cs.struct_size = (uint32_t)sizeof cs;
    CHECK_STATUS(hg_registry_key_stats(reg, "c", 1, &cs), HG_STATUS_OK);
    CHECK_EQ_U64(cs.queued, 1);
    CHECK_EQ_U64(cs.ceiling, 1);
    CHECK_STATUS(hg_registry_key_stats(reg, "zz", 2, &cs), HG_STATUS_INVALID_ARGUMENT);
    hg_stats g;
    memset(&g, 0, sizeof g);
    g.struct_size = (uint32_t)sizeof g;
    CHECK_STATUS(hg_registry_global_stats(reg, &g), HG_STATUS_OK);
    CHECK_EQ_U64(g.limit, 2);
    CHECK_EQ_U64(g.active, 2);
    hg_would_admit w;
    memset(&w, 0, sizeof w);
    w.struct_size = (uint32_t)sizeof w;
    CHECK_STATUS(hg_registry_would_admit(reg, "d", 1, &r, &w), HG_STATUS_OK);
    CHECK_EQ_U64(w.decision, HG_WOULD_QUEUE);
    CHECK_EQ_U64(w.position, 2);
    hg_bulkhead *h = NULL;
    CHECK_STATUS(hg_registry_get(reg, "a", 1, &h), HG_STATUS_INVALID_ARGUMENT); /* no own bulkhead */
    release(b1);
    CHECK_STATUS(hg_ticket_poll(queue, t, &p), HG_STATUS_OK);
    release(p);
    release(a1);
    hg_bulkhead_free(queue);
    CHECK_STATUS(hg_registry_global_stats(reg, &g), HG_STATUS_OK);
    CHECK_EQ_U64(g.active, 0);
    /* Registry-wide revisioned limits: defaults, an override, the cap. */
    hg_limits dl, ol, gl;
    hg_limits_default(&dl);
    hg_limits_default(&ol);
    hg_limits_default(&gl);
    uint64_t current = 0;
    dl.revision = 2;
    dl.current_revision = &current;
    ol.limit = 0; /* key "b": the kill switch */
    gl.limit = 3;
    hg_registry_key_limits kl = {(uint32_t)sizeof kl, "b", 1, &ol};
    CHECK_STATUS(hg_registry_apply_limits(reg, &dl, &kl, 1, &gl), HG_STATUS_OK);
    CHECK_STATUS(hg_registry_global_stats(reg, &g), HG_STATUS_OK);
    CHECK_EQ_U64(g.limit, 3);
    CHECK_STATUS(hg_registry_try_acquire_request(reg, "b", 1, &r, &p), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK_STATUS(hg_registry_apply_limits(reg, &dl, NULL, 0, NULL), HG_STATUS_STALE);
    CHECK_EQ_U64(current, 2);
    dl.revision = 3;
    dl.has_rates = 1; /* a registry key has no class table */
    CHECK_STATUS(hg_registry_apply_limits(reg, &dl, NULL, 0, NULL), HG_STATUS_INVALID_ARGUMENT);
    dl.has_rates = 0;
    kl.struct_size = 4;
    CHECK_STATUS(hg_registry_apply_limits(reg, &dl, &kl, 1, NULL), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_registry_apply_limits(reg, &dl, NULL, 1, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_apply_limits(reg, NULL, NULL, 0, NULL), HG_STATUS_NULL_PARAMETER);
    hg_registry_free(reg);

    /* Without a cap: key_stats and global_stats are refused. */
    o.global_limit = 0;
    CHECK_STATUS(hg_registry_new_with_options(&d, NULL, 0, &o, &reg), HG_STATUS_OK);
    CHECK_STATUS(hg_registry_try_acquire_request(reg, "a", 1, &r, &a1), HG_STATUS_OK);
    CHECK_STATUS(hg_registry_key_stats(reg, "a", 1, &cs), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_registry_global_stats(reg, &g), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_registry_try_acquire_request(reg, NULL, 1, &r, &p), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_try_acquire_request(reg, "\xff", 1, &r, &p), HG_STATUS_INVALID_ARGUMENT);
    release(a1);
    hg_registry_free(reg);
}

/* ---- events ---------------------------------------------------------------------------------- */

typedef struct {
    int n;
    hg_event e[16];
} events_t;

static void record(void *user_data, const hg_event *ev) {
    events_t *l = user_data;
    if (l->n < 16) l->e[l->n++] = *ev;
}

static void admission_events(void) {
    atomic_store(&now_ns, 0);
    events_t log;
    memset(&log, 0, sizeof log);
    hg_config c = config(1, 0, 10);
    c.on_event = record;
    c.on_event_user_data = &log;
    hg_bulkhead *bh = new_bh(&c);
    hg_request r = request(1, 4);
    hg_permit *a = NULL, *p = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &a), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_CONCURRENCY_LIMIT);
    hg_usage_report u = report();
    CHECK_STATUS(hg_permit_report_usage(a, 1, 1, &u), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release_usage(a, HG_OUTCOME_SUCCESS, 2), HG_STATUS_OK);
    hg_permit_free(a);
    hg_limits l;
    hg_limits_default(&l);
    l.revision = 7;
    l.budget = 8;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_OK);
    CHECK_EQ_U64(log.n, 5);
    for (int i = 0; i < log.n; i++) {
        CHECK_EQ_U64(log.e[i].struct_size, sizeof(hg_event));
        CHECK(log.e[i].key == NULL && log.e[i].key_len == 0);
    }
    CHECK_EQ_U64(log.e[0].kind, HG_EVENT_ADMIT);
    CHECK_EQ_U64(log.e[0].weight, 1);
    CHECK_EQ_U64(log.e[0].cost, 4);
    CHECK(!log.e[0].queued);
    CHECK(log.e[0].id != 0);
    CHECK_EQ_U64(log.e[1].kind, HG_EVENT_REJECT);
    CHECK_EQ_U64(log.e[1].reason, HG_REASON_CONCURRENCY_LIMIT);
    CHECK(log.e[1].id != log.e[0].id);
    CHECK_EQ_U64(log.e[2].kind, HG_EVENT_USAGE);
    CHECK_EQ_U64(log.e[2].id, log.e[0].id);
    CHECK_EQ_U64(log.e[2].used, 1);
    CHECK_EQ_U64(log.e[2].held, 2);
    CHECK_EQ_U64(log.e[2].change, HG_HOLD_SHRANK);
    CHECK_EQ_U64(log.e[2].change_by, 2);
    CHECK_EQ_U64(log.e[3].kind, HG_EVENT_RELEASE);
    CHECK_EQ_U64(log.e[3].id, log.e[0].id);
    CHECK(log.e[3].ended && log.e[3].used_present);
    CHECK_EQ_U64(log.e[3].used, 2);
    CHECK_EQ_U64(log.e[3].weight, 1);
    CHECK_EQ_U64(log.e[4].kind, HG_EVENT_RECONFIGURE);
    CHECK_EQ_U64(log.e[4].revision, 7);
    CHECK(log.e[4].budget_present);
    CHECK_EQ_U64(log.e[4].budget, 8);
    CHECK_EQ_U64(log.e[4].limit, 1);
    /* Observe mode: a bypass, then its admit. */
    log.n = 0;
    CHECK_STATUS(hg_bulkhead_set_observe(bh, HG_OBSERVE_ALL), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &a), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_OK);
    CHECK_EQ_U64(log.e[0].kind, HG_EVENT_RECONFIGURE);
    CHECK_EQ_U64(log.e[0].observe, HG_OBSERVE_ALL);
    CHECK_EQ_U64(log.e[2].kind, HG_EVENT_OBSERVE_BYPASS);
    CHECK_EQ_U64(log.e[3].kind, HG_EVENT_ADMIT);
    CHECK_EQ_U64(log.e[3].id, log.e[2].id);
    release(a);
    release(p);
    CHECK_EQ_U64(hg_test_stats(bh).observer_panics, 0);
    hg_bulkhead_free(bh);

    /* No on_event (only on_state_change, or nothing): no admission event work at all. */
    c.on_event = NULL;
    bh = new_bh(&c);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &a), HG_STATUS_OK);
    release(a);
    hg_bulkhead_free(bh);
    CHECK_EQ_U64(log.n, 6);
}

/* ---- the blocking and async variants ---------------------------------------------------------- */

typedef struct {
    int calls;
    hg_status status;
    hg_permit *permit;
} settle_t;

static void on_settle(hg_status status, hg_permit *permit, void *user_data) {
    settle_t *s = user_data;
    s->calls++;
    s->status = status;
    s->permit = permit;
}

static void blocking_and_async(void) {
    hg_config c = config(1, 2, 10);
    hg_bulkhead *bh = new_bh(&c);
    hg_request r = request(1, 6);
    hg_permit *a = NULL, *p = NULL;
    CHECK_STATUS(hg_bulkhead_acquire_request(bh, &r, &a), HG_STATUS_OK);
    hg_rejection d = rejection();
    r.detail = &d;
    r.timeout_ms = 0; /* do not queue: refused at once, with its detail */
    CHECK_STATUS(hg_bulkhead_acquire_request(bh, &r, &p), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK_EQ_U64(d.reason, HG_REASON_CONCURRENCY_LIMIT);
    CHECK_STATUS(hg_bulkhead_acquire_request(NULL, &r, &p), HG_STATUS_NULL_PARAMETER);
    /* Async: queued, granted by the release on this thread, exactly once. */
    settle_t st = {0, HG_STATUS_PANIC, NULL};
    hg_ticket t = 0;
    r.timeout_ms = HG_TIMEOUT_INFINITE;
    r.cost = 4;
    CHECK_STATUS(hg_bulkhead_acquire_async_request(bh, &r, NULL, &st, &p, &t),
                 HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_acquire_async_request(bh, &r, on_settle, &st, &p, &t),
                 HG_STATUS_QUEUED);
    CHECK_EQ_U64(st.calls, 0);
    release(a);
    CHECK_EQ_U64(st.calls, 1);
    CHECK_STATUS(st.status, HG_STATUS_OK);
    CHECK_EQ_U64(hg_test_stats(bh).budget_in_use, 4);
    CHECK_STATUS(hg_ticket_cancel(bh, t), HG_STATUS_ALREADY_SETTLED);
    /* A queued async acquire cancelled: its callback ran before the cancel returned. */
    settle_t st2 = {0, HG_STATUS_PANIC, NULL};
    CHECK_STATUS(hg_bulkhead_acquire_async_request(bh, &r, on_settle, &st2, &p, &t),
                 HG_STATUS_QUEUED);
    CHECK_STATUS(hg_ticket_cancel(bh, t), HG_STATUS_OK);
    CHECK_EQ_U64(st2.calls, 1);
    CHECK_STATUS(st2.status, HG_STATUS_ABORTED);
    CHECK(st2.permit == NULL);
    release(st.permit);
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.active, 0);
    CHECK_EQ_U64(s.budget_in_use, 0);
    CHECK_EQ_U64(s.queued, 0);
    hg_bulkhead_free(bh);
}

/* ---- review: malformed sizes, huge counts, outputs never written past their size ------------- */

/* A struct_size that ends inside a pointer field never yields a truncated pointer the library
 * then writes through (it is refused); one that ends exactly at a field boundary is an older
 * struct. Huge array counts are refused (never an allocation of the count). */
static void malformed_sizes_and_counts(void) {
    hg_config c = config(1, 0, 10);
    hg_bulkhead *bh = new_bh(&c);
    hg_permit *a = NULL, *p = NULL;
    hg_request r = request(1, 0);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &a), HG_STATUS_OK);
    hg_rejection d = rejection();
    r.detail = &d;
    hg_would_admit w;
    memset(&w, 0, sizeof w);
    w.struct_size = (uint32_t)sizeof w;
    r.struct_size = (uint32_t)(offsetof(hg_request, detail) + sizeof(uint32_t));
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_bulkhead_would_admit(bh, &r, &w), HG_STATUS_INVALID_ARGUMENT);
    r.struct_size = (uint32_t)(sizeof r - 1);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_INVALID_ARGUMENT);
    /* A dry run whose out cannot be written writes no detail either. */
    r.struct_size = (uint32_t)sizeof r;
    r.timeout_ms = 0;
    w.struct_size = 2;
    d.reason = 77;
    CHECK_STATUS(hg_bulkhead_would_admit(bh, &r, &w), HG_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_U64(d.reason, 77);
    w.struct_size = (uint32_t)sizeof w;
    CHECK_STATUS(hg_bulkhead_would_admit(bh, &r, &w), HG_STATUS_OK);
    CHECK_EQ_U64(d.reason, HG_REASON_CONCURRENCY_LIMIT);
    r.timeout_ms = HG_TIMEOUT_DEFAULT;
    /* Exactly at the boundary: no detail field (refused with no detail written). */
    r.struct_size = (uint32_t)offsetof(hg_request, detail);
    d.reason = 77;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK_EQ_U64(d.reason, 77);
    CHECK(p == NULL);
    /* A detail too small to hold anything is a bad argument, refused before the admission. */
    r.struct_size = (uint32_t)sizeof r;
    d.struct_size = 3;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &p), HG_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_U64(hg_test_stats(bh).rejected[HG_REASON_CONCURRENCY_LIMIT], 1);
    d = rejection();

    /* hg_limits: a size inside current_revision / classes / classes_len is refused. */
    hg_limits l;
    CHECK_STATUS(hg_limits_default(&l), HG_STATUS_OK);
    uint64_t current = 0;
    l.revision = 5;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_OK);
    l.current_revision = &current;
    const size_t inside[] = {
        offsetof(hg_limits, current_revision) + 4,
        offsetof(hg_limits, classes) + 4,
        offsetof(hg_limits, classes_len) + 4,
        sizeof l - 1,
    };
    for (size_t i = 0; i < sizeof inside / sizeof inside[0]; i++) {
        l.struct_size = (uint32_t)inside[i];
        CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_INVALID_ARGUMENT);
    }
    CHECK_EQ_U64(current, 0);
    l.struct_size = (uint32_t)offsetof(hg_limits, classes); /* at a boundary: has the pointer */
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_STALE);
    CHECK_EQ_U64(current, 5);
    l.struct_size = (uint32_t)sizeof l;

    /* A huge class-ceiling count: its second element is not one (refused), never an
     * allocation of the count. */
    hg_class_limits cl[2];
    memset(cl, 0, sizeof cl);
    cl[0].struct_size = (uint32_t)sizeof cl[0];
    cl[0].ceiling = HG_UNSET;
    cl[0].budget_ceiling = HG_UNSET;
    l.revision = 6;
    l.classes = cl;
    l.classes_len = (size_t)1 << 40;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_INVALID_ARGUMENT);
    l.classes_len = SIZE_MAX;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &l), HG_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_U64(hg_test_stats(bh).revision, 5);

    /* A class table with 0 or a huge number of classes. */
    hg_class k[1];
    CHECK_STATUS(hg_class_default(&k[0]), HG_STATUS_OK);
    hg_class_table t;
    memset(&t, 0, sizeof t);
    t.struct_size = (uint32_t)sizeof t;
    t.classes = k;
    hg_bulkhead *cb = NULL;
    for (size_t n = 0; n < 3; n++) {
        t.classes_len = n == 0 ? 0 : n == 1 ? ((size_t)1 << 40) : SIZE_MAX;
        CHECK_STATUS(hg_bulkhead_new_with_classes(&c, &t, NULL, NULL, &cb),
                     HG_STATUS_INVALID_ARGUMENT);
    }
    t.classes = NULL;
    t.classes_len = 1;
    CHECK_STATUS(hg_bulkhead_new_with_classes(&c, &t, NULL, NULL, &cb), HG_STATUS_NULL_PARAMETER);
    CHECK(cb == NULL);
    /* hg_class's last 4 bytes are a named reserved field, not tail padding: a newer caller's
     * field there is refused, never silently ignored. */
    CHECK_EQ_U64(offsetof(hg_class, reserved) + sizeof k[0].reserved, sizeof k[0]);
    CHECK_EQ_U64(k[0].reserved, 0);
    t.classes = k;
    t.classes_len = 1;
    k[0].reserved = 1;
    CHECK_STATUS(hg_bulkhead_new_with_classes(&c, &t, NULL, NULL, &cb),
                 HG_STATUS_INVALID_ARGUMENT);
    k[0].reserved = 0;
    CHECK_STATUS(hg_bulkhead_new_with_classes(&c, &t, NULL, NULL, &cb), HG_STATUS_OK);
    hg_bulkhead_free(cb);
    /* hg_config's last bytes are a named reserved field, not tail padding (a later field goes
     * after them: issue 17 appended the deadline group and `reserved2`, issue 18 the load
     * group and `reserved3`); not 0 is refused and named. */
    CHECK_EQ_U64(offsetof(hg_config, reserved3) + sizeof c.reserved3, sizeof c);
    CHECK_EQ_U64(offsetof(hg_config, reserved2) + sizeof c.reserved2,
                 offsetof(hg_config, shed_lag_threshold_ms));
    CHECK_EQ_U64(offsetof(hg_config, reserved) + sizeof c.reserved,
                 offsetof(hg_config, min_service_time_ms));
    hg_config rc = c;
    const char *bad_field = NULL;
    CHECK_STATUS(hg_config_check(&rc, &bad_field), HG_STATUS_OK);
    rc.reserved[6] = 1;
    CHECK_STATUS(hg_config_check(&rc, &bad_field), HG_STATUS_INVALID_ARGUMENT);
    CHECK(bad_field != NULL && strcmp(bad_field, "reserved") == 0);
    rc.struct_size = (uint32_t)offsetof(hg_config, reserved); /* ends before it: not read */
    CHECK_STATUS(hg_config_check(&rc, &bad_field), HG_STATUS_OK);
    /* A size that ends inside on_event (or its user data) is refused: never a callback
     * called through a truncated pointer. At the boundary before it: no on_event. */
    rc = c;
    rc.on_event = record;
    rc.on_event_user_data = &rc;
    rc.struct_size = (uint32_t)(offsetof(hg_config, on_event) + 4);
    CHECK_STATUS(hg_config_check(&rc, &bad_field), HG_STATUS_INVALID_ARGUMENT);
    CHECK(bad_field != NULL && strcmp(bad_field, "struct_size") == 0);
    CHECK_STATUS(hg_bulkhead_new(&rc, &cb), HG_STATUS_INVALID_ARGUMENT);
    rc.struct_size = (uint32_t)(offsetof(hg_config, on_event_user_data) + 4);
    CHECK_STATUS(hg_config_check(&rc, &bad_field), HG_STATUS_INVALID_ARGUMENT);
    rc.struct_size = (uint32_t)offsetof(hg_config, on_event);
    CHECK_STATUS(hg_config_check(&rc, &bad_field), HG_STATUS_OK);
    /* No tail padding in hg_event either: its last field ends the struct. */
    CHECK_EQ_U64(offsetof(hg_event, observe) + sizeof(uint32_t), sizeof(hg_event));

    /* Outputs: never written past the declared size (a canary after each). */
    struct {
        hg_would_admit w;
        uint8_t canary[16];
    } sw;
    memset(&sw, 0xab, sizeof sw);
    sw.w.struct_size = (uint32_t)offsetof(hg_would_admit, position);
    r.detail = NULL;
    r.timeout_ms = 0;
    CHECK_STATUS(hg_bulkhead_would_admit(bh, &r, &sw.w), HG_STATUS_OK);
    CHECK_EQ_U64(sw.w.struct_size, offsetof(hg_would_admit, position));
    CHECK_EQ_U64(sw.w.decision, HG_WOULD_REJECT);
    CHECK_EQ_U64(((uint8_t *)&sw.w)[offsetof(hg_would_admit, position)], 0xab);
    struct {
        hg_usage_report u;
        uint8_t canary[16];
    } su;
    memset(&su, 0xab, sizeof su);
    su.u.struct_size = (uint32_t)offsetof(hg_usage_report, cancel);
    CHECK_STATUS(hg_permit_report_usage(a, 0, 0, &su.u), HG_STATUS_OK);
    CHECK_EQ_U64(su.u.struct_size, offsetof(hg_usage_report, cancel));
    CHECK_EQ_U64(((uint8_t *)&su.u)[offsetof(hg_usage_report, cancel)], 0xab);
    /* The previous hg_stats (it ended at adaptive_long_rtt_ns): exactly that is written. */
    struct {
        hg_stats s;
        uint8_t canary[8];
    } ss;
    memset(&ss, 0xab, sizeof ss);
    ss.s.struct_size = (uint32_t)offsetof(hg_stats, revision);
    CHECK_STATUS(hg_bulkhead_stats(bh, &ss.s), HG_STATUS_OK);
    CHECK_EQ_U64(ss.s.struct_size, offsetof(hg_stats, revision));
    CHECK_EQ_U64(ss.s.active, 1);
    CHECK_EQ_U64(((uint8_t *)&ss.s)[offsetof(hg_stats, revision)], 0xab);

    /* A usage report whose out cannot be written changes nothing. */
    hg_usage_report bad;
    memset(&bad, 0, sizeof bad);
    CHECK_STATUS(hg_permit_report_usage(a, 3, 0, &bad), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_permit_report_usage(a, 2, 0, NULL), HG_STATUS_OK); /* not decreased */
    release(a);
    hg_bulkhead_free(bh);

    /* Registry overrides: a huge count is refused at the first element that is not one. */
    hg_config dc = config(1, 0, 0);
    hg_registry *reg = NULL;
    CHECK_STATUS(hg_registry_new(&dc, NULL, 0, 8, &reg), HG_STATUS_OK);
    hg_limits dl, ol;
    hg_limits_default(&dl);
    hg_limits_default(&ol);
    dl.revision = 1;
    hg_registry_key_limits kl[2];
    memset(kl, 0, sizeof kl);
    kl[0].struct_size = (uint32_t)sizeof kl[0];
    kl[0].key = "a";
    kl[0].key_len = 1;
    kl[0].limits = &ol;
    CHECK_STATUS(hg_registry_apply_limits(reg, &dl, kl, (size_t)1 << 40, NULL),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_registry_apply_limits(reg, &dl, kl, SIZE_MAX, NULL),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_registry_apply_limits(reg, &dl, kl, 1, NULL), HG_STATUS_OK);
    hg_registry_free(reg);

    /* hg_registry_new's overrides: a huge count is refused at the first entry that is not one
     * (here the second: no key), never an allocation of the count. */
    hg_registry_override ov[2];
    memset(ov, 0, sizeof ov);
    ov[0].key = "a";
    ov[0].key_len = 1;
    ov[0].config = &dc;
    reg = NULL;
    CHECK_STATUS(hg_registry_new(&dc, ov, (size_t)1 << 40, 8, &reg), HG_STATUS_NULL_PARAMETER);
    CHECK(reg == NULL);
    CHECK_STATUS(hg_registry_new(&dc, ov, 1, 8, &reg), HG_STATUS_OK);
    hg_registry_free(reg);
}

int main(int argc, char **argv) {
    (void)argc;
    RUN(request_struct);
    RUN(budget_and_detail);
    RUN(dry_run);
    RUN(blocking_and_async);
    RUN(usage);
    RUN(limits);
    RUN(classes_and_rates);
    RUN(observe_and_orphan);
    RUN(registry_global_cap);
    RUN(admission_events);
    RUN(malformed_sizes_and_counts);
    return hg_test_summary(argv[0]);
}
