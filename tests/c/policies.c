/*
 * policies.c: the policies of docs/design.md §6 through the C ABI (issue 8): the appended hg_config
 * fields, the guarded-call steps in every acquire path, outcomes, call timeouts, the
 * on_state_change callback and the circuit / adaptive parts of hg_stats.
 *
 *   C22  a runtime resize through hg_bulkhead_set_limit never over-grants (plain and guarded)
 *   C24  10 concurrent calls while half-open: exactly 1 admitted, 9 HG_STATUS_CIRCUIT_OPEN,
 *        3 cycles on the host clock hook (hg_bulkhead_new_with_clock)
 *   C21  cancellations (HG_OUTCOME_IGNORED, hg_ticket_cancel, hg_permit_free) never shrink
 *        an AIMD limit: 0 decreases; genuine failures then shrink it, never below the floor
 *
 * Time is virtual (a host clock the test owns); nothing is timed.
 */
#define _GNU_SOURCE /* pthread_barrier_t under -std=c11 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "hgtest.h"

#define SENTINEL ((void *)0x5a5a)

/* ---- a virtual host clock ---------------------------------------------------------------- */

static _Atomic uint64_t now_ns;

static uint64_t vclock(void *user_data) {
    (void)user_data;
    return atomic_load(&now_ns);
}

static void advance_ms(uint64_t ms) { atomic_fetch_add(&now_ns, ms * 1000000u); }

/* ---- the on_state_change log ------------------------------------------------------------- */

typedef struct {
    char key[64];
    size_t key_len;
    int key_null;
    hg_circuit_state old_state, new_state;
    pthread_t thread;
} event;

typedef struct {
    pthread_mutex_t mu;
    int n;
    event ev[64];
} event_log;

static void log_event(void *user_data, const char *key, size_t key_len, hg_circuit_state old_state,
                      hg_circuit_state new_state) {
    event_log *l = user_data;
    pthread_mutex_lock(&l->mu);
    if (l->n < 64) {
        event *e = &l->ev[l->n++];
        e->key_null = key == NULL;
        e->key_len = key_len;
        memset(e->key, 0, sizeof e->key);
        if (key != NULL && key_len < sizeof e->key) memcpy(e->key, key, key_len);
        e->old_state = old_state;
        e->new_state = new_state;
        e->thread = pthread_self();
    }
    pthread_mutex_unlock(&l->mu);
}

static void log_init(event_log *l) {
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->mu, NULL);
}

#define CHECK_EVENT(l, i, from, to)                                                      \
    do {                                                                                 \
        CHECK((l)->n > (i));                                                             \
        CHECK_EQ_U64((l)->ev[i].old_state, from);                                        \
        CHECK_EQ_U64((l)->ev[i].new_state, to);                                          \
    } while (0)

/* ---- helpers ------------------------------------------------------------------------------ */

static hg_config breaker_config(uint64_t max_concurrent, uint32_t failure_threshold,
                                uint64_t open_ms) {
    hg_config c;
    hg_config_default(&c);
    c.max_concurrent = max_concurrent;
    c.breaker_enabled = true;
    c.breaker_failure_threshold = failure_threshold;
    c.breaker_open_duration_ms = open_ms;
    return c;
}

static hg_bulkhead *new_clocked(const hg_config *c) {
    hg_bulkhead *bh = NULL;
    hg_status s = hg_bulkhead_new_with_clock(c, vclock, NULL, &bh);
    if (s != HG_STATUS_OK) {
        fprintf(stderr, "hg_bulkhead_new_with_clock -> %u\n", (unsigned)s);
        abort();
    }
    return bh;
}

/* One failed call through the permit API. */
static void fail_once(hg_bulkhead *bh) {
    hg_permit *p = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release_outcome(p, HG_OUTCOME_FAILURE), HG_STATUS_OK);
    hg_permit_free(p);
}

typedef struct {
    atomic_int calls;
    hg_status status;
    hg_permit *permit;
} rec;

static void rec_cb(hg_status status, hg_permit *permit, void *user_data) {
    rec *r = user_data;
    r->status = status;
    r->permit = permit;
    atomic_fetch_add(&r->calls, 1);
}

/* ---- C22 ----------------------------------------------------------------------------------- */

