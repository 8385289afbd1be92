//! [`FleetCore`] (docs/design.md §16.4): what every binding drives — a core bulkhead in leased
//! mode, its lease manager, and the steps of the driver loop. A binding owns only the I/O: it
//! asks [`step`](FleetCore::step) what to send, sends the command through the Redis client the
//! user already has (redis-py sync or asyncio, ioredis, the `redis` crate, a C callback), hands
//! the reply to [`complete`](FleetCore::complete) (or the error to
//! [`fail`](FleetCore::fail)), and between steps parks in [`wait`](FleetCore::wait) (or on its
//! own waker, registered with [`register_demand`](FleetCore::register_demand)). Admissions go
//! straight to [`bulkhead`](FleetCore::bulkhead): the block, its deadline and the demand bell
//! live in the core, so they never wait for the driver.

use std::{
    sync::{
        Arc, Condvar, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering::*},
    },
    task::{Wake, Waker},
    time::Duration,
};

use hullguard_core::{
    Bulkhead, ClockSource, Config, LimitsSnapshot, clock::Clock, config::classes::ClassTable,
    event::SharedObserver,
};

use crate::{
    error::FleetError,
    lease::{Demand, LeaseManager, Poll, Reply, Request},
    options::FleetConfig,
    pool::{Dimension, Keys, PoolName, new_holder_id},
    protocol::{
        self, FN_RELEASE, FN_SET_LIMIT, FN_STATS, FN_SYNC, Field, PoolStats, SetLimitReply,
        SyncReply,
    },
    stats::{FleetStats, LeaseStats},
    transport::TransportError,
};

/// One command to send: `FCALL <function> 6 <keys…> <argv…>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The library function.
    pub function: &'static str,
    /// The keys of the lease table it runs on (the pool's permits or its budget: one slot).
    pub keys: Keys,
    /// Its arguments (after the keys).
    pub argv: Vec<String>,
}

impl Command {
    /// The whole command as strings, for a client's `execute_command(*args)` / `call(...args)`:
    /// `FCALL <function> 6 <keys…> <argv…>`, or `WAIT <replicas> <timeout_ms>`.
    pub fn args(&self) -> Vec<String> {
        if self.function == protocol::CMD_WAIT {
            let mut v = vec![protocol::CMD_WAIT.to_owned()];
            v.extend(self.argv.iter().cloned());
            return v;
        }
        protocol::fcall(self.function, &self.keys, &self.argv)
    }

    /// Whether the reply is one integer ([`RawReply::Int`]: `hg_release`, `WAIT`) rather than
    /// a list.
    pub fn scalar_reply(&self) -> bool {
        self.function == FN_RELEASE || self.function == protocol::CMD_WAIT
    }
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send this, then [`complete`](FleetCore::complete) or [`fail`](FleetCore::fail).
    Send(Command),
    /// Nothing to send: park for at most this long ([`wait`](FleetCore::wait)), then step.
    Wait(Duration),
    /// Closed: stop the loop (send [`close`](FleetCore::close)'s release first).
    Closed,
}

/// A reply as a client returns it: an integer, or a list of integers (`hg_stats` is read with
/// [`FleetCore::decode_pool_stats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawReply {
    /// A scalar reply.
    Int(i64),
    /// A list reply.
    Ints(Vec<i64>),
}

/// The bell the driver parks on: rung by the core when an admission finds the block short.
#[derive(Debug, Default)]
struct Bell {
    rung: Mutex<bool>,
    cv: Condvar,
}

impl Wake for Bell {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        *self.rung.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.cv.notify_all();
    }
}

/// What a fleet bulkhead keeps local (docs/design.md §16.10): its admission classes (they
/// partition this process's block, not the fleet's limit) and where its events go.
#[derive(Default)]
pub struct Local<'a> {
    /// The classes (validated against the config as a local bulkhead's are).
    pub classes: Option<&'a ClassTable<'a>>,
    /// Where the local core's events go.
    pub observer: Option<SharedObserver>,
}

/// The leases of a fleet bulkhead: its permits', and its budget's when it has one (two lease
/// tables of one pool, one hash tag).
struct Leases {
    permits: LeaseManager,
    budget: Option<LeaseManager>,
    /// The dimension whose release [`FleetCore::release_command`] handed out last.
    releasing: Option<Dimension>,
}

impl Leases {
    fn get_mut(&mut self, d: Dimension) -> Option<&mut LeaseManager> {
        match d {
            Dimension::Permits => Some(&mut self.permits),
            Dimension::Budget => self.budget.as_mut(),
        }
    }

