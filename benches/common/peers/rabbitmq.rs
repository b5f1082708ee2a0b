//! RabbitMQ (Debian's `rabbitmq-server`).
//!
//! Server: a private node, not the system service. Its own Erlang port mapper
//! (`epmd -port E -address 127.0.0.1`, a child of ours) and `/usr/lib/rabbitmq/bin/rabbitmq-server`
//! (runs as the calling user, root included) with `RABBITMQ_NODENAME=lockstep-bench-<pid>@localhost`,
//! `RABBITMQ_NODE_IP_ADDRESS=127.0.0.1`, `RABBITMQ_NODE_PORT=P`, `RABBITMQ_DIST_PORT=D`,
//! `ERL_EPMD_PORT=E`, and mnesia, log, config, enabled-plugins (none) and Erlang cookie (`HOME`)
//! in the temp dir. Both run in their own process groups, which are killed when the run ends.
//!
//! Queue: one durable classic queue (3.10's default, version 1 index); messages persistent
//! (delivery mode 2). Produce on a channel in confirm mode, [`super::PRODUCE_WINDOW`] unconfirmed;
//! RabbitMQ confirms a persistent message routed to a durable queue once it is on disk: messages
//! below `queue_index_embed_msgs_below` (4096 bytes by default, so the suite's 1 KiB records) are
//! embedded in the queue index, whose journal is fsync'd in batches before the confirms go out
//! (larger ones go to the message store, fsync'd likewise). Consume: each consumer thread has its
//! own connection and a channel in transaction mode (`tx.select`), prefetch [`PREFETCH`] (a
//! checkpoint's worth of unacknowledged deliveries); per checkpoint `basic.ack` (multiple, up to the
//! checkpoint's last delivery tag) then `tx.commit`: the acks take effect atomically at the commit.
//! `tx.commit` does not wait for an fsync of the acks (it waits for fsyncs only of messages
//! published in the transaction; these hold acks only): the queue index records them and is
//! fsync'd later (an strace of a 60 000-record run showed no fsync between a commit's start and
//! its commit-ok; the index segments were fsync'd up to a second after).

use super::{
    consume_phase, find_binary, free_port, histogram, micros, record, ConsumerStats, PeerResult,
    PeerWorkload, Server, Tally, PRODUCE_WINDOW,
};
use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Acker, BasicProperties, Connection, ConnectionProperties, PublisherConfirm};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const QUEUE: &str = "bench";
/// Unacknowledged deliveries per consumer (AMQP's maximum, a short).
const PREFETCH: u16 = u16::MAX;
/// How long the node may take to boot.
const BOOT_TIMEOUT: Duration = Duration::from_secs(180);

const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

fn server_binary() -> Option<PathBuf> {
    let p = PathBuf::from(SERVER);
    p.is_file().then_some(p)
}

pub fn available() -> Result<(), String> {
    let install = "(tools/install-bench-peers.sh installs it)";
    server_binary().ok_or_else(|| format!("rabbitmq-server is not installed {install}"))?;
    find_binary("epmd", &["/usr/bin/epmd"])
        .ok_or_else(|| format!("epmd (Erlang) is not installed {install}"))?;
    Ok(())
}

/// The installed server's version, from its library directory's name.
fn version() -> String {
    std::fs::read_dir("/usr/lib/rabbitmq/lib")
        .ok()
        .and_then(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_prefix("rabbitmq_server-").map(str::to_string))
                })
                .next()
        })
        .unwrap_or_else(|| "?".into())
}

/// A single-threaded tokio runtime for one thread's connection.
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))
}

fn amqp(what: &str) -> impl Fn(lapin::Error) -> String + '_ {
    move |e| format!("rabbitmq: {what}: {e}")
}

