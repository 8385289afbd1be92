// hullguard.hpp: a small header-only C++17 wrapper over the C ABI (hullguard.h).
//
//   hullguard::Bulkhead  shared handle (copy = another reference); every call is thread-safe
//   hullguard::Permit    move-only RAII: its destructor releases the permits if still held
//   hullguard::error     a std::system_error whose code() is in hullguard::status_category()
//
// Every fallible call comes in two forms: one that throws hullguard::error, and one that takes
// a std::error_code& and is noexcept. As in every hullguard layer (docs/design.md §10), try_acquire
// returns an empty optional only for `concurrency_limit`; any other reason (closed, invalid
// weight, ...) is an error.
//
//   hullguard::Bulkhead db({/*max_concurrent*/ 4, /*max_queue*/ 16});
//   if (auto permit = db.try_acquire()) { /* ... */ }          // released at scope exit
//   auto p = db.acquire(1, std::chrono::milliseconds(250));   // waits on this thread
//
// MIT OR Apache-2.0.
#ifndef HULLGUARD_HPP
#define HULLGUARD_HPP

#include <chrono>
#include <cstdint>
#include <functional>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <variant>

#include "hullguard.h"

namespace hullguard {

// ----- errors ---------------------------------------------------------------------------------

/// The category of hg_status codes; message() is hg_status_message(). Each status maps to the
/// nearest portable std::errc condition (concurrency/queue/key limits → try again, timeout →
/// timed out, aborted → canceled, ...), so callers may test `ec == std::errc::timed_out`.
class status_category_impl final : public std::error_category {
public:
    const char *name() const noexcept override { return "hullguard"; }

    std::string message(int ev) const override {
        return hg_status_message(static_cast<uint32_t>(ev));
    }

    std::error_condition default_error_condition(int ev) const noexcept override {
        switch (static_cast<uint32_t>(ev)) {
        case HG_STATUS_NULL_PARAMETER:
        case HG_STATUS_INVALID_ARGUMENT:
            return std::errc::invalid_argument;
        case HG_STATUS_OUT_OF_MEMORY:
            return std::errc::not_enough_memory;
        case HG_STATUS_CONCURRENCY_LIMIT:
        case HG_STATUS_QUEUE_LIMIT:
        case HG_STATUS_KEY_LIMIT:
        case HG_STATUS_CIRCUIT_OPEN:
            return std::errc::resource_unavailable_try_again;
        case HG_STATUS_TIMEOUT:
        case HG_STATUS_CALL_TIMEOUT:
            return std::errc::timed_out;
        case HG_STATUS_ABORTED:
            return std::errc::operation_canceled;
        case HG_STATUS_SHUTDOWN:
            return std::errc::operation_not_permitted;
        default:
            return std::error_condition(ev, *this);
        }
    }
};

inline const std::error_category &status_category() noexcept {
    static const status_category_impl category;
    return category;
}

inline std::error_code make_error_code(hg_status s) noexcept {
    return std::error_code(static_cast<int>(s), status_category());
}

/// A rejection or an argument error from the library.
class error : public std::system_error {
public:
    explicit error(hg_status s, const char *what) : std::system_error(make_error_code(s), what) {}

    hg_status status() const noexcept { return static_cast<hg_status>(code().value()); }