static void c22_recipe(int guarded) {
    hg_config c;
    hg_config_default(&c);
    c.max_concurrent = 4;
    c.queue_timeout_ms = HG_TIMEOUT_INFINITE;
    if (guarded) {
        c.breaker_enabled = true; /* the guarded path must not disturb a resize */
    }
    hg_bulkhead *bh = new_clocked(&c);
    CHECK_STATUS(hg_bulkhead_set_limit(bh, 2), HG_STATUS_OK);
    hg_permit *a = NULL, *b = NULL, *tmp = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &a), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &b), HG_STATUS_OK);
    rec rc = {0}, rd = {0};
    hg_ticket tc = 0, td = 0;
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, HG_TIMEOUT_DEFAULT, rec_cb, &rc, &tmp, &tc),
                 HG_STATUS_QUEUED);
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, HG_TIMEOUT_DEFAULT, rec_cb, &rd, &tmp, &td),
                 HG_STATUS_QUEUED);
    /* Step 2: shrink below in-use: nothing pre-empted. */
    CHECK_STATUS(hg_bulkhead_set_limit(bh, 1), HG_STATUS_OK);
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.active, 2);
    CHECK_EQ_I64(s.available, -1);
    /* Step 3: back to 2: no waiter admitted (in use 2 == limit 2). */
    CHECK_STATUS(hg_bulkhead_set_limit(bh, 2), HG_STATUS_OK);
    CHECK_EQ_U64(atomic_load(&rc.calls) + atomic_load(&rd.calls), 0);
    /* Step 4: A releases: exactly C (FIFO). */
    CHECK_STATUS(hg_permit_release(a), HG_STATUS_OK);
    CHECK_EQ_U64(atomic_load(&rc.calls), 1);
    CHECK_EQ_U64(atomic_load(&rd.calls), 0);
    CHECK_EQ_U64(rc.status, HG_STATUS_OK);
    CHECK_EQ_U64(hg_test_stats(bh).active, 2);
    /* Step 5: up to 4: D admitted at once; in use 3, available 1. */
    CHECK_STATUS(hg_bulkhead_set_limit(bh, 4), HG_STATUS_OK);
    CHECK_EQ_U64(atomic_load(&rd.calls), 1);
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.active, 3);
    CHECK_EQ_I64(s.available, 1);
    /* Step 6: down to 1, then everyone releases: no admission while in use >= 1. */
    CHECK_STATUS(hg_bulkhead_set_limit(bh, 1), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &tmp), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK_STATUS(hg_permit_release(b), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release(rc.permit), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &tmp), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK_STATUS(hg_permit_release(rd.permit), HG_STATUS_OK);
    s = hg_test_stats(bh);
    CHECK_EQ_I64(s.available, 1);
    CHECK_EQ_U64(s.queued, 0);
    /* Above max_concurrent stays invalid. */
    CHECK_STATUS(hg_bulkhead_set_limit(bh, 5), HG_STATUS_INVALID_ARGUMENT);
    hg_permit_free(a);
    hg_permit_free(b);
    hg_permit_free(rc.permit);
    hg_permit_free(rd.permit);
    CHECK_I2(bh);
    hg_bulkhead_free(bh);

    /* Step 7: 1 -> 3 -> 1 on a fresh limiter: maximum concurrency afterwards is 1. */
    c.max_concurrent = 3;
    bh = new_clocked(&c);
    CHECK_STATUS(hg_bulkhead_set_limit(bh, 1), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_set_limit(bh, 3), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_set_limit(bh, 1), HG_STATUS_OK);
    hg_permit *x = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &x), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &tmp), HG_STATUS_CONCURRENCY_LIMIT);
    hg_permit_free(x);
    hg_bulkhead_free(bh);
}

static void c22_resize_through_set_limit(void) {
    c22_recipe(0);
    c22_recipe(1);
}

/* ---- C24 ----------------------------------------------------------------------------------- */

typedef struct {
    hg_bulkhead *bh;
    pthread_barrier_t *go;
    hg_status status;
    hg_permit *permit;
} caller;

static void *concurrent_call(void *arg) {
    caller *k = arg;
    pthread_barrier_wait(k->go);
    k->status = hg_bulkhead_try_acquire(k->bh, 1, &k->permit);
    return NULL;
}

/* 10 calls at once; returns how many were admitted (their permits in `admitted`). */
static int ten_at_once(hg_bulkhead *bh, hg_permit **admitted, int *circuit_open) {
    pthread_t t[10];
    caller k[10];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 10);
    for (int i = 0; i < 10; i++) {
        k[i] = (caller){bh, &go, HG_STATUS_PANIC, NULL};
        pthread_create(&t[i], NULL, concurrent_call, &k[i]);
    }
    int n = 0;
    *circuit_open = 0;
    for (int i = 0; i < 10; i++) {
        pthread_join(t[i], NULL);
        if (k[i].status == HG_STATUS_OK) {
            admitted[n++] = k[i].permit;
        } else {
            CHECK_EQ_U64(k[i].status, HG_STATUS_CIRCUIT_OPEN);
            *circuit_open += 1;
        }
    }
    pthread_barrier_destroy(&go);
    return n;
}

