//! The mixed hammer (issue 19, REACH.md A4 item 4): 8 processes — 3 Rust, 3 Python, 2 Node —
//! share one host bulkhead, each running random acquire / release / cancel / timeout
//! operations, while a chaos killer SIGKILLs a random one every 200 ms and starts another of
//! the same language. An oracle proves `in flight ≤ limit` throughout and nothing is held at
//! the end.
//!
//! The oracle is a TCP server in this process: a worker says `+w` after a grant and `-w` before
//! it releases (and waits for the answer), so the oracle's count never exceeds what the ledger
//! has admitted to live processes; a killed worker's connection closes with it, and its share
//! leaves the count at once. Every `+` is checked against the limit.
//!
//! Needs the Python extension (`make py-dev`) and the Node addon (`make node-build`), so it is
//! `#[ignore]`d in `make host-test` and run by `make host-mixed` with `HG_MIXED_PYTHON` (the
//! venv's python) and `HG_MIXED_NODE` (the bindings-node directory) set.

use std::{
    future::Future,
    io::{BufRead, BufReader, Write},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering::SeqCst},
    },
    thread,
    time::{Duration, Instant},
};

use hullguard_host::{HostBulkhead, HostOptions, Request};

const LIMIT: u64 = 4;
const RUN: Duration = Duration::from_secs(3);
const CHAOS_EVERY: Duration = Duration::from_millis(200);

/// The oracle's state: live connections' in-flight weights, the largest total seen, faults.
#[derive(Default)]
struct Oracle {
    total: AtomicU64,
    max: AtomicU64,
    grants: AtomicU64,
    /// Grants per language (a worker's first line names it).
    by_lang: Mutex<std::collections::BTreeMap<String, u64>>,
    violations: Mutex<Vec<String>>,
}

fn serve(listener: TcpListener, oracle: Arc<Oracle>, stop: Arc<AtomicBool>) {
    listener.set_nonblocking(true).unwrap();
    let mut handlers = Vec::new();
    while !stop.load(SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let oracle = oracle.clone();
                handlers.push(thread::spawn(move || connection(stream, oracle)));
            }
            Err(_) => thread::sleep(Duration::from_millis(2)),
        }
    }
    drop(handlers); // detached: each ends when its worker's connection closes
}

fn connection(stream: TcpStream, oracle: Arc<Oracle>) {
    stream.set_nodelay(true).ok();
    let mut out = stream.try_clone().unwrap();
    let mut mine = 0u64;
    let mut lang = String::new();
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { break };
        if let Some(l) = line.strip_prefix("lang ") {
            lang = l.to_string();
            if out.write_all(b"k\n").is_err() {
                break;
            }
            continue;
        }
        let (sign, w) = line.split_at(1.min(line.len()));
        let w: u64 = w.trim().parse().unwrap_or(0);
        match sign {
            "+" => {
                mine += w;
                let now = oracle.total.fetch_add(w, SeqCst) + w;
                oracle.max.fetch_max(now, SeqCst);
                oracle.grants.fetch_add(1, SeqCst);
                *oracle
                    .by_lang
                    .lock()
                    .unwrap()
                    .entry(lang.clone())
                    .or_default() += 1;
                if now > LIMIT {
                    oracle
                        .violations
                        .lock()
                        .unwrap()
                        .push(format!("in flight {now} > limit {LIMIT}"));
                }
            }
            "-" => {
                let w = w.min(mine);
                mine -= w;
                oracle.total.fetch_sub(w, SeqCst);
            }
            _ => {}
        }
        if out.write_all(b"k\n").is_err() {
            break;
        }
    }
    // The worker is gone (killed or done): its share leaves the count at once.
    oracle.total.fetch_sub(mine, SeqCst);
}

