//! The only module that touches glommio: executors, the cross-shard mesh, the clock, files.
//!
//! [`run`] starts the broker: it loads (or creates) the topic registry, removes partition
//! directories of deleted topics, starts one glommio executor per shard (pinned to a CPU when
//! the machine allows it), waits until every shard has opened its partitions and bound the
//! listener (SO_REUSEPORT: all shards listen on the same address and the kernel spreads
//! connections), prints the readiness line, and returns once every shard has shut down.
//!
//! Shutdown (SIGTERM or SIGINT; a second signal exits at once with status 1): glommio has no
//! signal API, so `signal-hook` sets an atomic flag from the handler and every shard polls it
//! every `SHUTDOWN_POLL_MS`. A shard then stops accepting, stops reading new requests, lets
//! in-flight requests finish (at most `SHUTDOWN_DRAIN_MS_MAX`), keeps serving other shards'
//! operations until every shard has drained, flushes all its partitions, and exits.
//!
//! - [`shard_handle`]: per-shard runtime glue: the core's I/O (`ShardIo`) on glommio and the
//!   `Bus` implementation handlers use; op execution is the core's (`crate::shard::exec`).
//! - [`conn`]: the listener and client connections; [`frame_write`], writing gathered
//!   response frames (record payloads not copied).
//! - [`fatal`]: the one fatal path (a shard panic, a poisoned log or journal ends the process
//!   with its own exit status, so a supervisor restarts it and recovery runs).
//! - [`files`]: the io_uring storage engine: block writes and syncs of flush tickets, journal flushes.
//! - [`huge_chunks`]: the broker's global allocator, which serves the engine's full tail chunks
//!   from huge pages (one virtio request per write).
//! - [`kick`]: the doorbell that has glommio submit queued I/O at once, not when its queues
//!   run dry.
//! - [`sync`]: executor-agnostic one-shot slot and event.
//! - [`tls`]: the rustls configuration of TLS listeners, certificate principals.
//! - [`credentials`]: the SCRAM credentials file, shared by every shard.
//!
//! Every shard binds every listener of the configuration (each with SO_REUSEPORT).

pub mod bench;
pub mod conn;
pub mod credentials;
pub mod fatal;
pub mod files;
pub mod frame_write;
pub mod huge_chunks;
pub mod kick;
pub mod notify;
pub mod shard_handle;
pub use crate::shard::sync;
pub mod tls;

use crate::config::BrokerConfig;
use crate::constants::{
    LOG_HOUSEKEEPING_INTERVAL_MS, METRICS_REFRESH_MS, SHARD_INFLIGHT_REQUEST_BYTES_MAX,
    SHARD_IO_MEMORY_BYTES, SHARD_MESH_CHANNEL_MESSAGES, SHARE_HOUSEKEEPING_INTERVAL_MS,
    SHUTDOWN_DRAIN_MS_MAX, SHUTDOWN_POLL_MS, STOP_WATCH_INTERVAL_MS,
};
use crate::journal::{Journal, JournalConfig};
use crate::metrics::{self, MetricsRegistry, ShardMetrics};
use crate::model::ShardId;
use crate::shard::data_dir::{self, DataDirError};
use crate::shard::exec::{ShardExec, ShardPtxn};
use crate::shard::registry::{RegistryError, TopicRegistry};
use crate::shard::share_session::{SessionBudget, ShareSessions, MAX_SHARE_SESSIONS};
use crate::shard::state::{check_journal_shards, journal_dir, ShardState};
use crate::storage::file::FsStorage;
use crate::storage::mmap::MmapDir;
use glommio::channels::channel_mesh::{Full, MeshBuilder};
use glommio::net::TcpListener;
use glommio::{CpuSet, LocalExecutorBuilder, Placement};
use shard_handle::{wall_ms, MeshMsg, ShardHandle};
use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Why the broker could not start or run. Each variant has its own process exit status.
#[derive(Debug)]
pub enum RuntimeError {
    DataDir {
        path: String,
        error: io::Error,
    },
    /// The data directory's files do not belong together (`shard::data_dir`).
    Data(DataDirError),
    Registry(RegistryError),
    Signals(io::Error),
    Metrics {
        addr: String,
        error: io::Error,
    },
    Executor(String),
    Shard {
        shard: usize,
        reason: String,
    },
    Listeners(String),
}

