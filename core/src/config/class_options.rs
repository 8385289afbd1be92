//! The class-table option table (docs/design.md §4.8, §4.9): every option of an admission class,
//! of the priority reserve, of a rate and of the table itself, once — name, kind, range — so
//! that the bindings parse `classes=[{name, priority, floor, …}]`, `reserve=`, `rates=`,
//! `lending=` and `shed=` by walking [`CLASS_OPTIONS`] (refusing unknown names with the list of
//! known ones) instead of keeping their own copies, and fill a [`ClassTableBuilder`].
//!
//! | object | Python | Node | vectors |
//! |---|---|---|---|
//! | a class | `{"name": "interactive", "priority": 10, "budget_floor": 0}` | `{name, priority, budgetFloor}` | `{"priority": 10}` |
//! | `reserve` | `{"permits": 1, "min_priority": 5}` | `{permits, minPriority}` | the same as Python |
//! | a rate of `rates` (`requests`, `units`) | `{"amount": 10, "per": 1.0, "burst": 5}` | `{amount, perMs, burst}` | `{amount, per_ms, burst}` |
//!
//! Names use the option table's spelling rules ([`Spelling`]): snake_case in Python and the
//! vectors, camelCase in Node, a duration with `Ms` / `_ms` outside Python. A class's `name` is
//! not in the table: it is a string, taken with [`ClassTableBuilder::set_name`]. C passes
//! structs and needs no table.

use alloc::{string::String, vec::Vec};
use core::fmt;

use crate::{
    config::{
        ClassSpec, ClassTable, MAX_CLASSES, PriorityReserve, Rate, Rates, Value,
        options::{Kind, RangeText, Spelling},
    },
    limits::{MAX_BUDGET, MAX_PERMITS},
    observe::Observe,
};

/// Which object a class-table option belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClassSection {
    /// One class of `classes`.
    Class,
    /// The table's own flags (`lending`, `shed`).
    Table,
    /// `reserve`.
    Reserve,
    /// One rate of `rates` (`requests` or `units`).
    Rate,
}

/// Names every class-table option (the index of [`CLASS_OPTIONS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each is documented by its `ClassOptionSpec::doc`
pub enum ClassOptionId {
    Priority,
    Floor,
    Ceiling,
    BudgetFloor,
    BudgetCeiling,
    Observe,
    Lending,
    Shed,
    ReservePermits,
    ReserveBudget,
    ReserveMinPriority,
    RateAmount,
    RatePer,
    RateBurst,
}

/// One row of [`CLASS_OPTIONS`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClassOptionSpec {
    /// Which option.
    pub id: ClassOptionId,
    /// Which object it belongs to.
    pub section: ClassSection,
    /// The snake_case name (Python, vectors).
    pub name: &'static str,
    /// Its value type and range.
    pub kind: Kind,
    /// What it means, in a phrase.
    pub doc: &'static str,
}

const fn count(min: u64, max: u64) -> Kind {
    Kind::Count { min, max }
}

const PRIORITY: Kind = count(0, u8::MAX as u64);

/// Every class-table option.
pub static CLASS_OPTIONS: [ClassOptionSpec; 14] = [
    spec(
        ClassOptionId::Priority,
        ClassSection::Class,
        "priority",
        PRIORITY,
        "served first for the shared units when higher (strict priority; FIFO within one)",
    ),
    spec(
        ClassOptionId::Floor,
        ClassSection::Class,
        "floor",
        count(0, MAX_PERMITS),
        "permits protected for this class",
    ),
    spec(
        ClassOptionId::Ceiling,
        ClassSection::Class,
        "ceiling",
        count(0, MAX_PERMITS),
        "the most permits this class may hold (none: the limit)",
    ),
    spec(
        ClassOptionId::BudgetFloor,
        ClassSection::Class,
        "budget_floor",
        count(0, MAX_BUDGET),
        "budget units protected for this class",
    ),
    spec(
        ClassOptionId::BudgetCeiling,
        ClassSection::Class,
        "budget_ceiling",
        count(0, MAX_BUDGET),
        "the most budget units this class may hold (none: the budget)",
    ),
    spec(
        ClassOptionId::Observe,
        ClassSection::Class,
        "observe",
        Kind::Choice(Observe::CHOICES),
        "the class's own ceilings observed, not enforced",
    ),
    spec(
        ClassOptionId::Lending,
        ClassSection::Table,
        "lending",
        Kind::Bool,
        "idle floor units lent to other classes, reclaimed first",
    ),
    spec(
        ClassOptionId::Shed,
        ClassSection::Table,
        "shed",
        Kind::Bool,
        "a full queue evicts its youngest lowest-priority waiter for a higher arrival",
    ),
    spec(
        ClassOptionId::ReservePermits,
        ClassSection::Reserve,
        "permits",
        count(0, MAX_PERMITS),
        "permits kept for classes of priority >= min_priority",
    ),
    spec(
        ClassOptionId::ReserveBudget,
        ClassSection::Reserve,
        "budget",
        count(0, MAX_BUDGET),
        "budget units kept for classes of priority >= min_priority",
    ),
    spec(
        ClassOptionId::ReserveMinPriority,
        ClassSection::Reserve,
        "min_priority",
        PRIORITY,
        "the lowest priority that may take the reserve",
    ),
    spec(
        ClassOptionId::RateAmount,
        ClassSection::Rate,
        "amount",
        count(1, u64::MAX),
        "units per interval",
    ),
    spec(
        ClassOptionId::RatePer,
        ClassSection::Rate,
        "per",
        Kind::Duration {
            zero: false,
            max: core::time::Duration::from_secs(u32::MAX as u64),
            infinite: false,
        },
        "the interval",
    ),
    spec(
        ClassOptionId::RateBurst,
        ClassSection::Rate,
        "burst",
        count(1, u64::MAX),
        "the most units at once after an idle spell",
    ),
];

