/*
 * bench/c/bench.c: hullguard's C ABI beside POSIX semaphores, in the same run
 * (docs/design.md § Benchmarks).
 *
 * One "op" is one acquire + release pair:
 *   sem_t        sem_trywait + sem_post                          (the anchor)
 *   raw pair     hg_bulkhead_try_acquire_units + _release_units   target <= 1.5x sem_t
 *   handle API   hg_bulkhead_try_acquire + hg_permit_release + hg_permit_free   target <= 3x
 *   handle+events  the handle API on a bulkhead with an `on_event` callback that does nothing
 *                (every admission then builds its admit and release events): target <= 1.3x
 *                the handle API (issue 16)
 *
 * Rows: uncontended (1 thread); 2 threads sharing one semaphore / one bulkhead (its limit and
 * the semaphore's value are 2, so every try succeeds and the rows measure the shared cache
 * line, not failures); and the no-sharing control: 2 threads, each with its own semaphore /
 * bulkhead. A 2-thread row is valid only if the control ran in parallel: its time per op must
 * stay near the uncontended time (control / uncontended well below 2).
 *
 * Every variant runs once per repetition, interleaved, REPS (>= 5) times; a ratio is taken
 * within one repetition (hg / sem of the same row) and the table prints the median ratio with
 * its min-max. `bench.c --ir <variant> <ops>` runs one single-thread variant for callgrind
 * (bench/c/run.sh turns the instruction counts into the deterministic Ir/op ratios).
 *
 * Cost curve (issue 15 item 7, after the table): one op at queue depth 10 / 1 000 / 100 000 on
 * the handle API's polling form (the single permit held, D tickets queued by
 * hg_bulkhead_enqueue; an op releases the permit, polls the head's ticket — now the holder — and
 * queues a new ticket at the tail). sem_t has no queue to put beside it (a blocked sem_wait is a
 * thread), so the curve is hullguard's alone, with its flatness; the thread axis is the table's
 * 1-thread and 2-thread rows.
 *
 * Usage: bench [ops-per-thread] [reps]
 *        bench --smoke [ops-per-thread]   every row and variant once (1 repetition, default 1000
 *                                         ops), the same table: proves it runs; measures nothing
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hullguard.h"

enum variant { SEM, RAW, HANDLE, EVENTS, NVARIANTS };
static const char *variant_name[] = {"sem_t", "raw pair", "handle API", "handle+events"};

/* The listener of the EVENTS variant: takes every event, does nothing. */
static void on_event_noop(void *user_data, const struct hg_event *event) {
    (void)user_data;
    (void)event;
}

/* One resource: a semaphore or a bulkhead, on its own cache lines. */
typedef struct {
    _Alignas(128) sem_t sem;
    hg_bulkhead *bh;
    char pad[128];
} resource;

static void die(const char *what) {
    fprintf(stderr, "bench: %s failed\n", what);
    exit(1);
}

static void resource_init(resource *r, unsigned value, enum variant v) {
    if (sem_init(&r->sem, 0, value) != 0) die("sem_init");
    hg_config c;
    hg_config_default(&c);
    c.max_concurrent = value;
    c.max_queue = 0;
    if (v == EVENTS) c.on_event = on_event_noop;
    if (hg_bulkhead_new(&c, &r->bh) != HG_STATUS_OK) die("hg_bulkhead_new");
}

static void resource_check(resource *r, unsigned value) {
    int v = -1;
    sem_getvalue(&r->sem, &v);
    hg_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    hg_bulkhead_stats(r->bh, &s);
    if (v != (int)value || s.available != (int64_t)value || s.active != 0) {
        die("conservation after the loop");
    }
}

static void resource_free(resource *r) {
    sem_destroy(&r->sem);
    hg_bulkhead_free(r->bh);
}

/* The measured loops. Each returns the number of failed tries (expected 0). */
static long loop(enum variant v, resource *r, long ops) {
    long failed = 0;
    switch (v) {
    case SEM:
        for (long i = 0; i < ops; i++) {
            if (sem_trywait(&r->sem) != 0) {
                failed++;
                continue;
            }
            sem_post(&r->sem);
        }
        break;
    case RAW:
        for (long i = 0; i < ops; i++) {
            if (hg_bulkhead_try_acquire_units(r->bh, 1) != HG_STATUS_OK) {
                failed++;
                continue;
            }
            hg_bulkhead_release_units(r->bh, 1);
        }
        break;
    case HANDLE:
    case EVENTS:
        for (long i = 0; i < ops; i++) {
            hg_permit *p;
            if (hg_bulkhead_try_acquire(r->bh, 1, &p) != HG_STATUS_OK) {
                failed++;
                continue;
            }
            hg_permit_release(p);
            hg_permit_free(p);
        }
        break;
    default:
        break;
    }
    return failed;
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ---- 2-thread runs ---------------------------------------------------------------------- */

typedef struct {
    enum variant v;
    resource *r;
    long ops;
    pthread_barrier_t *start;
    long failed;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->start);
    j->failed = loop(j->v, j->r, j->ops);
    return NULL;
}

