//! The engine's steps on a classed bulkhead (docs/design.md §4.8): every admission goes through
//! the ring and the dispatcher, whose run flag is the one serialization point of a decision
//! over the class counts, the shared pool and the permit word.
//!
//! * **No-wait** (`try_acquire`, a request with a zero queue timeout, and the first step of
//!   every queueing request): the request claims a cell without a live place (the ring's
//!   slack), publishes it marked no-wait and runs the dispatcher; the pass that threads it
//!   grants it (in the dispatch order, after every older head) or refuses it with the reason
//!   of the dimension that held it back. Its caller waits for that pass — its own, or the one
//!   the running dispatcher owes it — so on a classed bulkhead a no-wait decision may wait for
//!   another thread's pass in progress (a bounded step that runs no user code: wakers run after
//!   the run flag is given up), the one place the core waits for a peer.
//! * **Queueing**: as on a plain bulkhead after a refused no-wait step (a live place, a cell,
//!   the publish), plus the cell's class.
//! * **A pass** threads newly published cells onto their classes' lists (moving the ring's
//!   head past them), then grants heads in the dispatch order of [`classes`](super::classes)
//!   until none fits, then refuses the no-wait entries left.

use super::{
    CallWord, Engine, Polled, Ticket,
    cell::{COST_NOWAIT, Kind, Stamp, cost_of, is_nowait},
    classes::{ClassBook, Head, Lists, Verdict},
    dispatch::WakeBatch,
    permit_word::{CLOSED, Reserve, TakeError},
};
use crate::{
    reason::Reason,
    sync::{Ordering::*, Word},
};

/// The dispatcher's run flag held by a caller that is not a pass (see
/// [`Engine::hold_dispatch`]).
pub(crate) struct DispatchHold<'a, const N: usize>(Option<&'a Engine<N>>);

impl<const N: usize> Drop for DispatchHold<'_, N> {
    fn drop(&mut self) {
        if let Some(e) = self.0 {
            e.leave_as_runner();
        }
    }
}

/// The take error of a pass's refusal reason.
const fn take_error(reason: Reason) -> TakeError {
    match reason {
        Reason::Shutdown => TakeError::Closed,
        Reason::BudgetLimit => TakeError::Budget,
        Reason::RateLimit => TakeError::Rate,
        _ => TakeError::Busy,
    }
}

/// Whether ticket `a` was taken before ticket `b` (tickets wrap; live ones are within one
/// ring's span of each other).
#[inline]
const fn older(a: Word, b: Word) -> bool {
    b.wrapping_sub(a) <= Word::MAX / 2 && a != b
}

/// The reason a verdict refuses a no-wait request with (a head that fits but waits behind
/// older heads is refused as a plain bulkhead refuses a barger: `concurrency_limit`).
const fn verdict_reason(v: Verdict) -> Reason {
    match v {
        Verdict::Ceiling(1) | Verdict::Pool(1) => Reason::BudgetLimit,
        _ => Reason::ConcurrencyLimit,
    }
}

/// How far a pass threaded the ring.
enum Threaded {
    /// To the tail.
    All,
    /// To a cell claimed but not published yet (its enqueuer dispatches after publishing).
    Claimed,
    /// The wake batch filled (a shed's victim): wake, then pass again.
    Full,
}

/// What granting one head did.
enum Grant {
    /// Granted (or lost to a cancel): look again.
    Done,
    /// The permit word is short (a shrink, observed holders): the pass stops.
    Blocked,
    /// A rate holds the head back: the pass stops (no barging past it, floors included).
    RateHeld,
}

impl<const N: usize> Engine<N> {
    /// The class book, if this bulkhead has classes.
    #[inline]
    pub(crate) fn classes(&self) -> Option<&ClassBook> {
        self.classes.as_deref()
    }

    /// Why `w` permits and `c` units of class `class` can never be granted now: the limits'
    /// rule ([`never_fits`](Self::never_fits)) or the class's ceilings.
    #[inline(always)]
    pub(crate) fn classed_never_fits(
        &self,
        book: &ClassBook,
        w: Word,
        c: Word,
        class: u16,
    ) -> Option<Reason> {
        if let Some(r) = self.never_fits(w, c, 0) {
            return Some(r);
        }
        if book.rate_never(c) {
            return Some(Reason::RateLimit);
        }
        let r = book.rank(class);
        let rank = &book.ranks[r];
        if w > rank.ceiling(0) && !book.observes(r, 0) {
            Some(Reason::ConcurrencyLimit)
        } else if c > rank.ceiling(1) && !book.observes(r, 1) {
            Some(Reason::BudgetLimit)
        } else {
            None
        }
    }

