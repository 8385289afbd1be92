/*
 * bad_input.c: every exported function with NULL for each pointer, zero and huge counts
 * (0, HG_MAX_PERMITS, HG_MAX_PERMITS + 1, UINT64_MAX) for config and weights, a double release,
 * a cancelled ticket cancelled again, struct_size too small (and larger than ours), non-UTF-8
 * registry keys, hg_origin_key with a buffer too small, and raw-pair over-release.
 *
 * Each bad call must return its documented status, leave its out-parameters alone, and leave
 * the bulkhead exactly as it was (no permit taken or minted, nothing counted): docs/design.md §11
 * "bad-input tests at every boundary", §3.1 "argument errors are never counted".
 */
#include <stddef.h>

#include "hgtest.h"

#define SENTINEL ((void *)0x5a5a)

static hg_stats before;

static void snapshot(const hg_bulkhead *bh) { before = hg_test_stats(bh); }

/* Nothing changed since snapshot(): same counters, nothing held, nothing counted. */
static void check_untouched_at(const hg_bulkhead *bh, int line) {
    hg_stats now = hg_test_stats(bh);
    int same = now.active == before.active && now.queued == before.queued &&
               now.available == before.available && now.limit == before.limit &&
               now.admitted_total == before.admitted_total &&
               now.granted_unclaimed == before.granted_unclaimed &&
               now.released_twice_total == before.released_twice_total &&
               now.leaked_total == before.leaked_total &&
               memcmp(now.rejected, before.rejected, sizeof now.rejected) == 0;
    hg_test_checks++;
    if (!same) {
        hg_test_failures++;
        fprintf(stderr, "bad_input.c:%d: the bulkhead changed (available %" PRId64 " -> %" PRId64
                        ", active %" PRIu64 " -> %" PRIu64 ")\n",
                line, before.available, now.available, before.active, now.active);
    }
}
#define CHECK_UNTOUCHED(bh) check_untouched_at(bh, __LINE__)

static int cb_calls;
static void counting_cb(hg_status s, hg_permit *p, void *u) {
    (void)u;
    cb_calls++;
    if (s == HG_STATUS_OK) {
        hg_permit_release(p);
        hg_permit_free(p);
    }
}

