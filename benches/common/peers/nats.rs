//! NATS JetStream (Debian's `nats-server`).
//!
//! Server: `nats-server -c <tmp>/nats.conf` with `listen: 127.0.0.1:P` and
//! `jetstream { store_dir: <tmp>/store }`. Stream `BENCH` on subject `bench`: file storage, one
//! replica, work-queue retention (a message is deleted once acknowledged). Consumer: durable pull
//! consumer `WORKERS` with explicit acks, `max_ack_pending` [`MAX_ACK_PENDING`] (a checkpoint's
//! worth of unacknowledged messages; the default 1000 would cap consumption per checkpoint), shared
//! by every consumer thread, each fetching batches of [`FETCH_BATCH`].
//!
//! Durability: JetStream's file store writes messages and acks to its files without fsync; it
//! fsyncs on a timer, every 2 minutes by default. nats-server 2.9 (Debian 12) has no
//! `sync_interval` setting (`sync_interval: always` came with 2.10; 2.9 rejects the field), so
//! this is the configuration measured: a publish acknowledgement (PubAck) and an ack reply mean
//! the server has applied them (written to its files, i.e. the page cache), not that they are on
//! disk (an strace of a 20 000-record run showed no fsync or fdatasync at all).
//!
//! Per checkpoint a consumer acknowledges each message of the checkpoint with `+ACK` sent as a
//! request (the "double ack"/AckAck: the server answers once it has processed the ack), and the
//! commit is done when every answer has arrived. It is not atomic: there are no transactions; each
//! ack stands on its own.
//!
//! The client is a small hand-written NATS protocol client (plain TCP): the `nats` crate is
//! deprecated and, like `async-nats`, brings a TLS and crypto stack (and tokio) the benchmark
//! does not use.

use super::{
    consume_phase, find_binary, free_port, histogram, micros, record, ConsumerStats, PeerResult,
    PeerWorkload, Server, Tally, PRODUCE_WINDOW,
};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

const STREAM: &str = "BENCH";
const SUBJECT: &str = "bench";
const CONSUMER: &str = "WORKERS";
const MAX_ACK_PENDING: u64 = 200_000;
const FETCH_BATCH: usize = 500;
/// How long a pull request waits for messages before the server ends it.
const FETCH_EXPIRES: Duration = Duration::from_millis(100);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

pub fn available() -> Result<(), String> {
    find_binary("nats-server", &["/usr/bin/nats-server"])
        .map(|_| ())
        .ok_or_else(|| {
            "nats-server is not installed (tools/install-bench-peers.sh installs it)".into()
        })
}

/// A message delivered to one of our subscriptions.
struct Msg {
    subject: String,
    reply: Option<String>,
    /// Status line of a header-only message (e.g. "408 Request Timeout"), if any.
    status: Option<String>,
    payload: Vec<u8>,
}

struct Conn {
    r: BufReader<TcpStream>,
    w: BufWriter<TcpStream>,
    /// Our inbox prefix: replies come to `<inbox>.<token>`.
    inbox: String,
    server_version: String,
}

fn io(e: std::io::Error) -> String {
    format!("nats: {e}")
}

impl Conn {
    fn open(port: u16, name: &str) -> Result<Conn, String> {
        let s = TcpStream::connect(("127.0.0.1", port)).map_err(io)?;
        s.set_nodelay(true).ok();
        s.set_read_timeout(Some(REQUEST_TIMEOUT)).map_err(io)?;
        let mut c = Conn {
            r: BufReader::with_capacity(1 << 20, s.try_clone().map_err(io)?),
            w: BufWriter::with_capacity(1 << 20, s),
            inbox: format!("_INBOX.{name}"),
            server_version: String::new(),
        };
        let info = c.line()?;
        let info = info
            .strip_prefix("INFO ")
            .ok_or_else(|| format!("nats: expected INFO, got {info:?}"))?;
        let info: serde_json::Value = serde_json::from_str(info).map_err(|e| e.to_string())?;
        c.server_version = info["version"].as_str().unwrap_or("?").to_string();
        if info["jetstream"].as_bool() != Some(true) {
            return Err("nats: the server has no JetStream".into());
        }
        let connect = serde_json::json!({
            "verbose": false, "pedantic": false, "headers": true, "no_responders": true,
            "protocol": 1, "name": name, "lang": "rust", "version": "lockstep-bench",
        });
        write!(c.w, "CONNECT {connect}\r\nSUB {}.> 1\r\nPING\r\n", c.inbox).map_err(io)?;
        c.w.flush().map_err(io)?;
        // The PONG confirms CONNECT and SUB were processed (an -ERR would come first).
        loop {
            let l = c.line()?;
            match l.as_str() {
                "PONG" => return Ok(c),
                "+OK" => {}
                _ if l.starts_with("INFO ") => {}
                _ => return Err(format!("nats: connect answered {l:?}")),
            }
        }
    }

