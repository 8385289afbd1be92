// example.cpp: the C++17 wrapper (hullguard.hpp) in use, as a firmware-free service would:
// a bulkhead per dependency, RAII permits, exceptions or std::error_code, async acquires with
// lambdas, cancellation, weighted token budgets. Every step asserts what it prints; `make
// c-test` builds it with g++ -std=c++17 -Wall -Wextra -Werror, plain and under ASan/UBSan.
#include <atomic>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

#include "hullguard.hpp"

using namespace std::chrono_literals;

#define EXPECT(cond)                                                                       \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            std::fprintf(stderr, "%s:%d: EXPECT failed: %s\n", __FILE__, __LINE__, #cond); \
            std::exit(1);                                                                  \
        }                                                                                  \
    } while (0)

static void raii_and_errors() {
    hullguard::Bulkhead db({/*max_concurrent*/ 2, /*max_queue*/ 0});
    {
        auto a = db.try_acquire();
        auto b = db.try_acquire();
        EXPECT(a && b);
        EXPECT(!db.try_acquire()); // full: empty optional (concurrency_limit), not an error
        EXPECT(db.stats().active == 2);
        hullguard::Permit moved = std::move(*a); // move-only
        EXPECT(!*a && moved.held());
        EXPECT(moved.release());
        EXPECT(!moved.release()); // a second release is a reported no-op
    } // b released here by its destructor
    hg_stats s = db.stats();
    EXPECT(s.available == 2 && s.active == 0);
    EXPECT(s.released_twice_total == 1);
    EXPECT(s.leaked_total == 1); // b was destroyed while held

    // Exceptions carry the status; error_code overloads never throw.
    try {
        db.try_acquire(3); // above max_concurrent
        EXPECT(false);
    } catch (const hullguard::error &e) {
        EXPECT(e.status() == HG_STATUS_INVALID_ARGUMENT);
        EXPECT(e.code() == std::errc::invalid_argument);
        EXPECT(!e.retryable());
    }
    std::error_code ec;
    auto none = db.try_acquire(0, ec);
    EXPECT(!none && ec == HG_STATUS_INVALID_ARGUMENT);

    hullguard::Bulkhead copy = db; // another reference to the same bulkhead
    copy.close();
    try {
        db.acquire(1, 10ms);
        EXPECT(false);
    } catch (const hullguard::error &e) {
        EXPECT(e.status() == HG_STATUS_SHUTDOWN);
        std::printf("closed: %s (%s)\n", e.what(), e.code().message().c_str());
    }
    try {
        hullguard::Bulkhead bad(hullguard::Config{/*max_concurrent*/ 0});
        EXPECT(false);
    } catch (const hullguard::error &e) {
        EXPECT(e.status() == HG_STATUS_INVALID_ARGUMENT);
    }
    std::puts("ok  raii_and_errors");
}

static void blocking_with_timeout() {
    hullguard::Bulkhead api({1, 4, 30000ms});
    hullguard::Permit held = api.acquire();
    std::error_code ec;
    hullguard::Permit none = api.acquire(1, 5ms, ec);
    EXPECT(!none && ec == std::errc::timed_out && ec == HG_STATUS_TIMEOUT);

    // Another thread waits; this one releases: a FIFO handoff.
    std::atomic<bool> got{false};
    std::thread waiter([&] {
        hullguard::Permit p = api.acquire(1, hullguard::Timeout::infinite());
        got = p.held();
    });
    while (api.stats().queued == 0) std::this_thread::sleep_for(1ms);
    held.release();
    waiter.join();
    EXPECT(got);
    EXPECT(api.stats().available == 1);
    std::puts("ok  blocking_with_timeout");
}

static void async_with_lambdas() {
    hullguard::Bulkhead llm({/*token budget*/ 10000, 8, hullguard::Timeout::infinite()});
    hullguard::Permit big = std::get<hullguard::Permit>(
        llm.acquire_async(8000, hullguard::Timeout::configured(), [](auto, auto) {}));
    EXPECT(big.weight() == 8000);

    int calls = 0;
    hullguard::Permit later;
    auto r = llm.acquire_async(4000, hullguard::Timeout::configured(),
                               [&](std::error_code ec, hullguard::Permit p) {
                                   calls++;
                                   EXPECT(!ec);
                                   later = std::move(p);
                               });
    EXPECT(std::holds_alternative<hullguard::Ticket>(r));
    EXPECT(calls == 0);
    big.release_partial(2000); // the actual usage was lower: refund, which grants the waiter
    EXPECT(calls == 1 && later.weight() == 4000);

    // A cancelled waiter's callback runs once, with `aborted`, before cancel() returns.
    std::error_code seen;
    auto t = llm.acquire_async(5000, 60000ms, [&](std::error_code ec, hullguard::Permit p) {
        seen = ec;
        EXPECT(!p);
    });
    EXPECT(llm.cancel(std::get<hullguard::Ticket>(t)));
    EXPECT(seen == std::errc::operation_canceled);
    EXPECT(!llm.cancel(std::get<hullguard::Ticket>(t))); // already settled

    // A callback that throws: the exception stays out of the library, the permit is released.
    auto thrower = llm.acquire_async(6000, hullguard::Timeout::configured(),
                                     [](std::error_code, hullguard::Permit) {
                                         throw std::runtime_error("handler failed");
                                     });
    EXPECT(std::holds_alternative<hullguard::Ticket>(thrower));
    later.release();
    big.reset(); // frees 6000: the thrower is granted, throws, and its permit goes back
    hg_stats s = llm.stats();
    EXPECT(s.active == 0 && s.available == 10000 && s.queued == 0);
    std::puts("ok  async_with_lambdas");
}

static void many_threads() {
    hullguard::Bulkhead shared({4, 64, 1000ms});
    std::atomic<int> in_flight{0}, peak{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; i++) {
        threads.emplace_back([&] {
            for (int k = 0; k < 2000; k++) {
                // BULKHEAD_FULL is retryable: besides a full queue, an arrival is rejected
                // queue_limit when the ring cell it needs still holds an older waiter's
                // unclaimed grant (its thread descheduled; see README "ring_free").
                hullguard::Permit p = [&] {
                    for (;;) {
                        try {
                            return shared.acquire(1, hullguard::Timeout::infinite());
                        } catch (const hullguard::error &e) {
                            if (e.status() != HG_STATUS_QUEUE_LIMIT) throw;
                            std::this_thread::yield();
                        }
                    }
                }();
                int now = ++in_flight;
                int prev = peak.load();
                while (now > prev && !peak.compare_exchange_weak(prev, now)) {
                }
                std::this_thread::yield(); // "work" while holding, so that others queue
                --in_flight;
            } // released by the destructor each round
        });
    }
    for (auto &t : threads) t.join();
    hg_stats s = shared.stats();
    EXPECT(peak.load() <= 4);
    EXPECT(s.available == 4 && s.admitted_total == 16000);
    std::printf("ok  many_threads (peak %d of 4, %llu queued grants)\n", peak.load(),
                static_cast<unsigned long long>(s.queue_wait_count));
}

int main() {
    std::printf("hullguard %s, origin key of HTTPS://API.Example.com/v1: %s\n", hg_version(),
                hullguard::origin_key("HTTPS://API.Example.com/v1").c_str());
    EXPECT(hullguard::origin_key("http://[::1]/x") == "http://[::1]:80");
    raii_and_errors();
    blocking_with_timeout();
    async_with_lambdas();
    many_threads();
    return 0;
}
