//! # A firmware-style hullguard example
//!
//! `#![no_std]` and no allocator: a `static` [`Bulkhead`] with a const-capacity waiter ring
//! ([`Bulkhead::new_static`], hullguard-core with `default-features = false`), shared by a fixed
//! array of cooperative tasks that a round-robin main loop polls — the shape of a bare-metal
//! firmware with no RTOS. The tasks share one scarce resource (here, two concurrent radio
//! transfers) and use only the core's polling API:
//!
//! * [`Bulkhead::enqueue`]`(weight, None)` admits at once or queues and returns a [`Ticket`];
//! * [`Bulkhead::poll_ticket`]`(ticket, None)` says pending / granted / rejected;
//! * [`Bulkhead::cancel`]`(ticket, Reason::Timeout)` when the firmware's own tick deadline
//!   passes (the core owns no clock and no timer), [`Reason::Aborted`] when a task gives up;
//! * [`Bulkhead::release_units`] when the transfer is done.
//!
//! No waker is registered: the loop polls every waiting task once per turn. A real firmware
//! would sleep (`wfi`) when a turn made no progress and let the next interrupt start a turn.
//!
//! # Targets
//! `make firmware` builds this crate and the core for `thumbv7em-none-eabihf` (native CAS) and
//! for `thumbv6m-none-eabi` with the `critical-section` feature (no CAS: every atomic RMW is a
//! short interrupt-masked critical section). The final firmware binary must then provide a
//! `critical-section` implementation; this library does not pick one.
//!
//! # Example
//! ```
//! let report = hullguard_firmware_example::run_demo();
//! assert_eq!(report.done, hullguard_firmware_example::DEMO_TASKS);
//! assert!(report.peak_active <= 2);
//! ```

#![cfg_attr(not(test), no_std)]
#![warn(missing_docs)]

use core::time::Duration;

use hullguard_core::{Admission, Bulkhead, CancelError, Config, Reason, Ticket, TicketPoll};

/// Ring capacity of the demo bulkhead (a power of two, at least `max_queue`).
pub const RING: usize = 8;

/// The demo's shared resource: at most 2 concurrent radio transfers, up to 8 waiting tasks.
/// A bad configuration here is a compile-time error (`new_static` is `const`).
pub static RADIO: Bulkhead<RING> = Bulkhead::new_static(Config {
    max_concurrent: 2,
    max_queue: 8,
    // The firmware keeps its own deadlines (in ticks); the core's default is unused here.
    queue_timeout: Duration::MAX,
    enabled: true,
    ..Config::DEFAULT
});

/// What a task does: take `weight` permits, hold them for `work_ticks` turns, `repeat` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    /// Permits per transfer (1 ..= `max_concurrent`).
    pub weight: u64,
    /// Turns the transfer takes once admitted.
    pub work_ticks: u32,
    /// Transfers to complete.
    pub repeat: u32,
    /// Give up waiting after this many turns (`cancel(t, Reason::Timeout)`), then retry.
    pub timeout_ticks: Option<u32>,
    /// Abandon the job (`cancel(t, Reason::Aborted)`) after this many waiting turns in total.
    pub abort_after: Option<u32>,
}

impl Job {
    /// A job of `repeat` transfers of weight 1 taking `work_ticks` turns each.
    pub const fn new(work_ticks: u32, repeat: u32) -> Self {
        Job {
            weight: 1,
            work_ticks,
            repeat,
            timeout_ticks: None,
            abort_after: None,
        }
    }
}

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Wants a permit (enqueues on its next turn).
    Ready,
    /// Queued since turn `since`, arrival number `seq`.
    Waiting {
        ticket: Ticket,
        since: u32,
        seq: u32,
    },
    /// Holds its permits for `left` more turns.
    Running { left: u32 },
    /// Finished or abandoned.
    Done,
}

/// One cooperative task.
#[derive(Debug, Clone, Copy)]
pub struct Task {
    job: Job,
    state: State,
    completed: u32,
    waited: u32,
}

impl Task {
    /// A task that will run `job`.
    pub const fn new(job: Job) -> Self {
        Task {
            job,
            state: State::Ready,
            completed: 0,
            waited: 0,
        }
    }

    /// Transfers completed so far.
    pub fn completed(&self) -> u32 {
        self.completed
    }

    /// Whether the task finished (or gave up).
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }
}

