//! `stats()` as a JS object, built by one [`StatsVisitor`] walking the core's stats schema
//! (docs/design.md §8.1): field names camel-cased by rule (`granted_unclaimed` →
//! `grantedUnclaimed`), the keys of `rejectedByReason` (reason names) untouched, `adaptive` /
//! `circuit` `null` when the policy is absent. Counts are JS numbers (exact up to 2^53).

use std::{
    cell::RefCell,
    collections::{BTreeMap, HashMap},
    ffi::CString,
};

use hullguard_core::{Nested, Stats, StatsVisitor};
use napi::{
    Env, Error, Result,
    bindgen_prelude::{JsObjectValue, Null, Object, ToNapiValue},
};

/// `snake_case` → `camelCase`.
fn camel(key: &str) -> String {
    let mut words = key.split('_');
    let first = words.next().unwrap_or_default().to_owned();
    words.fold(first, |mut out, word| {
        let mut chars = word.chars();
        out.extend(chars.next().map(|c| c.to_ascii_uppercase()));
        out.push_str(chars.as_str());
        out
    })
}

thread_local! {
    /// The JS name of each schema key, spelled once per isolate (the keys are the schema's
    /// `&'static str`s; a reason name is kept, a field name camel-cased).
    static NAMES: RefCell<HashMap<(&'static str, bool), CString>> = RefCell::default();
}

/// The object under construction: one level per nested part (its key, whether its keys are
/// reason names, the object), and the first error.
struct Builder<'e> {
    env: &'e Env,
    levels: Vec<(&'static str, bool, Object<'e>)>,
    error: Option<Error>,
}

impl Builder<'_> {
    fn put<V: ToNapiValue>(&mut self, key: &'static str, value: V) {
        let Some((_, reasons, obj)) = self.levels.last_mut() else {
            return;
        };
        let set = NAMES.with(|names| {
            let mut names = names.borrow_mut();
            let name = names.entry((key, *reasons)).or_insert_with(|| {
                // Reason names are the same in every layer; field names are camel-cased.
                let spelled = if *reasons { key.to_owned() } else { camel(key) };
                CString::new(spelled).unwrap_or_default()
            });
            obj.set_c_named_property(name, value)
        });
        self.check(set);
    }

    /// `r`'s value, or `None` after recording its error (the first one is returned).
    fn check<T>(&mut self, r: Result<T>) -> Option<T> {
        r.map_err(|e| self.error.get_or_insert(e)).ok()
    }
}

impl StatsVisitor for Builder<'_> {
    fn count(&mut self, key: &'static str, value: u64) {
        self.put(key, value as f64);
    }
    fn signed(&mut self, key: &'static str, value: i64) {
        self.put(key, value as f64);
    }
    fn text(&mut self, key: &'static str, value: &'static str) {
        self.put(key, value);
    }
    fn begin(&mut self, key: &'static str, nested: Nested) {
        let obj = Object::new(self.env);
        // Reason names and bucket bounds are kept exactly; field names are camel-cased.
        let reasons = nested != Nested::Fields;
        let level = self.check(obj).map(|obj| (key, reasons, obj));
        self.levels.extend(level);
    }
    fn end(&mut self) {
        if let Some((key, _, obj)) = self.levels.pop() {
            self.put(key, obj);
        }
    }
    fn absent(&mut self, key: &'static str) {
        self.put(key, Null);
    }
}

/// The stats object of one bulkhead.
pub(crate) fn object<'e>(env: &'e Env, stats: &Stats) -> Result<Object<'e>> {
    let mut b = Builder {
        env,
        levels: vec![("", false, Object::new(env)?)],
        error: None,
    };
    stats.visit(&mut b);
    let top = b.levels.pop().map(|(_, _, obj)| obj);
    b.error.map_or_else(
        || top.ok_or_else(|| Error::from_reason("unbalanced stats schema")),
        Err,
    )
}

/// `{key: stats}` of a registry (keys unchanged).
pub(crate) fn by_key<'e>(env: &'e Env, all: &BTreeMap<String, Stats>) -> Result<Object<'e>> {
    let mut out = Object::new(env)?;
    for (key, s) in all {
        out.set(key, object(env, s)?)?;
    }
    Ok(out)
}