/* ns per op (wall time / ops per thread) with `threads` threads; `shared` = one resource. */
static double measure(enum variant v, int threads, int shared, long ops) {
    resource *rs = aligned_alloc(128, sizeof(resource) * (size_t)threads);
    if (rs == NULL) die("aligned_alloc");
    unsigned value = shared ? (unsigned)threads : 1;
    int nres = shared ? 1 : threads;
    for (int i = 0; i < nres; i++) resource_init(&rs[i], value, v);
    loop(v, &rs[0], ops / 10); /* warm-up */
    double ns;
    long failed = 0;
    if (threads == 1) {
        double t0 = now_ns();
        failed = loop(v, &rs[0], ops);
        ns = now_ns() - t0;
    } else {
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
        pthread_t tid[8];
        job jobs[8];
        for (int i = 0; i < threads; i++) {
            jobs[i] = (job){v, shared ? &rs[0] : &rs[i], ops, &start, 0};
            pthread_create(&tid[i], NULL, run_job, &jobs[i]);
        }
        pthread_barrier_wait(&start);
        double t0 = now_ns();
        for (int i = 0; i < threads; i++) {
            pthread_join(tid[i], NULL);
            failed += jobs[i].failed;
        }
        ns = now_ns() - t0;
        pthread_barrier_destroy(&start);
    }
    for (int i = 0; i < nres; i++) {
        resource_check(&rs[i], value);
        resource_free(&rs[i]);
    }
    free(rs);
    if (failed != 0) die("a try failed although permits were free");
    return ns / (double)ops;
}

/* ---- the table -------------------------------------------------------------------------- */

enum row { UNCONTENDED, SHARED2, CONTROL2, NROWS };
static const char *row_name[] = {"1 thread, uncontended", "2 threads, shared",
                                 "2 threads, no-sharing control"};
