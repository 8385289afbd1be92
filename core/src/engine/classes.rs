//! The class book of a classed bulkhead (docs/design.md §4.8): per-class counts, the shared
//! pool, and the per-class FIFO lists the dispatcher threads over the ring's cells.
//!
//! # Who writes what
//!
//! * `held` (per class and dimension) and `shared_used` (per dimension) are atomics: the
//!   dispatcher adds a grant *before* it is visible, a release subtracts *before* its permits
//!   go back to the permit word. So a pass may see a class fuller than it is (a release on its
//!   way), never emptier: every check is conservative, and the release that it missed runs a
//!   pass of its own (it finds `WAITERS` set).
//! * `shared_used = Σ max(0, held − floor)` over the classes, kept exactly by telescoping: each
//!   change of a class's `held` (one RMW, whose previous value it returns) adds the change of
//!   `max(0, held − floor)` it made.
//! * The lists, their links and the non-empty mask belong to the dispatcher: only the thread
//!   holding the [`RunFlag`](crate::run_flag::RunFlag) touches them (an `UnsafeCell`, checked
//!   by loom's cell tracking).
//! * A cell's class is written by its enqueuer before the publish (like its weight).
//!
//! # The dispatch order
//!
//! Classes are ranked by priority (highest first, ties by class index: the scan order only). A
//! pass repeatedly grants: first the highest-ranked head that fits wholly inside its own
//! class's untouched floor (floors are partitions, so these never compete); else, of the
//! highest priority with a head not held back by its own ceiling, the oldest such head (by
//! ticket: FIFO across the classes of one priority), if the shared pool (and, for a priority
//! `≥ min_priority`, the reserve) has what it needs — and if it has not, nobody younger of that
//! priority or of a lower one takes shared units (no barging). FIFO within a class.

use alloc::{boxed::Box, vec::Vec};

use super::queue_delay::{CoDel, QueueDelayParams};
use crate::{
    config::classes::ClassTable,
    sync::{AtomicWord, Ordering::*, UnsafeCell, Word},
};

/// No cell (an empty list's end).
const NIL: u32 = u32::MAX;

/// The permits dimension and the budget dimension.
const DIMS: usize = 2;

/// One class, by rank.
#[derive(Debug)]
pub(crate) struct Rank {
    /// The class index the table gave it.
    pub(crate) index: u16,
    pub(crate) priority: u8,
    /// Floor and ceiling per dimension (the ceiling changes at run time:
    /// [`ClassBook::set_ceiling`]).
    pub(crate) floor: [Word; DIMS],
    pub(crate) ceiling: [AtomicWord; DIMS],
    /// Units held per dimension (granted, claimed or not, until released).
    pub(crate) held: [AtomicWord; DIMS],
    /// Live waiters of this class (a statistic and the dry run's `ahead`).
    pub(crate) queued: AtomicWord,
    /// The dimensions whose ceiling this class observes (`OBSERVE_*` bits; docs/design.md
    /// §4.8): past it a request is counted, not held back.
    observe: AtomicWord,
    /// Requests its observed ceilings would have refused (granted, or refused by another bound).
    observed: AtomicWord,
}

impl Rank {
    /// The ceiling of dimension `d` now.
    #[inline]
    pub(crate) fn ceiling(&self, d: usize) -> Word {
        // Acquire: pairs with `set_ceiling`'s Release (a raise is seen with what preceded it).
        self.ceiling[d].load(Acquire)
    }
}

/// A list entry: one ring cell, threaded onto its class's list (and, for a no-wait request,
/// onto the pass's no-wait list too). Both lists are doubly linked, so an entry leaves in O(1).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Link {
    prev: u32,
    next: u32,
    nw_prev: u32,
    nw_next: u32,
    /// The ticket of the occupant linked.
    ticket: Word,
    linked: bool,
    rank: u8,
    /// A no-wait request: decided by the pass that threads it (granted or refused).
    nowait: bool,
}

const UNLINKED: Link = Link {
    prev: NIL,
    next: NIL,
    nw_prev: NIL,
    nw_next: NIL,
    ticket: 0,
    linked: false,
    rank: 0,
    nowait: false,
};

/// The dispatcher's state.
#[derive(Debug)]
pub(crate) struct Lists {
    /// Per rank: head and tail cell.
    ends: Box<[(u32, u32)]>,
    links: Box<[Link]>,
    /// Bit r: rank r's list holds entries.
    nonempty: u64,
    /// The no-wait entries not decided yet.
    nowait: u32,
    /// Queue-delay shedding and adaptive LIFO (docs/design.md §4.10).
    pub(crate) codel: CoDel,
}

/// How a head stands against its class and the shared pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Wholly inside its class's untouched floor.
    Floor,
    /// Fits, taking shared (or reserve) units.
    Shared,
    /// Its class's ceiling holds it back (dimension 0 permits, 1 budget).
    Ceiling(usize),
    /// The shared pool (and reserve, if it may take it) is short.
    Pool(usize),
}

/// A head the pass may grant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Head {
    pub(crate) cell: u32,
    pub(crate) rank: usize,
    /// The ticket of its occupant.
    pub(crate) ticket: Word,
    pub(crate) nowait: bool,
}