static void null_everywhere(void) {
    hg_config c;
    hg_stats st;
    hg_drain_result d;
    hg_bulkhead *bh = hg_test_new(2, 4, 1000);
    hg_bulkhead *bout = SENTINEL;
    hg_permit *p = SENTINEL;
    hg_ticket t = 77;
    snapshot(bh);

    CHECK_STATUS(hg_config_default(NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_config_default(&c), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_new(NULL, &bout), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_new(&c, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK(bout == SENTINEL);
    CHECK(hg_bulkhead_retain(NULL) == NULL);
    hg_bulkhead_free(NULL);

    CHECK_STATUS(hg_bulkhead_try_acquire(NULL, 1, &p), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_acquire_timeout(NULL, 1, 0, &p), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_acquire_timeout(bh, 1, 0, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_acquire_async(NULL, 1, 0, counting_cb, NULL, &p, &t),
                 HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, 0, NULL, NULL, &p, &t), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, 0, counting_cb, NULL, NULL, &t),
                 HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, 0, counting_cb, NULL, &p, NULL),
                 HG_STATUS_NULL_PARAMETER);
    CHECK(p == SENTINEL && t == 77);
    CHECK_STATUS(hg_ticket_cancel(NULL, 1), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_set_limit(NULL, 1), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_close(NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_drain(NULL, 0, &d), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_drain(bh, 0, NULL), HG_STATUS_NULL_PARAMETER);
    st.struct_size = sizeof st;
    CHECK_STATUS(hg_bulkhead_stats(NULL, &st), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_stats(bh, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_try_acquire_units(NULL, 1), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_release_units(NULL, 1), HG_STATUS_NULL_PARAMETER);

    CHECK_STATUS(hg_permit_release(NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_permit_release_outcome(NULL, HG_OUTCOME_SUCCESS), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_permit_release_partial(NULL, 1), HG_STATUS_NULL_PARAMETER);
    CHECK_EQ_U64(hg_permit_weight(NULL), 0);
    hg_permit_free(NULL);

    /* Registry. */
    hg_registry *reg = NULL, *rout = SENTINEL;
    hg_registry_override o = {"k", 1, &c};
    hg_registry_override o_null_key = {NULL, 1, &c};
    hg_registry_override o_null_cfg = {"k", 1, NULL};
    CHECK_STATUS(hg_registry_new(NULL, NULL, 0, 8, &rout), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_new(&c, NULL, 0, 8, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_new(&c, NULL, 1, 8, &rout), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_new(&c, &o_null_key, 1, 8, &rout), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_new(&c, &o_null_cfg, 1, 8, &rout), HG_STATUS_NULL_PARAMETER);
    CHECK(rout == SENTINEL);
    CHECK_STATUS(hg_registry_new(&c, &o, 1, 8, &reg), HG_STATUS_OK);
    CHECK(hg_registry_retain(NULL) == NULL);
    hg_registry_free(NULL);
    CHECK_STATUS(hg_registry_get(NULL, "k", 1, &bout), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_get(reg, NULL, 1, &bout), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_get(reg, "k", 1, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK(bout == SENTINEL);
    CHECK_STATUS(hg_registry_try_acquire(NULL, "k", 1, 1, &p), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_try_acquire(reg, NULL, 1, 1, &p), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_try_acquire(reg, "k", 1, 1, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_acquire_timeout(NULL, "k", 1, 1, 0, &p), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_acquire_timeout(reg, NULL, 1, 1, 0, &p), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_acquire_timeout(reg, "k", 1, 1, 0, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK(p == SENTINEL);
    CHECK_STATUS(hg_registry_stats(NULL, "k", 1, &st), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_stats(reg, NULL, 1, &st), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_stats(reg, "k", 1, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_close(NULL), HG_STATUS_NULL_PARAMETER);
    /* A NULL argument created no key ("k" is absent) ... */
    CHECK_STATUS(hg_registry_stats(reg, "k", 1, &st), HG_STATUS_INVALID_ARGUMENT);
    /* ... and, once the key exists, took no permit from it. */
    CHECK_STATUS(hg_registry_get(reg, "k", 1, &bout), HG_STATUS_OK);
    CHECK_STATUS(hg_registry_try_acquire(reg, "k", 1, 1, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_acquire_timeout(reg, "k", 1, 1, 0, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_bulkhead_acquire_async(bout, 1, 0, counting_cb, NULL, NULL, &t),
                 HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_stats(reg, "k", 1, &st), HG_STATUS_OK);
    CHECK_EQ_I64(st.available, (int64_t)st.limit);
    CHECK_EQ_U64(st.admitted_total, 0);
    hg_bulkhead_free(bout);
    hg_registry_free(reg);

    /* Origin key. */
    char buf[64];
    size_t n = 0;
    CHECK_STATUS(hg_origin_key(NULL, 8, buf, sizeof buf, &n), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_origin_key("http://a", 8, NULL, sizeof buf, &n), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_origin_key("http://a", 8, buf, sizeof buf, NULL), HG_STATUS_NULL_PARAMETER);

    /* Static strings: never NULL, except hg_reason_name for an unknown reason. */
    CHECK(hg_status_message(999999) != NULL);
    CHECK(strcmp(hg_status_message(999999), "unknown status") == 0);
    CHECK(hg_reason_name(HG_REASON_RATE_LIMIT + 1) == NULL);
    CHECK(hg_reason_name(UINT32_MAX) == NULL);
    CHECK(hg_version() != NULL);
    for (uint32_t r = 0; r <= HG_REASON_BUDGET_LIMIT; r++) CHECK(hg_reason_name(r) != NULL);

    CHECK(cb_calls == 0);
    CHECK_UNTOUCHED(bh);
    hg_bulkhead_free(bh);
}

static void zero_and_huge_config(void) {
    static const uint64_t bad_concurrent[] = {0, HG_MAX_PERMITS + 1, UINT64_MAX};
    static const uint64_t bad_queue[] = {HG_MAX_QUEUE + 1, (uint64_t)INT32_MAX, UINT32_MAX,
                                         UINT64_MAX};
    hg_config c;
    hg_bulkhead *bh;
    for (size_t i = 0; i < sizeof bad_concurrent / sizeof *bad_concurrent; i++) {
        hg_config_default(&c);
        c.max_concurrent = bad_concurrent[i];
        bh = SENTINEL;
        CHECK_STATUS(hg_bulkhead_new(&c, &bh), HG_STATUS_INVALID_ARGUMENT);
        CHECK(bh == SENTINEL);
    }
    for (size_t i = 0; i < sizeof bad_queue / sizeof *bad_queue; i++) {
        hg_config_default(&c);
        c.max_queue = bad_queue[i];
        bh = SENTINEL;
        CHECK_STATUS(hg_bulkhead_new(&c, &bh), HG_STATUS_INVALID_ARGUMENT);
        CHECK(bh == SENTINEL);
    }
    /* The edges themselves are accepted. */
    hg_config_default(&c);
    c.max_concurrent = HG_MAX_PERMITS;
    c.max_queue = 0;
    CHECK_STATUS(hg_bulkhead_new(&c, &bh), HG_STATUS_OK);
    hg_bulkhead_free(bh);
    c.max_concurrent = 1;
    CHECK_STATUS(hg_bulkhead_new(&c, &bh), HG_STATUS_OK);
    hg_bulkhead_free(bh);
    /* Every queue_timeout_ms is a valid duration (0, default, infinite, the largest finite). */
    static const uint64_t timeouts[] = {0, 1, HG_TIMEOUT_DEFAULT, HG_TIMEOUT_INFINITE,
                                        UINT64_MAX - 2};
    for (size_t i = 0; i < sizeof timeouts / sizeof *timeouts; i++) {
        hg_config_default(&c);
        c.queue_timeout_ms = timeouts[i];
        CHECK_STATUS(hg_bulkhead_new(&c, &bh), HG_STATUS_OK);
        hg_bulkhead_free(bh);
    }
    /* `enabled` is read as a byte: any non-zero value is true (never UB on foreign bytes). */
    hg_config_default(&c);
    c.max_concurrent = 1;
    memset(&c.enabled, 0x7f, 1);
    CHECK_STATUS(hg_bulkhead_new(&c, &bh), HG_STATUS_OK);
    hg_permit *a = NULL, *b = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &a), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &b), HG_STATUS_CONCURRENCY_LIMIT);
    hg_permit_free(a);
    hg_bulkhead_free(bh);
    /* A registry's defaults and overrides go through the same validation. */
    hg_registry *reg = SENTINEL;
    hg_config_default(&c);
    c.max_concurrent = 0;
    CHECK_STATUS(hg_registry_new(&c, NULL, 0, 8, &reg), HG_STATUS_INVALID_ARGUMENT);
    hg_config good;
    hg_config_default(&good);
    hg_registry_override o = {"k", 1, &c};
    CHECK_STATUS(hg_registry_new(&good, &o, 1, 8, &reg), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_registry_new(&good, NULL, 0, 0, &reg), HG_STATUS_INVALID_ARGUMENT);
    CHECK(reg == SENTINEL);
}

static void zero_and_huge_weights(void) {
    static const uint64_t bad[] = {0, 5, HG_MAX_PERMITS, HG_MAX_PERMITS + 1, UINT64_MAX};
    hg_bulkhead *bh = hg_test_new(4, 4, HG_TIMEOUT_INFINITE);
    hg_permit *held = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 2, &held), HG_STATUS_OK);
    snapshot(bh);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uint64_t w = bad[i];
        hg_permit *p = SENTINEL;
        hg_ticket t = 77;
        CHECK_STATUS(hg_bulkhead_try_acquire(bh, w, &p), HG_STATUS_INVALID_ARGUMENT);
        CHECK_STATUS(hg_bulkhead_acquire_timeout(bh, w, 0, &p), HG_STATUS_INVALID_ARGUMENT);
        CHECK_STATUS(hg_bulkhead_acquire_timeout(bh, w, HG_TIMEOUT_INFINITE, &p),
                     HG_STATUS_INVALID_ARGUMENT);
        CHECK_STATUS(hg_bulkhead_acquire_async(bh, w, HG_TIMEOUT_DEFAULT, counting_cb, NULL, &p, &t),
                     HG_STATUS_INVALID_ARGUMENT);
        CHECK_STATUS(hg_bulkhead_try_acquire_units(bh, w), HG_STATUS_INVALID_ARGUMENT);
        CHECK_STATUS(hg_bulkhead_release_units(bh, w), HG_STATUS_INVALID_ARGUMENT);
        CHECK_STATUS(hg_bulkhead_set_limit(bh, w), HG_STATUS_INVALID_ARGUMENT);
        CHECK_STATUS(hg_permit_release_partial(held, w == 0 ? 0 : w), HG_STATUS_INVALID_ARGUMENT);
        CHECK(p == SENTINEL && t == 77);
        CHECK_UNTOUCHED(bh);
    }
    CHECK_EQ_U64(hg_permit_weight(held), 2);
    /* An unknown outcome is an argument error; the permit stays held (3 is
     * HG_OUTCOME_OVERLOAD since the policies; 4 is the first unknown one). */
    CHECK_STATUS(hg_permit_release_outcome(held, HG_OUTCOME_OVERLOAD + 1),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_permit_release_outcome(held, UINT32_MAX), HG_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_U64(hg_permit_weight(held), 2);
    CHECK_UNTOUCHED(bh);
    CHECK(cb_calls == 0);
    CHECK_STATUS(hg_permit_release(held), HG_STATUS_OK);
    hg_permit_free(held);
    hg_bulkhead_free(bh);
}

static void double_release(void) {
    hg_bulkhead *bh = hg_test_new(2, 0, 0);
    hg_permit *p = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 2, &p), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release(p), HG_STATUS_OK);
    CHECK_EQ_U64(hg_permit_weight(p), 0);
    CHECK_STATUS(hg_permit_release(p), HG_STATUS_ALREADY_RELEASED);
    CHECK_STATUS(hg_permit_release_outcome(p, HG_OUTCOME_FAILURE), HG_STATUS_ALREADY_RELEASED);
    CHECK_STATUS(hg_permit_release_partial(p, 1), HG_STATUS_ALREADY_RELEASED);
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_I64(s.available, 2); /* never an extra permit (I9) */
    CHECK_EQ_U64(s.active, 0);
    /* hg_permit_release and _outcome count; release_partial of a released permit reports it
     * too, but it is not a "release" call (docs/design.md §8.1 counts release() calls). */
    CHECK_EQ_U64(s.released_twice_total, 2);
    hg_permit_free(p); /* already released: frees silently, counts nothing */
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.released_twice_total, 2);
    CHECK_EQ_U64(s.leaked_total, 0);

    /* A permit outlives its bulkhead's last reference; a double release stays a no-op. */
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_OK);
    hg_bulkhead_free(bh);
    CHECK_STATUS(hg_permit_release(p), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release(p), HG_STATUS_ALREADY_RELEASED);
    hg_permit_free(p);
}

static hg_status last_status;
static int last_calls;
static void recording_cb(hg_status s, hg_permit *p, void *u) {
    (void)u;
    last_calls++;
    last_status = s;
    CHECK(p == NULL || s == HG_STATUS_OK);
    if (p != NULL) hg_permit_free(p);
}

static void cancelled_ticket(void) {
    hg_bulkhead *bh = hg_test_new(1, 4, HG_TIMEOUT_INFINITE);
    hg_permit *h = NULL, *p = SENTINEL;
    hg_ticket t = 0;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &h), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, HG_TIMEOUT_DEFAULT, recording_cb, NULL, &p, &t),
                 HG_STATUS_QUEUED);
    CHECK(p == SENTINEL);
    CHECK_STATUS(hg_ticket_cancel(bh, t), HG_STATUS_OK);
    CHECK(last_calls == 1 && last_status == HG_STATUS_ABORTED);
    CHECK_STATUS(hg_ticket_cancel(bh, t), HG_STATUS_ALREADY_SETTLED);
    CHECK(last_calls == 1);
    /* A ticket never issued, and one of another bulkhead, are "settled", never acted on. */
    CHECK_STATUS(hg_ticket_cancel(bh, t + 1), HG_STATUS_ALREADY_SETTLED);
    CHECK_STATUS(hg_ticket_cancel(bh, UINT64_MAX), HG_STATUS_ALREADY_SETTLED);
    hg_bulkhead *other = hg_test_new(1, 0, 0);
    CHECK_STATUS(hg_ticket_cancel(other, t), HG_STATUS_ALREADY_SETTLED);
    hg_bulkhead_free(other);
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.queued, 0);
    CHECK_EQ_U64(s.rejected[HG_REASON_ABORTED], 1);
    CHECK_STATUS(hg_permit_release(h), HG_STATUS_OK);
    s = hg_test_stats(bh);
    CHECK_EQ_I64(s.available, 1); /* the cancelled waiter was never granted */
    CHECK_EQ_U64(s.admitted_total, 1);
    CHECK(last_calls == 1);
    hg_permit_free(h);
    hg_bulkhead_free(bh);
}

