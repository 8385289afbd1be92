//! Gateway admission as Python meets it (docs/design.md §4.5–4.9, §5): the request's `cost`,
//! `admission_class` and `observe` arguments, the class table's constructor arguments
//! (`classes=`, `reserve=`, `lending=`, `shed=`, `rates=`, read by walking the core's
//! class-option table `config::class_options`), `apply_limits`' arguments, a rejection's
//! `detail` dict, the small result objects of `hullguard/_results.py` and the host's rate timer.
//! Every decision is the core's; this module converts arguments and results.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
};

use hullguard_core::{
    AcquireError, Bulkhead as CoreBulkhead, DimensionSnapshot, HoldChange, MAX_BUDGET, Observe,
    Rejection, RejectionDetail, Request, UsageReport, WouldAdmit,
    config::{
        PriorityReserve, Rates, Spelling,
        class_options::{self, ClassOptionId, ClassSection, ClassTableBuilder},
    },
};
use pyo3::{
    exceptions::{PyTypeError, PyValueError},
    intern,
    prelude::*,
    pybacked::PyBackedStr,
    sync::PyOnceLock,
    types::{PyBool, PyDict, PyInt, PyList, PyString, PyTuple},
};

use crate::{
    bulkhead::seconds,
    errors::acquire_err,
    options::{count_arg, timeout_arg, type_name, value},
};

const PY: Spelling = Spelling::Python;

/// The names of a classed bulkhead's classes, by index (`None`: unnamed).
pub(crate) type ClassNames = Arc<[Option<String>]>;

// ----- request arguments ---------------------------------------------------------------------

/// The keyword arguments every acquire takes beside `weight` and `timeout`.
#[derive(Clone, Copy, Default)]
pub(crate) struct Extra<'a, 'py> {
    pub(crate) cost: Option<&'a Bound<'py, PyAny>>,
    pub(crate) class: Option<&'a Bound<'py, PyAny>>,
    pub(crate) observe: Option<&'a Bound<'py, PyAny>>,
    /// `deadline=`: absolute seconds on the `time.monotonic()` scale (docs/design.md §5.9).
    pub(crate) deadline: Option<&'a Bound<'py, PyAny>>,
}

/// An `observe=` argument (`"off"`, `"concurrency"`, `"budget"`, `"all"`: the core's names).
pub(crate) fn observe_arg(v: &Bound<'_, PyAny>, name: &str) -> PyResult<Observe> {
    let s = v.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{name} must be one of {:?}, not {}",
            Observe::CHOICES,
            type_name(v)
        ))
    })?;
    let s = s.to_cow()?;
    Observe::parse(&s).ok_or_else(|| {
        PyValueError::new_err(format!(
            "{name} must be one of {:?}, got {s:?}",
            Observe::CHOICES
        ))
    })
}

/// An `admission_class=` argument: a class name (of `names`) or an index (`0..=65535`; the core
/// refuses an index the bulkhead does not have).
pub(crate) fn class_arg(v: &Bound<'_, PyAny>, names: &[Option<String>]) -> PyResult<u16> {
    if let Ok(s) = v.cast::<PyString>() {
        let s = s.to_cow()?;
        let found = names.iter().position(|n| n.as_deref() == Some(&*s));
        return found.map(|i| i as u16).ok_or_else(|| {
            let known: Vec<&str> = names.iter().flatten().map(String::as_str).collect();
            PyValueError::new_err(format!(
                "admission_class: unknown class {s:?} (known: {known:?}; or an index)"
            ))
        });
    }
    if !v.is_instance_of::<PyInt>() || v.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "admission_class must be a class name (str) or index (int), not {}",
            type_name(v)
        )));
    }
    let n = count_arg(v, "admission_class", 0, u64::from(u16::MAX))?;
    Ok(n as u16)
}

/// One acquire's request: `weight` permits (default 1, `1..=max_concurrent`), `cost` budget
/// units (default 0, `0..=MAX_BUDGET`; the core refuses a cost above the budget or without
/// one), its class and own observe mode, queued at most `timeout` seconds (`None`: the
/// bulkhead's `queue_timeout`), by its deadline: `deadline=` min'd with the ambient one of
/// `hullguard.deadline` (docs/design.md §5.9).
pub(crate) fn request(
    py: Python<'_>,
    max_concurrent: u64,
    names: &[Option<String>],
    weight: Option<&Bound<'_, PyAny>>,
    timeout: Option<&Bound<'_, PyAny>>,
    extra: Extra<'_, '_>,
) -> PyResult<Request> {
    let weight = weight.map_or(Ok(1), |w| count_arg(w, "weight", 1, max_concurrent))?;
    let mut r = Request::new(weight);
    if let Some(c) = extra.cost.filter(|c| !c.is_none()) {
        r = r.cost(count_arg(c, "cost", 0, MAX_BUDGET)?);
    }
    if let Some(c) = extra.class.filter(|c| !c.is_none()) {
        r = r.class(class_arg(c, names)?);
    }
    if let Some(o) = extra.observe.filter(|o| !o.is_none()) {
        r = r.observe(observe_arg(o, "observe")?);
    }
    r = r.deadline(crate::deadline::request_deadline(py, extra.deadline)?);
    Ok(timeout_arg(timeout)?.map_or(r, |t| r.queue_timeout(t)))
}

