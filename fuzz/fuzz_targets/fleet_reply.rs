//! The Redis reply parser of the fleet bulkhead (docs/design.md §16.2–16.3): the protocol's
//! decoders (`SyncReply::decode`, `SetLimitReply::decode`, `decode_release`,
//! `PoolStats::decode`) on arbitrary integers and fields — never a panic; what decodes
//! re-encodes to its input (up to the flags' normal form) with every count non-negative —
//! and the transport-agnostic core every binding drives (`FleetCore`: `step`, then
//! `complete` with the client's raw reply or `fail`), fed arbitrary replies of the right and
//! the wrong shapes, transport failures, clock jumps past deadlines, limit changes with their
//! replies, pool stats, admissions and a close with its releases. Whatever Redis answers, a
//! fail-closed process never admits past the block its lease holds nor past its deadline.
#![no_main]

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    time::Duration,
};

use arbitrary::{Result, Unstructured};
use hullguard_core::{Call, Clock, Decision, LimitsSnapshot, Request};
use hullguard_fleet::{
    FleetConfig, FleetCore, LeaseState, RawReply, Step,
    lease::Unreachable,
    options::FleetValue,
    pool::PoolName,
    protocol::{self, Field, PoolStats, SetLimitReply, SyncReply, SyncStatus},
};
use hullguard_fuzz::pick;
use libfuzzer_sys::fuzz_target;

const MS: u64 = 1_000_000;

#[derive(Default)]
struct VClock(AtomicU64);

impl Clock for VClock {
    fn now_ns(&self) -> u64 {
        self.0.load(SeqCst)
    }
}

fn int(u: &mut Unstructured<'_>) -> Result<i64> {
    Ok(match pick(u, &[6, 2, 1])? {
        0 => u.int_in_range(0..=12)?,
        1 => *u.choose(&[-1, -2, i64::MIN, i64::MAX, 1 << 53, (1 << 53) + 1, 1 << 32])?,
        _ => u.arbitrary()?,
    })
}

/// An `hg_sync` reply: mostly well formed (11 integers, a known status, plausible counts).
fn sync_ints(u: &mut Unstructured<'_>, generation: i64) -> Result<Vec<i64>> {
    if u.ratio(1, 8)? {
        let n = u.int_in_range(0..=13)?;
        return (0..n).map(|_| int(u)).collect();
    }
    let limit = u.int_in_range(0..=20)?;
    let held = u.int_in_range(0..=limit + 2)?;
    let mut v = vec![
        *u.choose(&[1, 1, 1, 0, 2])?,
        if u.ratio(3, 4)? {
            generation.max(1)
        } else {
            int(u)?
        },
        held,
        u.int_in_range(0..=held + 1)?,
        limit,
        *u.choose(&[1000, 1000, 10, 0, 20_000])?,
        *u.choose(&[5, 5, 5, 6, 0])?,
        u.int_in_range(0..=3)?,
        u.int_in_range(0..=4)?,
        u.int_in_range(0..=1)?,
        u.int_in_range(0..=limit + 2)?,
    ];
    if u.ratio(1, 8)? {
        let i = u.choose_index(v.len())?;
        v[i] = int(u)?;
    }
    Ok(v)
}

fn set_limit_ints(u: &mut Unstructured<'_>) -> Result<Vec<i64>> {
    if u.ratio(1, 6)? {
        let n = u.int_in_range(0..=4)?;
        return (0..n).map(|_| int(u)).collect();
    }
    Ok(vec![u.int_in_range(0..=1)?, int(u)?, int(u)?])
}

fn fields(u: &mut Unstructured<'_>) -> Result<Vec<Field>> {
    let holders = if u.ratio(1, 6)? {
        int(u)?
    } else {
        u.int_in_range(0..=3)?
    };
    let mut v: Vec<Field> = (0..8)
        .map(|_| int(u).map(Field::Int))
        .collect::<Result<_>>()?;
    v.push(Field::Int(holders));
    let n = if u.ratio(1, 6)? {
        u.int_in_range(0..=12)?
    } else {
        5 * holders.clamp(0, 3) as usize
    };
    for i in 0..n {
        v.push(if i % 5 == 0 || u.ratio(1, 16)? {
            Field::Text(u.arbitrary::<String>()?)
        } else {
            Field::Int(int(u)?)
        });
    }
    Ok(v)
}