    /// The no-wait decision of a classed bulkhead (see the module docs); `TAKE == false` is
    /// the dry run's read-only estimate from the counts of this moment. Not counted here (the
    /// caller counts, as for the fast path).
    #[cold]
    #[inline(never)]
    pub(crate) fn classed_take<const TAKE: bool>(
        &self,
        w: Word,
        c: Word,
        class: u16,
    ) -> Result<Word, TakeError> {
        let Some(book) = self.classes() else {
            return Err(TakeError::Busy);
        };
        if self.is_closed() {
            return Err(TakeError::Closed);
        }
        if let Some(r) = self.classed_never_fits(book, w, c, class) {
            return Err(take_error(r));
        }
        if !TAKE {
            return self.classed_estimate(book, w, c, class);
        }
        let r = book.rank(class);
        // The fast path: wholly inside the class's untouched floor, nobody of its class queued
        // (SeqCst: with `entered`), one CAS of the class's hold, then the permit word (which
        // refuses only past the limit: a shrink's attrition, the kill switch).
        if c == 0
            && !book.has_rates()
            && book.floor_path_open(r)
            && book.ranks[r].queued.load(SeqCst) == 0
            && book.try_floor(r, w)
        {
            match self.permits.reserve_for_head(w, 0) {
                Reserve::Reserved => return Ok(0),
                Reserve::Closed => {
                    book.give(r, [w, 0]);
                    return Err(TakeError::Closed);
                }
                // Over the limit: the pass decides (and refuses).
                Reserve::Blocked => book.give(r, [w, 0]),
            }
        }
        let Ok(t) = self.ring.claim_nowait() else {
            // Every cell holds a waiter or an untaken result: let the head follow the tail.
            self.run_dispatcher();
            return Err(TakeError::Busy);
        };
        self.write_cell(t, w, c | COST_NOWAIT, None, CallWord::default());
        book.set_cell_class(self.ring.index(t), class, true);
        book.entered(r, false);
        self.ring.publish(t);
        self.run_dispatcher();
        let answer = loop {
            // Settled first (then it stays so: only this caller consumes it), so a grant's
            // observed-ceiling bits are read while the cell is still this request's.
            let past = match self.ring.stamp_of(t) {
                Some((_, s)) if s.kind() == Kind::Waiting => {
                    crate::sync::spin_wait();
                    self.run_dispatcher();
                    continue;
                }
                Some((_, s)) if s.kind() == Kind::Granted => self.ring.cell(t).bypass.load(Relaxed),
                _ => 0,
            };
            match self.poll_as(Ticket(t), None, false, true) {
                Ok(Polled::Pending) => {
                    // Never wait for another thread's wakers: run the pass owed to this cell
                    // as soon as the run flag is free (or leave it pending for the runner).
                    crate::sync::spin_wait();
                    self.run_dispatcher();
                }
                Ok(Polled::Granted { .. }) => break Ok(past),
                Ok(Polled::Rejected { rejection, .. }) => break Err(take_error(rejection.reason)),
                // Nobody else holds this ticket.
                Err(_) => break Err(TakeError::Busy),
            }
        };
        book.left(r, false);
        answer
    }

    /// A classed bulkhead's refusal of `w` permits and `c` units of class `class` names the
    /// class and what held it back (docs/design.md §5.7), and a `rate_limit` refusal says how
    /// long until the request would conform (§4.9); a no-op on a plain bulkhead or for a
    /// reason that is not a class's (`shutdown`, …).
    pub(crate) fn name_class(
        &self,
        r: &mut crate::reason::Rejection,
        w: Word,
        c: Word,
        class: u16,
    ) {
        use crate::reason::{Bound, ClassRefusal};
        let Some(book) = self.classes() else {
            return;
        };
        if r.reason == Reason::RateLimit {
            // Refused because it did not conform: at least 1 ns, even if it does by now.
            r.retry_after_ns = match self.rate_wait_ns(c) {
                Some(u64::MAX) | None => 0,
                Some(ns) => ns.max(1),
            };
            return;
        }
        if !matches!(
            r.reason,
            Reason::ConcurrencyLimit | Reason::BudgetLimit | Reason::QueueLimit
        ) || class as usize >= book.len()
        {
            return;
        }
        let rank = book.rank(class);
        let limits = [self.limit.load(Acquire), self.budget.limit.load(Acquire)];
        let (bound, d) = match book.verdict(rank, [w, c], limits) {
            _ if r.reason == Reason::QueueLimit => (Bound::Queue, 0),
            Verdict::Ceiling(d) => (Bound::Class, d),
            Verdict::Pool(d) if book.only_reserve_left(rank, d, limits[d]) => (Bound::Reserve, d),
            Verdict::Pool(d) => (Bound::Shared, d),
            _ => (Bound::Limit, usize::from(r.reason == Reason::BudgetLimit)),
        };
        r.class = Some(ClassRefusal {
            class,
            bound,
            dimension: d as u8,
        });
    }

    /// A request of class `class` asking `w` and `c` was refused for good (not a queueing
    /// request's first step): if its class's observed ceilings would have refused it too, the
    /// class counts it (docs/design.md §4.8, C32 step 3).
    pub(crate) fn count_class_refusal(&self, w: Word, c: Word, class: u16) {
        if let Some(book) = self.classes() {
            let r = book.rank(class);
            if book.past_observed_ceiling(r, [w, c]) {
                book.count_observed(r);
            }
        }
    }

    /// With rates: how long (ns on the bulkhead's clock) until one request of `c` units would
    /// conform if nobody were granted before it — 0 if it conforms now, `u64::MAX` never
    /// (above a burst); `None` without rates. A lower bound for a waiter (those ahead of it
    /// are charged first; a TAT only grows), so a deadline it passes cannot be met.
    pub(crate) fn rate_wait_ns(&self, c: Word) -> Option<u64> {
        let book = self.classes().filter(|b| b.has_rates())?;
        let now = self.clock.now_ns();
        Some(match book.rate_check(c, now) {
            Ok(_) => 0,
            Err(u64::MAX) => u64::MAX,
            Err(at) => at.saturating_sub(now),
        })
    }

