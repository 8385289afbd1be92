//! Every option parser: the core's option table (`config::options`, what every binding parses
//! options through) in all four spellings, with each layer's number conversions
//! (`config::convert`: Python seconds, Node and C milliseconds, JS numbers for counts, C
//! integers), nulls and policy parts, two layers merged as a registry merges an override; the
//! class-table options (`config::class_options`); the host bulkhead's (`HostOptions::set`) and
//! the fleet bulkhead's (`FleetConfig::set`) tables, by either spelling. Arbitrary names and
//! values. Never a panic (error messages render too), every name found is found again by the
//! spelling it printed, and what a parser accepts the core builds: a configuration
//! `to_config` returns is a `Bulkhead` (and a `Registry`), a class table on it is either
//! refused with an error or admits each class, a host or fleet configuration that validates
//! gives its lease settings (and a fleet one an idle lease manager).
#![no_main]

use std::{sync::OnceLock, time::Duration};

use arbitrary::{Result, Unstructured};
use hullguard_core::{
    Bulkhead, ClockSource, Config, Decision, Registry, RegistryConfig, Request,
    config::{
        OptionSpec, Part, PartialConfig, Section, Spelling, Value,
        class_options::{self, CLASS_OPTIONS, ClassSection, ClassTableBuilder},
        convert,
        options::{self, Kind, OPTIONS},
    },
};
use hullguard_fleet::{
    FleetConfig,
    lease::{Demand, LeaseManager},
    options::{FLEET_OPTIONS, FleetKind, FleetValue},
    pool::PoolName,
};
use hullguard_fuzz::pick;
use hullguard_host::{HOST_OPTIONS, HostOptions, HostValue, options::HostKind};
use libfuzzer_sys::fuzz_target;

const SPELLINGS: [Spelling; 4] = [
    Spelling::Python,
    Spelling::Node,
    Spelling::C,
    Spelling::Vector,
];
const SECTIONS: [Section; 5] = [
    Section::Bulkhead,
    Section::Registry,
    Section::Adaptive,
    Section::Breaker,
    Section::Resilience,
];
const CLASS_SECTIONS: [ClassSection; 4] = [
    ClassSection::Class,
    ClassSection::Table,
    ClassSection::Reserve,
    ClassSection::Rate,
];
/// Strings a choice or a text option may get besides arbitrary ones.
const WORDS: [&str; 12] = [
    "gradient2",
    "aimd",
    "off",
    "concurrency",
    "budget",
    "all",
    "error",
    "adopt",
    "requests",
    "units",
    "",
    "Off",
];
/// The largest `max_queue` the target builds a bulkhead for (a 2^20-cell ring per input is
/// slow; the table's range is checked either way).
const BUILD_QUEUE: u64 = 4096;

/// A name: a known one in some spelling (often), with a byte changed (sometimes), or
/// arbitrary.
fn name(u: &mut Unstructured<'_>, known: &[String]) -> Result<String> {
    Ok(match pick(u, &[6, 1, 2])? {
        0 => u.choose(known)?.clone(),
        1 => {
            let mut s = u.choose(known)?.clone().into_bytes();
            if !s.is_empty() {
                let i = u.choose_index(s.len())?;
                s[i] = u.arbitrary()?;
            }
            String::from_utf8_lossy(&s).into_owned()
        }
        _ => u.arbitrary::<&str>()?.to_owned(),
    })
}

/// A number as a layer passes one: edges, small integers, arbitrary doubles and integers.
fn number(u: &mut Unstructured<'_>) -> Result<f64> {
    Ok(match pick(u, &[3, 2, 1, 1])? {
        0 => f64::from(u.int_in_range(0u32..=20)?),
        1 => *u.choose(&[
            0.0,
            -0.0,
            -1.0,
            0.5,
            1e-9,
            1e-12,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            9007199254740991.0,
            9007199254740992.0,
            1e300,
            f64::MAX,
            f64::MIN_POSITIVE,
            1_048_576.0,
            1_152_921_504_606_846_975.0,
        ])?,
        2 => f64::from_bits(u.arbitrary()?),
        _ => u.arbitrary::<i64>()? as f64,
    })
}