/* The fuzz work's finding 4 (issue 21): the hg_*_default functions wrote this library's whole
 * struct whatever the caller's size, so a binary built against an older, smaller header was
 * written past its struct. The header's hg_*_default(p) macros now pass sizeof *p to the
 * _sized functions, which write at most that many bytes. Each struct is filled in a heap
 * buffer of exactly an older size (ASan and valgrind see any byte written past it). */
static void defaults_never_write_past_the_callers_size(void) {
    /* The first header's hg_config ended after `enabled`. */
    size_t old = offsetof(hg_config, enabled) + 1;
    hg_config *c = malloc(old);
    CHECK(c != NULL);
    CHECK_STATUS(hg_config_default_sized(c, old), HG_STATUS_OK);
    CHECK_EQ_U64(c->struct_size, old);
    CHECK_EQ_U64(c->max_concurrent, 10);
    hg_bulkhead *bh = NULL;
    CHECK_STATUS(hg_bulkhead_new(c, &bh), HG_STATUS_OK);
    hg_bulkhead_free(bh);
    free(c);
    /* Below the first version: refused, nothing written. */
    unsigned char raw[16];
    memset(raw, 0xEE, sizeof raw);
    CHECK_STATUS(hg_config_default_sized((hg_config *)(void *)raw, sizeof raw),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK(raw[0] == 0xEE && raw[15] == 0xEE);
    CHECK_STATUS(hg_config_default_sized(NULL, sizeof(hg_config)), HG_STATUS_NULL_PARAMETER);
    /* hg_request: the first version ended after `timeout_ms`. */
    old = offsetof(hg_request, timeout_ms) + sizeof(uint64_t);
    hg_request *r = malloc(old);
    CHECK(r != NULL);
    CHECK_STATUS(hg_request_default_sized(r, old), HG_STATUS_OK);
    CHECK_EQ_U64(r->struct_size, old);
    CHECK_EQ_U64(r->weight, 1);
    free(r);
    /* hg_limits: the first version ended before `current_revision`. */
    old = offsetof(hg_limits, current_revision);
    hg_limits *l = malloc(old);
    CHECK(l != NULL);
    CHECK_STATUS(hg_limits_default_sized(l, old), HG_STATUS_OK);
    CHECK_EQ_U64(l->struct_size, old);
    CHECK_EQ_U64(l->limit, HG_UNSET);
    free(l);
    /* A newer caller's bigger struct: this library's fields, struct_size says how many. */
    struct {
        hg_class c;
        uint64_t future_field;
    } bigger;
    bigger.future_field = 12345;
    CHECK_STATUS(hg_class_default_sized(&bigger.c, sizeof bigger), HG_STATUS_OK);
    CHECK_EQ_U64(bigger.c.struct_size, sizeof(hg_class));
    CHECK_EQ_U64(bigger.future_field, 12345);
    /* The macro passes the caller's sizeof. */
    hg_class k;
    memset(&k, 0xEE, sizeof k);
    CHECK_STATUS(hg_class_default(&k), HG_STATUS_OK);
    CHECK_EQ_U64(k.struct_size, sizeof k);
    CHECK_EQ_U64(k.ceiling, HG_UNSET);
}

static void struct_size_checks(void) {
    hg_config c;
    hg_bulkhead *bh = SENTINEL;
    hg_config_default(&c);
    CHECK_EQ_U64(c.struct_size, sizeof(hg_config));
    /* Too small to hold the last field: rejected, nothing created. */
    static const uint32_t small[] = {0, 1, 4, 8, (uint32_t)offsetof(hg_config, enabled)};
    for (size_t i = 0; i < sizeof small / sizeof *small; i++) {
        c.struct_size = small[i];
        CHECK_STATUS(hg_bulkhead_new(&c, &bh), HG_STATUS_INVALID_ARGUMENT);
        hg_registry *reg = SENTINEL;
        CHECK_STATUS(hg_registry_new(&c, NULL, 0, 8, &reg), HG_STATUS_INVALID_ARGUMENT);
        CHECK(reg == SENTINEL);
    }
    CHECK(bh == SENTINEL);
    /* A larger struct (a caller built against a newer header) is read up to our size. */
    struct {
        hg_config c;
        uint64_t future_field;
    } bigger;
    hg_config_default(&bigger.c);
    bigger.c.struct_size = sizeof bigger;
    bigger.c.max_concurrent = 3;
    bigger.future_field = 12345;
    CHECK_STATUS(hg_bulkhead_new(&bigger.c, &bh), HG_STATUS_OK);
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.max_concurrent, 3);

    /* hg_stats: below 4 bytes rejected; otherwise exactly struct_size bytes are written. */
    unsigned char raw[sizeof(hg_stats) + 16];
    for (uint32_t size = 0; size < 4; size++) {
        memset(raw, 0xEE, sizeof raw);
        memcpy(raw, &size, sizeof size);
        CHECK_STATUS(hg_bulkhead_stats(bh, (hg_stats *)(void *)raw), HG_STATUS_INVALID_ARGUMENT);
    }
    static const uint32_t sizes[] = {4, 8, (uint32_t)offsetof(hg_stats, queued),
                                     (uint32_t)offsetof(hg_stats, rejected) + 8,
                                     (uint32_t)sizeof(hg_stats)};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        uint32_t size = sizes[i];
        memset(raw, 0xEE, sizeof raw);
        memcpy(raw, &size, sizeof size);
        CHECK_STATUS(hg_bulkhead_stats(bh, (hg_stats *)(void *)raw), HG_STATUS_OK);
        int tail_untouched = 1;
        for (size_t k = size; k < sizeof raw; k++) tail_untouched &= raw[k] == 0xEE;
        CHECK(tail_untouched);
    }
    /* A larger hg_stats: ours is written, the caller's extra bytes are left alone. */
    memset(raw, 0xEE, sizeof raw);
    uint32_t big = (uint32_t)sizeof raw;
    memcpy(raw, &big, sizeof big);
    CHECK_STATUS(hg_bulkhead_stats(bh, (hg_stats *)(void *)raw), HG_STATUS_OK);
    CHECK(raw[sizeof(hg_stats)] == 0xEE && raw[sizeof raw - 1] == 0xEE);
    hg_stats got;
    memcpy(&got, raw, sizeof got);
    CHECK_EQ_U64(got.max_concurrent, 3);
    /* Which size did the library fill? It echoes the caller's size back, so a newer caller
     * cannot tell that its extra fields were not written (see the report; not asserted). */
    printf("     note: a %u-byte hg_stats comes back with struct_size %u (library writes %zu)\n",
           big, got.struct_size, sizeof(hg_stats));
    hg_bulkhead_free(bh);
}

