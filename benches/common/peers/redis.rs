//! Redis streams (Debian's `redis-server`).
//!
//! Server: `redis-server --port P --bind 127.0.0.1 --dir <tmp> --appendonly yes
//! --appendfsync always --save ""` (RDB snapshots off so none runs during the measurement; the
//! append-only file is the only persistence; its automatic rewrite keeps Redis's defaults). With `appendfsync always` Redis writes and fsyncs
//! the AOF before it sends the replies of the commands an event-loop iteration executed, so a
//! reply means the command is on disk (pipelined commands share an fsync).
//!
//! Produce: `XADD bench * r <record>` pipelined, [`super::PRODUCE_WINDOW`] in flight. Consume: one
//! consumer group, each consumer thread `XREADGROUP GROUP g c<i> COUNT 1000 BLOCK 100 STREAMS bench >`
//! (reading also moves the group's cursor and adds the entries to the consumer's pending list,
//! which is written to the AOF too); per checkpoint `MULTI`, `XACK bench g <ids of the
//! checkpoint>`, `EXEC`: the checkpoint's acknowledgement is one atomic, fsync'd AOF write.
//!
//! The client is a small hand-written RESP2 client (plain TCP, pipelining), enough for these
//! commands.

use super::{
    consume_phase, find_binary, free_port, histogram, micros, record, ConsumerStats, PeerResult,
    PeerWorkload, Server, Tally, PRODUCE_WINDOW,
};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

const STREAM: &str = "bench";
const GROUP: &str = "g";
const READ_COUNT: usize = 1000;

pub fn available() -> Result<(), String> {
    find_binary("redis-server", &["/usr/bin/redis-server"])
        .map(|_| ())
        .ok_or_else(|| {
            "redis-server is not installed (tools/install-bench-peers.sh installs it)".into()
        })
}

/// A RESP2 reply.
#[derive(Debug)]
enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    fn into_array(self) -> Result<Option<Vec<Reply>>, String> {
        match self {
            Reply::Array(a) => Ok(a),
            Reply::Error(e) => Err(format!("redis: {e}")),
            other => Err(format!("redis: expected an array, got {other:?}")),
        }
    }

    fn into_bulk(self) -> Result<Vec<u8>, String> {
        match self {
            Reply::Bulk(Some(b)) => Ok(b),
            Reply::Error(e) => Err(format!("redis: {e}")),
            other => Err(format!("redis: expected a bulk string, got {other:?}")),
        }
    }
}

struct Conn {
    r: BufReader<TcpStream>,
    w: BufWriter<TcpStream>,
}

impl Conn {
    fn open(port: u16) -> Result<Conn, String> {
        let s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("redis: {e}"))?;
        s.set_nodelay(true).ok();
        let r = BufReader::with_capacity(1 << 20, s.try_clone().map_err(|e| e.to_string())?);
        Ok(Conn {
            r,
            w: BufWriter::with_capacity(1 << 20, s),
        })
    }

    /// Queues a command (sent on the next `flush`).
    fn send(&mut self, args: &[&[u8]]) -> Result<(), String> {
        let io = |e: std::io::Error| format!("redis: {e}");
        write!(self.w, "*{}\r\n", args.len()).map_err(io)?;
        for a in args {
            write!(self.w, "${}\r\n", a.len()).map_err(io)?;
            self.w.write_all(a).map_err(io)?;
            self.w.write_all(b"\r\n").map_err(io)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        self.w.flush().map_err(|e| format!("redis: {e}"))
    }

    fn line(&mut self) -> Result<String, String> {
        let mut l = String::new();
        let n = self
            .r
            .read_line(&mut l)
            .map_err(|e| format!("redis: {e}"))?;
        if n == 0 {
            return Err("redis: connection closed".into());
        }
        Ok(l.trim_end_matches(['\r', '\n']).to_string())
    }

    fn read(&mut self) -> Result<Reply, String> {
        let l = self.line()?;
        let (kind, rest) = l.split_at(1.min(l.len()));
        let int = |s: &str| {
            s.parse::<i64>()
                .map_err(|_| format!("redis: bad reply line {l:?}"))
        };
        Ok(match kind {
            "+" => Reply::Status(rest.into()),
            "-" => Reply::Error(rest.into()),
            ":" => Reply::Int(int(rest)?),
            "$" => match int(rest)? {
                n if n < 0 => Reply::Bulk(None),
                n => {
                    let mut b = vec![0u8; n as usize + 2];
                    self.r
                        .read_exact(&mut b)
                        .map_err(|e| format!("redis: {e}"))?;
                    b.truncate(n as usize);
                    Reply::Bulk(Some(b))
                }
            },
            "*" => match int(rest)? {
                n if n < 0 => Reply::Array(None),
                n => Reply::Array(Some((0..n).map(|_| self.read()).collect::<Result<_, _>>()?)),
            },
            _ => return Err(format!("redis: unexpected reply line {l:?}")),
        })
    }

    /// Sends one command and reads its reply; Err on an error reply.
    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        self.send(args)?;
        self.flush()?;
        match self.read()? {
            Reply::Error(e) => Err(format!("redis: {e}")),
            r => Ok(r),
        }
    }
}

