/**
 * An exactly-once Apache Flink source on a Lockstep share group: {@link
 * io.lockstep.flink.LockstepShareSource}.
 *
 * <p>The design, in one paragraph. Every parallel reader is a share-group member and owns its
 * transactions: one per (reader, checkpoint interval), id {@code
 * {group}-{prefix}-{subtask}-{token}-{checkpointId}} ({@link io.lockstep.flink.TransactionIds}).
 * A reader acknowledges each record it emits into its current transaction on the thread that also
 * handles the checkpoint barrier, so the records emitted before barrier N are exactly the records
 * acknowledged into the transaction that {@code snapshotState(N)} prepares, after flushing and
 * checking every acknowledgement. The checkpoint cannot complete before every reader's snapshot
 * returned, so every transaction it covers is prepared; {@code notifyCheckpointComplete} commits
 * them. No reader waits on the enumerator at a checkpoint. The enumerator (job manager) runs the
 * KIP's recovery over all subtasks' transactions of the prefix whenever it starts (fresh, global
 * failover, restore with another parallelism), against the checkpoint it was restored from; a
 * reader restarted alone (region failover) recovers its own subtask's. Readers begin nothing before
 * the enumerator's recovery is done.
 */
package io.lockstep.flink;
