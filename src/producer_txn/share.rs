//! The participant steps of KIP-1289's TxnShareAcknowledge (the draft's TX_PENDING): share
//! records acknowledged inside a *producer* transaction, resolved by its commit or abort marker.
//!
//! One LOCKED state serves both roads. A record acknowledged through the KIP's keys 1000–1005 is
//! `LOCKED{txn}` with `txn` a share transaction id (`{groupId}-{prefix}-{checkpoint}`); one
//! acknowledged through TxnShareAcknowledge is `LOCKED{txn}` with `txn` the *owner name* of a
//! [`ProducerLock`], `#producer.{producerId}.{producerEpoch}`. A share transaction id always
//! contains a `-` (it is `{groupId}-…-…`, `txn::check_transaction_id`) and an owner name never
//! does (producer ids and epochs are not negative), so the two never collide, and everything the
//! first road built — `SharePartition::lock` (ACQUIRED → LOCKED, all-or-nothing, member
//! checked), `commit` (LOCKED{ACCEPT} → ACKNOWLEDGED, LOCKED{REJECT} → ARCHIVED), `abort`
//! (LOCKED → AVAILABLE with the delivery count given back), the journal's `TransactionLocks`
//! entries, snapshots and replay — serves the second unchanged.
//!
//! What differs is who decides:
//! - Lock: the partition's shard locks and journals the locks *before* it answers (a producer
//!   transaction has no prepare phase in which participants persist: once the client has its
//!   answer it may commit at once, and a commit marker must find the locks after a crash).
//! - Resolve ([`resolve`]): the producer transaction's marker (`ShardOp::WriteTxnMarkers`,
//!   `crate::producer_txn::TxnMarker`) resolves every lock of its producer id whose epoch is at most the
//!   marker's: commit → the lock's outcome, abort → AVAILABLE without using a delivery attempt.
//!   "At most", because Kafka writes a fenced or timed-out transaction's abort marker with the
//!   bumped epoch (and KIP-890 bumps the epoch at every end), and a producer has one open
//!   transaction at a time: the coordinator writes the previous transaction's markers before it
//!   lets the next one begin, so no lock of a *later* transaction exists when a marker arrives,
//!   and locks of a later epoch are never touched. Applying a marker twice is a no-op.
//! - Fencing ([`check_epoch`]): an acknowledgement with an epoch older than a lock the same
//!   producer id holds on the partition, or than a marker of that producer id applied there, is
//!   refused with INVALID_PRODUCER_EPOCH (a zombie). The applied-marker fence is not durable: after
//!   a restart only held locks fence, until the producer's next marker (the complete defence is
//!   KIP-890's verification with the transaction coordinator, not done here).
//! - Recovery: locks owned by a producer transaction stay LOCKED across a restart until a marker
//!   arrives (the transaction coordinator re-sends the markers of every transaction in
//!   PREPARE_COMMIT / PREPARE_ABORT after its own recovery); they are not asked about at the
//!   share-transaction coordinator ([`is_producer_lock`] keeps them out of that resolution).
//!
//! Synchronous and I/O-free; the shard (`shard::share_txn_state`) journals what these return.

use super::{TxnMarker, TxnOutcome};
use crate::share::{AckBatch, AcknowledgeType, ShareError, SharePartition};
use std::fmt;

/// The owner of share records LOCKED in a producer transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProducerLock {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

const OWNER_PREFIX: &str = "#producer.";

impl ProducerLock {
    /// `None` for a negative producer id or epoch (no transaction can own a lock with one).
    pub fn new(producer_id: i64, producer_epoch: i16) -> Option<ProducerLock> {
        (producer_id >= 0 && producer_epoch >= 0).then_some(ProducerLock {
            producer_id,
            producer_epoch,
        })
    }

    /// The name the lock is interned and journalled under (module docs).
    pub fn owner_name(self) -> String {
        format!("{OWNER_PREFIX}{}.{}", self.producer_id, self.producer_epoch)
    }

    /// Inverse of [`ProducerLock::owner_name`]; `None` for any other name (a share
    /// transaction id).
    pub fn parse(name: &str) -> Option<ProducerLock> {
        let rest = name.strip_prefix(OWNER_PREFIX)?;
        let (id, epoch) = rest.split_once('.')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(id) || !digits(epoch) {
            return None;
        }
        let lock = ProducerLock::new(id.parse().ok()?, epoch.parse().ok()?)?;
        // Canonical form only ("01" is not a name this module writes).
        (lock.owner_name() == name).then_some(lock)
    }

    /// Does `marker` end the transaction that holds this lock (same producer id, epoch at
    /// most the marker's)?
    pub fn resolved_by(self, marker: &TxnMarker) -> bool {
        self.producer_id == marker.producer_id && self.producer_epoch <= marker.producer_epoch
    }
}

impl fmt::Display for ProducerLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "producer {} epoch {}",
            self.producer_id, self.producer_epoch
        )
    }
}