    /// Retrying later may succeed (the reasons docs/design.md §10.4 marks retryable).
    bool retryable() const noexcept {
        switch (status()) {
        case HG_STATUS_CONCURRENCY_LIMIT:
        case HG_STATUS_QUEUE_LIMIT:
        case HG_STATUS_KEY_LIMIT:
        case HG_STATUS_TIMEOUT:
        case HG_STATUS_CIRCUIT_OPEN:
        case HG_STATUS_CALL_TIMEOUT:
            return true;
        default:
            return false;
        }
    }
};

namespace detail {
inline void throw_if(hg_status s, const char *what) {
    if (s != HG_STATUS_OK) throw error(s, what);
}
inline void set(std::error_code *ec, hg_status s) noexcept {
    if (ec != nullptr) *ec = s == HG_STATUS_OK ? std::error_code() : make_error_code(s);
}
} // namespace detail

// ----- options --------------------------------------------------------------------------------

/// A queue timeout: a duration, "no deadline", or "the bulkhead's configured queue_timeout".
class Timeout {
public:
    Timeout(std::chrono::milliseconds d) noexcept // NOLINT: implicit on purpose
        : ms_(d.count() <= 0 ? 0 : static_cast<uint64_t>(d.count())) {
        if (ms_ >= HG_TIMEOUT_DEFAULT) ms_ = HG_TIMEOUT_DEFAULT - 1;
    }
    static Timeout infinite() noexcept { return Timeout(HG_TIMEOUT_INFINITE, 0); }
    static Timeout configured() noexcept { return Timeout(HG_TIMEOUT_DEFAULT, 0); }
    uint64_t ms() const noexcept { return ms_; }

private:
    Timeout(uint64_t raw, int) noexcept : ms_(raw) {}
    uint64_t ms_;
};

/// hg_config with C++ defaults (10 / 100 / 30 s / enabled, as hg_config_default()).
struct Config {
    uint64_t max_concurrent = 10;
    uint64_t max_queue = 100;
    Timeout queue_timeout = std::chrono::milliseconds(30000);
    bool enabled = true;

    hg_config native() const noexcept {
        hg_config c;
        hg_config_default(&c);
        c.max_concurrent = max_concurrent;
        c.max_queue = max_queue;
        c.queue_timeout_ms = queue_timeout.ms() == HG_TIMEOUT_DEFAULT ? c.queue_timeout_ms
                                                                      : queue_timeout.ms();
        c.enabled = enabled;
        return c;
    }
};

/// The outcome a permit reports when released (docs/design.md §6).
enum class Outcome : uint32_t {
    success = HG_OUTCOME_SUCCESS,
    failure = HG_OUTCOME_FAILURE,
    ignored = HG_OUTCOME_IGNORED,
    /// HTTP 429: a success for the breaker, a failure for the adaptive limit.
    overload = HG_OUTCOME_OVERLOAD,
};

// ----- Permit ---------------------------------------------------------------------------------

/// Permits held by one acquire. Move-only; the destructor frees the handle and releases the
/// permits if they are still held (counted as `leaked_total` by the library, outcome ignored).
class Permit {
public:
    Permit() noexcept = default;
    explicit Permit(hg_permit *p) noexcept : p_(p) {}
    Permit(const Permit &) = delete;
    Permit &operator=(const Permit &) = delete;
    Permit(Permit &&o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    Permit &operator=(Permit &&o) noexcept {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
        }
        return *this;
    }
    ~Permit() { reset(); }

    /// Returns the permits; `true` the first time, `false` if already released (a no-op the
    /// library counts in released_twice_total). An empty Permit returns false.
    bool release(Outcome outcome = Outcome::success) noexcept {
        if (p_ == nullptr) return false;
        return hg_permit_release_outcome(p_, static_cast<uint32_t>(outcome)) == HG_STATUS_OK;
    }

    /// The host's own call_timeout_ms timer fired (the library arms none): counts
    /// `call_timeout` and records the call as a failure now; keep the Permit until the work
    /// really ends (its later release records nothing more). `false` if already reported,
    /// released or empty.
    bool call_timed_out() noexcept {
        return p_ != nullptr && hg_permit_call_timed_out(p_) == HG_STATUS_OK;
    }

    /// Returns `n` of the held permits now (1 .. weight()).
    void release_partial(uint64_t n) {
        detail::throw_if(p_ == nullptr ? HG_STATUS_NULL_PARAMETER : hg_permit_release_partial(p_, n),
                         "hullguard: release_partial");
    }

