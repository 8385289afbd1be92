/*
 * core_api.c: the C ABI on the core admission API (issue 12; docs/design.md): what the port
 * changed or added, each path checked plain, under ASan + UBSan and under valgrind
 * (tests/c/run.sh).
 *
 *   reserved_reason_slots        HG_REASON_* 8-10 / HG_STATUS_* 2008-2010 declared and named
 *                                (budget_limit, shed, rate_limit); 11-15 are unknown,
 *                                hg_stats.rejected[8..15] stays 0; names and messages of the
 *                                others come from the core's table
 *   event_delivery               hg_config.on_event: a size-versioned hg_event per breaker
 *                                transition (kind, key, states, generation), with and without
 *                                on_state_change, in a registry, and never for an older
 *                                struct_size
 *   async_cancel_expires         hg_ticket_cancel / _reason on an async ticket: the callback
 *                                runs exactly once with HG_STATUS_ABORTED / TIMEOUT before the
 *                                cancel returns, also a cancel from inside another callback
 *   async_cancel_race            4 threads race hg_ticket_cancel / _reason against grants (their
 *                                releases), the timer thread's 1 ms deadlines and each other's
 *                                cancels of one ticket: every callback runs exactly once, a won
 *                                cancel's callback has run on the cancelling thread before it
 *                                returns, no permit leaks
 *   polling_ticket_cancel        hg_ticket_cancel on a hg_bulkhead_enqueue ticket: the owner's
 *                                cancel, nothing more happens
 *   registry_overrides_merge     overrides merged field by field over the defaults (a field left
 *                                0 inherits, a set field wins), URL-shaped keys canonical
 *
 * Time is virtual (a host clock the test owns) and nothing sleeps, except async_cancel_race: its
 * deadlines are the timer thread's (real time), and it waits (bounded) for the last of them.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <time.h>

#include "hgtest.h"

#define SENTINEL ((void *)0x5a5a)

static _Atomic uint64_t now_ns;

static uint64_t vclock(void *user_data) {
    (void)user_data;
    return atomic_load(&now_ns);
}

static void advance_ms(uint64_t ms) { atomic_fetch_add(&now_ns, ms * 1000000u); }

static hg_bulkhead *new_clocked(const hg_config *c) {
    hg_bulkhead *bh = NULL;
    hg_status s = hg_bulkhead_new_with_clock(c, vclock, NULL, &bh);
    if (s != HG_STATUS_OK) {
        fprintf(stderr, "hg_bulkhead_new_with_clock -> %u\n", (unsigned)s);
        abort();
    }
    return bh;
}

static hg_config breaker_config(uint32_t failure_threshold, uint64_t open_ms) {
    hg_config c;
    hg_config_default(&c);
    c.max_concurrent = 4;
    c.breaker_enabled = true;
    c.breaker_failure_threshold = failure_threshold;
    c.breaker_open_duration_ms = open_ms;
    return c;
}

/* One call through the permit API that ends with `outcome`. */
static void call_once(hg_bulkhead *bh, uint32_t outcome) {
    hg_permit *p = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release_outcome(p, outcome), HG_STATUS_OK);
    hg_permit_free(p);
}

/* ---- reserved reason slots ---------------------------------------------------------------- */

static void reserved_reason_slots(void) {
    CHECK_EQ_U64(HG_REASON_BUDGET_LIMIT, 8);
    CHECK_EQ_U64(HG_REASON_SHED, 9);
    CHECK_EQ_U64(HG_REASON_RATE_LIMIT, 10);
    CHECK_EQ_U64(HG_STATUS_BUDGET_LIMIT, 2000 + HG_REASON_BUDGET_LIMIT);
    CHECK_EQ_U64(HG_STATUS_SHED, 2000 + HG_REASON_SHED);
    CHECK_EQ_U64(HG_STATUS_RATE_LIMIT, 2000 + HG_REASON_RATE_LIMIT);
    CHECK_EQ_U64(HG_STATUS_CALL_TIMEOUT, 2000 + HG_REASON_CALL_TIMEOUT);
    /* The returned reasons: names and "rejected: <name>" from the core's table. */
    static const char *const names[] = {"concurrency_limit", "queue_limit",  "key_limit",
                                        "timeout",           "aborted",      "shutdown",
                                        "circuit_open",      "call_timeout", "budget_limit",
                                        "shed",              "rate_limit"};
    for (uint32_t r = 0; r <= HG_REASON_RATE_LIMIT; r++) {
        const char *n = hg_reason_name(r);
        CHECK(n != NULL && strcmp(n, names[r]) == 0);
        char want[64];
        snprintf(want, sizeof want, "rejected: %s", names[r]);
        CHECK(strcmp(hg_status_message(2000 + r), want) == 0);
    }
    /* No reason slot is reserved any more: 11.. are unknown. */
    for (uint32_t r = 11; r < 16; r++) CHECK(hg_reason_name(r) == NULL);
    CHECK(strcmp(hg_status_message(2011), "unknown status") == 0);
    CHECK(strcmp(hg_status_message(1999), "unknown status") == 0);
    /* Their hg_stats.rejected slots stay 0 while every returned reason is counted. */
    hg_bulkhead *bh = hg_test_new(1, 1, HG_TIMEOUT_INFINITE);
    hg_permit *h = NULL, *p = SENTINEL;
    hg_ticket t = 0, t2 = 0;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &h), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK_STATUS(hg_bulkhead_enqueue(bh, 1, &p, &t), HG_STATUS_QUEUED);
    CHECK_STATUS(hg_bulkhead_enqueue(bh, 1, &p, &t2), HG_STATUS_QUEUE_LIMIT);
    CHECK_STATUS(hg_ticket_cancel(bh, t), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_close(bh), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_SHUTDOWN);
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.rejected[HG_REASON_CONCURRENCY_LIMIT], 1);
    CHECK_EQ_U64(s.rejected[HG_REASON_QUEUE_LIMIT], 1);
    CHECK_EQ_U64(s.rejected[HG_REASON_ABORTED], 1);
    CHECK_EQ_U64(s.rejected[HG_REASON_SHUTDOWN], 1);
    for (int r = HG_REASON_BUDGET_LIMIT; r < 16; r++) CHECK_EQ_U64(s.rejected[r], 0);
    /* budget_limit is named (the core returns it) but a C bulkhead has no budget yet. */
    CHECK(p == SENTINEL);
    CHECK_STATUS(hg_permit_release(h), HG_STATUS_OK);
    hg_permit_free(h);
    hg_bulkhead_free(bh);
}