/// Counters of one run (no allocation: fixed arrays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// Turns the loop ran.
    pub turns: u32,
    /// Tasks finished.
    pub done: usize,
    /// Transfers completed.
    pub transfers: u32,
    /// Grants at once (`Admission::Granted`).
    pub granted_at_once: u32,
    /// Grants after queueing (`TicketPoll::Granted`).
    pub granted_queued: u32,
    /// Queued acquires the firmware timed out (`cancel(_, Timeout)` won).
    pub timeouts: u32,
    /// Queued acquires a task abandoned (`cancel(_, Aborted)` won).
    pub aborts: u32,
    /// Admissions refused at once (`queue_limit` / `concurrency_limit`): retried next turn.
    pub refused: u32,
    /// The most permits held at once (sampled every turn).
    pub peak_active: u64,
    /// Whether every queued grant came in arrival order (FIFO, docs/design.md §3 I6).
    pub fifo: bool,
}

/// Why [`Scheduler::run`] stopped without finishing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stuck {
    /// The counters so far.
    pub report: Report,
}

/// A fixed array of `T` tasks polled round-robin, sharing one bulkhead.
#[derive(Debug)]
pub struct Scheduler<'a, const N: usize, const T: usize> {
    bh: &'a Bulkhead<N>,
    tasks: [Task; T],
    turn: u32,
    next_seq: u32,
    /// Arrival number of the last queued acquire granted (FIFO check).
    last_granted_seq: Option<u32>,
    report: Report,
}

impl<'a, const N: usize, const T: usize> Scheduler<'a, N, T> {
    /// A scheduler for `tasks` on `bh`.
    pub const fn new(bh: &'a Bulkhead<N>, tasks: [Task; T]) -> Self {
        Scheduler {
            bh,
            tasks,
            turn: 0,
            next_seq: 0,
            last_granted_seq: None,
            report: Report {
                turns: 0,
                done: 0,
                transfers: 0,
                granted_at_once: 0,
                granted_queued: 0,
                timeouts: 0,
                aborts: 0,
                refused: 0,
                peak_active: 0,
                fifo: true,
            },
        }
    }

    /// The tasks.
    pub fn tasks(&self) -> &[Task; T] {
        &self.tasks
    }

    /// One turn: every task is polled once, in order. Returns whether any task is unfinished.
    pub fn turn(&mut self) -> bool {
        for i in 0..T {
            self.poll_task(i);
        }
        self.turn += 1;
        self.report.turns = self.turn;
        let active = self.bh.stats().active;
        self.report.peak_active = self.report.peak_active.max(active);
        self.tasks.iter().any(|t| !t.is_done())
    }

    /// Runs turns until every task is done, or `max_turns` pass.
    ///
    /// # Errors
    /// [`Stuck`] with the counters so far if tasks are left after `max_turns`.
    pub fn run(&mut self, max_turns: u32) -> Result<Report, Stuck> {
        while self.turn < max_turns {
            if !self.turn() {
                self.report.done = T;
                return Ok(self.report);
            }
        }
        self.report.done = self.tasks.iter().filter(|t| t.is_done()).count();
        Err(Stuck {
            report: self.report,
        })
    }

    fn poll_task(&mut self, i: usize) {
        let bh = self.bh;
        let turn = self.turn;
        let job = self.tasks[i].job;
        match self.tasks[i].state {
            State::Done => {}
            State::Ready => match bh.enqueue(job.weight, None) {
                Ok(Admission::Granted) => {
                    self.report.granted_at_once += 1;
                    self.tasks[i].state = State::Running {
                        left: job.work_ticks,
                    };
                }
                Ok(Admission::Queued(ticket)) => {
                    let seq = self.next_seq;
                    self.next_seq += 1;
                    self.tasks[i].state = State::Waiting {
                        ticket,
                        since: turn,
                        seq,
                    };
                }
                Err(e) => match e.reason() {
                    // Full right now: try again next turn.
                    Some(Reason::QueueLimit | Reason::ConcurrencyLimit) => self.report.refused += 1,
                    // Closed, or a bad weight: this job cannot run.
                    _ => self.tasks[i].state = State::Done,
                },
            },
            State::Waiting { ticket, since, seq } => {
                self.tasks[i].waited += 1;
                match bh.poll_ticket(ticket, None) {
                    Ok(TicketPoll::Pending) => {
                        let waited = turn - since;
                        let abandon = job.abort_after.is_some_and(|n| self.tasks[i].waited >= n);
                        let expired = job.timeout_ticks.is_some_and(|n| waited >= n);
                        if abandon || expired {
                            let reason = if abandon {
                                Reason::Aborted
                            } else {
                                Reason::Timeout
                            };
                            self.give_up(i, ticket, seq, reason, abandon);
                        }
                    }
                    Ok(TicketPoll::Granted(_)) => self.granted(i, seq),
                    Ok(TicketPoll::Rejected(_)) | Err(_) => self.tasks[i].state = State::Done,
                }
            }
            State::Running { left } => {
                if left > 1 {
                    self.tasks[i].state = State::Running { left: left - 1 };
                } else {
                    bh.release_units(job.weight);
                    let t = &mut self.tasks[i];
                    t.completed += 1;
                    self.report.transfers += 1;
                    t.state = if t.completed == job.repeat {
                        State::Done
                    } else {
                        State::Ready
                    };
                }
            }
        }
    }