    fn line(&mut self) -> Result<String, String> {
        let mut l = String::new();
        if self.r.read_line(&mut l).map_err(io)? == 0 {
            return Err("nats: connection closed".into());
        }
        Ok(l.trim_end_matches(['\r', '\n']).to_string())
    }

    /// Queues PUB (sent on the next `flush`).
    fn publish(
        &mut self,
        subject: &str,
        reply: Option<&str>,
        payload: &[u8],
    ) -> Result<(), String> {
        match reply {
            Some(r) => write!(self.w, "PUB {subject} {r} {}\r\n", payload.len()),
            None => write!(self.w, "PUB {subject} {}\r\n", payload.len()),
        }
        .map_err(io)?;
        self.w.write_all(payload).map_err(io)?;
        self.w.write_all(b"\r\n").map_err(io)
    }

    fn flush(&mut self) -> Result<(), String> {
        self.w.flush().map_err(io)
    }

    /// The next message, answering the server's PINGs on the way.
    fn next(&mut self) -> Result<Msg, String> {
        loop {
            let l = self.line()?;
            let mut parts = l.split(' ');
            let op = parts.next().unwrap_or("");
            let args: Vec<&str> = parts.filter(|p| !p.is_empty()).collect();
            match op {
                "PING" => {
                    self.w.write_all(b"PONG\r\n").map_err(io)?;
                    self.flush()?;
                }
                "PONG" | "+OK" | "INFO" => {}
                "-ERR" => return Err(format!("nats: {l}")),
                "MSG" | "HMSG" => {
                    // MSG <subject> <sid> [reply] <bytes>
                    // HMSG <subject> <sid> [reply] <header bytes> <total bytes>
                    let headers = op == "HMSG";
                    let fixed = if headers { 4 } else { 3 };
                    let bad = || format!("nats: bad message line {l:?}");
                    if args.len() != fixed && args.len() != fixed + 1 {
                        return Err(bad());
                    }
                    let reply = (args.len() == fixed + 1).then(|| args[2].to_string());
                    let num = |s: &str| s.parse::<usize>().map_err(|_| bad());
                    let total = num(args[args.len() - 1])?;
                    let header_len = if headers {
                        num(args[args.len() - 2])?
                    } else {
                        0
                    };
                    let mut body = vec![0u8; total + 2];
                    self.r.read_exact(&mut body).map_err(io)?;
                    body.truncate(total);
                    let status = if headers {
                        let h = String::from_utf8_lossy(&body[..header_len]);
                        let first = h.lines().next().unwrap_or("");
                        let status = first.strip_prefix("NATS/1.0").unwrap_or("").trim();
                        (!status.is_empty()).then(|| status.to_string())
                    } else {
                        None
                    };
                    return Ok(Msg {
                        subject: args[0].to_string(),
                        reply,
                        status,
                        payload: body.split_off(header_len),
                    });
                }
                _ => return Err(format!("nats: unexpected {l:?}")),
            }
        }
    }