/// One rate dimension's GCRA state (docs/design.md §4.9): the emission interval `t` and the
/// tolerance `tau` in ns (`t == 0`: no such rate), changed at run time by `apply_limits` under
/// the run flag and the book's `rate_gen` (a sequence lock, so a reader off the run flag never
/// pairs one setting's `t` with another's `tau`), and the theoretical arrival time, written
/// only by the dispatcher.
#[derive(Debug)]
pub(crate) struct Gcra {
    t: AtomicWord,
    tau: AtomicWord,
    tat: AtomicWord,
}

impl Gcra {
    fn new(r: Option<&crate::config::classes::Rate>) -> Self {
        let (t, tau) = Self::params_of(r);
        Gcra {
            t: AtomicWord::new(t as Word),
            tau: AtomicWord::new(tau as Word),
            tat: AtomicWord::new(0),
        }
    }

    /// `(t, tau)` of a (validated) rate; `(0, 0)` for none.
    fn params_of(r: Option<&crate::config::classes::Rate>) -> (u64, u64) {
        r.map_or((0, 0), |r| {
            let t = (r.per.as_nanos() / u128::from(r.amount)) as u64;
            (t, t * r.burst)
        })
    }

    /// The TAT after `n` units at `now` if they conform now under `(t, tau)`, else `Err(the
    /// earliest time they would)` (`u64::MAX`: never, `n` is above the burst).
    fn check(&self, (t, tau): (u64, u64), n: u64, now: u64) -> Result<u64, u64> {
        if n == 0 {
            // Relaxed: dispatcher-only.
            return Ok(self.tat.load(Relaxed) as u64);
        }
        let Some(cost) = n.checked_mul(t).filter(|&c| c <= tau) else {
            return Err(u64::MAX);
        };
        // Relaxed: dispatcher-only (the run flag orders one runner after the next).
        let new = (self.tat.load(Relaxed) as u64).max(now) + cost;
        if new - now <= tau {
            Ok(new)
        } else {
            Err(new - tau)
        }
    }
}

/// `(t, tau)` of each of `rates` (validated): `(0, 0)` for none.
pub(crate) fn rate_params_of(rates: &crate::config::classes::Rates) -> [(u64, u64); DIMS] {
    [
        Gcra::params_of(rates.requests.as_ref()),
        Gcra::params_of(rates.units.as_ref()),
    ]
}

/// The class book. See the module docs.
#[derive(Debug)]
pub(crate) struct ClassBook {
    pub(crate) ranks: Box<[Rank]>,
    /// Class index → rank.
    rank_of: Box<[u8]>,
    /// Per ring cell: the class index of its occupant (and [`NOWAIT_BIT`]), written by the
    /// enqueuer before the publish.
    cell_class: Box<[AtomicWord]>,
    /// Σ floors and the reserve, per dimension.
    floors: [Word; DIMS],
    /// The priority reserve per dimension and the lowest priority that may take it (changed at
    /// run time by `apply_limits`: `set_reserve`).
    reserve: [AtomicWord; DIMS],
    min_priority: AtomicWord,
    /// Σ max(0, held − floor) over the classes, per dimension.
    shared_used: [AtomicWord; DIMS],
    /// Lending (opt-in): a class beyond the shared units may borrow other classes' idle floor
    /// units; then `floor_used = Σ min(held, floor)` is kept too (else it stays 0).
    lending: bool,
    floor_used: [AtomicWord; DIMS],
    /// Shedding (`ClassTable::shed`).
    pub(crate) shed: bool,
    /// With shedding, per ring cell: the victim a shedding arrival in it evicted — its
    /// admission id and its class index + 1 (0: none) — written by the pass before
    /// [`mark_won`](Self::mark_won), read once by the arrival for its `shed` event.
    victims: Box<[[AtomicWord; 2]]>,
    /// The rate dimensions (requests, units); `t == 0` where there is none.
    rates: [Gcra; DIMS],
    /// The rates' sequence lock: odd while `apply_limits` writes a `(t, tau)` pair.
    rate_gen: AtomicWord,
    /// Whether any rate is set (every decision then goes through the pass).
    rated: AtomicWord,
    /// The earliest time (host clock, ns) a head held back by a rate conforms; 0: none.
    retry_at: AtomicWord,
    /// Live waiters plus no-wait cells on their way through a pass: while 0, a release has
    /// nobody to hand its units to and skips the dispatcher.
    pending: AtomicWord,
    lists: UnsafeCell<Lists>,
}

// SAFETY: `lists` is touched only by the thread holding the engine's run flag (its AcqRel
// RMWs order one runner's writes before the next runner's reads); everything else is atomic.
unsafe impl Sync for ClassBook {}

/// The no-wait mark in a cell's class word.
pub(crate) const NOWAIT_BIT: Word = 1 << 16;
/// A waiter arriving at a full queue that asks to shed (its cell holds no live place yet).
pub(crate) const SHED_BIT: Word = 1 << 17;
/// Set by the pass that evicted a victim for it: the arrival holds the victim's place now.
pub(crate) const WON_BIT: Word = 1 << 18;

/// The `OBSERVE_*` bits of a class's observe mode.
fn observe_bits(o: crate::observe::Observe) -> Word {
    use super::permit_word::{OBSERVE_BUDGET, OBSERVE_CALLS};
    (if o.concurrency() { OBSERVE_CALLS } else { 0 })
        | (if o.budget() { OBSERVE_BUDGET } else { 0 })
}

