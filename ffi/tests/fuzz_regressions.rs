//! Regressions found by the C ABI fuzz target (`fuzz/fuzz_targets/c_abi.rs`, docs/design.md
//! §11): each test is the crashing input, reduced to the calls that matter, named after the
//! bug.

use std::{
    ffi::{CStr, c_void},
    mem::offset_of,
    ptr,
    sync::atomic::{AtomicU64, Ordering::SeqCst},
};

use hullguard::*;

/// An all-zero C struct of this ABI, for the library to fill.
fn zeroed<T: Copy>() -> T {
    // SAFETY: `hg_config` is such a struct: all zeroes (no callbacks, false flags, the C enums'
    // 0) is a valid value.
    unsafe { std::mem::zeroed() }
}

/// `hg_config_check` and `hg_bulkhead_new` on one config: (check's status, bad field, new's
/// status); the bulkhead, if any, is freed.
fn check_and_new(c: &hg_config) -> (hg_status, Option<String>, hg_status) {
    let mut bad: *const std::ffi::c_char = ptr::null();
    let check = hg_config_check(c, &mut bad);
    let field = (!bad.is_null()).then(|| {
        // SAFETY: the library returns NULL or a static NUL-terminated field name.
        unsafe { CStr::from_ptr(bad) }
            .to_string_lossy()
            .into_owned()
    });
    let mut bh = ptr::null_mut();
    let new = hg_bulkhead_new(c, &mut bh);
    hg_bulkhead_free(bh);
    (check, field, new)
}

/// Found by the `c_abi` fuzz target (its first crash): `hg_config_check` — documented as
/// checking "a configuration as `hg_bulkhead_new()` would" — accepted a config that
/// `hg_bulkhead_new` refused. A load-shedding threshold (`shed_lag_threshold_ms`,
/// `shed_cpu_threshold`) or `queue_delay_target_ms` gives the bulkhead a one-class table
/// (docs/design.md §4.10, §4.11), which refuses `adaptive_enabled`, an `observe` mode and
/// `enabled = false` — but only when the bulkhead was built: the core's `Config::validate`
/// (what `hg_config_check`, the bindings' option parsers and `PartialConfig::to_config` run)
/// did not check it, and a Python or Node user who never gave a class table read an error about
/// classes. Fixed in `Config::validate` (`ConfigError::Conflicts`, naming both options); the
/// bad field is the option that brings the table. The fuzzer's input: `adaptive_enabled = 1`,
/// `shed_lag_threshold_ms = 6`, `shed_cpu_threshold = 0.5`, every other field the default.
#[test]
fn config_check_agrees_with_new_on_a_one_class_table_the_config_implies() {
    let base = || {
        let mut c = hg_config {
            struct_size: 0,
            ..zeroed()
        };
        assert_eq!(hg_config_default(&mut c), hg_status::HG_STATUS_OK);
        c
    };
    // The fuzzer's input.
    let mut c = base();
    c.adaptive_enabled = true;
    c.shed_lag_threshold_ms = 6;
    c.shed_cpu_threshold = 0.5;
    let mut cases = vec![(c, "shed_lag_threshold_ms")];
    // The same gap through each trigger and each option a class table refuses.
    for trigger in 0..3 {
        for conflict in 0..3 {
            let mut c = base();
            let field = match trigger {
                0 => {
                    c.queue_delay_target_ms = 50;
                    "queue_delay_target_ms"
                }
                1 => {
                    c.shed_lag_threshold_ms = 100;
                    "shed_lag_threshold_ms"
                }
                _ => {
                    c.shed_cpu_threshold = 0.9;
                    "shed_cpu_threshold"
                }
            };
            match conflict {
                0 => c.adaptive_enabled = true,
                1 => c.observe = hg_observe::HG_OBSERVE_CONCURRENCY as u32,
                _ => c.enabled = false,
            }
            cases.push((c, field));
        }
    }
    let mut wrong = Vec::new();
    for (i, (c, trigger)) in cases.iter().enumerate() {
        let (check, field, new) = check_and_new(c);
        // Both refuse, and the refusal names the option that brings the table.
        if check != hg_status::HG_STATUS_INVALID_ARGUMENT
            || new != hg_status::HG_STATUS_INVALID_ARGUMENT
            || field.as_deref() != Some(*trigger)
        {
            wrong.push(format!(
                "case {i}: hg_config_check {check:?} (bad field {field:?}), hg_bulkhead_new {new:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Counts events into the `AtomicU64` at `user_data`, and counts a NULL `user_data` as a
/// failure (`u64::MAX / 2` added: the test looks for it).
unsafe extern "C" fn count_events(user_data: *mut c_void, _event: *const hg_event) {
    static NULL_SEEN: AtomicU64 = AtomicU64::new(0);
    let target = if user_data.is_null() {
        &NULL_SEEN
    } else {
        // SAFETY: the test passes a live `AtomicU64`.
        unsafe { &*(user_data as *const AtomicU64) }
    };
    target.fetch_add(1, SeqCst);
    assert!(
        !user_data.is_null(),
        "an event callback called with a NULL user data"
    );
}

/// Found by the `c_abi` fuzz target: a `struct_size` that ends exactly between `on_event` and
/// `on_event_user_data` (208 on x86-64) was accepted: `on_event` was read, its user data was
/// past the declared size and read as NULL, so the callback ran with a NULL `user_data` the
/// caller never wrote (the fuzzer's callback dereferenced it). The two were appended together:
/// no header ever ended between them, and the other groups (deadlines, load shedding) already
/// refuse such a size. The fuzzer's input: the defaults, `on_event` and its user data set,
/// `struct_size = offsetof(hg_config, on_event_user_data)`, then `hg_bulkhead_try_acquire`.
#[test]
fn an_event_callback_without_its_user_data_is_refused() {
    let events = AtomicU64::new(0);
    let mut c = hg_config {
        struct_size: 0,
        ..zeroed()
    };
    assert_eq!(hg_config_default(&mut c), hg_status::HG_STATUS_OK);
    c.on_event = Some(count_events);
    c.on_event_user_data = (&events as *const AtomicU64).cast_mut().cast();
    c.struct_size = offset_of!(hg_config, on_event_user_data) as u32;
    let (check, field, new) = check_and_new(&c);
    assert_eq!(check, hg_status::HG_STATUS_INVALID_ARGUMENT);
    assert_eq!(field.as_deref(), Some("struct_size"));
    assert_eq!(new, hg_status::HG_STATUS_INVALID_ARGUMENT);
    // The sizes around it: before `on_event` (no events) and after its user data (events, with
    // the user data) are accepted, and the callback gets what the caller wrote.
    for size in [
        offset_of!(hg_config, on_event),
        offset_of!(hg_config, on_event_user_data) + size_of::<*mut c_void>(),
    ] {
        c.struct_size = size as u32;
        let mut bh = ptr::null_mut();
        assert_eq!(
            hg_bulkhead_new(&c, &mut bh),
            hg_status::HG_STATUS_OK,
            "{size}"
        );
        let mut p = ptr::null_mut();
        assert_eq!(
            hg_bulkhead_try_acquire(bh, 1, &mut p),
            hg_status::HG_STATUS_OK
        );
        hg_permit_free(p);
        hg_bulkhead_free(bh);
    }
    assert!(
        events.load(SeqCst) > 0,
        "the full-size config's events arrived"
    );
}
