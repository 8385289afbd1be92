//! The lease manager (docs/design.md §16.3): one holder's block lease as a transport-agnostic
//! state machine, in the caller's time (`now` is any monotonic [`Duration`]; tests pass virtual
//! time). Every binding drives the same machine: it asks [`poll`](LeaseManager::poll) what to
//! send, sends it through the user's Redis client, and hands the reply to
//! [`complete`](LeaseManager::complete); [`local_limit`](LeaseManager::local_limit) is the
//! block the local core may admit on.
//!
//! ```text
//! IDLE ──sync(generation 0)──▶ LEASED{generation, held, target, deadline} ──reply LOST──▶ LOST ──sync(generation 0)──▶ …
//!                         │  every beat, and when demand changes: sync(generation) renews, grows, shrinks
//!                         └─ now ≥ deadline with no renewal: EXPIRED (admits nothing; in flight runs on)
//! ```
//!
//! The design is Doorman's (youtube/doorman, `doc/design.md`: leases with a refresh interval,
//! clients reporting wants and haves, learning mode after the server loses its state); the
//! deadline rule is C42's (node-redlock#296, PR #274): validity counts from the moment the
//! request that obtained it was *sent*, minus a clock-drift allowance, never from a first attempt
//! nor from the reply. The server sets the expiry from its own `TIME` when it runs the call,
//! which is after the send, so the client always stops first.

use core::time::Duration;

use crate::protocol::{SetLimitReply, SyncArgs, SyncReply, SyncStatus};

/// What a holder does while Redis cannot be reached and its lease has run out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unreachable {
    /// Admit nothing (the default): the fleet limit is never exceeded by this process.
    #[default]
    FailClosed,
    /// Admit up to this many at once on local authority until Redis answers again: the fleet
    /// may then run up to `processes × share` over its limit — the user's choice.
    LocalShare(u64),
}

/// The lease's settings (validated by [`FleetConfig`](crate::FleetConfig)).
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseConfig {
    /// The lease's time to live.
    pub ttl: Duration,
    /// The renewal period (default `ttl / 3`).
    pub beat: Duration,
    /// Clock-rate allowance in parts per million of the TTL (default 10 000 = 1 %).
    pub drift_ppm: u64,
    /// A fixed allowance subtracted from every deadline (default 2 ms).
    pub margin: Duration,
    /// The shortest time between two syncs (default 5 ms): demand nudges are rate-limited to it.
    pub min_sync_interval: Duration,
    /// What to do while Redis is unreachable past the deadline.
    pub on_unreachable: Unreachable,
    /// The limit the pool starts with if this holder creates it.
    pub default_limit: u64,
    /// The most holders the pool admits.
    pub max_holders: u64,
    /// Replicated durability: after a sync that grew the block, `WAIT` for this many replicas
    /// before admitting on the growth (0: off, the default). A grant the primary had not
    /// replicated when it failed over is then never used.
    pub wait_replicas: u64,
    /// How long that `WAIT` may take.
    pub wait_timeout: Duration,
    /// The largest block this holder can install in its core (its permit word's range): the
    /// want is capped at it, so Redis never grants a block the core could not hold.
    pub max_block: u64,
}

impl LeaseConfig {
    /// The defaults for `ttl` and `default_limit`.
    pub fn new(ttl: Duration, default_limit: u64) -> Self {
        LeaseConfig {
            ttl,
            beat: ttl / 3,
            drift_ppm: 10_000,
            margin: Duration::from_millis(2),
            min_sync_interval: Duration::from_millis(5),
            on_unreachable: Unreachable::FailClosed,
            default_limit,
            max_holders: 10_000,
            wait_replicas: 0,
            wait_timeout: Duration::from_millis(100),
            max_block: u64::MAX,
        }
    }

    /// What is taken off a lease of `ttl`: `ttl × drift + margin`.
    pub fn allowance(&self, ttl: Duration) -> Duration {
        let drift = ttl.as_nanos() * u128::from(self.drift_ppm) / 1_000_000;
        Duration::from_nanos(u64::try_from(drift).unwrap_or(u64::MAX)) + self.margin
    }
}