/// The pure decoders: no panic; what decodes is what was sent.
fn decoders(u: &mut Unstructured<'_>) -> Result<()> {
    let v = sync_ints(u, 1)?;
    if let Ok(r) = SyncReply::decode(&v) {
        let status = match r.status {
            SyncStatus::Ok => 1,
            SyncStatus::Lost => 0,
            SyncStatus::Full => 2,
        };
        let back: Vec<i64> = [
            status,
            r.generation as i64,
            r.held as i64,
            r.target as i64,
            r.limit as i64,
            r.ttl_ms as i64,
            r.epoch as i64,
            r.rev as i64,
            r.holders as i64,
            i64::from(r.learning),
            r.used as i64,
        ]
        .to_vec();
        let mut want = v.clone();
        want[9] = i64::from(want[9] != 0);
        assert_eq!(back, want, "hg_sync {v:?} decoded as {r:?}");
    }
    let v = set_limit_ints(u)?;
    if let Ok(r) = SetLimitReply::decode(&v) {
        assert_eq!(
            [i64::from(r.applied), r.rev as i64, r.limit as i64],
            [i64::from(v[0] == 1), v[1], v[2]],
            "hg_set_limit {v:?}"
        );
    }
    let n = int(u)?;
    match protocol::decode_release(n) {
        Ok(None) => assert_eq!(n, -1),
        Ok(Some(f)) => assert_eq!(f as i64, n),
        Err(_) => assert!(n < -1),
    }
    let f = fields(u)?;
    if let Ok(s) = PoolStats::decode(&f) {
        assert_eq!(9 + 5 * s.holders.len(), f.len(), "{f:?}");
        assert!(s.used <= i64::MAX as u64 && s.holders.iter().all(|h| h.held <= i64::MAX as u64));
    }
    let _ = FleetCore::decode_pool_stats(&f).map_err(|e| e.to_string());
    Ok(())
}

/// A raw reply for `scalar` (an integer) or a list command: mostly of the right shape.
fn reply(
    u: &mut Unstructured<'_>,
    scalar: bool,
    function: &str,
    generation: i64,
) -> Result<RawReply> {
    let right = !u.ratio(1, 10)?;
    Ok(if scalar == right {
        RawReply::Int(match pick(u, &[3, 1])? {
            0 => u.int_in_range(-1..=3)?,
            _ => int(u)?,
        })
    } else if function == protocol::FN_SET_LIMIT {
        RawReply::Ints(set_limit_ints(u)?)
    } else {
        RawReply::Ints(sync_ints(u, generation)?)
    })
}

fn config(u: &mut Unstructured<'_>) -> Result<FleetConfig> {
    let mut c = FleetConfig::new(PoolName::new("fuzz").unwrap());
    let set = |c: &mut FleetConfig, name: &str, v: u64| {
        c.set(name, FleetValue::Int(v)).expect("in range");
    };
    set(&mut c, "max_concurrent", u.int_in_range(1..=20)?);
    if u.arbitrary()? {
        set(&mut c, "budget", u.int_in_range(1..=32)?);
    }
    if u.ratio(1, 4)? {
        set(&mut c, "local_share", u.int_in_range(1..=5)?);
    }
    if u.ratio(1, 4)? {
        set(&mut c, "wait_replicas", 1);
    }
    set(&mut c, "max_queue", u.int_in_range(0..=4)?);
    c.set("lease_ttl", FleetValue::Duration(Duration::from_secs(1)))
        .unwrap();
    c.validate().expect("a valid config");
    Ok(c)
}

