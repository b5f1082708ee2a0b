//! `lockstep-txn`: a scriptable command line for Lockstep's share transactions (API keys
//! 1000–1005, `schemas/share-transactions.md`).
//!
//! What: begin / prepare / commit / abort / list the transactions of a share group through
//! [`ShareTransactionCoordinator`], and `consume`, which joins the share group, acquires up to N
//! records, acknowledges them into a transaction (ACCEPT, or REJECT with `--reject`), flushes
//! (API 1001) and prints one JSON line per record. Why: operators resolving in-doubt
//! transactions by hand, and tests and scripts that drive the two-phase protocol end to end.
//!
//! Output: `begin`/`prepare`/`commit`/`abort` print `TXN STATE` (the state after the call);
//! `list` prints a table, or with `--json` one JSON array; `consume` prints
//! `{"partition":..,"offset":..,"delivery_count":..,"value":".."}` lines.
//!
//! Exit codes: 0 ok; 1 the broker refused or could not be reached (one line on stderr with the
//! Kafka code name and number); 2 usage.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use lockstep::client::admin::Admin;
use lockstep::client::share_consumer::{AckType, ShareConsumer, ShareRecord};
use lockstep::client::transactions::{
    error_name, PendingTransaction, ShareTransactionCoordinator, TxnState,
};
use lockstep::client::ClientError;

/// Records one `consume` may ask for.
const CONSUME_RECORDS_MAX: usize = 1_000_000;
/// Longest single poll of `consume` (the overall bound is `--timeout-ms`).
const CONSUME_POLL_SLICE: Duration = Duration::from_secs(1);

