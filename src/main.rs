//! The `lockstep` broker binary: parses flags, sets up logging, runs the broker.
//!
//! `--config FILE` reads Kafka's `server.properties` names (`config_file`); `--override KEY=VALUE`
//! sets one property over the file's, and the flags override both. `--check-config FILE` only
//! validates and prints the effective configuration (exit 0, or 1 naming the bad value).
//! `--version` prints the version.
//! With no arguments it serves the Kafka protocol on 127.0.0.1:9092 with data in `./data`.
//! Once every shard listens it prints one line on stdout:
//! `lockstep ready: listening on HOST:PORT (N shards)`; logs go to stderr (`RUST_LOG` filters;
//! `log.format=json` writes one JSON object per line).
//! Exit status: 0 after a clean shutdown (SIGTERM/SIGINT), 2 for bad flags or configuration file,
//! `RuntimeError::exit_code` for a failure to start or run, and the fatal path's
//! (`runtime::fatal`): `EXIT_SHARD_PANICKED` (9) when a shard panicked, `EXIT_STORAGE_POISONED`
//! (10) when a partition log or the state journal is poisoned.

use clap::Parser;
use lockstep::config::file::{FileConfig, FileError};
use lockstep::config::{BrokerConfig, LogFormat};
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
    /// Sets one property as if the configuration file had it, after the file's own (repeatable;
    /// Kafka's `kafka-server-start.sh --override KEY=VALUE`).
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Validates FILE (a properties file, with the other flags applied), prints the effective
    /// configuration as `key=value` lines and exits: 0 if it is valid, 1 with Kafka's message
    /// for a bad value.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    check_config: Option<PathBuf>,
    /// Test-only fault injection (`panic-shard=N,after-ms=M`: shard N panics M ms after it is
    /// ready, taking the fatal path). Hidden: for the tests of the fatal path only.
    #[arg(long, value_name = "SPEC", hide = true)]
    test_fault: Option<String>,
}

/// Reads the properties file (if any) with the overrides on top.
fn load_file(path: Option<&PathBuf>, overrides: &[String]) -> Result<FileConfig, FileError> {
    let mut props = match path {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| FileError::Read {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
            lockstep::config::file::parse_properties(&text)
        }
        None => Vec::new(),
    };
    for item in overrides {
        let Some((key, value)) = item.split_once('=') else {
            return Err(FileError::Value {
                line: 0,
                key: item.clone(),
                value: String::new(),
                reason: "--override takes KEY=VALUE".into(),
            });
        };
        let key = key.trim().to_string();
        props.retain(|p| p.key != key);
        props.push(lockstep::config::file::Property {
            key,
            value: value.to_string(),
            line: 0,
        });
    }
    let base = path
        .and_then(|p| p.parent())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    FileConfig::from_properties(&props, &base)
}

/// The broker's configuration: the file's settings, then the flags.
fn broker_config(args: &Args, file: FileConfig) -> Result<BrokerConfig, String> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut config = BrokerConfig::new(
        args.listen.as_deref(),
        args.data_dir.clone().or(file.data_dir),
        args.shards,
        args.metrics_listen
            .as_deref()
            .or(file.metrics_listen.as_deref()),
        cores,
    )
    .map_err(|e| e.to_string())?;
    if args.listen.is_none() && !file.listeners.is_empty() {
        config = config.with_listeners(file.listeners);
    }
    config.tls = file.tls;
    config.sasl = file.sasl;
    config.limits = file.limits;
    config.broker_defaults = file.broker_defaults;
    config.authorizer = file.authorizer;
    if let Some(ms) = file.group_initial_rebalance_delay_ms {
        config.group_initial_rebalance_delay_ms = ms;
    }
    if let Some(addr) = &args.advertised {
        config = config.with_advertised(addr).map_err(|e| e.to_string())?;
    }
    if let Some(spec) = &args.test_fault {
        config = config.with_test_fault(spec).map_err(|e| e.to_string())?;
    }
    Ok(config)
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// `--check-config FILE`: exit 0 printing the effective configuration, or 1 naming the problem.
fn check_config(args: &Args, path: &PathBuf) -> ! {
    let file = match load_file(Some(path), &args.overrides) {
        Ok(file) => file,
        Err(e) => {
            eprintln!("{}: {}", path.display(), e.kafka_message());
            std::process::exit(1);
        }
    };
    let warnings = file.warnings.clone();
    let log_format = file.log_format.unwrap_or_default();
    match broker_config(args, file) {
        Ok(config) => {
            for warning in &warnings {
                eprintln!("{}: warning: {warning}", path.display());
            }
            println!("# {}: valid; the effective configuration:", path.display());
            for (key, value) in config.effective() {
                println!("{key}={value}");
            }
            println!("log.format={}", log_format.name());
            println!("# --shards {} (flag)", config.shards);
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            std::process::exit(1);
        }
    }
}

fn main() {
    let args = Args::parse();
    if let Some(path) = &args.check_config {
        check_config(&args, path);
    }
    let file = match load_file(args.config.as_ref(), &args.overrides) {
        Ok(file) => file,
        Err(e) => {
            let source = args
                .config
                .as_ref()
                .map_or("--override".to_string(), |p| p.display().to_string());
            eprintln!("lockstep: {source}: {e}");
            std::process::exit(2);
        }
    };
    init_logging(file.log_format.unwrap_or_default());
    for warning in &file.warnings {
        tracing::warn!("{warning}");
    }
    let config = match broker_config(&args, file) {
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