/* ---- on_event -------------------------------------------------------------------------------- */

typedef struct {
    char tag; /* 's': on_state_change, 'e': on_event */
    uint32_t struct_size, kind;
    char key[32];
    size_t key_len;
    int key_null;
    hg_circuit_state old_state, new_state;
    uint64_t generation;
    pthread_t thread;
} entry;

typedef struct {
    pthread_mutex_t mu;
    int n;
    entry e[32];
} log_t;

static void log_init(log_t *l) {
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->mu, NULL);
}

static entry *log_add(log_t *l, char tag, const char *key, size_t key_len) {
    entry *e = NULL;
    pthread_mutex_lock(&l->mu);
    if (l->n < 32) e = &l->e[l->n++];
    pthread_mutex_unlock(&l->mu);
    if (e == NULL) return NULL;
    memset(e, 0, sizeof *e);
    e->tag = tag;
    e->key_null = key == NULL;
    e->key_len = key_len;
    if (key != NULL && key_len < sizeof e->key) memcpy(e->key, key, key_len);
    e->thread = pthread_self();
    return e;
}

/* The admission events (admit, release, ...) that on_event also receives since issue 16:
 * counted here, logged by admission.c's tests; this log keeps the breaker transitions. */
static atomic_int admission_events;

static void on_event(void *user_data, const hg_event *ev) {
    if (ev->kind != HG_EVENT_STATE_CHANGE) {
        atomic_fetch_add(&admission_events, 1);
        return;
    }
    entry *e = log_add(user_data, 'e', ev->key, ev->key_len);
    if (e == NULL) return;
    e->struct_size = ev->struct_size;
    e->kind = ev->kind;
    if (ev->kind == HG_EVENT_STATE_CHANGE) {
        e->old_state = ev->old_state;
        e->new_state = ev->new_state;
        e->generation = ev->generation;
    }
}

static void on_state_change(void *user_data, const char *key, size_t key_len,
                            hg_circuit_state old_state, hg_circuit_state new_state) {
    entry *e = log_add(user_data, 's', key, key_len);
    if (e == NULL) return;
    e->old_state = old_state;
    e->new_state = new_state;
}

static atomic_int must_not_run_calls;
static void must_not_run(void *user_data, const hg_event *ev) {
    (void)user_data;
    (void)ev;
    atomic_fetch_add(&must_not_run_calls, 1);
}

#define CHECK_EV(l, i, from, to, gen)                                                    \
    do {                                                                                 \
        CHECK((l)->n > (i));                                                             \
        CHECK((l)->e[i].tag == 'e');                                                     \
        CHECK_EQ_U64((l)->e[i].struct_size, sizeof(hg_event));                           \
        CHECK_EQ_U64((l)->e[i].kind, HG_EVENT_STATE_CHANGE);                             \
        CHECK_EQ_U64((l)->e[i].old_state, from);                                         \
        CHECK_EQ_U64((l)->e[i].new_state, to);                                           \
        CHECK_EQ_U64((l)->e[i].generation, gen);                                         \
    } while (0)