#[rustfmt::skip]
const fn spec(
    id: ClassOptionId, section: ClassSection, name: &'static str, kind: Kind, doc: &'static str,
) -> ClassOptionSpec {
    ClassOptionSpec { id, section, name, kind, doc }
}

/// The keys of the table object itself, beside its sections' options (`classes`, `reserve`,
/// `rates`): the structural keys a binding reads before walking [`CLASS_OPTIONS`].
pub const TABLE_KEYS: [&str; 3] = ["classes", "reserve", "rates"];

/// The rate names inside `rates`.
pub const RATE_KEYS: [&str; 2] = ["requests", "units"];

impl ClassOptionSpec {
    /// The name in `spelling` (`budget_floor`, `budgetFloor`; `per`, `perMs`, `per_ms`).
    pub fn spelled(&self, spelling: Spelling) -> Spelled {
        Spelled {
            spec: *self,
            spelling,
        }
    }

    /// The range in words, in the units of `spelling`.
    pub const fn range(&self, spelling: Spelling) -> RangeText {
        self.kind.range(spelling)
    }
}

/// A class-table option's name in one spelling (`Display`; [`is`](Self::is) compares).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spelled {
    spec: ClassOptionSpec,
    spelling: Spelling,
}

impl Spelled {
    fn pieces(&self, mut out: impl FnMut(&str) -> fmt::Result) -> fmt::Result {
        let duration = matches!(self.spec.kind, Kind::Duration { .. });
        match self.spelling {
            Spelling::Node => {
                for (i, word) in self.spec.name.split('_').enumerate() {
                    let mut chars = word.chars();
                    match chars.next() {
                        Some(c) if i > 0 => {
                            let mut buf = [0u8; 4];
                            out(c.to_ascii_uppercase().encode_utf8(&mut buf))?;
                            out(chars.as_str())?;
                        }
                        _ => out(word)?,
                    }
                }
                if duration { out("Ms") } else { Ok(()) }
            }
            Spelling::Python => out(self.spec.name),
            _ => {
                out(self.spec.name)?;
                if duration { out("_ms") } else { Ok(()) }
            }
        }
    }

    /// Whether `s` is this name.
    pub fn is(&self, s: &str) -> bool {
        let mut rest = s;
        let ok = self
            .pieces(|p| match rest.strip_prefix(p) {
                Some(r) => {
                    rest = r;
                    Ok(())
                }
                None => Err(fmt::Error),
            })
            .is_ok();
        ok && rest.is_empty()
    }
}

impl fmt::Display for Spelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.pieces(|p| f.write_str(p))
    }
}

/// The options of `section`, in table order.
pub fn options_in(section: ClassSection) -> impl Iterator<Item = &'static ClassOptionSpec> {
    CLASS_OPTIONS.iter().filter(move |o| o.section == section)
}

/// The option of `section` called `name` in `spelling`.
pub fn find(
    section: ClassSection,
    spelling: Spelling,
    name: &str,
) -> Option<&'static ClassOptionSpec> {
    options_in(section).find(|o| o.spelled(spelling).is(name))
}

