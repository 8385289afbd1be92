/*
 * host.c: the host bulkhead through the C ABI (issue 19; hg_host_*, docs/design.md §14), from
 * real C with real processes, plain, under ASan + UBSan and under valgrind (tests/c/run.sh).
 *
 *   options_are_checked            hg_host_options_default / _check: every bad option refused
 *                                  HG_STATUS_INVALID_ARGUMENT, hg_host_last_error() naming it
 *                                  and its range (on_mismatch 7, mode 0666, ...); new statuses
 *   bad_arguments_name_the_parameter  NULL for every pointer of every function, a bad name, a
 *                                  bad weight, an unwritable stats struct
 *   limit_queue_and_stats          try/acquire/release against a host-wide limit of 2, a
 *                                  timeout, a queued acquire handed a released permit (FIFO
 *                                  wake-up), a double release, hg_host_stats, the path
 *   mismatch_and_adopt             a second open asking another limit: HG_STATUS_HOST_SEGMENT
 *                                  naming max_concurrent; HG_HOST_ON_MISMATCH_ADOPT attaches
 *   close_and_drain                close wakes a waiter with HG_STATUS_SHUTDOWN and refuses new
 *                                  acquires; drain reports this process's permits
 *   fork_child_gets_its_own_slot   C40: a child releasing the parent's permit gets
 *                                  HG_STATUS_FOREIGN_LEASE; the child's acquires use a slot of
 *                                  its own under the same host-wide limit
 *   killed_holders_permits_return  a child SIGKILLed (and one that _exits) while holding the
 *                                  only permit: the parent's blocking acquire (5000 ms)
 *                                  succeeds; the reclaim time is printed
 *   stopped_holders_release_is_stale  a child SIGSTOPped past the lease TTL: the parent gets
 *                                  the permit, the child's late release is
 *                                  HG_STATUS_STALE_LEASE
 *
 * Every segment lives in a temporary directory removed at the end; every child is reaped
 * (bounded waits, SIGKILL past them). Time: lower bounds only where time must pass; the
 * reclaim is asserted within 5000 ms (10x the 0.5 s target).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hgtest.h"

static char g_dir[256];

static uint64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* The last failure's message of this thread (static buffer: one thread reads it at a time). */
static const char *last_error(void) {
    static char buf[1024];
    size_t len = 0;
    if (hg_host_last_error(buf, sizeof buf, &len) != HG_STATUS_OK) {
        snprintf(buf, sizeof buf, "(message of %zu bytes)", len);
    }
    return buf;
}

#define CHECK_MESSAGE_HAS(needle)                                                        \
    do {                                                                                 \
        const char *hg_m_ = last_error();                                                \
        hg_test_checks++;                                                                \
        if (strstr(hg_m_, (needle)) == NULL) {                                           \
            hg_test_failures++;                                                          \
            fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", __FILE__, __LINE__,  \
                    hg_m_, (needle));                                                    \
        }                                                                                \
    } while (0)

/* Short lease settings: probe 50 ms, beat 50 ms, TTL 500 ms (no test depends on speed). */
static hg_host_options options(uint64_t max_concurrent) {
    hg_host_options o;
    if (hg_host_options_default(&o) != HG_STATUS_OK) abort();
    o.max_concurrent = max_concurrent;
    o.slots = 8;
    o.probe_ms = 50;
    o.beat_ms = 50;
    o.lease_ttl_ms = 500;
    o.dir = g_dir;
    return o;
}

static hg_host_bulkhead *open_host(const char *name, uint64_t max_concurrent) {
    hg_host_options o = options(max_concurrent);
    hg_host_bulkhead *bh = NULL;
    hg_status s = hg_host_bulkhead_open(name, &o, &bh);
    if (s != HG_STATUS_OK) {
        fprintf(stderr, "hg_host_bulkhead_open(%s) -> %u: %s\n", name, (unsigned)s, last_error());
        abort();
    }
    return bh;
}

static hg_host_stats host_stats(const hg_host_bulkhead *bh) {
    hg_host_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = (uint32_t)sizeof s;
    if (hg_host_bulkhead_stats(bh, &s) != HG_STATUS_OK) abort();
    return s;
}

/* Waits up to `timeout_ms` for `pid`, then SIGKILLs and reaps it: its exit code, 128 + signal,
 * or -1 when it had to be killed. */
static int reap_child(pid_t pid, int timeout_ms) {
    int st = 0;
    for (int waited = 0; waited < timeout_ms; waited += 10) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0 && errno != EINTR) return -2;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return -1;
}

/* Reads one byte from `fd` within `timeout_ms`: 1 if read. */
static int read_byte(int fd, int timeout_ms) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char c;
    return poll(&p, 1, timeout_ms) == 1 && read(fd, &c, 1) == 1;
}