fn integer(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match pick(u, &[4, 2, 1])? {
        0 => u.int_in_range(0..=20)?,
        1 => *u.choose(&[
            u64::MAX,
            u64::MAX - 1,
            1 << 20,
            (1 << 20) + 1,
            (1 << 60) - 1,
            1 << 60,
            (1 << 53) - 1,
            (1 << 40) - 1,
            1 << 32,
            u64::from(u32::MAX),
            255,
            256,
        ])?,
        _ => u.arbitrary()?,
    })
}

/// A value for an option of `kind`, as one layer converts it: mostly of the right variant,
/// sometimes another.
fn value(u: &mut Unstructured<'_>, kind: Kind) -> Result<Option<Value>> {
    if u.ratio(1, 12)? {
        // The wrong variant (a layer's bug the table must refuse, not crash on).
        return Ok(Some(match u.int_in_range(0..=4)? {
            0 => Value::Count(integer(u)?),
            1 => Value::Duration(Duration::from_nanos(u.arbitrary()?)),
            2 => Value::Number(number(u)?),
            3 => Value::Bool(u.arbitrary()?),
            _ => Value::Choice(u.choose(&WORDS)?),
        }));
    }
    Ok(match kind {
        Kind::Count { .. } => match u.int_in_range(0..=2)? {
            0 => convert::count_in(i128::from(u.arbitrary::<i64>()?), kind).ok(),
            1 => convert::count_in(i128::from(integer(u)?), kind).ok(),
            _ => convert::count_from_f64(number(u)?, kind).ok(),
        }
        .map(Value::Count),
        Kind::Duration { .. } => match u.int_in_range(0..=2)? {
            0 => convert::duration_from_secs(number(u)?, kind).ok(),
            1 => convert::duration_from_millis(number(u)?, kind).ok(),
            _ => Some(match u.int_in_range(0..=2)? {
                0 => Duration::MAX,
                1 => Duration::ZERO,
                _ => Duration::from_nanos(u.arbitrary()?),
            }),
        }
        .map(Value::Duration),
        Kind::Number { .. } => Some(Value::Number(number(u)?)),
        Kind::Bool => Some(Value::Bool(u.arbitrary()?)),
        Kind::Choice(choices) => Some(Value::Choice(if u.ratio(1, 4)? {
            u.choose(&WORDS)?
        } else {
            u.choose(choices)?
        })),
    })
}

/// The core's table: every name in every spelling (for names), and one layer's options.
fn core_layer(u: &mut Unstructured<'_>, p: &mut PartialConfig, known: &[String]) -> Result<()> {
    for _ in 0..u.int_in_range(0..=12)? {
        match pick(u, &[8, 1, 2, 1])? {
            0 => {
                let section = *u.choose(&SECTIONS)?;
                let spelling = *u.choose(&SPELLINGS)?;
                let n = name(u, known)?;
                let Some(spec) = options::find(section, spelling, &n) else {
                    // The message of an unknown name renders.
                    let _ = options::known_names(section, spelling).to_string();
                    continue;
                };
                spelled_round_trip(spec);
                if let Some(v) = value(u, spec.kind)?
                    && let Err(e) = p.set(spec.id, v)
                {
                    let _ = (e.to_string(), e.spelled(spelling).to_string());
                }
            }
            1 => p.set_null(u.choose(&OPTIONS)?.id),
            2 => {
                let section = *u.choose(&[Section::Adaptive, Section::Breaker])?;
                let part = *u.choose(&[Part::Inherit, Part::On, Part::Off])?;
                p.set_part(section, part);
            }
            _ => p.set_null_part(*u.choose(&SECTIONS)?),
        }
    }
    Ok(())
}