static void c24_half_open_admits_exactly_one(void) {
    atomic_store(&now_ns, 0);
    event_log log;
    log_init(&log);
    hg_config c = breaker_config(20, 5, 100);
    c.breaker_half_open_max_calls = 1;
    c.on_state_change = log_event;
    c.on_state_change_user_data = &log;
    hg_bulkhead *bh = new_clocked(&c);
    advance_ms(10);
    for (int i = 0; i < 5; i++) fail_once(bh);
    CHECK_EQ_U64(hg_test_stats(bh).circuit_state, HG_CIRCUIT_OPEN);
    hg_permit *admitted[10];
    int rejected;
    for (int cycle = 1; cycle <= 3; cycle++) {
        advance_ms(100); /* t = 110, 210, 310 ms: half-open (committed by the first call) */
        int n = ten_at_once(bh, admitted, &rejected);
        CHECK_EQ_U64(n, 1);
        CHECK_EQ_U64(rejected, 9);
        if (cycle < 3) {
            /* The backend is still down: the trial fails and re-opens at once. */
            CHECK_STATUS(hg_permit_release_outcome(admitted[0], HG_OUTCOME_FAILURE),
                         HG_STATUS_OK);
            CHECK_EQ_U64(hg_test_stats(bh).circuit_state, HG_CIRCUIT_OPEN);
        } else {
            CHECK_STATUS(hg_permit_release(admitted[0]), HG_STATUS_OK); /* success */
            CHECK_EQ_U64(hg_test_stats(bh).circuit_state, HG_CIRCUIT_CLOSED);
        }
        for (int i = 0; i < n; i++) hg_permit_free(admitted[i]);
    }
    /* Closed again: the next 10 concurrent calls all reach the backend. */
    int n = ten_at_once(bh, admitted, &rejected);
    CHECK_EQ_U64(n, 10);
    for (int i = 0; i < n; i++) {
        CHECK_STATUS(hg_permit_release(admitted[i]), HG_STATUS_OK);
        hg_permit_free(admitted[i]);
    }
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.rejected[HG_REASON_CIRCUIT_OPEN], 27);
    CHECK_EQ_U64(s.circuit_generation, 7);
    /* The transitions, in order. */
    CHECK_EQ_U64(log.n, 7);
    CHECK_EVENT(&log, 0, HG_CIRCUIT_CLOSED, HG_CIRCUIT_OPEN);
    CHECK_EVENT(&log, 1, HG_CIRCUIT_OPEN, HG_CIRCUIT_HALF_OPEN);
    CHECK_EVENT(&log, 2, HG_CIRCUIT_HALF_OPEN, HG_CIRCUIT_OPEN);
    CHECK_EVENT(&log, 3, HG_CIRCUIT_OPEN, HG_CIRCUIT_HALF_OPEN);
    CHECK_EVENT(&log, 4, HG_CIRCUIT_HALF_OPEN, HG_CIRCUIT_OPEN);
    CHECK_EVENT(&log, 5, HG_CIRCUIT_OPEN, HG_CIRCUIT_HALF_OPEN);
    CHECK_EVENT(&log, 6, HG_CIRCUIT_HALF_OPEN, HG_CIRCUIT_CLOSED);
    CHECK_I2(bh);
    hg_bulkhead_free(bh);
    pthread_mutex_destroy(&log.mu);
}

/* ---- C21 ----------------------------------------------------------------------------------- */

static void c21_cancellations_never_shrink_the_limit(void) {
    atomic_store(&now_ns, 0);
    hg_config c;
    hg_config_default(&c);
    c.max_concurrent = 200;
    c.max_queue = 10;
    c.queue_timeout_ms = HG_TIMEOUT_INFINITE;
    c.adaptive_enabled = true;
    c.adaptive_algorithm = HG_ADAPTIVE_AIMD;
    c.adaptive_initial_limit = 20;
    c.adaptive_min_limit = 1;
    c.adaptive_max_limit = 200;
    c.adaptive_decrease_ratio = 0.9;
    c.adaptive_target_latency_ms = 100;
    hg_bulkhead *bh = new_clocked(&c);
    hg_stats s = hg_test_stats(bh);
    CHECK(s.adaptive_present);
    CHECK_EQ_U64(s.adaptive_algorithm, HG_ADAPTIVE_AIMD);
    CHECK_EQ_U64(s.adaptive_limit, 20);
    /* 1000 requests at offered concurrency 15, RTT 10 ms; every other one cancelled. */
    uint64_t successes = 0;
    for (int round = 0; round < 1000 / 15 + 1; round++) {
        hg_permit *p[15];
        for (int i = 0; i < 15; i++) CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &p[i]), HG_STATUS_OK);
        advance_ms(1);
        for (int i = 0; i < 15; i += 2) {
            CHECK_STATUS(hg_permit_release_outcome(p[i], HG_OUTCOME_IGNORED), HG_STATUS_OK);
        }
        advance_ms(9);
        for (int i = 1; i < 15; i += 2) {
            CHECK_STATUS(hg_permit_release(p[i]), HG_STATUS_OK);
            successes++;
        }
        for (int i = 0; i < 15; i++) hg_permit_free(p[i]);
    }
    /* Other cancellations: a held permit freed, a queued acquire cancelled, a polled one. */
    hg_permit *held = NULL, *tmp = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &held), HG_STATUS_OK);
    hg_permit_free(held); /* ignored */
    uint64_t limit = hg_test_stats(bh).limit;
    CHECK_STATUS(hg_bulkhead_set_limit(bh, 1), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &held), HG_STATUS_OK);
    rec r = {0};
    hg_ticket t1 = 0, t2 = 0;
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, HG_TIMEOUT_DEFAULT, rec_cb, &r, &tmp, &t1),
                 HG_STATUS_QUEUED);
    CHECK_STATUS(hg_bulkhead_enqueue(bh, 1, &tmp, &t2), HG_STATUS_QUEUED);
    CHECK_STATUS(hg_ticket_cancel(bh, t1), HG_STATUS_OK);
    CHECK_EQ_U64(r.status, HG_STATUS_ABORTED);
    CHECK_STATUS(hg_ticket_cancel(bh, t2), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release_outcome(held, HG_OUTCOME_IGNORED), HG_STATUS_OK);
    hg_permit_free(held);
    CHECK_STATUS(hg_bulkhead_set_limit(bh, limit), HG_STATUS_OK);
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.adaptive_decreases_total, 0);
    CHECK_EQ_U64(s.adaptive_samples_total, successes); /* cancellations give no sample */
    CHECK(s.adaptive_limit >= 20);
    /* 10 genuine drops: multiplicative, never below the floor. */
    uint64_t before = s.adaptive_limit;
    for (int i = 0; i < 10; i++) fail_once(bh);
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.adaptive_decreases_total, 10);
    CHECK(s.adaptive_limit < before && s.adaptive_limit >= 1);
    CHECK_EQ_U64(s.limit, s.adaptive_limit);
    CHECK_I2(bh);
    hg_bulkhead_free(bh);
}

