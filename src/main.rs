//! The `lockstep` broker binary: parses flags, sets up logging, runs the broker.
//!
//! `--config FILE` reads Kafka's `server.properties` names (`config_file`); flags override it.
//! With no arguments it serves the Kafka protocol on 127.0.0.1:9092 with data in `./data`.
//! Once every shard listens it prints one line on stdout:
//! `lockstep ready: listening on HOST:PORT (N shards)`; logs go to stderr (`RUST_LOG` filters).
//! Exit status: 0 after a clean shutdown (SIGTERM/SIGINT), 2 for bad flags or configuration file,
//! `RuntimeError::exit_code` for a failure to start or run, and the fatal path's
//! (`runtime::fatal`): `EXIT_SHARD_PANICKED` (9) when a shard panicked, `EXIT_STORAGE_POISONED`
//! (10) when a partition log or the state journal is poisoned.

use clap::Parser;
use lockstep::config::BrokerConfig;
use lockstep::config_file::FileConfig;
use std::path::PathBuf;

/// Full segment-tail chunks in huge pages once the runtime enables it (the broker does, at
/// start); every other allocation the system allocator's ([`lockstep::runtime::huge_chunks`]).
#[global_allocator]
static ALLOCATOR: lockstep::runtime::huge_chunks::HugeChunks =
    lockstep::runtime::huge_chunks::HugeChunks;

/// Lockstep: a Kafka-compatible broker with transactional acknowledgements for share groups.
#[derive(Parser, Debug)]
#[command(name = "lockstep", version, about)]
struct Args {
    /// A Kafka-style properties file (listeners, log.dirs, num.partitions, retention, ssl.*);
    /// the flags below override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address of a single PLAINTEXT listener (every shard listens on it with SO_REUSEPORT);
    /// replaces the file's `listeners`. Default: 127.0.0.1:9092.
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Directory of all persistent state (created if missing); replaces the file's `log.dirs`.
    /// Default: ./data.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Number of shards (executor threads); default: one per available core.
    #[arg(long, value_name = "N")]
    shards: Option<usize>,
    /// Serve Prometheus metrics (text format) on this address.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<String>,
    /// The address responses name as this broker (Kafka's advertised.listeners); default: the
    /// address each client connected to. For clients that reach the broker through a proxy.
    #[arg(long, value_name = "HOST:PORT")]
    advertised: Option<String>,
    /// Test-only fault injection (`panic-shard=N,after-ms=M`: shard N panics M ms after it is
    /// ready, taking the fatal path). Hidden: for the tests of the fatal path only.
    #[arg(long, value_name = "SPEC", hide = true)]
    test_fault: Option<String>,
}

fn main() {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let file = match &args.config {
        Some(path) => match FileConfig::load(path) {
            Ok(file) => {
                for warning in &file.warnings {
                    tracing::warn!(file = %path.display(), "{warning}");
                }
                file
            }
            Err(e) => {
                eprintln!("lockstep: {}: {e}", path.display());
                std::process::exit(2);
            }
        },
        None => FileConfig::default(),
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let config = match BrokerConfig::new(
        args.listen.as_deref(),
        args.data_dir.or(file.data_dir),
        args.shards,
        args.metrics_listen.as_deref(),
        cores,
    )
    .map(|mut c| {
        if args.listen.is_none() && !file.listeners.is_empty() {
            c = c.with_listeners(file.listeners);
        }
        c.tls = file.tls;
        c.sasl = file.sasl;
        c.limits = file.limits;
        c.broker_defaults = file.broker_defaults;
        c.authorizer = file.authorizer;
        c
    })
    .and_then(|c| match &args.advertised {
        Some(addr) => c.with_advertised(addr),
        None => Ok(c),
    })
    .and_then(|c| match &args.test_fault {
        Some(spec) => c.with_test_fault(spec),
        None => Ok(c),
    }) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("lockstep: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = lockstep::runtime::run(config) {
        tracing::error!(error = %e, "lockstep failed");
        eprintln!("lockstep: {e}");
        std::process::exit(e.exit_code());
    }
}
