//! `hullguard host ls | show | reap | rm` as a Rust binary (the Python and Node packages ship
//! the same command through their own scripts).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = hullguard_host::cli::run(&args);
    print!("{}", out.stdout);
    eprint!("{}", out.stderr);
    std::process::exit(out.status);
}