static void non_utf8_keys(void) {
    static const char bad[] = "\xff\xfe\x80k";
    const size_t n = sizeof bad - 1;
    hg_config c;
    hg_config_default(&c);
    hg_registry *reg = SENTINEL;
    hg_registry_override o = {bad, n, &c};
    CHECK_STATUS(hg_registry_new(&c, &o, 1, 8, &reg), HG_STATUS_INVALID_ARGUMENT);
    CHECK(reg == SENTINEL);
    CHECK_STATUS(hg_registry_new(&c, NULL, 0, 8, &reg), HG_STATUS_OK);
    hg_bulkhead *bh = SENTINEL;
    hg_permit *p = SENTINEL;
    hg_stats s;
    s.struct_size = sizeof s;
    CHECK_STATUS(hg_registry_get(reg, bad, n, &bh), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_registry_try_acquire(reg, bad, n, 1, &p), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_registry_acquire_timeout(reg, bad, n, 1, 0, &p), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_registry_stats(reg, bad, n, &s), HG_STATUS_INVALID_ARGUMENT);
    CHECK(bh == SENTINEL && p == SENTINEL);
    /* A truncated multi-byte sequence (valid prefix, cut by key_len) is rejected too. */
    const char *euro = "\xe2\x82\xac"; /* U+20AC */
    CHECK_STATUS(hg_registry_try_acquire(reg, euro, 2, 1, &p), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_registry_try_acquire(reg, euro, 3, 1, &p), HG_STATUS_OK);
    hg_permit_free(p);
    /* Keys are bytes, not C strings: an embedded NUL is part of the key. */
    CHECK_STATUS(hg_registry_try_acquire(reg, "a\0b", 3, 1, &p), HG_STATUS_OK);
    CHECK_STATUS(hg_registry_stats(reg, "a\0b", 3, &s), HG_STATUS_OK);
    CHECK_EQ_U64(s.active, 1);
    CHECK_STATUS(hg_registry_stats(reg, "a", 1, &s), HG_STATUS_INVALID_ARGUMENT); /* absent */
    hg_permit_free(p);
    /* The URL of hg_origin_key: non-UTF-8 is an argument error. */
    char buf[64];
    size_t len = 0;
    CHECK_STATUS(hg_origin_key("http://\xff.example", 15, buf, sizeof buf, &len),
                 HG_STATUS_INVALID_ARGUMENT);
    hg_registry_free(reg);
}