pub fn run(w: &PeerWorkload, progress: &dyn Fn(u64)) -> Result<PeerResult, String> {
    let binary = find_binary("redis-server", &["/usr/bin/redis-server"]).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("lockstep-peer-redis-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let port = free_port()?;
    let log = dir.path().join("redis.log");
    let mut cmd = Command::new(&binary);
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir.path())
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ])
        .args([
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
            "--logfile",
            "",
        ]);
    let mut server = Server::start("redis-server", cmd, &log, Duration::from_secs(10))?;
    server.wait_for_port(port, &log, Duration::from_secs(30))?;

    let mut admin = Conn::open(port)?;
    let info = admin.call(&[b"INFO", b"server"])?.into_bulk()?;
    let version = String::from_utf8_lossy(&info)
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:").map(str::to_string))
        .unwrap_or_else(|| "?".into());
    let fsync = admin
        .call(&[b"CONFIG", b"GET", b"appendfsync"])?
        .into_array()?
        .and_then(|mut a| a.pop())
        .ok_or("redis: CONFIG GET appendfsync")?
        .into_bulk()?;
    if fsync != b"always" {
        return Err(format!(
            "redis: appendfsync is {}",
            String::from_utf8_lossy(&fsync)
        ));
    }
    admin.call(&[
        b"XGROUP",
        b"CREATE",
        STREAM.as_bytes(),
        GROUP.as_bytes(),
        b"0",
        b"MKSTREAM",
    ])?;

    let produce_us = produce(port, w).map_err(|e| format!("produce: {e}"))?;
    let (e2e_us, commit_us, elapsed) = consume_phase(w, progress, &|i, tally| {
        consume(port, i, w.checkpoint, tally).map_err(|e| format!("consumer {i}: {e}"))
    })?;
    let left = admin.call(&[b"XPENDING", STREAM.as_bytes(), GROUP.as_bytes()])?;
    match left.into_array()?.and_then(|a| a.into_iter().next()) {
        Some(Reply::Int(0)) => {}
        other => return Err(format!("redis: entries left unacknowledged: {other:?}")),
    }
    drop(admin);
    drop(server);
    Ok(PeerResult {
        name: format!("redis {version}"),
        durability: "Redis streams, appendonly yes + appendfsync always (AOF written and fsync'd \
                     before replies; RDB off): XADD is acknowledged after its fsync; a checkpoint \
                     commit is MULTI { XACK <the checkpoint's ids> } EXEC, one fsync'd AOF write"
            .into(),
        records: w.records,
        elapsed,
        produce_us,
        e2e_us,
        commit_us,
    })
}