/// The `OBSERVE_*` bit of dimension `d`.
const fn observe_bit(d: usize) -> Word {
    use super::permit_word::{OBSERVE_BUDGET, OBSERVE_CALLS};
    if d == 0 {
        OBSERVE_CALLS
    } else {
        OBSERVE_BUDGET
    }
}

/// `max(0, held − floor)`.
#[inline]
const fn over(held: Word, floor: Word) -> Word {
    held.saturating_sub(floor)
}

impl ClassBook {
    /// The book of `table` (validated) over a ring of `cells` cells, dispatching with the
    /// queue-delay policy `queue_delay`.
    pub(crate) fn new(
        table: &ClassTable<'_>,
        max_concurrent: u64,
        budget: u64,
        cells: usize,
        queue_delay: QueueDelayParams,
    ) -> Self {
        let mut order: Vec<usize> = (0..table.classes.len()).collect();
        // Stable: ties keep their index order.
        order.sort_by_key(|&i| core::cmp::Reverse(table.classes[i].priority));
        let mut rank_of = alloc::vec![0u8; table.classes.len()].into_boxed_slice();
        let (mut floors, reserve) = (
            [0 as Word; DIMS],
            [table.reserve.permits as Word, table.reserve.budget as Word],
        );
        let ranks: Box<[Rank]> = order
            .iter()
            .enumerate()
            .map(|(r, &i)| {
                let c = &table.classes[i];
                rank_of[i] = r as u8;
                floors[0] += c.floor as Word;
                floors[1] += c.budget_floor as Word;
                Rank {
                    index: i as u16,
                    priority: c.priority,
                    floor: [c.floor as Word, c.budget_floor as Word],
                    ceiling: [
                        AtomicWord::new(c.ceiling.unwrap_or(max_concurrent) as Word),
                        AtomicWord::new(c.budget_ceiling.unwrap_or(budget) as Word),
                    ],
                    held: [AtomicWord::new(0), AtomicWord::new(0)],
                    queued: AtomicWord::new(0),
                    observe: AtomicWord::new(observe_bits(c.observe)),
                    observed: AtomicWord::new(0),
                }
            })
            .collect();
        let n = ranks.len();
        ClassBook {
            ranks,
            rank_of,
            cell_class: (0..cells).map(|_| AtomicWord::new(0)).collect(),
            floors,
            reserve: [AtomicWord::new(reserve[0]), AtomicWord::new(reserve[1])],
            min_priority: AtomicWord::new(Word::from(table.reserve.min_priority)),
            shared_used: [AtomicWord::new(0), AtomicWord::new(0)],
            lending: table.lending,
            shed: table.shed,
            victims: (0..if table.shed { cells } else { 0 })
                .map(|_| [AtomicWord::new(0), AtomicWord::new(0)])
                .collect(),
            rates: [
                Gcra::new(table.rates.requests.as_ref()),
                Gcra::new(table.rates.units.as_ref()),
            ],
            rate_gen: AtomicWord::new(0),
            rated: AtomicWord::new(Word::from(
                table.rates.requests.is_some() || table.rates.units.is_some(),
            )),
            retry_at: AtomicWord::new(0),
            floor_used: [AtomicWord::new(0), AtomicWord::new(0)],
            pending: AtomicWord::new(0),
            lists: UnsafeCell::new(Lists {
                ends: alloc::vec![(NIL, NIL); n].into_boxed_slice(),
                links: alloc::vec![UNLINKED; cells].into_boxed_slice(),
                nonempty: 0,
                nowait: NIL,
                codel: CoDel::new(queue_delay),
            }),
        }
    }

    /// How many classes.
    pub(crate) fn len(&self) -> usize {
        self.ranks.len()
    }

    /// The rank of class `index` (validated by the caller: `index < len()`).
    #[inline]
    pub(crate) fn rank(&self, index: u16) -> usize {
        self.rank_of[index as usize] as usize
    }

    /// Sets class `index`'s ceiling of dimension `d` (validated by the caller: `≥` its floor).
    /// A lower ceiling holds the class's new grants back and its holders leave by attrition; a
    /// higher one lets its waiters go at the next pass (the caller runs one).
    pub(crate) fn set_ceiling(&self, index: u16, d: usize, ceiling: Word) {
        // Release: see `Rank::ceiling`.
        self.ranks[self.rank(index)].ceiling[d].store(ceiling, Release);
    }

    /// Class `index`'s floor of dimension `d`.
    pub(crate) fn floor_of(&self, index: u16, d: usize) -> Word {
        self.ranks[self.rank(index)].floor[d]
    }

    /// Σ floors + reserve of dimension `d`: the least limit the partition needs.
    pub(crate) fn partitioned(&self, d: usize) -> Word {
        self.floors[d] + self.reserve_of(d)
    }

    /// Σ floors of dimension `d`.
    pub(crate) fn floors(&self, d: usize) -> Word {
        self.floors[d]
    }

    /// The priority reserve of dimension `d` now.
    #[inline]
    fn reserve_of(&self, d: usize) -> Word {
        // Acquire: pairs with `set_reserve`'s Release.
        self.reserve[d].load(Acquire)
    }

    /// Whether rank `r` may take the priority reserve now (priority ≥ the reserve's minimum).
    #[inline]
    fn may_reserve(&self, r: usize) -> bool {
        // Acquire: pairs with `set_reserve`'s Release.
        Word::from(self.ranks[r].priority) >= self.min_priority.load(Acquire)
    }

