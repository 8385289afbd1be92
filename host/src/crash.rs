//! Named protocol steps and the crash points between them (docs/design.md §14.7).
//!
//! Every shared-memory write of the protocol is preceded by [`point`]. In a shipped build it is
//! empty. Two test hooks use it:
//! * feature `crash-hook`: `HG_CRASH_AT=<step name>` makes the process `abort()` at that step
//!   (the kill-at-every-step test runs a child per step, then checks a reaper leaves nothing
//!   held and nothing published); with `HG_CRASH_MODE=stop` it stops there instead (SIGSTOP:
//!   a reaper frozen midway must not keep a dead process's permits);
//! * `cfg(loom)` / unit tests: [`with_budget`] lets a victim run only its first *k* steps, then
//!   unwinds it with [`Crashed`] (the loom models' crash injection).

/// A named point of the protocol, before the shared write it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Before an admission's tentative bump of its own held words.
    AcquireBump,
    /// After the bump, before the re-scan that confirms it.
    AcquireCheck,
    /// Before undoing a tentative bump that did not fit.
    AcquireUndo,
    /// Before a release's decrement of the held word.
    ReleaseHeld,
    /// Between the held and the cost decrement.
    ReleaseCost,
    /// Before taking a ticket from the global counter.
    PublishTicket,
    /// Before publishing the process's head ticket.
    PublishHead,
    /// Before unpublishing a head ticket (a grant, a timeout or a cancel).
    CancelUnpublish,
    /// Before a claim writes the slot's words.
    ClaimWords,
    /// Before a claim marks the slot active.
    ClaimLease,
    /// Before a reaper marks a dead slot reclaiming.
    ReclaimLease,
    /// Before it zeroes the dead slot's held words.
    ReclaimWords,
    /// Before it clears the dead slot's head ticket.
    ReclaimHead,
    /// Before it frees the slot.
    ReclaimFree,
    /// Before an observer marks a silent slot expired.
    ExpireLease,
    /// Before it zeroes the expired slot's words.
    ExpireWords,
}

impl Step {
    /// Every step, in protocol order.
    pub const ALL: [Step; 16] = [
        Step::AcquireBump,
        Step::AcquireCheck,
        Step::AcquireUndo,
        Step::ReleaseHeld,
        Step::ReleaseCost,
        Step::PublishTicket,
        Step::PublishHead,
        Step::CancelUnpublish,
        Step::ClaimWords,
        Step::ClaimLease,
        Step::ReclaimLease,
        Step::ReclaimWords,
        Step::ReclaimHead,
        Step::ReclaimFree,
        Step::ExpireLease,
        Step::ExpireWords,
    ];

    /// The step's name, as `HG_CRASH_AT` spells it (`"acquire.bump"`).
    pub const fn name(self) -> &'static str {
        match self {
            Step::AcquireBump => "acquire.bump",
            Step::AcquireCheck => "acquire.check",
            Step::AcquireUndo => "acquire.undo",
            Step::ReleaseHeld => "release.held",
            Step::ReleaseCost => "release.cost",
            Step::PublishTicket => "publish.ticket",
            Step::PublishHead => "publish.head",
            Step::CancelUnpublish => "cancel.unpublish",
            Step::ClaimWords => "claim.words",
            Step::ClaimLease => "claim.lease",
            Step::ReclaimLease => "reclaim.lease",
            Step::ReclaimWords => "reclaim.words",
            Step::ReclaimHead => "reclaim.head",
            Step::ReclaimFree => "reclaim.free",
            Step::ExpireLease => "expire.lease",
            Step::ExpireWords => "expire.words",
        }
    }
}

/// The unwinding payload of a victim whose step budget ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crashed;

/// Called before each shared write of the protocol.
#[inline]
pub(crate) fn point(step: Step) {
    #[cfg(feature = "crash-hook")]
    hook::at(step);
    #[cfg(any(loom, test))]
    budget::tick(step);
    let _ = step;
}

#[cfg(feature = "crash-hook")]
mod hook {
    use std::sync::OnceLock;

    static CRASH_AT: OnceLock<(Option<String>, bool)> = OnceLock::new();

    pub(super) fn at(step: super::Step) {
        let (at, stop) = CRASH_AT.get_or_init(|| {
            (
                std::env::var("HG_CRASH_AT").ok(),
                std::env::var("HG_CRASH_MODE").as_deref() == Ok("stop"),
            )
        });
        if at.as_deref() == Some(step.name()) {
            if *stop {
                // SAFETY: raise() with a valid signal number; the process stops here, mid-step
                // (`HG_CRASH_MODE=stop`: a reaper frozen by SIGSTOP, `docker pause`, a debugger).
                unsafe {
                    libc::raise(libc::SIGSTOP);
                }
                return;
            }
            // SAFETY: abort() takes no arguments and never returns: the process dies as a
            // SIGKILLed one would, mid-step, with no unwinding and no destructors.
            unsafe { libc::abort() }
        }
    }
}

#[cfg(any(loom, test))]
mod budget {
    use core::cell::Cell;

    #[cfg(loom)]
    loom::thread_local! {
        // loom's thread_local! takes no `const { }` initializer.
        static LEFT: Cell<Option<usize>> = Cell::new(None);
    }
    #[cfg(not(loom))]
    std::thread_local! {
        static LEFT: Cell<Option<usize>> = const { Cell::new(None) };
    }

    pub(super) fn tick(_step: super::Step) {
        let crash = LEFT.with(|left| match left.get() {
            Some(0) => true,
            Some(n) => {
                left.set(Some(n - 1));
                false
            }
            None => false,
        });
        if crash {
            std::panic::panic_any(super::Crashed);
        }
    }

    pub(super) fn set(steps: Option<usize>) {
        LEFT.with(|left| left.set(steps));
    }
}

/// Runs `f` on this thread letting it pass only its first `steps` crash points: at the next one
/// it unwinds with [`Crashed`], as if the process died there. Returns `None` if it crashed.
/// (Test-only: loom models and unit tests.)
#[cfg(any(loom, test))]
pub fn with_budget<R>(steps: usize, f: impl FnOnce() -> R) -> Option<R> {
    budget::set(Some(steps));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    budget::set(None);
    match out {
        Ok(r) => Some(r),
        Err(payload) if payload.is::<Crashed>() => None,
        Err(payload) => std::panic::resume_unwind(payload),
    }
}
