//! What the fuzz targets share: a weighted choice from the fuzzer's bytes, and buffers of an
//! exact byte size (so ASan sees a read or write one byte past what a C caller declared).

use std::{
    alloc::{Layout, alloc_zeroed, dealloc},
    cell::Cell,
    fmt::Debug,
    ptr::NonNull,
    sync::Once,
};

use arbitrary::{Result, Unstructured};

/// One of `weights.len()` choices, each as likely as its weight (the proptest generators'
/// `prop_oneof!` weights), from the fuzzer's bytes.
pub fn pick(u: &mut Unstructured<'_>, weights: &[u32]) -> Result<usize> {
    let total: u32 = weights.iter().sum();
    let mut x = u.int_in_range(0..=total - 1)?;
    for (i, &w) in weights.iter().enumerate() {
        if x < w {
            return Ok(i);
        }
        x -= w;
    }
    unreachable!("x < total")
}

/// A zeroed heap buffer of exactly `len` bytes (at least 1), 16-byte aligned: a C caller's
/// struct of its declared size. Reading or writing past `len` is an ASan report.
pub struct Exact {
    ptr: NonNull<u8>,
    len: usize,
}

impl Exact {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Exact {
        let layout = Layout::from_size_align(len.max(1), 16).unwrap();
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) }).expect("allocation");
        Exact { ptr, len }
    }

    /// A copy of `bytes` (`bytes.len()` bytes).
    pub fn of(bytes: &[u8]) -> Exact {
        let e = Exact::zeroed(bytes.len());
        // SAFETY: `e` has `bytes.len()` writable bytes; distinct allocations.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), e.ptr.as_ptr(), bytes.len()) };
        e
    }

    /// The first `len` bytes of `v`, then zeroes up to `len` (`len` may exceed `size_of::<T>()`:
    /// a newer caller's bigger struct), with `struct_size` (the first 4 bytes, when `len ≥ 4`)
    /// set to `declared`.
    pub fn of_struct<T: Copy>(v: &T, len: usize, declared: u32) -> Exact {
        let e = Exact::zeroed(len);
        let n = len.min(size_of::<T>());
        // SAFETY: `n` bytes are readable in `v` and writable in `e`; distinct allocations.
        unsafe { std::ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), e.ptr.as_ptr(), n) };
        if len >= 4 {
            // SAFETY: 4 writable bytes at the start.
            unsafe { e.ptr.as_ptr().cast::<u32>().write_unaligned(declared) };
        }
        e
    }

    /// The buffer as a `T` pointer (only `len` bytes of it exist).
    pub fn ptr<T>(&self) -> *mut T {
        self.ptr.as_ptr().cast()
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` initialized bytes (zeroed at allocation).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Exact {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len.max(1), 16).unwrap();
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), layout) };
    }
}

thread_local! {
    /// The case being run by [`with_case`], printed by the panic hook.
    static CASE: Cell<Option<*const (dyn Debug + 'static)>> = const { Cell::new(None) };
}

/// Runs `f`, printing `case` (pretty `Debug`) if it panics: the decoded operations of a crash,
/// ready to paste into a named regression test. Costs nothing unless it panics (libFuzzer's
/// hook aborts on a panic, so the case cannot be printed after an unwind).
pub fn with_case<R>(case: &dyn Debug, f: impl FnOnce() -> R) -> R {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let next = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Some(p) = CASE.with(Cell::get) {
                // SAFETY: set below only for the duration of `f`, during which `case` lives;
                // the hook runs on the panicking thread, inside `f`.
                eprintln!("the case: {:#?}", unsafe { &*p });
            }
            next(info);
        }));
    });
    let p: *const (dyn Debug + '_) = case;
    // SAFETY: only the lifetime is erased; the pointer is cleared before `case` can end.
    let p: *const (dyn Debug + 'static) = unsafe { std::mem::transmute(p) };
    CASE.with(|c| c.set(Some(p)));
    let r = f();
    CASE.with(|c| c.set(None));
    r
}

/// Whether `HG_FUZZ_TRACE` is set: targets then print each step (to replay a crash by hand).
pub fn trace() -> bool {
    static T: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *T.get_or_init(|| std::env::var_os("HG_FUZZ_TRACE").is_some())
}