    /// The reserve now: `(permits, budget, min_priority)`.
    pub(crate) fn reserve_now(&self) -> (Word, Word, u8) {
        (
            self.reserve_of(0),
            self.reserve_of(1),
            self.min_priority.load(Acquire) as u8,
        )
    }

    /// Installs a reserve (validated by the caller against the limits; docs/design.md §4.8):
    /// one Release store per field, while `apply_limits` holds the run flag (no pass sees part
    /// of it).
    pub(crate) fn set_reserve(&self, permits: Word, budget: Word, min_priority: u8) {
        self.reserve[0].store(permits, Release);
        self.reserve[1].store(budget, Release);
        self.min_priority.store(Word::from(min_priority), Release);
    }

    /// The enqueuer of cell `cell` records its class (before its publish).
    #[inline]
    pub(crate) fn set_cell_class(&self, cell: usize, index: u16, nowait: bool) {
        let word = index as Word | if nowait { NOWAIT_BIT } else { 0 };
        // Relaxed: published by the Release of the publish.
        self.cell_class[cell].store(word, Relaxed);
    }

    /// The enqueuer of a shedding arrival marks its cell (before its publish).
    pub(crate) fn set_cell_shed(&self, cell: usize, index: u16) {
        // Relaxed: published by the Release of the publish.
        self.cell_class[cell].store(index as Word | SHED_BIT, Relaxed);
    }

    /// Whether cell `cell` holds a shedding arrival the pass has not decided yet.
    pub(crate) fn is_shedding(&self, cell: usize) -> bool {
        // Relaxed: the dispatcher reads it after the stamp's Acquire.
        self.cell_class[cell].load(Relaxed) & (SHED_BIT | WON_BIT) == SHED_BIT
    }

    /// The pass evicted a victim for cell `cell`'s arrival: it is a waiter now.
    pub(crate) fn mark_won(&self, cell: usize) {
        // Release: the arrival's Acquire sees its cell converted (cost word, counts).
        self.cell_class[cell].fetch_or(WON_BIT, Release);
    }

    /// The pass records the victim it evicted for cell `cell`'s arrival (`None`: it took a
    /// place that came free), before [`mark_won`](Self::mark_won).
    pub(crate) fn set_victim(&self, cell: usize, victim: Option<(Word, u16)>) {
        let (id, class) = victim.map_or((0, 0), |(id, c)| (id, c as Word + 1));
        // Relaxed: published by `mark_won`'s Release.
        self.victims[cell][0].store(id, Relaxed);
        self.victims[cell][1].store(class, Relaxed);
    }

    /// The victim recorded for cell `cell`'s arrival, once (the arrival, after it saw
    /// [`has_won`](Self::has_won)); cleared, so the cell's next occupant reads none.
    pub(crate) fn take_victim(&self, cell: usize) -> Option<(Word, u16)> {
        let slot = self.victims.get(cell)?;
        // Relaxed: ordered by `has_won`'s Acquire (the arrival's own cell while it waits).
        let class = slot[1].swap(0, Relaxed);
        let id = slot[0].swap(0, Relaxed);
        (class != 0).then(|| (id, (class - 1) as u16))
    }

    /// Whether the pass has made cell `cell`'s shedding arrival a waiter.
    pub(crate) fn has_won(&self, cell: usize) -> bool {
        // Acquire: see `mark_won`.
        self.cell_class[cell].load(Acquire) & WON_BIT != 0
    }

    /// The class index of cell `cell`'s occupant (read by a party that saw its stamp).
    #[inline]
    pub(crate) fn cell_class(&self, cell: usize) -> u16 {
        // Relaxed: ordered by the stamp's Acquire.
        self.cell_class[cell].load(Relaxed) as u16
    }

    /// How class rank `r` stands for `n = [permits, units]` under the limits `limits`.
    pub(crate) fn verdict(&self, r: usize, n: [Word; DIMS], limits: [Word; DIMS]) -> Verdict {
        let rank = &self.ranks[r];
        let mut need = [0 as Word; DIMS];
        for d in 0..DIMS {
            // SeqCst: with the releases' RMWs and `pending` (see `has_pending`).
            let h = rank.held[d].load(SeqCst);
            if h.saturating_add(n[d]) > rank.ceiling(d) && !self.observes(r, d) {
                return Verdict::Ceiling(d);
            }
            need[d] = over(h + n[d], rank.floor[d]) - over(h, rank.floor[d]);
        }
        for d in 0..DIMS {
            if need[d] == 0 && !self.floor_keeps_reserve(r, d, n[d], limits[d]) {
                // Its floor is lent out and taking it now would eat the reserve: it waits for
                // the reclaim, holding younger shared takes back (as a short pool does).
                return Verdict::Pool(d);
            }
        }
        if need == [0, 0] {
            return Verdict::Floor;
        }
        for (d, &want) in need.iter().enumerate() {
            if want == 0 {
                continue;
            }
            // SeqCst: as above.
            let h = rank.held[d].load(SeqCst);
            if !self.fits_pool(r, d, h, n[d], want, limits[d]) {
                return Verdict::Pool(d);
            }
        }
        Verdict::Shared
    }

