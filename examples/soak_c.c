/*
 * The C child of the all-layers soak (examples/soak.py, `make soak`): the C ABI under random
 * cancellations, timeouts, limit changes and breaker trips, on two surfaces:
 *
 *   bulkhead  one hg_bulkhead with a breaker and a call timeout, driven by 3 threads:
 *             hg_bulkhead_try_acquire, hg_bulkhead_acquire_timeout (0/1/10/50 ms) and
 *             hg_bulkhead_enqueue + hg_ticket_poll with a random patience, then
 *             hg_ticket_cancel (a random cancellation: the cancel or the grant wins). The
 *             "work" is a sleep of 0-6 ms against call_timeout_ms = 5 (the host's own timer:
 *             hg_permit_call_timed_out on overrun), failing while a simulated upstream failure
 *             burst is on (the breaker trips). A control thread changes the limit
 *             (hg_bulkhead_set_limit / hg_bulkhead_apply_limits) and toggles the bursts.
 *   host      the soak's host segment (shared with the Python workers and the Node child):
 *             hg_host_bulkhead_try_acquire / hg_host_bulkhead_acquire (0/10/100 ms).
 *
 * Protocol (JSON lines on stdout, as soak_node.mjs): {"ready": true}; after "go" on stdin one
 * line a second {"final": false, "ops", "counts", "checks", "failed", "failures"}; at the end
 * the same with "final": true after every thread stopped, the bulkhead drained and the
 * invariants checked at quiescence (I5) with each operation's settlement (caller and core).
 * Stops at go + seconds, or when stdin closes (the parent is gone).
 *
 *   soak_c SECONDS SEED HOST_NAME HOST_DIR
 */
#define _GNU_SOURCE
#include <hullguard.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HOST_LIMIT 4 /* as soak.py */
#define MAX_CONCURRENT 6
#define MAX_QUEUE 16
#define HOST_MAX_QUEUE 16
#define CALL_TIMEOUT_MS 5
#define WORKERS 3
#define HOLD_BOUND_NS (10ull * 1000000000ull)
#define HISTORY 4096

typedef struct tally {
    _Atomic uint64_t started, granted, refused, timed_out, cancelled, ok, failed, call_timeout,
        circuit_open, cancelled_after_grant, cancelled_waiting;
} tally;

static tally bh_tally[WORKERS], host_tally[WORKERS];
static _Atomic uint64_t n_cancels, n_limit_changes, n_breaker_opens, n_bursts;
static atomic_bool stopping, failing;
static const struct hg_bulkhead *bh;
static const struct hg_host_bulkhead *host;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static uint64_t rnd(uint64_t *s) { /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 2685821657736338717ull;
}
static uint64_t below(uint64_t *s, uint64_t n) { return rnd(s) % n; }

/* ----- checks -------------------------------------------------------------------------------- */

static pthread_mutex_t check_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t n_checks, n_failed;
static char failures[25][400];
static int n_failures;

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...) {
    pthread_mutex_lock(&check_mu);
    n_checks++;
    if (!ok) {
        n_failed++;
        if (n_failures < 25) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(failures[n_failures++], sizeof failures[0], fmt, ap);
            va_end(ap);
        }
    }
    pthread_mutex_unlock(&check_mu);
}

/* The limits of the last HOLD_BOUND_NS: a shrink never revokes (I1). */
static pthread_mutex_t hist_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t hist_at[HISTORY], hist_limit[HISTORY];
static int hist_n;

static void hist_set(uint64_t limit) {
    pthread_mutex_lock(&hist_mu);
    uint64_t now = now_ns();
    int keep = 0; /* drop what ended before the window, keeping the one in force at its start */
    while (keep + 1 < hist_n && hist_at[keep + 1] + HOLD_BOUND_NS < now) keep++;
    if (keep > 0) {
        memmove(hist_at, hist_at + keep, (size_t)(hist_n - keep) * sizeof hist_at[0]);
        memmove(hist_limit, hist_limit + keep, (size_t)(hist_n - keep) * sizeof hist_limit[0]);
        hist_n -= keep;
    }
    if (hist_n < HISTORY) {
        hist_at[hist_n] = now;
        hist_limit[hist_n] = limit;
        hist_n++;
    }
    pthread_mutex_unlock(&hist_mu);
}