// ----- the class table -----------------------------------------------------------------------

fn dict<'a, 'py>(v: &'a Bound<'py, PyAny>, what: &str) -> PyResult<&'a Bound<'py, PyDict>> {
    v.cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a dict, not {}", type_name(v))))
}

fn key_str(k: &Bound<'_, PyAny>, what: &str) -> PyResult<PyBackedStr> {
    k.extract()
        .map_err(|_| PyTypeError::new_err(format!("{what}: option names must be str")))
}

fn builder_err(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// The options of one object of `section` (a reserve or a rate) into `set`.
fn walk_section(
    d: &Bound<'_, PyDict>,
    section: ClassSection,
    what: &str,
    mut set: impl FnMut(ClassOptionId, hullguard_core::config::Value) -> PyResult<()>,
) -> PyResult<()> {
    for (k, v) in d.iter() {
        let key = key_str(&k, what)?;
        let spec = class_options::find(section, PY, &key).ok_or_else(|| {
            let known = class_options::known_names(section, PY);
            PyValueError::new_err(format!(
                "{what}: unknown option {:?} (known: {known})",
                &*key
            ))
        })?;
        let name = format!("{what}.{}", spec.spelled(PY));
        set(spec.id, value(spec.kind, &v, &name)?)?;
    }
    Ok(())
}

/// `reserve={"permits", "budget", "min_priority"}` into `b`.
pub(crate) fn reserve_into(b: &mut ClassTableBuilder, v: &Bound<'_, PyAny>) -> PyResult<()> {
    walk_section(
        dict(v, "reserve")?,
        ClassSection::Reserve,
        "reserve",
        |id, x| b.set_table(id, x).map_err(builder_err),
    )
}

/// `rates={"requests": {"amount", "per", "burst"}, "units": {...}}` into `b` (`per` in
/// seconds).
pub(crate) fn rates_into(b: &mut ClassTableBuilder, v: &Bound<'_, PyAny>) -> PyResult<()> {
    for (k, r) in dict(v, "rates")?.iter() {
        let rate = key_str(&k, "rates")?;
        if !class_options::RATE_KEYS.contains(&&*rate) {
            return Err(PyValueError::new_err(format!(
                "rates: unknown rate {:?} (known: {:?})",
                &*rate,
                class_options::RATE_KEYS
            )));
        }
        let what = format!("rates.{}", &*rate);
        // A rate exists once named, even as `{}` (its defaults; the core judges it whole).
        b.set_rate(
            &rate,
            ClassOptionId::RateAmount,
            hullguard_core::config::Value::Count(1),
        )
        .map_err(builder_err)?;
        walk_section(dict(&r, &what)?, ClassSection::Rate, &what, |id, x| {
            b.set_rate(&rate, id, x).map_err(builder_err)
        })?;
    }
    Ok(())
}

/// The class-table arguments of a constructor (`classes`, `reserve`, `lending`, `shed`,
/// `rates`), taken out of `d`; `None` when none is given (a plain bulkhead).
pub(crate) fn class_table(d: &Bound<'_, PyDict>) -> PyResult<Option<ClassTableBuilder>> {
    let mut given = false;
    let mut b = ClassTableBuilder::new();
    if let Some(v) = crate::options::take(d, "classes")? {
        given = true;
        let list = v.cast::<PyList>().map(|l| l.as_any().clone());
        let items = list
            .or_else(|_| v.cast::<PyTuple>().map(|t| t.as_any().clone()))
            .map_err(|_| {
                PyTypeError::new_err(format!(
                    "classes must be a list of dicts, not {}",
                    type_name(&v)
                ))
            })?;
        for (i, c) in items.try_iter()?.enumerate() {
            let c = c?;
            let what = format!("classes[{i}]");
            b.ensure_class(i).map_err(builder_err)?;
            for (k, x) in dict(&c, &what)?.iter() {
                let key = key_str(&k, &what)?;
                if &*key == "name" {
                    let name: PyBackedStr = x.extract().map_err(|_| {
                        PyTypeError::new_err(format!(
                            "{what}.name must be a str, not {}",
                            type_name(&x)
                        ))
                    })?;
                    b.set_name(i, &name).map_err(builder_err)?;
                    continue;
                }
                let spec = class_options::find(ClassSection::Class, PY, &key).ok_or_else(|| {
                    let known = class_options::known_names(ClassSection::Class, PY);
                    PyValueError::new_err(format!(
                        "{what}: unknown option {:?} (known: {known})",
                        &*key
                    ))
                })?;
                if x.is_none() {
                    continue; // not given: the default
                }
                let name = format!("{what}.{}", spec.spelled(PY));
                b.set(i, spec.id, value(spec.kind, &x, &name)?)
                    .map_err(builder_err)?;
            }
        }
    }
    if let Some(v) = crate::options::take(d, "reserve")? {
        given = true;
        reserve_into(&mut b, &v)?;
    }
    if let Some(v) = crate::options::take(d, "rates")? {
        given = true;
        rates_into(&mut b, &v)?;
    }
    for (name, id) in [
        ("lending", ClassOptionId::Lending),
        ("shed", ClassOptionId::Shed),
    ] {
        if let Some(v) = crate::options::take(d, name)? {
            given = true;
            let spec = &class_options::CLASS_OPTIONS[id as usize];
            b.set_table(id, value(spec.kind, &v, &name)?)
                .map_err(builder_err)?;
        }
    }
    Ok(given.then_some(b))
}

/// The names of a built table's classes.
pub(crate) fn names_of(b: &ClassTableBuilder) -> ClassNames {
    (0..b.len())
        .map(|i| b.name_of(i as u16).map(str::to_owned))
        .collect()
}

/// `apply_limits`' `reserve=` and `rates=` (`rates={}` removes every rate).
pub(crate) fn table_limits(
    reserve: Option<&Bound<'_, PyAny>>,
    rates: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Option<PriorityReserve>, Option<Rates>)> {
    let mut b = ClassTableBuilder::new();
    let reserve = match reserve.filter(|r| !r.is_none()) {
        Some(r) => {
            reserve_into(&mut b, r)?;
            Some(b.reserve())
        }
        None => None,
    };
    let rates = match rates.filter(|r| !r.is_none()) {
        Some(r) => {
            rates_into(&mut b, r)?;
            Some(b.rates())
        }
        None => None,
    };
    Ok((reserve, rates))
}

// ----- results -------------------------------------------------------------------------------

static RESULTS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn results(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    RESULTS
        .get_or_try_init(py, || {
            py.import("hullguard._results")
                .map(|m| m.into_any().unbind())
        })
        .map(|m| m.bind(py))
}

fn dimension<'py>(py: Python<'py>, d: &DimensionSnapshot) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("limit", d.limit)?;
    out.set_item("in_use", d.in_use)?;
    out.set_item("available", d.available)?;
    Ok(out)
}

