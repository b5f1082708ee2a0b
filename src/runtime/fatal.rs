//! The broker's one fatal path: a shard that panicked, or storage that can no longer be trusted
//! (a poisoned partition log or state journal), ends the whole process at once with a clear
//! message on stderr and an exit status of its own (`constants::EXIT_*`).
//!
//! Why the process and not the shard: shards call each other (the mesh) and share the listener,
//! so a broker with one dead shard is half alive — calls to that shard would wait forever. A
//! process that exits is restarted by its supervisor, and recovery (the partition logs' torn
//! tails, the journal's replay, the coordinator's restart resolution) brings back exactly what
//! was durable. Nothing is flushed on this path: what was not durable was never acknowledged.
//!
//! - [`install_panic_hook`]: a panic on a shard thread (named `lockstep-shard-N-…`) takes the
//!   fatal path ([`Fatal::ShardPanicked`]; its line carries the panic's message and location)
//!   before the panic unwinds, so no task of the dead shard runs again and no caller waits on
//!   it. Not after the default hook: with `RUST_BACKTRACE` set, that symbolizes a backtrace
//!   first (over a second on a loaded machine), while the other shards go on answering.
//! - [`exit`]: called by the runtime when a log or the journal is poisoned.
//! - [`arm_test_fault`]: the test-only hook (`--test-fault`, hidden) that panics a shard.

use crate::config::TestFault;
use crate::constants::{EXIT_SHARD_PANICKED, EXIT_STORAGE_POISONED};
use crate::model::ShardId;
use std::io::Write;
use std::time::Duration;

/// Prefix of the shard threads' names; the panic hook recognises shard threads by it.
pub const SHARD_THREAD_PREFIX: &str = "lockstep-shard-";

/// Why the broker stops on the fatal path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fatal {
    /// A shard panicked (a bug, or the test fault).
    ShardPanicked,
    /// A partition log's flush (fdatasync) failed: the log is poisoned.
    LogPoisoned,
    /// The shard's state journal failed a flush or an append: it is poisoned.
    JournalPoisoned,
}

impl Fatal {
    /// The process exit status for this reason.
    pub fn exit_code(self) -> i32 {
        match self {
            Fatal::ShardPanicked => EXIT_SHARD_PANICKED,
            Fatal::LogPoisoned | Fatal::JournalPoisoned => EXIT_STORAGE_POISONED,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Fatal::ShardPanicked => "a shard panicked",
            Fatal::LogPoisoned => "a partition log is poisoned",
            Fatal::JournalPoisoned => "the state journal is poisoned",
        }
    }
}

/// Ends the process: one line on stderr naming the shard, the reason and the detail, then
/// `exit` with the reason's status. Never returns.
pub fn exit(shard: Option<ShardId>, reason: Fatal, detail: &str) -> ! {
    let code = reason.exit_code();
    let on = shard.map_or_else(String::new, |s| format!(" on {s}"));
    tracing::error!(?shard, ?reason, detail, code, "fatal: the broker exits");
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "lockstep: fatal: {}{on}: {detail}; exiting with status {code} (restart the broker: \
         recovery brings back everything durable)",
        reason.describe()
    );
    let _ = err.flush();
    std::process::exit(code)
}

/// The shard a thread runs, from its name: `lockstep-shard-N`, to which glommio appends
/// `-{executor id}`.
fn shard_of_thread(name: Option<&str>) -> Option<ShardId> {
    let rest = name?.strip_prefix(SHARD_THREAD_PREFIX)?;
    let index = rest.split('-').next()?;
    index.parse::<u16>().ok().map(ShardId)
}

/// Installs (once per process) a panic hook that takes the fatal path at once when the
/// panicking thread is a shard (see the module docs). Panics on other threads behave as before.
pub fn install_panic_hook() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current();
            if let Some(shard) = shard_of_thread(thread.name()) {
                let detail = match (
                    info.payload().downcast_ref::<&str>(),
                    info.payload().downcast_ref::<String>(),
                ) {
                    (Some(s), _) => (*s).to_string(),
                    (_, Some(s)) => s.clone(),
                    _ => "a panic without a message".to_string(),
                };
                let at = info
                    .location()
                    .map_or_else(String::new, |l| format!(" at {l}"));
                exit(Some(shard), Fatal::ShardPanicked, &format!("{detail}{at}"));
            }
            previous(info);
        }));
    });
}

/// Test-only (`--test-fault`): on the shard the fault names, panics `after_ms` after the shard
/// is ready. The panic takes the fatal path like any other.
pub fn arm_test_fault(fault: Option<TestFault>, shard: ShardId) {
    let Some(TestFault::PanicShard {
        shard: target,
        after_ms,
    }) = fault
    else {
        return;
    };
    if target != shard.index() {
        return;
    }
    tracing::warn!(%shard, after_ms, "test fault armed: this shard will panic");
    glommio::spawn_local(async move {
        glommio::timer::sleep(Duration::from_millis(after_ms)).await;
        panic!("test fault: panic-shard={target} after {after_ms} ms");
    })
    .detach();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_threads_are_recognised_by_name() {
        assert_eq!(shard_of_thread(Some("lockstep-shard-0")), Some(ShardId(0)));
        assert_eq!(
            shard_of_thread(Some("lockstep-shard-17")),
            Some(ShardId(17))
        );
        assert_eq!(
            shard_of_thread(Some("lockstep-shard-1-3")),
            Some(ShardId(1))
        );
        assert_eq!(shard_of_thread(Some("main")), None);
        assert_eq!(shard_of_thread(Some("lockstep-shard-x")), None);
        assert_eq!(shard_of_thread(None), None);
    }

    #[test]
    fn every_reason_has_a_status_of_its_own_kind() {
        assert_eq!(Fatal::ShardPanicked.exit_code(), EXIT_SHARD_PANICKED);
        assert_eq!(Fatal::LogPoisoned.exit_code(), EXIT_STORAGE_POISONED);
        assert_eq!(Fatal::JournalPoisoned.exit_code(), EXIT_STORAGE_POISONED);
        assert_ne!(EXIT_SHARD_PANICKED, EXIT_STORAGE_POISONED);
    }
}
