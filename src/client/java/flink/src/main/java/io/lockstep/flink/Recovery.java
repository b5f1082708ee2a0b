package io.lockstep.flink;

import io.lockstep.clients.LockstepShareTransactionCoordinator;
import io.lockstep.clients.PendingTransaction;
import io.lockstep.clients.TransactionState;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.config.ConfigResource;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The KIP's recovery routine, scoped to this source's transactions: list the group's pending
 * transactions, commit each PREPARE one whose checkpoint completed, abort every other one of this
 * source ({@link TransactionIds#decide}); other ids of the group are left alone. Retried as a whole
 * until every transaction of the scope is ended or the deadline passes (a broker restarting in
 * between is retried through).
 */
final class Recovery {
    private static final Logger LOG = LoggerFactory.getLogger(Recovery.class);
    private static final long BACKOFF_MS = 200;

    private Recovery() {}

    /** What a recovery did. */
    static final class Result {
        final List<String> committed = new ArrayList<>();
        final List<String> aborted = new ArrayList<>();

        @Override
        public String toString() {
            return "committed " + committed + ", aborted " + aborted;
        }
    }

    /**
     * Ends every pending transaction of the source's prefix (of subtask {@code onlySubtask}, or all
     * if negative) after a restore of checkpoint {@code restoredCheckpointId} (0 for a fresh start).
     *
     * @throws KafkaException the last error if the deadline passed first
     */
    static Result run(ShareSourceConfig config, LockstepShareTransactionCoordinator coordinator,
            long restoredCheckpointId, int onlySubtask) {
        long deadline = System.nanoTime() + config.recoveryTimeout.toNanos();
        Result result = new Result();
        while (true) {
            try {
                for (PendingTransaction txn : coordinator.listPendingTransactions(config.groupId)) {
                    TransactionIds.Decision d = TransactionIds.decide(config.groupId,
                            config.transactionalIdPrefix, txn.id, txn.state, restoredCheckpointId, onlySubtask);
                    if (d == TransactionIds.Decision.COMMIT) {
                        coordinator.commitTransaction(txn.id);
                        result.committed.add(txn.id);
                    } else if (d == TransactionIds.Decision.ABORT) {
                        TransactionState after = coordinator.abort(txn.id);
                        if (after == TransactionState.COMMITTED) {
                            // Only this source commits its ids, and only by the same rule: a commit
                            // of a completed checkpoint that raced with the listing.
                            result.committed.add(txn.id);
                        } else {
                            result.aborted.add(txn.id);
                        }
                    }
                }
                LOG.info("recovery of group {} prefix {} (subtask {}) from checkpoint {}: {}",
                        config.groupId, config.transactionalIdPrefix,
                        onlySubtask < 0 ? "all" : onlySubtask, restoredCheckpointId, result);
                return result;
            } catch (KafkaException e) {
                if (System.nanoTime() - deadline > 0) {
                    throw e;
                }
                LOG.warn("recovery of group {} failed, retrying: {}", config.groupId, e.toString());
                sleep(BACKOFF_MS);
            }
        }
    }

    /**
     * Sets the share group's configs the source needs: {@code share.transaction.max.pending} for
     * {@code parallelism} readers, plus the builder's group configs. Retried until the deadline.
     */
    static void configureGroup(ShareSourceConfig config, int parallelism) {
        Map<String, String> configs = new java.util.LinkedHashMap<>(config.groupConfigs);
        configs.putIfAbsent("share.transaction.max.pending", Integer.toString(config.maxPendingFor(parallelism)));
        List<AlterConfigOp> ops = new ArrayList<>();
        for (Map.Entry<String, String> e : configs.entrySet()) {
            ops.add(new AlterConfigOp(new ConfigEntry(e.getKey(), e.getValue()), AlterConfigOp.OpType.SET));
        }
        ConfigResource group = new ConfigResource(ConfigResource.Type.GROUP, config.groupId);
        long deadline = System.nanoTime() + config.recoveryTimeout.toNanos();
        try (Admin admin = Admin.create(config.adminProperties())) {
            while (true) {
                try {
                    admin.incrementalAlterConfigs(Map.of(group, ops)).all()
                            .get(Duration.ofSeconds(30).toMillis(), TimeUnit.MILLISECONDS);
                    LOG.info("share group {} configured: {}", config.groupId, configs);
                    return;
                } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
                    if (System.nanoTime() - deadline > 0) {
                        throw new KafkaException("could not configure share group " + config.groupId, e);
                    }
                    LOG.warn("configuring share group {} failed, retrying: {}", config.groupId, e.toString());
                    sleep(BACKOFF_MS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new org.apache.kafka.common.errors.InterruptException(e);
                }
            }
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new org.apache.kafka.common.errors.InterruptException(e);
        }
    }
}