/* A queued grant restarts the call's RTT clock (mark_granted): the sample is grant -> release,
 * through the callback path and the polling path. */
static void queued_grant_measures_from_the_grant(void) {
    atomic_store(&now_ns, 0);
    hg_config c;
    hg_config_default(&c);
    c.max_concurrent = 1;
    c.queue_timeout_ms = HG_TIMEOUT_INFINITE;
    c.adaptive_enabled = true;
    c.adaptive_algorithm = HG_ADAPTIVE_AIMD;
    c.adaptive_target_latency_ms = 1000;
    hg_bulkhead *bh = new_clocked(&c);
    for (int polling = 0; polling < 2; polling++) {
        hg_permit *h = NULL, *w = NULL;
        CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &h), HG_STATUS_OK);
        hg_ticket t = 0;
        rec r = {0};
        if (polling) {
            CHECK_STATUS(hg_bulkhead_enqueue(bh, 1, &w, &t), HG_STATUS_QUEUED);
        } else {
            CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, HG_TIMEOUT_DEFAULT, rec_cb, &r, &w, &t),
                         HG_STATUS_QUEUED);
        }
        advance_ms(50);
        CHECK_STATUS(hg_permit_release(h), HG_STATUS_OK);
        if (polling) {
            CHECK_STATUS(hg_ticket_poll(bh, t, &w), HG_STATUS_OK);
        } else {
            CHECK_EQ_U64(atomic_load(&r.calls), 1);
            w = r.permit;
        }
        advance_ms(10);
        CHECK_STATUS(hg_permit_release(w), HG_STATUS_OK);
        CHECK_EQ_U64(hg_test_stats(bh).adaptive_last_rtt_ns, 10000000u);
        hg_permit_free(h);
        hg_permit_free(w);
    }
    hg_bulkhead_free(bh);
}

/* ---- on_state_change ------------------------------------------------------------------------ */

static void state_change_callback_sequence(void) {
    atomic_store(&now_ns, 0);
    event_log log;
    log_init(&log);
    hg_config c = breaker_config(4, 2, 100);
    c.on_state_change = log_event;
    c.on_state_change_user_data = &log;
    hg_bulkhead *bh = new_clocked(&c);
    fail_once(bh);
    CHECK_EQ_U64(log.n, 0);
    fail_once(bh);
    CHECK_EQ_U64(log.n, 1);
    CHECK_EVENT(&log, 0, HG_CIRCUIT_CLOSED, HG_CIRCUIT_OPEN);
    CHECK(log.ev[0].key_null);
    CHECK_EQ_U64(log.ev[0].key_len, 0);
    CHECK(pthread_equal(log.ev[0].thread, pthread_self())); /* the committing thread */
    advance_ms(99);
    CHECK_EQ_U64(hg_test_stats(bh).circuit_state, HG_CIRCUIT_OPEN);
    advance_ms(1);
    /* A stats read finds the open duration passed: the lazy transition fires there. */
    CHECK_EQ_U64(hg_test_stats(bh).circuit_state, HG_CIRCUIT_HALF_OPEN);
    CHECK_EQ_U64(log.n, 2);
    CHECK_EVENT(&log, 1, HG_CIRCUIT_OPEN, HG_CIRCUIT_HALF_OPEN);
    hg_permit *p = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release(p), HG_STATUS_OK);
    hg_permit_free(p);
    CHECK_EQ_U64(log.n, 3);
    CHECK_EVENT(&log, 2, HG_CIRCUIT_HALF_OPEN, HG_CIRCUIT_CLOSED);
    CHECK(log.ev[2].key_null);
    hg_bulkhead_free(bh);

    /* Inside a registry: the key's bytes, for every key; overrides share the callback. */
    log_init(&log);
    atomic_store(&now_ns, 0);
    hg_config d = breaker_config(4, 1, 100);
    d.on_state_change = log_event;
    d.on_state_change_user_data = &log;
    hg_config o = d; /* a copy of the defaults: same callback, allowed */
    o.breaker_failure_threshold = 3;
    hg_registry_override ov = {"sturdy", 6, &o};
    hg_registry *reg = NULL;
    CHECK_STATUS(hg_registry_new_with_clock(&d, &ov, 1, 8, vclock, NULL, &reg), HG_STATUS_OK);
    hg_bulkhead *api = NULL;
    CHECK_STATUS(hg_registry_get(reg, "api.example", 11, &api), HG_STATUS_OK);
    fail_once(api);
    p = NULL;
    CHECK_STATUS(hg_registry_try_acquire(reg, "api.example", 11, 1, &p), HG_STATUS_CIRCUIT_OPEN);
    CHECK(p == NULL);
    hg_permit *q = NULL;
    CHECK_STATUS(hg_registry_try_acquire(reg, "sturdy", 6, 1, &q), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release_outcome(q, HG_OUTCOME_FAILURE), HG_STATUS_OK);
    hg_permit_free(q);
    advance_ms(100);
    CHECK_STATUS(hg_registry_acquire_timeout(reg, "api.example", 11, 1, 0, &p), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release(p), HG_STATUS_OK);
    hg_permit_free(p);
    CHECK_EQ_U64(log.n, 3);
    CHECK_EVENT(&log, 0, HG_CIRCUIT_CLOSED, HG_CIRCUIT_OPEN);
    CHECK_EVENT(&log, 1, HG_CIRCUIT_OPEN, HG_CIRCUIT_HALF_OPEN);
    CHECK_EVENT(&log, 2, HG_CIRCUIT_HALF_OPEN, HG_CIRCUIT_CLOSED);
    for (int i = 0; i < log.n && i < 3; i++) {
        CHECK(!log.ev[i].key_null);
        CHECK_EQ_U64(log.ev[i].key_len, 11);
        CHECK(memcmp(log.ev[i].key, "api.example", 11) == 0);
    }
    hg_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    CHECK_STATUS(hg_registry_stats(reg, "sturdy", 6, &s), HG_STATUS_OK);
    CHECK_EQ_U64(s.circuit_state, HG_CIRCUIT_CLOSED);
    CHECK_EQ_U64(s.circuit_consecutive_failures, 1);
    hg_bulkhead_free(api);
    hg_registry_free(reg);

    /* An override with another callback (or other user data) is refused. */
    int other;
    o.on_state_change_user_data = &other;
    reg = SENTINEL;
    CHECK_STATUS(hg_registry_new(&d, &ov, 1, 8, &reg), HG_STATUS_INVALID_ARGUMENT);
    CHECK(reg == SENTINEL);
    o.on_state_change = NULL; /* NULL: allowed (the defaults' callback gets its events) */
    CHECK_STATUS(hg_registry_new(&d, &ov, 1, 8, &reg), HG_STATUS_OK);
    hg_registry_free(reg);
    pthread_mutex_destroy(&log.mu);
}