static void origin_key_buffers(void) {
    const char *url = "https://Example.COM/path";
    const char *want = "https://example.com:443";
    const size_t want_len = strlen(want);
    char buf[64];
    size_t len;

    for (size_t cap = 0; cap <= want_len; cap++) { /* every size without room for the NUL */
        memset(buf, '#', sizeof buf);
        len = 0;
        CHECK_STATUS(hg_origin_key(url, strlen(url), buf, cap, &len), HG_STATUS_INVALID_ARGUMENT);
        CHECK_EQ_U64(len, want_len); /* how much is needed (plus 1 for the NUL) */
        CHECK(buf[0] == '#');        /* nothing written */
    }
    memset(buf, '#', sizeof buf);
    CHECK_STATUS(hg_origin_key(url, strlen(url), buf, want_len + 1, &len), HG_STATUS_OK);
    CHECK(strcmp(buf, want) == 0);
    CHECK(buf[want_len + 1] == '#'); /* not one byte more */
    /* No origin: an argument error. */
    CHECK_STATUS(hg_origin_key("not a url", 9, buf, sizeof buf, &len), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_origin_key("", 0, buf, sizeof buf, &len), HG_STATUS_INVALID_ARGUMENT);
    /* The length is honoured: bytes past url_len are never read. */
    CHECK_STATUS(hg_origin_key("http://a.b/GARBAGE", 10, buf, sizeof buf, &len), HG_STATUS_OK);
    CHECK(strcmp(buf, "http://a.b:80") == 0);
}