    /// Permits still held (0 once released, or for an empty Permit).
    uint64_t weight() const noexcept { return hg_permit_weight(p_); }
    bool held() const noexcept { return weight() > 0; }
    explicit operator bool() const noexcept { return p_ != nullptr; }

    /// Frees the handle now (releasing if still held).
    void reset() noexcept {
        hg_permit_free(p_);
        p_ = nullptr;
    }
    hg_permit *native() const noexcept { return p_; }
    /// Gives the handle up: the caller must hg_permit_free() it.
    hg_permit *into_native() noexcept { return std::exchange(p_, nullptr); }

private:
    hg_permit *p_ = nullptr;
};

// ----- Bulkhead -------------------------------------------------------------------------------

/// A queued async acquire, for Bulkhead::cancel().
struct Ticket {
    hg_ticket id;
};

struct DrainResult {
    bool drained;
    uint64_t active;
    uint64_t queued;
};

/// A bulkhead (a reference-counted handle: copies share the bulkhead). Freeing the last
/// reference closes it; permits keep it alive and release normally.
class Bulkhead {
public:
    /// Called exactly once for a queued acquire_async: an empty error_code and a held Permit on
    /// a grant, otherwise the rejection (timeout, aborted on cancel(), shutdown, ...) and an
    /// empty Permit. It runs on the thread that settled the acquire and must not block; an
    /// exception it throws is caught and dropped (it never crosses into the library), and the
    /// Permit it was given is released by its destructor.
    using Callback = std::function<void(std::error_code, Permit)>;

    explicit Bulkhead(const Config &config = Config()) {
        hg_config c = config.native();
        detail::throw_if(hg_bulkhead_new(&c, &bh_), "hullguard: invalid bulkhead config");
    }
    Bulkhead(const Config &config, std::error_code &ec) noexcept {
        hg_config c = config.native();
        detail::set(&ec, hg_bulkhead_new(&c, &bh_));
    }
    /// Adopts one reference to `bh` (e.g. from hg_registry_get()).
    static Bulkhead adopt(hg_bulkhead *bh) noexcept { return Bulkhead(bh, adopt_tag{}); }

    Bulkhead(const Bulkhead &o) noexcept
        : bh_(const_cast<hg_bulkhead *>(hg_bulkhead_retain(o.bh_))) {}
    Bulkhead &operator=(const Bulkhead &o) noexcept {
        if (this != &o) {
            hg_bulkhead_free(bh_);
            bh_ = const_cast<hg_bulkhead *>(hg_bulkhead_retain(o.bh_));
        }
        return *this;
    }
    Bulkhead(Bulkhead &&o) noexcept : bh_(std::exchange(o.bh_, nullptr)) {}
    Bulkhead &operator=(Bulkhead &&o) noexcept {
        if (this != &o) {
            hg_bulkhead_free(bh_);
            bh_ = std::exchange(o.bh_, nullptr);
        }
        return *this;
    }
    ~Bulkhead() { hg_bulkhead_free(bh_); }

    explicit operator bool() const noexcept { return bh_ != nullptr; }
    hg_bulkhead *native() const noexcept { return bh_; }

    /// `weight` permits now; empty only for `concurrency_limit` (full, or waiters queued).
    std::optional<Permit> try_acquire(uint64_t weight = 1) const {
        std::error_code ec;
        auto p = try_acquire(weight, ec);
        if (ec) throw error(static_cast<hg_status>(ec.value()), "hullguard: try_acquire");
        return p;
    }
    std::optional<Permit> try_acquire(uint64_t weight, std::error_code &ec) const noexcept {
        hg_permit *p = nullptr;
        hg_status s = hg_bulkhead_try_acquire(bh_, weight, &p);
        detail::set(&ec, s == HG_STATUS_CONCURRENCY_LIMIT ? HG_STATUS_OK : s);
        if (s != HG_STATUS_OK) return std::nullopt;
        return Permit(p);
    }

