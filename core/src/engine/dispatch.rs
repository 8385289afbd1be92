//! The dispatcher's wake batch: the wakers of the waiters one pass settled, woken after the pass
//! (the pass itself is serialized by a [`RunFlag`](crate::run_flag::RunFlag)).

use core::{mem::MaybeUninit, task::Waker};

/// Wakers collected during a dispatcher pass, woken after it (never inside a protocol step:
/// a waker may run arbitrary code, including a C callback that releases).
///
/// Only the first `len` slots are initialized: creating a batch writes nothing and dropping one
/// touches only what was pushed (a dispatcher run usually wakes one waiter).
pub(crate) struct WakeBatch {
    wakers: [MaybeUninit<Option<Waker>>; WakeBatch::CAPACITY],
    len: usize,
}

impl core::fmt::Debug for WakeBatch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WakeBatch").field("len", &self.len).finish()
    }
}

impl WakeBatch {
    /// How many grants one pass makes before it stops to wake them.
    pub(crate) const CAPACITY: usize = 32;

    pub(crate) const fn new() -> Self {
        Self {
            wakers: [const { MaybeUninit::uninit() }; Self::CAPACITY],
            len: 0,
        }
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len == Self::CAPACITY
    }

    #[cfg(feature = "alloc")]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Counts one settled waiter (with or without a waker to wake).
    #[inline]
    pub(crate) fn push(&mut self, waker: Option<Waker>) {
        self.wakers[self.len].write(waker);
        self.len += 1;
    }

    /// Wakes everything collected and empties the batch.
    pub(crate) fn wake_all(&mut self) {
        let n = core::mem::take(&mut self.len);
        for slot in &mut self.wakers[..n] {
            // SAFETY: slots `..n` were written by `push` since the last `wake_all`, and `len`
            // is already 0, so each is read exactly once (a panicking waker cannot cause a
            // second read from `Drop`).
            if let Some(w) = unsafe { slot.assume_init_read() } {
                w.wake();
            }
        }
    }
}

impl Drop for WakeBatch {
    fn drop(&mut self) {
        self.wake_all();
    }
}
