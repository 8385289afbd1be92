//! The [`Emitter`] a bulkhead with an observer keeps (docs/design.md §8.2): the observer, the
//! registry key, the admission-id counter and the count of observer panics; and [`Asked`],
//! what one admission asked for, for its events. The steps that build the events are in
//! `front::events`.

use crate::event::Event;
#[cfg(feature = "alloc")]
use crate::sync::{AtomicWord, Ordering::Relaxed};

/// Where a bulkhead's events go. Lives in the bulkhead's policy allocation.
#[cfg(feature = "alloc")]
pub(crate) struct Emitter {
    observer: crate::event::SharedObserver,
    key: Option<alloc::boxed::Box<str>>,
    /// The last admission id handed out (ids start at 1).
    last_id: AtomicWord,
    /// Observer calls that panicked (caught under `std`).
    panics: AtomicWord,
    /// The observer takes admission events ([`Observer::admission_events`](crate::Observer::admission_events)).
    admissions: bool,
}

/// How a bulkhead keeps its emitter: a `Box` (one allocation at construction, only with an
/// observer); without `alloc` the uninhabited [`Emitter`] itself.
#[cfg(feature = "alloc")]
pub(crate) type EmitterBox = alloc::boxed::Box<Emitter>;
/// Without `alloc`: no values.
#[cfg(not(feature = "alloc"))]
pub(crate) type EmitterBox = Emitter;

/// Without `alloc` there are no observers: this type has no values.
#[cfg(not(feature = "alloc"))]
#[derive(Debug)]
pub(crate) enum Emitter {}

#[cfg(not(feature = "alloc"))]
impl Emitter {
    pub(crate) fn key(&self) -> Option<&str> {
        match *self {}
    }
    pub(crate) fn next_id(&self) -> u64 {
        match *self {}
    }
    pub(crate) fn deliver(&self, _: &Event<'_>) {
        match *self {}
    }
    pub(crate) fn panics(&self) -> u64 {
        match *self {}
    }
    pub(crate) fn admissions(&self) -> bool {
        match *self {}
    }
}

#[cfg(feature = "alloc")]
impl core::fmt::Debug for Emitter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Emitter")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "alloc")]
impl Emitter {
    pub(crate) fn new(observer: crate::event::SharedObserver, key: Option<&str>) -> Self {
        Emitter {
            admissions: observer.admission_events(),
            observer,
            key: key.map(alloc::boxed::Box::from),
            last_id: AtomicWord::new(0),
            panics: AtomicWord::new(0),
        }
    }

    /// The registry key, if any.
    pub(crate) fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// Whether the observer takes admission events (else only state changes).
    pub(crate) fn admissions(&self) -> bool {
        self.admissions
    }

    /// The next admission id (1, 2, 3 …). Relaxed: a counter; its order is the order of the
    /// RMWs, which is all an id promises.
    pub(crate) fn next_id(&self) -> u64 {
        // 0 means "no events": skipped when the counter wraps (2³² on a 32-bit word).
        let id = self.last_id.fetch_add(1, Relaxed).wrapping_add(1);
        if id == 0 {
            return self.next_id();
        }
        id as u64
    }

    /// Delivers `event` to the observer; under `std` a panic is caught and counted.
    pub(crate) fn deliver(&self, event: &Event<'_>) {
        #[cfg(feature = "std")]
        {
            let o = &*self.observer;
            let r = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| o.on_event(event)));
            if r.is_err() {
                self.panics.fetch_add(1, Relaxed);
            }
        }
        #[cfg(not(feature = "std"))]
        self.observer.on_event(event);
    }

    /// Observer calls that panicked.
    pub(crate) fn panics(&self) -> u64 {
        self.panics.load(Relaxed) as u64
    }
}

/// What an admission asked for, for its events.
#[derive(Clone, Copy)]
pub(crate) struct Asked {
    pub(crate) id: u64,
    pub(crate) class: u16,
    pub(crate) weight: u64,
    pub(crate) cost: u64,
    /// Clock at the decision's start (ns; 0 without a clock).
    pub(crate) start_ns: Option<u64>,
}
