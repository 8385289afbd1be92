//! The PyO3 extension `hullguard._native`: registration only. The public API is the
//! `hullguard` package (`python/hullguard/__init__.py`), which re-exports these classes. Every
//! decision is the core's (`hullguard-core`, see docs/design.md); this crate marshals.
//!
//! | module | what |
//! |---|---|
//! | `options` | options and arguments, read by walking the core's option table |
//! | `bulkhead` | `Bulkhead`: admission through the core's `Call` / `Waiter`, `async with bh:` |
//! | `awaitable` | `AcquireContext` (awaitable + async context manager), `DrainAwaitable` |
//! | `waiter` | the `Waker` that resolves an asyncio future |
//! | `queue_timers` | queue deadlines: one loop timer per thread's loop for every waiter |
//! | `deadline` | request deadlines: `deadline=`, the ambient `hullguard.deadline` budget |
//! | `permit` | `Permit`: one core `Call` |
//! | `policy` | `on_state_change`, outcomes, the `call_timeout` timer of `async with` |
//! | `registry` | `Registry`, `origin_key` |
//! | `gateway` | gateway admission: request arguments, the class table, results, rate timer |
//! | `events` | the observer: `on_state_change`, `on` / `off` listeners of the events |
//! | `errors`, `stats`, `guard` | exceptions and `REASONS`; the stats / drain dicts; `guard` |
//! | `metrics` | the metric table and samples for the exporters, `report_load`'s readings |
//! | `host` | `HostBulkhead`, `HostPermit` (Linux): one limit per host over `hullguard-host` |
//! | `fleet` | `_FleetBulkhead`, `_FleetCore`: one limit across hosts over `hullguard-fleet` (the driver is `hullguard/fleet.py`) |

mod awaitable;
mod bulkhead;
mod deadline;
mod errors;
mod events;
mod fleet;
mod gateway;
mod guard;
#[cfg(target_os = "linux")]
mod host;
mod metrics;
mod options;
mod permit;
mod policy;
mod queue_timers;
mod registry;
mod stats;
mod waiter;

use pyo3::prelude::*;

#[pymodule]
mod _native {
    #[pymodule_export]
    use crate::{
        awaitable::{AcquireContext, Done, DrainAwaitable, Ready},
        bulkhead::{Bulkhead, check_timeout},
        deadline::{check_deadline, enable_ambient_deadline, grpc_timeout, parse_grpc_timeout},
        metrics::metric_table,
        permit::Permit,
        policy::outcome_of_status,
        registry::{Registry, origin_key},
    };
    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("MAX_PERMITS", hullguard_core::MAX_PERMITS)?;
        m.add("MAX_QUEUE", hullguard_core::MAX_QUEUE)?;
        m.add("REASONS", crate::errors::reasons(m.py())?)?;
        let kinds: Vec<&str> = hullguard_core::EventKind::ALL
            .iter()
            .map(|k| k.name())
            .collect();
        m.add("EVENT_KINDS", kinds)?;
        m.add("MAX_BUDGET", hullguard_core::MAX_BUDGET)?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        crate::fleet::register(m)?;
        #[cfg(target_os = "linux")]
        crate::host::register(m)?;
        Ok(())
    }
}
