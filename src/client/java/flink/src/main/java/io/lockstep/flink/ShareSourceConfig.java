package io.lockstep.flink;

import java.io.Serializable;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;

/** The source's settings (serializable: shipped with the job graph). Built by {@link LockstepShareSourceBuilder}. */
final class ShareSourceConfig implements Serializable {
    private static final long serialVersionUID = 1L;

    /** Largest {@code share.transaction.max.pending} the broker accepts. */
    static final int MAX_PENDING_LIMIT = 1_000;
    /** Pending transactions a reader can hold at once: one ONGOING, one PREPARE waiting for its
     *  checkpoint's notification, one more whose checkpoint was aborted or whose notification is late. */
    static final int PENDING_PER_READER = 3;
    /** Headroom for transactions of failed reader instances that a recovery has not ended yet. */
    static final int PENDING_HEADROOM = 4;

    final String bootstrapServers;
    final String groupId;
    final List<String> topics;
    final String transactionalIdPrefix;
    /** Passed to the consumer and the transaction coordinator (client settings: timeouts, client.id...). */
    final Map<String, String> clientProperties;
    /** Share-group configs set before the job starts (IncrementalAlterConfigs on the GROUP resource). */
    final Map<String, String> groupConfigs;
    /** {@code share.transaction.max.pending} to set; 0: derived from the parallelism. */
    final int maxPendingTransactions;
    /** Whether to set group configs at all (false: the operator manages them). */
    final boolean configureGroup;
    /** ONGOING timeout of each transaction; null: the group's {@code share.transaction.timeout.ms}. */
    final Duration transactionTimeout;
    final Duration pollTimeout;
    /** How long a recovery (or the group set-up) keeps retrying before it fails the job. */
    final Duration recoveryTimeout;

    ShareSourceConfig(String bootstrapServers, String groupId, List<String> topics,
            String transactionalIdPrefix, Map<String, String> clientProperties,
            Map<String, String> groupConfigs, int maxPendingTransactions, boolean configureGroup,
            Duration transactionTimeout, Duration pollTimeout, Duration recoveryTimeout) {
        this.bootstrapServers = Objects.requireNonNull(bootstrapServers, "bootstrap servers");
        this.groupId = Objects.requireNonNull(groupId, "group id");
        this.topics = Collections.unmodifiableList(new ArrayList<>(topics));
        this.transactionalIdPrefix = Objects.requireNonNull(transactionalIdPrefix, "transactional id prefix");
        this.clientProperties = Collections.unmodifiableMap(new LinkedHashMap<>(clientProperties));
        this.groupConfigs = Collections.unmodifiableMap(new LinkedHashMap<>(groupConfigs));
        this.maxPendingTransactions = maxPendingTransactions;
        this.configureGroup = configureGroup;
        this.transactionTimeout = transactionTimeout;
        this.pollTimeout = Objects.requireNonNull(pollTimeout);
        this.recoveryTimeout = Objects.requireNonNull(recoveryTimeout);
    }

    /** {@code share.transaction.max.pending} for {@code parallelism} readers. */
    int maxPendingFor(int parallelism) {
        if (maxPendingTransactions > 0) {
            return maxPendingTransactions;
        }
        return Math.min(MAX_PENDING_LIMIT, Math.max(5, PENDING_PER_READER * parallelism + PENDING_HEADROOM));
    }

    private Properties base(String clientId) {
        Properties p = new Properties();
        p.putAll(clientProperties);
        p.setProperty("bootstrap.servers", bootstrapServers);
        p.setProperty("group.id", groupId);
        p.putIfAbsent("client.id", clientId);
        return p;
    }

    /** The share consumer's properties: explicit acknowledgement (every record is acknowledged into a transaction). */
    Properties consumerProperties(int subtask) {
        Properties p = base("lockstep-flink-" + transactionalIdPrefix + "-" + subtask);
        p.setProperty("share.acknowledgement.mode", "explicit");
        return p;
    }

    /** The transaction coordinator client's properties. */
    Properties coordinatorProperties(String who) {
        return base("lockstep-flink-" + transactionalIdPrefix + "-" + who + "-txn");
    }

    /** The admin client's properties (group configs). */
    Properties adminProperties() {
        Properties p = new Properties();
        for (Map.Entry<String, String> e : clientProperties.entrySet()) {
            // Only settings an admin client knows; the consumer's own would be logged as unknown.
            if (e.getKey().startsWith("security.") || e.getKey().startsWith("ssl.")
                    || e.getKey().startsWith("sasl.") || e.getKey().equals("request.timeout.ms")) {
                p.setProperty(e.getKey(), e.getValue());
            }
        }
        p.setProperty("bootstrap.servers", bootstrapServers);
        p.setProperty("client.id", "lockstep-flink-" + transactionalIdPrefix + "-admin");
        return p;
    }
}
