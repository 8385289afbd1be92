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

use hullguard_core::{Event, HoldChange, Observer};
use napi::{
    Env, Result,
    bindgen_prelude::{FnArgs, Function, FunctionRef},
};
use napi_derive::napi;

/// One event for the facade's emitter `emitter` (docs/design.md §8.2): a breaker transition
/// (`kind` `'stateChange'`, `old` / `new`), or — on a bulkhead built with `events: true` — an
/// admission event (`'admit'`, `'reject'`, `'observeBypass'`, `'release'`, `'usage'`,
/// `'reconfigure'`, `'shed'`) with the fields of its kind (the others `undefined`). Counts are
/// numbers (exact to 2^53), times ns.
#[napi(object)]
#[derive(Default)]
pub struct NativeEvent {
    pub emitter: u32,
    /// The event's name, camel-cased from the core's (`observe_bypass` → `observeBypass`).
    pub kind: String,
    /// The registry key, or `undefined` outside a registry.
    pub key: Option<String>,
    /// `'closed'`, `'open'` or `'half_open'` (`stateChange`).
    pub old: Option<String>,
    pub new: Option<String>,
    /// The admission id.
    pub id: Option<f64>,
    /// The admission class (index).
    pub class: Option<u32>,
    /// The revision of the limits in force.
    pub revision: Option<f64>,
    pub weight: Option<f64>,
    pub cost: Option<f64>,
    /// Whether it waited in the queue first.
    pub queued: Option<bool>,
    pub decision_ns: Option<f64>,
    pub wait_ns: Option<f64>,
    /// The reason (`reject`; `observeBypass`: what enforcing would have answered).
    pub reason: Option<String>,
    /// Units held (before a `release` step; after a `usage` report).
    pub held: Option<f64>,
    /// Units used in all (`release` with a usage; `usage`: cumulative).
    pub used: Option<f64>,
    pub ended: Option<bool>,
    pub overrun: Option<f64>,
    /// `'unchanged' | 'shrank' | 'grew' | 'overran'` (`usage`), and by how many units.
    pub change: Option<String>,
    pub by: Option<f64>,
    /// The host is asked to cancel the call's work (`usage`).
    pub cancel: Option<bool>,
    /// The shed waiter's admission id and class (`shed`).
    pub victim: Option<f64>,
    pub victim_class: Option<u32>,
    /// The limits now (`reconfigure`).
    pub limit: Option<f64>,
    pub budget: Option<f64>,
    pub observe: Option<String>,
}

/// `snake_case` → `camelCase` (an event's name).
fn camel(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut up = false;
    for c in name.chars() {
        match c {
            '_' => up = true,
            c if up => {
                out.push(c.to_ascii_uppercase());
                up = false;
            }
            c => out.push(c),
        }
    }
    out
}

impl NativeEvent {
    /// The event `e` for emitter `emitter`.
    fn of(emitter: u32, e: &Event<'_>) -> Self {
        let n = |x: u64| Some(x as f64);
        let mut out = NativeEvent {
            emitter,
            kind: camel(e.name()),
            key: e.key().map(str::to_owned),
            ..NativeEvent::default()
        };
        match *e {
            Event::StateChange { old, new, .. } => {
                out.old = Some(old.as_str().to_owned());
                out.new = Some(new.as_str().to_owned());
            }
            Event::Admit {
                id,
                class,
                revision,
                weight,
                cost,
                queued,
                decision_ns,
                wait_ns,
                ..
            } => {
                (out.id, out.class, out.revision) = (n(id), Some(class.into()), n(revision));
                (out.weight, out.cost, out.queued) = (n(weight), n(cost), Some(queued));
                (out.decision_ns, out.wait_ns) = (n(decision_ns), n(wait_ns));
            }
            Event::Reject {
                id,
                class,
                revision,
                reason,
                weight,
                cost,
                queued,
                decision_ns,
                wait_ns,
                ..
            } => {
                (out.id, out.class, out.revision) = (n(id), Some(class.into()), n(revision));
                (out.weight, out.cost, out.queued) = (n(weight), n(cost), Some(queued));
                (out.decision_ns, out.wait_ns) = (n(decision_ns), n(wait_ns));
                out.reason = Some(reason.as_str().to_owned());
            }
            Event::ObserveBypass {
                id,
                class,
                revision,
                reason,
                ..
            } => {
                (out.id, out.class, out.revision) = (n(id), Some(class.into()), n(revision));
                out.reason = Some(reason.as_str().to_owned());
            }
            Event::Release {
                id,
                class,
                revision,
                weight,
                held,
                used,
                ended,
                ..
            } => {
                (out.id, out.class, out.revision) = (n(id), Some(class.into()), n(revision));
                (out.weight, out.held, out.ended) = (n(weight), n(held), Some(ended));
                out.used = used.and_then(n);
            }
            Event::Usage {
                id,
                class,
                revision,
                used,
                held,
                overrun,
                change,
                cancel,
                ..
            } => {
                (out.id, out.class, out.revision) = (n(id), Some(class.into()), n(revision));
                (out.used, out.held, out.overrun) = (n(used), n(held), n(overrun));
                let (name, by) = hold_change(change);
                (out.change, out.by, out.cancel) = (Some(name.to_owned()), n(by), Some(cancel));
            }
            Event::Shed {
                id,
                class,
                revision,
                victim,
                victim_class,
                ..
            } => {
                (out.id, out.class, out.revision) = (n(id), Some(class.into()), n(revision));
                (out.victim, out.victim_class) = (n(victim), Some(victim_class.into()));
            }
            Event::Reconfigure {
                revision,
                limit,
                budget,
                observe,
                ..
            } => {
                (out.revision, out.limit) = (n(revision), n(limit));
                out.budget = budget.and_then(n);
                out.observe = Some(observe.as_str().to_owned());
            }
            _ => {}
        }
        out
    }
}

/// A usage report's change as its name and size (`'shrank'`, 3).
pub(crate) fn hold_change(c: HoldChange) -> (&'static str, u64) {
    match c {
        HoldChange::Unchanged => ("unchanged", 0),
        HoldChange::Shrank(n) => ("shrank", n),
        HoldChange::Grew(n) => ("grew", n),
        HoldChange::Overran(n) => ("overran", n),
    }
}

/// The arguments of the facade's `onSettled(ids, events)`.
pub(crate) type SettledArgs = FnArgs<(Vec<u32>, Vec<NativeEvent>)>;

type OnSettled = FunctionRef<SettledArgs, ()>;

struct Queue {
    ids: Vec<u32>,
    events: Vec<NativeEvent>,
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
/// event for `onSettled`. Admission events only when `events` (asked for at construction: the
/// core reads `admission_events` once, so without it the plain path stays plain).
pub(crate) struct Emitter {
    pub(crate) id: u32,
    pub(crate) events: bool,
}

impl Observer for Emitter {
    fn admission_events(&self) -> bool {
        self.events
    }

    fn on_event(&self, event: &Event<'_>) {
        let e = NativeEvent::of(self.id, event);
        QUEUE.with(|q| q.borrow_mut().events.push(e));
    }
}