/// A rejection's `detail` (docs/design.md §5.7): `{"reason", "bound", "calls": {"limit",
/// "in_use", "available"}, "budget": {...} | None, "queued", "max_queue", "queued_cost",
/// "revision", "class": {"class", "bound", "dimension"} | None, "retry_after": seconds | None,
/// "http_status"}` — `http_status` the core's status for a server answering the refusal
/// (docs/design.md §4.11: 429 for `rate_limit`, 503 otherwise).
pub(crate) fn detail_dict<'py>(
    py: Python<'py>,
    d: &RejectionDetail,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("reason", d.reason.as_str())?;
    out.set_item("bound", d.bound.as_str())?;
    out.set_item("calls", dimension(py, &d.calls)?)?;
    out.set_item(
        "budget",
        d.budget.as_ref().map(|b| dimension(py, b)).transpose()?,
    )?;
    out.set_item("queued", d.queued)?;
    out.set_item("max_queue", d.max_queue)?;
    out.set_item("queued_cost", d.queued_cost)?;
    out.set_item("revision", d.revision)?;
    let class = d
        .class
        .map(|c| {
            let cd = PyDict::new(py);
            cd.set_item("class", c.class)?;
            cd.set_item("bound", c.bound.as_str())?;
            cd.set_item(
                "dimension",
                if c.dimension == 0 { "calls" } else { "budget" },
            )?;
            Ok::<_, PyErr>(cd)
        })
        .transpose()?;
    out.set_item("class", class)?;
    out.set_item("retry_after", d.retry_after.map(seconds))?;
    out.set_item("http_status", d.http_status())?;
    Ok(out)
}