/// The keys accepted in one object of `section`, for an "unknown option" message
/// (`"name", "priority", …`; the table's: `"classes", "reserve", "rates", "lending", "shed"`).
pub fn known_names(section: ClassSection, spelling: Spelling) -> String {
    let mut out = String::new();
    let mut put = |name: &dyn fmt::Display| {
        use core::fmt::Write;
        let sep = if out.is_empty() { "" } else { ", " };
        let _ = write!(out, "{sep}\"{name}\"");
    };
    match section {
        ClassSection::Class => put(&"name"),
        ClassSection::Table => TABLE_KEYS.iter().for_each(|k| put(k)),
        ClassSection::Rate | ClassSection::Reserve => {}
    }
    for o in options_in(section) {
        put(&o.spelled(spelling));
    }
    out
}

/// What is wrong with one class-table option as a layer passed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassOptionError {
    /// More than [`MAX_CLASSES`] classes.
    TooManyClasses {
        /// The index asked for.
        index: usize,
    },
    /// Two classes with one name.
    DuplicateName {
        /// The name.
        name: String,
    },
    /// A value of the wrong [`Value`] variant for the option (a layer's bug: it converts by
    /// the option's kind).
    WrongValue {
        /// The option.
        option: &'static str,
    },
    /// A rate name other than `requests` / `units`.
    UnknownRate {
        /// The name given.
        name: String,
    },
}

impl fmt::Display for ClassOptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClassOptionError::TooManyClasses { index } => write!(
                f,
                "classes: at most {MAX_CLASSES} classes, got class index {index}"
            ),
            ClassOptionError::DuplicateName { name } => {
                write!(f, "classes: the name {name:?} is given to two classes")
            }
            ClassOptionError::WrongValue { option } => {
                write!(f, "{option}: a value of the wrong type")
            }
            ClassOptionError::UnknownRate { name } => {
                write!(
                    f,
                    "rates: unknown rate {name:?} (known: \"requests\", \"units\")"
                )
            }
        }
    }
}

impl core::error::Error for ClassOptionError {}

/// A class table as a layer passes it, option by option: classes (by index, with optional
/// names), the reserve, the rates, lending and shedding. [`table`](Self::table) lends the
/// core's [`ClassTable`] to `Bulkhead::with_classes`, which validates it; [`index_of`]
/// maps a class name to the index a [`Request`](crate::Request) takes.
///
/// # Examples
/// ```
/// use hullguard_core::config::{Value, class_options::{ClassOptionId, ClassTableBuilder}};
/// let mut b = ClassTableBuilder::new();
/// b.set_name(0, "interactive")?;
/// b.set(0, ClassOptionId::Priority, Value::Count(10))?;
/// b.set_name(1, "batch")?;
/// b.set_table(ClassOptionId::ReservePermits, Value::Count(1))?;
/// b.set_table(ClassOptionId::ReserveMinPriority, Value::Count(5))?;
/// assert_eq!(b.index_of("batch"), Some(1));
/// let t = b.table();
/// assert_eq!((t.classes.len(), t.classes[0].priority, t.reserve.permits), (2, 10, 1));
/// # Ok::<(), hullguard_core::config::class_options::ClassOptionError>(())
/// ```
///
/// [`index_of`]: Self::index_of
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClassTableBuilder {
    classes: Vec<ClassSpec>,
    names: Vec<Option<String>>,
    reserve: PriorityReserve,
    lending: bool,
    shed: bool,
    rates: Rates,
}

impl ClassTableBuilder {
    /// An empty table (no classes yet, no reserve, no rates, no lending, no shedding).
    pub fn new() -> Self {
        Self::default()
    }

    /// Class `index` exists from here on (the classes before it too, with the defaults).
    ///
    /// # Errors
    /// [`ClassOptionError::TooManyClasses`] for an index of [`MAX_CLASSES`] or more.
    pub fn ensure_class(&mut self, index: usize) -> Result<&mut ClassSpec, ClassOptionError> {
        if index >= MAX_CLASSES {
            return Err(ClassOptionError::TooManyClasses { index });
        }
        if self.classes.len() <= index {
            self.classes.resize(index + 1, ClassSpec::DEFAULT);
            self.names.resize(index + 1, None);
        }
        Ok(&mut self.classes[index])
    }

    /// Names class `index` (requests may then name it).
    ///
    /// # Errors
    /// [`ClassOptionError::DuplicateName`] when another class has this name;
    /// [`ClassOptionError::TooManyClasses`].
    pub fn set_name(&mut self, index: usize, name: &str) -> Result<(), ClassOptionError> {
        if self.index_of(name).is_some_and(|i| usize::from(i) != index) {
            return Err(ClassOptionError::DuplicateName { name: name.into() });
        }
        self.ensure_class(index)?;
        self.names[index] = Some(name.into());
        Ok(())
    }