/// A worker process, killed and reaped on drop.
struct Worker {
    lang: &'static str,
    child: Child,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Langs {
    python: PathBuf,
    node_pkg: PathBuf,
    dir: PathBuf,
    port: u16,
}

const PY: &str = r#"
import asyncio, os, random, socket, sys
import hullguard
name, d, port, limit = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
bh = hullguard.HostBulkhead(name, max_concurrent=limit, dir=d, probe=0.05, beat=0.05, lease_ttl=1.0)
async def worker(seed):
    rng = random.Random(seed)
    r, w = await asyncio.open_connection("127.0.0.1", port)
    async def say(s):
        w.write(s.encode()); await w.drain(); await r.readline()
    await say("lang python\n")
    while True:
        weight = rng.randint(1, 2)
        op = rng.random()
        try:
            if op < 0.3:
                p = bh.try_acquire(weight)
                if p is None:
                    continue
            elif op < 0.6:
                p = await bh.acquire(weight, timeout=rng.choice([0.001, 0.02, 0.1]))
            else:  # cancelled while queued, or not
                p = await asyncio.wait_for(bh.acquire(weight, timeout=1.0), rng.choice([0.001, 0.01, 0.05]))
        except (hullguard.BulkheadError, asyncio.TimeoutError):
            continue
        await say(f"+{weight}\n")
        await asyncio.sleep(rng.random() * 0.004)
        await say(f"-{weight}\n")
        p.release()
async def main():
    await asyncio.gather(*(worker(os.getpid() * 10 + i) for i in range(2)))
asyncio.run(main())
"#;

const JS: &str = r#"
const [pkg, name, dir, port, limit] = process.argv.slice(1)
const { HostBulkhead } = require(pkg)
const net = require('node:net')
const bh = new HostBulkhead(name, { maxConcurrent: Number(limit), dir, probeMs: 50, beatMs: 50, leaseTtlMs: 1000 })
function link() {
  const s = net.connect(Number(port), '127.0.0.1')
  s.setNoDelay(true)
  let buf = '', waiting = []
  s.on('data', (d) => { buf += d; let i; while ((i = buf.indexOf('\n')) >= 0) { buf = buf.slice(i + 1); waiting.shift()() } })
  return (line) => new Promise((resolve) => { waiting.push(resolve); s.write(line) })
}
async function worker() {
  const say = link()
  await say('lang node\n')
  for (;;) {
    const weight = 1 + Math.floor(Math.random() * 2)
    const op = Math.random()
    let p
    try {
      if (op < 0.3) { p = bh.tryAcquire(weight); if (p === null) { await new Promise((r) => setImmediate(r)); continue } }
      else if (op < 0.6) p = await bh.acquire({ weight, queueTimeoutMs: [1, 20, 100][Math.floor(Math.random() * 3)] })
      else p = await bh.acquire({ weight, queueTimeoutMs: 1000, signal: AbortSignal.timeout([1, 10, 50][Math.floor(Math.random() * 3)]) })
    } catch { continue }
    await say(`+${weight}\n`)
    await new Promise((r) => setTimeout(r, Math.random() * 4))
    await say(`-${weight}\n`)
    p.release()
  }
}
worker(); worker()
"#;

fn spawn(lang: &'static str, l: &Langs, name: &str) -> Worker {
    let child = match lang {
        "rust" => Command::new(std::env::current_exe().unwrap())
            .args([
                "rust_worker",
                "--exact",
                "--nocapture",
                "--include-ignored",
                "--test-threads=1",
            ])
            .env(
                "HG_MIXED_WORKER",
                format!("{name} {} {} {LIMIT}", l.dir.display(), l.port),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn(),
        "python" => Command::new(&l.python)
            .args([
                "-c",
                PY,
                name,
                &l.dir.to_string_lossy(),
                &l.port.to_string(),
                &LIMIT.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn(),
        _ => Command::new("node")
            .args([
                "-e",
                JS,
                "--",
                &l.node_pkg.to_string_lossy(),
                name,
                &l.dir.to_string_lossy(),
                &l.port.to_string(),
                &LIMIT.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn(),
    }
    .unwrap_or_else(|e| panic!("spawn a {lang} worker: {e}"));
    Worker { lang, child }
}

/// The Rust worker (this binary re-executed): random try / timed / cancelled acquires.
#[test]
#[ignore = "a worker of mixed_hammer, not a test"]
fn rust_worker() {
    let Ok(spec) = std::env::var("HG_MIXED_WORKER") else {
        return;
    };
    let v: Vec<&str> = spec.split(' ').collect();
    let (name, dir, port) = (v[0], PathBuf::from(v[1]), v[2]);
    let bh =
        Arc::new(HostBulkhead::open(name, options(&dir)).unwrap_or_else(|e| panic!("open: {e}")));
    let mut threads = Vec::new();
    for t in 0..2u64 {
        let bh = bh.clone();
        let port = port.to_string();
        threads.push(thread::spawn(move || {
            let stream = TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
            stream.set_nodelay(true).ok();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut out = stream;
            let mut say = |s: String| {
                out.write_all(s.as_bytes()).unwrap();
                let mut ack = String::new();
                reader.read_line(&mut ack).unwrap();
            };
            say("lang rust\n".into());
            let mut x = u64::from(std::process::id()) * 31 + t + 1;
            let mut rnd = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            loop {
                let weight = 1 + rnd() % 2;
                let permit = match rnd() % 3 {
                    0 => bh.try_acquire(weight).ok(),
                    1 => bh
                        .acquire_blocking(weight, Some(Duration::from_millis(1 + rnd() % 50)))
                        .ok(),
                    _ => {
                        // An async acquire dropped (cancelled) after a few polls, or granted.
                        let fut =
                            bh.acquire(Request::new(weight).queue_timeout(Duration::from_secs(1)));
                        let mut fut = std::pin::pin!(fut);
                        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                        let mut got = None;
                        for _ in 0..(rnd() % 20) {
                            if let std::task::Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                                got = r.ok();
                                break;
                            }
                            thread::sleep(Duration::from_millis(1));
                        }
                        got
                    }
                };
                let Some(p) = permit else { continue };
                say(format!("+{weight}\n"));
                thread::sleep(Duration::from_micros(rnd() % 4000));
                say(format!("-{weight}\n"));
                let _ = p.release();
            }
        }));
    }
    for t in threads {
        let _ = t.join();
    }
}

fn options(dir: &Path) -> HostOptions {
    HostOptions {
        max_concurrent: LIMIT,
        dir: dir.to_path_buf(),
        probe: Duration::from_millis(50),
        beat: Duration::from_millis(50),
        lease_ttl: Duration::from_secs(1),
        ..HostOptions::default()
    }
}

#[test]
#[ignore = "needs the Python extension and the Node addon: make host-mixed"]
fn mixed_hammer() {
    let python = PathBuf::from(std::env::var("HG_MIXED_PYTHON").expect("HG_MIXED_PYTHON"));
    let node_pkg = PathBuf::from(std::env::var("HG_MIXED_NODE").expect("HG_MIXED_NODE"));
    let dir = std::env::temp_dir().join(format!("hg-mixed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let name = "mixed";
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let oracle = Arc::new(Oracle::default());
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let (oracle, stop) = (oracle.clone(), stop.clone());
        thread::spawn(move || serve(listener, oracle, stop))
    };
    let langs = Langs {
        python,
        node_pkg,
        dir: dir.clone(),
        port,
    };
    // The parent attaches too (its stats are the check at the end).
    let bh = HostBulkhead::open(name, options(&dir)).unwrap();
    let plan: [&'static str; 8] = [
        "rust", "rust", "rust", "python", "python", "python", "node", "node",
    ];
    let mut workers: Vec<Worker> = plan.iter().map(|&l| spawn(l, &langs, name)).collect();
    let mut x = u64::from(std::process::id()) | 1;
    let start = Instant::now();
    let mut kills = 0;
    while start.elapsed() < RUN {
        thread::sleep(CHAOS_EVERY);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = (x % workers.len() as u64) as usize;
        let lang = workers[i].lang;
        // SIGKILL (Child::kill), reap, start another of the same language.
        workers[i] = spawn(lang, &langs, name);
        kills += 1;
    }
    let grants_during = oracle.grants.load(SeqCst);
    let by_lang = oracle.by_lang.lock().unwrap().clone();
    workers.clear(); // every worker killed and reaped
    // Every killed worker's slot is reclaimed: nothing held, nothing queued.
    let t0 = Instant::now();
    loop {
        let s = bh.stats();
        if s.stats.active == 0 && s.stats.queued == 0 && s.in_flight == 0 {
            println!(
                "mixed_hammer: {kills} SIGKILLs, {grants_during} grants checked {by_lang:?}, max in flight {}, reclaimed dead {}, after the end drained in {:?}",
                oracle.max.load(SeqCst),
                s.reclaimed_dead_total,
                t0.elapsed()
            );
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "still held after the end: {s:?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, SeqCst);
    server.join().unwrap();
    let violations = oracle.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:?}");
    assert!(oracle.max.load(SeqCst) <= LIMIT);
    for lang in ["rust", "python", "node"] {
        assert!(
            by_lang.get(lang).is_some_and(|&n| n > 0),
            "no {lang} worker was granted: {by_lang:?}"
        );
    }
    let p = bh.try_acquire(LIMIT).expect("the whole limit is free");
    drop(p);
    std::fs::remove_dir_all(&dir).ok();
}