/// A rejection's detail, built into its dict when called (what a rejection exception's
/// `.detail` calls on first read).
#[pyclass(module = "hullguard._native", name = "_Detail", frozen)]
pub(crate) struct LazyDetail(RejectionDetail);

impl LazyDetail {
    pub(crate) fn new(d: RejectionDetail) -> Self {
        Self(d)
    }
}

#[pymethods]
impl LazyDetail {
    fn __call__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        detail_dict(py, &self.0)
    }
}

/// The `detail` dict of a rejection.
pub(crate) fn rejection_detail<'py>(
    py: Python<'py>,
    r: &Rejection,
) -> PyResult<Bound<'py, PyDict>> {
    detail_dict(py, &r.detail())
}

/// `Admitted(permit)`.
pub(crate) fn admitted(py: Python<'_>, permit: Py<PyAny>) -> PyResult<Py<PyAny>> {
    Ok(results(py)?
        .getattr(intern!(py, "Admitted"))?
        .call1((permit,))?
        .unbind())
}

/// `Refused(reason, detail, error)` for a refusal; a bad argument (no rejection) is raised.
pub(crate) fn refused(py: Python<'_>, e: &AcquireError, key: Option<&str>) -> PyResult<Py<PyAny>> {
    let err = acquire_err(py, e, key);
    let Some(r) = e.rejection() else {
        return Err(err);
    };
    let args = (
        r.reason.as_str(),
        rejection_detail(py, r)?,
        err.into_value(py),
    );
    Ok(results(py)?
        .getattr(intern!(py, "Refused"))?
        .call1(args)?
        .unbind())
}

/// `WouldAdmit(decision, position, ahead, detail)` for a dry run; a bad argument is raised.
pub(crate) fn would_admit(py: Python<'_>, w: WouldAdmit, key: Option<&str>) -> PyResult<Py<PyAny>> {
    let kwargs = PyDict::new(py);
    match w {
        WouldAdmit::AdmitNow => kwargs.set_item("decision", "admit_now")?,
        WouldAdmit::WouldQueue { position, ahead } => {
            kwargs.set_item("decision", "would_queue")?;
            kwargs.set_item("position", position)?;
            kwargs.set_item("ahead", ahead)?;
        }
        WouldAdmit::Reject(e) => {
            let Some(r) = e.rejection() else {
                return Err(acquire_err(py, &e, key));
            };
            kwargs.set_item("decision", r.reason.as_str())?;
            kwargs.set_item("detail", rejection_detail(py, r)?)?;
        }
    }
    Ok(results(py)?
        .getattr(intern!(py, "WouldAdmit"))?
        .call((), Some(&kwargs))?
        .unbind())
}

/// A hold change's name and size.
pub(crate) fn change_of(c: HoldChange) -> (&'static str, u64) {
    match c {
        HoldChange::Unchanged => ("unchanged", 0),
        HoldChange::Shrank(n) => ("shrank", n),
        HoldChange::Grew(n) => ("grew", n),
        HoldChange::Overran(n) => ("overran", n),
    }
}

/// `UsageReport(change, by, cancel, used, held, overrun)`.
pub(crate) fn usage_report(py: Python<'_>, r: &UsageReport) -> PyResult<Py<PyAny>> {
    let (change, by) = change_of(r.change);
    let kwargs = PyDict::new(py);
    kwargs.set_item("change", change)?;
    kwargs.set_item("by", by)?;
    kwargs.set_item("cancel", r.cancel)?;
    kwargs.set_item("used", r.used)?;
    kwargs.set_item("held", r.held)?;
    kwargs.set_item("overrun", r.overrun)?;
    Ok(results(py)?
        .getattr(intern!(py, "UsageReport"))?
        .call((), Some(&kwargs))?
        .unbind())
}

/// A Python exception class of `hullguard._errors` called with `args` and `kwargs`.
pub(crate) fn py_error(
    py: Python<'_>,
    class: &str,
    message: String,
    kwargs: &[(&str, Py<PyAny>)],
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import("hullguard._errors")?.getattr(class)?;
        let kw = PyDict::new(py);
        for (k, v) in kwargs {
            kw.set_item(k, v)?;
        }
        Ok(PyErr::from_value(cls.call((message,), Some(&kw))?))
    };
    build().unwrap_or_else(|e| e)
}

// ----- the host's rate timer -----------------------------------------------------------------