static uint64_t hist_ceiling(void) {
    pthread_mutex_lock(&hist_mu);
    uint64_t now = now_ns(), m = 0;
    for (int i = 0; i < hist_n; i++) {
        bool in_window = i + 1 == hist_n || hist_at[i + 1] + HOLD_BOUND_NS >= now;
        if (in_window && hist_limit[i] > m) m = hist_limit[i];
    }
    pthread_mutex_unlock(&hist_mu);
    return m;
}

static hg_stats prev_stats;
static bool have_prev;

static hg_stats read_stats(void) {
    hg_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    hg_status st = hg_bulkhead_stats(bh, &s);
    check(st == HG_STATUS_OK, "c: hg_bulkhead_stats: %d", (int)st);
    return s;
}

static void check_live(void) {
    /* The ceiling before the stats: a limit set in between only raises what is allowed. */
    uint64_t ceiling = hist_ceiling();
    hg_stats s = read_stats();
    check(s.queued <= MAX_QUEUE, "c bulkhead: queued %" PRIu64 " > %d", s.queued, MAX_QUEUE);
    check(s.active + s.granted_unclaimed <= ceiling,
          "c bulkhead: I1 active %" PRIu64 " + unclaimed %" PRIu64
          " above every limit of the last 10 s (max %" PRIu64 ", limit now %" PRIu64 ")",
          s.active, s.granted_unclaimed, ceiling, s.limit);
    check(s.available <= (int64_t)s.limit, "c bulkhead: available %" PRId64 " > limit %" PRIu64,
          s.available, s.limit);
    check(s.leaked_total == 0 && s.released_twice_total == 0,
          "c bulkhead: leaked %" PRIu64 " released twice %" PRIu64, s.leaked_total,
          s.released_twice_total);
    if (have_prev) {
        check(s.admitted_total >= prev_stats.admitted_total, "c bulkhead: admitted_total went back");
        for (int r = 0; r < 16; r++)
            check(s.rejected[r] >= prev_stats.rejected[r], "c bulkhead: rejected[%d] went back", r);
    }
    prev_stats = s;
    have_prev = true;

    hg_host_stats h;
    memset(&h, 0, sizeof h);
    h.struct_size = sizeof h;
    hg_status st = hg_host_bulkhead_stats(host, &h);
    check(st == HG_STATUS_OK, "c: hg_host_bulkhead_stats: %d", (int)st);
    check(h.in_flight <= HOST_LIMIT && h.active <= HOST_LIMIT,
          "c: host in_flight %" PRIu64 " / active %" PRIu64 " > %d", h.in_flight, h.active,
          HOST_LIMIT);
    check(h.local_queued <= HOST_MAX_QUEUE, "c: host local_queued %" PRIu64, h.local_queued);
}

/* ----- the workers ------------------------------------------------------------------------- */

static void on_state_change(void *user, const char *key, size_t key_len, hg_circuit_state old_state,
                            hg_circuit_state new_state) {
    (void)user, (void)key, (void)key_len, (void)old_state;
    if (new_state == HG_CIRCUIT_OPEN) atomic_fetch_add(&n_breaker_opens, 1);
}

static void refusal(tally *t, hg_status st) {
    if (st == HG_STATUS_TIMEOUT) {
        atomic_fetch_add(&t->timed_out, 1);
        return;
    }
    atomic_fetch_add(&t->refused, 1);
    if (st == HG_STATUS_CIRCUIT_OPEN) atomic_fetch_add(&t->circuit_open, 1);
    if (st != HG_STATUS_CONCURRENCY_LIMIT && st != HG_STATUS_QUEUE_LIMIT &&
        st != HG_STATUS_CIRCUIT_OPEN)
        check(false, "c: unexpected status %d", (int)st);
}