pub fn run(w: &PeerWorkload, progress: &dyn Fn(u64)) -> Result<PeerResult, String> {
    let binary = server_binary().unwrap();
    let epmd_binary = find_binary("epmd", &["/usr/bin/epmd"]).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("lockstep-peer-rabbitmq-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let d = dir.path();
    let (port, dist_port, epmd_port) = (free_port()?, free_port()?, free_port()?);
    if port == dist_port || port == epmd_port || dist_port == epmd_port {
        return Err("rabbitmq: could not find three distinct free ports".into());
    }
    let write = |name: &str, text: &str| {
        std::fs::write(d.join(name), text).map_err(|e| format!("rabbitmq: {name}: {e}"))
    };
    write(
        "rabbitmq.conf",
        &format!("listeners.tcp.default = 127.0.0.1:{port}\n"),
    )?;
    write("enabled_plugins", "[].\n")?;
    write("rabbitmq-env.conf", "")?;

    let epmd_log = d.join("epmd.log");
    let mut epmd_cmd = Command::new(&epmd_binary);
    epmd_cmd.args(["-port", &epmd_port.to_string(), "-address", "127.0.0.1"]);
    // Declared before the node: dropped after it (locals drop in reverse order).
    let mut epmd = Server::start("epmd", epmd_cmd, &epmd_log, Duration::from_secs(2))?;
    epmd.wait_for_port(epmd_port, &epmd_log, Duration::from_secs(10))?;

    let log = d.join("rabbitmq.log");
    let mut cmd = Command::new(&binary);
    let node = format!("lockstep-bench-{}@localhost", std::process::id());
    cmd.env("HOME", d)
        .env("RABBITMQ_NODENAME", &node)
        .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
        .env("RABBITMQ_NODE_PORT", port.to_string())
        .env("RABBITMQ_DIST_PORT", dist_port.to_string())
        .env("ERL_EPMD_PORT", epmd_port.to_string())
        .env("ERL_EPMD_ADDRESS", "127.0.0.1")
        .env("RABBITMQ_MNESIA_BASE", d.join("mnesia"))
        .env("RABBITMQ_LOG_BASE", d.join("log"))
        .env("RABBITMQ_LOGS", "-")
        .env("RABBITMQ_CONFIG_FILE", d.join("rabbitmq.conf"))
        .env("RABBITMQ_ADVANCED_CONFIG_FILE", d.join("advanced.config"))
        .env("RABBITMQ_ENABLED_PLUGINS_FILE", d.join("enabled_plugins"))
        .env("RABBITMQ_CONF_ENV_FILE", d.join("rabbitmq-env.conf"))
        .env("RABBITMQ_PID_FILE", d.join("rabbitmq.pid"));
    let mut server = Server::start("rabbitmq-server", cmd, &log, Duration::from_secs(30))?;
    server.wait_for_port(port, &log, BOOT_TIMEOUT)?;

    let uri = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    let produce_us = produce(&uri, w).map_err(|e| format!("produce: {e}"))?;
    let (e2e_us, commit_us, elapsed) = consume_phase(w, progress, &|i, tally| {
        consume(&uri, w.checkpoint, tally).map_err(|e| format!("consumer {i}: {e}"))
    })?;
    let left = runtime()?.block_on(async {
        let conn = Connection::connect(&uri, ConnectionProperties::default())
            .await
            .map_err(amqp("connect"))?;
        let ch = conn.create_channel().await.map_err(amqp("channel"))?;
        let q = ch
            .queue_declare(
                QUEUE.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(amqp("queue.declare"))?;
        conn.close(200, "done".into()).await.ok();
        Ok::<_, String>(q.message_count())
    })?;
    if left != 0 {
        return Err(format!("rabbitmq: {left} messages left in the queue"));
    }
    drop(server);
    drop(epmd);
    Ok(PeerResult {
        name: format!("rabbitmq {}", version()),
        durability: "RabbitMQ durable classic queue, persistent messages: a publisher confirm \
                     is sent once the message is fsync'd (1 KiB messages: in the queue index \
                     journal, batched fsyncs); a checkpoint commit is basic.ack (multiple) + \
                     tx.commit on a channel in tx mode: atomic, but tx.commit does not wait for \
                     the acks to be fsync'd (the queue index is fsync'd later)"
            .into(),
        records: w.records,
        elapsed,
        produce_us,
        e2e_us,
        commit_us,
    })
}

/// Declares the queue and publishes every record persistent with confirms, PRODUCE_WINDOW
/// unconfirmed; each record's publish → confirm latency.
fn produce(uri: &str, w: &PeerWorkload) -> Result<hdrhistogram::Histogram<u64>, String> {
    runtime()?.block_on(async {
        let conn = Connection::connect(uri, ConnectionProperties::default())
            .await
            .map_err(amqp("connect"))?;
        let ch = conn.create_channel().await.map_err(amqp("channel"))?;
        ch.queue_declare(
            QUEUE.into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .map_err(amqp("queue.declare"))?;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(amqp("confirm.select"))?;
        let mut h = histogram();
        let mut in_flight: VecDeque<(Instant, PublisherConfirm)> = VecDeque::new();
        let mut next = 0u64;
        while next < w.records || !in_flight.is_empty() {
            while next < w.records && in_flight.len() < PRODUCE_WINDOW {
                let r = record(next, w.record_bytes);
                let sent = Instant::now();
                let confirm = ch
                    .basic_publish(
                        "".into(),
                        QUEUE.into(),
                        BasicPublishOptions::default(),
                        &r,
                        BasicProperties::default().with_delivery_mode(2),
                    )
                    .await
                    .map_err(amqp("basic.publish"))?;
                in_flight.push_back((sent, confirm));
                next += 1;
            }
            let (sent, confirm) = in_flight.pop_front().unwrap();
            let confirmation = confirm.await.map_err(amqp("confirm"))?;
            if !confirmation.is_ack() {
                return Err("rabbitmq: a publish was nacked".into());
            }
            h.record(micros(sent.elapsed())).ok();
        }
        conn.close(200, "done".into()).await.ok();
        Ok(h)
    })
}

/// One consumer: its own connection and channel in tx mode; per checkpoint ack + tx.commit.
fn consume(uri: &str, checkpoint: Duration, tally: &Tally) -> Result<ConsumerStats, String> {
    runtime()?.block_on(async {
        let conn = Connection::connect(uri, ConnectionProperties::default())
            .await
            .map_err(amqp("connect"))?;
        let ch = conn.create_channel().await.map_err(amqp("channel"))?;
        ch.basic_qos(PREFETCH, BasicQosOptions::default())
            .await
            .map_err(amqp("basic.qos"))?;
        ch.tx_select().await.map_err(amqp("tx.select"))?;
        let mut consumer = ch
            .basic_consume(
                QUEUE.into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(amqp("basic.consume"))?;
        let mut stats = ConsumerStats::new();
        // The checkpoint's last delivery: acking it with `multiple` acks the checkpoint.
        let mut last: Option<Acker> = None;
        let mut next_checkpoint = Instant::now() + checkpoint;
        loop {
            let done = tally.done();
            if done || Instant::now() >= next_checkpoint {
                if let Some(acker) = last.take() {
                    let started = Instant::now();
                    acker
                        .ack(BasicAckOptions { multiple: true })
                        .await
                        .map_err(amqp("basic.ack"))?;
                    ch.tx_commit().await.map_err(amqp("tx.commit"))?;
                    stats.commit_us.record(micros(started.elapsed())).ok();
                }
            }
            if Instant::now() >= next_checkpoint {
                next_checkpoint += checkpoint;
            }
            if done {
                break;
            }
            let wait = next_checkpoint
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            match tokio::time::timeout(wait, consumer.next()).await {
                Err(_) => continue,
                Ok(None) => return Err("rabbitmq: the consumer was cancelled".into()),
                Ok(Some(delivery)) => {
                    let delivery = delivery.map_err(amqp("delivery"))?;
                    tally.consumed(&delivery.data, &mut stats.e2e_us)?;
                    last = Some(delivery.acker);
                }
            }
        }
        conn.close(200, "done".into()).await.ok();
        Ok(stats)
    })
}