impl RuntimeError {
    /// Process exit status for this failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            RuntimeError::DataDir { .. } | RuntimeError::Data(_) => 3,
            RuntimeError::Registry(_) => 4,
            RuntimeError::Signals(_) => 5,
            RuntimeError::Metrics { .. } => 6,
            RuntimeError::Executor(_) => 7,
            RuntimeError::Shard { .. } => 8,
            RuntimeError::Listeners(_) => 11,
        }
    }
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::DataDir { path, error } => write!(f, "data directory {path}: {error}"),
            RuntimeError::Data(e) => write!(f, "{e}"),
            RuntimeError::Registry(e) => write!(f, "topic metadata: {e}"),
            RuntimeError::Signals(e) => write!(f, "cannot install signal handlers: {e}"),
            RuntimeError::Metrics { addr, error } => {
                write!(f, "cannot serve metrics on {addr}: {error}")
            }
            RuntimeError::Executor(e) => write!(f, "cannot start executors: {e}"),
            RuntimeError::Shard { shard, reason } => write!(f, "shard {shard}: {reason}"),
            // The TLS settings or a listener's protocol cannot be served.
            RuntimeError::Listeners(reason) => write!(f, "listeners: {reason}"),
        }
    }
}

impl std::error::Error for RuntimeError {}

/// Name of the lock file that keeps two brokers off one data directory.
pub const DATA_DIR_LOCK_FILE: &str = "lock";

/// Takes an exclusive advisory lock on `{data_dir}/lock` for the life of the returned file, so
/// a second broker on the same data directory refuses to start instead of corrupting it.
fn lock_data_dir(config: &BrokerConfig) -> Result<std::fs::File, RuntimeError> {
    use std::os::fd::AsRawFd;
    let path = config.data_dir.join(DATA_DIR_LOCK_FILE);
    let err = |error| RuntimeError::DataDir {
        path: config.data_dir.display().to_string(),
        error,
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(err)?;
    // SAFETY: flock only reads its two integer arguments; the descriptor is valid while `file`
    // lives, and the lock is released when the descriptor is closed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let os = io::Error::last_os_error();
        return Err(err(io::Error::new(
            os.kind(),
            format!("already in use by another broker ({os})"),
        )));
    }
    Ok(file)
}

/// The CPUs shards are pinned to, in order (empty if the topology cannot be read).
fn shard_cpus() -> Vec<usize> {
    match CpuSet::online() {
        Ok(set) => {
            let mut cpus: Vec<usize> = set.iter().map(|loc| loc.cpu).collect();
            cpus.sort_unstable();
            cpus.dedup();
            cpus
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the CPU topology; shards are not pinned");
            Vec::new()
        }
    }
}

struct ShardSetup {
    config: BrokerConfig,
    mesh: MeshBuilder<MeshMsg, Full>,
    registry: Arc<TopicRegistry>,
    metrics: Arc<MetricsRegistry>,
    ready: mpsc::Sender<Result<usize, String>>,
    stop: Arc<AtomicBool>,
    drained: Arc<AtomicUsize>,
    /// Share sessions of every shard count against this (a per-broker limit, as Kafka's).
    share_sessions: SessionBudget,
    /// The TLS listeners' configuration (built once, shared by every shard).
    tls: Option<Arc<rustls::ServerConfig>>,
    /// The SCRAM credentials (one store for every shard).
    credentials: Arc<credentials::SharedCredentials>,
    /// The connection limits (one count for every shard and listener).
    limits: Arc<Mutex<crate::security::conn_limits::ConnectionLimits>>,
}