/* The guarded work: 0-6 ms against the 5 ms call timeout; a failure during a burst. */
static void work(tally *t, struct hg_permit *p, uint64_t *seed) {
    atomic_fetch_add(&t->granted, 1);
    if (hg_permit_weight(p) == 2 && below(seed, 4) == 0)
        check(hg_permit_release_partial(p, 1) == HG_STATUS_OK, "c: release_partial");
    uint64_t ms = below(seed, 7);
    sleep_ns(ms * 1000000ull);
    if (ms > CALL_TIMEOUT_MS) {
        hg_status st = hg_permit_call_timed_out(p);
        check(st == HG_STATUS_OK, "c: call_timed_out: %d", (int)st);
        atomic_fetch_add(&t->call_timeout, 1);
        check(hg_permit_release(p) == HG_STATUS_OK, "c: release after call timeout");
    } else if (atomic_load(&failing)) {
        atomic_fetch_add(&t->failed, 1);
        check(hg_permit_release_outcome(p, HG_OUTCOME_FAILURE) == HG_STATUS_OK, "c: release failure");
    } else {
        atomic_fetch_add(&t->ok, 1);
        check(hg_permit_release_outcome(p, HG_OUTCOME_SUCCESS) == HG_STATUS_OK, "c: release ok");
    }
    hg_permit_free(p);
}

static void bulkhead_op(tally *t, uint64_t *seed) {
    uint64_t weight = below(seed, 4) == 0 ? 2 : 1;
    struct hg_permit *p = NULL;
    hg_status st;
    atomic_fetch_add(&t->started, 1);
    uint64_t kind = below(seed, 10);
    if (kind < 3) {
        st = hg_bulkhead_try_acquire(bh, weight, &p);
    } else if (kind < 6) {
        static const uint64_t timeouts[] = {0, 1, 10, 50};
        st = hg_bulkhead_acquire_timeout(bh, weight, timeouts[below(seed, 4)], &p);
    } else {
        /* Polling with a random patience, then a cancel: the cancel or the grant wins. */
        hg_ticket ticket;
        st = hg_bulkhead_enqueue(bh, weight, &p, &ticket);
        uint64_t until = now_ns() + below(seed, 20) * 1000000ull;
        while (st == HG_STATUS_QUEUED) {
            st = hg_ticket_poll(bh, ticket, &p);
            if (st != HG_STATUS_QUEUED) break;
            if (now_ns() >= until) {
                atomic_fetch_add(&n_cancels, 1);
                st = hg_ticket_cancel(bh, ticket);
                if (st == HG_STATUS_OK) {
                    atomic_fetch_add(&t->cancelled, 1);
                    atomic_fetch_add(&t->cancelled_waiting, 1);
                    return;
                }
                check(st == HG_STATUS_ALREADY_SETTLED, "c: hg_ticket_cancel: %d", (int)st);
                st = hg_ticket_poll(bh, ticket, &p); /* what won (a grant, a rejection): take it */
                check(st != HG_STATUS_QUEUED && st != HG_STATUS_ALREADY_SETTLED,
                      "c: a settled ticket polled %d", (int)st);
                break;
            }
            sleep_ns(100000);
        }
    }
    if (st == HG_STATUS_OK)
        work(t, p, seed);
    else
        refusal(t, st);
}

static void host_op(tally *t, uint64_t *seed) {
    struct hg_host_permit *p = NULL;
    atomic_fetch_add(&t->started, 1);
    hg_status st;
    if (below(seed, 5) == 0) {
        st = hg_host_bulkhead_try_acquire(host, 1, &p);
    } else {
        static const uint64_t timeouts[] = {0, 10, 100};
        st = hg_host_bulkhead_acquire(host, 1, timeouts[below(seed, 3)], &p);
    }
    if (st != HG_STATUS_OK) {
        refusal(t, st);
        return;
    }
    atomic_fetch_add(&t->granted, 1);
    sleep_ns(below(seed, 5) * 1000000ull);
    st = hg_host_permit_release(p);
    check(st == HG_STATUS_OK, "c: hg_host_permit_release: %d", (int)st);
    atomic_fetch_add(&t->ok, 1);
    hg_host_permit_free(p);
}

