package io.lockstep.clients;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import org.apache.kafka.common.TopicIdPartition;

/**
 * A transaction as ShareListTransactions describes it (the KIP's {@code PendingTransaction}). The
 * KIP's recovery routine reads {@code txn.id} and {@code txn.state}; both are public final fields
 * and accessors.
 */
public final class PendingTransaction {
    /** The transaction id. */
    public final String id;
    /** Its state (ONGOING or PREPARE for a pending one). */
    public final TransactionState state;

    private final String groupId;
    private final long timeoutMs;
    private final long createTimeMs;
    private final long prepareTimeMs;
    private final Map<TopicIdPartition, Long> lockedRecords;

    public PendingTransaction(String groupId, String id, TransactionState state, long timeoutMs,
            long createTimeMs, long prepareTimeMs, Map<TopicIdPartition, Long> lockedRecords) {
        this.groupId = Objects.requireNonNull(groupId);
        this.id = Objects.requireNonNull(id);
        this.state = Objects.requireNonNull(state);
        this.timeoutMs = timeoutMs;
        this.createTimeMs = createTimeMs;
        this.prepareTimeMs = prepareTimeMs;
        this.lockedRecords = Collections.unmodifiableMap(new LinkedHashMap<>(lockedRecords));
    }

    public String id() {
        return id;
    }

    public String groupId() {
        return groupId;
    }

    public TransactionState state() {
        return state;
    }

    /** The ONGOING timeout in force, in milliseconds. */
    public long timeoutMs() {
        return timeoutMs;
    }

    /** When the transaction began, in milliseconds since the epoch. */
    public long createTimeMs() {
        return createTimeMs;
    }

    /** When it was prepared, in milliseconds since the epoch; empty if not prepared. */
    public Optional<Long> prepareTimeMs() {
        return prepareTimeMs < 0 ? Optional.empty() : Optional.of(prepareTimeMs);
    }

    /**
     * The records it has locked, per partition. The broker names partitions by topic id only, so
     * the keys' topic names are null.
     */
    public Map<TopicIdPartition, Long> lockedRecords() {
        return lockedRecords;
    }

    /** Locked records over all partitions. */
    public long lockedRecordCount() {
        return lockedRecords.values().stream().mapToLong(Long::longValue).sum();
    }

    @Override
    public String toString() {
        return "PendingTransaction(" + id + ", " + state + ", timeoutMs=" + timeoutMs
                + ", locked=" + lockedRecordCount() + ")";
    }
}
