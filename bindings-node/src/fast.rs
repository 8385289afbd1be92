//! The hot entry points: a plain bulkhead's default admission, release, poll and expiry as
//! plain exported functions on a handle's **slot** (a number), not as class methods.
//!
//! Why: a napi-rs class method unwraps `this` on every call (≈ 250 ns measured on Node 20, a
//! plain exported function with number arguments ≈ 30 ns), which made an uncontended
//! `run(fn)` cost 4 class-method calls' worth of bookkeeping. The facade takes this path when a
//! call passes no options to a bulkhead without policies; every other call goes through the
//! `NativeBulkhead` methods. The decisions are the same core calls the methods make
//! (`admit_owned`, `Call::from_parts`, `Waiter::from_ticket`, `expire`): marshalling only.
//!
//! A slot is `generation · 2^32 + index` into this thread's slab of handles: a slot of a
//! disposed handle no longer names anything (its generation moved on) and is an `Error`, never
//! another bulkhead. The facade passes only slots of handles it holds.
//!
//! Everything crosses as numbers. A queued admission reports `[ticket, timeoutMs]` through the
//! isolate's scratch array (a `Float64Array` the facade registered with `init`) and is reported
//! settled under the id the facade gave `fastTake` (from its dense table of waiters, ids
//! `>= 2^31`). `fastGive` / `fastExpire` return how many waiter ids they settled, placed in the
//! facade's `settledIds` array (a `Uint32Array`), which the facade settles as soon as the call
//! returns — no array made, no call back into JS (anything else, or more ids than fit, goes
//! through `onSettled` as for every other native call; `settled::flush_into`).
//! Thread-safety: the slab and the arrays belong to the isolate's thread.

use std::{
    cell::{Cell, RefCell},
    mem::ManuallyDrop,
    panic::{self, AssertUnwindSafe},
    ptr,
    rc::Rc,
    sync::Arc,
};

use hullguard_core::{
    Bulkhead as CoreBulkhead, Call, CallStart, Decision, Reason, Request, Ticket, Waiter,
};
use napi::{
    Env, Error, JsError, Result, Status,
    bindgen_prelude::{Float64Array, Object, Uint32Array, Unknown},
    check_status, sys,
};
use napi_derive::napi;

use crate::{
    marshal::{ms, refused, type_error},
    settled,
};

struct Entry {
    bh: Arc<CoreBulkhead>,
    key: Option<Rc<str>>,
}

struct Slab {
    entries: Vec<(u32, Option<Rc<Entry>>)>,
    free: Vec<u32>,
}

thread_local! {
    static SLAB: RefCell<Slab> = const {
        RefCell::new(Slab {
            entries: Vec::new(),
            free: Vec::new(),
        })
    };
    /// The facade's scratch array: where a queued admission writes `[ticket, timeoutMs]`.
    static SCRATCH: Cell<Option<(*mut f64, usize)>> = const { Cell::new(None) };
    /// The facade's `settledIds` array: where `fastGive` / `fastExpire` put the ids they settled.
    static SETTLED: Cell<Option<(*mut u32, usize)>> = const { Cell::new(None) };
    /// Keep the arrays' buffers alive for the isolate's life (never dropped).
    static ARRAYS: RefCell<Option<ManuallyDrop<(Float64Array, Uint32Array)>>> =
        const { RefCell::new(None) };
}

const SCRATCH_LEN: usize = 2;

/// Registers the scratch array (at least 2 elements) and the `settledIds` array (at least 1),
/// once, at load.
pub(crate) fn init(scratch: Float64Array, settled_ids: Uint32Array) -> Result<()> {
    if scratch.len() < SCRATCH_LEN || settled_ids.is_empty() {
        return Err(Error::new(
            Status::InvalidArg,
            "the scratch array needs 2 elements and settledIds at least 1",
        ));
    }
    let data = (scratch.as_ptr().cast_mut(), scratch.len());
    SCRATCH.with(|s| s.set(Some(data)));
    let ids = (settled_ids.as_ptr().cast_mut(), settled_ids.len());
    SETTLED.with(|s| s.set(Some(ids)));
    ARRAYS.with(|r| r.replace(Some(ManuallyDrop::new((scratch, settled_ids)))));
    Ok(())
}

fn write_scratch(values: [f64; SCRATCH_LEN]) {
    if let Some((ptr, len)) = SCRATCH.with(Cell::get) {
        // SAFETY: the array's buffer lives as long as the isolate (SCRATCH_REF) and is at least
        // SCRATCH_LEN long (checked in `init`); only this thread touches it.
        let out = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
        out[..SCRATCH_LEN].copy_from_slice(&values);
    }
}

