//! The wire protocol with the `hullguard` Functions library (`fleet/lua/hullguard.lua`,
//! docs/design.md §16.2): the arguments of each call and the decoding of each reply, once, for
//! every binding. A binding sends `FCALL <function> 6 <keys…> <args…>` through the Redis client
//! the user already has and hands the reply's integers back here.

use core::fmt;

use crate::pool::Keys;

/// The library's functions.
pub const FN_VERSION: &str = "hg_version";
/// Grows, shrinks and renews a holder's block.
pub const FN_SYNC: &str = "hg_sync";
/// Frees a holder's block (fenced by its generation).
pub const FN_RELEASE: &str = "hg_release";
/// Sets the pool's limit under a revision.
pub const FN_SET_LIMIT: &str = "hg_set_limit";
/// Reads the pool's state (read-only).
pub const FN_STATS: &str = "hg_stats";

/// Not a library function: Redis's own `WAIT replicas timeout_ms` (replicated durability).
pub const CMD_WAIT: &str = "WAIT";

/// The largest integer the library keeps exactly (Lua numbers are doubles).
pub const MAX_EXACT: u64 = (1 << 53) - 1;

/// The arguments of one `hg_sync`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncArgs {
    /// This process's holder id.
    pub holder: String,
    /// 0: ask for a new lease; else the generation this holder was given.
    pub generation: u64,
    /// Permits it would like to hold (demand and headroom).
    pub want: u64,
    /// Permits in flight here (never revoked).
    pub busy: u64,
    /// Permits it holds by its own account (trusted only while the pool is learning).
    pub has: u64,
    /// The lease's time to live, ms.
    pub ttl_ms: u64,
    /// The limit a new pool starts with (ignored once the pool exists).
    pub default_limit: u64,
    /// How long a pool that lost its state learns (ms): clients pass their TTL.
    pub learn_ms: u64,
    /// The most holders the pool admits.
    pub max_holders: u64,
}

impl SyncArgs {
    /// The `ARGV` of `FCALL hg_sync 6 <keys…> <ARGV…>`.
    pub fn argv(&self) -> Vec<String> {
        let mut v = vec![self.holder.clone()];
        v.extend(
            [
                self.generation,
                self.want,
                self.busy,
                self.has,
                self.ttl_ms,
                self.default_limit,
                self.learn_ms,
                self.max_holders,
            ]
            .map(|n| n.to_string()),
        );
        v
    }
}

/// A whole command: `FCALL <function> 6 <keys…> <argv…>` as strings.
pub fn fcall(function: &str, keys: &Keys, argv: &[String]) -> Vec<String> {
    let mut v = vec!["FCALL".to_owned(), function.to_owned(), "6".to_owned()];
    v.extend(keys.iter().map(str::to_owned));
    v.extend(argv.iter().cloned());
    v
}

/// How a sync ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncStatus {
    /// The lease is granted or renewed.
    Ok,
    /// The lease is gone (expired and reaped, or a stale generation): start a new one.
    Lost,
    /// The pool already has `max_holders` holders.
    Full,
}

/// The reply of one `hg_sync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncReply {
    /// How it ended.
    pub status: SyncStatus,
    /// The lease's generation (its fencing token); 0 unless `Ok`.
    pub generation: u64,
    /// The block now held.
    pub held: u64,
    /// The block this holder should converge to (its fair share under contention).
    pub target: u64,
    /// The pool's limit.
    pub limit: u64,
    /// The TTL the server set, ms.
    pub ttl_ms: u64,
    /// The pool state's epoch (server µs of its creation): a change means the state was lost.
    pub epoch: u64,
    /// The revision of the limit.
    pub rev: u64,
    /// Holders in the pool.
    pub holders: u64,
    /// Whether the pool is learning (after a state loss: nothing grows).
    pub learning: bool,
    /// Permits held across the pool.
    pub used: u64,
}

/// A reply that is not what the library sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unexpected reply from the hullguard library: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

fn nonneg(v: i64, what: &str) -> Result<u64, ProtocolError> {
    u64::try_from(v).map_err(|_| ProtocolError(format!("{what} = {v} (negative)")))
}