static const int row_threads[] = {1, 2, 2};
static const int row_shared[] = {1, 1, 0};

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    double tmp[64];
    memcpy(tmp, v, sizeof(double) * (size_t)n);
    qsort(tmp, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

static double minv(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

static double maxv(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

/* ---- cost curve by queue depth ----------------------------------------------------------- */

/* ns per op at queue depth `depth` (see the header). */
static double depth_cycle(long depth, long ops) {
    hg_config c;
    hg_config_default(&c);
    c.max_concurrent = 1;
    c.max_queue = (uint64_t)depth + 1;
    hg_bulkhead *bh;
    if (hg_bulkhead_new(&c, &bh) != HG_STATUS_OK) die("hg_bulkhead_new (depth)");
    hg_permit *held;
    if (hg_bulkhead_try_acquire(bh, 1, &held) != HG_STATUS_OK) die("depth: first permit");
    hg_ticket *q = malloc(sizeof *q * (size_t)depth);
    if (q == NULL) die("malloc");
    for (long i = 0; i < depth; i++) {
        hg_permit *p = NULL;
        if (hg_bulkhead_enqueue(bh, 1, &p, &q[i]) != HG_STATUS_QUEUED) die("depth: enqueue");
    }
    long head = 0;
    double t0 = 0;
    for (long i = 0; i < ops + ops / 10; i++) {
        if (i == ops / 10) t0 = now_ns(); /* the first tenth warms up */
        if (hg_permit_release(held) != HG_STATUS_OK) die("depth: release");
        hg_permit_free(held);
        if (hg_ticket_poll(bh, q[head], &held) != HG_STATUS_OK) die("depth: head not granted");
        hg_permit *p = NULL;
        if (hg_bulkhead_enqueue(bh, 1, &p, &q[head]) != HG_STATUS_QUEUED) die("depth: requeue");
        head = head + 1 == depth ? 0 : head + 1;
    }
    double per_op = (now_ns() - t0) / (double)ops;
    /* Every ticket granted and released in turn: the bulkhead ends idle. */
    for (long k = 0; k < depth; k++) {
        hg_permit_release(held);
        hg_permit_free(held);
        if (hg_ticket_poll(bh, q[(head + k) % depth], &held) != HG_STATUS_OK) die("depth: drain");
    }
    hg_permit_release(held);
    hg_permit_free(held);
    struct hg_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    if (hg_bulkhead_stats(bh, &s) != HG_STATUS_OK || s.active != 0 || s.queued != 0)
        die("depth: not idle at the end");
    free(q);
    hg_bulkhead_free(bh);
    return per_op;
}

static void print_depth_curve(int smoke, int reps) {
    static const long depths[] = {10, 1000, 100000};
    int n = smoke ? 2 : 3;
    long ops = smoke ? 1000 : 200000;
    printf("\ncost curve: one op at queue depth D (handle API polling form; op = release + poll "
           "the head + enqueue; median of %d x %ld ops)\n",
           reps, ops);
    printf("%10s %12s\n", "depth", "ns/op");
    double first = 0, last = 0;
    for (int i = 0; i < n; i++) {
        long d = smoke && i == 1 ? 100 : depths[i];
        double v[64];
        for (int r = 0; r < reps; r++) v[r] = depth_cycle(d, ops);
        last = median(v, reps);
        if (i == 0) first = last;
        printf("%10ld %12.1f\n", d, last);
    }
    printf("deepest / depth 10 (flat = 1.00): %.2f\n", last / first);
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--ir") == 0) {
        /* callgrind mode: one single-thread variant, `ops` pairs (0 = the fixed cost only). */
        enum variant v = NVARIANTS;
        for (int i = 0; i < NVARIANTS; i++) {
            if (strcmp(argv[2], variant_name[i]) == 0) v = (enum variant)i;
        }
        if (v == NVARIANTS) die("--ir: unknown variant");
        resource r;
        resource_init(&r, 1, v);
        if (loop(v, &r, atol(argv[3])) != 0) die("--ir loop");
        resource_check(&r, 1);
        resource_free(&r);
        return 0;
    }
    int smoke = argc > 1 && strcmp(argv[1], "--smoke") == 0;
    if (smoke) {
        argv++;
        argc--;
    }
    long ops = argc > 1 ? atol(argv[1]) : smoke ? 1000 : 2000000;
    int reps = smoke ? 1 : argc > 2 ? atoi(argv[2]) : 7;
    if (reps < 5 && !smoke) reps = 5;
    if (reps > 64) reps = 64;
    if (ops < 10) ops = 10;

    static double ns[NROWS][NVARIANTS][64];
    for (int rep = 0; rep < reps; rep++) {
        /* Interleaved: every row and variant once per repetition, in a rotating order. */
        for (int k = 0; k < NROWS * NVARIANTS; k++) {
            int idx = (k + rep) % (NROWS * NVARIANTS);
            int row = idx / NVARIANTS, v = idx % NVARIANTS;
            ns[row][v][rep] = measure((enum variant)v, row_threads[row], row_shared[row], ops);
        }
    }

    if (smoke) printf("SMOKE RUN (--smoke): 1 repetition; the numbers below mean nothing\n");
    printf("hullguard %s C ABI vs POSIX sem_t: %ld acquire+release pairs per thread, %d "
           "interleaved repetitions\n",
           hg_version(), ops, reps);
    printf("ratio = hg ns/op / sem_t ns/op of the same row and repetition: median [min-max]\n\n");
    printf("%-31s %-13s %10s %23s %8s\n", "row", "variant", "ns/op", "ratio vs sem_t", "target");
    for (int row = 0; row < NROWS; row++) {
        for (int v = 0; v < NVARIANTS; v++) {
            double ratio[64];
            for (int r = 0; r < reps; r++) ratio[r] = ns[row][v][r] / ns[row][SEM][r];
            char rs[64] = "(anchor)", tg[16] = "";
            if (v != SEM) {
                snprintf(rs, sizeof rs, "%.2fx [%.2f-%.2f]", median(ratio, reps),
                         minv(ratio, reps), maxv(ratio, reps));
                if (row != CONTROL2 && v != EVENTS) {
                    double target = v == RAW ? 1.5 : 3.0;
                    snprintf(tg, sizeof tg, "%s%.1fx %s", "<=", target,
                             median(ratio, reps) <= target ? "ok" : "MISS");
                }
            }
            printf("%-31s %-13s %10.1f %23s %8s\n", v == 0 ? row_name[row] : "",
                   variant_name[v], median(ns[row][v], reps), rs, tg);
        }
    }
    {
        double q[64];
        for (int r = 0; r < reps; r++) q[r] = ns[UNCONTENDED][EVENTS][r] / ns[UNCONTENDED][HANDLE][r];
        double m = median(q, reps);
        printf("\nevents: handle+events / handle API, 1 thread: %.2fx [%.2f-%.2f]  target <=1.3x %s\n",
               m, minv(q, reps), maxv(q, reps), m <= 1.3 ? "ok" : "MISS");
    }
    /* Validity of the 2-thread rows: the control ran in parallel if its per-op time stays
     * near the single-thread time (2x would mean the two threads took turns). */
    printf("\nno-sharing control / uncontended (1.0 = fully parallel, 2.0 = serialized):");
    int parallel = 1;
    for (int v = 0; v < NVARIANTS; v++) {
        double q[64];
        for (int r = 0; r < reps; r++) q[r] = ns[CONTROL2][v][r] / ns[UNCONTENDED][v][r];
        double m = median(q, reps);
        parallel &= m < 1.5;
        printf(" %s %.2f%s", variant_name[v], m, v + 1 < NVARIANTS ? "," : "");
    }
    printf("\n2-thread rows: %s\n", parallel ? "valid (the control ran in parallel)"
                                             : "NOT valid (the control did not run in parallel)");
    print_depth_curve(smoke, smoke ? 1 : 5);
    return 0;
}