    fn granted(&mut self, i: usize, seq: u32) {
        self.report.granted_queued += 1;
        if self.last_granted_seq.is_some_and(|last| seq < last) {
            self.report.fifo = false;
        }
        self.last_granted_seq = Some(seq);
        self.tasks[i].state = State::Running {
            left: self.tasks[i].job.work_ticks,
        };
    }

    /// The firmware's deadline passed (`Timeout`) or the task gives up (`Aborted`). The cancel
    /// races a grant made by another task's release in the same turn: exactly one wins (I7).
    fn give_up(&mut self, i: usize, ticket: Ticket, seq: u32, reason: Reason, abandon: bool) {
        match self.bh.cancel(ticket, reason) {
            Ok(()) => {
                if abandon {
                    self.report.aborts += 1;
                    self.tasks[i].state = State::Done;
                } else {
                    self.report.timeouts += 1;
                    self.tasks[i].state = State::Ready; // retry on the next turn
                }
            }
            // The grant won: consume it and run (the permits are ours).
            Err(CancelError::Granted) => {
                if let Ok(TicketPoll::Granted(_)) = self.bh.poll_ticket(ticket, None) {
                    self.granted(i, seq);
                }
            }
            Err(_) => self.tasks[i].state = State::Done,
        }
    }
}

/// Tasks of [`run_demo`].
pub const DEMO_TASKS: usize = 6;

/// The demo: six tasks share [`RADIO`] (2 concurrent transfers); one has a short deadline and
/// retries after each timeout. Runs to completion and returns the counters.
///
/// # Panics
/// If the demo does not finish within 10 000 turns (it finishes in well under 100).
pub fn run_demo() -> Report {
    let short = Job {
        timeout_ticks: Some(2),
        ..Job::new(1, 2)
    };
    let tasks = [
        Task::new(Job::new(3, 2)),
        Task::new(Job::new(2, 3)),
        Task::new(short),
        Task::new(Job::new(1, 4)),
        Task::new(Job::new(4, 1)),
        Task::new(Job::new(2, 2)),
    ];
    let mut s = Scheduler::new(&RADIO, tasks);
    match s.run(10_000) {
        Ok(r) => r,
        Err(_) => panic!("the demo did not finish"),
    }
}

#[cfg(test)]
mod tests {
    use hullguard_core::Stats;

    use super::*;

    const fn cfg(max_concurrent: u64, max_queue: u64) -> Config {
        Config {
            max_concurrent,
            max_queue,
            queue_timeout: Duration::MAX,
            enabled: true,
            ..Config::DEFAULT
        }
    }

    /// Conservation at the end (I2, I5): everything returned, nothing queued or unclaimed.
    fn assert_quiescent(s: &Stats) {
        assert_eq!(s.active, 0, "{s:?}");
        assert_eq!(s.queued, 0, "{s:?}");
        assert_eq!(s.granted_unclaimed, 0, "{s:?}");
        assert_eq!(s.available, s.limit as i64, "{s:?}");
    }

    #[test]
    fn demo_runs_to_completion_on_the_static_bulkhead() {
        let r = run_demo();
        assert_eq!(r.done, DEMO_TASKS);
        assert_eq!(r.transfers, 2 + 3 + 2 + 4 + 1 + 2);
        assert!(r.peak_active <= 2 && r.peak_active >= 1);
        assert!(r.fifo);
        let s = RADIO.stats();
        assert_quiescent(&s);
        assert_eq!(
            s.admitted_total,
            u64::from(r.granted_at_once + r.granted_queued)
        );
        assert_eq!(s.admitted_total, u64::from(r.transfers));
        assert_eq!(
            s.rejected_by_reason.get(Reason::Timeout),
            u64::from(r.timeouts)
        );
    }