/// The lease's state, as stats show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseState {
    /// No lease asked for yet (or the last grant came back too late and was given back).
    Idle,
    /// A valid lease.
    Leased,
    /// The server answered LOST (expired and reaped, or fenced): a new lease is on its way.
    Lost,
    /// The deadline passed with no renewal (Redis unreachable or slow).
    Expired,
    /// The pool has `max_holders` holders.
    Full,
}

impl LeaseState {
    /// The name every layer spells.
    pub const fn as_str(self) -> &'static str {
        match self {
            LeaseState::Idle => "idle",
            LeaseState::Leased => "leased",
            LeaseState::Lost => "lost",
            LeaseState::Expired => "expired",
            LeaseState::Full => "full",
        }
    }
}

/// What the local side looks like when the manager is polled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Demand {
    /// Permits in flight locally.
    pub in_flight: u64,
    /// Permits (weights) queued locally.
    pub queued: u64,
    /// Refusals for want of a block so far (a running total: the manager counts the change).
    pub refused_total: u64,
    /// The largest weight turned away since the last poll (a weighted request needs a block
    /// at least that large beside the work in flight).
    pub short_weight: u64,
}

/// A request to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `hg_sync`.
    Sync(SyncArgs),
    /// `hg_release` of this generation.
    Release {
        /// The generation to give back.
        generation: u64,
    },
    /// `hg_set_limit`.
    SetLimit {
        /// The fleet limit.
        limit: u64,
        /// Its revision.
        rev: u64,
    },
    /// `WAIT replicas timeout_ms` (replicated durability of a grown block).
    Replicate {
        /// Replicas to wait for.
        replicas: u64,
        /// The longest wait, ms.
        timeout_ms: u64,
    },
}

/// A reply, decoded (see [`protocol`](crate::protocol)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Of `hg_sync`.
    Sync(SyncReply),
    /// Of `hg_release`: freed, or `None` when fenced.
    Release(Option<u64>),
    /// Of `hg_set_limit`.
    SetLimit(SetLimitReply),
    /// Of `WAIT`: the replicas that acknowledged.
    Replicated(u64),
}

/// What [`LeaseManager::poll`] asks of the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poll {
    /// Send this now, then call [`complete`](LeaseManager::complete) with its reply.
    Send(Request),
    /// Nothing to send: poll again at this time (or sooner, on a nudge).
    Wait(Duration),
}

/// The fleet as the last reply showed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FleetView {
    /// The fleet limit (0 before the first reply).
    pub limit: u64,
    /// The pool state's epoch (0 before the first reply).
    pub epoch: u64,
    /// The limit's revision.
    pub rev: u64,
    /// Holders in the pool.
    pub holders: u64,
    /// Whether the pool is learning.
    pub learning: bool,
    /// Permits held across the pool.
    pub used: u64,
}