    /// The dimension whose request is out, if any (the driver sends one at a time).
    fn pending(&self) -> Option<Dimension> {
        if self.permits.pending_request().is_some() {
            Some(Dimension::Permits)
        } else if self
            .budget
            .as_ref()
            .is_some_and(|b| b.pending_request().is_some())
        {
            Some(Dimension::Budget)
        } else {
            None
        }
    }

    /// Until when the local core may admit: the earlier of both leases' deadlines (past
    /// either, nothing is admitted).
    fn admit_until(&self, now: Duration) -> Duration {
        let p = self.permits.admit_until(now);
        self.budget
            .as_ref()
            .map_or(p, |b| p.min(b.admit_until(now)))
    }
}

/// A fleet bulkhead's state, shared by its admissions and its driver (see the module docs).
/// Thread-safe.
pub struct FleetCore {
    bulkhead: Arc<Bulkhead>,
    pool: PoolName,
    keys: Keys,
    budget_keys: Keys,
    holder: String,
    lease: Mutex<Leases>,
    bell: Arc<Bell>,
    bell_waker: Waker,
    closing: AtomicBool,
    /// The core's short-admission count the last step's poll saw.
    polled_shorts: AtomicU64,
    /// Until when (clock time) a wait ignores the bell: a bell-woken driver steps at most once
    /// per `min_sync_interval`, however fast refusals come.
    quiet_until: Mutex<Duration>,
    min_interval: Duration,
    /// The ceiling before the first reply tells the fleet limit (`max_concurrent`).
    default_ceiling: u64,
    /// The budget ceiling before the first reply tells the fleet budget (`budget`).
    default_budget: u64,
    /// The last plan's number (taken under the lease lock: plans are numbered in lease order).
    plan_seq: AtomicU64,
    /// The plan waiting to be installed (the newest one handed over).
    pending: Mutex<Option<Plan>>,
    /// Held while installing (`install`).
    installing: Mutex<()>,
    /// The newest plan installed (written under `installing`).
    installed_seq: AtomicU64,
}

/// What the local core enforces, as the leases say at one moment ([`FleetCore::plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    seq: u64,
    /// The permits' local limit (the block, or the local share).
    limit: u64,
    /// Until when the core admits (ns on its clock): the earlier of both leases' deadlines.
    until: u64,
    /// The fleet limit at the last reply (0: none yet) and whether the pool is learning.
    fleet_limit: u64,
    learning: bool,
    budget: Option<BudgetPlan>,
}

/// The budget's part of a [`Plan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BudgetPlan {
    units: u64,
    fleet_limit: u64,
    learning: bool,
}

