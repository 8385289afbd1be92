//! How a guarded call ended (docs/design.md §6.2): the one word both policies are fed.

/// How a guarded call ended, as the breaker and the adaptive limit see it.
///
/// | outcome | breaker | adaptive limit |
/// |---|---|---|
/// | `Success` | a success (resets the consecutive count; a half-open probe closes) | an RTT sample |
/// | `Failure` | a failure (may trip; a half-open probe re-opens) | a congestion signal, no RTT |
/// | `Ignored` | nothing (a half-open probe gives its slot back) | nothing |
///
/// `Ignored` is for cancellation and for hullguard's own rejections before the call started
/// (`concurrency_limit`, `queue_limit`, `key_limit`, `timeout`, `shutdown`, `circuit_open`,
/// `aborted`); `Failure` for `call_timeout` and any other error (in the HTTP integrations,
/// transport errors and 5xx). HTTP 429 is a failure for the adaptive limit and a success for the
/// breaker: record it with [`Outcome::Overload`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Outcome {
    /// The call completed normally.
    Success = 0,
    /// The call failed.
    Failure = 1,
    /// Counts nothing (cancellation, a rejection before the call started). The default of a
    /// permit dropped without an outcome.
    #[default]
    Ignored = 2,
    /// The upstream said "slow down" (HTTP 429): a success for the breaker, a failure for the
    /// adaptive limit.
    Overload = 3,
}

impl Outcome {
    /// `"success"`, `"failure"`, `"ignored"` or `"overload"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Ignored => "ignored",
            Outcome::Overload => "overload",
        }
    }

    /// The outcome with this code (`Outcome as u8`: 0 success, 1 failure, 2 ignored,
    /// 3 overload; the C ABI's `hg_outcome` numbers).
    pub const fn from_code(code: u8) -> Option<Outcome> {
        Some(match code {
            0 => Outcome::Success,
            1 => Outcome::Failure,
            2 => Outcome::Ignored,
            3 => Outcome::Overload,
            _ => return None,
        })
    }

    /// Parses [`as_str`](Self::as_str)'s spelling.
    pub fn parse(s: &str) -> Option<Outcome> {
        Some(match s {
            "success" => Outcome::Success,
            "failure" => Outcome::Failure,
            "ignored" => Outcome::Ignored,
            "overload" => Outcome::Overload,
            _ => return None,
        })
    }

    /// The outcome of an HTTP response by its status (docs/design.md §6, every HTTP integration uses
    /// this one rule): 5xx (and above) is a failure, 429 is overload, anything else a success. Transport
    /// errors are failures and cancellations ignored; those are not statuses.
    ///
    /// ```
    /// use hullguard_core::Outcome;
    /// assert_eq!(Outcome::for_http_status(503), Outcome::Failure);
    /// assert_eq!(Outcome::for_http_status(429), Outcome::Overload);
    /// assert_eq!(Outcome::for_http_status(404), Outcome::Success);
    /// ```
    pub const fn for_http_status(status: u16) -> Outcome {
        match status {
            429 => Outcome::Overload,
            500.. => Outcome::Failure,
            _ => Outcome::Success,
        }
    }

    /// What the breaker counts: `Overload` is a success for it.
    pub const fn for_breaker(self) -> Outcome {
        match self {
            Outcome::Overload => Outcome::Success,
            o => o,
        }
    }

    /// What the adaptive limit counts: `Overload` is a failure for it.
    pub const fn for_limit(self) -> Outcome {
        match self {
            Outcome::Overload => Outcome::Failure,
            o => o,
        }
    }
}