    /// Waits on this thread (never from a Callback).
    Permit acquire(uint64_t weight = 1, Timeout timeout = Timeout::configured()) const {
        std::error_code ec;
        Permit p = acquire(weight, timeout, ec);
        if (ec) throw error(static_cast<hg_status>(ec.value()), "hullguard: acquire");
        return p;
    }
    Permit acquire(uint64_t weight, Timeout timeout, std::error_code &ec) const noexcept {
        hg_permit *p = nullptr;
        detail::set(&ec, hg_bulkhead_acquire_timeout(bh_, weight, timeout.ms(), &p));
        return Permit(p);
    }

    /// A Permit now, or a Ticket whose Callback runs exactly once later. Throws for a
    /// rejection at once (the callback then never runs).
    std::variant<Permit, Ticket> acquire_async(uint64_t weight, Timeout timeout, Callback cb) const {
        auto *heap = new Callback(std::move(cb));
        hg_permit *p = nullptr;
        hg_ticket t = 0;
        hg_status s = hg_bulkhead_acquire_async(bh_, weight, timeout.ms(), &Bulkhead::trampoline,
                                                heap, &p, &t);
        if (s == HG_STATUS_QUEUED) return Ticket{t};
        delete heap; // not queued: the callback never runs
        detail::throw_if(s, "hullguard: acquire_async");
        return Permit(p);
    }

    /// `true` if the cancel won (the Callback has already run with `aborted`).
    bool cancel(Ticket t) const noexcept { return hg_ticket_cancel(bh_, t.id) == HG_STATUS_OK; }

    void set_limit(uint64_t limit) const {
        detail::throw_if(hg_bulkhead_set_limit(bh_, limit), "hullguard: set_limit");
    }
    void close() const noexcept { hg_bulkhead_close(bh_); }

    /// Waits (without closing) until idle or the timeout passes.
    DrainResult drain(Timeout timeout = Timeout::infinite()) const {
        hg_drain_result r{};
        detail::throw_if(hg_bulkhead_drain(bh_, timeout.ms(), &r), "hullguard: drain");
        return DrainResult{r.drained, r.active, r.queued};
    }

    hg_stats stats() const {
        hg_stats s{};
        s.struct_size = sizeof s;
        detail::throw_if(hg_bulkhead_stats(bh_, &s), "hullguard: stats");
        return s;
    }

private:
    struct adopt_tag {};
    Bulkhead(hg_bulkhead *bh, adopt_tag) noexcept : bh_(bh) {}

    static void trampoline(hg_status s, hg_permit *p, void *user_data) noexcept {
        Callback *cb = static_cast<Callback *>(user_data);
        try {
            (*cb)(s == HG_STATUS_OK ? std::error_code() : make_error_code(s), Permit(p));
        } catch (...) {
            // Never unwind into the library; the Permit argument was destroyed (released).
        }
        delete cb;
    }

    hg_bulkhead *bh_ = nullptr;
};

// ----- origin key -----------------------------------------------------------------------------

/// The canonical origin key of a URL (`scheme://host:port`), e.g. for per-origin registries.
inline std::string origin_key(std::string_view url) {
    std::string out(64, '\0');
    size_t len = 0;
    hg_status s = hg_origin_key(url.data(), url.size(), out.data(), out.size(), &len);
    if (s == HG_STATUS_INVALID_ARGUMENT && len + 1 > out.size()) {
        out.resize(len + 1);
        s = hg_origin_key(url.data(), url.size(), out.data(), out.size(), &len);
    }
    detail::throw_if(s, "hullguard: origin_key");
    out.resize(len);
    return out;
}

} // namespace hullguard

// `std::error_code ec = HG_STATUS_TIMEOUT;` and `ec == HG_STATUS_TIMEOUT` (found by ADL: the C
// enum lives in the global namespace).
inline std::error_code make_error_code(hg_status s) noexcept { return hullguard::make_error_code(s); }

namespace std {
template <> struct is_error_code_enum<hg_status> : true_type {};
} // namespace std

#endif // HULLGUARD_HPP