static void raw_pair_over_release(void) {
    hg_bulkhead *bh = hg_test_new(3, 0, 0);
    snapshot(bh);
    CHECK_STATUS(hg_bulkhead_release_units(bh, 1), HG_STATUS_INVALID_ARGUMENT); /* none taken */
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_I64(s.available, 3);
    CHECK_EQ_U64(s.released_twice_total, 1); /* refused and counted, nothing else changed */
    CHECK_STATUS(hg_bulkhead_try_acquire_units(bh, 2), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_release_units(bh, 3), HG_STATUS_INVALID_ARGUMENT); /* 1 too many */
    s = hg_test_stats(bh);
    CHECK_EQ_I64(s.available, 1);
    CHECK_EQ_U64(s.active, 2);
    CHECK_EQ_U64(s.released_twice_total, 2);
    CHECK_STATUS(hg_bulkhead_release_units(bh, 2), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_release_units(bh, 1), HG_STATUS_INVALID_ARGUMENT); /* double */
    s = hg_test_stats(bh);
    CHECK_EQ_I64(s.available, 3);
    CHECK_EQ_U64(s.admitted_total, 1);
    CHECK_EQ_U64(s.released_twice_total, 3);
    /* After a shrink: what was handed out comes back, available goes -2 -> 1. */
    CHECK_STATUS(hg_bulkhead_try_acquire_units(bh, 3), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_set_limit(bh, 1), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_release_units(bh, 3), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_release_units(bh, 1), HG_STATUS_INVALID_ARGUMENT);
    s = hg_test_stats(bh);
    CHECK_EQ_I64(s.available, 1);
    CHECK_EQ_U64(s.limit, 1);
    hg_bulkhead_free(bh);
}

