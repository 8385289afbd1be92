//! The one observer of a Python bulkhead or registry (docs/design.md §8.2): breaker
//! transitions to `on_state_change(key, old, new)`, and — with `events=True` — the admission
//! events to the listeners of `bh.on(name, callback)` as dicts.
//!
//! "No listener, no cost": the core asks [`Observer::admission_events`] once, at construction.
//! Without `events=True` it is `false`, so no admission id is assigned, no clock is read and no
//! event is built on the plain path. With it, an event of a kind nobody listens to returns at
//! one atomic load (no dict built).
//!
//! Callbacks run with the GIL on the thread that committed the event, after the commit (the
//! core holds no lock of its own then). A callback that raises is reported to
//! `sys.unraisablehook` and counted (`listener_errors`); it never reaches the acquire, release
//! or report that fired it.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicU32, AtomicU64, Ordering::Relaxed},
};

use hullguard_core::{Event, Observer, event::EventKind};
use pyo3::{
    exceptions::{PyTypeError, PyValueError},
    prelude::*,
    types::PyDict,
};

use crate::{bulkhead::seconds, gateway::ClassNames, gateway::change_of, options::type_name};

fn ns(n: u64) -> f64 {
    seconds(std::time::Duration::from_nanos(n))
}

/// The observer: `on_state_change`, and the listeners per event kind.
pub(crate) struct PyObserver {
    on_state_change: Option<Py<PyAny>>,
    /// `events=True`: the core delivers admission events.
    admission: bool,
    /// (kind, callback), in registration order.
    listeners: Mutex<Vec<(EventKind, Py<PyAny>)>>,
    /// A bit per kind with at least one listener (the fast "nobody listens" check).
    mask: AtomicU32,
    /// Callbacks that raised.
    errors: AtomicU64,
    /// The class names of a classed bulkhead (for `class_name`).
    names: Mutex<Option<ClassNames>>,
}