impl SyncReply {
    /// Decodes the reply's 11 integers.
    ///
    /// # Errors
    /// [`ProtocolError`] for another length, an unknown status or a negative count.
    pub fn decode(v: &[i64]) -> Result<Self, ProtocolError> {
        let [
            status,
            generation,
            held,
            target,
            limit,
            ttl,
            epoch,
            rev,
            holders,
            learning,
            used,
        ] = *v
        else {
            return Err(ProtocolError(format!(
                "hg_sync answered {} integers, not 11",
                v.len()
            )));
        };
        let status = match status {
            1 => SyncStatus::Ok,
            0 => SyncStatus::Lost,
            2 => SyncStatus::Full,
            s => return Err(ProtocolError(format!("hg_sync status {s}"))),
        };
        Ok(SyncReply {
            status,
            generation: nonneg(generation, "generation")?,
            held: nonneg(held, "held")?,
            target: nonneg(target, "target")?,
            limit: nonneg(limit, "limit")?,
            ttl_ms: nonneg(ttl, "ttl_ms")?,
            epoch: nonneg(epoch, "epoch")?,
            rev: nonneg(rev, "rev")?,
            holders: nonneg(holders, "holders")?,
            learning: learning != 0,
            used: nonneg(used, "used")?,
        })
    }
}

/// The `ARGV` of `hg_release`: the holder and its generation.
pub fn release_argv(holder: &str, generation: u64) -> Vec<String> {
    vec![holder.to_owned(), generation.to_string()]
}

/// The reply of `hg_release`: the permits freed, or `None` when fenced (the generation is not
/// the holder's: its lease expired, was reaped or renewed under a new one).
///
/// # Errors
/// [`ProtocolError`] below -1.
pub fn decode_release(v: i64) -> Result<Option<u64>, ProtocolError> {
    match v {
        -1 => Ok(None),
        n => nonneg(n, "freed").map(Some),
    }
}

/// The `ARGV` of `hg_set_limit`.
pub fn set_limit_argv(limit: u64, rev: u64, default_limit: u64) -> Vec<String> {
    vec![
        limit.to_string(),
        rev.to_string(),
        default_limit.to_string(),
    ]
}

/// The reply of `hg_set_limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetLimitReply {
    /// Whether this revision was installed (false: one as new or newer is in force).
    pub applied: bool,
    /// The revision in force.
    pub rev: u64,
    /// The limit in force.
    pub limit: u64,
}

impl SetLimitReply {
    /// Decodes `[applied, rev, limit]`.
    ///
    /// # Errors
    /// [`ProtocolError`] for another shape.
    pub fn decode(v: &[i64]) -> Result<Self, ProtocolError> {
        let [applied, rev, limit] = *v else {
            return Err(ProtocolError(format!(
                "hg_set_limit answered {} integers, not 3",
                v.len()
            )));
        };
        Ok(SetLimitReply {
            applied: applied == 1,
            rev: nonneg(rev, "rev")?,
            limit: nonneg(limit, "limit")?,
        })
    }
}

/// One field of a reply that mixes integers and strings (`hg_stats`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// An integer.
    Int(i64),
    /// A string (a holder id).
    Text(String),
}

/// One holder, as `hg_stats` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderInfo {
    /// Its id (`<host>:<pid>:<random>` for hullguard's clients).
    pub holder: String,
    /// Its lease's generation.
    pub generation: u64,
    /// Its block.
    pub held: u64,
    /// Its last reported want.
    pub want: u64,
    /// Server ms at which its lease expires.
    pub expires_ms: u64,
}

/// A pool's state, read by `hg_stats` (`hullguard fleet show`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStats {
    /// Server ms when read.
    pub now_ms: u64,
    /// The limit; `None` when the pool does not exist (yet, or any more).
    pub limit: Option<u64>,
    /// Permits held across the pool.
    pub used: u64,
    /// The state's epoch (server µs at its creation).
    pub epoch: u64,
    /// The last generation handed out.
    pub fence: u64,
    /// The limit's revision.
    pub rev: u64,
    /// Server ms until which the pool learns (0: not learning since creation).
    pub learn_until_ms: u64,
    /// Σ of the holders' wants.
    pub want_sum: u64,
    /// The holders.
    pub holders: Vec<HolderInfo>,
}

