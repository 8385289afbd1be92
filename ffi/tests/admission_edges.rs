//! Edge cases of the gateway-admission C ABI (issue 16) found in review: each test is a
//! recipe that broke the ABI before its fix (memory safety, a panic or a unit leaked at the
//! boundary, an error that still changed state).

use std::ptr;

use hullguard::*;

/// An all-zero C struct of this ABI (integers, raw pointers, `Option<fn>`s, bools and C enums
/// whose 0 is a value), for the library to fill.
fn zeroed<T: Copy>() -> T {
    // SAFETY: every `T` used here is such a struct: all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

fn config(max_concurrent: u64, max_queue: u64, budget: u64) -> hg_config {
    let mut c = hg_config {
        struct_size: 0,
        ..zeroed()
    };
    assert_eq!(hg_config_default(&mut c), hg_status::HG_STATUS_OK);
    c.max_concurrent = max_concurrent;
    c.max_queue = max_queue;
    c.queue_timeout_ms = HG_TIMEOUT_INFINITE;
    c.budget = budget;
    c
}

fn new_bh(c: &hg_config) -> *mut hg_bulkhead {
    let mut bh = ptr::null_mut();
    assert_eq!(hg_bulkhead_new(c, &mut bh), hg_status::HG_STATUS_OK);
    bh
}

fn stats(bh: *mut hg_bulkhead) -> hg_stats {
    let mut s = hg_stats {
        struct_size: size_of::<hg_stats>() as u32,
        ..Default::default()
    };
    assert_eq!(hg_bulkhead_stats(bh, &mut s), hg_status::HG_STATUS_OK);
    s
}

fn request(weight: u64, cost: u64) -> hg_request {
    let mut r: hg_request = zeroed();
    assert_eq!(hg_request_default(&mut r), hg_status::HG_STATUS_OK);
    r.weight = weight;
    r.cost = cost;
    r
}

fn acquire(bh: *mut hg_bulkhead, r: &hg_request) -> *mut hg_permit {
    let mut p = ptr::null_mut();
    assert_eq!(
        hg_bulkhead_try_acquire_request(bh, r, &mut p),
        hg_status::HG_STATUS_OK
    );
    p
}

/// C30 on the C stats: reserved + overrun == consumed + refunded + in_use + overrun_held.
fn c30(s: &hg_stats) {
    assert_eq!(
        s.budget_reserved_total + s.budget_overrun_total,
        s.budget_consumed_total + s.budget_refunded_total + s.budget_in_use + s.budget_overrun_held,
        "C30: {s:?}"
    );
}

/// A usage report whose `out` cannot be written (`struct_size` below 4) is refused
/// `HG_STATUS_INVALID_ARGUMENT` — and, like every error of `hg_permit_report_usage`, changes
/// nothing (before the fix the hold had already changed).
#[test]
fn report_usage_with_a_bad_out_changes_nothing() {
    let bh = new_bh(&config(4, 0, 100));
    let p = acquire(bh, &request(1, 50));
    let mut u: hg_usage_report = zeroed();
    u.struct_size = 0;
    assert_eq!(
        hg_permit_report_usage(p, 10, 0, &mut u),
        hg_status::HG_STATUS_INVALID_ARGUMENT
    );
    let s = stats(bh);
    assert_eq!(s.budget_in_use, 50, "the hold must not change on an error");
    // The same report with a good `out` then does it.
    u.struct_size = size_of::<hg_usage_report>() as u32;
    assert_eq!(
        hg_permit_report_usage(p, 10, 0, &mut u),
        hg_status::HG_STATUS_OK
    );
    assert_eq!(
        (u.change, u.by),
        (hg_hold_change::HG_HOLD_SHRANK as u32, 40)
    );
    assert_eq!(hg_permit_release(p), hg_status::HG_STATUS_OK);
    hg_permit_free(p);
    c30(&stats(bh));
    hg_bulkhead_free(bh);
}

/// A `detail` whose `struct_size` cannot hold anything is a bad argument, refused before the
/// admission (before the fix the refusal was counted and the detail silently never written).
#[test]
fn request_detail_too_small_is_refused_before_admission() {
    let bh = new_bh(&config(1, 0, 0));
    let p = acquire(bh, &request(1, 0));
    let mut d = hg_rejection {
        struct_size: 2,
        ..Default::default()
    };
    let mut r = request(1, 0);
    r.detail = &mut d;
    let mut q = ptr::null_mut();
    assert_eq!(
        hg_bulkhead_try_acquire_request(bh, &r, &mut q),
        hg_status::HG_STATUS_INVALID_ARGUMENT
    );
    assert_eq!(stats(bh).rejected[0], 0, "nothing counted");
    assert_eq!(hg_permit_release(p), hg_status::HG_STATUS_OK);
    hg_permit_free(p);
    hg_bulkhead_free(bh);
}

/// Settling with a usage far beyond anything held (u64::MAX) neither panics (which would lose
/// the call's permits and units: the call is taken out of the permit before it ends) nor
/// breaks the budget identity.
#[test]
fn release_usage_of_u64_max_settles_without_panic() {
    let bh = new_bh(&config(2, 0, 100));
    let p = acquire(bh, &request(1, 30));
    assert_eq!(
        hg_permit_release_usage(p, hg_outcome::HG_OUTCOME_SUCCESS as u32, u64::MAX),
        hg_status::HG_STATUS_OK
    );
    hg_permit_free(p);
    let s = stats(bh);
    assert_eq!((s.active, s.budget_in_use), (0, 0));
    // A second call still gets the whole budget.
    let q = acquire(bh, &request(2, 100));
    assert_eq!(
        hg_permit_release_usage(q, hg_outcome::HG_OUTCOME_SUCCESS as u32, 0),
        hg_status::HG_STATUS_OK
    );
    hg_permit_free(q);
    hg_bulkhead_free(bh);
}

/// Extreme rates, reserves and timeouts are refused or accepted by the core, never a panic.
#[test]
fn extreme_class_tables_never_panic() {
    let c = config(4, 4, 100);
    let mut k: hg_class = zeroed();
    assert_eq!(hg_class_default(&mut k), hg_status::HG_STATUS_OK);
    let classes = [k, k];
    for (amount, per_ms, burst) in [
        (u64::MAX, u64::MAX, u64::MAX),
        (1, 0, 1),
        (1, u64::MAX, 1),
        (u64::MAX, 1, u64::MAX),
        (1, 1, 0),
        (HG_MAX_BUDGET, 1, HG_MAX_BUDGET),
    ] {
        for units in [false, true] {
            let mut t: hg_class_table = zeroed();
            t.struct_size = size_of::<hg_class_table>() as u32;
            t.classes = classes.as_ptr();
            t.classes_len = 2;
            let r = hg_rate {
                amount,
                per_ms,
                burst,
            };
            if units {
                t.units = r;
            } else {
                t.requests = r;
            }
            let mut bh = ptr::null_mut();
            let s = hg_bulkhead_new_with_classes(&c, &t, None, ptr::null_mut(), &mut bh);
            assert_ne!(
                s,
                hg_status::HG_STATUS_PANIC,
                "rate {amount} {per_ms} {burst}"
            );
            if s != hg_status::HG_STATUS_OK {
                continue;
            }
            let mut r = request(1, if units { 1 } else { 0 });
            r.timeout_ms = u64::MAX - 2;
            let mut w: hg_would_admit = zeroed();
            w.struct_size = size_of::<hg_would_admit>() as u32;
            for _ in 0..3 {
                assert_ne!(
                    hg_bulkhead_would_admit(bh, &r, &mut w),
                    hg_status::HG_STATUS_PANIC
                );
                let (mut p, mut t) = (ptr::null_mut(), 0);
                let st = hg_bulkhead_enqueue_request(bh, &r, &mut p, &mut t);
                assert_ne!(
                    st,
                    hg_status::HG_STATUS_PANIC,
                    "rate {amount} {per_ms} {burst}"
                );
                assert_ne!(hg_bulkhead_rate_retry_after_ns(bh), 0xdead);
                assert_ne!(hg_bulkhead_rate_tick(bh), hg_status::HG_STATUS_PANIC);
                if st == hg_status::HG_STATUS_OK {
                    hg_permit_release(p);
                    hg_permit_free(p);
                } else if st == hg_status::HG_STATUS_QUEUED {
                    assert_ne!(hg_ticket_cancel(bh, t), hg_status::HG_STATUS_PANIC);
                }
            }
            hg_bulkhead_free(bh);
        }
    }
}

/// Limits at the edges of every field: refused or applied, never a panic.
#[test]
fn extreme_limits_never_panic() {
    let bh = new_bh(&config(4, 4, 100));
    let mut l: hg_limits = zeroed();
    assert_eq!(hg_limits_default(&mut l), hg_status::HG_STATUS_OK);
    let mut rev = 1;
    for v in [
        0,
        1,
        HG_MAX_BUDGET,
        HG_MAX_BUDGET + 1,
        u64::MAX - 2,
        u64::MAX,
    ] {
        for f in 0..4 {
            let mut x = l;
            rev += 1;
            x.revision = rev;
            match f {
                0 => x.limit = v,
                1 => x.budget = v,
                2 => x.max_queue = v,
                _ => x.queue_timeout_ms = v,
            }
            assert_ne!(hg_bulkhead_apply_limits(bh, &x), hg_status::HG_STATUS_PANIC);
        }
        let mut x = l;
        x.revision = v;
        assert_ne!(hg_bulkhead_apply_limits(bh, &x), hg_status::HG_STATUS_PANIC);
    }
    let p = acquire(bh, &request(1, 0));
    for (used, remaining) in [(u64::MAX, u64::MAX), (u64::MAX, 0), (0, u64::MAX)] {
        assert_ne!(
            hg_permit_report_usage(p, used, remaining, ptr::null_mut()),
            hg_status::HG_STATUS_PANIC
        );
    }
    assert_ne!(hg_permit_refund(p, u64::MAX), hg_status::HG_STATUS_PANIC);
    hg_permit_release(p);
    hg_permit_free(p);
    hg_bulkhead_free(bh);
}

/// What one async acquire's callback received.
struct Settled {
    status: std::sync::Mutex<Vec<(hg_status, usize)>>,
}

unsafe extern "C" fn on_settle(status: hg_status, permit: *mut hg_permit, user: *mut c_void) {
    // SAFETY: `user` is the test's `Settled`, alive until the bulkhead is freed.
    let s = unsafe { &*user.cast::<Settled>() };
    s.status.lock().unwrap().push((status, permit as usize));
}

use std::ffi::c_void;

/// Every way a queued request with a cost can end — cancelled (async and polling), refused by
/// a close, granted and freed unreleased, orphaned then freed, released with a usage then
/// freed — returns every permit and budget unit exactly once (C30 after each).
#[test]
fn queued_costs_and_settlements_leak_nothing() {
    let mut c = config(2, 8, 100);
    c.max_orphaned = 2;
    let bh = new_bh(&c);
    let settled = Settled {
        status: std::sync::Mutex::new(Vec::new()),
    };
    let user = (&raw const settled).cast_mut().cast::<c_void>();
    let hold = acquire(bh, &request(2, 100));
    let mut r = request(1, 40);
    r.timeout_ms = HG_TIMEOUT_INFINITE;
    let (mut p, mut t1, mut t2, mut t3) = (ptr::null_mut(), 0, 0, 0);
    assert_eq!(
        hg_bulkhead_acquire_async_request(bh, &r, Some(on_settle), user, &mut p, &mut t1),
        hg_status::HG_STATUS_QUEUED
    );
    assert_eq!(
        hg_bulkhead_enqueue_request(bh, &r, &mut p, &mut t2),
        hg_status::HG_STATUS_QUEUED
    );
    assert_eq!(
        hg_bulkhead_acquire_async_request(bh, &r, Some(on_settle), user, &mut p, &mut t3),
        hg_status::HG_STATUS_QUEUED
    );
    assert_eq!(stats(bh).budget_queued_cost, 120);
    assert_eq!(hg_ticket_cancel(bh, t1), hg_status::HG_STATUS_OK);
    assert_eq!(hg_ticket_cancel(bh, t2), hg_status::HG_STATUS_OK);
    assert_eq!(
        hg_ticket_cancel(bh, t1),
        hg_status::HG_STATUS_ALREADY_SETTLED
    );
    let s = stats(bh);
    assert_eq!((s.queued, s.budget_queued_cost), (1, 40));
    c30(&s);
    // Released with a usage: the queued one is granted (its callback), the rest refunded.
    assert_eq!(
        hg_permit_release_usage(hold, hg_outcome::HG_OUTCOME_SUCCESS as u32, 60),
        hg_status::HG_STATUS_OK
    );
    hg_permit_free(hold);
    // Each async callback ran exactly once: the cancelled one with `aborted`.
    let got = settled.status.lock().unwrap().clone();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0], (hg_status::HG_STATUS_ABORTED, 0));
    assert_eq!(got[1].0, hg_status::HG_STATUS_OK);
    let granted = got[1].1 as *mut hg_permit;
    let s = stats(bh);
    assert_eq!(
        (s.active, s.budget_in_use, s.budget_queued_cost),
        (1, 40, 0)
    );
    c30(&s);
    // Orphaned then freed unreleased: the permit back at once, the units at the free.
    assert_eq!(hg_permit_orphan(granted), hg_status::HG_STATUS_OK);
    assert_eq!(
        hg_permit_orphan(granted),
        hg_status::HG_STATUS_ALREADY_SETTLED
    );
    let s = stats(bh);
    assert_eq!(
        (s.active, s.orphaned_in_flight, s.budget_in_use),
        (0, 1, 40)
    );
    hg_permit_free(granted);
    let s = stats(bh);
    assert_eq!((s.active, s.orphaned_in_flight, s.budget_in_use), (0, 0, 0));
    c30(&s);
    // A held permit with a cost freed unreleased, and a queued async one refused by close.
    let a = acquire(bh, &request(2, 90));
    let mut t4 = 0;
    assert_eq!(
        hg_bulkhead_acquire_async_request(bh, &r, Some(on_settle), user, &mut p, &mut t4),
        hg_status::HG_STATUS_QUEUED
    );
    assert_eq!(hg_bulkhead_close(bh), hg_status::HG_STATUS_OK);
    let got = settled.status.lock().unwrap().clone();
    assert_eq!(got.last().map(|g| g.0), Some(hg_status::HG_STATUS_SHUTDOWN));
    hg_permit_free(a);
    let s = stats(bh);
    assert_eq!(
        (s.active, s.queued, s.budget_in_use, s.budget_queued_cost),
        (0, 0, 0, 0)
    );
    c30(&s);
    hg_bulkhead_free(bh);
}