static void event_delivery(void) {
    /* on_event alone, outside a registry. */
    atomic_store(&now_ns, 0);
    log_t log;
    log_init(&log);
    hg_config c = breaker_config(2, 100);
    c.on_event = on_event;
    c.on_event_user_data = &log;
    hg_bulkhead *bh = new_clocked(&c);
    call_once(bh, HG_OUTCOME_FAILURE);
    CHECK_EQ_U64(log.n, 0);
    call_once(bh, HG_OUTCOME_FAILURE);
    CHECK_EQ_U64(log.n, 1);
    CHECK_EV(&log, 0, HG_CIRCUIT_CLOSED, HG_CIRCUIT_OPEN, hg_test_stats(bh).circuit_generation);
    CHECK(log.e[0].key_null && log.e[0].key_len == 0);
    CHECK(pthread_equal(log.e[0].thread, pthread_self())); /* the committing thread */
    advance_ms(100);
    hg_stats s = hg_test_stats(bh); /* the lazy open -> half_open fires in this read */
    CHECK_EQ_U64(s.circuit_state, HG_CIRCUIT_HALF_OPEN);
    CHECK_EV(&log, 1, HG_CIRCUIT_OPEN, HG_CIRCUIT_HALF_OPEN, s.circuit_generation);
    call_once(bh, HG_OUTCOME_SUCCESS);
    CHECK_EQ_U64(log.n, 3);
    CHECK_EV(&log, 2, HG_CIRCUIT_HALF_OPEN, HG_CIRCUIT_CLOSED,
             hg_test_stats(bh).circuit_generation);
    CHECK(log.e[0].generation < log.e[1].generation && log.e[1].generation < log.e[2].generation);
    /* Three guarded calls: an admit and a release each. */
    CHECK_EQ_U64(atomic_load(&admission_events), 6);
    hg_bulkhead_free(bh);

    /* Both callbacks: on_state_change first, then on_event, for each transition. */
    atomic_store(&now_ns, 0);
    log_init(&log);
    c = breaker_config(1, 100);
    c.on_state_change = on_state_change;
    c.on_state_change_user_data = &log;
    c.on_event = on_event;
    c.on_event_user_data = &log;
    bh = new_clocked(&c);
    call_once(bh, HG_OUTCOME_FAILURE);
    CHECK_EQ_U64(log.n, 2);
    CHECK(log.e[0].tag == 's' && log.e[1].tag == 'e');
    CHECK(log.e[0].old_state == HG_CIRCUIT_CLOSED && log.e[0].new_state == HG_CIRCUIT_OPEN);
    CHECK_EV(&log, 1, HG_CIRCUIT_CLOSED, HG_CIRCUIT_OPEN, 1);
    hg_bulkhead_free(bh);

    /* An older caller (struct_size ends before on_event): its bytes are never read. */
    atomic_store(&now_ns, 0);
    log_init(&log);
    c = breaker_config(1, 100);
    c.on_state_change = on_state_change;
    c.on_state_change_user_data = &log;
    c.on_event = must_not_run;
    c.struct_size = (uint32_t)offsetof(hg_config, on_event);
    bh = new_clocked(&c);
    call_once(bh, HG_OUTCOME_FAILURE);
    CHECK_EQ_U64(log.n, 1);
    CHECK(log.e[0].tag == 's');
    CHECK_EQ_U64(atomic_load(&must_not_run_calls), 0);
    hg_bulkhead_free(bh);

    /* A registry: every key's events with the key's bytes; an override's on_event must be NULL
     * or the defaults' (function and user data). */
    atomic_store(&now_ns, 0);
    log_init(&log);
    hg_config d = breaker_config(1, 100);
    d.on_event = on_event;
    d.on_event_user_data = &log;
    hg_config o = d; /* a copy of the defaults: the same callback, allowed */
    o.breaker_failure_threshold = 2;
    hg_registry_override ov = {"sturdy", 6, &o};
    hg_registry *reg = NULL;
    CHECK_STATUS(hg_registry_new_with_clock(&d, &ov, 1, 8, vclock, NULL, &reg), HG_STATUS_OK);
    hg_bulkhead *api = NULL, *sturdy = NULL;
    CHECK_STATUS(hg_registry_get(reg, "api", 3, &api), HG_STATUS_OK);
    CHECK_STATUS(hg_registry_get(reg, "sturdy", 6, &sturdy), HG_STATUS_OK);
    call_once(api, HG_OUTCOME_FAILURE);
    call_once(sturdy, HG_OUTCOME_FAILURE);
    CHECK_EQ_U64(log.n, 1); /* sturdy needs 2 */
    call_once(sturdy, HG_OUTCOME_FAILURE);
    CHECK_EQ_U64(log.n, 2);
    CHECK_EV(&log, 0, HG_CIRCUIT_CLOSED, HG_CIRCUIT_OPEN, 1);
    CHECK_EV(&log, 1, HG_CIRCUIT_CLOSED, HG_CIRCUIT_OPEN, 1);
    CHECK(!log.e[0].key_null && log.e[0].key_len == 3 && memcmp(log.e[0].key, "api", 3) == 0);
    CHECK(!log.e[1].key_null && log.e[1].key_len == 6 &&
          memcmp(log.e[1].key, "sturdy", 6) == 0);
    hg_bulkhead_free(api);
    hg_bulkhead_free(sturdy);
    hg_registry_free(reg);
    int other;
    o.on_event_user_data = &other;
    reg = SENTINEL;
    CHECK_STATUS(hg_registry_new(&d, &ov, 1, 8, &reg), HG_STATUS_INVALID_ARGUMENT);
    o.on_event_user_data = &log;
    o.on_event = must_not_run;
    CHECK_STATUS(hg_registry_new(&d, &ov, 1, 8, &reg), HG_STATUS_INVALID_ARGUMENT);
    CHECK(reg == SENTINEL);
    o.on_event = NULL; /* NULL: allowed (the defaults' callback gets its events) */
    o.on_event_user_data = &other;
    CHECK_STATUS(hg_registry_new(&d, &ov, 1, 8, &reg), HG_STATUS_OK);
    hg_registry_free(reg);
    pthread_mutex_destroy(&log.mu);
}

/* ---- async cancel through the core's expiry ------------------------------------------------ */