/// Runs the broker until a shutdown signal; returns once every shard has stopped.
pub fn run(config: BrokerConfig) -> Result<(), RuntimeError> {
    fatal::install_panic_hook();
    if let Some(l) = config
        .listeners
        .iter()
        .find(|l| l.protocol.uses_sasl() && !config.sasl.contains_key(&l.name))
    {
        return Err(RuntimeError::Listeners(format!(
            "listener {} is {} but names no SASL mechanisms (sasl.enabled.mechanisms)",
            l.name,
            l.protocol.name()
        )));
    }
    let tls = match &config.tls {
        Some(settings) if config.listeners.iter().any(|l| l.protocol.uses_tls()) => {
            Some(tls::server_config(settings).map_err(RuntimeError::Listeners)?)
        }
        _ => None,
    };
    crate::config::set_static_broker_defaults(config.broker_defaults.clone());
    std::fs::create_dir_all(&config.data_dir).map_err(|error| RuntimeError::DataDir {
        path: config.data_dir.display().to_string(),
        error,
    })?;
    let _lock = lock_data_dir(&config)?;
    let credentials = Arc::new(
        credentials::SharedCredentials::load(&config.data_dir).map_err(|error| {
            RuntimeError::DataDir {
                path: config.data_dir.display().to_string(),
                error: std::io::Error::other(error),
            }
        })?,
    );
    let limits = Arc::new(Mutex::new(
        crate::security::conn_limits::ConnectionLimits::new(config.limits.clone()),
    ));
    let mut registry = data_dir::open_registry(&config.data_dir).map_err(RuntimeError::Data)?;
    let unknown = data_dir::set_aside_unknown_logs(&config.data_dir, &registry)
        .map_err(RuntimeError::Data)?;
    for path in &unknown.removed {
        tracing::info!(dir = %path.display(), "removed the log of a deleted topic");
    }
    for (from, to) in &unknown.set_aside {
        tracing::warn!(dir = %from.display(), now = %to.display(), "a partition directory no topic names was set aside (not deleted)");
    }
    for path in &unknown.strays {
        tracing::warn!(dir = %path.display(), "a partition directory set aside at an earlier start is still there");
    }
    if registry.forget_deleted_topics() {
        registry
            .store(&config.data_dir)
            .map_err(|error| RuntimeError::DataDir {
                path: config.data_dir.display().to_string(),
                error,
            })?;
    }
    check_journal_shards(&config.data_dir, config.shards).map_err(|error| {
        RuntimeError::DataDir {
            path: config.data_dir.display().to_string(),
            error,
        }
    })?;
    let registry = Arc::new(registry);

    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        // A second signal while shutting down exits at once with status 1.
        signal_hook::flag::register_conditional_shutdown(signal, 1, stop.clone())
            .map_err(RuntimeError::Signals)?;
        signal_hook::flag::register(signal, stop.clone()).map_err(RuntimeError::Signals)?;
    }

    let metrics = Arc::new(MetricsRegistry::new(config.shards));
    if let Some(addr) = config.metrics_listen {
        let bound = metrics::spawn_server(addr, metrics.clone()).map_err(|error| {
            RuntimeError::Metrics {
                addr: addr.to_string(),
                error,
            }
        })?;
        tracing::info!(%bound, "serving Prometheus metrics");
    }

    files::tune_allocator();
    let mesh = MeshBuilder::<MeshMsg, Full>::full(config.shards, SHARD_MESH_CHANNEL_MESSAGES);
    let (ready_tx, ready_rx) = mpsc::channel();
    let drained = Arc::new(AtomicUsize::new(0));
    let share_sessions = SessionBudget::new(MAX_SHARE_SESSIONS);
    let cpus = shard_cpus();
    let mut handles = Vec::with_capacity(config.shards);
    for index in 0..config.shards {
        let setup = ShardSetup {
            config: config.clone(),
            mesh: mesh.clone(),
            registry: registry.clone(),
            metrics: metrics.clone(),
            ready: ready_tx.clone(),
            stop: stop.clone(),
            drained: drained.clone(),
            share_sessions: share_sessions.clone(),
            tls: tls.clone(),
            credentials: credentials.clone(),
            limits: limits.clone(),
        };
        let placement = match cpus.get(index % cpus.len().max(1)) {
            Some(&cpu) if config.shards <= cpus.len() => Placement::Fixed(cpu),
            _ => Placement::Unbound,
        };
        let handle = LocalExecutorBuilder::new(placement)
            .name(&format!("{}{index}", fatal::SHARD_THREAD_PREFIX))
            .io_memory(SHARD_IO_MEMORY_BYTES)
            .spawn(move || async move {
                files::use_dma_blocks();
                if let Err(error) = kick::install() {
                    tracing::warn!(%error, "no I/O doorbell on this shard: queued I/O waits for idle");
                }
                let ready = setup.ready.clone();
                let result = shard_main(setup).await;
                if let Err(reason) = &result {
                    let _ = ready.send(Err(reason.clone()));
                }
                result
            })
            .map_err(|e| RuntimeError::Executor(e.to_string()))?;
        handles.push(handle);
    }
    drop(ready_tx);
    for _ in 0..config.shards {
        match ready_rx.recv() {
            Ok(Ok(_)) => {}
            Ok(Err(reason)) => return Err(RuntimeError::Shard { shard: 0, reason }),
            Err(_) => {
                return Err(RuntimeError::Executor(
                    "a shard stopped before it was ready".into(),
                ))
            }
        }
    }
    let addrs: Vec<String> = config
        .listeners
        .iter()
        .map(|l| l.addr.to_string())
        .collect();
    println!(
        "lockstep ready: listening on {} ({} shards)",
        addrs.join(", "),
        config.shards
    );
    let _ = io::stdout().flush();
    tracing::info!(listen = %config.listen, shards = config.shards, data_dir = %config.data_dir.display(), "broker ready");
    metrics.set_ready(true);
    notify::notify_or_log(&format!(
        "READY=1\nSTATUS=listening on {}",
        addrs.join(", ")
    ));
    watch_for_stop(stop.clone(), metrics.clone());

    for (shard, handle) in handles.into_iter().enumerate() {
        match handle.join() {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => return Err(RuntimeError::Shard { shard, reason }),
            Err(e) => {
                return Err(RuntimeError::Shard {
                    shard,
                    reason: e.to_string(),
                })
            }
        }
    }
    tracing::info!("broker stopped");
    Ok(())
}