static void *worker(void *arg) {
    int i = (int)(intptr_t)arg;
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) ^ (uint64_t)(uintptr_t)&seed;
    while (!atomic_load(&stopping)) {
        if (below(&seed, 4) == 0)
            host_op(&host_tally[i], &seed);
        else
            bulkhead_op(&bh_tally[i], &seed);
        sleep_ns(below(&seed, 1000) * 1000ull);
    }
    return NULL;
}

static uint64_t control_seed;

static void *control(void *arg) {
    (void)arg;
    uint64_t revision = 0, next_burst = now_ns() + 2000000000ull, burst_end = 0;
    while (!atomic_load(&stopping)) {
        sleep_ns((100 + below(&control_seed, 400)) * 1000000ull);
        uint64_t n = 1 + below(&control_seed, MAX_CONCURRENT);
        hg_status st;
        if (below(&control_seed, 2) == 0) {
            st = hg_bulkhead_set_limit(bh, n);
        } else {
            hg_limits l;
            hg_limits_default(&l);
            l.revision = ++revision;
            l.limit = n;
            st = hg_bulkhead_apply_limits(bh, &l);
        }
        check(st == HG_STATUS_OK, "c: set the limit to %" PRIu64 ": %d", n, (int)st);
        hist_set(n);
        atomic_fetch_add(&n_limit_changes, 1);
        uint64_t now = now_ns();
        if (!atomic_load(&failing) && now >= next_burst) {
            atomic_store(&failing, true);
            atomic_fetch_add(&n_bursts, 1);
            burst_end = now + (500 + below(&control_seed, 1000)) * 1000000ull;
        } else if (atomic_load(&failing) && now >= burst_end) {
            atomic_store(&failing, false);
            next_burst = now + (2000 + below(&control_seed, 3000)) * 1000000ull;
        }
    }
    atomic_store(&failing, false);
    return NULL;
}

/* ----- reports ----------------------------------------------------------------------------- */

static void print_tally(const char *name, tally *ts) {
    uint64_t v[11] = {0};
    for (int i = 0; i < WORKERS; i++) {
        tally *t = &ts[i];
        uint64_t x[11] = {t->started, t->granted, t->refused, t->timed_out, t->cancelled, t->ok,
                          t->failed, t->call_timeout, t->circuit_open, t->cancelled_after_grant,
                          t->cancelled_waiting};
        for (int k = 0; k < 11; k++) v[k] += x[k];
    }
    printf("\"%s\":{\"started\":%" PRIu64 ",\"granted\":%" PRIu64 ",\"refused\":%" PRIu64
           ",\"timed_out\":%" PRIu64 ",\"cancelled\":%" PRIu64 ",\"ok\":%" PRIu64
           ",\"failed\":%" PRIu64 ",\"call_timeout\":%" PRIu64 ",\"circuit_open\":%" PRIu64
           ",\"cancelled_after_grant\":%" PRIu64 ",\"cancelled_waiting\":%" PRIu64 "}",
           name, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]);
}

static tally sum(tally *ts) {
    tally out;
    memset(&out, 0, sizeof out);
    for (int i = 0; i < WORKERS; i++) {
        out.started += ts[i].started;
        out.granted += ts[i].granted;
        out.refused += ts[i].refused;
        out.timed_out += ts[i].timed_out;
        out.cancelled += ts[i].cancelled;
        out.call_timeout += ts[i].call_timeout;
        out.circuit_open += ts[i].circuit_open;
    }
    return out;
}