typedef struct {
    int calls;
    hg_status status;
    hg_permit *permit;
    pthread_t thread;
    hg_bulkhead *bh;  /* for cancel_next */
    hg_ticket next;   /* cancelled from inside this callback, if set */
    hg_status next_status;
} rec;

static void rec_cb(hg_status status, hg_permit *permit, void *user_data) {
    rec *r = user_data;
    r->calls++;
    r->status = status;
    r->permit = permit;
    r->thread = pthread_self();
    if (r->next != 0) r->next_status = hg_ticket_cancel(r->bh, r->next);
}

static void async_cancel_expires(void) {
    hg_bulkhead *bh = hg_test_new(1, 4, HG_TIMEOUT_INFINITE);
    hg_permit *h = NULL, *p = SENTINEL;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &h), HG_STATUS_OK);

    /* hg_ticket_cancel: ABORTED through the callback, on this thread, before the return. */
    rec a = {0};
    hg_ticket ta = 0;
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, HG_TIMEOUT_DEFAULT, rec_cb, &a, &p, &ta),
                 HG_STATUS_QUEUED);
    CHECK((ta >> 63) == 1); /* an async ticket (hg_ticket: the top bit) */
    CHECK_EQ_U64(a.calls, 0);
    CHECK_STATUS(hg_ticket_poll(bh, ta, &p), HG_STATUS_INVALID_ARGUMENT); /* not pollable */
    CHECK_EQ_U64(hg_test_stats(bh).queued, 1);
    CHECK_STATUS(hg_ticket_cancel(bh, ta), HG_STATUS_OK);
    CHECK_EQ_U64(a.calls, 1);
    CHECK_EQ_U64(a.status, HG_STATUS_ABORTED);
    CHECK(a.permit == NULL);
    CHECK(pthread_equal(a.thread, pthread_self()));
    CHECK_STATUS(hg_ticket_cancel(bh, ta), HG_STATUS_ALREADY_SETTLED);
    CHECK_STATUS(hg_ticket_cancel_reason(bh, ta, HG_REASON_TIMEOUT), HG_STATUS_ALREADY_SETTLED);
    CHECK_EQ_U64(a.calls, 1);

    /* hg_ticket_cancel_reason(TIMEOUT): a host's own timer; other reasons are refused. */
    rec b = {0};
    hg_ticket tb = 0;
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, HG_TIMEOUT_DEFAULT, rec_cb, &b, &p, &tb),
                 HG_STATUS_QUEUED);
    static const uint32_t refused[] = {HG_REASON_CONCURRENCY_LIMIT, HG_REASON_SHUTDOWN,
                                       HG_REASON_CALL_TIMEOUT, HG_REASON_SHED, UINT32_MAX};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        CHECK_STATUS(hg_ticket_cancel_reason(bh, tb, refused[i]), HG_STATUS_INVALID_ARGUMENT);
    }
    CHECK_EQ_U64(b.calls, 0);
    CHECK_STATUS(hg_ticket_cancel_reason(bh, tb, HG_REASON_TIMEOUT), HG_STATUS_OK);
    CHECK_EQ_U64(b.calls, 1);
    CHECK_EQ_U64(b.status, HG_STATUS_TIMEOUT);
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.queued, 0);
    CHECK_EQ_U64(s.rejected[HG_REASON_ABORTED], 1);
    CHECK_EQ_U64(s.rejected[HG_REASON_TIMEOUT], 1);

    /* A cancel from inside a callback: C's grant callback cancels D (D's callback runs nested,
     * on this thread, before C's cancel returns). */
    rec c = {0}, dd = {0};
    hg_ticket tc = 0, td = 0;
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, HG_TIMEOUT_DEFAULT, rec_cb, &c, &p, &tc),
                 HG_STATUS_QUEUED);
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, HG_TIMEOUT_DEFAULT, rec_cb, &dd, &p, &td),
                 HG_STATUS_QUEUED);
    c.bh = bh;
    c.next = td;
    CHECK_STATUS(hg_permit_release(h), HG_STATUS_OK); /* grants C, whose callback cancels D */
    CHECK_EQ_U64(c.calls, 1);
    CHECK_EQ_U64(c.status, HG_STATUS_OK);
    CHECK(c.permit != NULL);
    CHECK_EQ_U64(c.next_status, HG_STATUS_OK);
    CHECK_EQ_U64(dd.calls, 1);
    CHECK_EQ_U64(dd.status, HG_STATUS_ABORTED);
    CHECK_STATUS(hg_ticket_cancel(bh, tc), HG_STATUS_ALREADY_SETTLED); /* granted first */
    CHECK_EQ_U64(c.calls, 1);
    /* A close settles what is still queued (its callbacks run on this thread). */
    rec e = {0};
    hg_ticket te = 0;
    CHECK_STATUS(hg_bulkhead_acquire_async(bh, 1, HG_TIMEOUT_DEFAULT, rec_cb, &e, &p, &te),
                 HG_STATUS_QUEUED);
    CHECK_STATUS(hg_bulkhead_close(bh), HG_STATUS_OK);
    CHECK_EQ_U64(e.calls, 1);
    CHECK_EQ_U64(e.status, HG_STATUS_SHUTDOWN);
    CHECK_STATUS(hg_ticket_cancel(bh, te), HG_STATUS_ALREADY_SETTLED);
    CHECK(p == SENTINEL); /* no queued acquire ever wrote *out */
    CHECK_STATUS(hg_permit_release(c.permit), HG_STATUS_OK);
    hg_permit_free(c.permit);
    hg_permit_free(h);
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.rejected[HG_REASON_ABORTED], 2);
    CHECK_EQ_U64(s.active, 0);
    CHECK_I2(bh);
    CHECK_EQ_U64(a.calls + b.calls + c.calls + dd.calls + e.calls, 5);
    hg_bulkhead_free(bh);
}