#[derive(Parser)]
#[command(
    name = "lockstep-txn",
    version,
    about = "Begin, prepare, commit, abort and list Lockstep share transactions"
)]
struct Cli {
    /// A broker to bootstrap from.
    #[arg(long, default_value = "127.0.0.1:9092", global = true)]
    bootstrap: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a transaction (idempotent: a known id reports its state).
    Begin {
        txn: String,
        #[arg(long)]
        group: String,
        /// ONGOING timeout; -1 takes the group's share.transaction.timeout.ms.
        #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
        timeout_ms: i64,
    },
    /// Phase 1: make the transaction's locks durable.
    Prepare {
        txn: String,
        #[arg(long)]
        group: String,
    },
    /// Phase 2: the locked records are acknowledged for good.
    Commit {
        txn: String,
        #[arg(long)]
        group: String,
    },
    /// Release the locked records for redelivery.
    Abort {
        txn: String,
        #[arg(long)]
        group: String,
    },
    /// List transactions (default: the pending ones, ONGOING and PREPARE).
    List {
        #[arg(long)]
        group: String,
        /// States to list; repeat or separate with commas.
        #[arg(long = "state", value_enum, value_delimiter = ',')]
        states: Vec<StateArg>,
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Acquire up to N records of a topic and acknowledge them into a transaction.
    Consume {
        #[arg(long)]
        group: String,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        txn: String,
        #[arg(long)]
        max_records: usize,
        /// Acknowledge with REJECT instead of ACCEPT.
        #[arg(long)]
        reject: bool,
        /// How long to wait for records in all.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
        /// Set the group's share.auto.offset.reset=earliest first.
        #[arg(long)]
        from_earliest: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum StateArg {
    Ongoing,
    Prepare,
    Committed,
    Aborted,
}

impl From<StateArg> for TxnState {
    fn from(s: StateArg) -> TxnState {
        match s {
            StateArg::Ongoing => TxnState::Ongoing,
            StateArg::Prepare => TxnState::Prepare,
            StateArg::Committed => TxnState::Committed,
            StateArg::Aborted => TxnState::Aborted,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lockstep-txn: {}", describe(&e));
            ExitCode::from(1)
        }
    }
}

/// One line: the code name first for Kafka errors, so scripts can match on it.
fn describe(e: &ClientError) -> String {
    match e {
        ClientError::Kafka {
            code,
            message,
            context,
        } => format!("{} ({code}): {message} [{context}]", error_name(*code)),
        other => other.to_string().replace('\n', " "),
    }
}

fn run(cli: &Cli) -> Result<(), ClientError> {
    let bootstrap = cli.bootstrap.as_str();
    match &cli.command {
        Command::Begin {
            txn,
            group,
            timeout_ms,
        } => {
            let state =
                ShareTransactionCoordinator::new(bootstrap, group).begin(txn, *timeout_ms)?;
            println!("{txn} {state}");
        }
        Command::Prepare { txn, group } => {
            let state = ShareTransactionCoordinator::new(bootstrap, group).prepare(txn)?;
            println!("{txn} {state}");
        }
        Command::Commit { txn, group } => {
            let state = ShareTransactionCoordinator::new(bootstrap, group).commit(txn)?;
            println!("{txn} {state}");
        }
        Command::Abort { txn, group } => {
            let state = ShareTransactionCoordinator::new(bootstrap, group).abort(txn)?;
            println!("{txn} {state}");
        }
        Command::List {
            group,
            states,
            json,
        } => {
            let states: Vec<TxnState> = states.iter().map(|&s| s.into()).collect();
            let txns = ShareTransactionCoordinator::new(bootstrap, group).list(&states)?;
            if *json {
                println!("{}", list_json(&txns));
            } else {
                print!("{}", list_table(&txns));
            }
        }
        Command::Consume {
            group,
            topic,
            txn,
            max_records,
            reject,
            timeout_ms,
            from_earliest,
        } => consume(
            bootstrap,
            group,
            topic,
            txn,
            (*max_records).min(CONSUME_RECORDS_MAX),
            if *reject {
                AckType::Reject
            } else {
                AckType::Accept
            },
            Duration::from_millis(*timeout_ms),
            *from_earliest,
        )?,
    }
    Ok(())
}

fn list_json(txns: &[PendingTransaction]) -> String {
    let items: Vec<serde_json::Value> = txns
        .iter()
        .map(|t| {
            serde_json::json!({
                "transaction_id": t.transaction_id,
                "state": t.state.name(),
                "timeout_ms": t.timeout_ms,
                "create_time_ms": t.create_time_ms,
                "prepare_time_ms": t.prepare_time_ms,
                "locked_records": t.locked_records(),
                "partitions": t.partitions.iter().map(|p| serde_json::json!({
                    "topic_id": p.topic_id.to_string(),
                    "partition": p.partition,
                    "locked_records": p.locked_records,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::Value::Array(items).to_string()
}

fn list_table(txns: &[PendingTransaction]) -> String {
    let mut rows = vec![[
        "TRANSACTION".to_string(),
        "STATE".to_string(),
        "CREATED_MS".to_string(),
        "PREPARED_MS".to_string(),
        "TIMEOUT_MS".to_string(),
        "LOCKED".to_string(),
        "PARTITIONS".to_string(),
    ]];
    for t in txns {
        let partitions: Vec<String> = t
            .partitions
            .iter()
            .map(|p| format!("{}:{}={}", p.topic_id, p.partition, p.locked_records))
            .collect();
        rows.push([
            t.transaction_id.clone(),
            t.state.name().to_string(),
            t.create_time_ms.to_string(),
            t.prepare_time_ms
                .map_or_else(|| "-".to_string(), |ms| ms.to_string()),
            t.timeout_ms.to_string(),
            t.locked_records().to_string(),
            if partitions.is_empty() {
                "-".to_string()
            } else {
                partitions.join(",")
            },
        ]);
    }
    let mut widths = [0usize; 7];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn consume(
    bootstrap: &str,
    group: &str,
    topic: &str,
    txn: &str,
    max_records: usize,
    ack_type: AckType,
    timeout: Duration,
    from_earliest: bool,
) -> Result<(), ClientError> {
    if from_earliest {
        Admin::connect(bootstrap)?.set_group_config(
            group,
            "share.auto.offset.reset",
            "earliest",
        )?;
    }
    let mut consumer = ShareConsumer::new(bootstrap, group);
    let result = acquire_and_acknowledge(&mut consumer, topic, txn, max_records, ack_type, timeout);
    let closed = consumer.close();
    let records = result?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for r in &records {
        let line = serde_json::json!({
            "partition": r.partition,
            "offset": r.offset,
            "delivery_count": r.delivery_count,
            "value": r.value.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()),
        });
        let _ = writeln!(out, "{line}");
    }
    closed
}

/// Polls until `max_records` are acquired or `timeout` passes; acknowledges them into `txn`
/// (extra records of the last poll are left to be released at close) and flushes. Returns the acknowledged records.
fn acquire_and_acknowledge(
    consumer: &mut ShareConsumer,
    topic: &str,
    txn: &str,
    max_records: usize,
    ack_type: AckType,
    timeout: Duration,
) -> Result<Vec<ShareRecord>, ClientError> {
    consumer.subscribe(&[topic])?;
    let deadline = Instant::now() + timeout;
    let mut records: Vec<ShareRecord> = Vec::new();
    while records.len() < max_records {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let polled = consumer.poll((deadline - now).min(CONSUME_POLL_SLICE))?;
        // Records beyond `max_records` are left unacknowledged: the broker releases them when
        // the session closes (an explicit RELEASE would be refused in transactional mode).
        for r in polled.into_iter().take(max_records - records.len()) {
            consumer.acknowledge_transactional(&r, ack_type, txn)?;
            records.push(r);
        }
    }
    consumer.flush_transactional()?;
    Ok(records)
}
