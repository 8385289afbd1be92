//! Gives the shared library a SONAME (`libhullguard.so.0`), so programs linked against it keep
//! working across compatible upgrades.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhullguard.so.0");
    }
}