    /// A request to the JetStream API: its JSON answer (Err if it holds an error).
    fn api(
        &mut self,
        subject: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        let reply = format!("{}.api", self.inbox);
        self.publish(subject, Some(&reply), body.to_string().as_bytes())?;
        self.flush()?;
        loop {
            let m = self.next()?;
            if m.subject != reply {
                continue;
            }
            if let Some(status) = m.status {
                return Err(format!("nats: {subject}: {status}"));
            }
            let v: serde_json::Value =
                serde_json::from_slice(&m.payload).map_err(|e| format!("nats: {e}"))?;
            if !v["error"].is_null() {
                return Err(format!("nats: {subject}: {}", v["error"]));
            }
            return Ok(v);
        }
    }
}

pub fn run(w: &PeerWorkload, progress: &dyn Fn(u64)) -> Result<PeerResult, String> {
    let binary = find_binary("nats-server", &["/usr/bin/nats-server"]).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("lockstep-peer-nats-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let port = free_port()?;
    let store = dir.path().join("store");
    let conf = dir.path().join("nats.conf");
    std::fs::write(
        &conf,
        format!(
            "listen: \"127.0.0.1:{port}\"\njetstream {{\n  store_dir: {:?}\n}}\n",
            store.display().to_string()
        ),
    )
    .map_err(|e| format!("nats config: {e}"))?;
    let log = dir.path().join("nats.log");
    let mut cmd = Command::new(&binary);
    cmd.arg("-c").arg(&conf);
    let mut server = Server::start("nats-server", cmd, &log, Duration::from_secs(10))?;
    server.wait_for_port(port, &log, Duration::from_secs(30))?;

    let mut admin = Conn::open(port, "admin")?;
    admin.api(
        &format!("$JS.API.STREAM.CREATE.{STREAM}"),
        &serde_json::json!({
            "name": STREAM, "subjects": [SUBJECT], "retention": "workqueue",
            "storage": "file", "num_replicas": 1, "discard": "old",
        }),
    )?;
    admin.api(
        &format!("$JS.API.CONSUMER.DURABLE.CREATE.{STREAM}.{CONSUMER}"),
        &serde_json::json!({
            "stream_name": STREAM,
            "config": {
                "durable_name": CONSUMER, "deliver_policy": "all", "ack_policy": "explicit",
                "ack_wait": 120_000_000_000u64, "max_ack_pending": MAX_ACK_PENDING,
                "max_deliver": -1,
            },
        }),
    )?;

    let produce_us = produce(port, w).map_err(|e| format!("produce: {e}"))?;
    let stored = admin.api(
        &format!("$JS.API.STREAM.INFO.{STREAM}"),
        &serde_json::json!({}),
    )?;
    if stored["state"]["messages"].as_u64() != Some(w.records) {
        return Err(format!(
            "nats: stream holds {} messages after producing {}",
            stored["state"]["messages"], w.records
        ));
    }
    let (e2e_us, commit_us, elapsed) = consume_phase(w, progress, &|i, tally| {
        consume(port, i, w.checkpoint, tally).map_err(|e| format!("consumer {i}: {e}"))
    })?;
    let state = admin.api(
        &format!("$JS.API.STREAM.INFO.{STREAM}"),
        &serde_json::json!({}),
    )?;
    if state["state"]["messages"].as_u64() != Some(0) {
        return Err(format!(
            "nats: {} messages left in the work queue after consuming",
            state["state"]["messages"]
        ));
    }
    let version = admin.server_version.clone();
    drop(admin);
    drop(server);
    Ok(PeerResult {
        name: format!("nats {version}"),
        durability: "NATS JetStream, file storage, work-queue stream, 1 replica; no fsync per \
                     operation (file store's default 2-minute fsync timer; nats-server 2.9 has no \
                     sync_interval setting): a PubAck means stored in the server's files (page \
                     cache), not on disk; a checkpoint commit is every message's +ACK sent as a \
                     request (AckAck) and answered, per message, not atomic"
            .into(),
        records: w.records,
        elapsed,
        produce_us,
        e2e_us,
        commit_us,
    })
}

/// Publishes every record with a reply subject (JetStream answers with a PubAck once stored),
/// PRODUCE_WINDOW in flight; each record's send → PubAck latency.
fn produce(port: u16, w: &PeerWorkload) -> Result<hdrhistogram::Histogram<u64>, String> {
    let mut c = Conn::open(port, "producer")?;
    let mut h = histogram();
    let mut in_flight: HashMap<u64, Instant> = HashMap::new();
    let mut next = 0u64;
    let prefix = format!("{}.p.", c.inbox);
    while next < w.records || !in_flight.is_empty() {
        while next < w.records && in_flight.len() < PRODUCE_WINDOW {
            let r = record(next, w.record_bytes);
            in_flight.insert(next, Instant::now());
            c.publish(SUBJECT, Some(&format!("{prefix}{next}")), &r)?;
            next += 1;
        }
        c.flush()?;
        let m = c.next()?;
        let Some(seq) = m.subject.strip_prefix(&prefix) else {
            continue;
        };
        let seq: u64 = seq
            .parse()
            .map_err(|_| format!("nats: reply {}", m.subject))?;
        if let Some(status) = m.status {
            return Err(format!("nats: publish {seq}: {status}"));
        }
        let ack: serde_json::Value =
            serde_json::from_slice(&m.payload).map_err(|e| format!("nats: {e}"))?;
        if !ack["error"].is_null() || ack["seq"].is_null() {
            return Err(format!("nats: publish {seq}: {ack}"));
        }
        let sent = in_flight
            .remove(&seq)
            .ok_or_else(|| format!("nats: unexpected PubAck for {seq}"))?;
        h.record(micros(sent.elapsed())).ok();
    }
    Ok(h)
}

/// Consumer thread `i`: pull batches; per checkpoint AckAck every message it received.
fn consume(
    port: u16,
    i: usize,
    checkpoint: Duration,
    tally: &Tally,
) -> Result<ConsumerStats, String> {
    let mut c = Conn::open(port, &format!("consumer{i}"))?;
    let mut stats = ConsumerStats::new();
    let next_subject = format!("$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{CONSUMER}");
    let fetch_reply = format!("{}.fetch", c.inbox);
    let ack_reply = format!("{}.ack", c.inbox);
    let pull = serde_json::json!({
        "batch": FETCH_BATCH, "expires": FETCH_EXPIRES.as_nanos() as u64,
    })
    .to_string();
    let mut pending: Vec<String> = Vec::new();
    let mut next_checkpoint = Instant::now() + checkpoint;
    loop {
        let done = tally.done();
        if !pending.is_empty() && (done || Instant::now() >= next_checkpoint) {
            let started = Instant::now();
            for ack_subject in &pending {
                c.publish(ack_subject, Some(&ack_reply), b"+ACK")?;
            }
            c.flush()?;
            let mut answered = 0;
            while answered < pending.len() {
                let m = c.next()?;
                if m.subject == ack_reply {
                    if let Some(status) = m.status {
                        return Err(format!("nats: ack answered {status}"));
                    }
                    answered += 1;
                }
            }
            stats.commit_us.record(micros(started.elapsed())).ok();
            pending.clear();
        }
        if Instant::now() >= next_checkpoint {
            next_checkpoint += checkpoint;
        }
        if done {
            return Ok(stats);
        }
        // One pull request: it ends after FETCH_BATCH messages or with a status message
        // (408 Request Timeout once FETCH_EXPIRES passed, 404 when nothing is there).
        c.publish(&next_subject, Some(&fetch_reply), pull.as_bytes())?;
        c.flush()?;
        let mut got = 0;
        while got < FETCH_BATCH {
            let m = c.next()?;
            // Data messages carry the stream subject; the pull request's own status messages
            // come to its reply subject, header-only.
            match m.status.as_deref() {
                None => {}
                // The request is over: expired (408) or nothing to deliver (404).
                Some(s) if s.starts_with("408") || s.starts_with("404") => break,
                // Idle heartbeat / flow control.
                Some(s) if s.starts_with("100") => continue,
                Some(s) => return Err(format!("nats: pull answered {s}")),
            }
            let reply = m
                .reply
                .ok_or("nats: delivered message without an ack subject")?;
            tally.consumed(&m.payload, &mut stats.e2e_us)?;
            pending.push(reply);
            got += 1;
        }
    }
}