/// The lease manager's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseCounters {
    /// Syncs answered.
    pub syncs_total: u64,
    /// Calls that failed (transport or protocol errors).
    pub errors_total: u64,
    /// LOST answers.
    pub losses_total: u64,
    /// Deadlines passed with no renewal.
    pub expiries_total: u64,
    /// Grants that came back too late to use and were given back (C42).
    pub late_grants_total: u64,
    /// Releases the server fenced (the lease had already expired or been replaced).
    pub releases_fenced_total: u64,
    /// Changes of the pool's epoch seen (Redis lost its state: restart, failover, `FLUSHALL`).
    pub epoch_changes_total: u64,
    /// Growths `WAIT` did not see replicated in time (left unused until the next sync).
    pub unreplicated_total: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lease {
    generation: u64,
    held: u64,
    /// What may be admitted on: `held`, or less while a growth waits for its replicas.
    usable: u64,
    target: u64,
    deadline: Duration,
    renew_at: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pending {
    request: Request,
    sent: Duration,
}

/// One holder's lease (see the module docs). Not thread-safe by itself: a binding keeps it
/// behind its own lock and drives it from one task at a time.
#[derive(Debug)]
pub struct LeaseManager {
    cfg: LeaseConfig,
    holder: String,
    lease: Option<Lease>,
    state: LeaseState,
    pending: Option<Pending>,
    to_release: Option<u64>,
    limit_to_send: Option<(u64, u64)>,
    applied: Option<(u64, u64)>,
    fleet: FleetView,
    counters: LeaseCounters,
    failures: u32,
    last_error: Option<String>,
    last_sent: Option<Duration>,
    last_want: u64,
    last_refused: u64,
    peak: u64,
    nudged: bool,
    closed: bool,
    /// While a sync is out (and until one succeeds): the most the block may admit (what was
    /// reported busy).
    cap: Option<u64>,
    /// The largest weight turned away since the last sync was sent.
    short_weight: u64,
    /// A growth waits for its `WAIT` to be sent.
    replicate_pending: bool,
    /// Sync at the minimum interval (a new fleet limit).
    sync_soon: bool,
}

impl LeaseManager {
    /// A manager for `holder` (validated by the caller) with `cfg`, idle.
    pub fn new(holder: String, cfg: LeaseConfig) -> Self {
        LeaseManager {
            cfg,
            holder,
            lease: None,
            state: LeaseState::Idle,
            pending: None,
            to_release: None,
            limit_to_send: None,
            applied: None,
            fleet: FleetView::default(),
            counters: LeaseCounters::default(),
            failures: 0,
            last_error: None,
            last_sent: None,
            last_want: 0,
            last_refused: 0,
            peak: 0,
            nudged: false,
            closed: false,
            cap: None,
            short_weight: 0,
            replicate_pending: false,
            sync_soon: false,
        }
    }

    /// The settings.
    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    /// This holder's id.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The state at `now` (a lease past its deadline is `Expired`).
    pub fn state(&self, now: Duration) -> LeaseState {
        match self.lease {
            Some(l) if now >= l.deadline => LeaseState::Expired,
            _ => self.state,
        }
    }

    /// The fleet as last seen.
    pub fn fleet(&self) -> FleetView {
        self.fleet
    }

    /// The counters.
    pub fn counters(&self) -> LeaseCounters {
        self.counters
    }

    /// The last error a call ended with, until a sync succeeds.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// The generation of the lease held (0: none).
    pub fn generation(&self) -> u64 {
        self.lease.map_or(0, |l| l.generation)
    }

    /// The block the server counts for this holder (0 without a lease).
    pub fn held(&self) -> u64 {
        self.lease.map_or(0, |l| l.held)
    }

    /// The block this holder should converge to (its fair share under contention).
    pub fn target(&self) -> u64 {
        self.lease.map_or(0, |l| l.target)
    }

    /// Until when the lease admits (`None` without one).
    pub fn deadline(&self) -> Option<Duration> {
        self.lease.map(|l| l.deadline)
    }

    /// Whether Redis failed to answer since the last successful sync.
    pub fn unreachable(&self) -> bool {
        self.failures > 0
    }

    /// The permits the local core may admit on at `now`: the block (down to the target while
    /// it is above it) under a valid lease; the configured local share while Redis is
    /// unreachable past the deadline in `LocalShare` mode; else 0.
    pub fn local_limit(&self, now: Duration) -> u64 {
        match self.lease {
            Some(l) if now < l.deadline => l.usable.min(l.target).min(self.cap.unwrap_or(u64::MAX)),
            _ => match self.cfg.on_unreachable {
                Unreachable::LocalShare(k) if self.failures > 0 => k,
                _ => 0,
            },
        }
    }

    /// Until when admissions on the current block are allowed: the lease's deadline;
    /// `Duration::MAX` on a local share (no lease to outlive); `Duration::ZERO` with nothing.
    pub fn admit_until(&self, now: Duration) -> Duration {
        match self.lease {
            Some(l) if now < l.deadline => l.deadline,
            _ if self.local_limit(now) > 0 => Duration::MAX,
            _ => Duration::ZERO,
        }
    }

    /// Demand changed (a refusal or a queued waiter for want of a block): sync as soon as the
    /// minimum interval allows.
    pub fn nudge(&mut self) {
        self.nudged = true;
    }

    /// Asks to set the fleet limit to `limit` under revision `rev` (sent at the next poll, and
    /// sent again after the pool loses its state).
    pub fn set_limit(&mut self, limit: u64, rev: u64) {
        self.limit_to_send = Some((limit, rev));
    }

    /// Records a limit this process set through its own call (so it is set again after the
    /// pool loses its state), with the reply; the next sync goes out at once (at the minimum
    /// interval), to take the new limit's share.
    pub fn limit_applied(&mut self, limit: u64, rev: u64, reply: SetLimitReply) {
        self.applied = Some((limit, rev));
        self.sync_soon = true;
        if reply.rev >= self.fleet.rev {
            self.fleet.rev = reply.rev;
            self.fleet.limit = reply.limit;
        }
    }

    /// The request out (sent, not yet completed), if any.
    pub fn pending_request(&self) -> Option<&Request> {
        self.pending.as_ref().map(|p| &p.request)
    }

    /// Whether a request is out (sent, not yet completed).
    pub fn in_flight(&self) -> bool {
        self.pending.is_some()
    }

    /// What to send at `now`, given the local `demand`. Call it again after
    /// [`complete`](Self::complete), at the time a [`Poll::Wait`] names, or after a nudge.
    pub fn poll(&mut self, now: Duration, demand: Demand) -> Poll {
        if self.state == LeaseState::Leased && self.lease.is_some_and(|l| now >= l.deadline) {
            self.state = LeaseState::Expired;
            self.counters.expiries_total += 1;
        }
        self.short_weight = self.short_weight.max(demand.short_weight);
        if let Some(p) = &self.pending {
            return Poll::Wait(p.sent + self.cfg.ttl);
        }
        if self.closed {
            return Poll::Wait(Duration::MAX);
        }
        let request = if let Some(generation) = self.to_release.take() {
            Some(Request::Release { generation })
        } else if let Some((limit, rev)) = self.limit_to_send.take() {
            Some(Request::SetLimit { limit, rev })
        } else if self
            .lease
            .is_some_and(|l| l.usable < l.held && now < l.deadline && self.replicate_pending)
        {
            self.replicate_pending = false;
            Some(Request::Replicate {
                replicas: self.cfg.wait_replicas,
                timeout_ms: self.cfg.wait_timeout.as_millis() as u64,
            })
        } else {
            let due = self.sync_due(now, demand);
            if now >= due {
                Some(Request::Sync(self.sync_args(now, demand)))
            } else {
                let wake = match self.lease {
                    Some(l) if now < l.deadline => due.min(l.deadline),
                    _ => due,
                };
                return Poll::Wait(wake);
            }
        };
        let request = request.expect("set above");
        self.pending = Some(Pending {
            request: request.clone(),
            sent: now,
        });
        if matches!(request, Request::Sync(_)) {
            self.sync_soon = false;
            self.last_sent = Some(now);
            self.nudged = false;
            self.last_refused = demand.refused_total;
        }
        Poll::Send(request)
    }

    /// When the next sync is due.
    fn sync_due(&self, now: Duration, d: Demand) -> Duration {
        let Some(last) = self.last_sent else {
            return now;
        };
        // Failures back off: min_interval × 2^failures, at most one beat.
        let gap = if self.failures > 0 {
            let shift = self.failures.min(16);
            (self.cfg.min_sync_interval * (1u32 << shift)).min(self.cfg.beat)
        } else {
            self.cfg.min_sync_interval
        };
        let earliest = last + gap;
        if self.sync_soon {
            return earliest;
        }
        let due = match (self.state, self.lease) {
            (LeaseState::Full, _) => last + self.cfg.beat,
            (_, None) => earliest,
            (_, Some(l)) => {
                let want = self.want_of(d);
                let short = d.queued > 0 || d.refused_total > self.last_refused;
                let mut due = l.renew_at;
                if (short || self.nudged) && want > l.held {
                    // Asking for more: at once if the last answer gave all that was asked,
                    // else at a quarter beat — contended, or nothing was free (others give
                    // back at their beats; a closed holder's calls drain by its TTL).
                    let contended = l.target < self.last_want || l.held < self.last_want;
                    due = due.min(if contended {
                        last + (self.cfg.beat / 4).max(self.cfg.min_sync_interval)
                    } else {
                        earliest
                    });
                }
                if l.held > l.target && d.in_flight <= l.target {
                    // Above the share and drained to it: give the rest back now.
                    due = due.min(earliest);
                }
                due
            }
        };
        due.max(earliest)
    }

    /// The want to report: demand plus a quarter of headroom (at least 1 while busy), never
    /// below half the last reported want (so an idle holder gives its block back over a few
    /// beats, not at once), capped at the fleet limit.
    fn want_of(&self, d: Demand) -> u64 {
        let refused = d.refused_total.saturating_sub(self.last_refused);
        let demand = d.in_flight + d.queued + refused;
        let headroom = if demand == 0 { 0 } else { (demand / 4).max(1) };
        let heaviest = d.in_flight + d.short_weight.max(self.short_weight);
        let want = (demand + headroom).max(self.peak / 2).max(heaviest);
        let cap = if self.fleet.epoch == 0 {
            self.cfg.default_limit
        } else {
            self.fleet.limit
        };
        want.min(cap.max(d.in_flight)).min(self.cfg.max_block)
    }

    fn sync_args(&mut self, now: Duration, d: Demand) -> SyncArgs {
        let want = self.want_of(d);
        self.peak = want;
        self.last_want = want;
        // The heaviest refused weight stays asked for while anything is queued (a queued waiter
        // does not ask again): a partial grant must not make the next sync forget it.
        if d.queued == 0 {
            self.short_weight = 0;
        }
        // Redis may shrink the block to max(target, busy) while this request is on the wire,
        // and give the rest away: until a sync succeeds, admit no more than what is reported
        // as busy — the work in flight, or the block capped at the want, whichever is more.
        let busy = d.in_flight.max(self.local_limit(now).min(want));
        self.cap = Some(busy);
        let ttl_ms = self.cfg.ttl.as_millis() as u64;
        SyncArgs {
            holder: self.holder.clone(),
            generation: self.generation(),
            want,
            busy,
            has: self.held(),
            ttl_ms,
            default_limit: self.cfg.default_limit,
            learn_ms: ttl_ms,
            max_holders: self.cfg.max_holders,
        }
    }

    /// Hands the outcome of the request [`poll`](Self::poll) returned to the manager, at `now`
    /// (when the reply arrived). `Err` is a transport or protocol failure, with its message.
    /// A reply of the wrong kind counts as an error.
    pub fn complete(&mut self, now: Duration, outcome: Result<Reply, String>) {
        let Some(p) = self.pending.take() else {
            return;
        };
        match (p.request, outcome) {
            (Request::Sync(args), Ok(Reply::Sync(r))) => self.synced(p.sent, now, &args, r),
            (Request::Release { .. }, Ok(Reply::Release(freed))) => {
                if freed.is_none() {
                    self.counters.releases_fenced_total += 1;
                }
            }
            (Request::SetLimit { limit, rev }, Ok(Reply::SetLimit(r))) => {
                self.limit_applied(limit, rev, r);
            }
            (Request::Replicate { replicas, .. }, Ok(Reply::Replicated(n))) => {
                if n >= replicas {
                    if let Some(l) = &mut self.lease {
                        l.usable = l.held;
                    }
                } else {
                    // Not replicated in time: the growth stays unused until the next sync.
                    self.counters.unreplicated_total += 1;
                }
            }
            (Request::Replicate { .. }, Err(e)) => {
                // A WAIT that failed (or outlived the transport's timeout) is a growth not
                // known to be replicated, not Redis unreachable: it stays unused.
                self.counters.unreplicated_total += 1;
                self.last_error = Some(e);
            }
            (request, outcome) => {
                self.counters.errors_total += 1;
                self.failures = self.failures.saturating_add(1);
                self.last_error = Some(match outcome {
                    Err(e) => e,
                    Ok(other) => format!("a reply of the wrong kind: {other:?}"),
                });
                if let Request::SetLimit { limit, rev } = request {
                    // Sent again at the next poll (after the backoff of the syncs).
                    self.limit_to_send.get_or_insert((limit, rev));
                }
            }
        }
    }

    fn synced(&mut self, sent: Duration, now: Duration, args: &SyncArgs, r: SyncReply) {
        self.counters.syncs_total += 1;
        self.cap = None;
        self.failures = 0;
        self.last_error = None;
        if self.fleet.epoch != 0 && r.epoch != self.fleet.epoch {
            self.counters.epoch_changes_total += 1;
            // The pool lost its state: the limit this process set is gone with it.
            if let Some(a) = self.applied {
                self.limit_to_send.get_or_insert(a);
            }
        }
        if let Some((limit, rev)) = self.applied {
            if r.rev < rev {
                // The pool does not hold the revision this process set. Revisions never fall
                // within an epoch, so either it lost its state — also when this was the first
                // sync, which has no epoch to compare (the limit was applied through the
                // caller's own call before it: found by `make test` under a CPU hog, issue 21)
                // — or this reply left Redis before the set did. Send it again: a pool that
                // holds it refuses an equal revision, so at worst one command more.
                self.limit_to_send.get_or_insert((limit, rev));
            }
        }
        // A reply that left Redis before a newer limit this process applied (`limit_applied`)
        // must not put the older limit back (review finding: the ceiling rolled back and a
        // valid waiter was rejected); a new epoch resets the revisions.
        let older =
            (r.epoch == self.fleet.epoch || self.fleet.epoch == 0) && r.rev < self.fleet.rev;
        self.fleet = FleetView {
            limit: if older { self.fleet.limit } else { r.limit },
            epoch: r.epoch,
            rev: if older { self.fleet.rev } else { r.rev },
            holders: r.holders,
            learning: r.learning,
            used: r.used,
        };
        match r.status {
            SyncStatus::Ok => {
                let ttl = Duration::from_millis(r.ttl_ms);
                let deadline = (sent + ttl).saturating_sub(self.cfg.allowance(ttl));
                if deadline <= now {
                    // C42 step 4: obtained too late to use. Give the block back; nothing is
                    // admitted on it; waiters keep waiting for the next sync.
                    self.counters.late_grants_total += 1;
                    self.to_release = Some(r.generation);
                    self.lease = None;
                    self.state = LeaseState::Idle;
                } else {
                    // Replicated durability: a growth is used once `WAIT` confirms it.
                    let before = self
                        .lease
                        .filter(|l| l.generation == r.generation)
                        .map_or(0, |l| l.usable);
                    let usable = if self.cfg.wait_replicas > 0 && r.held > before {
                        self.replicate_pending = true;
                        before
                    } else {
                        r.held
                    };
                    self.lease = Some(Lease {
                        generation: r.generation,
                        held: r.held,
                        usable,
                        target: r.target,
                        deadline,
                        renew_at: sent + self.cfg.beat,
                    });
                    self.state = LeaseState::Leased;
                }
            }
            SyncStatus::Lost => {
                if args.generation != 0 {
                    self.counters.losses_total += 1;
                }
                self.lease = None;
                self.state = LeaseState::Lost;
            }
            SyncStatus::Full => {
                self.lease = None;
                self.state = LeaseState::Full;
            }
        }
    }

    /// The reply of the release [`close`](Self::close) returned: freed, or `None` when fenced.
    pub fn released(&mut self, freed: Option<u64>) {
        if freed.is_none() {
            self.counters.releases_fenced_total += 1;
        }
    }

    /// Stops: no more syncs; returns what to send last, if anything: with nothing in flight,
    /// the release of the lease (fenced: a lease that expired meanwhile frees nothing); with
    /// `in_flight` calls still running, a last sync that shrinks the block to them (so they
    /// stay counted) and lets the lease run out by its TTL.
    pub fn close(&mut self, in_flight: u64) -> Option<Request> {
        self.closed = true;
        self.state = LeaseState::Idle;
        let ttl_ms = self.cfg.ttl.as_millis() as u64;
        match self.lease.take() {
            Some(l) if in_flight > 0 => Some(Request::Sync(SyncArgs {
                holder: self.holder.clone(),
                generation: l.generation,
                want: 0,
                busy: in_flight,
                has: l.held,
                ttl_ms,
                default_limit: self.cfg.default_limit,
                learn_ms: ttl_ms,
                max_holders: self.cfg.max_holders,
            })),
            Some(l) => Some(Request::Release {
                generation: l.generation,
            }),
            None => self
                .to_release
                .take()
                .map(|generation| Request::Release { generation }),
        }
    }
}

#[cfg(test)]
mod tests;