static void write_byte(int fd) {
    char c = 'x';
    if (write(fd, &c, 1) != 1) _exit(90);
}

/* A child reports its failed checks on a pipe, not in its exit code: under valgrind a forked
 * child's exit code is memcheck's (its leak check counts the parent's threads' blocks, which
 * the child does not have). */
static int g_result_fd = -1;

/* fork(); the parent gets the child's pid and `*result` (the read end of its result pipe). */
static pid_t spawn(int *result) {
    int fds[2];
    if (pipe(fds) != 0) abort();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        g_result_fd = fds[1];
        return 0;
    }
    close(fds[1]);
    *result = fds[0];
    return pid;
}

/* The child's end: its failed checks since `before` on the result pipe, then _exit (no atexit
 * handlers, no sanitizer leak check of the parent's copy). */
static void child_done(int before) {
    char n = (char)(hg_test_failures - before);
    if (write(g_result_fd, &n, 1) != 1) _exit(91);
    _exit(0);
}

/* The child's failed checks (-1: it reported nothing within 20 s). Closes `fd`. */
static int child_result(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char n = 0;
    int got = poll(&p, 1, 20000) == 1 && read(fd, &n, 1) == 1;
    close(fd);
    return got ? n : -1;
}

/* ----------------------------------------------------------------------------------------- */