/* ---- cancel vs grant vs timeout, from 4 threads -------------------------------------------- */

#define RACE_THREADS 4
#define RACE_LIMIT 2
#define RACE_PENDING 4
#define RACE_ITERS 20000    /* per thread; RACE_ITERS_VG under valgrind */
#define RACE_ITERS_VG 2000

/* One async acquire, shared by its issuer, its callback and (while it is there) the shared slot;
 * the last of them frees it. */
typedef struct {
    atomic_int refs;
    atomic_int calls;  /* callback runs (must end at 1) */
    atomic_int ran_on; /* race_id of the thread that ran the callback (0: the timer thread) */
    atomic_uint status;
    atomic_int won;    /* cancels of it that returned HG_STATUS_OK (at most 1) */
} race_ctx;

static _Thread_local int race_id;
static hg_bulkhead *race_bh;
static atomic_ullong race_queued, race_callbacks, race_double, race_late, race_bad;
static atomic_ullong race_won_aborted, race_won_timeout;
static atomic_ullong race_cb_ok, race_cb_aborted, race_cb_timeout;

/* A ticket any thread may cancel, racing its issuer's own cancel of it. */
static pthread_mutex_t race_slot_mu = PTHREAD_MUTEX_INITIALIZER;
static hg_ticket race_slot_ticket;
static race_ctx *race_slot_ctx;

static void race_unref(race_ctx *c) {
    if (atomic_fetch_sub(&c->refs, 1) == 1) free(c);
}

static void race_cb(hg_status status, hg_permit *permit, void *user_data) {
    race_ctx *c = user_data;
    atomic_store(&c->status, status);
    atomic_store(&c->ran_on, race_id);
    if (atomic_fetch_add(&c->calls, 1) != 0) atomic_fetch_add(&race_double, 1);
    if (status == HG_STATUS_OK) {
        atomic_fetch_add(&race_cb_ok, 1);
        /* Released at once: the release may grant (and run the callback of) the next waiter on
         * this thread. */
        if (permit == NULL || hg_permit_release(permit) != HG_STATUS_OK) {
            atomic_fetch_add(&race_bad, 1);
        }
        hg_permit_free(permit);
    } else {
        if (permit != NULL) atomic_fetch_add(&race_bad, 1);
        if (status == HG_STATUS_ABORTED) {
            atomic_fetch_add(&race_cb_aborted, 1);
        } else if (status == HG_STATUS_TIMEOUT) {
            atomic_fetch_add(&race_cb_timeout, 1);
        } else {
            atomic_fetch_add(&race_bad, 1);
        }
    }
    atomic_fetch_add(&race_callbacks, 1);
    race_unref(c);
}

/* Cancels `t` (HG_REASON_TIMEOUT, as a host timer would, when `timeout_reason`): a won cancel's
 * callback has run, with the reason's status, on this thread, before the return. */
static void race_cancel(race_ctx *c, hg_ticket t, int timeout_reason) {
    hg_status s = timeout_reason ? hg_ticket_cancel_reason(race_bh, t, HG_REASON_TIMEOUT)
                                 : hg_ticket_cancel(race_bh, t);
    if (s == HG_STATUS_OK) {
        atomic_fetch_add(timeout_reason ? &race_won_timeout : &race_won_aborted, 1);
        if (atomic_fetch_add(&c->won, 1) != 0) atomic_fetch_add(&race_bad, 1);
        if (atomic_load(&c->calls) != 1 || atomic_load(&c->ran_on) != race_id) {
            atomic_fetch_add(&race_late, 1);
        } else if (atomic_load(&c->status) !=
                   (unsigned)(timeout_reason ? HG_STATUS_TIMEOUT : HG_STATUS_ABORTED)) {
            atomic_fetch_add(&race_bad, 1);
        }
    } else if (s != HG_STATUS_ALREADY_SETTLED) {
        atomic_fetch_add(&race_bad, 1);
    }
}

typedef struct {
    uint64_t rng;
    int id;
    long iters;
    hg_ticket t[RACE_PENDING];
    race_ctx *c[RACE_PENDING];
    int n;
    hg_permit *held[RACE_LIMIT];
    int nheld;
} race_worker;

static uint64_t race_rand(race_worker *w) { /* xorshift64* */
    w->rng ^= w->rng >> 12;
    w->rng ^= w->rng << 25;
    w->rng ^= w->rng >> 27;
    return w->rng * 2685821657736338717ULL;
}

/* Cancels the issuer's pending ticket i and forgets it. */
static void race_cancel_own(race_worker *w, int i) {
    race_cancel(w->c[i], w->t[i], race_rand(w) % 4 == 0);
    race_unref(w->c[i]);
    w->n--;
    w->t[i] = w->t[w->n];
    w->c[i] = w->c[w->n];
}