/// A slot for `bh` (freed by [`free`]).
pub(crate) fn register(bh: &Arc<CoreBulkhead>, key: Option<&Rc<str>>) -> f64 {
    SLAB.with(|s| {
        let mut s = s.borrow_mut();
        let entry = Some(Rc::new(Entry {
            bh: bh.clone(),
            key: key.cloned(),
        }));
        let index = match s.free.pop() {
            Some(i) => {
                let e = &mut s.entries[i as usize];
                e.0 = e.0.wrapping_add(1) & GEN_MASK;
                e.1 = entry;
                i
            }
            None => {
                s.entries.push((0, entry));
                (s.entries.len() - 1) as u32
            }
        };
        let generation = s.entries[index as usize].0;
        f64::from(generation) * 4_294_967_296.0 + f64::from(index)
    })
}

/// Generations stay below 2^21, so that a slot is a safe integer.
const GEN_MASK: u32 = (1 << 21) - 1;

fn split(slot: f64) -> (u32, u32) {
    let raw = slot as u64;
    ((raw >> 32) as u32, raw as u32)
}

/// Frees `slot` (its handle was disposed or collected); a stale slot is left alone.
pub(crate) fn free(slot: f64) {
    let (generation, index) = split(slot);
    SLAB.with(|s| {
        let mut s = s.borrow_mut();
        let live = s
            .entries
            .get_mut(index as usize)
            .filter(|e| e.0 == generation && e.1.is_some());
        if let Some(e) = live {
            e.1 = None;
            s.free.push(index);
        }
    });
}

fn with<R>(slot: f64, f: impl FnOnce(&Arc<CoreBulkhead>, Option<&str>) -> R) -> Result<R> {
    let (generation, index) = split(slot);
    // Out of the slab before the call: its flush runs the facade's `onSettled`, whose native
    // calls may make or free handles (a borrow held here would then be aliased).
    let found = SLAB.with(|s| {
        let s = s.borrow();
        s.entries
            .get(index as usize)
            .filter(|e| e.0 == generation)
            .and_then(|e| e.1.clone())
    });
    let e = found.ok_or_else(|| Error::new(Status::GenericFailure, "bulkhead handle disposed"))?;
    Ok(f(&e.bh, e.key.as_deref()))
}

/// `run(fn)` / `acquire()` with no options on a bulkhead without policies: the weight granted
/// (1), or `0` when queued (the scratch array then holds `[ticket, timeoutMs]`, and `id` is
/// reported when the ticket settles). Throws the `BulkheadError` of a refusal (the call ended
/// `ignored`).
fn take(env: &Env, [slot, id]: [f64; 2]) -> Result<f64> {
    with(slot, |bh, key| {
        // Uncontended: the core's take of the default admission (nothing to settle or flush).
        if let Some(call) = bh.take_now(1) {
            return Ok(call.into_parts().1 as f64);
        }
        let decision = bh.admit(&Request::new(1), None);
        settled::flush(env)?;
        let refused = |e| refused(env, &e, key);
        match decision {
            Decision::Granted(call) => Ok(call.into_parts().1 as f64),
            Decision::Queued(w) => {
                let waker = settled::waker_of(id as u32);
                let queued = [w.ticket().to_raw() as f64, ms(w.queue_timeout())];
                match poll(w, Some(&waker)) {
                    Ok(Some(weight)) => Ok(weight),
                    Ok(None) => {
                        write_scratch(queued);
                        Ok(0.0)
                    }
                    Err(e) => Err(refused(e)),
                }
            }
            Decision::Rejected(e) => Err(refused(e)),
        }
    })?
}

fn poll(
    mut w: Waiter<&CoreBulkhead, 0>,
    waker: Option<&std::task::Waker>,
) -> std::result::Result<Option<f64>, hullguard_core::AcquireError> {
    match w.poll(waker) {
        std::task::Poll::Pending => {
            let _ = w.into_ticket();
            Ok(None)
        }
        std::task::Poll::Ready(r) => r.map(|call| Some(call.into_parts().1 as f64)),
    }
}

/// Ends a call of `weight` permits of a bulkhead without policies (outcome `'success'`; a
/// plain bulkhead records none); returns the count of ids in `settledIds`.
fn give(env: &Env, [slot, weight]: [f64; 2]) -> Result<f64> {
    with(slot, |bh, _| {
        drop(Call::from_parts(&**bh, weight as u64, CallStart::NONE));
        settled_now(env)
    })?
}

/// The end of `fastGive` / `fastExpire`: the settled ids in the facade's `settledIds` array,
/// their count returned (see `settled::flush_into`).
fn settled_now(env: &Env) -> Result<f64> {
    let n = match SETTLED.with(Cell::get) {
        Some((ptr, len)) => {
            // SAFETY: as in `write_scratch`: the array lives as long as the isolate (ARRAYS),
            // `len` is its length, and only this thread touches it.
            let out = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
            settled::flush_into(env, out)?
        }
        None => settled::flush(env).map(|()| 0)?,
    };
    Ok(n as f64)
}