fn drive(u: &mut Unstructured<'_>) -> Result<()> {
    let cfg = config(u)?;
    let clock = Arc::new(VClock(AtomicU64::new(1_000 * MS)));
    let core = FleetCore::new(&cfg, Some(clock.clone())).expect("a fleet core");
    let fail_closed = cfg.on_unreachable == Unreachable::FailClosed;
    let mut calls: Vec<Call<&hullguard_core::Bulkhead, 0>> = Vec::new();
    let mut generation = 1i64;
    let mut revision = 1u64;
    for _ in 0..u.int_in_range(0..=60)? {
        match pick(u, &[6, 3, 4, 2, 1, 1, 1])? {
            0 => match core.step() {
                Step::Send(cmd) => {
                    let _ = cmd.args();
                    match pick(u, &[8, 1])? {
                        0 => {
                            let r = reply(u, cmd.scalar_reply(), cmd.function, generation)?;
                            if let RawReply::Ints(v) = &r
                                && v.len() == 11
                                && v[0] == 1
                            {
                                generation = v[1];
                            }
                            core.complete(r);
                        }
                        _ => core.fail("fuzz: unreachable"),
                    }
                }
                Step::Wait(d) => {
                    if u.arbitrary()? {
                        let d = d.min(Duration::from_secs(5));
                        clock.0.fetch_add(d.as_nanos() as u64, SeqCst);
                    }
                }
                Step::Closed => break,
            },
            1 => {
                let ms = match pick(u, &[4, 1])? {
                    0 => u.int_in_range(0..=400)?,
                    _ => u.int_in_range(0..=5000)?,
                };
                clock.0.fetch_add(ms * MS, SeqCst);
            }
            2 => {
                let w = u.int_in_range(1..=4)?;
                let cost = if core.has_budget() {
                    u.int_in_range(0..=6)?
                } else {
                    0
                };
                let r = Request::new(w).cost(cost).no_wait();
                if let Decision::Granted(call) = core.bulkhead().admit(&r, None) {
                    calls.push(call);
                    let st = core.stats();
                    if fail_closed {
                        assert_eq!(
                            st.lease.state,
                            LeaseState::Leased,
                            "admitted without a lease: {st:?}"
                        );
                        assert!(
                            st.stats.active <= st.lease.held,
                            "admitted past the block: {st:?}"
                        );
                        if let (Some(b), Some(bl)) = (st.stats.budget, &st.budget_lease)
                            && cost > 0
                        {
                            assert_eq!(
                                bl.state,
                                LeaseState::Leased,
                                "units without a lease: {st:?}"
                            );
                            assert!(
                                b.in_use <= bl.held,
                                "admitted past the budget block: {st:?}"
                            );
                        }
                    }
                }
            }
            3 => {
                if !calls.is_empty() {
                    let i = u.choose_index(calls.len())?;
                    drop(calls.swap_remove(i));
                }
            }
            4 => {
                revision += u.int_in_range(0..=2)?;
                let mut snap = LimitsSnapshot::new(revision);
                if u.arbitrary()? {
                    snap = snap.limit(u.int_in_range(0..=25)?);
                }
                if u.arbitrary()? {
                    snap = snap.budget(u.int_in_range(0..=40)?);
                }
                if let Ok(cmds) = core.apply_limits(&snap) {
                    let n = if u.ratio(1, 8)? {
                        u.int_in_range(0..=3)?
                    } else {
                        cmds.len()
                    };
                    let replies = (0..n)
                        .map(|_| reply(u, false, protocol::FN_SET_LIMIT, generation))
                        .collect::<Result<Vec<_>>>()?;
                    let _ = core
                        .limits_applied(&snap, &replies)
                        .map_err(|e| e.to_string());
                }
            }
            5 => {
                let _ = core.pool_stats_command().args();
                let f = fields(u)?;
                let _ = FleetCore::decode_pool_stats(&f);
            }
            _ => {
                let st = core.stats();
                if fail_closed {
                    assert!(st.lease.local_limit <= st.lease.held, "{st:?}");
                }
            }
        }
    }
    core.close();
    drop(calls);
    while let Some(cmd) = core.release_command() {
        let r = reply(u, cmd.scalar_reply(), cmd.function, generation)?;
        core.released(&r);
        if u.ratio(1, 16)? {
            break;
        }
    }
    let _ = core.stats();
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = decoders(&mut u);
    let _ = drive(&mut u);
});