/* ---- the guarded call in every acquire path -------------------------------------------------- */

static void every_path_checks_the_breaker(void) {
    atomic_store(&now_ns, 0);
    hg_config c = breaker_config(2, 1, 100);
    c.queue_timeout_ms = HG_TIMEOUT_INFINITE;
    hg_bulkhead *bh = new_clocked(&c);
    fail_once(bh);
    hg_permit *p = SENTINEL;
    hg_ticket t = 77;
    rec r = {0};
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_CIRCUIT_OPEN);
    CHECK_STATUS(hg_bulkhead_acquire_timeout(bh, 1, 0, &p), HG_STATUS_CIRCUIT_OPEN);
    CHECK_STATUS(hg_bulkhead_acquire_timeout(bh, 1, HG_TIMEOUT_INFINITE, &p),
                 HG_STATUS_CIRCUIT_OPEN);
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, HG_TIMEOUT_DEFAULT, rec_cb, &r, &p, &t),
                 HG_STATUS_CIRCUIT_OPEN);
    CHECK_STATUS(hg_bulkhead_enqueue(bh, 1, &p, &t), HG_STATUS_CIRCUIT_OPEN);
    CHECK(p == SENTINEL && t == 77);
    CHECK_EQ_U64(atomic_load(&r.calls), 0);
    /* An invalid weight stays an argument error (not counted) even while open. */
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 3, &p), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 0, HG_TIMEOUT_DEFAULT, rec_cb, &r, &p, &t),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_bulkhead_enqueue(bh, 3, &p, &t), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_bulkhead_acquire_timeout(bh, 0, 0, &p), HG_STATUS_INVALID_ARGUMENT);
    /* The raw pair is policy-free (documented): admitted while open, nothing recorded. */
    CHECK_STATUS(hg_bulkhead_try_acquire_units(bh, 1), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_release_units(bh, 1), HG_STATUS_OK);
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.rejected[HG_REASON_CIRCUIT_OPEN], 5);
    CHECK_EQ_U64(s.circuit_state, HG_CIRCUIT_OPEN);

    /* Half-open: a probe that queues and is cancelled gives its slot back (ignored), on the
     * polling path and on the callback path; a probe freed while held does too. */
    hg_permit *holder = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire_units(bh, 1), HG_STATUS_OK); /* 1 of 2 taken */
    advance_ms(100);
    CHECK_STATUS(hg_bulkhead_enqueue(bh, 2, &p, &t), HG_STATUS_QUEUED); /* the probe */
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &holder), HG_STATUS_CIRCUIT_OPEN);
    CHECK_STATUS(hg_ticket_poll(bh, t, &p), HG_STATUS_QUEUED);
    CHECK_STATUS(hg_ticket_cancel(bh, t), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 2, HG_TIMEOUT_DEFAULT, rec_cb, &r, &p, &t),
                 HG_STATUS_QUEUED); /* the probe again */
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &holder), HG_STATUS_CIRCUIT_OPEN);
    CHECK_STATUS(hg_ticket_cancel(bh, t), HG_STATUS_OK);
    CHECK_EQ_U64(r.status, HG_STATUS_ABORTED);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &holder), HG_STATUS_OK); /* the probe */
    hg_permit_free(holder);                                               /* ignored */
    CHECK_EQ_U64(hg_test_stats(bh).circuit_state, HG_CIRCUIT_HALF_OPEN);
    /* A polled grant is the probe: its success closes the breaker. */
    CHECK_STATUS(hg_bulkhead_enqueue(bh, 2, &p, &t), HG_STATUS_QUEUED);
    CHECK_STATUS(hg_bulkhead_release_units(bh, 1), HG_STATUS_OK);
    CHECK_STATUS(hg_ticket_poll(bh, t, &p), HG_STATUS_OK);
    CHECK_EQ_U64(hg_permit_weight(p), 2);
    CHECK_STATUS(hg_permit_release_outcome(p, HG_OUTCOME_OVERLOAD), HG_STATUS_OK); /* success */
    hg_permit_free(p);
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.circuit_state, HG_CIRCUIT_CLOSED);
    CHECK_EQ_U64(s.rejected[HG_REASON_CIRCUIT_OPEN], 7);
    CHECK_I2(bh);
    hg_bulkhead_free(bh);
}