/// Admit / release events counted by a test callback (`on_event`).
#[derive(Default)]
struct Counts {
    admit: std::sync::atomic::AtomicU64,
    release_ended: std::sync::atomic::AtomicU64,
    reject: std::sync::atomic::AtomicU64,
    usage: std::sync::atomic::AtomicU64,
}

unsafe extern "C" fn count_event(user: *mut c_void, e: *const hg_event) {
    use std::sync::atomic::Ordering::Relaxed;
    // SAFETY: `user` is the test's `Counts`; `e` is valid during the call.
    let (c, e) = unsafe { (&*user.cast::<Counts>(), &*e) };
    match e.kind {
        1 => c.admit.fetch_add(1, Relaxed),
        2 => c.reject.fetch_add(1, Relaxed),
        4 if e.ended => c.release_ended.fetch_add(1, Relaxed),
        5 => c.usage.fetch_add(1, Relaxed),
        _ => 0,
    };
}

/// Four threads admit with costs, stream usage, refund, orphan and settle on one budgeted
/// bulkhead with `on_event` set: every permit and unit comes back, C30 holds, and every
/// admission's events arrive (one admit, one ending release each).
#[test]
fn concurrent_usage_settles_everything_once() {
    use std::sync::atomic::Ordering::Relaxed;
    let counts = Counts::default();
    // Small enough that the threads queue for both permits and units.
    let mut c = config(3, 64, 150);
    c.max_orphaned = 8;
    c.on_event = Some(count_event);
    c.on_event_user_data = (&raw const counts).cast_mut().cast();
    let bh = new_bh(&c) as usize;
    let granted = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let granted = &granted;
            s.spawn(move || {
                let bh = bh as *mut hg_bulkhead;
                for i in 0..2000u64 {
                    let mut r = request(1 + (i % 2), 10 + (i * 7 + t) % 90);
                    r.timeout_ms = HG_TIMEOUT_INFINITE;
                    let mut p = ptr::null_mut();
                    let st = hg_bulkhead_acquire_request(bh, &r, &mut p);
                    assert_eq!(st, hg_status::HG_STATUS_OK);
                    granted.fetch_add(1, Relaxed);
                    let used = i % 50;
                    let st = hg_permit_report_usage(p, used, i % 13, ptr::null_mut());
                    assert_eq!(st, hg_status::HG_STATUS_OK);
                    match i % 4 {
                        0 => {
                            let _ = hg_permit_refund(p, 1);
                            hg_permit_release_usage(p, 0, used + 3);
                        }
                        1 => {
                            assert_eq!(hg_permit_orphan(p), hg_status::HG_STATUS_OK);
                        }
                        2 => {
                            hg_permit_release(p);
                        }
                        _ => {}
                    }
                    hg_permit_free(p);
                }
            });
        }
    });
    let bh = bh as *mut hg_bulkhead;
    let s = stats(bh);
    assert_eq!(
        (s.active, s.queued, s.orphaned_in_flight, s.budget_in_use),
        (0, 0, 0, 0)
    );
    assert_eq!(s.budget_overrun_held, 0);
    c30(&s);
    let n = granted.load(Relaxed);
    assert_eq!(n, 8000);
    assert_eq!(counts.admit.load(Relaxed), n);
    assert_eq!(counts.release_ended.load(Relaxed), n);
    assert_eq!(counts.usage.load(Relaxed), n);
    assert_eq!(s.observer_panics, 0);
    hg_bulkhead_free(bh);
}