static void options_are_checked(void) {
    hg_host_options d;
    CHECK_STATUS(hg_host_options_default(&d), HG_STATUS_OK);
    CHECK_EQ_U64(d.struct_size, sizeof d);
    CHECK_EQ_U64(d.max_concurrent, 10);
    CHECK_EQ_U64(d.max_queue, 100);
    CHECK_EQ_U64(d.queue_timeout_ms, 30000);
    CHECK_EQ_U64(d.budget, 0);
    CHECK_EQ_U64(d.lease_ttl_ms, 10000);
    CHECK_EQ_U64(d.beat_ms, 1000);
    CHECK_EQ_U64(d.probe_ms, 250);
    CHECK_EQ_U64(d.slots, 256);
    CHECK_EQ_U64(d.mode, 0600);
    CHECK(d.dir == NULL);
    CHECK_EQ_U64(d.on_mismatch, HG_HOST_ON_MISMATCH_ERROR);
    CHECK_STATUS(hg_host_options_check(&d), HG_STATUS_OK);

    hg_host_options o = d;
    o.on_mismatch = 7;
    CHECK_STATUS(hg_host_options_check(&o), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("on_mismatch");
    CHECK_MESSAGE_HAS("0 (error), 1 (adopt)");
    o = d;
    o.mode = 0666;
    CHECK_STATUS(hg_host_options_check(&o), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`mode`");
    CHECK_MESSAGE_HAS("world-writable");
    o.mode = 01000;
    CHECK_STATUS(hg_host_options_check(&o), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("0 ..= 511");
    o = d;
    o.max_concurrent = 0;
    CHECK_STATUS(hg_host_options_check(&o), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`max_concurrent`");
    CHECK_MESSAGE_HAS("1 ..= 1048575");
    o = d;
    o.probe_ms = 1;
    CHECK_STATUS(hg_host_options_check(&o), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`probe`");
    o = d;
    o.lease_ttl_ms = 1000; /* below 3 beats of 1000 ms */
    CHECK_STATUS(hg_host_options_check(&o), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("3 beats");
    o = d;
    o.slots = 0;
    CHECK_STATUS(hg_host_options_check(&o), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`slots`");
    o = d;
    o.dir = "";
    CHECK_STATUS(hg_host_options_check(&o), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`dir`");
    o = d;
    o.reserved[3] = 1;
    CHECK_STATUS(hg_host_options_check(&o), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("reserved[3]");
    o = d;
    o.struct_size = 8;
    CHECK_STATUS(hg_host_options_check(&o), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("struct_size");
    /* A bad option never creates anything. */
    o = options(2);
    o.on_mismatch = 7;
    hg_host_bulkhead *bh = NULL;
    CHECK_STATUS(hg_host_bulkhead_open("c-never", &o, &bh), HG_STATUS_INVALID_ARGUMENT);
    CHECK(bh == NULL);
    char path[512];
    snprintf(path, sizeof path, "%s/hullguard.%u.c-never", g_dir, (unsigned)geteuid());
    CHECK(access(path, F_OK) != 0);

    /* The new statuses: numbers (1006-1008 were taken) and messages. */
    CHECK_EQ_U64(HG_STATUS_STALE_LEASE, 1009);
    CHECK_EQ_U64(HG_STATUS_FOREIGN_LEASE, 1010);
    CHECK_EQ_U64(HG_STATUS_HOST_SEGMENT, 1011);
    CHECK(strstr(hg_status_message(HG_STATUS_STALE_LEASE), "stale lease") != NULL);
    CHECK(strstr(hg_status_message(HG_STATUS_FOREIGN_LEASE), "foreign lease") != NULL);
    CHECK(strstr(hg_status_message(HG_STATUS_HOST_SEGMENT), "hg_host_last_error") != NULL);
    CHECK(strcmp(hg_status_message(1013), "unknown status") == 0); /* 1012: the fleet */

    /* hg_host_last_error: a size query, a buffer too small, NULL. */
    size_t len = 0;
    CHECK_STATUS(hg_host_last_error(NULL, 0, &len), HG_STATUS_INVALID_ARGUMENT);
    CHECK(len > 0);
    char tiny[4];
    CHECK_STATUS(hg_host_last_error(tiny, sizeof tiny, &len), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_host_last_error(NULL, 5, &len), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_host_last_error(tiny, sizeof tiny, NULL), HG_STATUS_NULL_PARAMETER);
}

static void bad_arguments_name_the_parameter(void) {
    hg_host_options o = options(2);
    hg_host_bulkhead *bh = NULL;
    hg_host_permit *p = NULL;
    CHECK_STATUS(hg_host_options_default(NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("hg_host_options_default: `opts` is NULL");
    CHECK_STATUS(hg_host_options_check(NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_host_bulkhead_open(NULL, &o, &bh), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("`name` is NULL");
    CHECK_STATUS(hg_host_bulkhead_open("c-args", NULL, &bh), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("`opts` is NULL");
    CHECK_STATUS(hg_host_bulkhead_open("c-args", &o, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("hg_host_bulkhead_open: `out` is NULL");
    CHECK_STATUS(hg_host_bulkhead_open("../escape", &o, &bh), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`name`");
    CHECK_STATUS(hg_host_bulkhead_open("", &o, &bh), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_host_bulkhead_open("\xff", &o, &bh), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`name`");
    CHECK(bh == NULL);
    o.dir = "/nonexistent-hullguard-dir/x";
    CHECK_STATUS(hg_host_bulkhead_open("c-args", &o, &bh), HG_STATUS_HOST_SEGMENT);
    CHECK_MESSAGE_HAS("/nonexistent-hullguard-dir/x");
    CHECK(bh == NULL);

    bh = open_host("c-args", 2);
    CHECK_STATUS(hg_host_bulkhead_try_acquire(NULL, 1, &p), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("hg_host_bulkhead_try_acquire: `bh` is NULL");
    CHECK_STATUS(hg_host_bulkhead_try_acquire(bh, 1, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("`out` is NULL");
    CHECK_STATUS(hg_host_bulkhead_try_acquire(bh, 0, &p), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("weight");
    CHECK_STATUS(hg_host_bulkhead_try_acquire(bh, 3, &p), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_host_bulkhead_acquire(NULL, 1, 0, &p), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_host_bulkhead_acquire(bh, 1, 0, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_host_bulkhead_acquire(bh, 0, 0, &p), HG_STATUS_INVALID_ARGUMENT);
    CHECK(p == NULL);
    hg_request r;
    CHECK_STATUS(hg_request_default(&r), HG_STATUS_OK);
    CHECK_STATUS(hg_host_bulkhead_acquire_request(bh, NULL, &p), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("`request` is NULL");
    CHECK_STATUS(hg_host_bulkhead_acquire_request(NULL, &r, &p), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_host_bulkhead_acquire_request(bh, &r, NULL), HG_STATUS_NULL_PARAMETER);
    r.class_index = 1; /* a host bulkhead has no classes */
    CHECK_STATUS(hg_host_bulkhead_acquire_request(bh, &r, &p), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("class");
    r.class_index = 0;
    r.cost = 1; /* no budget */
    CHECK_STATUS(hg_host_bulkhead_acquire_request(bh, &r, &p), HG_STATUS_INVALID_ARGUMENT);
    r.struct_size = 4;
    CHECK_STATUS(hg_host_bulkhead_acquire_request(bh, &r, &p), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`request`");
    CHECK(p == NULL);

    hg_host_stats s;
    memset(&s, 0, sizeof s);
    CHECK_STATUS(hg_host_bulkhead_stats(NULL, &s), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_host_bulkhead_stats(bh, NULL), HG_STATUS_NULL_PARAMETER);
    s.struct_size = 2;
    CHECK_STATUS(hg_host_bulkhead_stats(bh, &s), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("struct_size");
    /* An older, smaller caller's struct: written up to its size, the size echoed. */
    s.struct_size = (uint32_t)offsetof(hg_host_stats, admitted_total);
    s.admitted_total = 77;
    CHECK_STATUS(hg_host_bulkhead_stats(bh, &s), HG_STATUS_OK);
    CHECK_EQ_U64(s.struct_size, offsetof(hg_host_stats, admitted_total));
    CHECK_EQ_U64(s.limit, 2);
    CHECK_EQ_U64(s.admitted_total, 77);

    hg_drain_result d;
    CHECK_STATUS(hg_host_bulkhead_drain(NULL, 0, &d), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_host_bulkhead_drain(bh, 0, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_host_bulkhead_reap(NULL, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_host_bulkhead_reap(bh, NULL), HG_STATUS_OK);
    CHECK_STATUS(hg_host_bulkhead_close(NULL), HG_STATUS_NULL_PARAMETER);
    size_t len = 0;
    CHECK_STATUS(hg_host_bulkhead_path(NULL, NULL, 0, &len), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_host_bulkhead_path(bh, NULL, 0, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_host_bulkhead_path(bh, NULL, 3, &len), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("`buf` is NULL");
    CHECK_STATUS(hg_host_permit_release(NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("hg_host_permit_release: `permit` is NULL");
    CHECK_EQ_U64(hg_host_permit_weight(NULL), 0);
    hg_host_permit_free(NULL);
    hg_host_bulkhead_free(NULL);
    CHECK(hg_host_bulkhead_retain(NULL) == NULL);
    hg_host_bulkhead_free(bh);
}

/* A thread's blocking acquire, for the tests that hand it a permit or close under it. */
typedef struct {
    hg_host_bulkhead *bh;
    uint64_t timeout_ms;
    hg_status status;
    hg_host_permit *permit;
} waiter;

static void *wait_for_permit(void *arg) {
    waiter *w = arg;
    w->status = hg_host_bulkhead_acquire(w->bh, 1, w->timeout_ms, &w->permit);
    return NULL;
}

/* Starts a waiter thread (a frame of its own: tests/c/valgrind-host.supp names it). */
__attribute__((noinline)) static int start_waiter(pthread_t *t, waiter *w) {
    return pthread_create(t, NULL, wait_for_permit, w);
}

/* Waits (bounded) until the host shows `n` waiters. */
static int wait_queued(const hg_host_bulkhead *bh, uint64_t n) {
    for (int i = 0; i < 1000; i++) {
        if (host_stats(bh).queued >= n) return 1;
        usleep(5000);
    }
    return 0;
}

static void limit_queue_and_stats(void) {
    hg_host_bulkhead *bh = open_host("c-limit", 2);
    hg_host_permit *a = NULL, *b = NULL, *c = NULL;
    CHECK_STATUS(hg_host_bulkhead_try_acquire(bh, 1, &a), HG_STATUS_OK);
    CHECK_EQ_U64(hg_host_permit_weight(a), 1);
    CHECK_STATUS(hg_host_bulkhead_acquire(bh, 1, HG_TIMEOUT_DEFAULT, &b), HG_STATUS_OK);
    CHECK_STATUS(hg_host_bulkhead_try_acquire(bh, 1, &c), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK(c == NULL);
    CHECK_MESSAGE_HAS("concurrency_limit");
    CHECK_STATUS(hg_host_bulkhead_acquire(bh, 1, 0, &c), HG_STATUS_CONCURRENCY_LIMIT);
    uint64_t t0 = now_ms();
    CHECK_STATUS(hg_host_bulkhead_acquire(bh, 1, 30, &c), HG_STATUS_TIMEOUT);
    CHECK(now_ms() - t0 >= 29);
    CHECK(c == NULL);

    hg_host_stats s = host_stats(bh);
    CHECK_EQ_U64(s.struct_size, sizeof s);
    CHECK_EQ_U64(s.active, 2);
    CHECK_EQ_U64(s.limit, 2);
    CHECK_EQ_I64(s.available, 0);
    CHECK_EQ_U64(s.in_flight, 2);
    CHECK_EQ_U64(s.local_active, 2);
    CHECK_EQ_U64(s.local_in_flight, 2);
    CHECK_EQ_U64(s.attached, 1);
    CHECK_EQ_U64(s.slots, 8);
    CHECK_EQ_U64(s.admitted_total, 2);
    CHECK_EQ_U64(s.rejected[HG_REASON_CONCURRENCY_LIMIT], 2);
    CHECK_EQ_U64(s.rejected[HG_REASON_TIMEOUT], 1);
    CHECK(!s.budget_present);

    /* A queued acquire on another thread gets the next released permit. */
    waiter w = {.bh = bh, .timeout_ms = 5000};
    pthread_t t;
    CHECK(start_waiter(&t, &w) == 0);
    CHECK(wait_queued(bh, 1));
    CHECK_EQ_U64(host_stats(bh).local_queued, 1);
    CHECK_STATUS(hg_host_permit_release(a), HG_STATUS_OK);
    CHECK_EQ_U64(hg_host_permit_weight(a), 0);
    CHECK_STATUS(hg_host_permit_release(a), HG_STATUS_ALREADY_RELEASED);
    CHECK_MESSAGE_HAS("already released");
    pthread_join(t, NULL);
    CHECK_STATUS(w.status, HG_STATUS_OK);
    s = host_stats(bh);
    CHECK_EQ_U64(s.active, 2);
    CHECK_EQ_U64(s.queued, 0);
    CHECK_EQ_U64(s.queue_wait_count, 1);
    CHECK(s.queue_wait_sum_ns > 0);

    /* A second reference: the permits need neither. */
    const hg_host_bulkhead *again = hg_host_bulkhead_retain(bh);
    CHECK(again == bh);
    hg_host_bulkhead_free(bh);
    CHECK_STATUS(hg_host_permit_release(w.permit), HG_STATUS_OK);
    hg_host_bulkhead_free(again);
    CHECK_STATUS(hg_host_permit_release(b), HG_STATUS_OK);
    hg_host_permit_free(a);
    hg_host_permit_free(b);
    hg_host_permit_free(w.permit);

    /* Weight 2 of 2; a held permit freed is released. */
    bh = open_host("c-limit", 2);
    CHECK_STATUS(hg_host_bulkhead_try_acquire(bh, 2, &a), HG_STATUS_OK);
    CHECK_EQ_U64(host_stats(bh).active, 2);
    hg_host_permit_free(a);
    s = host_stats(bh);
    CHECK_EQ_U64(s.active, 0);
    CHECK_EQ_I64(s.available, 2);

    size_t len = 0;
    CHECK_STATUS(hg_host_bulkhead_path(bh, NULL, 0, &len), HG_STATUS_INVALID_ARGUMENT);
    char path[512], want[512];
    CHECK(len < sizeof path);
    CHECK_STATUS(hg_host_bulkhead_path(bh, path, sizeof path, &len), HG_STATUS_OK);
    snprintf(want, sizeof want, "%s/hullguard.%u.c-limit", g_dir, (unsigned)geteuid());
    CHECK(strcmp(path, want) == 0);
    CHECK_EQ_U64(len, strlen(want));
    CHECK(access(path, F_OK) == 0);
    hg_host_bulkhead_free(bh);
    CHECK(access(path, F_OK) == 0); /* never unlinked automatically */
}

static void mismatch_and_adopt(void) {
    hg_host_bulkhead *bh = open_host("c-mismatch", 3);
    hg_host_options o = options(5);
    hg_host_bulkhead *other = NULL;
    CHECK_STATUS(hg_host_bulkhead_open("c-mismatch", &o, &other), HG_STATUS_HOST_SEGMENT);
    CHECK_MESSAGE_HAS("max_concurrent is 3");
    CHECK_MESSAGE_HAS("asked for 5");
    CHECK(other == NULL);
    o.on_mismatch = HG_HOST_ON_MISMATCH_ADOPT;
    CHECK_STATUS(hg_host_bulkhead_open("c-mismatch", &o, &other), HG_STATUS_OK);
    hg_host_stats s = host_stats(other);
    CHECK_EQ_U64(s.limit, 3);
    CHECK_EQ_U64(s.slot, host_stats(bh).slot); /* one attachment per process */
    hg_host_bulkhead_free(other);
    hg_host_bulkhead_free(bh);
}

static void close_and_drain(void) {
    hg_host_bulkhead *bh = open_host("c-close", 1);
    hg_host_permit *p = NULL, *q = NULL;
    CHECK_STATUS(hg_host_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_OK);
    hg_drain_result d;
    CHECK_STATUS(hg_host_bulkhead_drain(bh, 0, &d), HG_STATUS_OK);
    CHECK(!d.drained);
    CHECK_EQ_U64(d.active, 1);
    waiter w = {.bh = bh, .timeout_ms = 5000};
    pthread_t t;
    CHECK(start_waiter(&t, &w) == 0);
    CHECK(wait_queued(bh, 1));
    uint64_t t0 = now_ms();
    CHECK_STATUS(hg_host_bulkhead_close(bh), HG_STATUS_OK);
    CHECK_STATUS(hg_host_bulkhead_close(bh), HG_STATUS_OK);
    pthread_join(t, NULL);
    CHECK_STATUS(w.status, HG_STATUS_SHUTDOWN);
    CHECK(now_ms() - t0 < 2500); /* woken by the close, not its 5000 ms timeout */
    CHECK(w.permit == NULL);
    CHECK_STATUS(hg_host_bulkhead_try_acquire(bh, 1, &q), HG_STATUS_SHUTDOWN);
    CHECK_STATUS(hg_host_bulkhead_acquire(bh, 1, 100, &q), HG_STATUS_SHUTDOWN);
    CHECK_EQ_U64(host_stats(bh).rejected[HG_REASON_SHUTDOWN], 3);
    CHECK_STATUS(hg_host_permit_release(p), HG_STATUS_OK); /* held permits still release */
    CHECK_STATUS(hg_host_bulkhead_drain(bh, 1000, &d), HG_STATUS_OK);
    CHECK(d.drained);
    CHECK_EQ_U64(d.active, 0);
    CHECK_EQ_U64(d.queued, 0);
    CHECK_STATUS(hg_host_bulkhead_drain(bh, HG_TIMEOUT_INFINITE, &d), HG_STATUS_OK);
    CHECK(d.drained);
    hg_host_permit_free(p);
    hg_host_bulkhead_free(bh);
}

static void fork_child_gets_its_own_slot(void) {
    hg_host_bulkhead *bh = open_host("c-fork", 2);
    hg_host_permit *p = NULL;
    CHECK_STATUS(hg_host_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_OK);
    uint64_t parent_slot = host_stats(bh).slot;
    int result = -1;
    pid_t pid = spawn(&result);
    if (pid == 0) {
        int before = hg_test_failures;
        /* The parent's permit: refused, nothing released. */
        CHECK_STATUS(hg_host_permit_release(p), HG_STATUS_FOREIGN_LEASE);
        CHECK_MESSAGE_HAS("foreign lease");
        CHECK_STATUS(hg_host_permit_release(p), HG_STATUS_ALREADY_RELEASED);
        hg_host_permit_free(p);
        /* The inherited handle attaches the child to a slot of its own. */
        hg_host_stats s = host_stats(bh);
        CHECK(s.slot != parent_slot);
        CHECK_EQ_U64(s.attached, 2);
        CHECK_EQ_U64(s.active, 1); /* still the parent's */
        CHECK_EQ_U64(s.foreign_releases_total, 1);
        hg_host_permit *q = NULL, *r = NULL;
        CHECK_STATUS(hg_host_bulkhead_try_acquire(bh, 1, &q), HG_STATUS_OK);
        CHECK_STATUS(hg_host_bulkhead_try_acquire(bh, 1, &r), HG_STATUS_CONCURRENCY_LIMIT);
        /* A handle the child opens is the same attachment. */
        hg_host_bulkhead *own = open_host("c-fork", 2);
        s = host_stats(own);
        CHECK(s.slot != parent_slot);
        CHECK_EQ_U64(s.slot, host_stats(bh).slot);
        CHECK_EQ_U64(s.local_active, 1);
        CHECK_EQ_U64(s.active, 2);
        CHECK_STATUS(hg_host_permit_release(q), HG_STATUS_OK);
        hg_host_permit_free(q);
        hg_host_bulkhead_free(own);
        hg_host_bulkhead_free(bh);
        child_done(before);
    }
    CHECK(pid > 0);
    CHECK_EQ_I64(child_result(result), 0);
    CHECK(reap_child(pid, 10000) >= 0);
    hg_host_stats s = host_stats(bh);
    CHECK_EQ_U64(s.active, 1); /* the parent's permit, untouched by the child */
    CHECK_EQ_U64(s.local_active, 1);
    CHECK_EQ_U64(s.foreign_releases_total, 1);
    CHECK_EQ_U64(s.slot, parent_slot);
    CHECK_STATUS(hg_host_permit_release(p), HG_STATUS_OK);
    hg_host_permit_free(p);
    CHECK_EQ_U64(host_stats(bh).active, 0);
    hg_host_bulkhead_free(bh);
}

/* A child that takes the only permit, says so on `ready`, then either _exits at once without
 * releasing (`then_exit`) or waits (bounded) to be killed. */
static pid_t child_holding(const char *name, int ready, int then_exit) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) return pid;
    hg_host_bulkhead *bh = open_host(name, 1);
    hg_host_permit *p = NULL;
    if (hg_host_bulkhead_acquire(bh, 1, 5000, &p) != HG_STATUS_OK) _exit(2);
    write_byte(ready);
    if (then_exit) _exit(0);
    sleep(30); /* killed long before */
    _exit(3);
}

static void killed_holders_permits_return(void) {
    hg_host_bulkhead *bh = open_host("c-kill", 1);
    int fds[2];
    CHECK(pipe(fds) == 0);
    hg_host_permit *p = NULL;

    /* SIGKILL while holding. */
    pid_t pid = child_holding("c-kill", fds[1], 0);
    CHECK(read_byte(fds[0], 10000));
    CHECK_STATUS(hg_host_bulkhead_try_acquire(bh, 1, &p), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK_EQ_U64(host_stats(bh).attached, 2);
    uint64_t t0 = now_ms();
    CHECK(kill(pid, SIGKILL) == 0);
    /* Not reaped yet: a zombie holds no lock. */
    CHECK_STATUS(hg_host_bulkhead_acquire(bh, 1, 5000, &p), HG_STATUS_OK);
    uint64_t took = now_ms() - t0;
    printf("     reclaim after SIGKILL: %" PRIu64 " ms (probe 50 ms; asserted within 5000)\n",
           took);
    CHECK_EQ_I64(reap_child(pid, 10000), 128 + SIGKILL);
    hg_host_stats s = host_stats(bh);
    CHECK(s.reclaimed_dead_total >= 1);
    CHECK(s.reclaimed_permits_total >= 1);
    CHECK_EQ_U64(s.active, 1);
    CHECK_EQ_U64(s.attached, 1);
    CHECK_STATUS(hg_host_permit_release(p), HG_STATUS_OK);
    hg_host_permit_free(p);
    p = NULL;

    /* _exit without releasing. */
    pid = child_holding("c-kill", fds[1], 1);
    CHECK(read_byte(fds[0], 10000));
    CHECK(reap_child(pid, 10000) >= 0); /* exited (its code is memcheck's under valgrind) */
    t0 = now_ms();
    CHECK_STATUS(hg_host_bulkhead_acquire(bh, 1, 5000, &p), HG_STATUS_OK);
    printf("     reclaim after _exit: %" PRIu64 " ms\n", now_ms() - t0);
    s = host_stats(bh);
    CHECK(s.reclaimed_dead_total >= 2);
    CHECK_EQ_U64(s.active, 1);
    CHECK_STATUS(hg_host_permit_release(p), HG_STATUS_OK);
    hg_host_permit_free(p);
    CHECK_EQ_U64(host_stats(bh).active, 0);
    close(fds[0]);
    close(fds[1]);
    hg_host_bulkhead_free(bh);
}

static void stopped_holders_release_is_stale(void) {
    hg_host_bulkhead *bh = open_host("c-stop", 1);
    int up[2], down[2];
    CHECK(pipe(up) == 0 && pipe(down) == 0);
    int result = -1;
    pid_t pid = spawn(&result);
    if (pid == 0) {
        int before = hg_test_failures;
        hg_host_permit *p = NULL;
        if (hg_host_bulkhead_acquire(bh, 1, 5000, &p) != HG_STATUS_OK) _exit(2);
        write_byte(up[1]);
        if (!read_byte(down[0], 20000)) _exit(4); /* stopped, expired, continued */
        CHECK_STATUS(hg_host_permit_release(p), HG_STATUS_STALE_LEASE);
        CHECK_MESSAGE_HAS("stale lease");
        CHECK_STATUS(hg_host_permit_release(p), HG_STATUS_ALREADY_RELEASED);
        hg_host_permit_free(p);
        child_done(before);
    }
    CHECK(pid > 0);
    CHECK(read_byte(up[0], 10000));
    CHECK(kill(pid, SIGSTOP) == 0);
    uint64_t t0 = now_ms();
    hg_host_permit *p = NULL;
    CHECK_STATUS(hg_host_bulkhead_acquire(bh, 1, 5000, &p), HG_STATUS_OK);
    uint64_t took = now_ms() - t0;
    printf("     expiry after SIGSTOP: %" PRIu64 " ms (lease TTL 500 ms)\n", took);
    /* The TTL runs from the child's last beat, at most about one beat before the stop. */
    CHECK(took >= 250);
    CHECK(kill(pid, SIGCONT) == 0);
    write_byte(down[1]);
    CHECK_EQ_I64(child_result(result), 0);
    CHECK(reap_child(pid, 10000) >= 0);
    hg_host_stats s = host_stats(bh);
    CHECK(s.reclaimed_expired_total >= 1);
    CHECK_EQ_U64(s.stale_releases_total, 1);
    CHECK(s.orphaned_total >= 1);
    CHECK_EQ_U64(s.active, 1); /* the parent's, counted once */
    CHECK_STATUS(hg_host_permit_release(p), HG_STATUS_OK);
    hg_host_permit_free(p);
    CHECK_EQ_U64(host_stats(bh).active, 0);
    close(up[0]);
    close(up[1]);
    close(down[0]);
    close(down[1]);
    hg_host_bulkhead_free(bh);
}

/* Removes the temporary directory and every file in it. */
static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d != NULL) {
        struct dirent *e;
        char path[512];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    if (rmdir(dir) != 0) {
        hg_test_failures++;
        fprintf(stderr, "could not remove %s\n", dir);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/hg-c-host-XXXXXX", tmp != NULL && *tmp ? tmp : "/tmp");
    if (mkdtemp(g_dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    RUN(options_are_checked);
    RUN(bad_arguments_name_the_parameter);
    RUN(limit_queue_and_stats);
    RUN(mismatch_and_adopt);
    RUN(close_and_drain);
    RUN(fork_child_gets_its_own_slot);
    RUN(killed_holders_permits_return);
    RUN(stopped_holders_release_is_stale);
    remove_dir(g_dir);
    return hg_test_summary(argv[0]);
}
