//! The [`Transport`] over the `redis` crate (docs/design.md §16.4): any of its blocking
//! connections — `redis::Connection`, `redis::cluster::ClusterConnection`, a pooled one — so TLS,
//! auth, Sentinel and Cluster stay the user's configuration. The library is loaded with
//! `FUNCTION LOAD REPLACE` when `hg_version` is missing or differs (on a cluster the crate sends
//! it to every primary); where an ACL refuses `FUNCTION`, the same code runs as one script
//! through `EVALSHA` (the crate's `Script` retries a `NOSCRIPT` with `EVAL`).

use redis::{ConnectionLike, Value};

use crate::{
    pool::Keys,
    protocol::{FN_VERSION, Field},
    script::{LIB_VERSION, LIBRARY, eval_source},
    transport::{Transport, TransportError, TransportErrorKind},
};

/// How the library is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loading {
    /// Redis Functions (`FCALL`), the default.
    Functions,
    /// One script through `EVALSHA` (ACLs that forbid `FUNCTION`).
    Eval,
}

/// A [`Transport`] on a `redis` crate connection.
pub struct RedisTransport<C> {
    conn: C,
    loading: Loading,
    ready: bool,
    script: Option<redis::Script>,
}

impl<C> std::fmt::Debug for RedisTransport<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTransport")
            .field("loading", &self.loading)
            .field("ready", &self.ready)
            .finish_non_exhaustive()
    }
}

impl<C: ConnectionLike + Send> RedisTransport<C> {
    /// A transport on `conn`, using Redis Functions (falls back to `EVALSHA` by itself when
    /// `FUNCTION LOAD` is refused with `NOPERM`).
    pub fn new(conn: C) -> Self {
        RedisTransport {
            conn,
            loading: Loading::Functions,
            ready: false,
            script: None,
        }
    }

    /// A transport on `conn` that runs the library through `EVALSHA` only.
    pub fn with_eval(conn: C) -> Self {
        RedisTransport {
            loading: Loading::Eval,
            ..Self::new(conn)
        }
    }

    /// How the library is run.
    pub fn loading(&self) -> Loading {
        self.loading
    }

    /// The connection.
    pub fn connection(&mut self) -> &mut C {
        &mut self.conn
    }

    fn raw(&mut self, function: &str, keys: &Keys, argv: &[String]) -> redis::RedisResult<Value> {
        if function == crate::protocol::CMD_WAIT {
            let mut cmd = redis::cmd(function);
            for a in argv {
                cmd.arg(a);
            }
            return cmd.query(&mut self.conn);
        }
        match self.loading {
            Loading::Functions => {
                let mut cmd = redis::cmd("FCALL");
                cmd.arg(function).arg(keys.0.len());
                for k in keys.iter() {
                    cmd.arg(k);
                }
                for a in argv {
                    cmd.arg(a);
                }
                cmd.query(&mut self.conn)
            }
            Loading::Eval => {
                let script = self
                    .script
                    .get_or_insert_with(|| redis::Script::new(&eval_source()));
                let mut inv = script.prepare_invoke();
                for k in keys.iter() {
                    inv.key(k);
                }
                inv.arg(function);
                for a in argv {
                    inv.arg(a);
                }
                inv.invoke(&mut self.conn)
            }
        }
    }

    /// Runs `function`, reloading the library once if the server lost it (`FUNCTION FLUSH`,
    /// a new server without the library).
    fn call(
        &mut self,
        function: &str,
        keys: &Keys,
        argv: &[String],
    ) -> Result<Value, TransportError> {
        self.ensure_library(keys)?;
        match self.raw(function, keys, argv) {
            Err(e) if self.loading == Loading::Functions && missing_function(&e) => {
                self.ready = false;
                self.ensure_library(keys)?;
                self.raw(function, keys, argv).map_err(error)
            }
            other => other.map_err(error),
        }
    }
}

fn missing_function(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    text.contains("Function not found") || text.contains("function not found")
}

fn error(e: redis::RedisError) -> TransportError {
    let kind = if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
        TransportErrorKind::Io
    } else {
        TransportErrorKind::Server
    };
    TransportError {
        kind,
        message: e.to_string(),
    }
}

fn int_of(v: &Value) -> Result<i64, TransportError> {
    match v {
        Value::Int(n) => Ok(*n),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| TransportError::protocol(format!("not an integer: {v:?}"))),
        other => Err(TransportError::protocol(format!(
            "not an integer: {other:?}"
        ))),
    }
}