    /// Whether rank `r` taking `n` units of dimension `d` at a hold of `h`, `want` of them
    /// beyond its floor, fits the pool under `limit`: the shared rest (plus the reserve for a
    /// priority ≥ `min_priority`), and with lending also the other classes' idle floor units.
    /// Reads `shared_used` (only the dispatcher adds to it: a lower bound of the room).
    fn fits_pool(&self, r: usize, d: usize, h: Word, n: Word, want: Word, limit: Word) -> bool {
        let rank = &self.ranks[r];
        let reserve = if self.may_reserve(r) {
            0
        } else {
            self.reserve_of(d)
        };
        let mut cap = limit.saturating_sub(self.floors[d] + reserve);
        if self.lending {
            // Idle floor units of the other classes once this take has filled its own floor
            // (a fast-path floor take may shrink them meanwhile: the permit word, taken
            // first, still bounds the whole at the limit).
            let own = n.min(rank.floor[d].saturating_sub(h));
            // SeqCst: as in `verdict`.
            let used = self.floor_used[d].load(SeqCst) + own;
            cap += self.floors[d].saturating_sub(used);
        }
        // SeqCst: as in `verdict`.
        self.shared_used[d].load(SeqCst).saturating_add(want) <= cap
    }

    /// Whether rank `r` taking `n` units of dimension `d` inside its own floor keeps the
    /// priority reserve whole (docs/design.md §4.8, lending). Without lending a floor is never
    /// lent, so a floor take never reaches the reserve. With lending, a borrower may hold the
    /// owner's idle floor units; the owner taking its floor back before they return would then
    /// come out of the reserve — so a class that may not take the reserve takes its floor only
    /// while the holds of the classes that may not take it, plus every other class's floor
    /// part, stay within `limit − reserve` with it (a scan of the classes' holds: lending and a
    /// reserve together only).
    pub(crate) fn floor_keeps_reserve(&self, r: usize, d: usize, n: Word, limit: Word) -> bool {
        if !self.lending || n == 0 || self.may_reserve(r) {
            return true;
        }
        let reserve = self.reserve_of(d);
        if reserve == 0 {
            return true;
        }
        // What the reserve must stay clear of: every hold of a class that may not take it, and
        // every class's floor part (a floor is its owner's, whoever else may borrow it).
        let outside: Word = (0..self.ranks.len())
            .map(|k| {
                // SeqCst: as in `verdict`.
                let h = self.ranks[k].held[d].load(SeqCst);
                if self.may_reserve(k) {
                    h.min(self.ranks[k].floor[d])
                } else {
                    h
                }
            })
            .sum();
        outside.saturating_add(n) <= limit.saturating_sub(reserve)
    }

    /// Whether the one-CAS floor path may decide for rank `r` (else the pass does): not while
    /// lent floors could put its floor take into the reserve.
    #[inline(always)]
    pub(crate) fn floor_path_open(&self, r: usize) -> bool {
        !self.lending || self.may_reserve(r) || self.reserve_of(0) == 0
    }

    /// Rank `r`'s hold of dimension `d` moved from `prev` to `next` (one RMW or CAS of its
    /// `held`): the shared and floor units follow by the same telescoping difference.
    #[inline]
    fn moved(&self, r: usize, d: usize, prev: Word, next: Word) {
        let f = self.ranks[r].floor[d];
        if !self.lending && prev <= f && next <= f {
            // Wholly inside the floor, nothing else kept: the common release.
            return;
        }
        let (so, sn) = (over(prev, f), over(next, f));
        // SeqCst: as in `verdict`.
        if sn > so {
            self.shared_used[d].fetch_add(sn - so, SeqCst);
        } else if so > sn {
            self.shared_used[d].fetch_sub(so - sn, SeqCst);
        }
        if self.lending {
            let (fo, fnew) = (prev.min(f), next.min(f));
            if fnew > fo {
                self.floor_used[d].fetch_add(fnew - fo, SeqCst);
            } else if fo > fnew {
                self.floor_used[d].fetch_sub(fo - fnew, SeqCst);
            }
        }
    }

    /// The dispatcher's take for a head whose verdict fit: `n` for rank `r`, each dimension
    /// one CAS that re-checks the class's ceiling and the shared units the take needs against
    /// the room `limits` leave (a fast-path floor take may have raced the verdict). `false`,
    /// with nothing taken, if it no longer fits.
    /// `floor_only`: refuse a take that needs shared units (a head picked as a floor head).
    /// `Some` with the `OBSERVE_*` bits of the dimensions it took past an observed ceiling.
    pub(crate) fn try_take(
        &self,
        r: usize,
        n: [Word; DIMS],
        limits: [Word; DIMS],
        floor_only: bool,
    ) -> Option<Word> {
        let rank = &self.ranks[r];
        let mut past = 0;
        for d in 0..DIMS {
            if n[d] == 0 {
                continue;
            }
            // SeqCst: as in `verdict`.
            let mut h = rank.held[d].load(SeqCst);
            loop {
                let want = over(h + n[d], rank.floor[d]) - over(h, rank.floor[d]);
                let above = h + n[d] > rank.ceiling(d);
                if (above && !self.observes(r, d))
                    || (want != 0
                        && (floor_only || !self.fits_pool(r, d, h, n[d], want, limits[d])))
                    || (want == 0 && !self.floor_keeps_reserve(r, d, n[d], limits[d]))
                {
                    if d == 1 {
                        self.give(r, [n[0], 0]);
                    }
                    return None;
                }
                // SeqCst: one order with the releases and the fast path's floor takes.
                match rank.held[d].compare_exchange_weak(h, h + n[d], SeqCst, SeqCst) {
                    Ok(_) => {
                        if above {
                            past |= observe_bit(d);
                        }
                        break;
                    }
                    Err(actual) => h = actual,
                }
            }
            self.moved(r, d, h, h + n[d]);
        }
        Some(past)
    }

