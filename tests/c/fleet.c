/*
 * fleet.c: the fleet bulkhead through the C ABI (issue 20; hg_fleet_*, docs/design.md §16), from
 * real C with hiredis as the transport callback and real redis-server processes this test
 * starts on free loopback ports (fork/exec, --save '' --appendonly no; killed and reaped),
 * plain, under ASan + UBSan and under valgrind (tests/c/run.sh). Build: -lhiredis (Debian
 * libhiredis-dev).
 *
 *   options_are_named_by_the_table       hg_fleet_options_*: unknown and local-only options
 *                                        (rates, adaptive, observe) refused with the fleet
 *                                        table's message, classes / on_event by name pointed
 *                                        to their setters, ranges shown (budget 0 named),
 *                                        camelCase accepted, a bad pool or holder, the
 *                                        beat/TTL relation at open
 *   classes_and_events_options_are_checked  hg_fleet_options_set_classes / _set_on_event: NULL,
 *                                        a bad struct size, class count, class or rate refused
 *                                        naming the field; floors that do not fit (or budget
 *                                        floors without a budget) refused at open, before the
 *                                        transport is called
 *   bad_arguments_are_statuses           NULL for every pointer, a bad transport struct, a
 *                                        callback that fails, fills nothing, fills twice, nests
 *                                        arrays or answers NOPERM (HG_STATUS_FLEET_TRANSPORT
 *                                        with its words, release never called); with Redis
 *                                        "down": FLEET_LEASE refusals, the handle's limit
 *                                        setters refused (set_budget too), apply_limits' ranges
 *                                        named, the budget dimension of a fleet bulkhead
 *                                        without one refused by name (apply, stats, pool
 *                                        stats, lease error), an unknown dimension, the lease
 *                                        error kept, a call from the callback refused (no
 *                                        deadlock), close / free / release exactly once
 *   first_block_then_local_acquires      one blocking acquire gets the first block; the lease
 *                                        thread calls the callback; 1000 acquires inside the
 *                                        block do not sync; the pool shows this holder
 *   two_bulkheads_converge_to_fair_shares  8 busy threads on each of two fleet bulkheads of one
 *                                        pool of 10: both reach 5/5; an in-flight oracle never
 *                                        sees more than 10
 *   apply_limits_is_revisioned           rev 2 applied, a stale rev 1 refused HG_STATUS_STALE
 *                                        with the limit in force; the other holder sees it
 *   redis_killed_refuses_with_fleet_lease  SIGKILL the server: one TTL later a try is refused
 *                                        CONCURRENCY_LIMIT with bound HG_BOUND_FLEET_LEASE
 *                                        (state expired, lease error kept); a local_share
 *                                        bulkhead admits 2; restarted on the same port (library
 *                                        reloaded after "Function not found"): the lease is back
 *   flushall_learns_and_keeps_blocks     FLUSHALL: re-admitted in a new epoch, learning, the
 *                                        permits in flight still counted
 *   late_grant_is_never_used             C42: a callback that delays sync replies past the TTL:
 *                                        nothing admitted, the late grant given back, then a
 *                                        lease once replies are timely
 *   wait_replicas_without_a_replica_admits_nothing  wait_replicas 1 on a server without
 *                                        replicas: WAIT goes through the callback, the growth is
 *                                        counted unreplicated and never admitted on
 *   close_releases_the_block             close refuses the queued waiter HG_STATUS_SHUTDOWN,
 *                                        lets the permit in flight release, gives the block
 *                                        back (the pool shows no holder), is idempotent
 *   budget_is_leased_like_the_permits    budget 100 on two fleet bulkheads of one pool: a cost
 *                                        within the block granted at once; the other's empty
 *                                        budget block refuses a try BUDGET_LIMIT (bound
 *                                        FLEET_LEASE); a cost above the fleet budget refused
 *                                        BUDGET_LIMIT at once; a cost within it waits and is
 *                                        granted within its queue timeout once the block grows;
 *                                        the events carry the costs; apply_limits_of(BUDGET)
 *                                        under its own revision (stale named, the new budget in
 *                                        stats_of and pool_stats_of); close gives back both
 *                                        leases
 *   classes_order_the_block_and_events_are_delivered  fleet limit 1, two classes: a queued
 *                                        high-priority waiter is granted before an earlier
 *                                        low one; on_event sees the admits in that order
 *
 * No redis-server on PATH: a failure with a clear message, unless HG_SKIP_REDIS=1. Time: lower
 * bounds where time must pass; upper bounds of 10 s or more (10x the targets or more); the
 * expiry is checked at exactly one TTL after the kill (a safety bound: the deadline counts
 * from a send before the kill, less 1 % + 2 ms).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hgtest.h"

static uint64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

static void sleep_ms(uint64_t ms) {
    struct timespec t = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* Polls `cond` every 5 ms for at most `within_ms`: 1 if it held. */
#define EVENTUALLY(within_ms, cond)                                                      \
    ({                                                                                   \
        uint64_t hg_end_ = now_ms() + (within_ms);                                       \
        int hg_ok_ = 0;                                                                  \
        for (;;) {                                                                       \
            if (cond) {                                                                  \
                hg_ok_ = 1;                                                              \
                break;                                                                   \
            }                                                                            \
            if (now_ms() >= hg_end_) break;                                              \
            sleep_ms(5);                                                                 \
        }                                                                                \
        hg_ok_;                                                                          \
    })

/* The last failure's message of this thread (static buffer: one thread reads it at a time). */
static const char *last_error(void) {
    static char buf[2048];
    size_t len = 0;
    if (hg_fleet_last_error(buf, sizeof buf, &len) != HG_STATUS_OK) {
        snprintf(buf, sizeof buf, "(message of %zu bytes)", len);
    }
    return buf;
}

#define CHECK_HAS(text, needle)                                                          \
    do {                                                                                 \
        const char *hg_m_ = (text);                                                      \
        hg_test_checks++;                                                                \
        if (strstr(hg_m_, (needle)) == NULL) {                                           \
            hg_test_failures++;                                                          \
            fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", __FILE__, __LINE__,  \
                    hg_m_, (needle));                                                    \
        }                                                                                \
    } while (0)

#define CHECK_MESSAGE_HAS(needle) CHECK_HAS(last_error(), needle)

static hg_fleet_stats fleet_stats(const hg_fleet_bulkhead *fb) {
    hg_fleet_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = (uint32_t)sizeof s;
    if (hg_fleet_bulkhead_stats(fb, &s) != HG_STATUS_OK) abort();
    return s;
}

static hg_fleet_pool_stats pool_stats(const hg_fleet_bulkhead *fb) {
    hg_fleet_pool_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = (uint32_t)sizeof s;
    hg_status st = hg_fleet_bulkhead_pool_stats(fb, &s);
    if (st != HG_STATUS_OK) {
        hg_test_failures++;
        fprintf(stderr, "hg_fleet_bulkhead_pool_stats -> %u: %s\n", (unsigned)st, last_error());
    }
    return s;
}

static hg_bulkhead *local_of(const hg_fleet_bulkhead *fb) {
    hg_bulkhead *bh = NULL;
    if (hg_fleet_bulkhead_bulkhead(fb, &bh) != HG_STATUS_OK) abort();
    return bh;
}

/* A try of weight 1 with its refusal's detail: HG_STATUS_OK (the permit released at once), or
 * the refusal's status with `*bound` set. */
static hg_status try_once(const hg_bulkhead *bh, uint32_t *bound) {
    hg_rejection d;
    memset(&d, 0, sizeof d);
    d.struct_size = (uint32_t)sizeof d;
    hg_request r;
    if (hg_request_default(&r) != HG_STATUS_OK) abort();
    r.detail = &d;
    hg_permit *p = NULL;
    hg_status s = hg_bulkhead_try_acquire_request(bh, &r, &p);
    if (s == HG_STATUS_OK) {
        hg_permit_release(p);
        hg_permit_free(p);
    }
    *bound = d.bound;
    return s;
}

/* ----- redis-server processes ------------------------------------------------------------ */

static char g_redis[512];

/* redis-server on PATH (its path in g_redis): 1 if found. */
static int find_redis(void) {
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s", path != NULL ? path : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d != NULL;
         d = strtok_r(NULL, ":", &save)) {
        snprintf(g_redis, sizeof g_redis, "%s/redis-server", d);
        if (access(g_redis, X_OK) == 0) return 1;
    }
    return 0;
}

/* A free loopback port (bound and closed: another process could take it before redis-server
 * does; server_start then tries another). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    int port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &n) == 0) {
        port = ntohs(a.sin_port);
    }
    if (fd >= 0) close(fd);
    return port;
}

/* A hiredis connection with connect and call timeouts of `timeout_ms`, or NULL (`why` gets the
 * reason if not NULL). */
static redisContext *connect_to(int port, int timeout_ms, char *why, size_t why_len) {
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL || c->err) {
        if (why != NULL) snprintf(why, why_len, "%s", c != NULL ? c->errstr : "out of memory");
        if (c != NULL) redisFree(c);
        return NULL;
    }
    if (redisSetTimeout(c, tv) != REDIS_OK) {
        if (why != NULL) snprintf(why, why_len, "redisSetTimeout failed");
        redisFree(c);
        return NULL;
    }
    return c;
}

/* Runs one command on a fresh connection; 1 if Redis answered without an error. */
static int admin(int port, const char *cmd) {
    redisContext *c = connect_to(port, 1000, NULL, 0);
    if (c == NULL) return 0;
    redisReply *r = redisCommand(c, cmd);
    int ok = r != NULL && r->type != REDIS_REPLY_ERROR;
    if (r != NULL) freeReplyObject(r);
    redisFree(c);
    return ok;
}

typedef struct {
    int port;
    pid_t pid;
} server;