    #[test]
    fn all_done_fifo_and_bounded() {
        static BH: Bulkhead<16> = Bulkhead::new_static(cfg(3, 16));
        let tasks = [Task::new(Job::new(5, 3)); 12];
        let mut s = Scheduler::new(&BH, tasks);
        let r = s.run(10_000).unwrap();
        assert_eq!(r.done, 12);
        assert!(s.tasks().iter().all(|t| t.completed() == 3));
        assert_eq!(r.transfers, 36);
        assert!(r.fifo, "queued grants out of arrival order");
        assert_eq!(r.peak_active, 3); // I1: never above the limit, and the limit is used
        assert!(r.granted_queued > 0);
        let st = BH.stats();
        assert_quiescent(&st);
        assert_eq!(st.admitted_total, 36);
        assert_eq!(st.queue_wait_count, 0); // no clock in a bare no_std build
    }

    #[test]
    fn weighted_head_of_line_blocks_lighter_waiters() {
        static BH: Bulkhead<8> = Bulkhead::new_static(cfg(4, 8));
        let heavy = Job {
            weight: 4,
            ..Job::new(2, 2)
        };
        let tasks = [
            Task::new(Job::new(3, 1)),
            Task::new(heavy),
            Task::new(Job::new(1, 3)),
            Task::new(Job::new(1, 3)),
        ];
        let mut s = Scheduler::new(&BH, tasks);
        let r = s.run(1_000).unwrap();
        assert!(r.fifo);
        assert!(r.peak_active <= 4);
        assert_quiescent(&BH.stats());
    }

    #[test]
    fn firmware_deadlines_time_out_and_retry() {
        static BH: Bulkhead<4> = Bulkhead::new_static(cfg(1, 4));
        let impatient = Job {
            timeout_ticks: Some(1),
            ..Job::new(1, 1)
        };
        // A long holder first: the impatient task times out (cancel Timeout) and retries until
        // the holder is done.
        let tasks = [Task::new(Job::new(6, 1)), Task::new(impatient)];
        let mut s = Scheduler::new(&BH, tasks);
        let r = s.run(1_000).unwrap();
        assert!(r.timeouts >= 2, "{r:?}");
        assert_eq!(r.transfers, 2);
        let st = BH.stats();
        assert_quiescent(&st);
        assert_eq!(
            st.rejected_by_reason.get(Reason::Timeout),
            u64::from(r.timeouts)
        );
    }

    #[test]
    fn an_abandoned_wait_is_cancelled_and_passes_the_turn() {
        static BH: Bulkhead<4> = Bulkhead::new_static(cfg(1, 4));
        let quitter = Job {
            abort_after: Some(2),
            ..Job::new(1, 1)
        };
        let tasks = [
            Task::new(Job::new(5, 1)),
            Task::new(quitter),
            Task::new(Job::new(1, 1)),
        ];
        let mut s = Scheduler::new(&BH, tasks);
        let r = s.run(1_000).unwrap();
        assert_eq!(r.aborts, 1);
        assert_eq!(r.transfers, 2);
        assert!(r.fifo);
        let st = BH.stats();
        assert_quiescent(&st);
        assert_eq!(st.rejected_by_reason.get(Reason::Aborted), 1);
    }

    #[test]
    fn a_full_queue_refuses_and_the_task_retries() {
        // max_queue 1: the third task finds the queue full (queue_limit) and retries.
        static BH: Bulkhead<2> = Bulkhead::new_static(cfg(1, 1));
        let tasks = [Task::new(Job::new(3, 1)); 3];
        let mut s = Scheduler::new(&BH, tasks);
        let r = s.run(1_000).unwrap();
        assert!(r.refused > 0);
        assert_eq!(r.transfers, 3);
        let st = BH.stats();
        assert_quiescent(&st);
        assert_eq!(
            st.rejected_by_reason.get(Reason::QueueLimit),
            u64::from(r.refused)
        );
    }

    #[test]
    fn a_closed_bulkhead_ends_the_jobs() {
        static BH: Bulkhead<4> = Bulkhead::new_static(cfg(1, 4));
        BH.close();
        let mut s = Scheduler::new(&BH, [Task::new(Job::new(1, 1)); 2]);
        let r = s.run(10).unwrap();
        assert_eq!(r.transfers, 0);
        assert_eq!(BH.stats().rejected_by_reason.get(Reason::Shutdown), 2);
    }

    #[test]
    fn a_bad_static_config_is_an_error_value() {
        assert!(Bulkhead::<4>::try_new_static(cfg(1, 5)).is_err());
        assert!(Bulkhead::<4>::try_new_static(cfg(0, 1)).is_err());
    }
}