/* ---- call timeout ---------------------------------------------------------------------------- */

static void call_timeout_is_a_failure_recorded_once(void) {
    atomic_store(&now_ns, 0);
    hg_config c = breaker_config(2, 2, 100);
    c.call_timeout_ms = 250;
    hg_bulkhead *bh = new_clocked(&c);
    CHECK_EQ_U64(hg_bulkhead_call_timeout_ms(bh), 250);
    hg_permit *p = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_OK);
    advance_ms(250);
    CHECK_STATUS(hg_permit_call_timed_out(p), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_call_timed_out(p), HG_STATUS_ALREADY_SETTLED);
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.rejected[HG_REASON_CALL_TIMEOUT], 1);
    CHECK_EQ_U64(s.circuit_consecutive_failures, 1);
    CHECK_EQ_U64(s.active, 1); /* the permit stays held until the work really ends */
    /* The later release (even with "success") records nothing more. */
    CHECK_STATUS(hg_permit_release_outcome(p, HG_OUTCOME_SUCCESS), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_call_timed_out(p), HG_STATUS_ALREADY_RELEASED);
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.circuit_consecutive_failures, 1);
    CHECK_EQ_U64(s.rejected[HG_REASON_CALL_TIMEOUT], 1);
    CHECK_EQ_U64(s.active, 0);
    /* A second timeout opens the breaker (failure_threshold 2). */
    hg_permit_free(p);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_call_timed_out(p), HG_STATUS_OK);
    CHECK_EQ_U64(hg_test_stats(bh).circuit_state, HG_CIRCUIT_OPEN);
    hg_permit_free(p); /* freed after the timeout: not ignored twice, still a leak count */
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.leaked_total, 1);
    CHECK_EQ_U64(s.circuit_generation, 1);
    CHECK_STATUS(hg_permit_call_timed_out(NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_EQ_U64(hg_bulkhead_call_timeout_ms(NULL), HG_TIMEOUT_INFINITE);
    hg_bulkhead_free(bh);
    /* 0, HG_TIMEOUT_INFINITE and HG_TIMEOUT_DEFAULT all mean "off". */
    const uint64_t off[] = {0, HG_TIMEOUT_INFINITE, HG_TIMEOUT_DEFAULT};
    for (size_t i = 0; i < 3; i++) {
        c.call_timeout_ms = off[i];
        bh = new_clocked(&c);
        CHECK_EQ_U64(hg_bulkhead_call_timeout_ms(bh), HG_TIMEOUT_INFINITE);
        hg_bulkhead_free(bh);
    }
}

/* ---- hg_stats: circuit and adaptive parts ------------------------------------------------- */

static void stats_circuit_fields(void) {
    atomic_store(&now_ns, 0);
    hg_bulkhead *plain = hg_test_new(2, 0, 0);
    hg_stats s = hg_test_stats(plain);
    CHECK(!s.circuit_present && !s.adaptive_present);
    CHECK_EQ_U64(s.circuit_generation, 0);
    hg_bulkhead_free(plain);

    hg_config c = breaker_config(4, 3, 100);
    hg_bulkhead *bh = new_clocked(&c);
    s = hg_test_stats(bh);
    CHECK(s.circuit_present);
    CHECK(!s.adaptive_present);
    CHECK_EQ_U64(s.circuit_state, HG_CIRCUIT_CLOSED);
    advance_ms(5);
    fail_once(bh);
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.circuit_consecutive_failures, 1);
    CHECK_EQ_U64(s.circuit_window_requests, 1);
    CHECK_EQ_U64(s.circuit_window_failures, 1);
    CHECK_EQ_U64(s.circuit_generation, 0);
    hg_permit *p = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release(p), HG_STATUS_OK);
    hg_permit_free(p);
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.circuit_consecutive_failures, 0);
    CHECK_EQ_U64(s.circuit_window_requests, 2);
    CHECK_EQ_U64(s.circuit_window_failures, 1);
    for (int i = 0; i < 3; i++) fail_once(bh);
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.circuit_state, HG_CIRCUIT_OPEN);
    CHECK_EQ_U64(s.circuit_generation, 1);
    CHECK_EQ_U64(s.circuit_opened_at_ns, 5000000u);
    /* An older caller's hg_stats (ending before the circuit part) gets none of it. */
    unsigned char raw[sizeof(hg_stats)];
    memset(raw, 0xEE, sizeof raw);
    uint32_t old = (uint32_t)offsetof(hg_stats, circuit_present);
    memcpy(raw, &old, sizeof old);
    CHECK_STATUS(hg_bulkhead_stats(bh, (hg_stats *)(void *)raw), HG_STATUS_OK);
    int tail = 1;
    for (size_t k = old; k < sizeof raw; k++) tail &= raw[k] == 0xEE;
    CHECK(tail);
    hg_bulkhead_free(bh);
}

/* ---- bad input for every new field ------------------------------------------------------------ */

static hg_config base(void) {
    hg_config c;
    hg_config_default(&c);
    c.adaptive_enabled = true;
    c.breaker_enabled = true;
    return c;
}

