//! napi-rs link set-up for the addon.
fn main() {
    napi_build::setup();
}
