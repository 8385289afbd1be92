//! `hullguard fleet show POOL` (docs/design.md §16.8): a pool as Redis holds it — its limit,
//! what is used, and every holder with its block, want, share of the limit, generation and time
//! to expiry. The Rust, Python and Node `hullguard` commands parse their arguments here and
//! print what [`render`] returns; each reads `hg_stats` through its own Redis client (so the
//! command reaches Redis the way the services do).

use crate::{
    pool::{Dimension, Keys, PoolName},
    protocol::PoolStats,
};

/// The usage text.
pub const USAGE: &str = "\
usage: hullguard fleet show POOL [--budget] [--redis URL] [--json]

  show  one pool: its limit, what is used, every holder (block, want, share, generation,
        time to expiry), whether it is learning after Redis lost its state
  --budget  the pool's fleet budget (units) instead of its permits
  --redis  the Redis URL (default $HULLGUARD_REDIS_URL, else redis://127.0.0.1:6379/)
";

/// A parsed `hullguard fleet …` command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Show {
    /// The pool.
    pub pool: PoolName,
    /// The Redis URL.
    pub redis: String,
    /// Print JSON instead of a table.
    pub json: bool,
    /// Which lease table: the permits (default) or the budget (`--budget`).
    pub dimension: Dimension,
}

impl Show {
    /// The keys to read (`hg_stats`) for this command.
    pub fn keys(&self) -> Keys {
        self.pool.keys_of(self.dimension)
    }

    /// The report of `stats` (read from [`keys`](Self::keys)).
    pub fn render(&self, stats: &PoolStats) -> String {
        render_of(&self.pool, self.dimension, stats, self.json)
    }
}