static void report(bool final) {
    pthread_mutex_lock(&check_mu);
    uint64_t queue_timeouts = 0;
    for (int i = 0; i < WORKERS; i++) queue_timeouts += bh_tally[i].timed_out + host_tally[i].timed_out;
    uint64_t call_timeouts = 0;
    for (int i = 0; i < WORKERS; i++) call_timeouts += bh_tally[i].call_timeout;
    printf("{\"final\":%s,\"ops\":{", final ? "true" : "false");
    print_tally("bulkhead", bh_tally);
    printf(",");
    print_tally("host", host_tally);
    printf("},\"counts\":{\"cancels\":%" PRIu64 ",\"limit_changes\":%" PRIu64
           ",\"breaker_opens\":%" PRIu64 ",\"call_timeouts\":%" PRIu64
           ",\"queue_timeouts\":%" PRIu64 ",\"failure_bursts\":%" PRIu64 "}",
           atomic_load(&n_cancels), atomic_load(&n_limit_changes), atomic_load(&n_breaker_opens),
           call_timeouts, queue_timeouts, atomic_load(&n_bursts));
    printf(",\"checks\":%" PRIu64 ",\"failed\":%" PRIu64 ",\"failures\":[", n_checks, n_failed);
    for (int i = 0; i < n_failures; i++) {
        printf("%s\"", i ? "," : "");
        for (const char *c = failures[i]; *c; c++) {
            if (*c == '"' || *c == '\\') putchar('\\');
            putchar(*c);
        }
        printf("\"");
    }
    printf("]}\n");
    fflush(stdout);
    pthread_mutex_unlock(&check_mu);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: soak_c SECONDS SEED HOST_NAME HOST_DIR\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    control_seed = strtoull(argv[2], NULL, 10) | 1;

    hg_config cfg;
    hg_config_default(&cfg);
    cfg.max_concurrent = MAX_CONCURRENT;
    cfg.max_queue = MAX_QUEUE;
    cfg.queue_timeout_ms = 50;
    cfg.breaker_enabled = true;
    cfg.breaker_failure_threshold = 5;
    cfg.breaker_open_duration_ms = 300;
    cfg.call_timeout_ms = CALL_TIMEOUT_MS;
    cfg.on_state_change = on_state_change;
    struct hg_bulkhead *b = NULL;
    if (hg_bulkhead_new(&cfg, &b) != HG_STATUS_OK) {
        fprintf(stderr, "soak_c: hg_bulkhead_new failed\n");
        return 1;
    }
    bh = b;
    hist_set(MAX_CONCURRENT);
    hg_host_options ho;
    hg_host_options_default(&ho);
    ho.max_concurrent = HOST_LIMIT;
    ho.max_queue = HOST_MAX_QUEUE;
    ho.queue_timeout_ms = 500;
    ho.dir = argv[4];
    struct hg_host_bulkhead *hb = NULL;
    if (hg_host_bulkhead_open(argv[3], &ho, &hb) != HG_STATUS_OK) {
        char buf[512];
        size_t len = 0;
        hg_host_last_error(buf, sizeof buf, &len);
        fprintf(stderr, "soak_c: hg_host_bulkhead_open: %.*s\n", (int)len, buf);
        return 1;
    }
    host = hb;
    hg_stats s0 = read_stats();
    uint64_t ring_free0 = s0.ring_free;

    printf("{\"ready\":true}\n");
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin) || strncmp(line, "go", 2) != 0) return 1;

    pthread_t workers[WORKERS], ctl;
    for (int i = 0; i < WORKERS; i++) pthread_create(&workers[i], NULL, worker, (void *)(intptr_t)i);
    pthread_create(&ctl, NULL, control, NULL);
    uint64_t end = now_ns() + (uint64_t)(seconds * 1e9), next_report = now_ns() + 1000000000ull;
    struct pollfd pfd = {.fd = 0, .events = POLLIN};
    while (now_ns() < end) {
        /* stdin readable = EOF (nothing more is sent after "go"): the parent is gone. */
        if (poll(&pfd, 1, 250) > 0) break;
        check_live();
        if (now_ns() >= next_report) {
            report(false);
            next_report += 1000000000ull;
        }
    }
    atomic_store(&stopping, true);
    for (int i = 0; i < WORKERS; i++) pthread_join(workers[i], NULL);
    pthread_join(ctl, NULL);

    hg_drain_result dr;
    memset(&dr, 0, sizeof dr);
    check(hg_bulkhead_drain(bh, 5000, &dr) == HG_STATUS_OK && dr.drained, "c: drain");
    hg_stats s = read_stats();
    check(s.active == 0 && s.queued == 0 && s.granted_unclaimed == 0,
          "c bulkhead: not quiescent at the end: active %" PRIu64 " queued %" PRIu64
          " unclaimed %" PRIu64, s.active, s.queued, s.granted_unclaimed);
    check(s.available == (int64_t)s.limit, "c bulkhead: I5 available %" PRId64 " != limit %" PRIu64,
          s.available, s.limit);
    check(s.ring_free == ring_free0, "c bulkhead: ring_free %" PRIu64 " at the end, %" PRIu64 " idle",
          s.ring_free, ring_free0);
    check(s.orphaned_in_flight == 0, "c bulkhead: orphaned at the end");
    check_live();
    tally t = sum(bh_tally);
    uint64_t settled = t.granted + t.refused + t.timed_out + t.cancelled;
    check(t.started == settled, "c bulkhead: started %" PRIu64 " != settled %" PRIu64,
          (uint64_t)t.started, settled);
    uint64_t rejected = 0;
    for (int r = 0; r < 16; r++)
        if (r != HG_REASON_CALL_TIMEOUT) rejected += s.rejected[r];
    check(s.admitted_total + rejected == t.started,
          "c bulkhead: core admitted %" PRIu64 " + rejected %" PRIu64 " != started %" PRIu64,
          s.admitted_total, rejected, (uint64_t)t.started);
    check(t.granted <= s.admitted_total && s.admitted_total <= t.granted + t.cancelled,
          "c bulkhead: core admitted %" PRIu64 " outside granted %" PRIu64 " .. + cancelled",
          s.admitted_total, (uint64_t)t.granted);
    check(s.rejected[HG_REASON_CIRCUIT_OPEN] == t.circuit_open,
          "c bulkhead: circuit_open core %" PRIu64 " != caller %" PRIu64,
          s.rejected[HG_REASON_CIRCUIT_OPEN], (uint64_t)t.circuit_open);
    check(s.rejected[HG_REASON_CALL_TIMEOUT] == t.call_timeout,
          "c bulkhead: call_timeout core %" PRIu64 " != caller %" PRIu64,
          s.rejected[HG_REASON_CALL_TIMEOUT], (uint64_t)t.call_timeout);
    check(s.rejected[HG_REASON_ABORTED] <= t.cancelled,
          "c bulkhead: aborted core %" PRIu64 " > caller's cancels %" PRIu64,
          s.rejected[HG_REASON_ABORTED], (uint64_t)t.cancelled);

    hg_host_stats h;
    memset(&h, 0, sizeof h);
    h.struct_size = sizeof h;
    check(hg_host_bulkhead_stats(host, &h) == HG_STATUS_OK, "c: host stats");
    check(h.local_active == 0 && h.local_queued == 0 && h.local_in_flight == 0,
          "c: host not quiescent locally: active %" PRIu64 " queued %" PRIu64, h.local_active,
          h.local_queued);
    tally ht = sum(host_tally);
    check(ht.started == ht.granted + ht.refused + ht.timed_out + ht.cancelled,
          "c host: started != settled");
    hg_bulkhead_close(bh);
    hg_host_bulkhead_close(host);
    report(true);
    hg_bulkhead_free(bh);
    hg_host_bulkhead_free(host);
    return 0;
}
