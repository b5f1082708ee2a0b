//! The share side of producer transactions on a shard (KIP-1289's TxnShareAcknowledge):
//! the partition's shard locks share records in a producer transaction and resolves them when
//! the transaction's marker arrives. The rules are `crate::producer_txn::share`'s; this module runs them
//! on the shard's share partitions and produces the journal entries, which the runtime makes
//! durable before it answers (`shard::exec`).
//!
//! Journal: the same entries as the share-transaction road (`shard::share_txn_state`). A lock
//! writes the partition's state delta (LOCKED journalled as AVAILABLE) and a `TransactionLocks`
//! entry whose transaction id is the owner name `#producer.{id}.{epoch}` (schemas/FORMAT.md);
//! a marker writes the resolved delta and an empty `TransactionLocks` for each owner it
//! resolved. Replay overlays the latest non-empty locks, so locks answered to a client are
//! LOCKED again after a crash until the coordinator re-sends the marker. Unlike share
//! transactions, they are not resolved by asking a share-transaction coordinator after a
//! restart (`ShareState::txn_locked` leaves them out).

use super::ops::{PartitionRef, ShareAckResult, SharePartitionError};
use super::share_state::ShareKey;
use super::share_txn_state::locks_entry;
use super::state::ShardState;
use crate::journal::entries::Entry;
use crate::producer_txn::share::{self as rules, ProducerLock, Resolved};
use crate::producer_txn::TxnMarker;
use crate::share::AckBatch;
use crate::storage::file::Storage;

impl<S: Storage + Clone> ShardState<S> {
    /// TxnShareAcknowledge on this shard: ACQUIRED by `member_id` → LOCKED by `owner`, each
    /// partition all-or-nothing; journals the locks of every partition that changed.
    pub fn ptxn_share_lock(
        &mut self,
        group_id: &str,
        member_id: &str,
        owner: ProducerLock,
        partitions: &[(PartitionRef, Vec<AckBatch>)],
    ) -> Vec<Result<u64, ShareAckResult>> {
        let name = owner.owner_name();
        partitions
            .iter()
            .map(|(r, batches)| {
                let key = ShareKey {
                    group_id: group_id.to_string(),
                    partition: r.key(),
                };
                let mut sp = self.take_existing_share(&key).ok_or_else(|| {
                    ShareAckResult::error(
                        SharePartitionError::NothingAcquired,
                        "no records of this partition were acquired by the group",
                    )
                })?;
                let result = rules::lock(&mut sp, member_id, owner, batches).map_err(|e| {
                    let message = e.to_string();
                    ShareAckResult::error(SharePartitionError::from(e), message)
                });
                let ranges = sp.locked_ranges(&name);
                self.put_share(key.clone(), sp);
                if matches!(result, Ok(n) if n > 0) {
                    self.share
                        .push_entry(Entry::TransactionLocks(locks_entry(&key, &name, &ranges)));
                }
                result
            })
            .collect()
    }

    /// A producer transaction's marker reached partition `r`: resolves the locks it ends in
    /// every share group with state here (`crate::producer_txn::share::resolve`). Idempotent.
    pub fn ptxn_share_resolve(&mut self, marker: &TxnMarker, r: &PartitionRef) -> Resolved {
        let partition = r.key();
        let keys: Vec<ShareKey> = self
            .share
            .groups_with_state()
            .into_iter()
            .map(|group_id| ShareKey {
                group_id,
                partition,
            })
            .filter(|k| self.share.start_offset(k).is_some())
            .collect();
        let mut total = Resolved::default();
        for key in keys {
            let Some(mut sp) = self.take_existing_share(&key) else {
                continue;
            };
            let resolved = rules::resolve(&mut sp, marker);
            self.put_share(key.clone(), sp);
            for owner in &resolved.owners {
                self.share
                    .push_entry(Entry::TransactionLocks(locks_entry(&key, owner, &[])));
            }
            total.owners.extend(resolved.owners);
            total.acknowledged += resolved.acknowledged;
            total.archived += resolved.archived;
            total.released += resolved.released;
        }
        total
    }
}

#[cfg(test)]
mod tests;
