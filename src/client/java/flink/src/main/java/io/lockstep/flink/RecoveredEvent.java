package io.lockstep.flink;

import org.apache.flink.api.connector.source.SourceEvent;

/**
 * Enumerator → reader: the group is configured and the job-wide recovery is done; the reader may
 * recover its own subtask's transactions and start consuming. Readers never begin a transaction
 * before it, so a recovery never aborts a transaction of the running job.
 *
 * <p>It carries the checkpoint the enumerator was restored from: after a restore with a higher
 * parallelism some readers get no state of their own, and a reader must never name a transaction
 * at or below the restored checkpoint (the recovery rule would commit it if that checkpoint is
 * restored again).
 */
final class RecoveredEvent implements SourceEvent {
    private static final long serialVersionUID = 1L;

    private final long restoredCheckpointId;

    RecoveredEvent(long restoredCheckpointId) {
        this.restoredCheckpointId = restoredCheckpointId;
    }

    /** The checkpoint the enumerator was restored from (0: none). */
    long restoredCheckpointId() {
        return restoredCheckpointId;
    }

    @Override
    public String toString() {
        return "RecoveredEvent(restored checkpoint " + restoredCheckpointId + ")";
    }
}