impl PoolStats {
    /// Decodes `[now, limit, used, epoch, fence, rev, learn_until, want_sum, n, (holder, generation,
    /// held, want, exp)*n]`.
    ///
    /// # Errors
    /// [`ProtocolError`] for another shape.
    pub fn decode(v: &[Field]) -> Result<Self, ProtocolError> {
        let int = |i: usize| -> Result<i64, ProtocolError> {
            match v.get(i) {
                Some(Field::Int(n)) => Ok(*n),
                other => Err(ProtocolError(format!("hg_stats field {i} is {other:?}"))),
            }
        };
        let u = |i: usize, what: &str| int(i).and_then(|n| nonneg(n, what));
        let n = u(8, "n")?;
        // The count is the server's (up to 2^63 - 1): the length it implies is computed
        // without overflow, so no count can pass for another length (found by fuzzing).
        let Some(n) = usize::try_from(n)
            .ok()
            .filter(|&n| n.checked_mul(5).and_then(|k| k.checked_add(9)) == Some(v.len()))
        else {
            return Err(ProtocolError(format!(
                "hg_stats answered {} fields for {n} holders",
                v.len()
            )));
        };
        let mut holders = Vec::with_capacity(n);
        for h in 0..n {
            let at = 9 + 5 * h;
            let holder = match &v[at] {
                Field::Text(s) => s.clone(),
                Field::Int(i) => i.to_string(),
            };
            holders.push(HolderInfo {
                holder,
                generation: u(at + 1, "generation")?,
                held: u(at + 2, "held")?,
                want: u(at + 3, "want")?,
                expires_ms: u(at + 4, "exp")?,
            });
        }
        let limit = int(1)?;
        Ok(PoolStats {
            now_ms: u(0, "now")?,
            limit: u64::try_from(limit).ok(),
            used: u(2, "used")?,
            epoch: u(3, "epoch")?,
            fence: u(4, "fence")?,
            rev: u(5, "rev")?,
            learn_until_ms: u(6, "learn_until")?,
            want_sum: u(7, "want_sum")?,
            holders,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_reply_decodes_and_refuses_other_shapes() {
        let r = SyncReply::decode(&[1, 7, 3, 2, 10, 1000, 5, 0, 2, 0, 6]).unwrap();
        assert_eq!(
            (r.status, r.generation, r.held, r.target, r.used),
            (SyncStatus::Ok, 7, 3, 2, 6)
        );
        assert!(SyncReply::decode(&[1, 2]).is_err());
        assert!(SyncReply::decode(&[9, 7, 3, 2, 10, 1000, 5, 0, 2, 0, 6]).is_err());
        assert!(SyncReply::decode(&[1, -7, 3, 2, 10, 1000, 5, 0, 2, 0, 6]).is_err());
        assert_eq!(decode_release(-1), Ok(None));
        assert_eq!(decode_release(4), Ok(Some(4)));
        assert!(decode_release(-2).is_err());
    }

    #[test]
    fn stats_decode_holders() {
        let mut v: Vec<Field> = [100, 10, 3, 1, 9, 0, 0, 4, 1].map(Field::Int).to_vec();
        v.push(Field::Text("h:1:ab".into()));
        v.extend([9, 3, 4, 1100].map(Field::Int));
        let s = PoolStats::decode(&v).unwrap();
        assert_eq!(s.holders[0].holder, "h:1:ab");
        assert_eq!((s.limit, s.holders[0].held), (Some(10), 3));
        v.pop();
        assert!(PoolStats::decode(&v).is_err());
    }

    /// Found by the `fleet_reply` fuzz target: a holder count whose implied length (`9 + 5 n`)
    /// overflows panicked (overflow checks on), or wrapped to the reply's real length and then
    /// asked `Vec::with_capacity` for 7.4·10^18 holders (capacity overflow: a panic in every
    /// binding's `pool_stats`). `0x6666666666666667 · 5 + 9` wraps to exactly 12.
    #[test]
    fn stats_decode_refuses_a_holder_count_whose_length_overflows() {
        let mut v: Vec<Field> = [100, 10, 3, 1, 9, 0, 0, 4, 0x6666_6666_6666_6667]
            .map(Field::Int)
            .to_vec();
        v.extend([1, 2, 3].map(Field::Int));
        assert!(PoolStats::decode(&v).is_err());
        v[8] = Field::Int(i64::MAX);
        assert!(PoolStats::decode(&v).is_err());
        v.truncate(9);
        assert!(PoolStats::decode(&v).is_err());
    }
}