/* Starts redis-server on `port` (0: a free one), waits (up to 10 s) until it answers PING. */
static int server_start(server *s, int port) {
    for (int attempt = 0; attempt < 5; attempt++) {
        int p = port != 0 ? port : free_port();
        char ports[16];
        snprintf(ports, sizeof ports, "%d", p);
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) return 0;
        if (pid == 0) {
            int null = open("/dev/null", O_RDWR);
            if (null >= 0) {
                dup2(null, 0);
                dup2(null, 1);
                dup2(null, 2);
            }
            execl(g_redis, "redis-server", "--port", ports, "--bind", "127.0.0.1", "--save", "",
                  "--appendonly", "no", "--dir", "/tmp", (char *)NULL);
            _exit(127);
        }
        for (int i = 0; i < 1000; i++) {
            if (admin(p, "PING")) {
                s->port = p;
                s->pid = pid;
                return 1;
            }
            int st;
            if (waitpid(pid, &st, WNOHANG) == pid) break; /* exited: the port was taken */
            sleep_ms(10);
        }
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        if (port != 0) sleep_ms(100); /* the same port: give it a moment */
    }
    hg_test_failures++;
    fprintf(stderr, "could not start %s\n", g_redis);
    return 0;
}

/* SIGKILL and reap. */
static void server_kill(server *s) {
    if (s->pid <= 0) return;
    kill(s->pid, SIGKILL);
    while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    s->pid = 0;
}

/* ----- the transport: hiredis behind hg_fleet_transport ------------------------------------- */

typedef struct {
    int port;
    redisContext *c;           /* used by one call at a time: the library serialises them */
    pthread_t opener;          /* the thread that opened the fleet bulkhead */
    atomic_uint calls;         /* callback calls */
    atomic_uint calls_elsewhere; /* ... on another thread: the lease's */
    atomic_int sync_delay_ms;  /* C42: hold every hg_sync reply this long */
    atomic_int released;       /* release() calls */
    atomic_uint loads;         /* FUNCTION LOAD calls */
} rconn;

/* A hiredis reply into an hg_fleet_reply (the library's replies are flat). */
static void fill(hg_fleet_reply *out, const redisReply *r) {
    switch (r->type) {
    case REDIS_REPLY_INTEGER:
        hg_fleet_reply_integer(out, r->integer);
        break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        hg_fleet_reply_string(out, r->str, r->len);
        break;
    case REDIS_REPLY_ERROR:
        hg_fleet_reply_error(out, r->str, r->len);
        break;
    case REDIS_REPLY_ARRAY:
        hg_fleet_reply_array(out);
        for (size_t i = 0; i < r->elements; i++) fill(out, r->element[i]);
        break;
    default: /* nil: the library never answers one */
        hg_fleet_reply_string(out, "", 0);
        break;
    }
}

static int redis_call(void *ctx, const char *const *argv, const size_t *argv_len, size_t argc,
                      hg_fleet_reply *reply) {
    rconn *k = ctx;
    atomic_fetch_add(&k->calls, 1);
    if (!pthread_equal(pthread_self(), k->opener)) atomic_fetch_add(&k->calls_elsewhere, 1);
    if (strcmp(argv[0], "FUNCTION") == 0) atomic_fetch_add(&k->loads, 1);
    if (k->c == NULL) {
        char why[256];
        k->c = connect_to(k->port, 300, why, sizeof why);
        if (k->c == NULL) {
            hg_fleet_reply_error(reply, why, strlen(why));
            return -1;
        }
    }
    redisReply *r = redisCommandArgv(k->c, (int)argc, (const char **)argv, argv_len);
    if (r == NULL) { /* I/O: the next call reconnects */
        hg_fleet_reply_error(reply, k->c->errstr, strlen(k->c->errstr));
        redisFree(k->c);
        k->c = NULL;
        return -1;
    }
    fill(reply, r);
    freeReplyObject(r);
    int delay = atomic_load(&k->sync_delay_ms);
    if (delay > 0 && argc > 1 && strcmp(argv[1], "hg_sync") == 0) sleep_ms((uint64_t)delay);
    return 0;
}

static void redis_release(void *ctx) {
    rconn *k = ctx;
    if (k->c != NULL) redisFree(k->c);
    k->c = NULL;
    atomic_fetch_add(&k->released, 1);
}

static hg_fleet_options *options(const char *pool, uint64_t limit, uint64_t ttl_ms) {
    hg_fleet_options *o = NULL;
    if (hg_fleet_options_new(pool, &o) != HG_STATUS_OK) abort();
    if (hg_fleet_options_set_int(o, "max_concurrent", limit) != HG_STATUS_OK ||
        hg_fleet_options_set_int(o, "lease_ttl", ttl_ms) != HG_STATUS_OK ||
        hg_fleet_options_set_int(o, "queue_timeout", 10000) != HG_STATUS_OK) {
        fprintf(stderr, "options: %s\n", last_error());
        abort();
    }
    return o;
}

static hg_fleet_bulkhead *open_with(rconn *k, hg_fleet_options *o) {
    k->opener = pthread_self();
    hg_fleet_transport t = {.struct_size = (uint32_t)sizeof t,
                            .ctx = k,
                            .call = redis_call,
                            .release = redis_release};
    hg_fleet_bulkhead *fb = NULL;
    hg_status s = hg_fleet_bulkhead_open(o, &t, &fb);
    hg_fleet_options_free(o);
    if (s != HG_STATUS_OK) {
        fprintf(stderr, "hg_fleet_bulkhead_open -> %u: %s\n", (unsigned)s, last_error());
        abort();
    }
    return fb;
}

static hg_fleet_bulkhead *open_fleet(rconn *k, const char *pool, uint64_t limit,
                                     uint64_t ttl_ms) {
    return open_with(k, options(pool, limit, ttl_ms));
}

/* ----- a scripted transport, no Redis --------------------------------------------------- */

enum { S_DOWN, S_NO_REPLY, S_TWO_SCALARS, S_NESTED, S_NOPERM, S_LOADED_THEN_DOWN };

typedef struct {
    int mode;
    atomic_uint calls;
    atomic_int released;
    _Atomic(hg_fleet_bulkhead *) fb; /* for the call from inside the callback */
    atomic_int reentrant_close;      /* its status; -1 until made */
    atomic_int reentrant_apply;
    atomic_int misuse_status;        /* the status of a wrong reply call */
} script;

#define ERR(reply, text) hg_fleet_reply_error((reply), (text), sizeof(text) - 1)

static int script_call(void *ctx, const char *const *argv, const size_t *argv_len, size_t argc,
                       hg_fleet_reply *reply) {
    script *k = ctx;
    atomic_fetch_add(&k->calls, 1);
    if (argc < 2 || argv_len[0] != strlen(argv[0])) return 99; /* never */
    switch (k->mode) {
    case S_DOWN:
        ERR(reply, "connection refused (test)");
        return -1;
    case S_NO_REPLY:
        return 0;
    case S_TWO_SCALARS:
        hg_fleet_reply_integer(reply, 1);
        atomic_store(&k->misuse_status, (int)hg_fleet_reply_integer(reply, 2));
        return 0;
    case S_NESTED:
        hg_fleet_reply_array(reply);
        atomic_store(&k->misuse_status, (int)hg_fleet_reply_array(reply));
        return 0;
    case S_NOPERM:
        ERR(reply, "NOPERM this user has no permissions to run the 'function' command (test)");
        return 0;
    default: /* S_LOADED_THEN_DOWN */
        if (strcmp(argv[0], "FCALL_RO") == 0 && strcmp(argv[1], "hg_version") == 0) {
            hg_fleet_reply_integer(reply, HG_FLEET_LIBRARY_VERSION);
            return 0;
        }
        hg_fleet_bulkhead *fb = atomic_load(&k->fb);
        if (fb != NULL && atomic_load(&k->reentrant_close) == -1) {
            /* From the lease's thread: refused, not a deadlock. */
            atomic_store(&k->reentrant_apply,
                         (int)hg_fleet_bulkhead_apply_limits(fb, 9, 9, NULL, NULL));
            atomic_store(&k->reentrant_close, (int)hg_fleet_bulkhead_close(fb));
        }
        ERR(reply, "down (test)");
        return 1;
    }
}

static void script_release(void *ctx) {
    atomic_fetch_add(&((script *)ctx)->released, 1);
}

static hg_status open_script(script *k, hg_fleet_options *o, hg_fleet_bulkhead **out) {
    atomic_store(&k->reentrant_close, -1);
    atomic_store(&k->reentrant_apply, -1);
    atomic_store(&k->misuse_status, -1);
    hg_fleet_transport t = {.struct_size = (uint32_t)sizeof t,
                            .ctx = k,
                            .call = script_call,
                            .release = script_release};
    return hg_fleet_bulkhead_open(o, &t, out);
}

/* ----------------------------------------------------------------------------------------- */