/// Parses `args` (without the program name: `["fleet", "show", "llm"]`); `Err` is the message
/// to print with [`USAGE`] (exit status 2).
///
/// # Errors
/// A message naming what is wrong.
pub fn parse(args: &[String], default_redis: Option<String>) -> Result<Show, String> {
    let mut words = vec![];
    let mut redis = default_redis.unwrap_or_else(|| "redis://127.0.0.1:6379/".to_owned());
    let mut json = false;
    let mut dimension = Dimension::Permits;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--redis" => redis = it.next().ok_or("--redis needs a URL")?.clone(),
            "--json" => json = true,
            "--budget" => dimension = Dimension::Budget,
            s if s.starts_with("--") => return Err(format!("unknown option {s}")),
            s => words.push(s.to_owned()),
        }
    }
    match words.as_slice() {
        [f, show, pool] if f == "fleet" && show == "show" => Ok(Show {
            pool: PoolName::new(pool).map_err(|e| e.to_string())?,
            redis,
            json,
            dimension,
        }),
        [f, ..] if f == "fleet" => Err("expected: fleet show POOL".into()),
        _ => Err("expected: fleet show POOL".into()),
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The report of `stats` for `pool`'s permits: a table, or one JSON object (`--json`).
pub fn render(pool: &PoolName, s: &PoolStats, json: bool) -> String {
    render_of(pool, Dimension::Permits, s, json)
}

/// The report of `stats` for one lease table of `pool`: a table, or one JSON object.
pub fn render_of(pool: &PoolName, dimension: Dimension, s: &PoolStats, json: bool) -> String {
    let learning = s.now_ms < s.learn_until_ms;
    let (what, limit_word) = match dimension {
        Dimension::Permits => ("pool", "limit"),
        Dimension::Budget => ("budget of pool", "budget"),
    };
    if json {
        let holders: Vec<String> = s
            .holders
            .iter()
            .map(|h| {
                format!(
                    "{{\"holder\":{},\"generation\":{},\"held\":{},\"want\":{},\"expires_in_ms\":{}}}",
                    json_str(&h.holder),
                    h.generation,
                    h.held,
                    h.want,
                    h.expires_ms.saturating_sub(s.now_ms)
                )
            })
            .collect();
        return format!(
            "{{\"pool\":{},\"dimension\":\"{}\",\"exists\":{},\"limit\":{},\"used\":{},\"rev\":{},\"epoch_us\":{},\"learning\":{},\"want_sum\":{},\"holders\":[{}]}}\n",
            json_str(pool.as_str()),
            dimension.name(),
            s.limit.is_some(),
            s.limit.map_or("null".to_owned(), |l| l.to_string()),
            s.used,
            s.rev,
            s.epoch,
            learning,
            s.want_sum,
            holders.join(",")
        );
    }
    let Some(limit) = s.limit else {
        return format!(
            "{what} {pool}: no such pool in this Redis (nobody has opened it, or Redis lost its state)\n"
        );
    };
    let mut out = format!(
        "{what} {pool}: {limit_word} {limit} (rev {}), used {}, wanted {}, {} holder{}{}\n",
        s.rev,
        s.used,
        s.want_sum,
        s.holders.len(),
        if s.holders.len() == 1 { "" } else { "s" },
        if learning {
            format!(
                ", LEARNING for {:.1} s more (Redis lost its state: holders keep what they have, new ones wait)",
                (s.learn_until_ms - s.now_ms) as f64 / 1e3
            )
        } else {
            String::new()
        }
    );
    if s.holders.is_empty() {
        return out;
    }
    out.push_str(&format!(
        "  {:<44} {:>6} {:>6} {:>6} {:>20} {:>10}\n",
        "holder", "held", "want", "share", "generation", "expires in"
    ));
    let mut holders: Vec<_> = s.holders.iter().collect();
    holders.sort_by(|a, b| b.held.cmp(&a.held).then(a.holder.cmp(&b.holder)));
    for h in holders {
        let share = if limit == 0 {
            0.0
        } else {
            100.0 * h.held as f64 / limit as f64
        };
        let left = h.expires_ms.saturating_sub(s.now_ms);
        out.push_str(&format!(
            "  {:<44} {:>6} {:>6} {:>5.0}% {:>20} {:>8.1} s\n",
            h.holder,
            h.held,
            h.want,
            share,
            h.generation,
            left as f64 / 1e3
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::HolderInfo;

    fn stats() -> PoolStats {
        PoolStats {
            now_ms: 10_000,
            limit: Some(10),
            used: 7,
            epoch: 1,
            fence: 9,
            rev: 2,
            learn_until_ms: 0,
            want_sum: 9,
            holders: vec![
                HolderInfo {
                    holder: "a:1:x".into(),
                    generation: 8,
                    held: 2,
                    want: 3,
                    expires_ms: 12_500,
                },
                HolderInfo {
                    holder: "b:2:y".into(),
                    generation: 9,
                    held: 5,
                    want: 6,
                    expires_ms: 11_000,
                },
            ],
        }
    }

    #[test]
    fn the_table_shows_holders_by_block_with_shares_and_expiries() {
        let p = PoolName::new("llm").unwrap();
        let t = render(&p, &stats(), false);
        assert!(
            t.starts_with("pool llm: limit 10 (rev 2), used 7, wanted 9, 2 holders\n"),
            "{t}"
        );
        let rows: Vec<&str> = t.lines().skip(2).collect();
        assert!(rows[0].contains("b:2:y") && rows[0].contains("50%") && rows[0].contains("1.0 s"));
        assert!(rows[1].contains("a:1:x") && rows[1].contains("20%") && rows[1].contains("2.5 s"));
        let j = render(&p, &stats(), true);
        assert!(j.contains("\"holders\":[{\"holder\":\"a:1:x\",\"generation\":8,\"held\":2,\"want\":3,\"expires_in_ms\":2500}"), "{j}");
        let none = PoolStats {
            limit: None,
            holders: vec![],
            ..stats()
        };
        assert!(render(&p, &none, false).contains("no such pool"));
    }

    #[test]
    fn arguments_are_parsed_and_refused_clearly() {
        let a = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        let s = parse(&a("fleet show llm --redis redis://h:1/ --json"), None).unwrap();
        assert_eq!(
            (s.pool.as_str(), s.redis.as_str(), s.json),
            ("llm", "redis://h:1/", true)
        );
        assert_eq!(
            parse(&a("fleet show llm"), Some("redis://x/".into()))
                .unwrap()
                .redis,
            "redis://x/"
        );
        assert!(
            parse(&a("fleet show a{b}"), None)
                .unwrap_err()
                .starts_with("pool must be")
        );
        assert_eq!(
            parse(&a("fleet ls"), None).unwrap_err(),
            "expected: fleet show POOL"
        );
        assert_eq!(
            parse(&a("fleet show x --nope"), None).unwrap_err(),
            "unknown option --nope"
        );
        let b = parse(&a("fleet show llm --budget"), None).unwrap();
        assert_eq!(b.dimension, Dimension::Budget);
        assert_eq!(b.keys().0[0], "{hg:llm}:budget:cfg");
        assert!(
            b.render(&stats())
                .starts_with("budget of pool llm: budget ")
        );
        assert!(
            parse(&a("fleet show llm --json"), None)
                .unwrap()
                .render(&stats())
                .contains("\"dimension\":\"permits\"")
        );
    }
}
