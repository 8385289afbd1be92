//! `hullguard host ls | show | reap | rm` (docs/design.md §14.1): the command the Python and
//! Node packages ship (their `hullguard` scripts pass their arguments here and print what comes
//! back), so every package prints the same thing.

use std::path::PathBuf;

use crate::inspect;

/// The usage text.
pub const USAGE: &str = "\
usage: hullguard host ls   [--dir DIR] [--json]
       hullguard host show NAME [--dir DIR] [--json]
       hullguard host reap NAME [--dir DIR]
       hullguard host rm   NAME [--dir DIR] [--force]

  ls    the host bulkheads of this user in DIR (default /dev/shm)
  show  one segment: its limit, what is held, every attached process (alive or dead)
  reap  reclaim the slots of dead processes now (attached processes do it every probe period)
  rm    remove a segment; refused while a live process is attached, unless --force
";

/// What a run printed and its exit status (0 done, 1 failed, 2 bad usage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The exit status.
    pub status: i32,
    /// For standard output.
    pub stdout: String,
    /// For standard error.
    pub stderr: String,
}

fn usage(message: &str) -> Output {
    Output {
        status: 2,
        stdout: String::new(),
        stderr: format!("hullguard: {message}\n{USAGE}"),
    }
}

fn failed(e: impl std::fmt::Display) -> Output {
    Output {
        status: 1,
        stdout: String::new(),
        stderr: format!("hullguard: {e}\n"),
    }
}

fn ok(stdout: String) -> Output {
    Output {
        status: 0,
        stdout,
        stderr: String::new(),
    }
}

/// Runs the command on `args` (without the program name: `["host", "show", "db"]`).
pub fn run(args: &[String]) -> Output {
    let mut words = Vec::new();
    let mut dir = PathBuf::from("/dev/shm");
    let mut json = false;
    let mut force = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--dir" => match it.next() {
                Some(d) => dir = PathBuf::from(d),
                None => return usage("--dir needs a directory"),
            },
            "--json" => json = true,
            "--force" => force = true,
            "-h" | "--help" => return ok(USAGE.into()),
            s if s.starts_with('-') => return usage(&format!("unknown option {s}")),
            s => words.push(s.to_owned()),
        }
    }
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["host", "ls"] => match inspect::list(&dir) {
            Err(e) => failed(e),
            Ok(names) if json => {
                let mut out = String::from("[");
                for (n, name) in names.iter().enumerate() {
                    if n > 0 {
                        out.push(',');
                    }
                    match inspect::show(&dir, name, false) {
                        Ok((info, _)) => out.push_str(&inspect::render_json(&info)),
                        Err(e) => out.push_str(&format!(
                            "{{\"name\":\"{name}\",\"error\":\"{}\"}}",
                            e.to_string().replace('"', "'")
                        )),
                    }
                }
                out.push_str("]\n");
                ok(out)
            }
            Ok(names) => {
                let mut out = format!(
                    "{:<32}  {:>7}  {:>9}  {:>8}  {:>10}\n",
                    "name", "limit", "in flight", "attached", "slots used"
                );
                for name in &names {
                    match inspect::show(&dir, name, false) {
                        Ok((info, _)) => out.push_str(&format!(
                            "{:<32}  {:>7}  {:>9}  {:>8}  {:>10}\n",
                            name,
                            info.config.max_concurrent,
                            info.held().1,
                            info.attached(),
                            format!("{}/{}", info.hwm, info.slots)
                        )),
                        Err(e) => out.push_str(&format!("{name:<32}  {e}\n")),
                    }
                }
                ok(out)
            }
        },
        ["host", "show", name] => match inspect::show(&dir, name, false) {
            Err(e) => failed(e),
            Ok((info, _)) if json => ok(inspect::render_json(&info) + "\n"),
            Ok((info, _)) => ok(inspect::render(&info)),
        },
        ["host", "reap", name] => match inspect::reap(&dir, name) {
            Err(e) => failed(e),
            Ok(n) => ok(format!("reclaimed {n} slot(s) of dead processes\n")),
        },
        ["host", "rm", name] => match inspect::remove(&dir, name, force) {
            Err(e) => failed(e),
            Ok(()) => ok(format!("removed {name}\n")),
        },
        [] => usage("no command"),
        ["host"] => usage("host needs a subcommand: ls, show, reap or rm"),
        ["host", sub @ ("show" | "reap" | "rm")] => usage(&format!("host {sub} needs a NAME")),
        ["host", sub, ..] if !["ls", "show", "reap", "rm"].contains(sub) => {
            usage(&format!("unknown subcommand: host {sub}"))
        }
        ["host", ..] => usage(&format!("too many arguments: {}", words.join(" "))),
        _ => usage(&format!("unknown command: {}", words.join(" "))),
    }
}
