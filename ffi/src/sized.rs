//! Size-versioned structs (docs/design.md § C ABI): every struct the C ABI reads or writes
//! begins with `uint32_t struct_size` and only ever grows at the end.
//!
//! * Read (a caller's input): at least the struct's first version must be declared (else
//!   `HG_STATUS_INVALID_ARGUMENT`); a smaller, older struct is read as far as it goes and the
//!   fields it lacks are 0 (each struct documents what 0 means); a bigger one — a caller built
//!   against a newer header — is accepted only when every byte past this library's struct is 0
//!   (the newer fields are "not set"), else refused, as a request this version cannot honour.
//!   An older struct ends at a field boundary: a declared size that ends inside a pointer or a
//!   count ([`read_whole`]) is refused (read in part it would be a made-up value: a truncated
//!   pointer written through). No input struct has tail padding (a later field never lands in
//!   bytes an older caller may have left unset): its last bytes are a field, `reserved` if
//!   need be, which must be 0.
//! * Write (an output): at most the declared size is written, and `struct_size` is set to the
//!   bytes written, so a newer caller learns which fields this library filled. An output that
//!   cannot be written (`struct_size` below 4) is refused before the call changes anything
//!   ([`writable`]).

use std::{ffi::c_char, ops::Range};

use crate::status::hg_status;

/// A struct made of integers, raw pointers and `Option<fn>` only, read from and written to C
/// as bytes: all zeroes is a valid value, and so is any byte pattern a C caller can write.
///
/// # Safety
/// The implementor is `repr(C)`, begins with a `u32` `struct_size`, and every field is an
/// integer, a raw pointer, an `Option` of an `extern "C" fn`, or an array or struct of those —
/// never a Rust `bool` or enum (for an output-only struct, which is never read from C bytes,
/// `bool` and `repr(u32)` enums are allowed: see [`Output`]).
pub(crate) unsafe trait Plain: Copy {}

/// An output struct: written to C, never read from C bytes (so it may hold `bool`s and enums).
///
/// # Safety
/// The implementor is `repr(C)` and begins with a `u32` `struct_size`.
pub(crate) unsafe trait Output: Copy {}

/// Reads a caller's `T` of its declared `struct_size` (see the module docs): at least `min`
/// bytes; a bigger struct only with a zero tail.
///
/// # Safety
/// `p` is NULL or points to a readable `T` whose first `struct_size` bytes are initialized.
pub(crate) unsafe fn read<T: Plain>(p: *const T, min: usize) -> Result<T, hg_status> {
    // SAFETY: per the contract.
    unsafe { read_whole(p, min, &[]) }
}

/// [`read`], refusing a declared size that ends inside one of the `whole` fields (`offset ..
/// offset + size`): an older struct always ends at a field boundary, and a pointer or a count
/// read in part would be a different, made-up value (a truncated pointer written through).
///
/// # Safety
/// As [`read`].
pub(crate) unsafe fn read_whole<T: Plain>(
    p: *const T,
    min: usize,
    whole: &[Range<usize>],
) -> Result<T, hg_status> {
    if p.is_null() {
        return Err(hg_status::HG_STATUS_NULL_PARAMETER);
    }
    // SAFETY: at least the `struct_size` field is readable (contract).
    let declared = unsafe { p.cast::<u32>().read_unaligned() } as usize;
    let ours = size_of::<T>();
    if declared < min.max(size_of::<u32>())
        || whole.iter().any(|f| f.start < declared && declared < f.end)
    {
        return Err(hg_status::HG_STATUS_INVALID_ARGUMENT);
    }
    if declared > ours {
        // SAFETY: the caller declared `declared` readable bytes at `p`.
        let tail = unsafe { std::slice::from_raw_parts(p.cast::<u8>().add(ours), declared - ours) };
        if tail.iter().any(|b| *b != 0) {
            return Err(hg_status::HG_STATUS_INVALID_ARGUMENT);
        }
    }
    // SAFETY: all zeroes is a valid `T` (`Plain`).
    let mut v: T = unsafe { std::mem::zeroed() };
    // SAFETY: `min(declared, ours)` bytes are readable at `p` and fit `v`; any bytes are a
    // valid `T` (`Plain`); the regions do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            p.cast::<u8>(),
            (&raw mut v).cast::<u8>(),
            declared.min(ours),
        );
    }
    Ok(v)
}

/// The declared size of the caller's output `*out`, if [`write`] can write it: check it
/// before doing what the output reports, so that an unwritable output changes nothing.
///
/// # Safety
/// As [`write`].
pub(crate) unsafe fn writable<T: Output>(out: *mut T) -> Result<usize, hg_status> {
    if out.is_null() {
        return Err(hg_status::HG_STATUS_NULL_PARAMETER);
    }
    // SAFETY: the `struct_size` field is readable (contract).
    let declared = unsafe { out.cast::<u32>().read_unaligned() } as usize;
    if declared < size_of::<u32>() {
        return Err(hg_status::HG_STATUS_INVALID_ARGUMENT);
    }
    Ok(declared)
}