/* Issue 13 bug 3: the raw release must not return a permit handle's units. Limit 2: take one
 * permit, release_units(1) is refused (and counted), so only one more permit fits; after all are
 * released available == limit. */
static void raw_release_of_a_handles_permit(void) {
    hg_bulkhead *bh = hg_test_new(2, 0, 0);
    hg_permit *a = NULL, *b = NULL, *c = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &a), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_release_units(bh, 1), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &b), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &c), HG_STATUS_CONCURRENCY_LIMIT);
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.active, 2);
    CHECK_EQ_I64(s.available, 0);
    CHECK_STATUS(hg_permit_release(a), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release(b), HG_STATUS_OK);
    hg_permit_free(a);
    hg_permit_free(b);
    s = hg_test_stats(bh);
    CHECK_EQ_I64(s.available, 2);
    CHECK_EQ_U64(s.limit, 2);
    CHECK_EQ_U64(s.released_twice_total, 1);
    hg_bulkhead_free(bh);
}

static void closed_bulkhead(void) {
    hg_bulkhead *bh = hg_test_new(1, 4, HG_TIMEOUT_INFINITE);
    hg_permit *h = NULL, *p = SENTINEL;
    hg_ticket t;
    last_calls = 0;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &h), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, HG_TIMEOUT_DEFAULT, recording_cb, NULL, &p, &t),
                 HG_STATUS_QUEUED);
    CHECK_STATUS(hg_bulkhead_close(bh), HG_STATUS_OK);
    CHECK(last_calls == 1 && last_status == HG_STATUS_SHUTDOWN);
    CHECK_STATUS(hg_bulkhead_close(bh), HG_STATUS_OK); /* idempotent */
    CHECK_STATUS(hg_ticket_cancel(bh, t), HG_STATUS_ALREADY_SETTLED);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_SHUTDOWN);
    CHECK_STATUS(hg_bulkhead_acquire_timeout(bh, 1, HG_TIMEOUT_INFINITE, &p), HG_STATUS_SHUTDOWN);
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, 5, recording_cb, NULL, &p, &t),
                 HG_STATUS_SHUTDOWN);
    CHECK_STATUS(hg_bulkhead_try_acquire_units(bh, 1), HG_STATUS_SHUTDOWN);
    CHECK(p == SENTINEL && last_calls == 1);
    /* In-flight work completes normally. */
    CHECK_STATUS(hg_permit_release(h), HG_STATUS_OK);
    hg_permit_free(h);
    hg_drain_result d;
    CHECK_STATUS(hg_bulkhead_drain(bh, HG_TIMEOUT_INFINITE, &d), HG_STATUS_OK);
    CHECK(d.drained);
    hg_bulkhead_free(bh);
}

int main(int argc, char **argv) {
    (void)argc;
    RUN(null_everywhere);
    RUN(zero_and_huge_config);
    RUN(zero_and_huge_weights);
    RUN(double_release);
    RUN(cancelled_ticket);
    RUN(struct_size_checks);
    RUN(defaults_never_write_past_the_callers_size);
    RUN(non_utf8_keys);
    RUN(origin_key_buffers);
    RUN(raw_pair_over_release);
    RUN(raw_release_of_a_handles_permit);
    RUN(closed_bulkhead);
    return hg_test_summary(argv[0]);
}
