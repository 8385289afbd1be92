//! Class ceilings at run time (docs/design.md §4.8): [`Bulkhead::set_class_ceiling`] and the
//! class entries [`Bulkhead::apply_limits_with_classes`] installs with a revision.

use crate::{
    config::{ConfigError, classes::ClassError},
    front::bulkhead::Bulkhead,
};

/// New ceilings for one class of a classed bulkhead, installed with a revision by
/// [`Bulkhead::apply_limits_with_classes`] (`None` keeps one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassLimits {
    /// The class index.
    pub class: u16,
    /// Its permit ceiling, `floor ..= MAX_PERMITS` (above the limit allowed: the limit bounds).
    pub ceiling: Option<u64>,
    /// Its budget ceiling, `budget_floor ..= MAX_BUDGET` (a bulkhead with a budget only).
    pub budget_ceiling: Option<u64>,
}

impl<const N: usize> Bulkhead<N> {
    /// Changes class `class`'s ceilings at run time (docs/design.md §4.8): `permits` and
    /// `budget` (`None` keeps one). A raised ceiling grants the class's waiters that fit now,
    /// before this returns; a lowered one holds its new grants back while its holders leave by
    /// attrition (nobody is pre-empted). A ceiling may be above the bulkhead's limit (the limit
    /// still bounds everyone): this is how a registry key's own limit sits under a global cap.
    /// Thread-safe; one store per dimension.
    ///
    /// # Errors
    /// [`ConfigError::Class`]: [`ClassError::Unknown`](crate::config::classes::ClassError::Unknown) for a class this bulkhead does not
    /// have, [`ClassError::Ceiling`](crate::config::classes::ClassError::Ceiling) for a ceiling below the class's floor or above
    /// [`MAX_PERMITS`](crate::MAX_PERMITS) / [`MAX_BUDGET`](crate::MAX_BUDGET),
    /// [`ClassError::NoBudget`](crate::config::classes::ClassError::NoBudget) for a budget ceiling without a budget. Nothing changes.
    pub fn set_class_ceiling(
        &self,
        class: u16,
        permits: Option<u64>,
        budget: Option<u64>,
    ) -> Result<(), ConfigError> {
        self.check_class_ceiling(class, permits, budget)
            .map_err(ConfigError::Class)?;
        let c = ClassLimits {
            class,
            ceiling: permits,
            budget_ceiling: budget,
        };
        self.store_class_ceilings(&[c], false);
        self.store_class_ceilings(&[c], true);
        // A raise may let waiters go (and a lowered one changes nothing a pass would do).
        self.rate_tick();
        self.emit_reconfigure();
        Ok(())
    }

    /// The checks of [`set_class_ceiling`](Self::set_class_ceiling).
    pub(crate) fn check_class_ceiling(
        &self,
        class: u16,
        permits: Option<u64>,
        budget: Option<u64>,
    ) -> Result<(), crate::config::classes::ClassError> {
        #[cfg(feature = "alloc")]
        if let Some(book) = self.engine.classes() {
            let count = book.len();
            if usize::from(class) >= count {
                return Err(ClassError::Unknown {
                    class: class.into(),
                    count,
                });
            }
            if budget.is_some() && !self.engine.has_budget() {
                return Err(ClassError::NoBudget {
                    class: Some(class.into()),
                });
            }
            let dims = [
                (permits, "permits", crate::MAX_PERMITS),
                (budget, "budget", crate::MAX_BUDGET),
            ];
            for (d, &(v, dimension, max)) in dims.iter().enumerate() {
                let floor = book.floor_of(class, d) as u64;
                if let Some(v) = v.filter(|&v| v < floor || v > max) {
                    return Err(ClassError::Ceiling {
                        class: class.into(),
                        dimension,
                        floor,
                        ceiling: v,
                        max,
                    });
                }
            }
            return Ok(());
        }
        let _ = (permits, budget);
        Err(ClassError::Unknown {
            class: class.into(),
            count: 0,
        })
    }

    /// Stores the ceilings of `classes` (checked) that go up (`raise`) or down / stay.
    pub(crate) fn store_class_ceilings(&self, classes: &[ClassLimits], raise: bool) {
        #[cfg(feature = "alloc")]
        if let Some(book) = self.engine.classes() {
            for c in classes {
                let now = book.stats(c.class).map(|s| [s.ceiling, s.budget_ceiling]);
                for (d, v) in [c.ceiling, c.budget_ceiling].into_iter().enumerate() {
                    if let (Some(v), Some(now)) = (v, now) {
                        if (v > now[d]) == raise {
                            book.set_ceiling(c.class, d, v as crate::sync::Word);
                        }
                    }
                }
            }
        }
        let _ = (classes, raise);
    }

    /// Stores class `class`'s observe mode (an idle class: a registry key's, when the key is
    /// given the class under the registry's lock; docs/design.md §4.8).
    #[cfg(feature = "std")]
    pub(crate) fn store_class_observe(&self, class: u16, observe: crate::observe::Observe) {
        if let Some(book) = self.engine.classes() {
            book.set_observe(class, observe);
        }
    }

    /// Stores class `class`'s permit ceiling without a pass (validated by the caller: a class
    /// of this classed bulkhead, `≥` its floor): for a class nobody waits in (a registry slot
    /// being assigned under the registry's lock, where no waker may run).
    #[cfg(feature = "std")]
    pub(crate) fn store_class_ceiling(&self, class: u16, permits: u64) {
        if let Some(book) = self.engine.classes() {
            book.set_ceiling(class, 0, permits as crate::sync::Word);
        }
    }
}