static void options_are_named_by_the_table(void) {
    hg_fleet_options *o = NULL;
    CHECK_STATUS(hg_fleet_options_new("c-options", &o), HG_STATUS_OK);

    /* A local bulkhead's option that cannot be fleet-wide: named, with why. */
    CHECK_STATUS(hg_fleet_options_set_int(o, "rates", 5), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("hg_fleet_options_set_int: rates: not supported by a fleet bulkhead");
    CHECK_MESSAGE_HAS("each process would refill its own");
    CHECK_STATUS(hg_fleet_options_set_int(o, "adaptive", 1), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("adaptive: not supported by a fleet bulkhead");
    /* Classes and events stay local: set with their own functions, not by name. */
    CHECK_STATUS(hg_fleet_options_set_int(o, "classes", 1), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("classes: not an option set by name: set it with "
                      "hg_fleet_options_set_classes()");
    CHECK_STATUS(hg_fleet_options_set_str(o, "on_event", "f"), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("hg_fleet_options_set_on_event()");
    /* The fleet budget is an option: 1 ..= 2^32 units, 0 refused by name. */
    CHECK_STATUS(hg_fleet_options_set_int(o, "budget", 0), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("hg_fleet_options_set_int: budget: ");
    CHECK_MESSAGE_HAS("1 ..= 4294967296");
    CHECK_STATUS(hg_fleet_options_set_int(o, "budget", (1ull << 32) + 1),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("budget");
    CHECK_STATUS(hg_fleet_options_set_int(o, "budget", 5), HG_STATUS_OK);
    CHECK_STATUS(hg_fleet_options_set_str(o, "observe", "all"), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("observe mode is not fleet-wide");
    CHECK_STATUS(hg_fleet_options_set_int(o, "start_limit", 0), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("the block is set by the lease");
    /* Unknown: the known names listed. */
    CHECK_STATUS(hg_fleet_options_set_int(o, "lease_tt", 5), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("unknown option \"lease_tt\"");
    CHECK_MESSAGE_HAS("\"lease_ttl\"");
    /* Ranges shown; durations are ms. */
    CHECK_STATUS(hg_fleet_options_set_int(o, "lease_ttl", 5), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("lease_ttl");
    CHECK_MESSAGE_HAS("100ms ..= 3600s");
    CHECK_STATUS(hg_fleet_options_set_int(o, "max_concurrent", 0), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("1 ..= 4294967296");
    CHECK_STATUS(hg_fleet_options_set_int(o, "clock_drift_ppm", 100001),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("0 ..= 100000");
    /* The wrong kind. */
    CHECK_STATUS(hg_fleet_options_set_str(o, "lease_ttl", "1s"), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("expected a duration");
    CHECK_STATUS(hg_fleet_options_set_int(o, "holder", 7), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("expected a string");
    CHECK_STATUS(hg_fleet_options_set_str(o, "holder", "has space"), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("holder must be");
    CHECK_STATUS(hg_fleet_options_set_str(o, "pool", "a{b}"), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("pool must be 1..=64");
    /* Good ones, Node's spelling too. */
    CHECK_STATUS(hg_fleet_options_set_int(o, "lease_ttl", 900), HG_STATUS_OK);
    CHECK_STATUS(hg_fleet_options_set_int(o, "leaseTtlMs", 900), HG_STATUS_OK);
    CHECK_STATUS(hg_fleet_options_set_int(o, "local_share", 2), HG_STATUS_OK);
    CHECK_STATUS(hg_fleet_options_set_int(o, "max_queue", 0), HG_STATUS_OK);
    CHECK_STATUS(hg_fleet_options_set_str(o, "holder", "c-test:1:ab"), HG_STATUS_OK);
    CHECK_STATUS(hg_fleet_options_set_str(o, "pool", "c-options.2"), HG_STATUS_OK);

    /* A relation between options is checked at open, before the transport is called. */
    CHECK_STATUS(hg_fleet_options_set_int(o, "beat", 600), HG_STATUS_OK);
    script k = {.mode = S_DOWN};
    hg_fleet_bulkhead *fb = NULL;
    CHECK_STATUS(open_script(&k, o, &fb), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("hg_fleet_bulkhead_open: beat");
    CHECK_MESSAGE_HAS("at most half of lease_ttl");
    CHECK(fb == NULL);
    CHECK_EQ_U64(atomic_load(&k.calls), 0);
    hg_fleet_options_free(o);

    /* Pool names. */
    o = NULL;
    CHECK_STATUS(hg_fleet_options_new("a b", &o), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("hg_fleet_options_new: pool must be 1..=64 characters");
    CHECK_STATUS(hg_fleet_options_new("", &o), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_fleet_options_new("\xff", &o), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`pool` is not UTF-8");
    CHECK(o == NULL);
    hg_fleet_options_free(NULL);
}

static void bad_arguments_are_statuses(void) {
    hg_fleet_options *o = NULL;
    hg_fleet_bulkhead *fb = NULL;
    CHECK_STATUS(hg_fleet_options_new(NULL, &o), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("hg_fleet_options_new: `pool` is NULL");
    CHECK_STATUS(hg_fleet_options_new("c-args", NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("`out` is NULL");
    CHECK_STATUS(hg_fleet_options_new("c-args", &o), HG_STATUS_OK);
    CHECK_STATUS(hg_fleet_options_set_int(NULL, "max_queue", 1), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("`opts` is NULL");
    CHECK_STATUS(hg_fleet_options_set_int(o, NULL, 1), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("`name` is NULL");
    CHECK_STATUS(hg_fleet_options_set_str(o, "holder", NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("`value` is NULL");
    CHECK_STATUS(hg_fleet_options_set_int(o, "lease_ttl", 300), HG_STATUS_OK);
    CHECK_STATUS(hg_fleet_options_set_str(o, "holder", "c-args:1:feed"), HG_STATUS_OK);

    /* The transport. */
    script k = {.mode = S_DOWN};
    hg_fleet_transport t = {.struct_size = (uint32_t)sizeof t, .ctx = &k, .call = NULL};
    CHECK_STATUS(hg_fleet_bulkhead_open(NULL, &t, &fb), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("`opts` is NULL");
    CHECK_STATUS(hg_fleet_bulkhead_open(o, NULL, &fb), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("`transport` is NULL");
    CHECK_STATUS(hg_fleet_bulkhead_open(o, &t, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_fleet_bulkhead_open(o, &t, &fb), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("`transport->call` is NULL");
    t.call = script_call;
    t.struct_size = 8;
    CHECK_STATUS(hg_fleet_bulkhead_open(o, &t, &fb), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("struct_size");
    CHECK(fb == NULL);

    /* Callbacks that fail or fill the reply wrongly: HG_STATUS_FLEET_TRANSPORT, in their words;
     * the context stays the caller's (no release). */
    struct {
        int mode;
        const char *says;
    } bad[] = {
        {S_DOWN, "redis unreachable: connection refused (test)"},
        {S_NO_REPLY, "returned 0 without a reply"},
        {S_TWO_SCALARS, "filled the reply wrongly: a second value for a scalar reply"},
        {S_NESTED, "filled the reply wrongly: an array inside"},
        {S_NOPERM, "redis error: NOPERM"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        script s = {.mode = bad[i].mode};
        CHECK_STATUS(open_script(&s, o, &fb), HG_STATUS_FLEET_TRANSPORT);
        CHECK_MESSAGE_HAS("hg_fleet_bulkhead_open: ");
        CHECK_MESSAGE_HAS(bad[i].says);
        CHECK(fb == NULL);
        CHECK(atomic_load(&s.calls) >= 1);
        CHECK_EQ_U64(atomic_load(&s.released), 0);
        if (bad[i].mode == S_TWO_SCALARS || bad[i].mode == S_NESTED) {
            CHECK_EQ_U64(atomic_load(&s.misuse_status), HG_STATUS_INVALID_ARGUMENT);
        }
    }
    CHECK_EQ_U64(HG_STATUS_FLEET_TRANSPORT, 1012);
    CHECK_HAS(hg_status_message(HG_STATUS_FLEET_TRANSPORT), "hg_fleet_last_error");
    CHECK(strcmp(hg_status_message(1013), "unknown status") == 0);
    CHECK_STATUS(hg_fleet_reply_integer(NULL, 1), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_fleet_reply_string(NULL, "x", 1), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_fleet_reply_array(NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_fleet_reply_error(NULL, "x", 1), HG_STATUS_NULL_PARAMETER);
    size_t len = 0;
    const char *lib = hg_fleet_library(&len);
    CHECK(lib != NULL && strncmp(lib, "#!lua name=hullguard", 20) == 0);
    CHECK_EQ_U64(strlen(lib), len);
    CHECK(hg_fleet_library(NULL) == lib);
    CHECK_STATUS(hg_fleet_last_error(NULL, 0, &len), HG_STATUS_INVALID_ARGUMENT);
    CHECK(len > 0);
    CHECK_STATUS(hg_fleet_last_error(NULL, 4, &len), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_fleet_last_error(NULL, 0, NULL), HG_STATUS_NULL_PARAMETER);

    /* The library is there, then Redis is "down": open succeeds, nothing is ever leased. */
    script s = {.mode = S_LOADED_THEN_DOWN};
    CHECK_STATUS(open_script(&s, o, &fb), HG_STATUS_OK);
    hg_fleet_options_free(o);
    CHECK(fb != NULL);
    atomic_store(&s.fb, fb);
    hg_bulkhead *bh = NULL;
    CHECK_STATUS(hg_fleet_bulkhead_bulkhead(NULL, &bh), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("hg_fleet_bulkhead_bulkhead: `fb` is NULL");
    CHECK_STATUS(hg_fleet_bulkhead_bulkhead(fb, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_fleet_bulkhead_bulkhead(fb, &bh), HG_STATUS_OK);
    uint32_t bound = 0;
    CHECK_STATUS(try_once(bh, &bound), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK_EQ_U64(bound, HG_BOUND_FLEET_LEASE);
    CHECK(strcmp(hg_bound_name(bound), "fleet_lease") == 0);
    hg_permit *p = NULL;
    /* An empty block keeps a waiter queued until its timeout (not the kill switch). */
    CHECK_STATUS(hg_bulkhead_acquire_timeout(bh, 1, 30, &p), HG_STATUS_TIMEOUT);
    CHECK(p == NULL);
    /* The limit is the lease's. */
    CHECK_STATUS(hg_bulkhead_set_limit(bh, 3), HG_STATUS_INVALID_ARGUMENT);
    hg_limits lim;
    CHECK_STATUS(hg_limits_default(&lim), HG_STATUS_OK);
    lim.revision = 1;
    lim.limit = 3;
    CHECK_STATUS(hg_bulkhead_apply_limits(bh, &lim), HG_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hg_bulkhead_set_observe(bh, HG_OBSERVE_ALL), HG_STATUS_INVALID_ARGUMENT);

    /* The lease's thread keeps failing: counted, the error kept; its call back into the fleet
     * bulkhead is refused instead of waiting for itself. */
    CHECK(EVENTUALLY(10000, atomic_load(&s.reentrant_close) != -1 &&
                                fleet_stats(fb).errors_total >= 2));
    CHECK_EQ_U64(atomic_load(&s.reentrant_close), HG_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_U64(atomic_load(&s.reentrant_apply), HG_STATUS_INVALID_ARGUMENT);
    hg_fleet_stats st = fleet_stats(fb);
    CHECK(st.unreachable);
    CHECK(st.has_lease_error);
    CHECK_EQ_U64(st.held, 0);
    CHECK_EQ_U64(st.local_limit, 0);
    CHECK_EQ_U64(st.lease_left_ms, HG_TIMEOUT_INFINITE);
    CHECK_EQ_U64(st.syncs_total, 0);
    char text[256];
    CHECK_STATUS(hg_fleet_bulkhead_lease_error(fb, text, sizeof text, &len), HG_STATUS_OK);
    CHECK_HAS(text, "redis unreachable: down (test)");
    CHECK_STATUS(hg_fleet_bulkhead_lease_error(fb, text, 3, &len), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`buf_len` 3 is below");
    CHECK_STATUS(hg_fleet_bulkhead_lease_error(fb, NULL, 3, &len), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_fleet_bulkhead_holder(fb, NULL, 0, &len), HG_STATUS_INVALID_ARGUMENT);
    CHECK(len > strlen("c-args:1:feed:"));
    CHECK_STATUS(hg_fleet_bulkhead_holder(fb, text, sizeof text, &len), HG_STATUS_OK);
    /* The option is the id's label: the id is <label>:<pid>:<random>, unique per process. */
    char prefix[64];
    snprintf(prefix, sizeof prefix, "c-args:1:feed:%d:", (int)getpid());
    CHECK(strncmp(text, prefix, strlen(prefix)) == 0);
    CHECK_STATUS(hg_fleet_bulkhead_holder(fb, text, sizeof text, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_fleet_bulkhead_holder(NULL, text, sizeof text, &len),
                 HG_STATUS_NULL_PARAMETER);

    /* Stats structs: NULL, too small, an older caller's smaller one. */
    hg_fleet_stats small;
    memset(&small, 0, sizeof small);
    CHECK_STATUS(hg_fleet_bulkhead_stats(NULL, &small), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_fleet_bulkhead_stats(fb, NULL), HG_STATUS_NULL_PARAMETER);
    small.struct_size = 2;
    CHECK_STATUS(hg_fleet_bulkhead_stats(fb, &small), HG_STATUS_INVALID_ARGUMENT);
    small.struct_size = (uint32_t)offsetof(hg_fleet_stats, held);
    small.held = 77;
    CHECK_STATUS(hg_fleet_bulkhead_stats(fb, &small), HG_STATUS_OK);
    CHECK_EQ_U64(small.struct_size, offsetof(hg_fleet_stats, held));
    CHECK_EQ_U64(small.held, 77);

    /* apply_limits: the ranges named before anything is sent; then the transport's error. */
    uint64_t rev = 0, limit = 0;
    CHECK_STATUS(hg_fleet_bulkhead_apply_limits(fb, 0, 5, &rev, &limit),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("revision: must be an integer in 1 ..= 2^53 - 1");
    CHECK_STATUS(hg_fleet_bulkhead_apply_limits(fb, 1, (1ull << 32) + 1, &rev, &limit),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("limit: must be an integer in 0 ..= 2^32");
    CHECK_STATUS(hg_fleet_bulkhead_apply_limits(fb, 1, 5, &rev, &limit),
                 HG_STATUS_FLEET_TRANSPORT);
    CHECK_MESSAGE_HAS("hg_fleet_bulkhead_apply_limits: redis unreachable: down (test)");
    CHECK_STATUS(hg_fleet_bulkhead_apply_limits(NULL, 1, 5, NULL, NULL), HG_STATUS_NULL_PARAMETER);
    /* No budget: its dimension is refused by name, before anything is sent; an unknown one. */
    rev = 77;
    CHECK_STATUS(hg_fleet_bulkhead_apply_limits_of(fb, HG_FLEET_DIMENSION_BUDGET, 1, 5, &rev,
                                                   &limit),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("hg_fleet_bulkhead_apply_limits_of: budget: this fleet bulkhead has no "
                      "fleet budget");
    CHECK_EQ_U64(rev, 77);
    CHECK_STATUS(hg_fleet_bulkhead_apply_limits_of(fb, 7, 1, 5, NULL, NULL),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`dimension` 7 is not an hg_fleet_dimension");
    CHECK_STATUS(hg_fleet_bulkhead_apply_limits_of(fb, HG_FLEET_DIMENSION_PERMITS, 0, 5, NULL,
                                                   NULL),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("revision: must be");
    hg_fleet_stats bs;
    memset(&bs, 0, sizeof bs);
    bs.struct_size = (uint32_t)sizeof bs;
    CHECK_STATUS(hg_fleet_bulkhead_stats_of(fb, HG_FLEET_DIMENSION_BUDGET, &bs),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("hg_fleet_bulkhead_stats_of: budget: this fleet bulkhead has no fleet "
                      "budget");
    CHECK_STATUS(hg_fleet_bulkhead_stats_of(fb, 2, &bs), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`dimension` 2");
    CHECK_STATUS(hg_fleet_bulkhead_stats_of(fb, HG_FLEET_DIMENSION_PERMITS, NULL),
                 HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_fleet_bulkhead_stats_of(fb, HG_FLEET_DIMENSION_PERMITS, &bs), HG_STATUS_OK);
    CHECK_EQ_U64(bs.struct_size, sizeof bs);
    CHECK(bs.unreachable);
    hg_fleet_pool_stats bps;
    memset(&bps, 0, sizeof bps);
    bps.struct_size = (uint32_t)sizeof bps;
    CHECK_STATUS(hg_fleet_bulkhead_pool_stats_of(fb, HG_FLEET_DIMENSION_BUDGET, &bps),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("hg_fleet_bulkhead_pool_stats_of: budget: this fleet bulkhead has no");
    CHECK_STATUS(hg_fleet_bulkhead_lease_error_of(fb, HG_FLEET_DIMENSION_BUDGET, NULL, 0, &len),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("hg_fleet_bulkhead_lease_error_of: budget: this fleet bulkhead has no");
    hg_fleet_pool_stats ps;
    memset(&ps, 0, sizeof ps);
    ps.struct_size = (uint32_t)sizeof ps;
    CHECK_STATUS(hg_fleet_bulkhead_pool_stats(fb, &ps), HG_STATUS_FLEET_TRANSPORT);
    CHECK_MESSAGE_HAS("hg_fleet_bulkhead_pool_stats: redis unreachable");
    CHECK_STATUS(hg_fleet_bulkhead_pool_stats(fb, NULL), HG_STATUS_NULL_PARAMETER);
    ps.struct_size = 0;
    CHECK_STATUS(hg_fleet_bulkhead_pool_stats(fb, &ps), HG_STATUS_INVALID_ARGUMENT);

    /* Close: no lease, nothing to give back; idempotent; the handle refuses SHUTDOWN after. */
    CHECK_STATUS(hg_fleet_bulkhead_close(NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_STATUS(hg_fleet_bulkhead_close(fb), HG_STATUS_OK);
    CHECK_STATUS(hg_fleet_bulkhead_close(fb), HG_STATUS_OK);
    CHECK_STATUS(try_once(bh, &bound), HG_STATUS_SHUTDOWN);
    CHECK_EQ_U64(fleet_stats(fb).state, HG_FLEET_LEASE_IDLE);
    CHECK_EQ_U64(atomic_load(&s.released), 0);
    hg_fleet_bulkhead_free(fb);
    CHECK_EQ_U64(atomic_load(&s.released), 1);
    hg_fleet_bulkhead_free(NULL);
    /* The local handle outlives it. */
    CHECK_STATUS(try_once(bh, &bound), HG_STATUS_SHUTDOWN);
    hg_bulkhead_free(bh);
}

static void first_block_then_local_acquires(void) {
    server srv;
    if (!server_start(&srv, 0)) return;
    rconn k = {.port = srv.port};
    hg_fleet_bulkhead *fb = open_fleet(&k, "c-first", 4, 3000);
    hg_bulkhead *bh = local_of(fb);
    hg_permit *p = NULL;
    uint64_t t0 = now_ms();
    CHECK_STATUS(hg_bulkhead_acquire_timeout(bh, 1, 10000, &p), HG_STATUS_OK);
    printf("     first block after %" PRIu64 " ms (target: one round trip; allowed 10 s)\n",
           now_ms() - t0);
    hg_fleet_stats s = fleet_stats(fb);
    CHECK_EQ_U64(s.struct_size, sizeof s);
    CHECK_EQ_U64(s.state, HG_FLEET_LEASE_LEASED);
    CHECK(s.held >= 1);
    CHECK(s.generation >= 1);
    CHECK_EQ_U64(s.fleet_limit, 4);
    CHECK_EQ_U64(s.holders, 1);
    CHECK(s.lease_left_ms > 0 && s.lease_left_ms <= 3000);
    CHECK(s.syncs_total >= 1);
    CHECK(!s.unreachable);
    CHECK(!s.has_lease_error);
    CHECK_EQ_U64(hg_test_stats(bh).active, 1);
    /* The lease's own thread calls the transport. */
    CHECK(atomic_load(&k.calls_elsewhere) >= 1);

    /* The block grows with demand. */
    CHECK(EVENTUALLY(10000, ({
        uint32_t b_;
        try_once(bh, &b_);
        fleet_stats(fb).held >= 2;
    })));
    /* Inside the block, acquires do not go to Redis (a beat every second may). */
    s = fleet_stats(fb);
    unsigned calls = atomic_load(&k.calls);
    t0 = now_ms();
    for (int i = 0; i < 1000; i++) {
        hg_permit *q = NULL;
        CHECK_STATUS(hg_bulkhead_try_acquire(bh, 1, &q), HG_STATUS_OK);
        CHECK_STATUS(hg_permit_release(q), HG_STATUS_OK);
        hg_permit_free(q);
    }
    uint64_t beats = (now_ms() - t0) / 1000 + 2;
    CHECK(fleet_stats(fb).syncs_total <= s.syncs_total + beats);
    CHECK(atomic_load(&k.calls) <= calls + beats);
    CHECK_EQ_U64(hg_test_stats(bh).admitted_total >= 1001, 1);

    /* The pool shows this holder. */
    hg_fleet_pool_stats ps = pool_stats(fb);
    CHECK_EQ_U64(ps.struct_size, sizeof ps);
    CHECK(ps.exists);
    CHECK_EQ_U64(ps.limit, 4);
    CHECK_EQ_U64(ps.holders, 1);
    CHECK(ps.self_present);
    CHECK(ps.self_held >= 1);
    CHECK(ps.used >= 1);
    CHECK(ps.fence >= 1);

    CHECK_STATUS(hg_permit_release(p), HG_STATUS_OK);
    hg_permit_free(p);
    hg_bulkhead_free(bh);
    CHECK_STATUS(hg_fleet_bulkhead_close(fb), HG_STATUS_OK);
    hg_fleet_bulkhead_free(fb);
    CHECK_EQ_U64(atomic_load(&k.released), 1);
    server_kill(&srv);
}

/* Busy workers with an in-flight oracle. */
typedef struct {
    hg_bulkhead *bh;
    atomic_int *stop;
    atomic_long *in_flight;
    atomic_long *peak;
    long admitted;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    while (!atomic_load(w->stop)) {
        hg_permit *p = NULL;
        if (hg_bulkhead_acquire_timeout(w->bh, 1, 200, &p) != HG_STATUS_OK) continue;
        long now = atomic_fetch_add(w->in_flight, 1) + 1;
        long seen = atomic_load(w->peak);
        while (now > seen && !atomic_compare_exchange_weak(w->peak, &seen, now)) {
        }
        w->admitted++;
        sleep_ms(2);
        atomic_fetch_sub(w->in_flight, 1);
        hg_permit_release(p);
        hg_permit_free(p);
    }
    return NULL;
}

/* Starts a thread of this test (a frame of its own: tests/c/valgrind-fleet.supp names it). */
__attribute__((noinline)) static int start_thread(pthread_t *t, void *(*f)(void *), void *arg) {
    return pthread_create(t, NULL, f, arg);
}

static void two_bulkheads_converge_to_fair_shares(void) {
    server srv;
    if (!server_start(&srv, 0)) return;
    rconn ka = {.port = srv.port}, kb = {.port = srv.port};
    hg_fleet_bulkhead *a = open_fleet(&ka, "c-fair", 10, 1500);
    hg_fleet_bulkhead *b = open_fleet(&kb, "c-fair", 10, 1500);
    /* The first open loaded the library, the second found it. */
    CHECK_EQ_U64(atomic_load(&ka.loads), 1);
    CHECK_EQ_U64(atomic_load(&kb.loads), 0);
    hg_bulkhead *bha = local_of(a), *bhb = local_of(b);
    atomic_int stop = 0;
    atomic_long in_flight = 0, peak = 0;
    enum { N = 8 };
    worker w[2 * N];
    pthread_t t[2 * N];
    for (int i = 0; i < 2 * N; i++) {
        w[i] = (worker){.bh = i < N ? bha : bhb,
                        .stop = &stop,
                        .in_flight = &in_flight,
                        .peak = &peak};
        CHECK(start_thread(&t[i], work, &w[i]) == 0);
    }
    /* Both want more than half: each converges to 5 (target: a few beats; allowed 20 s). */
    uint64_t t0 = now_ms();
    int fair = EVENTUALLY(20000, ({
        hg_fleet_stats sa_ = fleet_stats(a), sb_ = fleet_stats(b);
        sa_.share == 5 && sb_.share == 5 && sa_.held == 5 && sb_.held == 5;
    }));
    CHECK(fair);
    printf("     5/5 after %" PRIu64 " ms\n", now_ms() - t0);
    sleep_ms(300); /* and it holds */
    atomic_store(&stop, 1);
    long admitted_a = 0, admitted_b = 0;
    for (int i = 0; i < 2 * N; i++) {
        pthread_join(t[i], NULL);
        if (i < N) {
            admitted_a += w[i].admitted;
        } else {
            admitted_b += w[i].admitted;
        }
    }
    printf("     in flight at most %ld of 10; admitted %ld + %ld\n", atomic_load(&peak),
           admitted_a, admitted_b);
    CHECK(atomic_load(&peak) <= 10);
    CHECK(admitted_a > 0 && admitted_b > 0);
    hg_fleet_stats sa = fleet_stats(a);
    CHECK_EQ_U64(sa.fleet_limit, 10);
    CHECK_EQ_U64(sa.holders, 2);
    hg_bulkhead_free(bha);
    hg_bulkhead_free(bhb);
    hg_fleet_bulkhead_free(a); /* free closes */
    hg_fleet_bulkhead_free(b);
    CHECK_EQ_U64(atomic_load(&ka.released) + atomic_load(&kb.released), 2);
    server_kill(&srv);
}

static void apply_limits_is_revisioned(void) {
    server srv;
    if (!server_start(&srv, 0)) return;
    rconn ka = {.port = srv.port}, kb = {.port = srv.port};
    hg_fleet_bulkhead *a = open_fleet(&ka, "c-limit", 4, 1500);
    hg_fleet_bulkhead *b = open_fleet(&kb, "c-limit", 4, 1500);
    uint64_t rev = 0, limit = 0;
    CHECK_STATUS(hg_fleet_bulkhead_apply_limits(a, 2, 7, &rev, &limit), HG_STATUS_OK);
    CHECK_EQ_U64(rev, 2);
    CHECK_EQ_U64(limit, 7);
    /* A delayed, older update never undoes it. */
    CHECK_STATUS(hg_fleet_bulkhead_apply_limits(b, 1, 1, &rev, &limit), HG_STATUS_STALE);
    CHECK_MESSAGE_HAS("revision 1 is not above the one in force (2, limit 7)");
    CHECK_EQ_U64(rev, 2);
    CHECK_EQ_U64(limit, 7);
    CHECK_STATUS(hg_fleet_bulkhead_apply_limits(b, 2, 8, NULL, NULL), HG_STATUS_STALE);
    CHECK(EVENTUALLY(10000, fleet_stats(b).fleet_limit == 7 && fleet_stats(b).rev == 2));
    hg_fleet_pool_stats ps = pool_stats(a);
    CHECK_EQ_U64(ps.limit, 7);
    CHECK_EQ_U64(ps.rev, 2);
    hg_fleet_bulkhead_free(a);
    hg_fleet_bulkhead_free(b);
    server_kill(&srv);
}

static void redis_killed_refuses_with_fleet_lease(void) {
    server srv;
    if (!server_start(&srv, 0)) return;
    const uint64_t ttl = 1000;
    rconn ka = {.port = srv.port}, kb = {.port = srv.port};
    hg_fleet_bulkhead *a = open_fleet(&ka, "c-kill", 4, ttl);
    hg_fleet_options *o = options("c-kill", 4, ttl);
    CHECK_STATUS(hg_fleet_options_set_int(o, "local_share", 2), HG_STATUS_OK);
    hg_fleet_bulkhead *b = open_with(&kb, o);
    hg_bulkhead *bha = local_of(a), *bhb = local_of(b);
    hg_permit *p = NULL;
    CHECK_STATUS(hg_bulkhead_acquire_timeout(bha, 1, 10000, &p), HG_STATUS_OK);
    hg_permit_release(p);
    hg_permit_free(p);
    CHECK_STATUS(hg_bulkhead_acquire_timeout(bhb, 1, 10000, &p), HG_STATUS_OK);
    hg_permit_release(p);
    hg_permit_free(p);

    uint64_t t0 = now_ms();
    server_kill(&srv);
    /* One TTL after the kill the lease is past its deadline (it counts from a send before the
     * kill, less the allowance): nothing is admitted, whatever the lease's thread is doing. */
    uint64_t left = t0 + ttl - now_ms();
    if (left <= ttl) sleep_ms(left);
    uint32_t bound = 0;
    CHECK_STATUS(try_once(bha, &bound), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK_EQ_U64(bound, HG_BOUND_FLEET_LEASE);
    hg_fleet_stats s = fleet_stats(a);
    CHECK_EQ_U64(s.state, HG_FLEET_LEASE_EXPIRED);
    CHECK_EQ_U64(s.local_limit, 0);
    CHECK(EVENTUALLY(10000, fleet_stats(a).unreachable && fleet_stats(a).has_lease_error));
    char text[512];
    size_t len = 0;
    CHECK_STATUS(hg_fleet_bulkhead_lease_error(a, text, sizeof text, &len), HG_STATUS_OK);
    CHECK_HAS(text, "redis unreachable");
    /* The local share admits 2 on local authority, not 3. */
    CHECK(EVENTUALLY(10000, fleet_stats(b).local_limit == 2));
    hg_permit *x = NULL, *y = NULL, *z = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire(bhb, 1, &x), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire(bhb, 1, &y), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_try_acquire(bhb, 1, &z), HG_STATUS_CONCURRENCY_LIMIT);
    hg_permit_free(x);
    hg_permit_free(y);

    /* Back on the same port, without the library or the pool: both reloaded, leased again. */
    CHECK(server_start(&srv, srv.port));
    t0 = now_ms();
    CHECK(EVENTUALLY(20000, try_once(bha, &bound) == HG_STATUS_OK));
    printf("     leased again %" PRIu64 " ms after the restart\n", now_ms() - t0);
    s = fleet_stats(a);
    CHECK_EQ_U64(s.state, HG_FLEET_LEASE_LEASED);
    CHECK(s.epoch_changes_total >= 1);
    CHECK(s.errors_total >= 1);
    /* Loaded at the first open, and again after the restart ("Function not found"). */
    CHECK(atomic_load(&ka.loads) + atomic_load(&kb.loads) >= 2);
    hg_bulkhead_free(bha);
    hg_bulkhead_free(bhb);
    hg_fleet_bulkhead_free(a);
    hg_fleet_bulkhead_free(b);
    server_kill(&srv);
}

static void flushall_learns_and_keeps_blocks(void) {
    server srv;
    if (!server_start(&srv, 0)) return;
    rconn k = {.port = srv.port};
    hg_fleet_bulkhead *fb = open_fleet(&k, "c-learn", 6, 1500);
    hg_bulkhead *bh = local_of(fb);
    hg_permit *held[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        CHECK_STATUS(hg_bulkhead_acquire_timeout(bh, 1, 10000, &held[i]), HG_STATUS_OK);
    }
    hg_fleet_stats before = fleet_stats(fb);
    CHECK(admin(srv.port, "FLUSHALL"));
    /* The next sync re-admits what it has, in a new epoch, learning. */
    CHECK(EVENTUALLY(10000, ({
        hg_fleet_stats s_ = fleet_stats(fb);
        s_.epoch != before.epoch && s_.state == HG_FLEET_LEASE_LEASED;
    })));
    hg_fleet_stats s = fleet_stats(fb);
    CHECK(s.held >= 3);
    CHECK(s.epoch_changes_total >= 1);
    hg_fleet_pool_stats ps = pool_stats(fb);
    CHECK(ps.learn_until_ms > 0); /* recreated by a holder with a lease: learning */
    CHECK(ps.used >= 3 && ps.used <= 6);
    CHECK(ps.self_held >= 3);
    for (int i = 0; i < 3; i++) hg_permit_free(held[i]);
    hg_bulkhead_free(bh);
    hg_fleet_bulkhead_free(fb);
    server_kill(&srv);
}

/* Redis' count of this holder's block (0 when it has no record). */
static long long held_in_redis(int port, const char *pool, const char *holder) {
    redisContext *c = connect_to(port, 1000, NULL, 0);
    if (c == NULL) return -1;
    char key[128];
    snprintf(key, sizeof key, "{hg:%s}:held", pool);
    redisReply *r = redisCommand(c, "HGET %s %s", key, holder);
    long long n = -1;
    if (r != NULL && r->type == REDIS_REPLY_NIL) n = 0;
    if (r != NULL && r->type == REDIS_REPLY_STRING) n = atoll(r->str);
    if (r != NULL) freeReplyObject(r);
    redisFree(c);
    return n;
}

static void late_grant_is_never_used(void) {
    server srv;
    if (!server_start(&srv, 0)) return;
    const int ttl = 300;
    rconn k = {.port = srv.port};
    atomic_store(&k.sync_delay_ms, ttl + 30); /* every sync's reply arrives past the TTL */
    hg_fleet_bulkhead *fb = open_fleet(&k, "c-c42", 4, (uint64_t)ttl);
    hg_bulkhead *bh = local_of(fb);
    CHECK(EVENTUALLY(10000, fleet_stats(fb).late_grants_total >= 1));
    /* Never admitted on it. */
    uint32_t bound = 0;
    CHECK_STATUS(try_once(bh, &bound), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK_EQ_U64(bound, HG_BOUND_FLEET_LEASE);
    CHECK_EQ_U64(hg_test_stats(bh).admitted_total, 0);
    /* Given back: Redis counts nothing for this holder. */
    char holder[256];
    size_t len = 0;
    CHECK_STATUS(hg_fleet_bulkhead_holder(fb, holder, sizeof holder, &len), HG_STATUS_OK);
    CHECK(EVENTUALLY(10000, held_in_redis(srv.port, "c-c42", holder) == 0));
    /* Timely replies: a lease. */
    atomic_store(&k.sync_delay_ms, 0);
    CHECK(EVENTUALLY(10000, try_once(bh, &bound) == HG_STATUS_OK));
    hg_bulkhead_free(bh);
    hg_fleet_bulkhead_free(fb);
    server_kill(&srv);
}

static void wait_replicas_without_a_replica_admits_nothing(void) {
    server srv;
    if (!server_start(&srv, 0)) return;
    rconn k = {.port = srv.port};
    hg_fleet_options *o = options("c-wait", 4, 1000);
    CHECK_STATUS(hg_fleet_options_set_int(o, "wait_replicas", 1), HG_STATUS_OK);
    CHECK_STATUS(hg_fleet_options_set_int(o, "wait_timeout", 20), HG_STATUS_OK);
    hg_fleet_bulkhead *fb = open_with(&k, o);
    hg_bulkhead *bh = local_of(fb);
    /* The grant is held in Redis, but WAIT (sent through the callback) sees no replica: the
     * growth is never used. */
    uint32_t bound = 0;
    CHECK(EVENTUALLY(10000, ({
        try_once(bh, &bound);
        fleet_stats(fb).unreplicated_total >= 1;
    })));
    hg_fleet_stats s = fleet_stats(fb);
    CHECK_EQ_U64(s.state, HG_FLEET_LEASE_LEASED);
    CHECK(s.held >= 1);
    CHECK_EQ_U64(s.local_limit, 0);
    CHECK_STATUS(try_once(bh, &bound), HG_STATUS_CONCURRENCY_LIMIT);
    CHECK_EQ_U64(bound, HG_BOUND_FLEET_LEASE);
    CHECK_EQ_U64(hg_test_stats(bh).admitted_total, 0);
    hg_bulkhead_free(bh);
    hg_fleet_bulkhead_free(fb);
    server_kill(&srv);
}

typedef struct {
    hg_bulkhead *bh;
    uint64_t weight;
    hg_status status;
    hg_permit *permit;
} waiter;

static void *wait_for_permit(void *arg) {
    waiter *w = arg;
    w->status = hg_bulkhead_acquire_timeout(w->bh, w->weight, 10000, &w->permit);
    return NULL;
}

static void close_releases_the_block(void) {
    server srv;
    if (!server_start(&srv, 0)) return;
    rconn ka = {.port = srv.port}, kb = {.port = srv.port};
    hg_fleet_bulkhead *a = open_fleet(&ka, "c-close", 4, 3000);
    hg_fleet_bulkhead *b = open_fleet(&kb, "c-close", 4, 3000);
    hg_bulkhead *bha = local_of(a), *bhb = local_of(b);
    hg_permit *p = NULL, *q = NULL;
    CHECK_STATUS(hg_bulkhead_acquire_timeout(bha, 1, 10000, &p), HG_STATUS_OK);
    CHECK_STATUS(hg_bulkhead_acquire_timeout(bhb, 1, 10000, &q), HG_STATUS_OK);
    CHECK(EVENTUALLY(10000, pool_stats(b).holders == 2));
    /* A waiter for all 4 cannot fit beside a's permit: it queues. */
    waiter w = {.bh = bha, .weight = 4};
    pthread_t t;
    CHECK(start_thread(&t, wait_for_permit, &w) == 0);
    CHECK(EVENTUALLY(10000, hg_test_stats(bha).queued == 1));

    CHECK_STATUS(hg_fleet_bulkhead_close(a), HG_STATUS_OK);
    pthread_join(t, NULL);
    /* Woken by the close (SHUTDOWN), not by its 10 s timeout (that would be TIMEOUT). */
    CHECK_STATUS(w.status, HG_STATUS_SHUTDOWN);
    CHECK(w.permit == NULL);
    /* a's call still in flight stays counted: its block shrank to it (the lease runs out by its
       TTL) instead of a release that would free a permit in use. */
    hg_fleet_pool_stats ps = pool_stats(a);
    CHECK_EQ_U64(ps.holders, 2);
    CHECK(ps.self_present);
    CHECK_EQ_U64(ps.self_held, 1);
    hg_fleet_stats s = fleet_stats(a);
    CHECK_EQ_U64(s.state, HG_FLEET_LEASE_IDLE);
    CHECK_EQ_U64(s.releases_fenced_total, 0);
    /* New acquires are refused; the permit in flight releases normally. */
    uint32_t bound = 0;
    CHECK_STATUS(try_once(bha, &bound), HG_STATUS_SHUTDOWN);
    CHECK_STATUS(hg_permit_release(p), HG_STATUS_OK);
    hg_permit_free(p);
    /* Idempotent: nothing more is sent. */
    unsigned calls = atomic_load(&ka.calls);
    CHECK_STATUS(hg_fleet_bulkhead_close(a), HG_STATUS_OK);
    CHECK_EQ_U64(atomic_load(&ka.calls), calls);

    /* b too: the pool has no holder left (read through a's transport, still open). */
    CHECK_STATUS(hg_permit_release(q), HG_STATUS_OK);
    hg_permit_free(q);
    CHECK_STATUS(hg_fleet_bulkhead_close(b), HG_STATUS_OK);
    /* b had nothing in flight: released. a's shrunk record remains until its TTL. */
    ps = pool_stats(a);
    CHECK_EQ_U64(ps.holders, 1);
    CHECK_EQ_U64(ps.used, 1);
    CHECK(ps.self_present);
    hg_bulkhead_free(bha);
    hg_bulkhead_free(bhb);
    hg_fleet_bulkhead_free(a);
    hg_fleet_bulkhead_free(b);
    CHECK_EQ_U64(atomic_load(&ka.released), 1);
    CHECK_EQ_U64(atomic_load(&kb.released), 1);
    server_kill(&srv);
}

/* ----- budget, classes, events ----------------------------------------------------------- */

/* A class table of `n` classes (priorities given), no floors, no rates. */
static hg_class_table class_table(hg_class *k, size_t n, const uint32_t *priorities) {
    for (size_t i = 0; i < n; i++) {
        if (hg_class_default(&k[i]) != HG_STATUS_OK) abort();
        k[i].priority = priorities[i];
    }
    hg_class_table t;
    memset(&t, 0, sizeof t);
    t.struct_size = (uint32_t)sizeof t;
    t.classes = k;
    t.classes_len = n;
    return t;
}

static void classes_and_events_options_are_checked(void) {
    hg_fleet_options *o = NULL;
    CHECK_STATUS(hg_fleet_options_new("c-classes-opts", &o), HG_STATUS_OK);
    hg_class k[2];
    const uint32_t prio[2] = {0, 9};
    hg_class_table t = class_table(k, 2, prio);

    CHECK_STATUS(hg_fleet_options_set_classes(NULL, &t), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("hg_fleet_options_set_classes: `opts` is NULL");
    CHECK_STATUS(hg_fleet_options_set_classes(o, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("hg_fleet_options_set_classes: `table` is NULL");
    hg_class_table bad = t;
    bad.struct_size = 8;
    CHECK_STATUS(hg_fleet_options_set_classes(o, &bad), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`table->struct_size` must be sizeof(hg_class_table)");
    bad = t;
    bad.classes_len = 0;
    CHECK_STATUS(hg_fleet_options_set_classes(o, &bad), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`table->classes_len` 0 is not in 1 ..= 64");
    bad.classes_len = 65;
    CHECK_STATUS(hg_fleet_options_set_classes(o, &bad), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`table->classes_len` 65");
    bad = t;
    bad.classes = NULL;
    CHECK_STATUS(hg_fleet_options_set_classes(o, &bad), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("`table->classes` is NULL");
    k[1].priority = 256;
    CHECK_STATUS(hg_fleet_options_set_classes(o, &t), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`table->classes`: a bad class");
    k[1].priority = 9;
    bad = t;
    bad.reserve_min_priority = 300;
    CHECK_STATUS(hg_fleet_options_set_classes(o, &bad), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("reserve_min_priority");
    /* A rate is per process: not fleet-wide, refused with the fleet table's words. */
    bad = t;
    bad.requests.amount = 10;
    bad.requests.per_ms = 1000;
    bad.requests.burst = 10;
    CHECK_STATUS(hg_fleet_options_set_classes(o, &bad), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`table`: rates: class rates are not fleet-wide");
    bad = t;
    bad.units.amount = 10;
    bad.units.per_ms = 1000;
    bad.units.burst = 10;
    CHECK_STATUS(hg_fleet_options_set_classes(o, &bad), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`table`: rates:");
    CHECK_STATUS(hg_fleet_options_set_classes(o, &t), HG_STATUS_OK);
    CHECK_STATUS(hg_fleet_options_set_on_event(NULL, NULL, NULL), HG_STATUS_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("hg_fleet_options_set_on_event: `opts` is NULL");
    CHECK_STATUS(hg_fleet_options_set_on_event(o, NULL, NULL), HG_STATUS_OK);

    /* Floors need lending on a fleet bulkhead (the block can stay below them: without lending
     * the classes without a floor would starve), refused at once naming it. */
    k[0].floor = 1;
    CHECK_STATUS(hg_fleet_options_set_classes(o, &t), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("`table`: lending: class floors on a fleet bulkhead need lending");
    t.lending = 1;
    /* The partition is the core's to check, at open, before the transport is called: a floor
     * above its class's ceiling; budget floors without a budget. */
    k[0].floor = 3;
    k[0].ceiling = 2;
    CHECK_STATUS(hg_fleet_options_set_classes(o, &t), HG_STATUS_OK);
    script sk = {.mode = S_DOWN};
    hg_fleet_bulkhead *fb = NULL;
    CHECK_STATUS(open_script(&sk, o, &fb), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("hg_fleet_bulkhead_open: classes[0]");
    CHECK(fb == NULL);
    k[0].floor = 0;
    k[0].ceiling = HG_UNSET;
    k[1].budget_floor = 5;
    CHECK_STATUS(hg_fleet_options_set_classes(o, &t), HG_STATUS_OK);
    CHECK_STATUS(open_script(&sk, o, &fb), HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("hg_fleet_bulkhead_open: classes[1]: a budget floor");
    CHECK_MESSAGE_HAS("needs a bulkhead with a budget");
    CHECK(fb == NULL);
    CHECK_EQ_U64(atomic_load(&sk.calls), 0);
    CHECK_EQ_U64(atomic_load(&sk.released), 0);
    hg_fleet_options_free(o);
}

/* What an on_event callback saw (the lease's thread delivers reconfigurations, admissions
 * come on the caller's threads: a lock). */
typedef struct {
    pthread_mutex_t lock;
    int n;            /* admission events kept (not reconfigure) */
    hg_event e[64];
    int reconfigures; /* HG_EVENT_RECONFIGURE seen */
    int bad_size;     /* events with another struct_size than this header's, or a key */
} events_t;

static void record_event(void *user_data, const hg_event *ev) {
    events_t *l = user_data;
    pthread_mutex_lock(&l->lock);
    if (ev->struct_size != sizeof(hg_event) || ev->key != NULL) l->bad_size++;
    if (ev->kind == HG_EVENT_RECONFIGURE) {
        l->reconfigures++;
    } else if (l->n < 64) {
        l->e[l->n++] = *ev;
    }
    pthread_mutex_unlock(&l->lock);
}

/* How many events of each tally (under the lock: the lease's thread may be delivering). */
static int reconfigures_of(events_t *l) {
    pthread_mutex_lock(&l->lock);
    int n = l->reconfigures;
    pthread_mutex_unlock(&l->lock);
    return n;
}

static int bad_events_of(events_t *l) {
    pthread_mutex_lock(&l->lock);
    int n = l->bad_size;
    pthread_mutex_unlock(&l->lock);
    return n;
}

/* The kept events of `kind`, in order, into `out` (at most `max`): how many. */
static int events_of(events_t *l, uint32_t kind, hg_event *out, int max) {
    int k = 0;
    pthread_mutex_lock(&l->lock);
    for (int i = 0; i < l->n && k < max; i++) {
        if (l->e[i].kind == kind) out[k++] = l->e[i];
    }
    pthread_mutex_unlock(&l->lock);
    return k;
}

static hg_fleet_stats budget_stats(const hg_fleet_bulkhead *fb) {
    hg_fleet_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = (uint32_t)sizeof s;
    if (hg_fleet_bulkhead_stats_of(fb, HG_FLEET_DIMENSION_BUDGET, &s) != HG_STATUS_OK) abort();
    return s;
}

static hg_fleet_pool_stats budget_pool(const hg_fleet_bulkhead *fb) {
    hg_fleet_pool_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = (uint32_t)sizeof s;
    hg_status st = hg_fleet_bulkhead_pool_stats_of(fb, HG_FLEET_DIMENSION_BUDGET, &s);
    if (st != HG_STATUS_OK) {
        hg_test_failures++;
        fprintf(stderr, "hg_fleet_bulkhead_pool_stats_of -> %u: %s\n", (unsigned)st,
                last_error());
    }
    return s;
}

/* A request of weight 1 and `cost` units, waiting at most `timeout_ms` (0: a try). */
static hg_request costing(uint64_t cost, uint64_t timeout_ms, hg_rejection *detail) {
    hg_request r;
    if (hg_request_default(&r) != HG_STATUS_OK) abort();
    r.cost = cost;
    r.timeout_ms = timeout_ms;
    r.detail = detail;
    if (detail != NULL) {
        memset(detail, 0, sizeof *detail);
        detail->struct_size = (uint32_t)sizeof *detail;
    }
    return r;
}

typedef struct {
    hg_bulkhead *bh;
    uint64_t cost;
    hg_status status;
    hg_permit *permit;
} cost_waiter;

static void *wait_for_cost(void *arg) {
    cost_waiter *w = arg;
    hg_request r = costing(w->cost, 10000, NULL);
    w->status = hg_bulkhead_acquire_request(w->bh, &r, &w->permit);
    return NULL;
}

static void budget_is_leased_like_the_permits(void) {
    server srv;
    if (!server_start(&srv, 0)) return;
    static events_t ev = {.lock = PTHREAD_MUTEX_INITIALIZER};
    rconn ka = {.port = srv.port}, kb = {.port = srv.port};
    hg_fleet_options *oa = options("c-budget", 10, 1500);
    CHECK_STATUS(hg_fleet_options_set_int(oa, "budget", 100), HG_STATUS_OK);
    hg_fleet_bulkhead *a = open_with(&ka, oa);
    hg_bulkhead *bha = local_of(a);

    /* The first budget block comes with the first cost (a wait within the queue timeout). */
    hg_permit *p = NULL;
    hg_request r = costing(60, 10000, NULL);
    CHECK_STATUS(hg_bulkhead_acquire_request(bha, &r, &p), HG_STATUS_OK);
    hg_fleet_stats bs = budget_stats(a);
    CHECK_EQ_U64(bs.struct_size, sizeof bs);
    CHECK_EQ_U64(bs.state, HG_FLEET_LEASE_LEASED);
    CHECK_EQ_U64(bs.fleet_limit, 100);
    CHECK(bs.held >= 60 && bs.local_limit >= 60);
    CHECK(bs.generation >= 1);
    CHECK_EQ_U64(hg_test_stats(bha).budget_in_use, 60);
    CHECK_STATUS(hg_permit_release(p), HG_STATUS_OK);
    hg_permit_free(p);
    /* A cost within the block: granted at once (a try never waits). */
    uint64_t block = budget_stats(a).local_limit;
    r = costing(block, 0, NULL);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bha, &r, &p), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release(p), HG_STATUS_OK);
    hg_permit_free(p);
    /* The local budget is the lease's. */
    CHECK_STATUS(hg_bulkhead_set_budget(bha, 1000), HG_STATUS_INVALID_ARGUMENT);
    /* A takes the whole fleet budget (its block grows to it). */
    hg_permit *big = NULL;
    r = costing(100, 10000, NULL);
    CHECK_STATUS(hg_bulkhead_acquire_request(bha, &r, &big), HG_STATUS_OK);

    hg_fleet_options *ob = options("c-budget", 10, 1500);
    CHECK_STATUS(hg_fleet_options_set_int(ob, "budget", 100), HG_STATUS_OK);
    CHECK_STATUS(hg_fleet_options_set_on_event(ob, record_event, &ev), HG_STATUS_OK);
    hg_fleet_bulkhead *b = open_with(&kb, ob);
    hg_bulkhead *bhb = local_of(b);
    /* B gets a block of permits with room for one more call (one in flight: a want of 2). */
    hg_permit *p0 = NULL;
    r = costing(0, 10000, NULL);
    CHECK_STATUS(hg_bulkhead_acquire_request(bhb, &r, &p0), HG_STATUS_OK);
    CHECK(EVENTUALLY(10000, fleet_stats(b).local_limit >= 2));
    /* B's budget block is empty (A holds the fleet budget): a try is refused BUDGET_LIMIT,
     * for want of a lease. */
    hg_rejection d;
    r = costing(10, 0, &d);
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bhb, &r, &p), HG_STATUS_BUDGET_LIMIT);
    CHECK_EQ_U64(d.reason, HG_REASON_BUDGET_LIMIT);
    CHECK_EQ_U64(d.bound, HG_BOUND_FLEET_LEASE);
    /* Above the fleet budget: refused at once, not after the queue timeout. */
    r = costing(101, 10000, &d);
    p = NULL;
    CHECK_STATUS(hg_bulkhead_acquire_request(bhb, &r, &p), HG_STATUS_BUDGET_LIMIT);
    CHECK_EQ_U64(d.reason, HG_REASON_BUDGET_LIMIT);
    CHECK(p == NULL);
    /* Within the fleet budget: it waits for B's block to grow, which it does once A gives
     * back (granted within its queue timeout: OK, not TIMEOUT). */
    cost_waiter w = {.bh = bhb, .cost = 60};
    pthread_t t;
    CHECK(start_thread(&t, wait_for_cost, &w) == 0);
    CHECK(EVENTUALLY(10000, hg_test_stats(bhb).queued == 1));
    CHECK_STATUS(hg_permit_release(big), HG_STATUS_OK);
    hg_permit_free(big);
    pthread_join(t, NULL);
    CHECK_STATUS(w.status, HG_STATUS_OK);
    CHECK(budget_stats(b).held >= 60);
    CHECK_EQ_U64(hg_test_stats(bhb).budget_in_use, 60);
    /* No more in flight than the fleet budget: the pool counts both holders. */
    hg_fleet_pool_stats ps = budget_pool(a);
    CHECK(ps.exists);
    CHECK_EQ_U64(ps.limit, 100);
    CHECK(ps.used <= 100);
    CHECK_EQ_U64(ps.holders, 2);
    CHECK_STATUS(hg_permit_release(w.permit), HG_STATUS_OK);
    hg_permit_free(w.permit);
    CHECK_STATUS(hg_permit_release(p0), HG_STATUS_OK);
    hg_permit_free(p0);
    /* B's events carry the costs: the refusal above the fleet budget, the admit that waited. */
    hg_event got[8];
    int n = events_of(&ev, HG_EVENT_REJECT, got, 8);
    CHECK(n >= 2);
    int saw_101 = 0;
    for (int i = 0; i < n; i++) {
        if (got[i].cost == 101 && got[i].reason == HG_REASON_BUDGET_LIMIT) saw_101 = 1;
    }
    CHECK(saw_101);
    n = events_of(&ev, HG_EVENT_ADMIT, got, 8);
    CHECK_EQ_U64(n, 2); /* p0 (no cost), then the cost that waited */
    if (n == 2) {
        CHECK_EQ_U64(got[0].cost, 0);
        CHECK_EQ_U64(got[1].cost, 60);
        CHECK_EQ_U64(got[1].weight, 1);
        CHECK(got[1].queued);
        CHECK(got[1].id != 0 && got[1].id != got[0].id);
    }
    CHECK(reconfigures_of(&ev) >= 1); /* the lease moving B's blocks */
    CHECK_EQ_U64(bad_events_of(&ev), 0);

    /* The fleet budget under its own revision (the permits' table keeps its own). */
    uint64_t rev = 0, value = 0;
    CHECK_STATUS(hg_fleet_bulkhead_apply_limits_of(a, HG_FLEET_DIMENSION_BUDGET, 2, 300, &rev,
                                                   &value),
                 HG_STATUS_OK);
    CHECK_EQ_U64(rev, 2);
    CHECK_EQ_U64(value, 300);
    CHECK_STATUS(hg_fleet_bulkhead_apply_limits_of(b, HG_FLEET_DIMENSION_BUDGET, 1, 10, &rev,
                                                   &value),
                 HG_STATUS_STALE);
    CHECK_MESSAGE_HAS("revision 1 is not above the one in force (2, budget 300)");
    CHECK_EQ_U64(rev, 2);
    CHECK_EQ_U64(value, 300);
    CHECK_STATUS(hg_fleet_bulkhead_apply_limits_of(a, HG_FLEET_DIMENSION_BUDGET, 3, 0, NULL,
                                                   NULL),
                 HG_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("budget: must be an integer in 1 ..= 2^32");
    CHECK_STATUS(hg_fleet_bulkhead_apply_limits(a, 1, 12, &rev, &value), HG_STATUS_OK);
    CHECK_EQ_U64(rev, 1);
    CHECK_EQ_U64(value, 12);
    CHECK(EVENTUALLY(10000, budget_stats(b).fleet_limit == 300 && budget_stats(b).rev == 2));
    CHECK(EVENTUALLY(10000, fleet_stats(b).fleet_limit == 12));
    CHECK_EQ_U64(budget_pool(b).limit, 300);
    CHECK_EQ_U64(pool_stats(b).limit, 12);
    /* A cost the new fleet budget allows is valid now (within it: it waits, not refused). */
    r = costing(250, 10000, NULL);
    CHECK_STATUS(hg_bulkhead_acquire_request(bhb, &r, &p), HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release(p), HG_STATUS_OK);
    hg_permit_free(p);
    char text[256];
    size_t len = 0;
    CHECK_STATUS(hg_fleet_bulkhead_lease_error_of(b, HG_FLEET_DIMENSION_BUDGET, text,
                                                  sizeof text, &len),
                 HG_STATUS_OK);
    CHECK_EQ_U64(len, 0);

    /* Close gives back both of A's leases: the pool's two tables no longer list it. */
    CHECK_STATUS(hg_fleet_bulkhead_close(a), HG_STATUS_OK);
    CHECK_EQ_U64(budget_pool(b).holders, 1);
    CHECK(budget_pool(b).self_present);
    CHECK_EQ_U64(pool_stats(b).holders, 1);
    CHECK_EQ_U64(budget_stats(a).state, HG_FLEET_LEASE_IDLE);
    hg_bulkhead_free(bha);
    hg_bulkhead_free(bhb);
    hg_fleet_bulkhead_free(a);
    hg_fleet_bulkhead_free(b);
    CHECK_EQ_U64(atomic_load(&ka.released) + atomic_load(&kb.released), 2);
    server_kill(&srv);
}

static void classes_order_the_block_and_events_are_delivered(void) {
    server srv;
    if (!server_start(&srv, 0)) return;
    static events_t ev = {.lock = PTHREAD_MUTEX_INITIALIZER};
    rconn k = {.port = srv.port};
    hg_fleet_options *o = options("c-classes", 1, 1500);
    hg_class cls[2];
    const uint32_t prio[2] = {0, 9};
    hg_class_table t = class_table(cls, 2, prio);
    CHECK_STATUS(hg_fleet_options_set_classes(o, &t), HG_STATUS_OK);
    memset(cls, 0xAB, sizeof cls); /* copied at set time: the caller's table is free again */
    CHECK_STATUS(hg_fleet_options_set_on_event(o, record_event, &ev), HG_STATUS_OK);
    hg_fleet_bulkhead *fb = open_with(&k, o);
    hg_bulkhead *bh = local_of(fb);
    /* The fleet limit is 1: hold it, then queue a low-priority and a high-priority waiter. */
    hg_permit *held = NULL, *pl = NULL, *ph = NULL;
    hg_request r = costing(0, 10000, NULL);
    CHECK_STATUS(hg_bulkhead_acquire_request(bh, &r, &held), HG_STATUS_OK);
    hg_ticket low = 0, high = 0;
    r.class_index = 0;
    CHECK_STATUS(hg_bulkhead_enqueue_request(bh, &r, &pl, &low), HG_STATUS_QUEUED);
    r.class_index = 1;
    CHECK_STATUS(hg_bulkhead_enqueue_request(bh, &r, &ph, &high), HG_STATUS_QUEUED);
    r.class_index = 2;
    hg_permit *none = NULL;
    CHECK_STATUS(hg_bulkhead_try_acquire_request(bh, &r, &none), HG_STATUS_INVALID_ARGUMENT);
    hg_class_stats cs;
    memset(&cs, 0, sizeof cs);
    cs.struct_size = (uint32_t)sizeof cs;
    CHECK_STATUS(hg_bulkhead_class_stats(bh, 1, &cs), HG_STATUS_OK);
    CHECK_EQ_U64(cs.priority, 9);
    CHECK_EQ_U64(cs.queued, 1);
    /* The release hands the permit to the later, higher-priority waiter. */
    CHECK_STATUS(hg_permit_release(held), HG_STATUS_OK);
    hg_permit_free(held);
    hg_status sh = HG_STATUS_QUEUED;
    CHECK(EVENTUALLY(10000, (sh = hg_ticket_poll(bh, high, &ph)) != HG_STATUS_QUEUED));
    CHECK_STATUS(sh, HG_STATUS_OK);
    CHECK_STATUS(hg_ticket_poll(bh, low, &pl), HG_STATUS_QUEUED);
    CHECK_STATUS(hg_permit_release(ph), HG_STATUS_OK);
    hg_permit_free(ph);
    hg_status sl = HG_STATUS_QUEUED;
    CHECK(EVENTUALLY(10000, (sl = hg_ticket_poll(bh, low, &pl)) != HG_STATUS_QUEUED));
    CHECK_STATUS(sl, HG_STATUS_OK);
    CHECK_STATUS(hg_permit_release(pl), HG_STATUS_OK);
    hg_permit_free(pl);
    /* The admits, in grant order: the first (class 0), the high (1), the low (0). */
    hg_event got[8];
    int n = events_of(&ev, HG_EVENT_ADMIT, got, 8);
    CHECK_EQ_U64(n, 3);
    if (n == 3) {
        CHECK_EQ_U64(got[0].class_index, 0);
        CHECK_EQ_U64(got[1].class_index, 1);
        CHECK_EQ_U64(got[2].class_index, 0);
        CHECK(got[1].queued && got[2].queued);
    }
    CHECK_EQ_U64(events_of(&ev, HG_EVENT_RELEASE, got, 8), 3);
    CHECK_EQ_U64(bad_events_of(&ev), 0);
    hg_bulkhead_free(bh);
    hg_fleet_bulkhead_free(fb);
    server_kill(&srv);
}

int main(int argc, char **argv) {
    (void)argc;
    /* A write to a killed server's socket must fail with EPIPE, not kill the test. */
    signal(SIGPIPE, SIG_IGN);
    RUN(options_are_named_by_the_table);
    RUN(bad_arguments_are_statuses);
    RUN(classes_and_events_options_are_checked);
    if (find_redis()) {
        RUN(first_block_then_local_acquires);
        RUN(two_bulkheads_converge_to_fair_shares);
        RUN(apply_limits_is_revisioned);
        RUN(redis_killed_refuses_with_fleet_lease);
        RUN(flushall_learns_and_keeps_blocks);
        RUN(late_grant_is_never_used);
        RUN(wait_replicas_without_a_replica_admits_nothing);
        RUN(close_releases_the_block);
        RUN(budget_is_leased_like_the_permits);
        RUN(classes_order_the_block_and_events_are_delivered);
    } else if (getenv("HG_SKIP_REDIS") != NULL && strcmp(getenv("HG_SKIP_REDIS"), "1") == 0) {
        printf("SKIPPED the Redis tests: no redis-server on PATH (HG_SKIP_REDIS=1)\n");
    } else {
        hg_test_failures++;
        fprintf(stderr, "redis-server is not on PATH: install it (make redis, or make setup), "
                        "or set HG_SKIP_REDIS=1 to skip the Redis tests\n");
    }
    return hg_test_summary(argv[0]);
}