    /// The dry run's answer on a classed bulkhead (docs/design.md §5.6): what the pass would
    /// decide for a no-wait entry of class `class` threaded now at its class's tail. The dry
    /// run brings the lists up to date (a dispatcher run: cells published before it are
    /// threaded and what fits is granted, as it is owed anyway), then holds the run flag while
    /// it reads them — waiting for a peer's pass in progress as a no-wait admission does
    /// (§4.8) — and gives the flag back as a runner does. Nothing of its own is taken, queued
    /// or counted.
    fn classed_estimate(
        &self,
        book: &ClassBook,
        w: Word,
        c: Word,
        class: u16,
    ) -> Result<Word, TakeError> {
        // Cells claimed but not yet published keep the head behind the tail for one protocol
        // step of their enqueuer: a bounded number of tries, then the lists as they are.
        let mut tries = 0;
        loop {
            self.run_dispatcher();
            if self.dispatch.try_enter_idle() {
                tries += 1;
                if self.ring.head() == self.ring.tail() || tries >= 64 {
                    break;
                }
                self.leave_as_runner();
            }
            crate::sync::spin_wait();
        }
        // SAFETY: this thread holds the run flag.
        let answer = unsafe { book.with_lists(|lists| self.estimate_in(book, lists, w, c, class)) };
        self.leave_as_runner();
        answer
    }

