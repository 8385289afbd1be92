//! The per-isolate settled queue: what the core settled or committed during a native call —
//! queued waiters and drains (by id) and breaker state changes — handed to the facade on the JS
//! thread at the end of that native call.
//!
//! A queued waiter's or a drain's `Waker` only pushes its id here; the breaker's events arrive
//! through one `Observer::on_event` adapter ([`Emitter`]). Every native method that can settle
//! a waiter, finish a drain or commit a transition ends with [`flush`], which calls the facade's
//! `onSettled(ids, events)` (registered once by `init`): after the core call returned, never
//! inside a protocol step, and never re-entered — a native call that `onSettled` makes adds to
//! the batch the outer flush delivers next. No threadsafe function, no extra turn.
//!
//! Thread-safety: an isolate runs on one thread and a bulkhead belongs to one isolate, so the
//! queue is thread-local. The core wakes a waker on the thread that settles the waiter, which
//! for a Node bulkhead is always its isolate's thread (every native call runs there).

use std::{
    cell::RefCell,
    mem::ManuallyDrop,
    sync::Arc,
    task::{Wake, Waker},
};

use hullguard_core::{Event, Observer};
use napi::{
    Env, Result,
    bindgen_prelude::{FnArgs, Function, FunctionRef},
};
use napi_derive::napi;

/// One breaker transition, for the facade's emitter `emitter`.
#[napi(object)]
pub struct StateChange {
    pub emitter: u32,
    /// The registry key, or `undefined` outside a registry.
    pub key: Option<String>,
    /// `'closed'`, `'open'` or `'half_open'`.
    pub old: String,
    pub new: String,
}

/// The arguments of the facade's `onSettled(ids, events)`.
pub(crate) type SettledArgs = FnArgs<(Vec<u32>, Vec<StateChange>)>;

type OnSettled = FunctionRef<SettledArgs, ()>;

struct Queue {
    ids: Vec<u32>,
    events: Vec<StateChange>,
    last_id: u32,
    flushing: bool,
}

thread_local! {
    static QUEUE: RefCell<Queue> = const {
        RefCell::new(Queue {
            ids: Vec::new(),
            events: Vec::new(),
            last_id: 0,
            flushing: false,
        })
    };
    /// Never dropped: the reference lives as long as the isolate (a drop at thread exit would
    /// touch an environment that is gone).
    static ON_SETTLED: RefCell<Option<ManuallyDrop<OnSettled>>> = const { RefCell::new(None) };
}

/// Registers the facade's `onSettled` (see [`crate::init`]).
pub(crate) fn init(on_settled: &Function<SettledArgs, ()>) -> Result<()> {
    let f = ManuallyDrop::new(on_settled.create_ref()?);
    ON_SETTLED.with(|s| s.replace(Some(f)));
    Ok(())
}

/// Delivers what is queued to the facade, until nothing is (the facade's own native calls may
/// queue more). A nested call (from inside `onSettled`) returns at once.
///
/// # Errors
/// An exception thrown by `onSettled` (the facade never throws there).
pub(crate) fn flush(env: &Env) -> Result<()> {
    let go = QUEUE.with(|q| {
        let mut q = q.borrow_mut();
        let go = !(q.flushing || q.ids.is_empty() && q.events.is_empty());
        q.flushing |= go;
        go
    });
    if !go {
        return Ok(());
    }
    let delivered = deliver(env);
    QUEUE.with(|q| q.borrow_mut().flushing = false);
    delivered
}

fn deliver(env: &Env) -> Result<()> {
    loop {
        let (ids, events) = QUEUE.with(|q| {
            let mut q = q.borrow_mut();
            (std::mem::take(&mut q.ids), std::mem::take(&mut q.events))
        });
        if ids.is_empty() && events.is_empty() {
            return Ok(());
        }
        // Without a facade (the addon used on its own) nobody listens: the batch is dropped.
        let f = ON_SETTLED.with(|s| s.borrow().as_ref().map(|f| f.borrow_back(env)));
        f.transpose()?
            .map(|f| f.call((ids, events).into()))
            .transpose()?;
    }
}

/// The end of a hot entry point (`fast`): when this is no nested call and only waiter ids are
/// queued, and they fit in `out`, they move there and their count is returned (the facade
/// settles them when the call returns, as `onSettled` would have at its end); else
/// [`flush`], and 0.
///
/// # Errors
/// As [`flush`].
pub(crate) fn flush_into(env: &Env, out: &mut [u32]) -> Result<usize> {
    let moved = QUEUE.with(|q| {
        let mut q = q.borrow_mut();
        let fits = !q.flushing && q.events.is_empty() && q.ids.len() <= out.len();
        fits.then(|| {
            let n = q.ids.len();
            out[..n].copy_from_slice(&q.ids);
            q.ids.clear();
            n
        })
    });
    match moved {
        Some(n) => Ok(n),
        None => flush(env).map(|()| 0),
    }
}

/// How many settled ids and events wait to be delivered (0 between native calls).
pub(crate) fn pending() -> u32 {
    QUEUE.with(|q| {
        let q = q.borrow();
        (q.ids.len() + q.events.len()) as u32
    })
}

struct IdWaker(u32);

impl Wake for IdWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        QUEUE.with(|q| q.borrow_mut().ids.push(self.0));
    }
}

/// Ids at or above this one are the facade's own (its dense table of hot-path waiters, given
/// to `fastTake`); those below are made here ([`waker`]).
pub(crate) const FACADE_IDS: u32 = 1 << 31;

/// A fresh id (for the facade's map of waiters and drains) and the waker that reports it.
pub(crate) fn waker() -> (u32, Waker) {
    let id = QUEUE.with(|q| {
        let mut q = q.borrow_mut();
        q.last_id = q.last_id.wrapping_add(1) % FACADE_IDS;
        q.last_id
    });
    (id, waker_of(id))
}

/// The waker that reports `id`.
pub(crate) fn waker_of(id: u32) -> Waker {
    Waker::from(Arc::new(IdWaker(id)))
}

/// The observer of one facade emitter (a bulkhead, or every key of a registry): queues each
/// event for `onSettled`.
pub(crate) struct Emitter(pub(crate) u32);

impl Observer for Emitter {
    /// Breaker transitions only, until the bindings deliver admission events (issue 16): the
    /// plain path stays plain.
    fn admission_events(&self) -> bool {
        false
    }

    fn on_event(&self, event: &Event<'_>) {
        if let Event::StateChange { key, old, new, .. } = *event {
            let change = StateChange {
                emitter: self.0,
                key: key.map(str::to_owned),
                old: old.as_str().to_owned(),
                new: new.as_str().to_owned(),
            };
            QUEUE.with(|q| q.borrow_mut().events.push(change));
        }
    }
}