/// Writes `v` into the caller's `*out`: at most its declared `struct_size` bytes (at least the
/// `struct_size` field itself), with `struct_size` set to the bytes written.
///
/// # Safety
/// `out` is NULL or points to a writable `T` whose `struct_size` field is initialized.
pub(crate) unsafe fn write<T: Output>(out: *mut T, v: &T) -> hg_status {
    // SAFETY: per the contract.
    let declared = match unsafe { writable(out) } {
        Ok(n) => n,
        Err(s) => return s,
    };
    let n = declared.min(size_of::<T>());
    // SAFETY: `n` bytes fit the caller's struct (its declared size) and `v`.
    unsafe {
        std::ptr::copy_nonoverlapping((&raw const *v).cast::<u8>(), out.cast::<u8>(), n);
        out.cast::<u32>().write_unaligned(n as u32);
    }
    hg_status::HG_STATUS_OK
}

/// Fills the caller's `*out` of `size` bytes with `v` (a struct's defaults): the first
/// `min(size, size_of::<T>())` bytes, with `struct_size` set to that many — what the
/// `hg_*_default_sized` functions do, so that a caller built against an older, smaller header
/// (the header's `hg_*_default` macros pass its `sizeof`) is never written past its struct.
/// A `size` below `min` (the struct's first version) is `HG_STATUS_INVALID_ARGUMENT`, nothing
/// written.
///
/// # Safety
/// `out` is NULL or has `size` writable bytes.
pub(crate) unsafe fn fill<T: Copy>(out: *mut T, size: usize, min: usize, v: &T) -> hg_status {
    if out.is_null() {
        return hg_status::HG_STATUS_NULL_PARAMETER;
    }
    if size < min.max(size_of::<u32>()) {
        return hg_status::HG_STATUS_INVALID_ARGUMENT;
    }
    let n = size.min(size_of::<T>());
    // SAFETY: `n` bytes fit the caller's `size` writable bytes and `v`; distinct objects.
    unsafe {
        std::ptr::copy_nonoverlapping((&raw const *v).cast::<u8>(), out.cast::<u8>(), n);
        out.cast::<u32>().write_unaligned(n as u32);
    }
    hg_status::HG_STATUS_OK
}

