//! The per-isolate queue of settled waiters.
//!
//! A queued acquire registers a `Waker` that, when the core grants or rejects its ticket, only
//! pushes the waiter's id here. Every native call that can settle waiters (release, cancel,
//! resize, close) returns how many ids are queued, and the JS facade then takes them and
//! resolves their promises on the JS thread: no threadsafe function, no extra turn. An isolate
//! runs on one thread and a bulkhead belongs to one isolate, so the queue is thread-local.

use std::{
    cell::RefCell,
    sync::Arc,
    task::{Wake, Waker},
};

thread_local! {
    static SETTLED: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

struct WaiterWake(u32);

impl Wake for WaiterWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        SETTLED.with(|s| s.borrow_mut().push(self.0));
    }
}

/// The waker of JS waiter `id`.
pub(crate) fn waker(id: u32) -> Waker {
    Waker::from(Arc::new(WaiterWake(id)))
}

/// How many settled waiters and state-change events wait to be taken (the facade takes both
/// when this is not 0).
pub(crate) fn pending() -> u32 {
    SETTLED.with(|s| s.borrow().len() as u32) + crate::resilience::pending()
}

/// Takes the settled waiter ids, oldest first.
pub(crate) fn take() -> Vec<u32> {
    SETTLED.with(|s| std::mem::take(&mut *s.borrow_mut()))
}