/// A name found in a spelling is found again by what that spelling prints, and every
/// rendering of the row works.
fn spelled_round_trip(spec: &'static OptionSpec) {
    for s in SPELLINGS {
        let printed = spec.spelled(s).to_string();
        assert_eq!(
            options::find(spec.section, s, &printed).map(|o| o.id),
            Some(spec.id),
            "{printed:?} in {s:?}"
        );
        let _ = (spec.path(s).to_string(), spec.range(s).to_string());
    }
}

fn builds(c: &Config) {
    if c.max_queue <= BUILD_QUEUE {
        match Bulkhead::new(*c) {
            Err(e) => panic!("to_config returned a configuration the core refuses ({e}): {c:?}"),
            Ok(_) => {}
        }
    }
}

fn classes(u: &mut Unstructured<'_>, base: Config) -> Result<()> {
    static KNOWN: OnceLock<Vec<String>> = OnceLock::new();
    let known = KNOWN.get_or_init(|| {
        CLASS_OPTIONS
            .iter()
            .flat_map(|o| SPELLINGS.map(|s| o.spelled(s).to_string()))
            .collect()
    });
    let mut b = ClassTableBuilder::new();
    for _ in 0..u.int_in_range(0..=10)? {
        let section = *u.choose(&CLASS_SECTIONS)?;
        let spelling = *u.choose(&SPELLINGS)?;
        let n = name(u, known)?;
        let Some(spec) = class_options::find(section, spelling, &n) else {
            let _ = class_options::known_names(section, spelling);
            if u.ratio(1, 4)? {
                // A class name: arbitrary text.
                let index = usize::from(u.arbitrary::<u8>()?);
                let _ = b.set_name(index, &n).map_err(|e| e.to_string());
            }
            continue;
        };
        let _ = spec.range(spelling).to_string();
        let Some(v) = value(u, spec.kind)? else {
            continue;
        };
        let r = match section {
            ClassSection::Class => b.set(usize::from(u.arbitrary::<u8>()?), spec.id, v),
            ClassSection::Table | ClassSection::Reserve => b.set_table(spec.id, v),
            ClassSection::Rate => {
                let rate = if u.ratio(1, 8)? {
                    u.arbitrary::<&str>()?
                } else {
                    u.choose(&["requests", "units"])?
                };
                b.set_rate(rate, spec.id, v)
            }
        };
        let _ = r.map_err(|e| e.to_string());
    }
    if b.is_empty() || base.max_queue > BUILD_QUEUE {
        return Ok(());
    }
    let n = b.len();
    let table = b.table();
    let Ok(bh) = Bulkhead::with_classes(base, &table, ClockSource::None).map_err(|e| e.to_string())
    else {
        return Ok(());
    };
    // Every class admits (or refuses with a reason) and reads its stats.
    for c in 0..n.min(8) {
        let r = Request::new(1).class(c as u16).no_wait();
        let _held = match bh.admit(&r, None) {
            Decision::Granted(call) => Some(call),
            Decision::Rejected(e) => {
                let _ = e.to_string();
                None
            }
            Decision::Queued(_) => panic!("a no-wait request queued"),
        };
        assert!(bh.class_stats(c as u16).is_some(), "class {c} has no stats");
    }
    let _ = bh.stats().to_string();
    Ok(())
}