impl std::fmt::Debug for FleetCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetCore")
            .field("pool", &self.pool)
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl FleetCore {
    /// A fleet bulkhead's state for `config` (validated), on `clock` (the host's monotonic
    /// clock when `None`; an injected one must never go backwards). Its block is empty until
    /// the driver's first sync.
    ///
    /// # Errors
    /// [`FleetError::Option`] naming a bad option.
    pub fn new(config: &FleetConfig, clock: Option<Arc<dyn Clock>>) -> Result<Self, FleetError> {
        Self::with_local(config, clock, Local::default())
    }

    /// [`new`](Self::new) with what stays local: admission classes (partitioning this
    /// process's block) and an observer for the local core's events.
    ///
    /// # Errors
    /// [`FleetError::Option`] naming a bad option; [`FleetError::Config`] for a class table
    /// the config does not allow.
    pub fn with_local(
        config: &FleetConfig,
        clock: Option<Arc<dyn Clock>>,
        local: Local<'_>,
    ) -> Result<Self, FleetError> {
        config.validate()?;
        // The core's own bound is the largest block its permit word holds: a class without a
        // ceiling of its own is then bounded by the block alone (review finding: it was capped
        // at `max_concurrent`, only what a new pool starts with). The ceiling that refuses a
        // weight follows the fleet limit (`set_lease_ceiling`).
        let max_block = if config.budget.is_some() {
            hullguard_core::MAX_CONCURRENT_WITH_BUDGET
        } else {
            hullguard_core::MAX_PERMITS
        };
        let core_config = Config {
            max_concurrent: max_block,
            max_queue: config.max_queue,
            queue_timeout: config.queue_timeout,
            start_limit: Some(0),
            // The local budget's bound is the largest block a lease may grant; the fleet
            // budget is its ceiling (`set_lease_budget_ceiling`).
            budget: config.budget.map(|_| hullguard_core::MAX_BUDGET),
            ..Config::DEFAULT
        };
        let clock = match clock {
            Some(c) => ClockSource::Shared(c),
            None => ClockSource::default_for_host(),
        };
        let bulkhead = match local.classes {
            Some(t) => Bulkhead::with_classes_and_observer(core_config, t, clock, local.observer),
            None => Bulkhead::with_observer(core_config, clock, local.observer, None),
        }
        .map_err(FleetError::Config)?;
        // After the core's own checks of the table (its messages first), what cannot be
        // local to a block.
        if let Some(t) = local.classes {
            check_local_classes(t)?;
        }
        bulkhead.set_lease_until(0);
        bulkhead.set_lease(0).map_err(FleetError::Config)?;
        bulkhead
            .set_lease_ceiling(config.max_concurrent.clamp(1, max_block))
            .map_err(FleetError::Config)?;
        if let Some(b) = config.budget {
            let ceiling = b.clamp(1, hullguard_core::MAX_BUDGET);
            bulkhead
                .set_lease_budget_ceiling(ceiling)
                .map_err(FleetError::Config)?;
            bulkhead.set_lease_budget(0).map_err(FleetError::Config)?;
        }
        let holder = new_holder_id(config.holder.as_deref());
        let bell = Arc::new(Bell::default());
        let leases = Leases {
            permits: LeaseManager::new(holder.clone(), config.lease()),
            budget: config
                .budget_lease()
                .map(|cfg| LeaseManager::new(holder.clone(), cfg)),
            releasing: None,
        };
        Ok(FleetCore {
            bulkhead: Arc::new(bulkhead),
            keys: config.pool.keys(),
            budget_keys: config.pool.keys_of(Dimension::Budget),
            pool: config.pool.clone(),
            lease: Mutex::new(leases),
            holder,
            bell_waker: Waker::from(bell.clone()),
            bell,
            closing: AtomicBool::new(false),
            polled_shorts: AtomicU64::new(0),
            quiet_until: Mutex::new(Duration::ZERO),
            min_interval: config.min_sync_interval,
            default_ceiling: config.max_concurrent.clamp(1, hullguard_core::MAX_PERMITS),
            default_budget: config
                .budget
                .unwrap_or(1)
                .clamp(1, hullguard_core::MAX_BUDGET),
            plan_seq: AtomicU64::new(0),
            pending: Mutex::new(None),
            installing: Mutex::new(()),
            installed_seq: AtomicU64::new(0),
        })
    }

    /// The local bulkhead: admit, acquire, stats — as a local bulkhead's. Its limit and
    /// deadline belong to the lease: do not change them (use [`apply_limits`](Self::apply_limits)
    /// for the fleet limit).
    pub fn bulkhead(&self) -> &Arc<Bulkhead> {
        &self.bulkhead
    }

    /// The pool.
    pub fn pool(&self) -> &PoolName {
        &self.pool
    }

    /// The pool's keys (of its permits).
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The keys of one dimension's lease table.
    pub fn keys_of(&self, dimension: Dimension) -> &Keys {
        match dimension {
            Dimension::Permits => &self.keys,
            Dimension::Budget => &self.budget_keys,
        }
    }

    /// Whether this fleet bulkhead leases a fleet budget too.
    pub fn has_budget(&self) -> bool {
        self.bulkhead.has_budget()
    }

    /// This process's holder id.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    fn lock(&self) -> MutexGuard<'_, Leases> {
        self.lease.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> Duration {
        Duration::from_nanos(self.bulkhead.now_ns())
    }

    fn demand(&self) -> Demand {
        let s = self.bulkhead.snapshot();
        Demand {
            in_flight: held_permits(&s),
            queued: s.queued,
            refused_total: self.bulkhead.lease_shorts(),
            short_weight: self.bulkhead.take_lease_short_weight(),
        }
    }

    /// The budget's demand, in units: held, queued, the admissions its block turned away, and
    /// the largest cost among them.
    fn budget_demand(&self) -> Demand {
        let b = self.bulkhead.stats().budget.unwrap_or_default();
        Demand {
            in_flight: held_units(&b),
            queued: b.queued_cost,
            refused_total: self.bulkhead.lease_budget_shorts(),
            short_weight: self.bulkhead.take_lease_short_cost(),
        }
    }

    /// Every admission either block (the permits', the budget's) turned away so far: what a
    /// driver parked on its own waker compares before and after a step, as
    /// [`wait`](Self::wait) does — a change is demand to step for.
    pub fn shorts_total(&self) -> u64 {
        self.bulkhead
            .lease_shorts()
            .wrapping_add(self.bulkhead.lease_budget_shorts())
    }

    /// Budget units held here (what a closing lease must keep counted).
    fn budget_in_use(&self) -> u64 {
        self.bulkhead.stats().budget.map_or(0, |b| held_units(&b))
    }

    /// What the leases say the local core enforces at `now` (under the lease lock): the
    /// block, the deadline (the earlier of both leases'), the fleet limit for the ceiling, and
    /// the budget's. [`install`](Self::install) puts it in the core after the lock is
    /// released.
    fn plan(&self, leases: &Leases, now: Duration) -> Plan {
        let lease = &leases.permits;
        let fleet = lease.fleet();
        Plan {
            seq: self.plan_seq.fetch_add(1, Relaxed) + 1,
            limit: lease.local_limit(now).min(self.bulkhead.max_lease()),
            until: ns(leases.admit_until(now)),
            fleet_limit: fleet.limit,
            learning: fleet.learning,
            budget: leases.budget.as_ref().map(|b| {
                let fleet = b.fleet();
                BudgetPlan {
                    units: b.local_limit(now).min(hullguard_core::MAX_BUDGET),
                    fleet_limit: fleet.limit,
                    learning: fleet.learning,
                }
            }),
        }
    }

    /// Installs `plan` in the core — outside the lease lock, since the core emits events
    /// (`reconfigure`, grants) while it installs and an observer may call back into this
    /// fleet bulkhead (`stats`, `apply_limits`, `close`): a review found the driver
    /// deadlocked by an observer that read `stats()`. Installs are serialised and never go
    /// backwards: a plan is handed to whoever is installing (this thread further up the
    /// stack, or another) and a plan older than the one installed is dropped.
    fn install(&self, plan: Plan) {
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            if pending.is_none_or(|p| p.seq < plan.seq) {
                *pending = Some(plan);
            }
        }
        loop {
            let _installing = match self.installing.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                // The installer picks the plan up before it stops.
                Err(std::sync::TryLockError::WouldBlock) => return,
            };
            loop {
                let next = self
                    .pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                let Some(p) = next else { break };
                if p.seq > self.installed_seq.load(Relaxed) {
                    self.installed_seq.store(p.seq, Relaxed);
                    self.install_now(&p);
                }
            }
            drop(_installing);
            // A plan handed over after the last look and before the unlock: install it too.
            if self
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_none()
            {
                return;
            }
        }
    }

    /// Installs a plan's block, deadline and ceilings: first the more restrictive of the old
    /// and the new block and deadline, then the new ones, so admissions never see more than
    /// either allows (a switch from an expired block to a local share, say). The ceiling —
    /// the largest weight that may wait — is the fleet limit (the budget's, the fleet budget).
    fn install_now(&self, plan: &Plan) {
        let (limit, until) = (plan.limit, plan.until);
        let (old_limit, old_until) = (self.bulkhead.limit(), self.bulkhead.lease_until());
        let _ = self.bulkhead.set_lease(limit.min(old_limit));
        if let Some(b) = plan.budget {
            let old = self.bulkhead.stats().budget.map_or(0, |s| s.limit);
            let _ = self.bulkhead.set_lease_budget(b.units.min(old));
        }
        self.bulkhead.set_lease_until(until.min(old_until));
        self.bulkhead.set_lease_until(until);
        if let Some(b) = plan.budget {
            let mut ceiling = if b.fleet_limit == 0 {
                self.default_budget
            } else {
                b.fleet_limit
            }
            .max(b.units)
            .clamp(1, hullguard_core::MAX_BUDGET);
            let current = self.bulkhead.lease_budget_ceiling();
            if b.learning {
                // As for the permits: never reject a waiter the real fleet budget allows.
                ceiling = ceiling.max(current.min(hullguard_core::MAX_BUDGET));
            }
            if ceiling != current {
                let _ = self.bulkhead.set_lease_budget_ceiling(ceiling);
            }
            let _ = self.bulkhead.set_lease_budget(b.units);
        }
        let max = self.bulkhead.max_lease();
        let mut ceiling = if plan.fleet_limit == 0 {
            self.default_ceiling
        } else {
            plan.fleet_limit
        }
        .max(limit)
        .clamp(1, max);
        if plan.learning {
            // A recreated pool starts at a default limit until the applied one is set again:
            // never reject a waiter the fleet's real limit allows meanwhile.
            ceiling = ceiling.max(self.bulkhead.max_concurrent().min(max));
        }
        if ceiling != self.bulkhead.max_concurrent() {
            let _ = self.bulkhead.set_lease_ceiling(ceiling);
        }
        let _ = self.bulkhead.set_lease(limit);
    }

    /// The driver's next step (it also installs what the lease says now: at a deadline, the
    /// block drops to 0).
    pub fn step(&self) -> Step {
        let mut leases = self.lock();
        if self.closing.load(Acquire) {
            return Step::Closed;
        }
        let now = self.now();
        self.polled_shorts.store(self.shorts_total(), Release);
        let demand = self.demand();
        let poll = leases.permits.poll(now, demand);
        // The budget's lease is polled too (a sync of the permits does not renew it); one
        // command goes out at a time, the permits' first.
        let permits_out = leases.permits.pending_request().is_some();
        let budget_poll = match leases.budget.as_mut() {
            Some(b) if !permits_out => Some(b.poll(now, self.budget_demand())),
            _ => None,
        };
        let plan = self.plan(&leases, now);
        drop(leases);
        self.install(plan);
        match (poll, budget_poll) {
            (Poll::Send(request), _) => Step::Send(self.command(Dimension::Permits, &request)),
            (_, Some(Poll::Send(request))) => Step::Send(self.command(Dimension::Budget, &request)),
            (Poll::Wait(at), Some(Poll::Wait(b))) => Step::Wait(at.min(b).saturating_sub(now)),
            (Poll::Wait(at), None) => Step::Wait(at.saturating_sub(now)),
        }
    }

    fn command(&self, dimension: Dimension, request: &Request) -> Command {
        let keys = self.keys_of(dimension).clone();
        match request {
            Request::Sync(args) => Command {
                function: FN_SYNC,
                keys,
                argv: args.argv(),
            },
            Request::Release { generation } => Command {
                function: FN_RELEASE,
                keys,
                argv: protocol::release_argv(&self.holder, *generation),
            },
            Request::SetLimit { limit, rev } => Command {
                function: FN_SET_LIMIT,
                keys,
                argv: protocol::set_limit_argv(*limit, *rev, *limit),
            },
            Request::Replicate {
                replicas,
                timeout_ms,
            } => Command {
                function: protocol::CMD_WAIT,
                keys,
                argv: vec![replicas.to_string(), timeout_ms.to_string()],
            },
        }
    }

    /// The reply to the command [`step`](Self::step) returned.
    pub fn complete(&self, reply: RawReply) {
        let mut leases = self.lock();
        let Some(d) = leases.pending() else { return };
        let Some(lease) = leases.get_mut(d) else {
            return;
        };
        let decoded = match lease.pending_request() {
            Some(r) => decode(r, &reply).map_err(|e| e.to_string()),
            None => return,
        };
        let now = self.now();
        lease.complete(now, decoded);
        let plan = self.plan(&leases, now);
        drop(leases);
        self.install(plan);
    }

    /// The command [`step`](Self::step) returned failed (Redis unreachable, an error reply).
    pub fn fail(&self, error: &str) {
        let mut leases = self.lock();
        let now = self.now();
        let d = leases.pending().unwrap_or(Dimension::Permits);
        if let Some(lease) = leases.get_mut(d) {
            lease.complete(now, Err(error.to_owned()));
        }
        let plan = self.plan(&leases, now);
        drop(leases);
        self.install(plan);
    }

    /// Registers a binding's own waker, woken once by the next admission the block turns away
    /// (see [`Bulkhead::register_lease_demand`]). [`wait`](Self::wait) does this itself.
    pub fn register_demand(&self, waker: &Waker) {
        self.bulkhead.register_lease_demand(waker);
    }

    /// Parks the calling thread for at most `timeout`, or until an admission finds the block
    /// short (at most once per `min_sync_interval`: a storm of refusals does not spin the
    /// driver), or [`close`](Self::close). Returns at once when the block turned admissions
    /// away since the last [`step`](Self::step). Blocking: call it without holding a runtime's
    /// lock (Python: GIL released).
    pub fn wait(&self, timeout: Duration) {
        let now = self.now();
        let quiet = {
            let q = self.quiet_until.lock().unwrap_or_else(|p| p.into_inner());
            q.saturating_sub(now)
        };
        if !quiet.is_zero() {
            // Recently woken by demand: only close (or the timeout) ends this park.
            let rung = self.bell.rung.lock().unwrap_or_else(|p| p.into_inner());
            let _ = self
                .bell
                .cv
                .wait_timeout_while(rung, quiet.min(timeout), |_| !self.closing.load(Acquire));
            return;
        }
        *self.bell.rung.lock().unwrap_or_else(|p| p.into_inner()) = false;
        // Not under the bell's lock: a registration that meets a concurrent ring wakes the
        // waker at once, and the waker takes that lock.
        self.bulkhead.register_lease_demand(&self.bell_waker);
        // Registered before this check: demand after it rings the bell.
        let demand = self.shorts_total() != self.polled_shorts.load(Acquire);
        let rung = self.bell.rung.lock().unwrap_or_else(|p| p.into_inner());
        if self.closing.load(Acquire) {
            return;
        }
        if !demand && !*rung {
            let (r, _) = self
                .bell
                .cv
                .wait_timeout_while(rung, timeout, |r| !*r && !self.closing.load(Acquire))
                .unwrap_or_else(|p| p.into_inner());
            if !*r {
                return;
            }
        } else {
            drop(rung);
        }
        *self.quiet_until.lock().unwrap_or_else(|p| p.into_inner()) =
            self.now() + self.min_interval;
    }

    /// The commands that set the fleet limit and/or the fleet budget under
    /// `snapshot.revision` (each lease table keeps its own revision), validated (only `limit`
    /// and `budget` may be set: the rest is per process): the limit's first. Send each, then
    /// hand the replies, in order, to [`limits_applied`](Self::limits_applied).
    ///
    /// # Errors
    /// [`FleetError::Option`] naming what is wrong.
    pub fn apply_limits(&self, snapshot: &LimitsSnapshot) -> Result<Vec<Command>, FleetError> {
        let bad = |option, message: &str| FleetError::Option {
            option,
            message: message.to_owned(),
        };
        if snapshot.budget.is_some() && !self.has_budget() {
            return Err(bad(
                "budget",
                "this fleet bulkhead has no fleet budget (open it with budget=…)",
            ));
        }
        if let Some(b) = snapshot.budget
            && !(1..=crate::options::MAX_FLEET_LIMIT).contains(&b)
        {
            return Err(bad("budget", "must be an integer in 1 ..= 2^32"));
        }
        if snapshot.max_queue.is_some()
            || snapshot.queue_timeout.is_some()
            || snapshot.queue_delay.is_some()
        {
            return Err(bad(
                "limits",
                "only the fleet limit can be applied to a fleet bulkhead",
            ));
        }
        if snapshot.limit.is_none() && snapshot.budget.is_none() {
            return Err(bad(
                "limit",
                "apply_limits on a fleet bulkhead sets the fleet limit or budget: give one",
            ));
        }
        if snapshot
            .limit
            .is_some_and(|l| l > crate::options::MAX_FLEET_LIMIT)
        {
            return Err(bad("limit", "must be an integer in 0 ..= 2^32"));
        }
        if self.has_budget()
            && snapshot
                .limit
                .is_some_and(|l| l > hullguard_core::MAX_CONCURRENT_WITH_BUDGET)
        {
            return Err(bad(
                "limit",
                "with a fleet budget must be an integer in 0 ..= 262143 (the permits share the core's word with the units)",
            ));
        }
        if snapshot.revision == 0 || snapshot.revision > protocol::MAX_EXACT {
            return Err(bad("revision", "must be an integer in 1 ..= 2^53 - 1"));
        }
        let set = |keys: &Keys, v: u64| Command {
            function: FN_SET_LIMIT,
            keys: keys.clone(),
            argv: protocol::set_limit_argv(v, snapshot.revision, v),
        };
        let mut out = Vec::new();
        if let Some(l) = snapshot.limit {
            out.push(set(&self.keys, l));
        }
        if let Some(b) = snapshot.budget {
            out.push(set(&self.budget_keys, b));
        }
        Ok(out)
    }

    /// The replies to [`apply_limits`](Self::apply_limits)'s commands, in their order, for
    /// `snapshot`: each remembered when applied (it is set again if the pool loses its
    /// state), and the driver is woken to sync under the new limits. After a failed send,
    /// hand it the replies received so far (a prefix): what they set is in force and kept.
    /// A revision already in force with the same value (a retry of the same update) counts as
    /// applied.
    ///
    /// # Errors
    /// [`FleetError::Transport`] for a reply of another shape, or more replies than commands.
    pub fn limits_applied(
        &self,
        snapshot: &LimitsSnapshot,
        replies: &[RawReply],
    ) -> Result<AppliedLimits, FleetError> {
        let dims: Vec<(Dimension, u64)> = [
            snapshot.limit.map(|l| (Dimension::Permits, l)),
            snapshot.budget.map(|b| (Dimension::Budget, b)),
        ]
        .into_iter()
        .flatten()
        .collect();
        if replies.len() > dims.len() {
            return Err(FleetError::Transport(TransportError::protocol(format!(
                "{} replies to {} hg_set_limit commands",
                replies.len(),
                dims.len()
            ))));
        }
        let mut out = AppliedLimits::default();
        for ((d, value), reply) in dims.into_iter().zip(replies) {
            let RawReply::Ints(v) = reply else {
                return Err(FleetError::Transport(TransportError::protocol(
                    "hg_set_limit answered a scalar",
                )));
            };
            let mut r = SetLimitReply::decode(v).map_err(|e| FleetError::Transport(e.into()))?;
            // A retry of the same update (this revision with this value is in force).
            r.applied |= r.rev == snapshot.revision && r.limit == value;
            if r.applied {
                let mut leases = self.lock();
                if let Some(lease) = leases.get_mut(d) {
                    lease.limit_applied(value, snapshot.revision, r);
                }
                // The new ceiling at once: a weight the new limit allows is valid now.
                let plan = self.plan(&leases, self.now());
                drop(leases);
                self.install(plan);
            }
            match d {
                Dimension::Permits => out.limit = Some(r),
                Dimension::Budget => out.budget = Some(r),
            }
        }
        self.bell_waker.wake_by_ref();
        Ok(out)
    }

    /// The read-only command that reads the pool (`hg_stats`); decode its reply with
    /// [`decode_pool_stats`](Self::decode_pool_stats).
    pub fn pool_stats_command(&self) -> Command {
        self.pool_stats_command_of(Dimension::Permits)
    }

    /// [`pool_stats_command`](Self::pool_stats_command) of one dimension's lease table.
    pub fn pool_stats_command_of(&self, dimension: Dimension) -> Command {
        Command {
            function: FN_STATS,
            keys: self.keys_of(dimension).clone(),
            argv: Vec::new(),
        }
    }

    /// Decodes `hg_stats`' reply.
    ///
    /// # Errors
    /// [`FleetError::Transport`] for another shape.
    pub fn decode_pool_stats(fields: &[Field]) -> Result<PoolStats, FleetError> {
        PoolStats::decode(fields).map_err(|e| FleetError::Transport(e.into()))
    }

    /// The local stats and the lease's.
    pub fn stats(&self) -> FleetStats {
        let stats = self.bulkhead.stats();
        let now = self.now();
        let leases = self.lock();
        let until = leases.admit_until(now);
        let budget = leases.budget.as_ref().map(|b| {
            let in_use = stats
                .budget
                .map_or(0, |s| s.in_use.saturating_add(s.overrun_held));
            self.lease_stats(b, now, until, in_use)
        });
        FleetStats {
            lease: self.lease_stats(&leases.permits, now, until, stats.active),
            budget_lease: budget,
            stats,
        }
    }

    /// One lease table's stats; `in_flight`: what this process holds of its dimension.
    fn lease_stats(
        &self,
        lease: &LeaseManager,
        now: Duration,
        until: Duration,
        in_flight: u64,
    ) -> LeaseStats {
        let fleet = lease.fleet();
        let local_limit = lease.local_limit(now);
        let covered = if until > now {
            local_limit.max(lease.held())
        } else {
            0
        };
        {
            LeaseStats {
                pool: self.pool.as_str().to_owned(),
                holder: self.holder.clone(),
                state: lease.state(now),
                generation: lease.generation(),
                held: lease.held(),
                share: lease.target(),
                local_limit,
                fleet_limit: fleet.limit,
                fleet_used: fleet.used,
                holders: fleet.holders,
                epoch: fleet.epoch,
                rev: fleet.rev,
                learning: fleet.learning,
                lease_left: lease.deadline().map(|d| d.saturating_sub(now)),
                unreachable: lease.unreachable(),
                last_error: lease.last_error().map(str::to_owned),
                unleased_in_flight: in_flight.saturating_sub(covered),
                counters: lease.counters(),
            }
        }
    }

    /// Closes: queued waiters are refused `shutdown` (calls in flight finish), the driver's
    /// next step is [`Step::Closed`] and its parked wait returns. Once the driver has stopped,
    /// send [`release_command`](Self::release_command)'s release. Idempotent.
    pub fn close(&self) {
        if self.closing.swap(true, AcqRel) {
            return;
        }
        self.bulkhead.close();
        self.bell_waker.wake_by_ref();
    }

    /// After [`close`](Self::close) and once the driver has stopped: the release of the lease
    /// to send (fenced: a lease that expired meanwhile frees nothing), once; then hand its
    /// reply to [`released`](Self::released).
    pub fn release_command(&self) -> Option<Command> {
        let mut leases = self.lock();
        let mut out = None;
        for d in [Dimension::Permits, Dimension::Budget] {
            let in_flight = match d {
                Dimension::Permits => held_permits(&self.bulkhead.snapshot()),
                Dimension::Budget => self.budget_in_use(),
            };
            if let Some(r) = leases.get_mut(d).and_then(|l| l.close(in_flight)) {
                leases.releasing = Some(d);
                out = Some(self.command(d, &r));
                break;
            }
        }
        let plan = self.plan(&leases, self.now());
        drop(leases);
        self.install(plan);
        out
    }

    /// The reply to [`release_command`](Self::release_command)'s command (a fenced release is
    /// counted in `releases_fenced_total`; a last sync's reply needs nothing). Then ask
    /// [`release_command`](Self::release_command) again: a fleet bulkhead with a budget has
    /// two leases to release.
    pub fn released(&self, reply: &RawReply) {
        if let RawReply::Int(n) = reply {
            let mut leases = self.lock();
            let d = leases.releasing.unwrap_or(Dimension::Permits);
            if let Some(l) = leases.get_mut(d) {
                l.released(protocol::decode_release(*n).ok().flatten());
            }
        }
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.closing.load(Acquire)
    }
}