    /// Whether rank `r` observes its ceiling of dimension `d` (docs/design.md §4.8).
    #[inline]
    pub(crate) fn observes(&self, r: usize, d: usize) -> bool {
        // Relaxed: a setting (written before the class is used: at construction, or when a
        // registry gives the idle class to a key).
        self.ranks[r].observe.load(Relaxed) & observe_bit(d) != 0
    }

    /// Whether rank `r` asking `n` is past an observed ceiling now (a refusal its own
    /// ceilings would have given, counted for the class).
    pub(crate) fn past_observed_ceiling(&self, r: usize, n: [Word; DIMS]) -> bool {
        let rank = &self.ranks[r];
        (0..DIMS).any(|d| {
            n[d] != 0
                && self.observes(r, d)
                // SeqCst: as in `verdict`.
                && rank.held[d].load(SeqCst).saturating_add(n[d]) > rank.ceiling(d)
        })
    }

    /// Counts a request of rank `r` its observed ceilings would have refused.
    pub(crate) fn count_observed(&self, r: usize) {
        self.ranks[r].observed.fetch_add(1, Relaxed);
    }

    /// Sets class `index`'s observe mode and starts its `observed` count afresh (an idle class
    /// given to a registry key: the count is the new key's, not an evicted one's).
    pub(crate) fn set_observe(&self, index: u16, observe: crate::observe::Observe) {
        let rank = &self.ranks[self.rank(index)];
        // Relaxed: see `observes`.
        rank.observe.store(observe_bits(observe), Relaxed);
        rank.observed.store(0, Relaxed);
    }

    /// The fast path (docs/design.md §4.8): `w` permits (and no budget units) for rank `r`
    /// wholly inside its class's untouched floor, in one CAS of the class's hold — a partition
    /// nobody else takes from, so no pass is needed. The caller checked that nobody of the
    /// class is queued (no barging) and takes the permit word next.
    #[inline]
    pub(crate) fn try_floor(&self, r: usize, w: Word) -> bool {
        let rank = &self.ranks[r];
        let mut h = rank.held[0].load(Relaxed);
        loop {
            if h + w > rank.floor[0] {
                return false;
            }
            // SeqCst: as in `try_take`.
            match rank.held[0].compare_exchange_weak(h, h + w, SeqCst, Relaxed) {
                Ok(_) => {
                    // Inside the floor: no shared unit moves, only the floor part (lending).
                    if self.lending {
                        // SeqCst: as in `verdict`.
                        self.floor_used[0].fetch_add(w, SeqCst);
                    }
                    return true;
                }
                Err(actual) => h = actual,
            }
        }
    }

    /// Rank `r` is asked for by a waiter or a no-wait cell (before its publish); `queued`:
    /// a live waiter (counted in the class's `queued`).
    pub(crate) fn entered(&self, r: usize, queued: bool) {
        // SeqCst: with the release's load in `has_pending` (a release either sees this or
        // the pass this enqueuer runs after its publish sees the release's units).
        self.pending.fetch_add(1, SeqCst);
        if queued {
            // AcqRel: a statistic read by the dry run and the fast path.
            self.ranks[r].queued.fetch_add(1, SeqCst);
        }
    }

    /// The waiter or no-wait cell counted by [`entered`](Self::entered) left (settled or
    /// cancelled).
    pub(crate) fn left(&self, r: usize, queued: bool) {
        if queued {
            self.ranks[r].queued.fetch_sub(1, SeqCst);
        }
        self.pending.fetch_sub(1, SeqCst);
    }

    /// The live waiters a new waiter of class `index` would have ahead of it in the dispatch
    /// order, floors aside: those of its own class and of every class of equal or higher
    /// priority (strict priority across priorities; within one, FIFO by arrival, and every
    /// waiter there now arrived before it). A statistic: the counts of this moment.
    pub(crate) fn ahead_of(&self, index: u16) -> Word {
        let p = self.ranks[self.rank(index)].priority;
        self.ranks
            .iter()
            .filter(|k| k.priority >= p)
            // Acquire: a statistic (as `stats`).
            .map(|k| k.queued.load(Acquire))
            .sum()
    }

    /// Whether a live waiter of a priority below class `index`'s could be shed for it now (a
    /// statistic: the counts of this moment).
    pub(crate) fn has_victim_below(&self, index: u16) -> bool {
        let p = self.ranks[self.rank(index)].priority;
        self.ranks
            .iter()
            // Acquire: as in `ahead_of`.
            .any(|k| k.priority < p && k.queued.load(Acquire) != 0)
    }

    /// Whether a waiter or no-wait cell may need a pass (a release's question, after it
    /// returned its class's units).
    #[inline]
    pub(crate) fn has_pending(&self) -> bool {
        // SeqCst: see `entered`.
        self.pending.load(SeqCst) != 0
    }

