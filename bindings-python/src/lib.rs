//! The PyO3 extension `hullguard._native`: registration only. The public API is the
//! `hullguard` package (`python/hullguard/__init__.py`), which re-exports these classes.
//!
//! | module | what |
//! |---|---|
//! | `bulkhead` | `Bulkhead`: argument conversion, `acquire_sync`, `try_acquire`, `drain_sync` |
//! | `awaitable` | `AcquireContext` (awaitable + async context manager), `DrainAwaitable` |
//! | `waiter` | the `Waker` that resolves an asyncio future; the queue-timeout timer |
//! | `permit` | `Permit` |
//! | `policy` | `resilience`, `on_state_change`, outcomes, `call_timeout`, `outcome_of_status` |
//! | `registry` | `Registry`, `origin_key` |
//! | `errors`, `stats` | error mapping; the stats / drain dicts |

mod awaitable;
mod bulkhead;
mod errors;
mod guard;
mod permit;
mod policy;
mod registry;
mod stats;
mod waiter;

use pyo3::prelude::*;

#[pymodule]
mod _native {
    #[pymodule_export]
    use crate::{
        awaitable::{AcquireContext, DrainAwaitable, Ready},
        bulkhead::Bulkhead,
        permit::Permit,
        policy::outcome_of_status,
        registry::{Registry, origin_key},
    };
    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("MAX_PERMITS", hullguard_core::MAX_PERMITS)?;
        m.add("MAX_QUEUE", hullguard_core::MAX_QUEUE)?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        Ok(())
    }
}