    /// Sets an option of class `index` ([`ClassSection::Class`]), a `value` converted by the
    /// option's kind.
    ///
    /// # Errors
    /// [`ClassOptionError::WrongValue`] for an option of another section or a value of another
    /// kind; [`ClassOptionError::TooManyClasses`].
    pub fn set(
        &mut self,
        index: usize,
        id: ClassOptionId,
        value: Value,
    ) -> Result<(), ClassOptionError> {
        let c = self.ensure_class(index)?;
        let wrong = || ClassOptionError::WrongValue {
            option: CLASS_OPTIONS[id as usize].name,
        };
        match (id, value) {
            (ClassOptionId::Priority, Value::Count(n)) => {
                c.priority = u8::try_from(n).map_err(|_| wrong())?;
            }
            (ClassOptionId::Floor, Value::Count(n)) => c.floor = n,
            (ClassOptionId::Ceiling, Value::Count(n)) => c.ceiling = Some(n),
            (ClassOptionId::BudgetFloor, Value::Count(n)) => c.budget_floor = n,
            (ClassOptionId::BudgetCeiling, Value::Count(n)) => c.budget_ceiling = Some(n),
            (ClassOptionId::Observe, Value::Choice(s)) => {
                c.observe = Observe::parse(s).ok_or_else(wrong)?;
            }
            _ => return Err(wrong()),
        }
        Ok(())
    }

    /// Sets an option of the table ([`ClassSection::Table`]) or of its reserve
    /// ([`ClassSection::Reserve`]).
    ///
    /// # Errors
    /// [`ClassOptionError::WrongValue`] as [`set`](Self::set).
    pub fn set_table(&mut self, id: ClassOptionId, value: Value) -> Result<(), ClassOptionError> {
        let wrong = || ClassOptionError::WrongValue {
            option: CLASS_OPTIONS[id as usize].name,
        };
        match (id, value) {
            (ClassOptionId::Lending, Value::Bool(b)) => self.lending = b,
            (ClassOptionId::Shed, Value::Bool(b)) => self.shed = b,
            (ClassOptionId::ReservePermits, Value::Count(n)) => self.reserve.permits = n,
            (ClassOptionId::ReserveBudget, Value::Count(n)) => self.reserve.budget = n,
            (ClassOptionId::ReserveMinPriority, Value::Count(n)) => {
                self.reserve.min_priority = u8::try_from(n).map_err(|_| wrong())?;
            }
            _ => return Err(wrong()),
        }
        Ok(())
    }

    /// Sets an option ([`ClassSection::Rate`]) of the rate `rate` of `rates` (`"requests"` or
    /// `"units"`). A rate exists once any of its options is set; `amount`, `per` and `burst`
    /// default to 1, 1 s and 1 (the core's validation then judges the whole rate).
    ///
    /// # Errors
    /// [`ClassOptionError::UnknownRate`]; [`ClassOptionError::WrongValue`] as
    /// [`set`](Self::set).
    pub fn set_rate(
        &mut self,
        rate: &str,
        id: ClassOptionId,
        value: Value,
    ) -> Result<(), ClassOptionError> {
        let slot = match rate {
            "requests" => &mut self.rates.requests,
            "units" => &mut self.rates.units,
            _ => return Err(ClassOptionError::UnknownRate { name: rate.into() }),
        };
        let r = slot.get_or_insert(Rate {
            amount: 1,
            per: core::time::Duration::from_secs(1),
            burst: 1,
        });
        match (id, value) {
            (ClassOptionId::RateAmount, Value::Count(n)) => r.amount = n,
            (ClassOptionId::RatePer, Value::Duration(d)) => r.per = d,
            (ClassOptionId::RateBurst, Value::Count(n)) => r.burst = n,
            _ => {
                return Err(ClassOptionError::WrongValue {
                    option: CLASS_OPTIONS[id as usize].name,
                });
            }
        }
        Ok(())
    }

    /// The index of the class called `name`.
    pub fn index_of(&self, name: &str) -> Option<u16> {
        let i = self.names.iter().position(|n| n.as_deref() == Some(name))?;
        u16::try_from(i).ok()
    }

    /// The name of class `index`, if it has one.
    pub fn name_of(&self, index: u16) -> Option<&str> {
        self.names.get(usize::from(index))?.as_deref()
    }

    /// How many classes are declared.
    pub fn len(&self) -> usize {
        self.classes.len()
    }

    /// Whether no class is declared (a table with rates only has one class: declare it).
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// The rates set so far (`apply_limits` takes them alone).
    pub fn rates(&self) -> Rates {
        self.rates
    }