/// Writes `bytes` with a terminating NUL into `buf` (as `hg_origin_key()`; the host and fleet bulkheads' strings): `*out_len`
/// receives the length without the NUL; a `buf` too small is `HG_STATUS_INVALID_ARGUMENT`.
///
/// # Safety
/// `buf` is NULL or has `buf_len` writable bytes; `out_len` is non-null and writable.
pub(crate) unsafe fn write_str(
    bytes: &[u8],
    buf: *mut c_char,
    buf_len: usize,
    out_len: &mut usize,
) -> hg_status {
    *out_len = bytes.len();
    if bytes.len() + 1 > buf_len {
        return hg_status::HG_STATUS_INVALID_ARGUMENT;
    }
    // SAFETY: `buf` has `buf_len >= bytes.len() + 1` writable bytes (contract + check; a
    // NULL `buf` comes with `buf_len` 0, refused above).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
        *buf.add(bytes.len()) = 0;
    }
    hg_status::HG_STATUS_OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    #[derive(Debug, Clone, Copy, PartialEq)]
    struct V2 {
        struct_size: u32,
        a: u64,
        b: u64,
    }
    // SAFETY: repr(C), `struct_size` first, integers only.
    unsafe impl Plain for V2 {}
    // SAFETY: as above.
    unsafe impl Output for V2 {}

    #[repr(C)]
    #[derive(Clone, Copy)]
    struct V3 {
        v2: V2,
        c: u64,
    }

    /// `read` of a live value (its declared size is readable).
    fn rd(p: *const V2) -> Result<V2, hg_status> {
        // SAFETY: every caller passes NULL or a live V2 (or a V3, whose first bytes are one)
        // whose declared size is readable.
        unsafe { read(p, 16) }
    }

    /// `write` into a live value (its `struct_size` set).
    fn wr(p: *mut V2, v: &V2) -> hg_status {
        // SAFETY: every caller passes NULL or a live V2 (or a V3's first bytes).
        unsafe { write(p, v) }
    }

    #[test]
    fn fill_writes_at_most_the_callers_size() {
        let d = V2 {
            struct_size: 0,
            a: 7,
            b: 9,
        };
        // An older caller's 16-byte struct inside a bigger buffer: the bytes past it untouched.
        let mut big = V3 {
            v2: V2 {
                struct_size: 0,
                a: 0,
                b: 0xEE,
            },
            c: 0xCC,
        };
        // SAFETY: `big` has at least 16 writable bytes.
        let s = unsafe { fill(&raw mut big.v2, 16, 8, &d) };
        assert_eq!(s, hg_status::HG_STATUS_OK);
        assert_eq!(
            (big.v2.struct_size, big.v2.a, big.v2.b, big.c),
            (16, 7, 0xEE, 0xCC)
        );
        // A newer caller's bigger struct: ours, `struct_size` says how much.
        // SAFETY: `big` has size_of::<V3>() writable bytes.
        let s = unsafe { fill(&raw mut big.v2, size_of::<V3>(), 8, &d) };
        assert_eq!(s, hg_status::HG_STATUS_OK);
        assert_eq!(
            (big.v2.struct_size as usize, big.v2.b, big.c),
            (size_of::<V2>(), 9, 0xCC)
        );
        // Below the first version, or NULL: refused, nothing written.
        let mut small = V2 {
            struct_size: 3,
            ..d
        };
        let s = {
            // SAFETY: `small` has 16 writable bytes (7 passed).
            unsafe { fill(&raw mut small, 7, 8, &d) }
        };
        assert_eq!(s, hg_status::HG_STATUS_INVALID_ARGUMENT);
        assert_eq!(small.struct_size, 3);
        let s = {
            // SAFETY: NULL is refused before any write.
            unsafe { fill(std::ptr::null_mut::<V2>(), 16, 8, &d) }
        };
        assert_eq!(s, hg_status::HG_STATUS_NULL_PARAMETER);
    }

    #[test]
    fn reads_older_smaller_and_newer_zero_tailed_structs_only() {
        let v = V2 {
            struct_size: size_of::<V2>() as u32,
            a: 1,
            b: 2,
        };
        assert_eq!(rd(&v), Ok(v));
        // An older caller: `b` is past its size, read as 0.
        let old = V2 {
            struct_size: 16,
            ..v
        };
        assert_eq!(rd(&old).map(|x| (x.a, x.b)), Ok((1, 0)));
        // Below the minimum, NULL.
        let small = V2 {
            struct_size: 8,
            ..v
        };
        assert_eq!(rd(&small), Err(hg_status::HG_STATUS_INVALID_ARGUMENT));
        assert_eq!(
            rd(std::ptr::null()),
            Err(hg_status::HG_STATUS_NULL_PARAMETER)
        );
        // A newer caller: a zero tail is accepted, a non-zero one refused.
        let mut newer = V3 {
            v2: V2 {
                struct_size: size_of::<V3>() as u32,
                ..v
            },
            c: 0,
        };
        assert_eq!(rd(&raw const newer.v2).map(|x| x.b), Ok(2));
        newer.c = 5;
        assert_eq!(
            rd(&raw const newer.v2),
            Err(hg_status::HG_STATUS_INVALID_ARGUMENT)
        );
    }

    #[test]
    fn refuses_a_size_that_ends_inside_a_whole_field() {
        let b = std::mem::offset_of!(V2, b);
        let mut v = V2 {
            struct_size: (b + 4) as u32,
            a: 1,
            b: u64::MAX,
        };
        let whole = b..b + 8;
        // SAFETY: a live V2 (its declared size is readable).
        let rd = |v: &V2| unsafe { read_whole(v, 16, std::slice::from_ref(&whole)) };
        assert_eq!(rd(&v), Err(hg_status::HG_STATUS_INVALID_ARGUMENT));
        v.struct_size = b as u32;
        assert_eq!(rd(&v).map(|x| x.b), Ok(0));
        v.struct_size = (b + 8) as u32;
        assert_eq!(rd(&v).map(|x| x.b), Ok(u64::MAX));
    }

    #[test]
    fn writes_at_most_the_declared_size_and_echoes_it() {
        let v = V2 {
            struct_size: 0,
            a: 7,
            b: 8,
        };
        let mut out = V2 {
            struct_size: 16,
            a: 0,
            b: 99,
        };
        assert_eq!(wr(&mut out, &v), hg_status::HG_STATUS_OK);
        assert_eq!((out.struct_size, out.a, out.b), (16, 7, 99));
        let mut big = V3 {
            v2: V2 {
                struct_size: size_of::<V3>() as u32,
                a: 0,
                b: 0,
            },
            c: 42,
        };
        assert_eq!(wr(&raw mut big.v2, &v), hg_status::HG_STATUS_OK);
        assert_eq!(
            (big.v2.struct_size as usize, big.v2.b, big.c),
            (size_of::<V2>(), 8, 42)
        );
        out.struct_size = 2;
        assert_eq!(wr(&mut out, &v), hg_status::HG_STATUS_INVALID_ARGUMENT);
        assert_eq!(
            wr(std::ptr::null_mut(), &v),
            hg_status::HG_STATUS_NULL_PARAMETER
        );
    }
}
