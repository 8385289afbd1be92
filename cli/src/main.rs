//! The `hullguard` command (the Python and Node packages ship the same through their own
//! scripts, printing what the same Rust functions return):
//!
//! * `hullguard host ls | show | reap | rm` — the host-wide bulkhead's segments (Linux;
//!   docs/design.md §14.1);
//! * `hullguard fleet show POOL [--redis URL] [--json]` — a fleet pool as Redis holds it
//!   (docs/design.md §16.8).

use std::time::Duration;

use hullguard_fleet::{
    FleetCore, Transport,
    cli::{self, Show},
    redis_transport::{Reconnecting, RedisTransport},
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (status, stdout, stderr) = match args.first().map(String::as_str) {
        Some("fleet") => fleet(&args),
        #[cfg(target_os = "linux")]
        _ => {
            let out = hullguard_host::cli::run(&args);
            (out.status, out.stdout, out.stderr)
        }
        #[cfg(not(target_os = "linux"))]
        _ => (
            2,
            String::new(),
            format!("hullguard: expected fleet\n{}", cli::USAGE),
        ),
    };
    print!("{stdout}");
    eprint!("{stderr}");
    std::process::exit(status);
}

fn fleet(args: &[String]) -> (i32, String, String) {
    let show = match cli::parse(args, std::env::var("HULLGUARD_REDIS_URL").ok()) {
        Ok(s) => s,
        Err(e) => return (2, String::new(), format!("hullguard: {e}\n{}", cli::USAGE)),
    };
    match read(&show) {
        Ok(text) => (0, text, String::new()),
        Err(e) => (1, String::new(), format!("hullguard: {e}\n")),
    }
}

fn read(show: &Show) -> Result<String, String> {
    let client = redis::Client::open(show.redis.as_str()).map_err(|e| e.to_string())?;
    let mut t = RedisTransport::new(Reconnecting::new(client, Duration::from_secs(5)));
    let keys = show.keys();
    t.ensure_library(&keys).map_err(|e| e.to_string())?;
    let fields = t
        .call_fields(hullguard_fleet::protocol::FN_STATS, &keys, &[])
        .map_err(|e| e.to_string())?;
    let stats = FleetCore::decode_pool_stats(&fields).map_err(|e| e.to_string())?;
    Ok(show.render(&stats))
}