static void expect_bad_at(hg_config c, const char *field, int line) {
    hg_bulkhead *bh = SENTINEL;
    hg_registry *reg = SENTINEL;
    const char *bad = NULL;
    hg_status s1 = hg_bulkhead_new(&c, &bh);
    hg_status s2 = hg_registry_new(&c, NULL, 0, 8, &reg);
    hg_status s3 = hg_config_check(&c, &bad);
    hg_test_checks++;
    if (s1 != HG_STATUS_INVALID_ARGUMENT || s2 != HG_STATUS_INVALID_ARGUMENT ||
        s3 != HG_STATUS_INVALID_ARGUMENT || bh != SENTINEL || reg != SENTINEL || bad == NULL ||
        strcmp(bad, field) != 0) {
        hg_test_failures++;
        fprintf(stderr, "policies.c:%d: want %s rejected: new %u, registry %u, check %u (%s)\n",
                line, field, (unsigned)s1, (unsigned)s2, (unsigned)s3, bad ? bad : "NULL");
        if (s1 == HG_STATUS_OK) hg_bulkhead_free(bh);
        if (s2 == HG_STATUS_OK) hg_registry_free(reg);
    }
    /* As a registry override, too. */
    hg_config d;
    hg_config_default(&d);
    hg_registry_override ov = {"k", 1, &c};
    reg = SENTINEL;
    hg_test_checks++;
    if (hg_registry_new(&d, &ov, 1, 8, &reg) != HG_STATUS_INVALID_ARGUMENT || reg != SENTINEL) {
        hg_test_failures++;
        fprintf(stderr, "policies.c:%d: override with bad %s accepted\n", line, field);
    }
}
#define EXPECT_BAD(c, field) expect_bad_at(c, field, __LINE__)

static void expect_ok_at(hg_config c, int line) {
    hg_bulkhead *bh = NULL;
    const char *bad = "unset";
    hg_test_checks++;
    if (hg_bulkhead_new(&c, &bh) != HG_STATUS_OK || hg_config_check(&c, &bad) != HG_STATUS_OK ||
        bad != NULL) {
        hg_test_failures++;
        fprintf(stderr, "policies.c:%d: config rejected (%s)\n", line, bad ? bad : "NULL");
        return;
    }
    hg_bulkhead_free(bh);
}
#define EXPECT_OK(c) expect_ok_at(c, __LINE__)