/// A queued ticket of a bulkhead without policies, after its id was reported: the weight
/// granted, `0` while still queued; throws the `BulkheadError` of its rejection.
fn poll_ticket(env: &Env, [slot, ticket]: [f64; 2]) -> Result<f64> {
    with(slot, |bh, key| {
        let polled = poll(bh.waiter(Ticket::from_raw(ticket as u64)), None);
        settled::flush(env)?;
        polled
            .map(|w| w.unwrap_or(0.0))
            .map_err(|e| refused(env, &e, key))
    })?
}

/// A host timer (`aborted` false: `timeout`) or abort signal (`aborted` true) settles a
/// queued ticket, whose id is then reported (a ticket that settled first is left alone);
/// returns the count of ids in `settledIds`.
fn expire(env: &Env, [slot, ticket, aborted]: [f64; 3]) -> Result<f64> {
    let reason = if aborted == 0.0 {
        Reason::Timeout
    } else {
        Reason::Aborted
    };
    with(slot, |bh, _| {
        let _ = bh.expire(Ticket::from_raw(ticket as u64), reason);
        settled_now(env)
    })?
}

// ----- raw entry points -----------------------------------------------------------------------

/// The raw N-API callback of one entry point: `N` number arguments in, a number out. Reads
/// its arguments without napi-rs's per-call bookkeeping; a missing or non-number argument is a
/// `TypeError`; an `Err` is thrown (or left pending); a panic is caught and thrown as an
/// `Error`, never unwound into V8.
///
/// # Safety
/// Called by N-API with its own `env` and `info`, on the isolate's thread.
unsafe fn entry<const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    name: &str,
    body: fn(&Env, [f64; N]) -> Result<f64>,
) -> sys::napi_value {
    let e = Env::from_raw(env);
    let run = || -> Result<sys::napi_value> {
        let mut argc = N;
        let mut argv = [ptr::null_mut(); N];
        // SAFETY: `argv` has room for `argc` values (N-API writes at most `argc`).
        check_status!(unsafe {
            sys::napi_get_cb_info(
                env,
                info,
                &mut argc,
                argv.as_mut_ptr(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        })?;
        let mut args = [0.0; N];
        for (i, (arg, v)) in args.iter_mut().zip(argv).enumerate() {
            // SAFETY: `v` is a value of this call (null past `argc`: refused first).
            let ok = i < argc
                && unsafe { sys::napi_get_value_double(env, v, arg) } == sys::Status::napi_ok;
            if !ok {
                return Err(type_error(
                    &e,
                    format_args!("{name}: argument {i} must be a number"),
                ));
            }
        }
        let value =
            panic::catch_unwind(AssertUnwindSafe(|| body(&e, args))).unwrap_or_else(|_| {
                Err(Error::from_reason(format!(
                    "hullguard: internal error in {name}"
                )))
            })?;
        let mut out = ptr::null_mut();
        // SAFETY: a plain number value for this call's scope.
        check_status!(unsafe { sys::napi_create_double(env, value, &mut out) })?;
        Ok(out)
    };
    match run() {
        Ok(v) => v,
        Err(err) => {
            // SAFETY: this call's env; a pending exception is left in place.
            unsafe { JsError::from(err).throw_into(env) };
            ptr::null_mut()
        }
    }
}

macro_rules! entry_points {
    ($($js:literal => $body:ident / $n:literal),* $(,)?) => {
        [$({
            unsafe extern "C" fn cb(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
                // SAFETY: N-API's own arguments, on the isolate's thread.
                unsafe { entry::<$n>(env, info, $js, $body) }
            }
            ($js, cb as unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value)
        }),*]
    };
}

/// The hot entry points as raw N-API functions: `{fastTake(slot, id), fastGive(slot, weight),
/// fastPoll(slot, ticket), fastExpire(slot, ticket, aborted: 0 | 1)}` (all numbers in and out).
#[napi(
    ts_return_type = "{ fastTake(slot: number, id: number): number; fastGive(slot: number, weight: number): number; fastPoll(slot: number, ticket: number): number; fastExpire(slot: number, ticket: number, aborted: number): number }"
)]
pub fn fast_entry_points(env: &Env) -> Result<Object<'_>> {
    let mut out = Object::new(env)?;
    let points = entry_points![
        "fastTake" => take / 2,
        "fastGive" => give / 2,
        "fastPoll" => poll_ticket / 2,
        "fastExpire" => expire / 3,
    ];
    for (name, cb) in points {
        let mut f = ptr::null_mut();
        // SAFETY: a function made in this env from a static callback with no data.
        check_status!(unsafe {
            sys::napi_create_function(
                env.raw(),
                name.as_ptr().cast(),
                name.len() as isize,
                Some(cb),
                ptr::null_mut(),
                &mut f,
            )
        })?;
        // SAFETY: `f` is a function value of this env.
        out.set(name, unsafe { Unknown::from_raw_unchecked(env.raw(), f) })?;
    }
    Ok(out)
}