impl<C: ConnectionLike + Send> Transport for RedisTransport<C> {
    fn ensure_library(&mut self, keys: &Keys) -> Result<(), TransportError> {
        if self.ready {
            return Ok(());
        }
        if self.loading == Loading::Functions {
            let version: redis::RedisResult<i64> = redis::cmd("FCALL_RO")
                .arg(FN_VERSION)
                .arg(1)
                .arg(&keys.0[0])
                .query(&mut self.conn);
            if version.as_ref().ok() != Some(&LIB_VERSION) {
                let loaded: redis::RedisResult<Value> = redis::cmd("FUNCTION")
                    .arg("LOAD")
                    .arg("REPLACE")
                    .arg(LIBRARY)
                    .query(&mut self.conn);
                match loaded {
                    Ok(_) => {}
                    Err(e) if e.to_string().contains("NOPERM") => self.loading = Loading::Eval,
                    Err(e) => return Err(error(e)),
                }
            }
        }
        self.ready = true;
        Ok(())
    }

    fn call_ints(
        &mut self,
        function: &str,
        keys: &Keys,
        argv: &[String],
    ) -> Result<Vec<i64>, TransportError> {
        match self.call(function, keys, argv)? {
            Value::Array(items) => items.iter().map(int_of).collect(),
            v => Ok(vec![int_of(&v)?]),
        }
    }

    fn call_fields(
        &mut self,
        function: &str,
        keys: &Keys,
        argv: &[String],
    ) -> Result<Vec<Field>, TransportError> {
        let Value::Array(items) = self.call(function, keys, argv)? else {
            return Err(TransportError::protocol(format!(
                "{function} answered a scalar"
            )));
        };
        items
            .into_iter()
            .map(|v| match v {
                Value::Int(n) => Ok(Field::Int(n)),
                Value::BulkString(b) => Ok(Field::Text(String::from_utf8_lossy(&b).into_owned())),
                Value::SimpleString(s) => Ok(Field::Text(s)),
                other => Err(TransportError::protocol(format!("{function}: {other:?}"))),
            })
            .collect()
    }
}

/// A plain connection from a `redis::Client` that reconnects on the next call after the
/// connection failed (Redis restarted, a network blip), with a timeout on connecting, reading
/// and writing, so a hung server fails the call instead of blocking the lease's driver past its
/// deadline. For a cluster, use the crate's `ClusterConnection` (it reconnects by itself).
pub struct Reconnecting {
    client: redis::Client,
    timeout: std::time::Duration,
    conn: Option<redis::Connection>,
}

impl std::fmt::Debug for Reconnecting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconnecting")
            .field("timeout", &self.timeout)
            .field("connected", &self.conn.is_some())
            .finish_non_exhaustive()
    }
}

impl Reconnecting {
    /// Connections from `client`, each call bounded by `timeout` (connect, write, read).
    pub fn new(client: redis::Client, timeout: std::time::Duration) -> Self {
        Reconnecting {
            client,
            timeout,
            conn: None,
        }
    }

    fn conn(&mut self) -> redis::RedisResult<&mut redis::Connection> {
        if self.conn.is_none() {
            let c = self.client.get_connection_with_timeout(self.timeout)?;
            c.set_read_timeout(Some(self.timeout))?;
            c.set_write_timeout(Some(self.timeout))?;
            self.conn = Some(c);
        }
        Ok(self.conn.as_mut().expect("set above"))
    }

    fn settle<T>(&mut self, r: redis::RedisResult<T>) -> redis::RedisResult<T> {
        let broken =
            |e: &redis::RedisError| e.is_io_error() || e.is_timeout() || e.is_connection_dropped();
        if r.as_ref().err().is_some_and(broken) {
            self.conn = None;
        }
        r
    }
}

impl ConnectionLike for Reconnecting {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<Value> {
        let r = self.conn().and_then(|c| c.req_packed_command(cmd));
        self.settle(r)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<Value>> {
        let r = self
            .conn()
            .and_then(|c| c.req_packed_commands(cmd, offset, count));
        self.settle(r)
    }

    fn get_db(&self) -> i64 {
        self.client.get_connection_info().redis_settings().db()
    }

    fn check_connection(&mut self) -> bool {
        self.conn().is_ok_and(|c| c.check_connection())
    }

    fn is_open(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| c.is_open())
    }
}