static void bad_policy_fields(void) {
    hg_config c = base(); /* max_concurrent 10 */
    EXPECT_OK(c);         /* every policy field 0: the defaults */
    c.adaptive_algorithm = (hg_adaptive_algorithm)2;
    EXPECT_BAD(c, "adaptive_algorithm");
    c = base(), c.adaptive_initial_limit = 11, EXPECT_BAD(c, "adaptive_initial_limit");
    c = base(), c.adaptive_min_limit = 11, EXPECT_BAD(c, "adaptive_min_limit");
    c = base(), c.adaptive_max_limit = 11, EXPECT_BAD(c, "adaptive_max_limit");
    c = base(), c.adaptive_max_limit = HG_MAX_PERMITS + 1, EXPECT_BAD(c, "adaptive_max_limit");
    c = base(), c.adaptive_max_limit = 5, c.adaptive_initial_limit = 6;
    EXPECT_BAD(c, "adaptive_initial_limit");
    c = base(), c.adaptive_max_limit = 5, EXPECT_OK(c); /* initial defaults to max_limit */
    c = base(), c.adaptive_increase_step = HG_MAX_PERMITS + 1;
    EXPECT_BAD(c, "adaptive_increase_step");
    const double bad_ratio[] = {1.0, -0.5, 2.0, NAN, INFINITY};
    for (size_t i = 0; i < 5; i++) {
        c = base(), c.adaptive_decrease_ratio = bad_ratio[i];
        EXPECT_BAD(c, "adaptive_decrease_ratio");
    }
    const double bad_smoothing[] = {1.5, -1.0, NAN};
    for (size_t i = 0; i < 3; i++) {
        c = base(), c.adaptive_smoothing = bad_smoothing[i];
        EXPECT_BAD(c, "adaptive_smoothing");
    }
    const double bad_tolerance[] = {0.5, -1.0, INFINITY, NAN};
    for (size_t i = 0; i < 4; i++) {
        c = base(), c.adaptive_rtt_tolerance = bad_tolerance[i];
        EXPECT_BAD(c, "adaptive_rtt_tolerance");
    }
    c = base(), c.adaptive_long_window = (1ull << 32) + 1, EXPECT_BAD(c, "adaptive_long_window");
    c = base(), c.adaptive_queue_size = HG_MAX_PERMITS + 1, EXPECT_BAD(c, "adaptive_queue_size");
    /* The core's range for every policy duration: at most 2^62 ns (about 146 years). */
    c = base(), c.adaptive_target_latency_ms = UINT64_MAX;
    EXPECT_BAD(c, "adaptive_target_latency_ms");
    c = base(), c.adaptive_target_latency_ms = 100ull * 365 * 86400 * 1000, EXPECT_OK(c);
    c = base(), c.breaker_failure_threshold = 1u << 20, EXPECT_BAD(c, "breaker_failure_threshold");
    c = base(), c.breaker_failure_threshold = UINT32_MAX;
    EXPECT_BAD(c, "breaker_failure_threshold");
    const double bad_rate[] = {1.5, -0.1, NAN};
    for (size_t i = 0; i < 3; i++) {
        c = base(), c.breaker_error_rate_threshold = bad_rate[i];
        EXPECT_BAD(c, "breaker_error_rate_threshold");
    }
    c = base(), c.breaker_error_rate_window_ms = UINT64_MAX;
    EXPECT_BAD(c, "breaker_error_rate_window_ms");
    c = base(), c.breaker_error_rate_buckets = 33, EXPECT_BAD(c, "breaker_error_rate_buckets");
    c = base(), c.breaker_volume_threshold = 1u << 20, EXPECT_BAD(c, "breaker_volume_threshold");
    c = base(), c.breaker_open_duration_ms = UINT64_MAX, EXPECT_BAD(c, "breaker_open_duration_ms");
    c = base(), c.breaker_half_open_max_calls = 256;
    EXPECT_BAD(c, "breaker_half_open_max_calls");
    c = base(), c.breaker_half_open_timeout_ms = UINT64_MAX;
    EXPECT_BAD(c, "breaker_half_open_timeout_ms");
    c = base(), c.call_timeout_ms = 1, EXPECT_OK(c); /* every call_timeout_ms is valid */
    /* The base options still name themselves. */
    c = base(), c.max_concurrent = 0, EXPECT_BAD(c, "max_concurrent");
    c = base(), c.max_queue = HG_MAX_QUEUE + 1, EXPECT_BAD(c, "max_queue");
    c = base(), c.struct_size = 4, EXPECT_BAD(c, "struct_size");
    /* A disabled part's fields are not read. */
    c = base(), c.adaptive_enabled = false, c.adaptive_min_limit = 999;
    c.breaker_enabled = false, c.breaker_error_rate_buckets = 999, EXPECT_OK(c);
    /* The enable bytes are bytes: any non-zero value is true. */
    c = base();
    memset(&c.breaker_enabled, 7, 1);
    hg_bulkhead *bh = NULL;
    CHECK_STATUS(hg_bulkhead_new(&c, &bh), HG_STATUS_OK);
    CHECK(hg_test_stats(bh).circuit_present);
    hg_bulkhead_free(bh);
    CHECK_STATUS(hg_config_check(NULL, NULL), HG_STATUS_NULL_PARAMETER);
    c = base(), c.adaptive_min_limit = 11;
    CHECK_STATUS(hg_config_check(&c, NULL), HG_STATUS_INVALID_ARGUMENT); /* bad_field NULL ok */

    /* struct_size ending before the new fields (an older header): policies off, and their
     * bytes are never read — not even those in the old struct's tail padding. */
    const uint32_t older[] = {(uint32_t)offsetof(hg_config, adaptive_enabled),
                              (uint32_t)offsetof(hg_config, adaptive_initial_limit),
                              (uint32_t)offsetof(hg_config, on_state_change_user_data)};
    for (size_t i = 0; i < 3; i++) {
        c = base();
        memset(&c.adaptive_enabled, 0xFF, sizeof(hg_config) - offsetof(hg_config, adaptive_enabled));
        c.struct_size = older[i];
        bh = NULL;
        CHECK_STATUS(hg_bulkhead_new(&c, &bh), HG_STATUS_OK);
        hg_stats s = hg_test_stats(bh);
        CHECK(!s.circuit_present && !s.adaptive_present);
        CHECK_EQ_U64(hg_bulkhead_call_timeout_ms(bh), HG_TIMEOUT_INFINITE);
        for (int k = 0; k < 10; k++) fail_once(bh); /* no breaker: never CIRCUIT_OPEN */
        hg_permit *p = NULL;
        CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_OK);
        hg_permit_free(p);
        hg_bulkhead_free(bh);
    }

    /* Outcomes: unknown ones are refused and nothing is released. */
    bh = hg_test_new(1, 0, 0);
    hg_permit *p = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release_outcome(p, 4), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_permit_release_outcome(p, UINT32_MAX), HG_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_U64(hg_permit_weight(p), 1);
    CHECK_STATUS(hg_permit_release_outcome(NULL, HG_OUTCOME_SUCCESS), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_permit_release_outcome(p, HG_OUTCOME_OVERLOAD), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release_outcome(p, HG_OUTCOME_FAILURE), HG_STATUS_ALREADY_RELEASED);
    hg_permit_free(p);
    hg_bulkhead_free(bh);
    hg_registry *reg = SENTINEL;
    c = base();
    CHECK_STATUS(hg_registry_new_with_clock(&c, NULL, 0, 8, NULL, NULL, &reg),
                 HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_new_with_clock(NULL, NULL, 0, 8, vclock, NULL, &reg),
                 HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_registry_new_with_clock(&c, NULL, 0, 8, vclock, NULL, NULL),
                 HG_STATUS_NULL_PARAMETER);
    CHECK(reg == SENTINEL);
}

int main(int argc, char **argv) {
    (void)argc;
    RUN(c22_resize_through_set_limit);
    RUN(c24_half_open_admits_exactly_one);
    RUN(c21_cancellations_never_shrink_the_limit);
    RUN(queued_grant_measures_from_the_grant);
    RUN(state_change_callback_sequence);
    RUN(every_path_checks_the_breaker);
    RUN(call_timeout_is_a_failure_recorded_once);
    RUN(stats_circuit_fields);
    RUN(bad_policy_fields);
    return hg_test_summary(argv[0]);
}
