//! The Redis side (docs/design.md §16.2): the `hullguard` Functions library
//! (`fleet/lua/hullguard.lua`), and the same code as one `EVAL` script for servers whose ACLs
//! forbid `FUNCTION LOAD` (the `EVALSHA` fallback).

/// The library's source, loaded with `FUNCTION LOAD REPLACE`.
pub const LIBRARY: &str = include_str!("../lua/hullguard.lua");

/// The library's version: `FCALL_RO hg_version` answers it; a client reloads the library only
/// when the answer differs.
pub const LIB_VERSION: i64 = 3;

/// A hash of [`LIBRARY`] (FNV-1a 64): a test fails when the library changes without a new
/// [`LIB_VERSION`] — a Redis that has the old one would otherwise keep running it.
pub const LIBRARY_HASH: u64 = 9_577_143_867_689_680_013;

/// FNV-1a 64 of `text`.
pub const fn fnv1a(text: &str) -> u64 {
    let b = text.as_bytes();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < b.len() {
        h ^= b[i] as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    h
}

/// The library as one `EVAL` script: the shebang line dropped, `redis.register_function`
/// replaced by a local table of functions, and a dispatch on `ARGV[1]` (the function's name;
/// the rest of `ARGV` are its arguments). Run as
/// `EVALSHA <sha> 6 <keys…> <function> <args…>`.
pub fn eval_source() -> String {
    let body: String = LIBRARY
        .lines()
        .filter(|l| !l.starts_with("#!"))
        .collect::<Vec<_>>()
        .join("\n");
    let body = body.replace("redis.register_function", "hg_register");
    format!(
        "local hg_functions = {{}}\n\
         local function hg_register(a, b)\n\
         \x20 if type(a) == 'table' then hg_functions[a.function_name] = a.callback else hg_functions[a] = b end\n\
         end\n\
         {body}\n\
         local hg_fn = hg_functions[ARGV[1]]\n\
         if hg_fn == nil then return redis.error_reply('ERR hullguard: unknown function ' .. tostring(ARGV[1])) end\n\
         local hg_args = {{}}\n\
         for i = 2, #ARGV do hg_args[i - 1] = ARGV[i] end\n\
         return hg_fn(KEYS, hg_args)\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_library_has_a_new_version() {
        assert_eq!(
            fnv1a(LIBRARY),
            LIBRARY_HASH,
            "fleet/lua/hullguard.lua changed: raise LIB_VERSION (here and in the library) and set LIBRARY_HASH to the new hash"
        );
        assert!(LIBRARY.contains(&format!("local LIB_VERSION = {LIB_VERSION}\n")));
    }
}
