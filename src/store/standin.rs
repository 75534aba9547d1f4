//! A scripted stand-in for Redis, for the tests of the store and its
//! callers: it reads RESP arrays of bulk strings, keeps counters as Redis
//! does (`INCR`, `INCRBY`, `EXPIRE`, `GET`, `ECHO`, `PING`; the client's
//! setup, `CLIENT`, `SELECT` and `AUTH`, answers `+OK`), and lets a test
//! change the answer to any command: other bytes, one extra reply before or
//! after, a delay, silence, or a connection closed by the server.
//!
//! Deliberately not a Redis: no expiry, no types, one error (`-ERR`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// One command as the stand-in received it.
pub struct Step<'a> {
    /// The connection's number, from 0, in the order accepted.
    pub conn: usize,
    /// How many commands of this name the connection sent before this one.
    pub nth: usize,
    /// The command name (upper case), then its arguments.
    pub args: &'a [String],
}

/// How to answer one command.
pub enum Answer {
    /// As Redis would.
    Normal,
    /// These bytes instead.
    Bytes(Vec<u8>),
    /// These bytes (an extra reply), then the normal answer.
    Before(Vec<u8>),
    /// The normal answer, then these bytes (an extra reply).
    After(Vec<u8>),
    /// The normal answer after a delay; later commands on the connection wait.
    Delay(Duration),
    /// No answer, ever, on this connection.
    Silence,
}

type Script = dyn Fn(&Step<'_>) -> Answer + Send + Sync;

struct State {
    script: Box<Script>,
    counts: Mutex<HashMap<String, i64>>,
    seen: Mutex<Vec<String>>,
    accepted: AtomicUsize,
    open: AtomicUsize,
    most_open: AtomicUsize,
    tasks: Mutex<Vec<AbortHandle>>,
}

/// A listening stand-in; its tasks live on the runtime that started it.
pub struct StandIn {
    /// Where it listens.
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl StandIn {
    /// A stand-in answering as Redis would.
    pub async fn normal() -> StandIn {
        Self::start(|_| Answer::Normal).await
    }

    /// A stand-in answering each command as `script` says.
    pub async fn start(script: impl Fn(&Step<'_>) -> Answer + Send + Sync + 'static) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            script: Box::new(script),
            counts: Mutex::new(HashMap::new()),
            seen: Mutex::new(Vec::new()),
            accepted: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            most_open: AtomicUsize::new(0),
            tasks: Mutex::new(Vec::new()),
        });
        let s = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let conn = s.accepted.fetch_add(1, Ordering::SeqCst);
                let open = s.open.fetch_add(1, Ordering::SeqCst) + 1;
                s.most_open.fetch_max(open, Ordering::SeqCst);
                let guard = Open(s.clone());
                let task = tokio::spawn(serve(stream, conn, guard));
                s.tasks.lock().unwrap().push(task.abort_handle());
            }
        });
        StandIn { addr, state }
    }

    /// `redis://` URL of the stand-in.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Closes every connection from the server's side, as Redis's idle
    /// `timeout` does.
    pub fn close_all(&self) {
        for t in self.state.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.state.open.load(Ordering::SeqCst)
    }

    /// The most connections open at once so far.
    pub fn most_open(&self) -> usize {
        self.state.most_open.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }

    /// How many commands named `name` it has received.
    pub fn seen(&self, name: &str) -> usize {
        let seen = self.state.seen.lock().unwrap();
        seen.iter().filter(|n| *n == name).count()
    }

    /// A counter's value (0 when never set).
    pub fn count(&self, key: &str) -> i64 {
        *self.state.counts.lock().unwrap().get(key).unwrap_or(&0)
    }
}

/// Counts a connection open until its task ends (or is aborted).
struct Open(Arc<State>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn serve(stream: TcpStream, conn: usize, open: Open) {
    let state = open.0.clone();
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut nth: HashMap<String, usize> = HashMap::new();
    while let Some(args) = read_command(&mut read).await {
        let name = args[0].clone();
        state.seen.lock().unwrap().push(name.clone());
        let n = nth.entry(name).or_default();
        let step = Step {
            conn,
            nth: *n,
            args: &args,
        };
        *n += 1;
        let out = match (state.script)(&step) {
            Answer::Normal => normal(&state, &args),
            Answer::Bytes(b) => b,
            Answer::Before(mut b) => {
                b.extend(normal(&state, &args));
                b
            }
            Answer::After(b) => {
                let mut out = normal(&state, &args);
                out.extend(b);
                out
            }
            Answer::Delay(d) => {
                tokio::time::sleep(d).await;
                normal(&state, &args)
            }
            Answer::Silence => {
                // Answer nothing more; read (and drop) until the client hangs up.
                let mut sink = [0u8; 512];
                while matches!(read.read(&mut sink).await, Ok(n) if n > 0) {}
                return;
            }
        };
        if write.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// One command: an array of bulk strings, the name upper-cased.
async fn read_command(r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> Option<Vec<String>> {
    let mut line = String::new();
    r.read_line(&mut line).await.ok()?;
    let n: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        r.read_line(&mut line).await.ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut buf = vec![0u8; len + 2];
        r.read_exact(&mut buf).await.ok()?;
        buf.truncate(len);
        args.push(String::from_utf8(buf).ok()?);
    }
    if let Some(name) = args.first_mut() {
        *name = name.to_ascii_uppercase();
    }
    (!args.is_empty()).then_some(args)
}

/// What Redis would answer.
fn normal(state: &State, args: &[String]) -> Vec<u8> {
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let mut counts = state.counts.lock().unwrap();
    match args[0].as_str() {
        "INCR" | "INCRBY" => {
            let by: i64 = if args[0] == "INCR" {
                1
            } else {
                arg(2).parse().unwrap_or(0)
            };
            let v = counts.entry(arg(1).to_string()).or_default();
            *v += by;
            format!(":{v}\r\n").into_bytes()
        }
        "EXPIRE" => format!(":{}\r\n", u8::from(counts.contains_key(arg(1)))).into_bytes(),
        "GET" => match counts.get(arg(1)) {
            Some(v) => {
                let v = v.to_string();
                format!("${}\r\n{v}\r\n", v.len()).into_bytes()
            }
            None => b"$-1\r\n".to_vec(),
        },
        "ECHO" => format!("${}\r\n{}\r\n", arg(1).len(), arg(1)).into_bytes(),
        "PING" => b"+PONG\r\n".to_vec(),
        "CLIENT" | "SELECT" | "AUTH" => b"+OK\r\n".to_vec(),
        _ => b"-ERR unknown command\r\n".to_vec(),
    }
}
