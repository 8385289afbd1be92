//! `guard`: builds the decorator from the bound `acquire` / `acquire_sync` methods; the
//! wrappers themselves live in `hullguard/_guard.py` (each call's `call_timeout`, capped by its
//! deadline, is asked of its permit: `Permit._call_timeout`).

use pyo3::{
    prelude::*,
    types::{PyCFunction, PyDict},
};

use crate::gateway::Extra;

/// The gateway arguments given (`cost`, `admission_class`, `observe`, `deadline`) as keyword
/// arguments of every acquire the decorator makes.
pub(crate) fn extra_kwargs<'py>(
    py: Python<'py>,
    extra: Extra<'_, 'py>,
) -> PyResult<Bound<'py, PyDict>> {
    let kw = PyDict::new(py);
    for (k, v) in [
        ("cost", extra.cost),
        ("admission_class", extra.class),
        ("observe", extra.observe),
        ("deadline", extra.deadline),
    ] {
        if let Some(v) = v.filter(|v| !v.is_none()) {
            kw.set_item(k, v)?;
        }
    }
    Ok(kw)
}

/// `fn` given: the wrapped function. `fn` omitted: a decorator that wraps its argument.
pub(crate) fn decorator(
    py: Python<'_>,
    acquire: &Bound<'_, PyAny>,
    acquire_sync: &Bound<'_, PyAny>,
    (weight, timeout): (Option<&Bound<'_, PyAny>>, Option<&Bound<'_, PyAny>>),
    kw: Bound<'_, PyDict>,
    r#fn: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let functools = py.import("functools")?;
    let weight = weight.map_or_else(
        || 1u64.into_pyobject(py).map(|v| v.into_any()),
        |w| Ok(w.clone()),
    )?;
    let timeout = timeout.map_or_else(|| py.None().into_bound(py), |t| t.clone());
    let partial = functools.getattr("partial")?;
    let acquire = partial.call((acquire, &weight, &timeout), Some(&kw))?;
    let acquire_sync = partial.call((acquire_sync, &weight, &timeout), Some(&kw))?;
    let wrap = py.import("hullguard._guard")?.getattr("wrap")?;
    if let Some(f) = r#fn {
        return Ok(wrap.call1((acquire, acquire_sync, f))?.unbind());
    }
    let (acquire, acquire_sync) = (acquire.unbind(), acquire_sync.unbind());
    let deco = PyCFunction::new_closure(
        py,
        None,
        None,
        move |args, _kwargs| -> PyResult<Py<PyAny>> {
            let py = args.py();
            let f = args.get_item(0)?;
            let wrap = py.import("hullguard._guard")?.getattr("wrap")?;
            Ok(wrap
                .call1((acquire.bind(py), acquire_sync.bind(py), f))?
                .unbind())
        },
    )?;
    Ok(deco.into_any().unbind())
}
