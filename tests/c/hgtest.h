/*
 * hgtest.h: the tiny harness of the C tests of hullguard's C ABI (the .c files in tests/c).
 *
 * CHECK(cond) and CHECK_STATUS(call, want) print the failing line and count the failure;
 * each test ends with `return hg_test_summary(argv[0]);` (exit 1 on any failure). An xfail
 * is a check that documents a known bug: it is printed as "XFAIL BUG: ..." and does not fail
 * the run, but an xfail that starts passing ("XPASS") does, so the marker cannot go stale.
 */
#ifndef HGTEST_H
#define HGTEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hullguard.h"

static int hg_test_failures;
static int hg_test_checks;
static int hg_test_xfails;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        hg_test_checks++;                                                                \
        if (!(cond)) {                                                                   \
            hg_test_failures++;                                                          \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);     \
        }                                                                                \
    } while (0)

#define CHECK_EQ_U64(got, want)                                                          \
    do {                                                                                 \
        uint64_t hg_g_ = (uint64_t)(got), hg_w_ = (uint64_t)(want);                      \
        hg_test_checks++;                                                                \
        if (hg_g_ != hg_w_) {                                                            \
            hg_test_failures++;                                                          \
            fprintf(stderr, "%s:%d: %s == %" PRIu64 ", want %s == %" PRIu64 "\n",        \
                    __FILE__, __LINE__, #got, hg_g_, #want, hg_w_);                      \
        }                                                                                \
    } while (0)

#define CHECK_EQ_I64(got, want)                                                          \
    do {                                                                                 \
        int64_t hg_g_ = (int64_t)(got), hg_w_ = (int64_t)(want);                         \
        hg_test_checks++;                                                                \
        if (hg_g_ != hg_w_) {                                                            \
            hg_test_failures++;                                                          \
            fprintf(stderr, "%s:%d: %s == %" PRId64 ", want %s == %" PRId64 "\n",        \
                    __FILE__, __LINE__, #got, hg_g_, #want, hg_w_);                      \
        }                                                                                \
    } while (0)

#define CHECK_STATUS(call, want)                                                         \
    do {                                                                                 \
        hg_status hg_s_ = (call);                                                        \
        hg_test_checks++;                                                                \
        if (hg_s_ != (hg_status)(want)) {                                                \
            hg_test_failures++;                                                          \
            fprintf(stderr, "%s:%d: %s -> %u (%s), want %s\n", __FILE__, __LINE__,       \
                    #call, (unsigned)hg_s_, hg_status_message(hg_s_), #want);            \
        }                                                                                \
    } while (0)

/* A check that documents a known bug (`why` starts with "BUG:"): see the file comment. */
#define XFAIL(cond, why)                                                                 \
    do {                                                                                 \
        if (cond) {                                                                      \
            hg_test_failures++;                                                          \
            fprintf(stderr, "%s:%d: XPASS (the bug is fixed: drop the XFAIL): %s\n",     \
                    __FILE__, __LINE__, why);                                            \
        } else {                                                                         \
            hg_test_xfails++;                                                            \
            fprintf(stderr, "%s:%d: XFAIL %s\n", __FILE__, __LINE__, why);               \
        }                                                                                \
    } while (0)

/* Runs one named test function (prints its name so a failure is easy to place). */
#define RUN(test)                                                                        \
    do {                                                                                 \
        int hg_before_ = hg_test_failures;                                               \
        test();                                                                          \
        printf("%-4s %s\n", hg_test_failures == hg_before_ ? "ok" : "FAIL", #test);      \
        fflush(stdout);                                                                  \
    } while (0)

static inline hg_stats hg_test_stats(const hg_bulkhead *bh) {
    hg_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = (uint32_t)sizeof s;
    if (hg_bulkhead_stats(bh, &s) != HG_STATUS_OK) {
        hg_test_failures++;
        fprintf(stderr, "hg_bulkhead_stats failed\n");
    }
    return s;
}

/* I2 at a quiescent point: available + active + granted_unclaimed == limit. */
#define CHECK_I2(bh)                                                                     \
    do {                                                                                 \
        hg_stats hg_i2_ = hg_test_stats(bh);                                             \
        CHECK_EQ_I64(hg_i2_.available + (int64_t)hg_i2_.active +                         \
                         (int64_t)hg_i2_.granted_unclaimed,                              \
                     (int64_t)hg_i2_.limit);                                             \
    } while (0)

static inline hg_bulkhead *hg_test_new(uint64_t max_concurrent, uint64_t max_queue,
                                       uint64_t queue_timeout_ms) {
    hg_config c;
    hg_bulkhead *bh = NULL;
    if (hg_config_default(&c) != HG_STATUS_OK) abort();
    c.max_concurrent = max_concurrent;
    c.max_queue = max_queue;
    c.queue_timeout_ms = queue_timeout_ms;
    hg_status s = hg_bulkhead_new(&c, &bh);
    if (s != HG_STATUS_OK) {
        fprintf(stderr, "hg_bulkhead_new(%" PRIu64 ", %" PRIu64 ") -> %u\n", max_concurrent,
                max_queue, (unsigned)s);
        abort();
    }
    return bh;
}

static inline int hg_test_summary(const char *name) {
    printf("%s: %d checks, %d failed, %d xfail\n", name, hg_test_checks, hg_test_failures,
           hg_test_xfails);
    return hg_test_failures == 0 ? 0 : 1;
}

#endif /* HGTEST_H */