static void race_release_one(race_worker *w) {
    if (w->nheld == 0) return;
    hg_permit *p = w->held[--w->nheld];
    if (hg_permit_release(p) != HG_STATUS_OK) atomic_fetch_add(&race_bad, 1);
    hg_permit_free(p);
}

static void race_hold(race_worker *w, hg_permit *p) {
    if (w->nheld == RACE_LIMIT) race_release_one(w);
    w->held[w->nheld++] = p;
}

static void race_queue(race_worker *w) {
    static const uint64_t timeouts[] = {1, 1, 2, HG_TIMEOUT_INFINITE};
    if (w->n == RACE_PENDING) race_cancel_own(w, 0);
    race_ctx *c = malloc(sizeof *c);
    if (c == NULL) abort();
    atomic_init(&c->refs, 2);
    atomic_init(&c->calls, 0);
    atomic_init(&c->ran_on, -1);
    atomic_init(&c->status, HG_STATUS_OK);
    atomic_init(&c->won, 0);
    hg_permit *p = NULL;
    hg_ticket t = 0;
    hg_status s = hg_bulkhead_acquire_async(race_bh, 1, timeouts[race_rand(w) % 4], race_cb, c,
                                            &p, &t);
    if (s == HG_STATUS_QUEUED) {
        atomic_fetch_add(&race_queued, 1);
        w->t[w->n] = t;
        w->c[w->n++] = c;
        return;
    }
    /* Not queued: the callback never runs for it. */
    if (atomic_load(&c->calls) != 0) atomic_fetch_add(&race_bad, 1);
    free(c);
    if (s == HG_STATUS_OK) {
        race_hold(w, p);
    } else if (s != HG_STATUS_QUEUE_LIMIT) {
        atomic_fetch_add(&race_bad, 1);
    }
}

/* Takes the shared slot's ticket and cancels it, or puts one of the issuer's tickets there. */
static void race_share(race_worker *w) {
    pthread_mutex_lock(&race_slot_mu);
    race_ctx *c = race_slot_ctx;
    hg_ticket t = race_slot_ticket;
    race_slot_ctx = NULL;
    if (c == NULL && w->n > 0) {
        int i = (int)(race_rand(w) % (uint64_t)w->n);
        atomic_fetch_add(&w->c[i]->refs, 1); /* the slot's reference */
        race_slot_ctx = w->c[i];
        race_slot_ticket = w->t[i];
    }
    pthread_mutex_unlock(&race_slot_mu);
    if (c != NULL) {
        race_cancel(c, t, 0);
        race_unref(c);
    }
}

static void *race_run(void *arg) {
    race_worker *w = arg;
    race_id = w->id;
    for (long i = 0; i < w->iters; i++) {
        uint64_t r = race_rand(w) % 16;
        if (race_rand(w) % 64 == 0) {
            /* Let the timer thread's deadlines (1-2 ms) fire while this thread's tickets wait. */
            struct timespec ts = {0, 3000000L};
            nanosleep(&ts, NULL);
        } else if (r < 5) {
            race_queue(w);
        } else if (r < 9) {
            if (w->n > 0) race_cancel_own(w, (int)(race_rand(w) % (uint64_t)w->n));
        } else if (r < 11) {
            hg_permit *p = NULL;
            if (hg_bulkhead_try_acquire(race_bh, 1, &p) == HG_STATUS_OK) race_hold(w, p);
        } else if (r < 15) {
            race_release_one(w); /* grants the head waiter: its callback runs here */
        } else {
            race_share(w);
        }
    }
    while (w->n > 0) race_cancel_own(w, 0);
    while (w->nheld > 0) race_release_one(w);
    return NULL;
}