/// Is this LOCKED owner a producer transaction (not a share transaction)?
pub fn is_producer_lock(name: &str) -> bool {
    ProducerLock::parse(name).is_some()
}

/// Why a TxnShareAcknowledge was refused on a partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShareLockError {
    /// An acknowledge type other than ACCEPT or REJECT (the draft allows only those).
    InvalidAcknowledgeType(i8),
    /// The producer holds locks here with a newer epoch: this one is a zombie.
    FencedEpoch { lock: ProducerLock, held_epoch: i16 },
    /// The share partition refused (records not ACQUIRED by the member, bad ranges, …).
    Share(ShareError),
}

impl fmt::Display for ShareLockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShareLockError::InvalidAcknowledgeType(t) => write!(
                f,
                "acknowledge type {t} inside a producer transaction; only ACCEPT (1) and REJECT (3)"
            ),
            ShareLockError::FencedEpoch { lock, held_epoch } => write!(
                f,
                "{lock} is fenced: the producer holds locks here with epoch {held_epoch}"
            ),
            ShareLockError::Share(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ShareLockError {}

/// The draft's acknowledgement batch (one type per range) as the share partition's.
pub fn ack_batch(first: i64, last: i64, ack_type: i8) -> Result<AckBatch, ShareLockError> {
    match AcknowledgeType::from_code(ack_type) {
        Some(t @ (AcknowledgeType::Accept | AcknowledgeType::Reject)) => {
            Ok(AckBatch::new(first, last, t))
        }
        _ => Err(ShareLockError::InvalidAcknowledgeType(ack_type)),
    }
}

/// The newest epoch of `producer_id` among the locks held on `sp`, if any.
fn held_epoch(sp: &SharePartition, producer_id: i64) -> Option<i16> {
    sp.locked_txns()
        .iter()
        .filter_map(|name| ProducerLock::parse(name))
        .filter(|l| l.producer_id == producer_id)
        .map(|l| l.producer_epoch)
        .max()
}

/// Fencing: refuses `lock` if its producer holds locks on `sp` with a newer epoch, or if a
/// marker with a newer epoch of its producer was applied here (the transaction that epoch
/// belonged to has ended: with KIP-890 the next transaction runs at the marker's epoch, without
/// it at the same epoch, and a fenced producer's abort marker carries the bumped epoch).
pub fn check_epoch(sp: &SharePartition, lock: ProducerLock) -> Result<(), ShareLockError> {
    let newest = held_epoch(sp, lock.producer_id).max(sp.producer_fence(lock.producer_id));
    match newest {
        Some(held) if held > lock.producer_epoch => Err(ShareLockError::FencedEpoch {
            lock,
            held_epoch: held,
        }),
        _ => Ok(()),
    }
}

/// TxnShareAcknowledge on one partition: ACQUIRED by `member` → LOCKED by `lock`'s
/// transaction, all-or-nothing. Returns the records locked.
pub fn lock(
    sp: &mut SharePartition,
    member: &str,
    lock: ProducerLock,
    batches: &[AckBatch],
) -> Result<u64, ShareLockError> {
    for b in batches {
        for t in &b.types {
            if !matches!(t, AcknowledgeType::Accept | AcknowledgeType::Reject) {
                return Err(ShareLockError::InvalidAcknowledgeType(t.code()));
            }
        }
    }
    check_epoch(sp, lock)?;
    sp.lock(member, &lock.owner_name(), batches)
        .map_err(ShareLockError::Share)
}

/// What a marker did on one share partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The owner names whose locks were resolved (each needs an empty `TransactionLocks`).
    pub owners: Vec<String>,
    /// LOCKED{ACCEPT} → ACKNOWLEDGED (commit).
    pub acknowledged: u64,
    /// LOCKED{REJECT} → ARCHIVED (commit), or below the log start (abort).
    pub archived: u64,
    /// LOCKED → AVAILABLE or ARCHIVED below the log start (abort).
    pub released: u64,
}

/// The marker of a producer transaction reached this share partition: every lock it ends
/// (module docs) is committed or aborted. Idempotent.
pub fn resolve(sp: &mut SharePartition, marker: &TxnMarker) -> Resolved {
    let mut out = Resolved::default();
    if marker.producer_id >= 0 && marker.producer_epoch >= 0 {
        sp.raise_producer_fence(marker.producer_id, marker.producer_epoch);
    }
    for name in sp.locked_txns() {
        let Some(lock) = ProducerLock::parse(&name) else {
            continue;
        };
        if !lock.resolved_by(marker) {
            continue;
        }
        match marker.outcome {
            TxnOutcome::Commit => {
                let counts = sp.commit(&name);
                out.acknowledged += counts.acknowledged;
                out.archived += counts.archived;
            }
            TxnOutcome::Abort => out.released += sp.abort(&name),
        }
        assert_eq!(sp.locked_count(&name), 0, "{name} resolved");
        out.owners.push(name);
    }
    out
}

#[cfg(test)]
mod tests;
