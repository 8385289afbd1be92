//! What a released permit keeps of its bulkhead (issue 15 item 4, `handle::Released`): a
//! standalone bulkhead's permit keeps its strong reference until it is freed (no weak reference
//! taken at the release); a registry key's permit — also through a handle from
//! `hg_registry_get()` — keeps only a weak one, so a released, unfreed permit never pins its key.

use std::ptr;

use hullguard::*;

fn config(max_concurrent: u64) -> hg_config {
    // SAFETY: `hg_config` is integers, bools and `Option<fn>`s: all zeroes is a valid value.
    let mut c: hg_config = unsafe { std::mem::zeroed() };
    assert_eq!(hg_config_default(&mut c), hg_status::HG_STATUS_OK);
    c.max_concurrent = max_concurrent;
    c
}

fn key_count(reg: *mut hg_registry, key: &str) -> Option<hg_stats> {
    let mut s = hg_stats {
        struct_size: size_of::<hg_stats>() as u32,
        ..Default::default()
    };
    let st = hg_registry_stats(reg, key.as_ptr().cast(), key.len(), &mut s);
    (st == hg_status::HG_STATUS_OK).then_some(s)
}

#[test]
fn a_standalone_permit_outlives_its_bulkhead_and_still_counts_a_second_release() {
    let mut bh = ptr::null_mut();
    assert_eq!(
        hg_bulkhead_new(&config(2), &mut bh),
        hg_status::HG_STATUS_OK
    );
    let mut p = ptr::null_mut();
    assert_eq!(
        hg_bulkhead_try_acquire(bh, 1, &mut p),
        hg_status::HG_STATUS_OK
    );
    // A second handle to read stats after the first is freed.
    let watch = hg_bulkhead_retain(bh);
    hg_bulkhead_free(bh);
    assert_eq!(hg_permit_release(p), hg_status::HG_STATUS_OK);
    assert_eq!(hg_permit_release(p), hg_status::HG_STATUS_ALREADY_RELEASED);
    let mut s = hg_stats {
        struct_size: size_of::<hg_stats>() as u32,
        ..Default::default()
    };
    assert_eq!(hg_bulkhead_stats(watch, &mut s), hg_status::HG_STATUS_OK);
    assert_eq!((s.released_twice_total, s.available, s.active), (1, 2, 0));
    hg_bulkhead_free(watch.cast_mut());
    // The bulkhead's last handle is gone; the pinned permit still reaches it (ASan / Miri
    // would flag a dangling one) and is refused again.
    assert_eq!(hg_permit_release(p), hg_status::HG_STATUS_ALREADY_RELEASED);
    hg_permit_free(p);
}

#[test]
fn a_released_permit_through_a_registry_handle_does_not_pin_its_key() {
    let mut reg = ptr::null_mut();
    assert_eq!(
        hg_registry_new(&config(1), ptr::null(), 0, 1, &mut reg),
        hg_status::HG_STATUS_OK
    );
    let mut a = ptr::null_mut();
    assert_eq!(
        hg_registry_get(reg, c"a".as_ptr(), 1, &mut a),
        hg_status::HG_STATUS_OK
    );
    let mut p = ptr::null_mut();
    assert_eq!(
        hg_bulkhead_try_acquire(a, 1, &mut p),
        hg_status::HG_STATUS_OK
    );
    hg_bulkhead_free(a);
    // Held: the key is pinned, a second key finds no room.
    let mut q = ptr::null_mut();
    assert_eq!(
        hg_registry_try_acquire(reg, c"b".as_ptr(), 1, 1, &mut q),
        hg_status::HG_STATUS_KEY_LIMIT
    );
    // Released but not freed: the key is idle and evictable.
    assert_eq!(hg_permit_release(p), hg_status::HG_STATUS_OK);
    assert!(key_count(reg, "a").is_some());
    assert_eq!(
        hg_registry_try_acquire(reg, c"b".as_ptr(), 1, 1, &mut q),
        hg_status::HG_STATUS_OK
    );
    assert!(key_count(reg, "a").is_none(), "key a was evicted");
    // The released permit's bulkhead is gone: a second release is refused, counted nowhere.
    assert_eq!(hg_permit_release(p), hg_status::HG_STATUS_ALREADY_RELEASED);
    hg_permit_free(p);
    assert_eq!(hg_permit_release(q), hg_status::HG_STATUS_OK);
    hg_permit_free(q);
    hg_registry_free(reg);
}