/// XADD every record, PRODUCE_WINDOW in flight; each record's send → reply latency.
fn produce(port: u16, w: &PeerWorkload) -> Result<hdrhistogram::Histogram<u64>, String> {
    let mut c = Conn::open(port)?;
    let mut h = histogram();
    let mut in_flight: VecDeque<Instant> = VecDeque::new();
    let mut next = 0u64;
    while next < w.records || !in_flight.is_empty() {
        while next < w.records && in_flight.len() < PRODUCE_WINDOW {
            let r = record(next, w.record_bytes);
            in_flight.push_back(Instant::now());
            c.send(&[b"XADD", STREAM.as_bytes(), b"*", b"r", &r])?;
            next += 1;
        }
        c.flush()?;
        c.read()?.into_bulk()?;
        let sent = in_flight.pop_front().unwrap();
        h.record(micros(sent.elapsed())).ok();
    }
    Ok(h)
}

/// Consumer `i` of the group: read, and acknowledge per checkpoint in MULTI/EXEC.
fn consume(
    port: u16,
    i: usize,
    checkpoint: Duration,
    tally: &Tally,
) -> Result<ConsumerStats, String> {
    let mut c = Conn::open(port)?;
    let name = format!("c{i}");
    let count = READ_COUNT.to_string();
    let mut stats = ConsumerStats::new();
    let mut pending: Vec<Vec<u8>> = Vec::new();
    let mut next_checkpoint = Instant::now() + checkpoint;
    loop {
        let done = tally.done();
        if !pending.is_empty() && (done || Instant::now() >= next_checkpoint) {
            let started = Instant::now();
            commit(&mut c, &pending)?;
            stats.commit_us.record(micros(started.elapsed())).ok();
            pending.clear();
        }
        if Instant::now() >= next_checkpoint {
            next_checkpoint += checkpoint;
        }
        if done {
            return Ok(stats);
        }
        let reply = c.call(&[
            b"XREADGROUP",
            b"GROUP",
            GROUP.as_bytes(),
            name.as_bytes(),
            b"COUNT",
            count.as_bytes(),
            b"BLOCK",
            b"100",
            b"STREAMS",
            STREAM.as_bytes(),
            b">",
        ])?;
        // [[stream, [[id, [field, value]], ...]]] or nil when BLOCK timed out.
        let Some(streams) = reply.into_array()? else {
            continue;
        };
        for stream in streams {
            let mut s = stream.into_array()?.ok_or("redis: empty stream reply")?;
            let entries = s.pop().ok_or("redis: stream reply without entries")?;
            for entry in entries.into_array()?.unwrap_or_default() {
                let mut e = entry.into_array()?.ok_or("redis: empty entry")?.into_iter();
                let id = e.next().ok_or("redis: entry without id")?.into_bulk()?;
                let mut fields = e
                    .next()
                    .ok_or("redis: entry without fields")?
                    .into_array()?
                    .ok_or("redis: entry without fields")?;
                let value = fields
                    .pop()
                    .ok_or("redis: entry without value")?
                    .into_bulk()?;
                tally.consumed(&value, &mut stats.e2e_us)?;
                pending.push(id);
            }
        }
    }
}

/// MULTI; XACK bench g <ids>; EXEC — and checks every id was acknowledged.
fn commit(c: &mut Conn, ids: &[Vec<u8>]) -> Result<(), String> {
    let mut xack: Vec<&[u8]> = vec![b"XACK", STREAM.as_bytes(), GROUP.as_bytes()];
    xack.extend(ids.iter().map(|id| id.as_slice()));
    c.send(&[b"MULTI"])?;
    c.send(&xack)?;
    c.send(&[b"EXEC"])?;
    c.flush()?;
    for expected in ["OK", "QUEUED"] {
        match c.read()? {
            Reply::Status(s) if s == expected => {}
            other => return Err(format!("redis: MULTI/XACK answered {other:?}")),
        }
    }
    let exec = c.read()?.into_array()?.ok_or("redis: EXEC aborted")?;
    match exec.first() {
        Some(Reply::Int(n)) if *n as usize == ids.len() => Ok(()),
        other => Err(format!(
            "redis: XACK of {} ids answered {other:?}",
            ids.len()
        )),
    }
}