static void async_cancel_race(void) {
    long iters = getenv("HG_UNDER_VALGRIND") != NULL ? RACE_ITERS_VG : RACE_ITERS;
    race_bh = hg_test_new(RACE_LIMIT, 8, HG_TIMEOUT_INFINITE);
    race_id = RACE_THREADS + 1; /* this thread's (the timer thread's stays 0) */
    pthread_t tids[RACE_THREADS];
    static race_worker workers[RACE_THREADS];
    for (int i = 0; i < RACE_THREADS; i++) {
        workers[i] = (race_worker){.rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1),
                                   .id = i + 1,
                                   .iters = iters};
        if (pthread_create(&tids[i], NULL, race_run, &workers[i]) != 0) abort();
    }
    for (int i = 0; i < RACE_THREADS; i++) pthread_join(tids[i], NULL);
    pthread_mutex_lock(&race_slot_mu);
    race_ctx *c = race_slot_ctx;
    race_slot_ctx = NULL;
    pthread_mutex_unlock(&race_slot_mu);
    if (c != NULL) {
        race_cancel(c, race_slot_ticket, 0);
        race_unref(c);
    }
    /* Every ticket was cancelled by its issuer; one that lost settled elsewhere (a grant, or the
     * timer thread, whose callback may still be running): wait for it, at most ~10 s. */
    for (int i = 0; i < 10000 && atomic_load(&race_callbacks) != atomic_load(&race_queued); i++) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    printf("     async_cancel_race: %llu queued, %llu cancels won (%llu with TIMEOUT), "
           "callbacks: %llu granted, %llu aborted, %llu timed out\n",
           (unsigned long long)atomic_load(&race_queued),
           (unsigned long long)(atomic_load(&race_won_aborted) + atomic_load(&race_won_timeout)),
           (unsigned long long)atomic_load(&race_won_timeout),
           (unsigned long long)atomic_load(&race_cb_ok),
           (unsigned long long)atomic_load(&race_cb_aborted),
           (unsigned long long)atomic_load(&race_cb_timeout));
    CHECK_EQ_U64(atomic_load(&race_callbacks), atomic_load(&race_queued));
    CHECK_EQ_U64(atomic_load(&race_double), 0);
    CHECK_EQ_U64(atomic_load(&race_late), 0);
    CHECK_EQ_U64(atomic_load(&race_bad), 0);
    CHECK_EQ_U64(atomic_load(&race_cb_aborted), atomic_load(&race_won_aborted));
    CHECK(atomic_load(&race_cb_timeout) > atomic_load(&race_won_timeout)); /* the timer won too */
    CHECK(atomic_load(&race_won_aborted) > 0);
    CHECK(atomic_load(&race_cb_ok) > 0);
    hg_stats s = hg_test_stats(race_bh);
    CHECK_EQ_U64(s.rejected[HG_REASON_ABORTED], atomic_load(&race_cb_aborted));
    CHECK_EQ_U64(s.rejected[HG_REASON_TIMEOUT], atomic_load(&race_cb_timeout));
    /* No permit leaked, nothing left queued or unclaimed. */
    CHECK_EQ_U64(s.active, 0);
    CHECK_EQ_U64(s.queued, 0);
    CHECK_EQ_U64(s.granted_unclaimed, 0);
    CHECK_EQ_I64(s.available, RACE_LIMIT);
    CHECK_I2(race_bh);
    hg_bulkhead_free(race_bh);
}

/* ---- the polling API's cancel ------------------------------------------------------------------ */

static void polling_ticket_cancel(void) {
    hg_bulkhead *bh = hg_test_new(2, 4, HG_TIMEOUT_INFINITE);
    hg_permit *h = NULL, *p = NULL;
    hg_ticket t = 0;
    CHECK_STATUS(hg_bulkhead_try_acquire(bh, 2, &h), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_enqueue(bh, 1, &p, &t), HG_STATUS_QUEUED);
    CHECK((t >> 63) == 0); /* a polling ticket */
    CHECK_STATUS(hg_ticket_poll(bh, t, &p), HG_STATUS_QUEUED);
    /* The owner's cancel: its place is free at once; nothing more happens. */
    CHECK_STATUS(hg_ticket_cancel(bh, t), HG_STATUS_OK);
    hg_stats s = hg_test_stats(bh);
    CHECK_EQ_U64(s.queued, 0);
    CHECK_EQ_U64(s.rejected[HG_REASON_ABORTED], 1);
    CHECK_STATUS(hg_ticket_cancel(bh, t), HG_STATUS_ALREADY_SETTLED);
    CHECK_STATUS(hg_ticket_poll(bh, t, &p), HG_STATUS_ALREADY_SETTLED);
    CHECK(p == NULL);
    /* A ticket granted before its cancel: the cancel loses, the poll still takes the permit. */
    CHECK_STATUS(hg_bulkhead_enqueue(bh, 2, &p, &t), HG_STATUS_QUEUED);
    CHECK_STATUS(hg_permit_release(h), HG_STATUS_OK); /* grants the ticket */
    hg_permit_free(h);
    CHECK_STATUS(hg_ticket_cancel(bh, t), HG_STATUS_ALREADY_SETTLED);
    CHECK_STATUS(hg_ticket_poll(bh, t, &p), HG_STATUS_OK);
    CHECK_EQ_U64(hg_permit_weight(p), 2);
    CHECK_STATUS(hg_ticket_poll(bh, t, &p), HG_STATUS_ALREADY_SETTLED);
    /* Rejected by a close: the poll takes the rejection once. */
    hg_permit *q = NULL;
    hg_ticket t2 = 0;
    CHECK_STATUS(hg_bulkhead_enqueue(bh, 1, &q, &t2), HG_STATUS_QUEUED);
    CHECK_STATUS(hg_bulkhead_close(bh), HG_STATUS_OK);
    CHECK_STATUS(hg_ticket_cancel(bh, t2), HG_STATUS_ALREADY_SETTLED);
    CHECK_STATUS(hg_ticket_poll(bh, t2, &q), HG_STATUS_SHUTDOWN);
    CHECK_STATUS(hg_ticket_poll(bh, t2, &q), HG_STATUS_ALREADY_SETTLED);
    CHECK(q == NULL);
    CHECK_STATUS(hg_permit_release(p), HG_STATUS_OK);
    hg_permit_free(p);
    s = hg_test_stats(bh);
    CHECK_EQ_U64(s.rejected[HG_REASON_ABORTED], 1);
    CHECK_EQ_U64(s.rejected[HG_REASON_SHUTDOWN], 1);
    CHECK_EQ_U64(s.admitted_total, 2);
    CHECK_EQ_I64(s.available, 2);
    hg_bulkhead_free(bh);
}

/* ---- registry overrides: the core's merge ------------------------------------------------------ */