/// Once a shutdown signal arrives: `/ready` answers 503 and the service manager hears
/// `STOPPING=1`, while the shards drain.
fn watch_for_stop(stop: Arc<AtomicBool>, metrics: Arc<MetricsRegistry>) {
    let spawned = std::thread::Builder::new()
        .name("lockstep-stop-watch".into())
        .spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(STOP_WATCH_INTERVAL_MS));
            }
            metrics.set_ready(false);
            notify::notify_or_log("STOPPING=1");
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot watch for shutdown: /ready stays 200 while stopping");
    }
}

async fn shard_main(setup: ShardSetup) -> Result<(), String> {
    let config = setup.config;
    let shards = config.shards;
    let (senders, mut receivers) = setup
        .mesh
        .join()
        .await
        .map_err(|e| format!("cannot join the shard mesh: {e}"))?;
    let id = senders.peer_id();
    let started = Instant::now();
    let (mut state, reports) = ShardState::open(
        ShardId(id as u16),
        shards,
        &config.data_dir,
        FsStorage,
        setup.registry,
        wall_ms() as u64,
    )
    .map_err(|e| e.to_string())?;
    let jdir = journal_dir(&config.data_dir, ShardId(id as u16));
    let mut region_dir = MmapDir::open(&jdir).map_err(|e| format!("{}: {e}", jdir.display()))?;
    if files::journal_flush() == files::JournalFlush::Fdatasync {
        region_dir = region_dir.with_shared_maps();
    }
    let (journal, recovered) = Journal::open(region_dir, JournalConfig::default())
        .map_err(|e| format!("state journal {}: {e}", jdir.display()))?;
    if let Some(cut) = &recovered.report.truncated {
        tracing::warn!(
            shard = id,
            ?cut,
            "state journal recovered with a torn tail cut"
        );
    }
    state
        .restore_journal(
            &recovered,
            crate::producer_txn::coordinator::CoordConfig::from_broker_defaults(
                &config.broker_defaults,
            ),
            wall_ms() as u64,
        )
        .map_err(|e| format!("state journal {}: {e}", jdir.display()))?;
    state.share.sessions = ShareSessions::with_budget(setup.share_sessions.clone());
    state.groups.initial_rebalance_delay_ms = config.group_initial_rebalance_delay_ms;
    if let Some(ms) = config
        .broker_defaults
        .get("producer.id.expiration.ms")
        .and_then(|v| v.parse().ok())
    {
        state.producer_id_expiration_ms = ms;
    }
    for report in reports
        .iter()
        .filter(|r| !r.truncated.is_empty() || !r.removed.is_empty())
    {
        tracing::warn!(shard = id, ?report, "partition recovered with repairs");
    }
    tracing::info!(
        shard = id,
        partitions = reports.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "partitions open"
    );
    let mut listeners = Vec::with_capacity(config.listeners.len());
    for l in &config.listeners {
        let bound = TcpListener::bind(l.addr)
            .map_err(|e| format!("cannot listen on {} ({}): {e}", l.addr, l.name))?;
        let endpoint = conn::Endpoint {
            name: l.name.clone(),
            protocol: l.protocol,
            advertised: l.advertised,
            tls: match (&setup.tls, l.protocol.uses_tls()) {
                (Some(tls), true) => Some(futures_rustls::TlsAcceptor::from(tls.clone())),
                (None, true) => return Err(format!("listener {} has no TLS settings", l.name)),
                _ => None,
            },
            authorizer: config.authorizer.clone().map(Arc::new),
            sasl: match (config.sasl.get(&l.name), l.protocol.uses_sasl()) {
                (Some(sasl), true) => Some(conn::SaslEndpoint {
                    mechanisms: sasl.mechanisms.clone(),
                    plain: sasl.plain.clone(),
                    credentials: setup.credentials.clone(),
                }),
                (None, true) => return Err(format!("listener {} has no SASL settings", l.name)),
                _ => None,
            },
            limits: setup.limits.clone(),
        };
        listeners.push((bound, std::rc::Rc::new(endpoint)));
    }
    let metrics: Arc<Mutex<ShardMetrics>> = setup.metrics.shard(id);
    let ctx = ShardHandle::new(
        state,
        journal,
        (shards > 1).then_some(senders),
        metrics,
        SHARD_INFLIGHT_REQUEST_BYTES_MAX,
    );
    *ctx.0.credentials.borrow_mut() = Some(setup.credentials.clone());
    for (_peer, receiver) in receivers.streams() {
        let c = ctx.clone();
        glommio::spawn_local(async move {
            while let Some(msg) = receiver.recv().await {
                c.on_mesh_message(msg);
            }
        })
        .detach();
    }
    ctx.after_restart();
    spawn_periodic(
        &ctx,
        crate::constants::TXN_MARKER_RETRY_BACKOFF_MS as u64,
        |c| c.ptxn_tick(),
    );
    spawn_periodic(&ctx, LOG_HOUSEKEEPING_INTERVAL_MS, |c| c.housekeeping());
    spawn_periodic(&ctx, SHARE_HOUSEKEEPING_INTERVAL_MS, |c| {
        c.share_housekeeping()
    });
    spawn_periodic(&ctx, METRICS_REFRESH_MS, |c| c.refresh_log_gauges());
    {
        let c = ctx.clone();
        let stop = setup.stop.clone();
        glommio::spawn_local(async move {
            while !stop.load(Ordering::SeqCst) {
                glommio::timer::sleep(Duration::from_millis(SHUTDOWN_POLL_MS)).await;
            }
            tracing::info!(shard = %c.id, "shutting down");
            c.0.shutdown.set();
        })
        .detach();
    }
    let _ = setup.ready.send(Ok(id));
    fatal::arm_test_fault(config.test_fault, ShardId(id as u16));

    let accepting: Vec<_> = listeners
        .into_iter()
        .map(|(bound, endpoint)| {
            glommio::spawn_local(conn::accept_loop(ctx.clone(), bound, endpoint))
        })
        .collect();
    for task in accepting {
        task.await;
    }

    let drain_deadline = Instant::now() + Duration::from_millis(SHUTDOWN_DRAIN_MS_MAX);
    while ctx.0.connections_active.get() > 0 && Instant::now() < drain_deadline {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    if ctx.0.connections_active.get() > 0 {
        tracing::warn!(
            shard = id,
            open = ctx.0.connections_active.get(),
            "connections still busy at the drain deadline"
        );
    }
    setup.drained.fetch_add(1, Ordering::SeqCst);
    while setup.drained.load(Ordering::SeqCst) < shards {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    ctx.shut_down().await?;
    tracing::info!(shard = id, "stopped");
    Ok(())
}

fn spawn_periodic(ctx: &ShardHandle, every_ms: u64, work: fn(&ShardHandle)) {
    let c = ctx.clone();
    glommio::spawn_local(async move {
        loop {
            let tick = futures_lite::future::or(
                async {
                    glommio::timer::sleep(Duration::from_millis(every_ms)).await;
                    true
                },
                async {
                    c.0.shutdown.wait().await;
                    false
                },
            )
            .await;
            if !tick {
                break;
            }
            work(&c);
        }
    })
    .detach();
}