    /// Whether, in dimension `d` under `limit`, the shared units are gone but the priority
    /// reserve is not, and rank `r` may not take it (a refusal's constraint is the reserve).
    pub(crate) fn only_reserve_left(&self, r: usize, d: usize, limit: Word) -> bool {
        if self.may_reserve(r) || self.reserve_of(d) == 0 {
            return false;
        }
        let with_reserve = limit.saturating_sub(self.floors[d]);
        // SeqCst: as in `verdict`.
        self.shared_used[d].load(SeqCst) < with_reserve
    }

    /// Whether this bulkhead has a rate dimension now (then every decision goes through the
    /// pass: the fast floor path is off).
    #[inline]
    pub(crate) fn has_rates(&self) -> bool {
        // Acquire: pairs with `set_rates`'s Release.
        self.rated.load(Acquire) != 0
    }

    /// Rate `d`'s `(t, tau)`, one setting's pair (the sequence lock's read side: every access
    /// SeqCst, so a pair read between the writer's two `rate_gen` steps is seen as torn).
    fn rate_params(&self, d: usize) -> (u64, u64) {
        let g = &self.rates[d];
        loop {
            let before = self.rate_gen.load(SeqCst);
            let t = g.t.load(SeqCst) as u64;
            let tau = g.tau.load(SeqCst) as u64;
            if before & 1 == 0 && self.rate_gen.load(SeqCst) == before {
                return (t, tau);
            }
            crate::sync::spin_wait();
        }
    }

    /// Every rate's `(t, tau)` now (`(0, 0)`: none).
    pub(crate) fn rate_params_now(&self) -> [(u64, u64); DIMS] {
        [self.rate_params(0), self.rate_params(1)]
    }

    /// Installs each rate's `(t, tau)` (`(0, 0)`: none; validated by the caller, see
    /// [`rate_params_of`]; docs/design.md §4.9). The caller holds the engine's run flag (the
    /// one writer; no pass decides meanwhile). A rate keeps its TAT across a change; a rate
    /// that goes forgets it, so one set again starts with its whole burst.
    pub(crate) fn set_rate_params(&self, params: [(u64, u64); DIMS]) {
        // SeqCst: the sequence lock's write side (see `rate_params`).
        self.rate_gen.fetch_add(1, SeqCst);
        for (g, (t, tau)) in self.rates.iter().zip(params) {
            g.t.store(t as Word, SeqCst);
            g.tau.store(tau as Word, SeqCst);
            if t == 0 {
                // Relaxed: dispatcher-only (the caller holds the run flag).
                g.tat.store(0, Relaxed);
            }
        }
        self.rate_gen.fetch_add(1, SeqCst);
        let on = params.iter().any(|&(t, _)| t != 0);
        // Release: see `has_rates`.
        self.rated.store(Word::from(on), Release);
    }

    /// The rates' verdict for one request of cost `c` at `now` (dispatcher): `Ok` with the TATs
    /// to commit if it is granted, or `Err(the earliest time it conforms)` (`u64::MAX`: never).
    pub(crate) fn rate_check(&self, c: Word, now: u64) -> Result<[u64; DIMS], u64> {
        let mut tats = [0u64; DIMS];
        let mut retry = 0u64;
        for (d, n) in [1u64, c as u64].into_iter().enumerate() {
            let p = self.rate_params(d);
            if p.0 == 0 {
                continue;
            }
            match self.rates[d].check(p, n, now) {
                Ok(t) => tats[d] = t,
                Err(at) => retry = retry.max(at),
            }
        }
        if retry == 0 { Ok(tats) } else { Err(retry) }
    }

    /// A granted request's rate charge (dispatcher, after the grant CAS won).
    pub(crate) fn rate_commit(&self, tats: [u64; DIMS]) {
        for (d, t) in tats.into_iter().enumerate() {
            if self.rate_params(d).0 != 0 {
                // Relaxed: dispatcher-only.
                self.rates[d].tat.store(t as Word, Relaxed);
            }
        }
    }

    /// Whether `c` units (and one request) can never conform: above a rate's burst.
    pub(crate) fn rate_never(&self, c: Word) -> bool {
        self.has_rates()
            && [1u64, c as u64].into_iter().enumerate().any(|(d, n)| {
                let (t, tau) = self.rate_params(d);
                t != 0 && n != 0 && n.checked_mul(t).is_none_or(|x| x > tau)
            })
    }

    /// The dispatcher records when the earliest rate-held head conforms (0: none).
    pub(crate) fn set_retry_at(&self, at: u64) {
        // Release: read by the host's `rate_retry_after`.
        self.retry_at.store(at as Word, Release);
    }

    /// When the earliest rate-held head conforms (host clock ns), if one is held.
    pub(crate) fn retry_at(&self) -> Option<u64> {
        // Acquire: see `set_retry_at`.
        let at = self.retry_at.load(Acquire) as u64;
        (at != 0).then_some(at)
    }

    /// Rank `r` returns `n` (a release, or a lost grant undone): before the permits go back.
    pub(crate) fn give(&self, r: usize, n: [Word; DIMS]) {
        let rank = &self.ranks[r];
        for (d, &n) in n.iter().enumerate() {
            if n == 0 {
                continue;
            }
            // SeqCst: see `has_pending`. Saturating: a hold returned to the wrong class (a
            // forgotten class-k call given back as class 0's) must not wrap the count.
            let prev =
                match rank.held[d].fetch_update(SeqCst, SeqCst, |h| Some(h.saturating_sub(n))) {
                    Ok(p) | Err(p) => p,
                };
            self.moved(r, d, prev, prev.saturating_sub(n));
        }
    }

