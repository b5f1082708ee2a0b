package io.lockstep.flink;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import org.apache.flink.api.common.serialization.DeserializationSchema;

/** Builds a {@link LockstepShareSource}. Required: bootstrap servers, group id, topics, value deserializer. */
public final class LockstepShareSourceBuilder<T> {
    private String bootstrapServers;
    private String groupId;
    private final List<String> topics = new ArrayList<>();
    private DeserializationSchema<T> deserializer;
    private String transactionalIdPrefix = "flink";
    private final Map<String, String> clientProperties = new LinkedHashMap<>();
    private final Map<String, String> groupConfigs = new LinkedHashMap<>();
    private int maxPendingTransactions;
    private boolean configureGroup = true;
    private Duration transactionTimeout;
    private Duration pollTimeout = Duration.ofMillis(100);
    private Duration recoveryTimeout = Duration.ofSeconds(60);

    LockstepShareSourceBuilder() {}

    /** The broker(s) to bootstrap from, {@code host:port[,host:port...]}. */
    public LockstepShareSourceBuilder<T> setBootstrapServers(String bootstrapServers) {
        this.bootstrapServers = Objects.requireNonNull(bootstrapServers);
        return this;
    }

    /** The share group the readers join (and whose transactions they use). */
    public LockstepShareSourceBuilder<T> setGroupId(String groupId) {
        this.groupId = Objects.requireNonNull(groupId);
        return this;
    }

    /** The topics to read. */
    public LockstepShareSourceBuilder<T> setTopics(String... topics) {
        this.topics.addAll(Arrays.asList(topics));
        return this;
    }

    /** Turns each record's value into an emitted element; a null value is acknowledged and skipped. */
    public LockstepShareSourceBuilder<T> setValueDeserializer(DeserializationSchema<T> deserializer) {
        this.deserializer = Objects.requireNonNull(deserializer);
        return this;
    }

    /**
     * The KIP's transactional id prefix: ids are {@code {group}-{prefix}-{subtask}-{token}-{checkpoint}}.
     * Keep it stable across runs of one job (a restored job recovers the transactions of its
     * prefix) and different between jobs sharing a group. Default {@code flink}. No '-' at the end.
     */
    public LockstepShareSourceBuilder<T> setTransactionalIdPrefix(String prefix) {
        this.transactionalIdPrefix = Objects.requireNonNull(prefix);
        return this;
    }

    /** A client setting for the share consumer and the transaction client (e.g. {@code request.timeout.ms}). */
    public LockstepShareSourceBuilder<T> setProperty(String key, String value) {
        clientProperties.put(key, value);
        return this;
    }

    /** Client settings, as {@link #setProperty}. */
    public LockstepShareSourceBuilder<T> setProperties(Properties props) {
        for (String name : props.stringPropertyNames()) {
            clientProperties.put(name, props.getProperty(name));
        }
        return this;
    }

    /**
     * A share-group config the enumerator sets when the job starts (IncrementalAlterConfigs on the
     * group), e.g. {@code share.record.lock.duration.ms}.
     */
    public LockstepShareSourceBuilder<T> setGroupConfig(String key, String value) {
        groupConfigs.put(key, value);
        return this;
    }

    /** Sets the group's {@code share.auto.offset.reset} to {@code earliest} (Kafka's default is latest). */
    public LockstepShareSourceBuilder<T> setStartingOffsetEarliest() {
        return setGroupConfig("share.auto.offset.reset", "earliest");
    }

    /**
     * The group's {@code share.transaction.max.pending} (ONGOING + PREPARE transactions of the group).
     * Default: {@code max(5, 3 * parallelism + 4)}, set when the job starts; a group shared with other
     * jobs needs the sum.
     */
    public LockstepShareSourceBuilder<T> setMaxPendingTransactions(int maxPending) {
        if (maxPending < 1 || maxPending > ShareSourceConfig.MAX_PENDING_LIMIT) {
            throw new IllegalArgumentException("max pending transactions must be 1.."
                    + ShareSourceConfig.MAX_PENDING_LIMIT + ": " + maxPending);
        }
        this.maxPendingTransactions = maxPending;
        return this;
    }

    /** Whether the job sets the group's configs when it starts (default true; false: set them yourself). */
    public LockstepShareSourceBuilder<T> setConfigureGroup(boolean configure) {
        this.configureGroup = configure;
        return this;
    }

    /** ONGOING timeout of each transaction (default: the group's {@code share.transaction.timeout.ms}). */
    public LockstepShareSourceBuilder<T> setTransactionTimeout(Duration timeout) {
        this.transactionTimeout = Objects.requireNonNull(timeout);
        return this;
    }

    /** How long one poll of a reader blocks the task thread when no record is there (default 100 ms). */
    public LockstepShareSourceBuilder<T> setPollTimeout(Duration timeout) {
        this.pollTimeout = Objects.requireNonNull(timeout);
        return this;
    }

    /** How long group set-up and recovery keep retrying before they fail the job (default 60 s). */
    public LockstepShareSourceBuilder<T> setRecoveryTimeout(Duration timeout) {
        this.recoveryTimeout = Objects.requireNonNull(timeout);
        return this;
    }

    /** The source. */
    public LockstepShareSource<T> build() {
        if (bootstrapServers == null || groupId == null || topics.isEmpty() || deserializer == null) {
            throw new IllegalStateException("bootstrap servers, group id, topics and a value deserializer are required");
        }
        if (transactionalIdPrefix.isEmpty() || transactionalIdPrefix.endsWith("-")) {
            throw new IllegalArgumentException("bad transactional id prefix: '" + transactionalIdPrefix + "'");
        }
        return new LockstepShareSource<>(new ShareSourceConfig(bootstrapServers, groupId, topics,
                transactionalIdPrefix, clientProperties, groupConfigs, maxPendingTransactions, configureGroup,
                transactionTimeout, pollTimeout, recoveryTimeout), deserializer);
    }
}