fn host(u: &mut Unstructured<'_>) -> Result<()> {
    static KNOWN: OnceLock<Vec<String>> = OnceLock::new();
    let known = KNOWN.get_or_init(|| {
        HOST_OPTIONS
            .iter()
            .flat_map(|o| [o.name.to_string(), hullguard_host::options::node_name(o)])
            .collect()
    });
    for o in HOST_OPTIONS {
        let n = hullguard_host::options::node_name(o);
        assert_eq!(HostOptions::find(&n).map(|f| f.name), Some(o.name));
    }
    let mut h = HostOptions::default();
    for _ in 0..u.int_in_range(0..=8)? {
        let n = name(u, known)?;
        let kind = HostOptions::find(&n).map(|o| o.kind);
        let text;
        let v = match (kind, u.ratio(1, 10)?) {
            (Some(HostKind::Int { .. }), false) => HostValue::Int(integer(u)?),
            (Some(HostKind::Duration { .. }), false) => {
                HostValue::Duration(Duration::from_millis(integer(u)?))
            }
            _ => {
                text = if u.arbitrary()? {
                    u.choose(&WORDS)?.to_string()
                } else {
                    u.arbitrary::<String>()?
                };
                HostValue::Str(&text)
            }
        };
        let _ = h.set(&n, v).map_err(|e| e.to_string());
    }
    let _ = h.validate().map_err(|e| e.to_string());
    Ok(())
}

fn fleet(u: &mut Unstructured<'_>) -> Result<()> {
    static KNOWN: OnceLock<Vec<String>> = OnceLock::new();
    let known = KNOWN.get_or_init(|| {
        FLEET_OPTIONS
            .iter()
            .flat_map(|o| [o.name.to_string(), hullguard_fleet::options::node_name(o)])
            .collect()
    });
    for o in FLEET_OPTIONS {
        let n = hullguard_fleet::options::node_name(o);
        assert_eq!(FleetConfig::find(&n).map(|f| f.name), Some(o.name));
    }
    let mut f = FleetConfig::new(PoolName::new("fuzz").unwrap());
    for _ in 0..u.int_in_range(0..=8)? {
        let n = name(u, known)?;
        let kind = FleetConfig::find(&n).map(|o| o.kind);
        let text;
        let v = match (kind, u.ratio(1, 10)?) {
            (Some(FleetKind::Int { .. }), false) => FleetValue::Int(integer(u)?),
            (Some(FleetKind::Duration { .. }), false) => {
                FleetValue::Duration(Duration::from_millis(u.int_in_range(0..=4_000_000)?))
            }
            _ => {
                text = u.arbitrary::<String>()?;
                FleetValue::Str(&text)
            }
        };
        let _ = f.set(&n, v).map_err(|e| e.to_string());
    }
    if f.validate().map_err(|e| e.to_string()).is_ok() {
        let lease = f.lease();
        let _ = f.budget_lease();
        let mut m = LeaseManager::new("fuzz:1:ab".into(), lease);
        let _ = m.poll(Duration::from_secs(1), Demand::default());
        let _ = m.local_limit(Duration::from_secs(1));
    }
    Ok(())
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    static KNOWN: OnceLock<Vec<String>> = OnceLock::new();
    let known = KNOWN.get_or_init(|| {
        OPTIONS
            .iter()
            .flat_map(|o| SPELLINGS.map(|s| o.spelled(s).to_string()))
            .collect()
    });
    // Two layers: the defaults and an override merged over them (a registry's key).
    let mut defaults = PartialConfig::new();
    let mut over = PartialConfig::new();
    core_layer(u, &mut defaults, known)?;
    core_layer(u, &mut over, known)?;
    let base = match defaults.to_config() {
        Ok(c) => {
            c.validate().expect("to_config validated it");
            builds(&c);
            c
        }
        Err(e) => {
            let _ = e.to_string();
            Config::DEFAULT
        }
    };
    if let Ok(c) = over.merged_over(&defaults).to_config() {
        builds(&c);
    }
    match RegistryConfig::from_partial(&defaults, vec![("k".into(), over)]) {
        Ok(rc) => {
            let small = rc.defaults.max_queue <= BUILD_QUEUE
                && rc.overrides.values().all(|c| c.max_queue <= BUILD_QUEUE);
            if small && let Err(e) = Registry::new(rc.clone()) {
                panic!("from_partial returned a registry the core refuses ({e}): {rc:?}");
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    classes(u, base)?;
    host(u)?;
    fleet(u)
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
});