    /// Shared units held, per dimension (stats).
    pub(crate) fn shared_used(&self, d: usize) -> Word {
        self.shared_used[d].load(Acquire)
    }

    /// The priority of class `index` (0 for a class the table does not have).
    pub(crate) fn priority(&self, index: u16) -> u8 {
        self.rank_of
            .get(index as usize)
            .map_or(0, |&r| self.ranks[r as usize].priority)
    }

    /// Class `index`'s figures now (`None` for an unknown class).
    pub(crate) fn stats(&self, index: u16) -> Option<crate::stats::ClassStats> {
        let r = &self.ranks[*self.rank_of.get(index as usize)? as usize];
        // Acquire: as in `verdict`.
        Some(crate::stats::ClassStats {
            class: r.index,
            priority: r.priority,
            floor: r.floor[0] as u64,
            ceiling: r.ceiling(0) as u64,
            in_flight: r.held[0].load(Acquire) as u64,
            budget_floor: r.floor[1] as u64,
            budget_ceiling: r.ceiling(1) as u64,
            budget_in_use: r.held[1].load(Acquire) as u64,
            queued: (r.queued.load(Acquire) as crate::sync::SWord).max(0) as u64,
            observe: {
                let b = r.observe.load(Relaxed);
                crate::observe::Observe::of(b & observe_bit(0) != 0, b & observe_bit(1) != 0)
            },
            observed: r.observed.load(Relaxed) as u64,
        })
    }

    // ----- the dispatcher's lists (run flag held) --------------------------------------------

    /// Runs `f` on the lists.
    ///
    /// # Safety
    /// The caller holds the engine's run flag (the only thread touching the lists).
    pub(crate) unsafe fn with_lists<R>(&self, f: impl FnOnce(&mut Lists) -> R) -> R {
        // SAFETY: the caller's run flag makes this the only access (see the type's `Sync`).
        self.lists.with_mut(|p| f(unsafe { &mut *p }))
    }
}

impl Lists {
    /// Threads cell `cell` (occupant `ticket`) onto rank `r`'s list; a stale entry of an
    /// earlier occupant of the cell (cancelled, its cell reused) leaves its list first.
    pub(crate) fn push(&mut self, cell: u32, ticket: Word, r: usize, nowait: bool) {
        if self.links[cell as usize].linked {
            self.unlink(cell);
        }
        let tail = self.ends[r].1;
        let mut link = Link {
            prev: tail,
            next: NIL,
            nw_prev: NIL,
            nw_next: NIL,
            ticket,
            linked: true,
            rank: r as u8,
            nowait,
        };
        if nowait {
            link.nw_next = self.nowait;
            if self.nowait != NIL {
                self.links[self.nowait as usize].nw_prev = cell;
            }
            self.nowait = cell;
        }
        self.links[cell as usize] = link;
        if tail == NIL {
            self.ends[r].0 = cell;
        } else {
            self.links[tail as usize].next = cell;
        }
        self.ends[r].1 = cell;
        self.nonempty |= 1 << r;
    }

    /// Takes cell `cell` off its lists (a no-op if it is not linked).
    pub(crate) fn unlink(&mut self, cell: u32) {
        let Link {
            prev,
            next,
            nw_prev,
            nw_next,
            linked,
            rank,
            nowait,
            ..
        } = self.links[cell as usize];
        if !linked {
            return;
        }
        let r = rank as usize;
        if prev == NIL {
            self.ends[r].0 = next;
        } else {
            self.links[prev as usize].next = next;
        }
        if next == NIL {
            self.ends[r].1 = prev;
        } else {
            self.links[next as usize].prev = prev;
        }
        if self.ends[r].0 == NIL {
            self.nonempty &= !(1 << r);
        }
        if nowait {
            if nw_prev == NIL {
                self.nowait = nw_next;
            } else {
                self.links[nw_prev as usize].nw_next = nw_next;
            }
            if nw_next != NIL {
                self.links[nw_next as usize].nw_prev = nw_prev;
            }
        }
        self.links[cell as usize] = UNLINKED;
    }

    /// The ranks whose lists hold entries (bit r).
    pub(crate) fn nonempty(&self) -> u64 {
        self.nonempty
    }

    fn entry(&self, cell: u32) -> Head {
        let l = &self.links[cell as usize];
        Head {
            cell,
            rank: l.rank as usize,
            ticket: l.ticket,
            nowait: l.nowait,
        }
    }

    /// The head entry of rank `r`, if any.
    pub(crate) fn head(&self, r: usize) -> Option<Head> {
        let cell = self.ends[r].0;
        (cell != NIL).then(|| self.entry(cell))
    }

    /// The youngest entry of rank `r`'s list, if any.
    pub(crate) fn tail(&self, r: usize) -> Option<Head> {
        let cell = self.ends[r].1;
        (cell != NIL).then(|| self.entry(cell))
    }

    /// The entry before `cell` in its list, if any.
    pub(crate) fn before(&self, cell: u32) -> Option<Head> {
        let prev = self.links[cell as usize].prev;
        (prev != NIL).then(|| self.entry(prev))
    }

    /// The first no-wait entry not decided yet, if any.
    pub(crate) fn nowait_head(&self) -> Option<Head> {
        (self.nowait != NIL).then(|| self.entry(self.nowait))
    }
}
