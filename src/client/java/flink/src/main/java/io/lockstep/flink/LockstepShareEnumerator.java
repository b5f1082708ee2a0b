package io.lockstep.flink;

import io.lockstep.clients.LockstepShareTransactionCoordinator;
import java.util.List;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.util.FlinkRuntimeException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The source's coordinator side (it runs in the job manager). It hands out no splits: the broker
 * spreads the topics' partitions over the readers, which are members of the share group. Its job is
 * the job-wide start: on every (re)start of the enumerator (a fresh job, a global failover, a
 * restore with another parallelism) it configures the share group and runs the recovery of every
 * subtask's transactions against the checkpoint it was restored from, then lets the readers start
 * ({@link RecoveredEvent}). Readers never wait on it at a checkpoint: each prepares its own
 * transaction in its own {@code snapshotState}.
 */
final class LockstepShareEnumerator implements SplitEnumerator<LockstepShareSplit, LockstepEnumeratorState> {
    private static final Logger LOG = LoggerFactory.getLogger(LockstepShareEnumerator.class);

    private final SplitEnumeratorContext<LockstepShareSplit> context;
    private final ShareSourceConfig config;
    /** The checkpoint this enumerator was restored from; 0 for a fresh start. */
    private final long restoredCheckpointId;
    /** The group is configured and the job-wide recovery done (coordinator thread only). */
    private boolean recovered;

    LockstepShareEnumerator(SplitEnumeratorContext<LockstepShareSplit> context, ShareSourceConfig config,
            long restoredCheckpointId) {
        this.context = context;
        this.config = config;
        this.restoredCheckpointId = restoredCheckpointId;
    }

    @Override
    public void start() {
        int parallelism = context.currentParallelism();
        context.callAsync(() -> {
            if (config.configureGroup) {
                Recovery.configureGroup(config, parallelism);
            }
            try (LockstepShareTransactionCoordinator coordinator =
                    new LockstepShareTransactionCoordinator(config.coordinatorProperties("enumerator"))) {
                return Recovery.run(config, coordinator, restoredCheckpointId, -1);
            }
        }, (result, error) -> {
            if (error != null) {
                // Thrown in the coordinator thread: Flink fails the job, and the restart retries.
                throw new FlinkRuntimeException("Lockstep share source: group set-up or recovery of group "
                        + config.groupId + " from checkpoint " + restoredCheckpointId + " failed", error);
            }
            LOG.info("Lockstep share source on group {} ready (restored from checkpoint {}): {}",
                    config.groupId, restoredCheckpointId, result);
            recovered = true;
            for (int reader : context.registeredReaders().keySet()) {
                context.sendEventToSourceReader(reader, new RecoveredEvent(restoredCheckpointId));
            }
        });
    }

    @Override
    public void addReader(int subtaskId) {
        if (recovered) {
            context.sendEventToSourceReader(subtaskId, new RecoveredEvent(restoredCheckpointId));
        }
    }

    @Override
    public void handleSplitRequest(int subtaskId, String requesterHostname) {}

    @Override
    public void addSplitsBack(List<LockstepShareSplit> splits, int subtaskId) {
        // Splits are the readers' own state, never assigned: nothing to give back.
    }

    @Override
    public LockstepEnumeratorState snapshotState(long checkpointId) {
        return new LockstepEnumeratorState(checkpointId);
    }

    @Override
    public void close() {}
}
