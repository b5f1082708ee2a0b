package io.lockstep.flink;

import org.apache.flink.api.connector.source.SourceEvent;

/**
 * Enumerator → reader: the group is configured and the job-wide recovery is done; the reader may
 * recover its own subtask's transactions and start consuming. Readers never begin a transaction
 * before it, so a recovery never aborts a transaction of the running job.
 */
final class RecoveredEvent implements SourceEvent {
    private static final long serialVersionUID = 1L;

    @Override
    public String toString() {
        return "RecoveredEvent";
    }
}