static hg_stats key_stats(hg_registry *reg, const char *key) {
    hg_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    hg_bulkhead *bh = NULL;
    CHECK_STATUS(hg_registry_get(reg, key, strlen(key), &bh), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_stats(bh, &s), HG_STATUS_OK);
    hg_bulkhead_free(bh);
    return s;
}

static uint64_t key_call_timeout(hg_registry *reg, const char *key) {
    hg_bulkhead *bh = NULL;
    CHECK_STATUS(hg_registry_get(reg, key, strlen(key), &bh), HG_STATUS_OK);
    uint64_t ms = hg_bulkhead_call_timeout_ms(bh);
    hg_bulkhead_free(bh);
    return ms;
}

static void registry_overrides_merge(void) {
    hg_config d = breaker_config(3, 100);
    d.call_timeout_ms = 250;
    /* A copy of the defaults that leaves breaker_failure_threshold 0: inherits 3. */
    hg_config inherit = d;
    inherit.breaker_failure_threshold = 0;
    inherit.max_concurrent = 7;
    /* The breaker switched off, the call timeout turned off: set fields win. */
    hg_config off = d;
    off.breaker_enabled = false;
    off.call_timeout_ms = HG_TIMEOUT_INFINITE;
    /* Every field set: wins entirely. */
    hg_config all = d;
    all.breaker_failure_threshold = 9;
    all.call_timeout_ms = 40;
    all.max_queue = 0;
    /* A URL-shaped key is canonical (as hg_origin_key). */
    hg_config url = d;
    url.max_concurrent = 3;
    hg_registry_override ov[] = {{"inherit", 7, &inherit},
                                 {"off", 3, &off},
                                 {"all", 3, &all},
                                 {"https://API.example", 19, &url}};
    hg_registry *reg = NULL;
    CHECK_STATUS(hg_registry_new(&d, ov, 4, 8, &reg), HG_STATUS_OK);
    hg_stats s = key_stats(reg, "inherit");
    CHECK_EQ_U64(s.max_concurrent, 7);
    CHECK(s.circuit_present);
    CHECK_EQ_U64(key_call_timeout(reg, "inherit"), 250);
    hg_bulkhead *bh = NULL;
    CHECK_STATUS(hg_registry_get(reg, "inherit", 7, &bh), HG_STATUS_OK);
    call_once(bh, HG_OUTCOME_FAILURE);
    call_once(bh, HG_OUTCOME_FAILURE);
    CHECK_EQ_U64(hg_test_stats(bh).circuit_state, HG_CIRCUIT_CLOSED);
    call_once(bh, HG_OUTCOME_FAILURE); /* the defaults' threshold, 3 */
    CHECK_EQ_U64(hg_test_stats(bh).circuit_state, HG_CIRCUIT_OPEN);
    hg_bulkhead_free(bh);
    s = key_stats(reg, "off");
    CHECK(!s.circuit_present);
    CHECK_EQ_U64(key_call_timeout(reg, "off"), HG_TIMEOUT_INFINITE);
    s = key_stats(reg, "all");
    CHECK(s.circuit_present);
    CHECK_EQ_U64(key_call_timeout(reg, "all"), 40);
    hg_permit *p = NULL, *q = SENTINEL;
    CHECK_STATUS(hg_registry_try_acquire(reg, "all", 3, 4, &p), HG_STATUS_OK);
    CHECK_STATUS(hg_registry_acquire_timeout(reg, "all", 3, 1, HG_TIMEOUT_INFINITE, &q),
                 HG_STATUS_CONCURRENCY_LIMIT); /* max_queue 0: fail fast */
    CHECK(q == SENTINEL);
    CHECK_STATUS(hg_permit_release(p), HG_STATUS_OK);
    hg_permit_free(p);
    CHECK_EQ_U64(key_stats(reg, "https://api.example:443").max_concurrent, 3);
    CHECK_EQ_U64(key_stats(reg, "plain").max_concurrent, 4); /* the defaults */
    hg_registry_free(reg);

    /* Two overrides naming one canonical key, a URL-shaped key without an origin, max_keys out
     * of 1 .. 2^32 - 1: refused. */
    hg_registry_override dup[] = {{"https://api.example", 19, &url},
                                  {"https://API.example:443", 23, &url}};
    reg = SENTINEL;
    CHECK_STATUS(hg_registry_new(&d, dup, 2, 8, &reg), HG_STATUS_INVALID_ARGUMENT);
    hg_registry_override bad_url = {"http://", 7, &url};
    CHECK_STATUS(hg_registry_new(&d, &bad_url, 1, 8, &reg), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_registry_new(&d, NULL, 0, 0, &reg), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_registry_new(&d, NULL, 0, (uint64_t)UINT32_MAX + 1, &reg),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK(reg == SENTINEL);
    CHECK_STATUS(hg_registry_new(&d, NULL, 0, UINT32_MAX, &reg), HG_STATUS_OK);
    hg_registry_free(reg);
}

int main(int argc, char **argv) {
    (void)argc;
    RUN(reserved_reason_slots);
    RUN(event_delivery);
    RUN(async_cancel_expires);
    RUN(async_cancel_race);
    RUN(polling_ticket_cancel);
    RUN(registry_overrides_merge);
    return hg_test_summary(argv[0]);
}
