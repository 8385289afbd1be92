//! Real `redis-server` processes (a single node, or a 3-node cluster) started on
//! free loopback ports, each in its own temporary directory, killed and reaped on drop.
//!
//! The binaries are `redis-server` and `redis-cli` from `PATH` (override with
//! `HG_REDIS_SERVER` / `HG_REDIS_CLI`). When they are missing the fixture panics, unless
//! `HG_SKIP_REDIS=1` is set: then `start()` prints a skip line and returns `None`, and the test
//! returns early. CI never sets it.

use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// How long a server gets to answer after it was spawned.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a fresh cluster gets to reach `cluster_state:ok` on every node.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts at a fresh free port when another process took ours between pick and bind.
const PORT_ATTEMPTS: u32 = 8;

fn server_bin() -> String {
    std::env::var("HG_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

fn cli_bin() -> String {
    std::env::var("HG_REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_owned())
}

fn skip_allowed() -> bool {
    std::env::var("HG_SKIP_REDIS").is_ok_and(|v| v == "1")
}

fn runs(bin: &str) -> bool {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `true` when every binary runs; `false` (after a skip line) when one is missing and
/// `HG_SKIP_REDIS=1`; panics otherwise.
fn binaries_present(bins: &[String]) -> bool {
    for bin in bins {
        if !runs(bin) {
            if skip_allowed() {
                eprintln!("SKIP: `{bin}` not found and HG_SKIP_REDIS=1: test skipped");
                return false;
            }
            panic!(
                "`{bin} --version` failed: the fleet tests need a real Redis >= 7.0 \
                 (apt-get install redis-server, or set HG_REDIS_SERVER / HG_REDIS_CLI). \
                 Set HG_SKIP_REDIS=1 to skip them locally (CI never does)."
            );
        }
    }
    true
}

/// A free loopback port: bind port 0, read it, release it. Racy by nature; callers retry.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

/// A fresh empty directory under the system temp dir, unique to this process and call.
fn temp_dir(tag: &str) -> PathBuf {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "hg-redis-{tag}-{}-{}-{nanos}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    fs::create_dir_all(&dir).expect("create the server's temp dir");
    dir
}

fn read_log(path: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = fs::File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

fn kill_and_reap(child: &mut Child) {
    let _ = child.kill(); // SIGKILL on Unix
    let _ = child.wait();
}

/// Waits until the server spawned as `child` answers on `port` (checked by its pid, so another
/// process that won the port race is never mistaken for ours). `Err` when the child exited.
fn wait_ready(child: &mut Child, port: u16, log: &Path) -> Result<(), String> {
    let deadline = Instant::now() + START_TIMEOUT;
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("client");
    let want = format!("process_id:{}", child.id());
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "redis-server exited ({status}):\n{}",
                read_log(log)
            ));
        }
        if let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(200)) {
            let info: redis::RedisResult<String> =
                redis::cmd("INFO").arg("server").query(&mut conn);
            if let Ok(info) = info {
                if info.lines().any(|l| l.trim() == want) {
                    return Ok(());
                }
                // Someone else answers on our port: ours cannot have bound it.
                kill_and_reap(child);
                return Err("another process answers on the port".to_owned());
            }
        }
        if Instant::now() > deadline {
            kill_and_reap(child);
            panic!(
                "redis-server on port {port} did not answer within {START_TIMEOUT:?}:\n{}",
                read_log(log)
            );
        }
        sleep(Duration::from_millis(10));
    }
}

/// Spawns one server on `port` with `extra` arguments in `dir`; `Err` when it could not bind.
fn spawn(port: u16, dir: &Path, extra: &[String]) -> Result<Child, String> {
    let log = dir.join("redis.log");
    let _ = fs::remove_file(dir.join("dump.rdb")); // a restart starts empty
    let mut child = Command::new(server_bin())
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        // A replica syncs at once (the default waits 5 s for more replicas to share a transfer).
        .args(["--repl-diskless-sync-delay", "0"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(&log)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", server_bin()))?;
    wait_ready(&mut child, port, &log)?;
    Ok(child)
}

/// One `redis-server` process on 127.0.0.1, killed and reaped on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server on a free port. `None` only when skipped (see the module docs).
    pub fn start() -> Option<Self> {
        if !binaries_present(&[server_bin()]) {
            return None;
        }
        Some(Self::start_with(Vec::new(), "node"))
    }

    /// Starts a replica of `primary` on a free port. `None` only when skipped.
    pub fn start_replica_of(primary: &RedisServer) -> Option<Self> {
        if !binaries_present(&[server_bin()]) {
            return None;
        }
        let extra = vec![
            "--replicaof".to_owned(),
            "127.0.0.1".to_owned(),
            primary.port().to_string(),
        ];
        Some(Self::start_with(extra, "replica"))
    }

    fn start_with(extra: Vec<String>, tag: &str) -> Self {
        let dir = temp_dir(tag);
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            match spawn(port, &dir, &extra) {
                Ok(child) => {
                    return Self {
                        child: Some(child),
                        port,
                        dir,
                        extra,
                    };
                }
                Err(e) => last = e,
            }
        }
        let _ = fs::remove_dir_all(&dir);
        panic!("could not start redis-server after {PORT_ATTEMPTS} attempts: {last}");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A new plain connection.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .expect("client")
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("connect to redis-server")
    }

    /// `kill -9` the server (no shutdown, no save) and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }

    /// Starts the server again on the same port with empty state (kills it first if running).
    pub fn restart(&mut self) {
        self.kill9();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match spawn(self.port, &self.dir, &self.extra) {
                Ok(child) => {
                    self.child = Some(child);
                    return;
                }
                Err(e) if Instant::now() > deadline => {
                    panic!("restart on port {} failed: {e}", self.port)
                }
                Err(_) => sleep(Duration::from_millis(50)),
            }
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill9();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of `n` primaries (no replicas), each node its own process and directory.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `n` (≥ 3) cluster-enabled nodes, joins them with `redis-cli --cluster create` and
    /// waits until every node reports `cluster_state:ok`. `None` only when skipped.
    pub fn start(n: usize) -> Option<Self> {
        assert!(
            n >= 3,
            "redis-cli --cluster create needs at least 3 primaries"
        );
        if !binaries_present(&[server_bin(), cli_bin()]) {
            return None;
        }
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            // The cluster bus port is chosen too (the default, port + 10000, may not exist).
            let extra = vec![
                "--cluster-enabled".to_owned(),
                "yes".to_owned(),
                "--cluster-config-file".to_owned(),
                "nodes.conf".to_owned(),
                "--cluster-node-timeout".to_owned(),
                "5000".to_owned(),
                "--cluster-port".to_owned(),
                free_port().to_string(),
            ];
            nodes.push(RedisServer::start_with(extra, "cluster"));
        }
        let cluster = Self { nodes };
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        let out = Command::new(cli_bin())
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_ok();
        Some(cluster)
    }

    fn wait_ok(&self) {
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        for node in &self.nodes {
            let mut conn = node.conn();
            loop {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut conn)
                    .expect("CLUSTER INFO");
                if info.lines().any(|l| l.trim() == "cluster_state:ok") {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node {} not cluster_state:ok within {CLUSTER_TIMEOUT:?}:\n{info}",
                    node.port()
                );
                sleep(Duration::from_millis(20));
            }
        }
    }

    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes' URLs, the seed list of a `redis::cluster::ClusterClient`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}