impl PyObserver {
    /// The observer of a constructor: `on_state_change` (callable or `None`) and `events`
    /// (a `bool`). `None` when neither asks for one.
    pub(crate) fn from_args(
        on_state_change: Option<&Bound<'_, PyAny>>,
        events: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Arc<PyObserver>> {
        if let Some(v) = on_state_change
            && !v.is_callable()
        {
            let t = type_name(v);
            let msg = format!("on_state_change must be callable, not {t}");
            return Err(PyTypeError::new_err(msg));
        }
        let admission = match events {
            None => false,
            Some(e) if e.is_instance_of::<pyo3::types::PyBool>() => e.is_truthy()?,
            Some(e) => {
                let t = type_name(e);
                return Err(PyTypeError::new_err(format!(
                    "events must be a bool, not {t}"
                )));
            }
        };
        Ok(Arc::new(PyObserver {
            on_state_change: on_state_change.map(|v| v.clone().unbind()),
            admission,
            listeners: Mutex::new(Vec::new()),
            mask: AtomicU32::new(0),
            errors: AtomicU64::new(0),
            names: Mutex::new(None),
        }))
    }

    pub(crate) fn set_names(&self, names: ClassNames) {
        *self.names.lock().unwrap_or_else(|e| e.into_inner()) = Some(names);
    }

    /// Callbacks that raised so far.
    pub(crate) fn errors(&self) -> u64 {
        self.errors.load(Relaxed)
    }

    fn kind_arg(&self, name: &Bound<'_, PyAny>) -> PyResult<EventKind> {
        let s: String = name.extract().map_err(|_| {
            PyTypeError::new_err(format!("event must be a str, not {}", type_name(name)))
        })?;
        let kind = EventKind::ALL.into_iter().find(|k| k.name() == s);
        let names: Vec<&str> = EventKind::ALL.iter().map(|k| k.name()).collect();
        let kind = kind.ok_or_else(|| {
            PyValueError::new_err(format!("event must be one of {names:?}, got {s:?}"))
        })?;
        if kind != EventKind::StateChange && !self.admission {
            return Err(PyValueError::new_err(format!(
                "event {s:?} is an admission event: construct the bulkhead with events=True \
                 (without it the core builds no admission event: no listener, no cost)"
            )));
        }
        Ok(kind)
    }

    /// `on(name, callback)`.
    pub(crate) fn on(&self, name: &Bound<'_, PyAny>, callback: &Bound<'_, PyAny>) -> PyResult<()> {
        let kind = self.kind_arg(name)?;
        if !callback.is_callable() {
            let t = type_name(callback);
            return Err(PyTypeError::new_err(format!(
                "callback must be callable, not {t}"
            )));
        }
        let mut l = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
        l.push((kind, callback.clone().unbind()));
        self.mask.fetch_or(1 << kind as u32, Relaxed);
        Ok(())
    }

    /// `off(name, callback)`: removes the first registration of `callback` for `name`; whether
    /// there was one. The listeners are compared (`is`, then `==`) outside the lock: `==` runs
    /// Python code, which may fire an event (whose dispatch takes the lock) or switch threads.
    pub(crate) fn off(
        &self,
        name: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let kind = self.kind_arg(name)?;
        let py = callback.py();
        let candidates: Vec<Py<PyAny>> = {
            let l = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
            l.iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, cb)| cb.clone_ref(py))
                .collect()
        };
        let mut found = None;
        for cb in &candidates {
            let cb = cb.bind(py);
            if cb.is(callback) || cb.eq(callback)? {
                found = Some(cb.as_ptr());
                break;
            }
        }
        let Some(found) = found else { return Ok(false) };
        let removed = {
            let mut l = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
            // Removed meanwhile (by another `off`): nothing to remove.
            let Some(i) = l
                .iter()
                .position(|(k, cb)| *k == kind && cb.as_ptr() == found)
            else {
                return Ok(false);
            };
            let removed = l.remove(i);
            let mask = l.iter().fold(0u32, |m, (k, _)| m | 1 << *k as u32);
            self.mask.store(mask, Relaxed);
            removed
        };
        // Released after the lock (a decref may run Python code).
        drop(removed);
        drop(candidates);
        Ok(true)
    }

    fn report(&self, py: Python<'_>, e: PyErr, cb: &Bound<'_, PyAny>) {
        self.errors.fetch_add(1, Relaxed);
        e.write_unraisable(py, Some(cb));
    }

    fn class_name(&self, class: u16) -> Option<String> {
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        names.as_ref()?.get(usize::from(class))?.clone()
    }

    /// The event as a dict (docs/design.md §8.2; times in seconds).
    fn event_dict<'py>(&self, py: Python<'py>, event: &Event<'_>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("kind", event.name())?;
        d.set_item("key", event.key())?;
        if let Some(id) = event.id() {
            d.set_item("id", id)?;
        }
        if let Some(c) = event.class() {
            d.set_item("class", c)?;
            d.set_item("class_name", self.class_name(c))?;
        }
        match *event {
            Event::StateChange {
                old,
                new,
                generation,
                ..
            } => {
                d.set_item("old", old.as_str())?;
                d.set_item("new", new.as_str())?;
                d.set_item("generation", generation)?;
            }
            Event::Admit {
                revision,
                weight,
                cost,
                queued,
                decision_ns,
                wait_ns,
                ..
            } => {
                d.set_item("revision", revision)?;
                d.set_item("weight", weight)?;
                d.set_item("cost", cost)?;
                d.set_item("queued", queued)?;
                d.set_item("decision", ns(decision_ns))?;
                d.set_item("wait", ns(wait_ns))?;
            }
            Event::Reject {
                revision,
                reason,
                weight,
                cost,
                queued,
                decision_ns,
                wait_ns,
                ..
            } => {
                d.set_item("revision", revision)?;
                d.set_item("reason", reason.as_str())?;
                d.set_item("weight", weight)?;
                d.set_item("cost", cost)?;
                d.set_item("queued", queued)?;
                d.set_item("decision", ns(decision_ns))?;
                d.set_item("wait", ns(wait_ns))?;
            }
            Event::ObserveBypass {
                revision, reason, ..
            } => {
                d.set_item("revision", revision)?;
                d.set_item("reason", reason.as_str())?;
            }
            Event::Release {
                revision,
                weight,
                held,
                used,
                ended,
                ..
            } => {
                d.set_item("revision", revision)?;
                d.set_item("weight", weight)?;
                d.set_item("held", held)?;
                d.set_item("used", used)?;
                d.set_item("ended", ended)?;
            }
            Event::Usage {
                revision,
                used,
                held,
                overrun,
                change,
                cancel,
                ..
            } => {
                let (change, by) = change_of(change);
                d.set_item("revision", revision)?;
                d.set_item("used", used)?;
                d.set_item("held", held)?;
                d.set_item("overrun", overrun)?;
                d.set_item("change", change)?;
                d.set_item("by", by)?;
                d.set_item("cancel", cancel)?;
            }
            Event::Shed {
                revision,
                victim,
                victim_class,
                ..
            } => {
                d.set_item("revision", revision)?;
                d.set_item("victim", victim)?;
                d.set_item("victim_class", victim_class)?;
            }
            Event::Reconfigure {
                revision,
                limit,
                budget,
                observe,
                ..
            } => {
                d.set_item("revision", revision)?;
                d.set_item("limit", limit)?;
                d.set_item("budget", budget)?;
                d.set_item("observe", observe.as_str())?;
            }
            _ => {}
        }
        Ok(d)
    }

    fn dispatch(&self, py: Python<'_>, event: &Event<'_>) {
        let kind = event.kind();
        let callbacks: Vec<Py<PyAny>> = {
            let l = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
            l.iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, cb)| cb.clone_ref(py))
                .collect()
        };
        if callbacks.is_empty() {
            return;
        }
        let d = match self.event_dict(py, event) {
            Ok(d) => d,
            Err(e) => {
                self.errors.fetch_add(1, Relaxed);
                e.write_unraisable(py, None);
                return;
            }
        };
        for cb in callbacks {
            let cb = cb.bind(py);
            if let Err(e) = cb.call1((&d,)) {
                self.report(py, e, cb);
            }
        }
    }
}

impl Observer for PyObserver {
    /// `events=True` only: otherwise the plain path stays plain.
    fn admission_events(&self) -> bool {
        self.admission
    }

    fn on_event(&self, event: &Event<'_>) {
        let listened = self.mask.load(Relaxed) & (1 << event.kind() as u32) != 0;
        let state = match *event {
            Event::StateChange { key, old, new, .. } => Some((key, old, new)),
            _ => None,
        };
        if !listened && (state.is_none() || self.on_state_change.is_none()) {
            return;
        }
        Python::attach(|py| {
            // An event may be emitted while an exception is propagating (a `Permit` dropped
            // during unwinding releases, and its `release` event runs here): set the pending
            // error aside so a listener runs with a clean state (one that raises or returns
            // would otherwise clear it, and the caller gets `SystemError: error return without
            // exception set`), and restore it after.
            let pending = PyErr::take(py);
            if let (Some((key, old, new)), Some(cb)) = (state, &self.on_state_change) {
                let cb = cb.bind(py);
                if let Err(e) = cb.call1((key, old.as_str(), new.as_str())) {
                    self.report(py, e, cb);
                }
            }
            if listened {
                self.dispatch(py, event);
            }
            if let Some(e) = pending {
                e.restore(py);
            }
        });
    }
}