    /// Takes the dispatcher's run flag on a classed bulkhead (nothing on a plain one, which
    /// has no pass to keep out): waits for a peer's pass in progress, as a no-wait admission
    /// does. The passes asked for while it is held are left pending; dropping the hold gives
    /// the flag back and runs them (also when unwinding, so a panic never leaves it held).
    pub(crate) fn hold_dispatch(&self) -> DispatchHold<'_, N> {
        if self.classes().is_none() {
            return DispatchHold(None);
        }
        while !self.dispatch.try_enter_idle() {
            crate::sync::spin_wait();
        }
        DispatchHold(Some(self))
    }

    /// Installs rate settings `params` (`(t, tau)` per rate; docs/design.md §4.9). The caller
    /// holds the run flag ([`hold_dispatch`](Self::hold_dispatch)), so no pass decides with
    /// half of a change; its pass when it gives the flag back lets a looser rate's held heads
    /// go.
    pub(crate) fn install_rate_params(&self, params: [(u64, u64); 2]) {
        if let Some(book) = self.classes() {
            book.set_rate_params(params);
            // The held head's conforming time is the next pass's to say.
            book.set_retry_at(0);
        }
    }

    /// Installs queue-delay options `q` (docs/design.md §4.10) under the run flag; CoDel's
    /// state starts over.
    pub(crate) fn install_queue_delay(&self, q: crate::config::QueueDelay) {
        let Some(book) = self.classes() else {
            return;
        };
        let hold = self.hold_dispatch();
        let params = super::queue_delay::QueueDelayParams::of(&q);
        // SAFETY: `hold` holds the run flag.
        unsafe { book.with_lists(|lists| lists.codel = super::queue_delay::CoDel::new(params)) };
        drop(hold);
    }

    /// Gives the run flag up as a runner does: a request left pending meanwhile is served.
    fn leave_as_runner(&self) {
        if !self.dispatch.try_leave() {
            self.dispatch.leave();
            self.run_dispatcher();
        }
    }

    /// [`classed_estimate`](Self::classed_estimate)'s reading of the lists (run flag held):
    /// the dispatch order of [`grant_heads`](Self::grant_heads) for a new tail entry, and the
    /// refusal reason of [`refuse_nowait`](Self::refuse_nowait) when it would not be granted.
    fn estimate_in(
        &self,
        book: &ClassBook,
        lists: &mut Lists,
        w: Word,
        c: Word,
        class: u16,
    ) -> Result<Word, TakeError> {
        let r = book.rank(class);
        let limits = [self.limit.load(Acquire), self.budget.limit.load(Acquire)];
        let verdict = book.verdict(r, [w, c], limits);
        let granted = match verdict {
            Verdict::Ceiling(_) | Verdict::Pool(_) => false,
            // FIFO within its class: an older waiter of its class is served first.
            _ if self.listed_head(book, lists, r).is_some() => false,
            Verdict::Floor => !self.floor_held_back(book, lists, r, limits),
            Verdict::Shared => !self.shared_held_back(book, lists, r, limits),
        } && (!book.has_rates() || book.rate_check(c, self.clock.now_ns()).is_ok())
            && self.permits.short(self.permits.load(), w, c).is_none();
        if granted {
            Ok(0)
        } else {
            Err(take_error(self.nowait_reason(book, r, w, c, limits)))
        }
    }

    /// The reason a pass refuses a no-wait entry of rank `r` asking `w` and `c` that no grant
    /// reached: the rate if it does not conform now, else what its verdict says (a request
    /// that would fit but waits behind older heads: `concurrency_limit`, as a plain barger).
    fn nowait_reason(
        &self,
        book: &ClassBook,
        r: usize,
        w: Word,
        c: Word,
        limits: [Word; 2],
    ) -> Reason {
        if book.has_rates() && book.rate_check(c, self.clock.now_ns()).is_err() {
            Reason::RateLimit
        } else {
            verdict_reason(book.verdict(r, [w, c], limits))
        }
    }

    /// Rank `r`'s first live entry, taking stale ones off its list (run flag held).
    fn listed_head(&self, book: &ClassBook, lists: &mut Lists, r: usize) -> Option<Head> {
        let _ = book;
        loop {
            let head = lists.head(r)?;
            // Acquire: as in `thread`.
            let s = Stamp(self.ring.cell(head.ticket).stamp.load(Acquire));
            if s.identity() == self.ring.lap(head.ticket) && s.kind() == Kind::Waiting {
                return Some(head);
            }
            lists.unlink(head.cell);
        }
    }

    /// Whether a head of a higher rank keeps a new floor take of rank `r` waiting (run flag
    /// held): the pass picks floor heads in rank order, and one a rate holds back stops it
    /// (one the limit holds back does not).
    fn floor_held_back(
        &self,
        book: &ClassBook,
        lists: &mut Lists,
        r: usize,
        limits: [Word; 2],
    ) -> bool {
        if !book.has_rates() {
            return false;
        }
        let mut mask = lists.nonempty() & ((1u64 << r) - 1);
        while mask != 0 {
            let o = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let Some(head) = self.listed_head(book, lists, o) else {
                continue;
            };
            let (hw, hc) = self.cell_ask(head.ticket);
            if !head.nowait
                && book.verdict(o, [hw, hc], limits) == Verdict::Floor
                && book.rate_check(hc, self.clock.now_ns()).is_err()
            {
                return true;
            }
        }
        false
    }

    /// Whether a head of another rank keeps a new shared take of rank `r` waiting (run flag
    /// held): one of equal or higher priority that is not held back only by its own ceiling
    /// (older within a priority, or served first across priorities), or a floor head the
    /// limit holds back (it stops every shared take). Heads the pass would refuse (`close`,
    /// a shrink below them) hold nobody back.
    fn shared_held_back(
        &self,
        book: &ClassBook,
        lists: &mut Lists,
        r: usize,
        limits: [Word; 2],
    ) -> bool {
        let p = book.ranks[r].priority;
        let mut mask = lists.nonempty() & !(1u64 << r);
        while mask != 0 {
            let o = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let Some(head) = self.listed_head(book, lists, o) else {
                continue;
            };
            if head.nowait {
                continue;
            }
            let (hw, hc) = self.cell_ask(head.ticket);
            if self
                .classed_never_fits(book, hw, hc, book.ranks[o].index)
                .is_some()
            {
                continue;
            }
            match book.verdict(o, [hw, hc], limits) {
                Verdict::Ceiling(_) => {}
                Verdict::Floor => return true,
                Verdict::Shared | Verdict::Pool(_) if book.ranks[o].priority >= p => return true,
                Verdict::Shared | Verdict::Pool(_) => {}
            }
        }
        false
    }

    /// A queueing waiter's cell records its class (before its publish).
    pub(crate) fn classed_enqueued(&self, t: Word, class: u16) {
        if let Some(book) = self.classes() {
            if book.shed {
                // No victim for a plain waiter (an earlier shedding occupant's, unread, goes).
                book.set_victim(self.ring.index(t), None);
            }
            book.set_cell_class(self.ring.index(t), class, false);
            book.entered(book.rank(class), true);
        }
    }

    /// The rank of the occupant of ticket `t`'s cell (read while its stamp is still `t`'s:
    /// once settled and polled, the cell may hold another class's waiter).
    pub(crate) fn rank_of_ticket(&self, t: Word) -> Option<usize> {
        self.classes()
            .map(|b| b.rank(b.cell_class(self.ring.index(t))))
    }

    /// A queued waiter of rank `rank` left (settled or cancelled).
    pub(crate) fn classed_left(&self, rank: Option<usize>) {
        if let (Some(book), Some(r)) = (self.classes(), rank) {
            book.left(r, true);
        }
    }

    /// An arrival at a full queue of a shedding classed bulkhead (`cost_word`: its cost and
    /// observe bits): it claims a cell without a live place (the ring's slack), marked
    /// shedding, and waits for the pass that threads it. That pass evicts the youngest waiter
    /// of the lowest priority below the arrival's — rejected `shed`, its live place passing to
    /// the arrival — or refuses the arrival `queue_limit` (counted here).
    pub(crate) fn classed_shed(
        &self,
        w: Word,
        cost_word: Word,
        waker: Option<&core::task::Waker>,
        call: CallWord,
        class: u16,
    ) -> Result<super::Admitted, crate::reason::Rejection> {
        let Some(book) = self.classes() else {
            return Err(self.reject(Reason::QueueLimit));
        };
        let r = book.rank(class);
        // Decided by the pass, not here: a victim or a place may come or go meanwhile, and the
        // pass sees both at one moment (a cancel that frees a place lets the arrival in).
        let Ok(t) = self.ring.claim_nowait() else {
            self.run_dispatcher();
            return Err(self.reject(Reason::QueueLimit));
        };
        let i = self.ring.index(t);
        self.write_cell(t, w, cost_word | COST_NOWAIT, waker, call);
        book.set_cell_shed(i, class);
        book.entered(r, false);
        self.ring.publish(t);
        self.run_dispatcher();
        loop {
            // The stamp first, then the mark: a pass marks the arrival won *before* any settle
            // of its cell (a grant, or a refusal as a waiter), so a settled stamp seen here
            // shows the mark too if it was won (a review found an arrival consuming its own
            // grant when the mark was read first).
            let settled =
                !matches!(self.ring.stamp_of(t), Some((_, s)) if s.kind() == Kind::Waiting);
            if book.has_won(i) {
                // A waiter now, counted as one (its class's `queued`, `live`): its handle
                // takes whatever the pass decided since.
                return Ok(super::Admitted::Queued(Ticket(t)));
            }
            if settled {
                // Refused as an arrival (`queue_limit`): consume and refuse.
                let _ = self.poll_as(Ticket(t), None, false, true);
                book.left(r, false);
                return Err(self.reject(Reason::QueueLimit));
            }
            crate::sync::spin_wait();
            self.run_dispatcher();
        }
    }

    /// The victim a shedding arrival queued as ticket `t` evicted (its admission id and class),
    /// if it evicted one; read once, by the arrival's owner right after it queued.
    pub(crate) fn shed_victim(&self, t: Word) -> Option<(u64, u16)> {
        let book = self.classes().filter(|b| b.shed)?;
        book.take_victim(self.ring.index(t))
            .map(|(id, class)| (id as u64, class))
    }

    /// The pass meets a shedding arrival (`h`, waiting as `s`, rank `r`): evicts the youngest
    /// waiter of the lowest priority below its own (rejected `shed`, counted; its place and
    /// its queued cost pass to the arrival) and makes the arrival a waiter, or refuses it
    /// `queue_limit`. Returns whether it is a waiter now.
    fn shed_for(
        &self,
        book: &ClassBook,
        lists: &mut Lists,
        h: Word,
        s: Stamp,
        r: usize,
        batch: &mut WakeBatch,
    ) -> bool {
        let cell = self.ring.cell(h);
        let word = cell.cost.load(Relaxed);
        let into = cost_of(word);
        let p = book.ranks[r].priority;
        for vr in (r + 1..book.len()).rev() {
            if book.ranks[vr].priority >= p {
                break;
            }
            let mut at = lists.tail(vr);
            while let Some(v) = at {
                at = lists.before(v.cell);
                let vcell = self.ring.cell(v.ticket);
                // Acquire: as in `thread`.
                let vs = Stamp(vcell.stamp.load(Acquire));
                if vs.identity() != self.ring.lap(v.ticket) || vs.kind() != Kind::Waiting {
                    lists.unlink(v.cell);
                    continue;
                }
                if v.nowait {
                    continue;
                }
                let out = cost_of(vcell.cost.load(Relaxed));
                // The victim's admission id, for the arrival's `shed` event (Relaxed: ordered
                // by the stamp's Acquire; read before the settle, after which the cell may be
                // reused).
                let victim = (vcell.tag.load(Relaxed), book.ranks[vr].index);
                // The arrival's extra cost first, within `max_queued_cost` (one CAS).
                if into > out && !self.ring.reserve_cost(into - out) {
                    continue;
                }
                if self
                    .ring
                    .settle_transfer(vcell, vs, Kind::Rejected(Reason::Shed))
                    .is_err()
                {
                    // Cancelled or expired first: the next look unlinks it.
                    if into > out {
                        self.ring.release_cost(into - out);
                    }
                    continue;
                }
                if out > into {
                    self.ring.release_cost(out - into);
                }
                self.counters.reject(Reason::Shed);
                // The victim's class, by its rank (its cell may be reused once it is polled).
                book.left(vr, true);
                lists.unlink(v.cell);
                batch.push(vcell.waker.take(v.ticket));
                book.set_victim(self.ring.index(h), Some(victim));
                return self.shed_won(book, h, word, r);
            }
        }
        // Nobody to shed — or a place came free since the arrival found the queue full (a
        // waiter cancelled or was granted): take it, as a plain arrival would have.
        if self.ring.reserve_place(into) {
            book.set_victim(self.ring.index(h), None);
            return self.shed_won(book, h, word, r);
        }
        let _ = self
            .ring
            .settle(cell, s, Kind::Rejected(Reason::QueueLimit));
        false
    }

    /// The shedding arrival of ticket `h` (cost word `word`, rank `r`) holds a live place
    /// now: a waiter like any other from here on (only this pass touches its cell while its
    /// enqueuer waits for the mark).
    fn shed_won(&self, book: &ClassBook, h: Word, word: Word, r: usize) -> bool {
        let cell = self.ring.cell(h);
        cell.cost.store(word & !COST_NOWAIT, Relaxed);
        // SeqCst: as in `ClassBook::entered` (its `pending` was counted at its publish).
        book.ranks[r].queued.fetch_add(1, SeqCst);
        book.mark_won(self.ring.index(h));
        true
    }

    /// The dispatcher of a classed bulkhead: as the plain one, but the run flag is given up
    /// before every wake-up — a waker may admit again on this thread, and a no-wait admission
    /// waits for the runner's pass, so it must never be its own thread's.
    #[inline(never)]
    pub(crate) fn run_classed(&self, book: &ClassBook) {
        loop {
            if !self.dispatch.enter() {
                return;
            }
            let mut batch = WakeBatch::new();
            loop {
                if self.pass_classed(book, &mut batch) {
                    break;
                }
                if self.dispatch.try_leave() {
                    batch.wake_all();
                    return;
                }
                if !batch.is_empty() {
                    break;
                }
                // Something is pending and nobody to wake: pass again.
                self.dispatch.begin_pass();
            }
            // More to do (a full batch, or a request pending): leave, wake, enter again.
            self.dispatch.leave();
            batch.wake_all();
        }
    }

    /// A pass on the host's request (its rate timer fired).
    pub(crate) fn dispatch_now(&self) {
        self.run_dispatcher();
    }

    /// One pass of a classed bulkhead (run flag held). `true` if it stopped because the wake
    /// batch is full.
    pub(crate) fn pass_classed(&self, book: &ClassBook, batch: &mut WakeBatch) -> bool {
        // SAFETY: only the dispatcher runs passes, and it holds the run flag.
        unsafe { book.with_lists(|lists| self.pass_lists(book, lists, batch)) }
    }

    fn pass_lists(&self, book: &ClassBook, lists: &mut Lists, batch: &mut WakeBatch) -> bool {
        if book.has_rates() {
            // Each pass looks at every head again: the rate-held one says when anew.
            book.set_retry_at(0);
        }
        loop {
            let stopped_at_claim = match self.thread(book, lists, batch) {
                Threaded::All => false,
                Threaded::Claimed => true,
                Threaded::Full => return true,
            };
            if self.grant_heads(book, lists, batch) == Some(true) {
                return true;
            }
            self.refuse_nowait(book, lists);
            // `WAITERS` stays set for good (every release must run the classed step), so
            // nothing is cleared here. A cell claimed but not published yet: its enqueuer
            // dispatches after publishing (never wait for it here). Cells published meanwhile
            // behind the tail we saw: thread them too.
            if stopped_at_claim || self.ring.head() == self.ring.tail() {
                return false;
            }
        }
    }

    /// Threads the published cells between head and tail onto their classes' lists (a
    /// shedding arrival first evicts its victim, or is refused).
    fn thread(&self, book: &ClassBook, lists: &mut Lists, batch: &mut WakeBatch) -> Threaded {
        let mut h = self.ring.head();
        while h != self.ring.tail() {
            let cell = self.ring.cell(h);
            // Acquire: pairs with the Release of the publish (weight, class, time, waker).
            let s = Stamp(cell.stamp.load(Acquire));
            if s.identity() == self.ring.lap(h) && s.kind() == Kind::Claimed {
                // Its enqueuer dispatches after publishing.
                return Threaded::Claimed;
            }
            if s.identity() == self.ring.lap(h) && s.kind() == Kind::Waiting {
                let i = self.ring.index(h);
                let class = book.cell_class(i);
                let r = book.rank(class);
                if book.is_shedding(i) {
                    if batch.is_full() {
                        return Threaded::Full;
                    }
                    if self.shed_for(book, lists, h, s, r, batch) {
                        lists.push(i as u32, h, r, false);
                    }
                } else {
                    let nowait = is_nowait(cell.cost.load(Relaxed));
                    lists.push(i as u32, h, r, nowait);
                }
            }
            // Gone (cancelled, skipped), expired (its owner polls), or threaded now.
            h = self.ring.advance_head(h);
        }
        Threaded::All
    }

    /// Grants heads in the dispatch order until none fits. `Some(true)`: the wake batch
    /// filled; `Some(false)`: the permit word blocked; `None`: nothing more fits.
    fn grant_heads(
        &self,
        book: &ClassBook,
        lists: &mut Lists,
        batch: &mut WakeBatch,
    ) -> Option<bool> {
        // Ranks whose floor head the limit itself held back (a shrink's attrition, or floors
        // lent out): other classes' floor heads may still take their own floors, but nobody
        // takes shared units past it.
        let mut over_limit: u64 = 0;
        // CoDel sheds at most one waiter per grant (a release after a long hold never sheds the
        // whole queue while its schedule catches up, nor leaves the permit unused).
        let mut shed_since_grant = false;
        loop {
            // A leased block past its deadline grants nobody, not even by handoff (as the
            // plain pass): the waiters stay queued until the lease manager renews (installing
            // the later deadline dispatches again) or shrinks the block.
            #[cfg(all(feature = "std", target_has_atomic = "64"))]
            if self.is_leased() && !self.lease.admits(self.clock.now_ns_at_most()) {
                return Some(false);
            }
            let limits = [self.limit.load(Acquire), self.budget.limit.load(Acquire)];
            // Adaptive LIFO (docs/design.md §4.10): newest first while the oldest waiter has
            // queued past the target.
            let lifo = if lists.codel.params.lifo {
                match self.lifo_now(book, lists, batch) {
                    Some(l) => l,
                    // The wake batch filled while stale heads were refused: wake, pass again.
                    None => return Some(true),
                }
            } else {
                false
            };
            // Whether head `a` goes before head `b` of the same priority.
            let first = |a: Word, b: Word| if lifo { older(b, a) } else { older(a, b) };
            let mut pick: Option<(Head, Stamp, bool)> = None;
            let mut pool_blocked = over_limit != 0;
            // The oldest head of the priority group being scanned that wants shared units:
            // within one priority the oldest (by ticket) decides — FIFO across classes of equal
            // priority (registry keys are such classes) — and if the pool is short for it,
            // nobody younger of that priority or of a lower one takes shared units.
            let mut group: Option<(u8, Head, Stamp, bool)> = None;
            let close = |g: Option<(u8, Head, Stamp, bool)>,
                         pick: &mut Option<(Head, Stamp, bool)>,
                         pool_blocked: &mut bool| {
                match g {
                    Some((_, head, s, true)) if !*pool_blocked && pick.is_none() => {
                        *pick = Some((head, s, false));
                    }
                    Some((_, _, _, false)) => *pool_blocked = true,
                    _ => {}
                }
            };
            let mut mask = lists.nonempty() & !over_limit;
            while mask != 0 {
                let r = mask.trailing_zeros() as usize;
                mask &= mask - 1;
                let Some((head, s)) = self.live_head(book, lists, r, batch, lifo) else {
                    if batch.is_full() {
                        return Some(true);
                    }
                    continue;
                };
                let (w, c) = self.cell_ask(head.ticket);
                let fits = match book.verdict(r, [w, c], limits) {
                    Verdict::Floor => {
                        pick = Some((head, s, true));
                        group = None;
                        break;
                    }
                    Verdict::Shared => true,
                    Verdict::Pool(_) => false,
                    Verdict::Ceiling(_) => continue,
                };
                let p = book.ranks[r].priority;
                match group {
                    // Same priority, the head that goes first keeps the group's turn (the
                    // older one; the younger one under LIFO).
                    Some((gp, g, _, _)) if gp == p && first(g.ticket, head.ticket) => {}
                    Some((gp, ..)) if gp == p => group = Some((p, head, s, fits)),
                    _ => {
                        close(group.take(), &mut pick, &mut pool_blocked);
                        group = Some((p, head, s, fits));
                    }
                }
            }
            close(group, &mut pick, &mut pool_blocked);
            if pick.is_none() && lists.nonempty() == 0 {
                lists.codel.queue_empty();
            }
            let (head, s, floor) = pick?;
            // CoDel's dequeue is a grant about to happen: not a pick a rate holds back (the
            // rate is read only with CoDel on: `grant` checks it anyway).
            if lists.codel.on()
                && !head.nowait
                && !shed_since_grant
                && (!book.has_rates()
                    || book
                        .rate_check(self.cell_ask(head.ticket).1, self.clock.now_ns())
                        .is_ok())
            {
                // CoDel judges — and sheds — the oldest waiter of the pick's class: the pick
                // itself, unless LIFO picked the newest (docs/design.md §4.10).
                let oldest = if lifo {
                    self.live_head(book, lists, head.rank, batch, false)
                } else {
                    Some((head, s))
                };
                match oldest {
                    Some((o, os)) if !o.nowait && self.shed_by_delay(book, lists, o, os, batch) => {
                        shed_since_grant = true;
                        if batch.is_full() {
                            return Some(true);
                        }
                        continue;
                    }
                    None if batch.is_full() => return Some(true),
                    // Its oldest went meanwhile (refused): pick again.
                    None => continue,
                    Some(_) => {}
                }
            }
            let granted = self.grant(book, lists, head, s, floor, batch);
            shed_since_grant = false;
            match granted {
                Grant::Done if batch.is_full() => return Some(true),
                Grant::Done => {}
                Grant::Blocked if floor => over_limit |= 1 << head.rank,
                Grant::Blocked | Grant::RateHeld => return Some(false),
            }
        }
    }

    /// Whether the dispatcher grants newest first now (adaptive LIFO): the oldest live waiter
    /// has queued at least the target. `None`: the wake batch filled while stale heads were
    /// refused.
    fn lifo_now(&self, book: &ClassBook, lists: &mut Lists, batch: &mut WakeBatch) -> Option<bool> {
        let now = self.clock.now_ns() as Word;
        let mut oldest: Word = 0;
        let mut mask = lists.nonempty();
        while mask != 0 {
            let r = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            match self.live_head(book, lists, r, batch, false) {
                Some((head, _)) if !head.nowait => {
                    let cell = self.ring.cell(head.ticket);
                    // Relaxed: ordered by the stamp's Acquire that showed it waiting.
                    oldest = oldest.max(now.wrapping_sub(cell.enqueued_ns.load(Relaxed)));
                }
                Some(_) => {}
                None if batch.is_full() => return None,
                None => {}
            }
        }
        Some(lists.codel.lifo(oldest as u64))
    }

    /// CoDel's dequeue step for `head` (state `s`), the waiter about to be granted: `true` if
    /// it was shed instead (rejected `shed`, counted, its waker in `batch`) or lost to a
    /// cancel meanwhile — pick again; `false`: grant it.
    fn shed_by_delay(
        &self,
        book: &ClassBook,
        lists: &mut Lists,
        head: Head,
        s: Stamp,
        batch: &mut WakeBatch,
    ) -> bool {
        let now = self.clock.now_ns();
        let cell = self.ring.cell(head.ticket);
        // Relaxed: ordered by the stamp's Acquire that showed it waiting.
        let sojourn = (now as Word).wrapping_sub(cell.enqueued_ns.load(Relaxed));
        if !lists.codel.shed(now, sojourn as u64) {
            return false;
        }
        // Exactly one winner against a cancel or a timer: the settle CAS.
        if self
            .ring
            .settle(cell, s, Kind::Rejected(Reason::Shed))
            .is_ok()
        {
            lists.unlink(head.cell);
            self.counters.reject(Reason::Shed);
            book.left(head.rank, true);
            batch.push(cell.waker.take(head.ticket));
        }
        true
    }

    /// Ticket `t`'s weight and cost (its cell published).
    fn cell_ask(&self, t: Word) -> (Word, Word) {
        let cell = self.ring.cell(t);
        // Relaxed: ordered by the stamp's Acquire that showed it waiting.
        (
            cell.weight.load(Relaxed) & super::WEIGHT_MASK,
            cost_of(cell.cost.load(Relaxed)),
        )
    }

    /// Rank `r`'s head — its youngest entry under `lifo` — if it still waits, after taking
    /// stale entries off the list and refusing a head that can no longer be granted
    /// (`shutdown` after `close`, a limit shrunk below it).
    fn live_head(
        &self,
        book: &ClassBook,
        lists: &mut Lists,
        r: usize,
        batch: &mut WakeBatch,
        lifo: bool,
    ) -> Option<(Head, Stamp)> {
        loop {
            // Under LIFO the newest *waiter*: a no-wait request never jumps the queue (it is
            // decided as under FIFO); a list of no-wait requests only is taken from its head.
            let head = if lifo {
                let mut at = lists.tail(r);
                while let Some(h) = at.filter(|h| h.nowait) {
                    at = lists.before(h.cell);
                }
                at.or_else(|| lists.head(r))
            } else {
                lists.head(r)
            }?;
            let cell = self.ring.cell(head.ticket);
            // Acquire: as in `thread`.
            let s = Stamp(cell.stamp.load(Acquire));
            if s.identity() != self.ring.lap(head.ticket) || s.kind() != Kind::Waiting {
                // Cancelled (maybe reused since) or expired (its owner polls): not ours now.
                lists.unlink(head.cell);
                continue;
            }
            let (w, c) = self.cell_ask(head.ticket);
            let class = book.ranks[r].index;
            let verdict = if self.permits.load() & CLOSED != 0 {
                Some(Reason::Shutdown)
            } else {
                self.classed_never_fits(book, w, c, class)
            };
            let Some(reason) = verdict else {
                return Some((head, s));
            };
            if self.ring.settle(cell, s, Kind::Rejected(reason)).is_ok() {
                lists.unlink(head.cell);
                if !head.nowait {
                    self.counters.reject(reason);
                    book.left(head.rank, true);
                    batch.push(cell.waker.take(head.ticket));
                    if batch.is_full() {
                        return None;
                    }
                }
            }
            // else: lost to a cancel or a timer; the next look unlinks it.
        }
    }

    /// Grants `head` (state `s`): the permit word, then the class counts, then the grant CAS.
    /// `floor`: the head was picked as wholly inside its floor; if a fast-path take has since
    /// made it need shared units, it is not granted here (it would pass a higher rank short of
    /// them) but looked at again.
    fn grant(
        &self,
        book: &ClassBook,
        lists: &mut Lists,
        head: Head,
        s: Stamp,
        floor: bool,
        batch: &mut WakeBatch,
    ) -> Grant {
        let (w, c) = self.cell_ask(head.ticket);
        // The rates first (no charge yet: a refused or lost grant is never charged).
        let tats = if book.has_rates() {
            match book.rate_check(c, self.clock.now_ns()) {
                Ok(t) => Some(t),
                Err(at) => {
                    let held = book.retry_at().unwrap_or(u64::MAX);
                    book.set_retry_at(at.min(held));
                    return Grant::RateHeld;
                }
            }
        } else {
            None
        };
        match self.permits.reserve_for_head(w, c) {
            Reserve::Reserved => {}
            Reserve::Blocked => return Grant::Blocked,
            // The next look refuses it `shutdown`.
            Reserve::Closed => return Grant::Done,
        }
        let limits = [self.limit.load(Acquire), self.budget.limit.load(Acquire)];
        let Some(past) = book.try_take(head.rank, [w, c], limits, floor) else {
            // A fast-path floor take raced the verdict: look again.
            self.permits.give(w, c);
            return Grant::Done;
        };
        // Before the grant is visible, as the plain pass (the owner may claim it at once).
        self.counters.unclaimed.fetch_add(w, AcqRel);
        if c != 0 {
            self.budget.unclaimed.fetch_add(c, AcqRel);
        }
        let cell = self.ring.cell(head.ticket);
        let now = if self.clock.is_some() && !head.nowait {
            let now = self.clock.now_ns() as Word;
            cell.granted_ns.store(now, Relaxed);
            now
        } else {
            0
        };
        // The class's observed ceilings it went past (its `observe_bypass` event; the owner of
        // a no-wait cell reads it before it takes the grant).
        cell.bypass.store(past, Relaxed);
        if self.ring.settle(cell, s, Kind::Granted).is_ok() {
            if let Some(t) = tats {
                book.rate_commit(t);
            }
            if past != 0 {
                book.count_observed(head.rank);
                self.counters.observe(if past & super::OBSERVE_CALLS != 0 {
                    Reason::ConcurrencyLimit
                } else {
                    Reason::BudgetLimit
                });
            }
            lists.unlink(head.cell);
            if !head.nowait {
                self.counters.record_queued_grant();
                self.budget.reserved_by_dispatcher(c);
                if self.clock.is_some() {
                    self.counters
                        .record_wait(now.wrapping_sub(cell.enqueued_ns.load(Relaxed)));
                }
                book.left(head.rank, true);
                batch.push(cell.waker.take(head.ticket));
            }
        } else {
            // Cancelled or expired first: everything goes back; the next look unlinks it.
            self.counters.unclaimed.fetch_sub(w, AcqRel);
            if c != 0 {
                self.budget.unclaimed.fetch_sub(c, AcqRel);
            }
            book.give(head.rank, [w, c]);
            self.permits.give(w, c);
        }
        Grant::Done
    }

    /// Refuses the no-wait entries no grant reached (each with the reason of what held it
    /// back; counted by its caller).
    fn refuse_nowait(&self, book: &ClassBook, lists: &mut Lists) {
        let limits = [self.limit.load(Acquire), self.budget.limit.load(Acquire)];
        while let Some(head) = lists.nowait_head() {
            lists.unlink(head.cell);
            let cell = self.ring.cell(head.ticket);
            // Acquire: as in `thread`.
            let s = Stamp(cell.stamp.load(Acquire));
            if s.identity() != self.ring.lap(head.ticket) || s.kind() != Kind::Waiting {
                continue;
            }
            let (w, c) = self.cell_ask(head.ticket);
            let reason = self.nowait_reason(book, head.rank, w, c, limits);
            let _ = self.ring.settle(cell, s, Kind::Rejected(reason));
        }
    }
}