    /// The reserve set so far (`apply_limits` takes it alone).
    pub fn reserve(&self) -> PriorityReserve {
        self.reserve
    }

    /// The core's table for `Bulkhead::with_classes` (which validates it). A table with rates
    /// but no class declared has one default class.
    pub fn table(&mut self) -> ClassTable<'_> {
        if self.classes.is_empty() {
            self.classes.push(ClassSpec::DEFAULT);
            self.names.push(None);
        }
        let mut t = ClassTable::new(&self.classes);
        t.reserve = self.reserve;
        t.lending = self.lending;
        t.shed = self.shed;
        t.rates = self.rates;
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, options::Spelling};
    use alloc::string::ToString;

    #[test]
    fn names_are_spelled_per_layer() {
        let per = find(ClassSection::Rate, Spelling::Python, "per").unwrap();
        assert_eq!(per.spelled(Spelling::Node).to_string(), "perMs");
        assert_eq!(per.spelled(Spelling::Vector).to_string(), "per_ms");
        let bf = find(ClassSection::Class, Spelling::Node, "budgetFloor").unwrap();
        assert_eq!(bf.id, ClassOptionId::BudgetFloor);
        let mp = find(ClassSection::Reserve, Spelling::Node, "minPriority").unwrap();
        assert_eq!(mp.spelled(Spelling::Python).to_string(), "min_priority");
        assert!(find(ClassSection::Class, Spelling::Python, "budgetFloor").is_none());
        assert!(find(ClassSection::Class, Spelling::Python, "permits").is_none());
        // Every row is found under its own name in every spelling.
        for o in &CLASS_OPTIONS {
            for s in [Spelling::Python, Spelling::Node, Spelling::Vector] {
                let name = o.spelled(s).to_string();
                assert_eq!(
                    find(o.section, s, &name).map(|f| f.id),
                    Some(o.id),
                    "{name}"
                );
            }
            assert_eq!(CLASS_OPTIONS[o.id as usize].id, o.id, "table order");
        }
        assert_eq!(
            known_names(ClassSection::Reserve, Spelling::Node),
            "\"permits\", \"budget\", \"minPriority\""
        );
        assert!(known_names(ClassSection::Class, Spelling::Python).starts_with("\"name\", "));
    }

    #[test]
    fn builder_fills_a_table_the_core_validates() {
        let mut b = ClassTableBuilder::new();
        b.set_name(0, "interactive").unwrap();
        b.set(0, ClassOptionId::Priority, Value::Count(10)).unwrap();
        b.set(0, ClassOptionId::Floor, Value::Count(2)).unwrap();
        b.set(1, ClassOptionId::Ceiling, Value::Count(3)).unwrap();
        b.set(1, ClassOptionId::Observe, Value::Choice("concurrency"))
            .unwrap();
        b.set_table(ClassOptionId::Shed, Value::Bool(true)).unwrap();
        b.set_rate("requests", ClassOptionId::RateAmount, Value::Count(5))
            .unwrap();
        assert_eq!(
            b.set_name(1, "interactive"),
            Err(ClassOptionError::DuplicateName {
                name: "interactive".into()
            })
        );
        assert!(matches!(
            b.set(MAX_CLASSES, ClassOptionId::Floor, Value::Count(1)),
            Err(ClassOptionError::TooManyClasses { .. })
        ));
        assert!(matches!(
            b.set(0, ClassOptionId::Lending, Value::Bool(true)),
            Err(ClassOptionError::WrongValue { option: "lending" })
        ));
        assert!(matches!(
            b.set_rate("tokens", ClassOptionId::RateAmount, Value::Count(1)),
            Err(ClassOptionError::UnknownRate { .. })
        ));
        assert_eq!((b.index_of("interactive"), b.name_of(1)), (Some(0), None));
        let t = b.table();
        assert_eq!(t.classes.len(), 2);
        assert_eq!((t.classes[0].priority, t.classes[0].floor), (10, 2));
        assert_eq!(
            (t.classes[1].ceiling, t.classes[1].observe),
            (Some(3), Observe::Concurrency)
        );
        assert!(t.shed && !t.lending);
        assert_eq!(t.rates.requests.map(|r| r.amount), Some(5));
        let config = Config {
            max_concurrent: 4,
            ..Config::default()
        };
        assert_eq!(t.validate(&config), Ok(()));
    }

    #[test]
    fn rates_alone_make_one_default_class() {
        let mut b = ClassTableBuilder::new();
        assert!(b.is_empty());
        b.set_rate("units", ClassOptionId::RateBurst, Value::Count(2))
            .unwrap();
        assert_eq!(b.table().classes, &[ClassSpec::DEFAULT]);
    }
}