/// Permits held here: in flight, and granted to waiters that have not taken them yet — Redis
/// must keep counting both (review finding: a grant not yet claimed was reported free, and
/// given to another process).
fn held_permits(s: &hullguard_core::Snapshot) -> u64 {
    u64::try_from((s.limit as i128 - i128::from(s.available)).max(0)).unwrap_or(u64::MAX)
}

/// Budget units held here: in use, granted to waiters not yet claimed, and grown past the
/// block by usage reports.
fn held_units(b: &hullguard_core::BudgetStats) -> u64 {
    b.in_use
        .saturating_add(b.granted_unclaimed)
        .saturating_add(b.overrun_held)
}

/// Refuses what of a class table cannot be local to a process's block: rates (each process
/// would refill its own), and floors without lending (under contention the block may stay
/// below the floors, and without lending the classes without a floor would get nothing even
/// while the block sits idle — a review finding). [`FleetCore::with_local`] checks it; a
/// binding may call it earlier, where it takes the table.
///
/// # Errors
/// [`FleetError::Option`] naming `rates` or `lending`.
pub fn check_local_classes(t: &ClassTable<'_>) -> Result<(), FleetError> {
    if t.rates.requests.is_some() || t.rates.units.is_some() {
        return Err(FleetError::Option {
            option: "rates",
            message: "class rates are not fleet-wide: each process would refill its own".into(),
        });
    }
    let floors = t
        .classes
        .iter()
        .any(|c| c.floor != 0 || c.budget_floor != 0);
    if floors && !t.lending {
        return Err(FleetError::Option {
            option: "lending",
            message: "class floors on a fleet bulkhead need lending=true: the block can stay \
                      below the floors under contention, and without lending the classes \
                      without a floor would get nothing while the floors sit idle"
                .into(),
        });
    }
    Ok(())
}