/// Per classed bulkhead with rates (by address): the loop its rate timer runs on and whether
/// one is armed. Entries of dropped bulkheads are pruned when a new one is added.
struct RateEntry {
    bh: Weak<CoreBulkhead>,
    event_loop: Py<PyAny>,
    armed: bool,
}

static RATE_TIMERS: Mutex<Option<HashMap<usize, RateEntry>>> = Mutex::new(None);

/// The host's rate timer (docs/design.md §4.9; the core arms none): when a head of `bh` is held
/// back by a rate, one `loop.call_later(rate_retry_after)` that calls `rate_tick` and re-arms
/// while a head is still held. The loop is `event_loop` (a queued acquire's, remembered for the
/// bulkhead), else the one remembered; from another thread than that loop's (a release on a
/// worker thread) it is armed through `call_soon_threadsafe` (`call_later` is not thread-safe
/// and would not wake the loop). A no-op on a bulkhead without classes (one load), or — without
/// a loop to remember — with nothing held by a rate (one more load, no lock), or before any
/// acquire of it queued on a loop.
pub(crate) fn arm_rate_timer(
    py: Python<'_>,
    event_loop: Option<&Bound<'_, PyAny>>,
    bh: &Arc<CoreBulkhead>,
) {
    if bh.class_count() == 0 || (event_loop.is_none() && bh.rate_retry_after().is_none()) {
        return;
    }
    let addr = Arc::as_ptr(bh) as usize;
    // Loops let go of under the lock, released after it: a decref may run Python code, which
    // may switch threads to one that waits for this lock holding the interpreter.
    let mut let_go: Vec<Py<PyAny>> = Vec::new();
    let armed = {
        let mut map = RATE_TIMERS.lock().unwrap_or_else(|e| e.into_inner());
        let map = map.get_or_insert_with(HashMap::new);
        // An entry of a dropped bulkhead at the same address is stale.
        let live = |e: &RateEntry| e.bh.strong_count() > 0;
        if let Some(l) = event_loop {
            if !map.get(&addr).is_some_and(live) {
                let stale: Vec<usize> = map
                    .iter()
                    .filter(|(_, e)| !live(e))
                    .map(|(k, _)| *k)
                    .collect();
                let_go.extend(
                    stale
                        .iter()
                        .filter_map(|k| map.remove(k))
                        .map(|e| e.event_loop),
                );
                map.insert(
                    addr,
                    RateEntry {
                        bh: Arc::downgrade(bh),
                        event_loop: l.clone().unbind(),
                        armed: false,
                    },
                );
            }
            if let Some(entry) = map.get_mut(&addr)
                && !entry.event_loop.bind(py).is(l)
            {
                // A timer pending on the old loop may never fire (that loop may be closed):
                // arm on this one.
                let_go.push(std::mem::replace(&mut entry.event_loop, l.clone().unbind()));
                entry.armed = false;
            }
        }
        map.get_mut(&addr)
            .filter(|e| live(e) && !e.armed)
            .and_then(|entry| {
                let after = bh.rate_retry_after()?;
                entry.armed = true;
                Some((after, entry.event_loop.clone_ref(py)))
            })
    };
    drop(let_go);
    let Some((after, event_loop)) = armed else {
        return;
    };
    let timer = RateTimer { bh: bh.clone() };
    let event_loop = event_loop.bind(py);
    let armed = Py::new(py, timer).and_then(|t| {
        let secs = after.as_secs_f64();
        if running_loop(py)?.is(event_loop) {
            event_loop.call_method1(intern!(py, "call_later"), (secs, t))
        } else {
            let call_later = event_loop.getattr(intern!(py, "call_later"))?;
            event_loop.call_method1(intern!(py, "call_soon_threadsafe"), (call_later, secs, t))
        }
    });
    if armed.is_err() {
        // A closed loop: nothing armed (the next queued acquire arms on its own loop).
        disarm(addr);
    }
}

static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// This thread's running event loop, or `None`.
fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    GET_RUNNING_LOOP
        .import(py, "asyncio", "_get_running_loop")?
        .call0()
}

fn disarm(addr: usize) {
    let mut map = RATE_TIMERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = map.as_mut().and_then(|m| m.get_mut(&addr)) {
        e.armed = false;
    }
}

/// One armed rate timer of a bulkhead.
#[pyclass(module = "hullguard._native", frozen)]
pub(crate) struct RateTimer {
    bh: Arc<CoreBulkhead>,
}

#[pymethods]
impl RateTimer {
    fn __call__(&self, py: Python<'_>) {
        disarm(Arc::as_ptr(&self.bh) as usize);
        self.bh.rate_tick();
        arm_rate_timer(py, None, &self.bh);
    }
}