/// What [`FleetCore::limits_applied`] found: the reply of each lease table a limit was set
/// on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppliedLimits {
    /// The fleet limit's reply (`None`: not set).
    pub limit: Option<SetLimitReply>,
    /// The fleet budget's reply (`None`: not set).
    pub budget: Option<SetLimitReply>,
}

impl AppliedLimits {
    /// Whether every limit given was installed (none was refused as an older revision).
    pub fn applied(&self) -> bool {
        self.limit.is_none_or(|r| r.applied) && self.budget.is_none_or(|r| r.applied)
    }
}

/// Decodes a reply for the request it answers.
fn decode(request: &Request, reply: &RawReply) -> Result<Reply, TransportError> {
    Ok(match (request, reply) {
        (Request::Sync(_), RawReply::Ints(v)) => Reply::Sync(SyncReply::decode(v)?),
        (Request::Replicate { .. }, RawReply::Int(n)) => {
            Reply::Replicated(u64::try_from(*n).unwrap_or(0))
        }
        (Request::Release { .. }, RawReply::Int(n)) => {
            Reply::Release(protocol::decode_release(*n)?)
        }
        (Request::SetLimit { .. }, RawReply::Ints(v)) => Reply::SetLimit(SetLimitReply::decode(v)?),
        (r, other) => {
            return Err(TransportError::protocol(format!(
                "{other:?} does not answer {r:?}"
            )));
        }
    })
}
