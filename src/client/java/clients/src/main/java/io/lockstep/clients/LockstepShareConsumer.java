package io.lockstep.clients;

import io.lockstep.clients.internals.BrokerConnection;
import io.lockstep.clients.internals.ConnectionSecurity;
import io.lockstep.clients.internals.NodePool;
import io.lockstep.clients.internals.PendingAcks;
import io.lockstep.clients.internals.PendingAcks.Batch;
import io.lockstep.clients.internals.PendingAcks.TopicIdPart;
import io.lockstep.clients.internals.ShareTxnMessages;
import io.lockstep.clients.internals.Wire;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.ConcurrentModificationException;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.AcknowledgementCommitCallback;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.NetworkException;
import org.apache.kafka.common.errors.RecordDeserializationException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.errors.ShareSessionNotFoundException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.message.MetadataRequestData;
import org.apache.kafka.common.message.MetadataResponseData;
import org.apache.kafka.common.message.ShareAcknowledgeRequestData;
import org.apache.kafka.common.message.ShareAcknowledgeResponseData;
import org.apache.kafka.common.message.ShareFetchRequestData;
import org.apache.kafka.common.message.ShareFetchResponseData;
import org.apache.kafka.common.message.ShareGroupHeartbeatRequestData;
import org.apache.kafka.common.message.ShareGroupHeartbeatResponseData;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.record.internal.BaseRecords;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.utils.Utils;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Lockstep's share consumer: a {@link TransactionalShareConsumer} that speaks the Kafka wire
 * protocol itself (KIP-932: ShareGroupHeartbeat v1 to the group coordinator, ShareFetch and
 * ShareAcknowledge v1-v2 to the partition leaders, Metadata and FindCoordinator), plus the KIP's
 * transactional acknowledgement (ShareAcknowledgeTransactional, API key 1001). It works against
 * Kafka 4.4 brokers too, except for the transactional acknowledgement.
 *
 * <p><b>Configuration</b> ({@link Properties}, Kafka's names): {@code bootstrap.servers} and {@code
 * group.id} (required), {@code client.id}, {@code share.acknowledgement.mode} ({@code implicit}
 * (Kafka's default), {@code explicit}, or {@code transactional}, which behaves as {@code explicit}:
 * the KIP's name for a consumer whose acknowledgements go into transactions), {@code
 * max.poll.records} (500), {@code fetch.max.wait.ms} (500), {@code fetch.min.bytes} (1), {@code
 * fetch.max.bytes} (52428800), {@code max.partition.fetch.bytes} (1048576), {@code
 * request.timeout.ms} (30000), {@code default.api.timeout.ms} (60000), {@code max.poll.interval.ms}
 * (300000), and {@code key.deserializer}
 * / {@code value.deserializer} when the constructor is given none, and kafka-clients' security
 * settings ({@code security.protocol}, {@code ssl.*}, {@code sasl.mechanism} PLAIN / SCRAM-SHA-256 /
 * SCRAM-SHA-512, {@code sasl.jaas.config}; a refused login makes {@code poll} throw {@code
 * SaslAuthenticationException}). Other keys are ignored.
 *
 * <p><b>Semantics</b>, as Kafka's {@code KafkaShareConsumer}:
 * <ul>
 *   <li>Implicit mode: the records of a poll are accepted by the next {@code poll}, {@code
 *       commitSync}, {@code commitAsync} or {@code close}; {@code acknowledge} throws {@link
 *       IllegalStateException}.
 *   <li>Explicit (and transactional) mode: each record of a poll must be acknowledged (or
 *       acknowledged into a transaction) before the next poll, which otherwise throws {@link
 *       IllegalStateException}. Acknowledgements ride on the next ShareFetch to the partition's
 *       leader, or are sent as ShareAcknowledge by {@code commitSync} / {@code commitAsync} / {@code
 *       close}. A type given again for the same record before it is sent replaces the earlier one.
 *   <li>Transactional acknowledgements ({@link #acknowledge(ConsumerRecord, AcknowledgeType,
 *       String)}) are sent as ShareAcknowledgeTransactional, one request per transaction and
 *       leader, at the next {@code poll}, {@code commitSync}, {@code commitAsync} or {@code close}.
 *       A record acknowledged into a transaction cannot be acknowledged again: the transaction
 *       decides (commit: gone for good; abort: redelivered with the delivery count it had).
 *   <li>{@link AcknowledgeType#RENEW} (explicit mode, KIP-1222) extends the acquisition lock of a
 *       record still being processed: it is sent as ShareAcknowledge v2 with {@code IsRenewAck}
 *       (with the other pending acknowledgements) by the next {@code poll}, which then fetches
 *       nothing and returns the renewed records again (same delivery count), or by {@code
 *       commitSync} / {@code commitAsync}, after which the next poll returns them. A renewal that
 *       fails (e.g. the group's {@code share.renew.acknowledge.enable} is false: {@code
 *       InvalidRecordStateException} to the callback) ends that delivery attempt: the record is not
 *       returned again by this consumer until the broker redelivers it. RENEW cannot be part of a
 *       transaction ({@link IllegalArgumentException}).
 *   <li>Heartbeats: a daemon thread heartbeats while the application processes between polls, so
 *       a member keeps its membership and acquired records for as long as it polls at least every
 *       {@code max.poll.interval.ms}; past it, the consumer leaves the group and the next poll
 *       joins again.
 *   <li>Outcomes of every acknowledgement go to the {@link AcknowledgementCommitCallback} (one call
 *       per partition and request), invoked on the caller's thread during {@code poll}, {@code
 *       commitSync} and {@code close}; {@code commitSync} also returns them. As in Kafka, a
 *       ShareAcknowledge (commitSync, commitAsync) is retried for a partition that answers a
 *       retriable error (but not NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH / an unknown topic)
 *       until the call's timeout; a lost connection, a session-level error, acknowledgements
 *       carried by a ShareFetch and the closing request are not retried (the records stay
 *       acquired until their lock times out, then are redelivered).
 *   <li>{@code wakeup} makes the current or next {@code poll} / {@code commitSync} throw {@link
 *       WakeupException}; a poll blocked in a ShareFetch notices it when that request returns (at
 *       most {@code fetch.max.wait.ms}).
 *   <li>A record whose key or value cannot be deserialized makes {@code poll} throw {@link
 *       RecordDeserializationException}; the record stays delivered (acknowledge it with {@link
 *       #acknowledge(String, int, long, AcknowledgeType)}, typically REJECT; in implicit mode it is
 *       released) and the other records of that poll are returned by the next one.
 * </ul>
 *
 * <p><b>Differences</b>: the only background work is the heartbeat (fetches and acknowledgements
 * happen on the caller's thread, in its calls; no prefetching). {@code commitAsync}
 * sends at once and waits for the answer (only the callback is deferred). Client telemetry
 * (KIP-714) is not implemented: {@link #clientInstanceId} throws {@link IllegalStateException} as
 * Kafka's does with {@code enable.metrics.push=false}, and {@link #metrics} is empty.
 *
 * <p>Not thread-safe, as Kafka's: only {@link #wakeup} may be called from another thread.
 */
public class LockstepShareConsumer<K, V> implements TransactionalShareConsumer<K, V> {
    private static final Logger log = LoggerFactory.getLogger(LockstepShareConsumer.class);

    /** The acknowledgement modes of {@code share.acknowledgement.mode}. */
    enum Mode {
        IMPLICIT,
        EXPLICIT,
        TRANSACTIONAL
    }

    /** Idle wait of a poll with nothing assigned yet, in milliseconds. */
    private static final long IDLE_SLEEP_MS = 100;
    /** Wait after a failed heartbeat or fetch before the next try, in milliseconds. */
    private static final long RETRY_BACKOFF_MS = 200;
    /** Heartbeat interval until the coordinator says otherwise, in milliseconds. */
    private static final long HEARTBEAT_INTERVAL_DEFAULT_MS = 5_000;
    /** How often the background heartbeat thread looks whether a heartbeat is due, in milliseconds. */
    private static final long HEARTBEAT_THREAD_TICK_MS = 100;
    /** Kafka's default {@code max.poll.interval.ms}. */
    private static final long MAX_POLL_INTERVAL_DEFAULT_MS = 300_000;
    /** Most transactions with acknowledgements waiting to be sent. */
    private static final int PENDING_TRANSACTIONS_MAX = 64;

    private static final byte GAP = 0;

    private final String groupId;
    private final Mode mode;
    private final Deserializer<K> keyDeserializer;
    private final Deserializer<V> valueDeserializer;
    private final Duration requestTimeout;
    private final Duration defaultApiTimeout;
    private final int maxPollRecords;
    private final int fetchMaxWaitMs;
    private final int fetchMinBytes;
    private final int fetchMaxBytes;
    private final NodePool nodes;
    private final long maxPollIntervalMs;

    /**
     * Held by the application thread for the whole of every consumer call, and by the background
     * heartbeat thread while it heartbeats: every field below is only touched under it.
     */
    private final ReentrantLock lock = new ReentrantLock();
    private final Thread heartbeatThread;
    /** A non-retriable heartbeat error met by the background thread, thrown by the next poll. */
    private KafkaException backgroundError;
    /** When the application last called poll (ms), 0 before the first. */
    private long lastPollMs;
    /** The background thread left the group because poll was not called for max.poll.interval.ms. */
    private boolean leftForPollInterval;

    private final AtomicBoolean wakeupRequested = new AtomicBoolean();
    private final AtomicLong owner = new AtomicLong(-1);
    private int ownerDepth;
    private boolean closed;
    private boolean inCallback;

    // Membership.
    private String memberId = Uuid.randomUuid().toString();
    private int memberEpoch;
    private Integer coordinator;
    private long nextHeartbeatMs;
    private long heartbeatIntervalMs = HEARTBEAT_INTERVAL_DEFAULT_MS;
    private boolean subscriptionSent;
    private final TreeSet<String> subscription = new TreeSet<>();
    private Set<TopicIdPart> assignment = new LinkedHashSet<>();
    private final Map<Uuid, String> topicNames = new HashMap<>();
    private final Map<String, Uuid> topicIds = new HashMap<>();
    private final Map<TopicIdPart, Integer> leaders = new HashMap<>();
    private boolean metadataStale;

    /** Share sessions by leader node: epoch 0 = none open. */
    private final Map<Integer, Session> sessions = new HashMap<>();

    // Records and acknowledgements.
    /** Records delivered by the last poll and not acknowledged yet. */
    private final Map<TopicIdPart, TreeMap<Long, ConsumerRecord<K, V>>> inFlight = new LinkedHashMap<>();
    /** Delivered records whose deserialization failed (acknowledge by topic/partition/offset). */
    private final Map<TopicIdPart, TreeSet<Long>> undeserializable = new LinkedHashMap<>();
    /** Records acknowledged with RENEW whose renewal is not answered yet. */
    private final Map<TopicIdPart, TreeMap<Long, ConsumerRecord<K, V>>> renewing = new LinkedHashMap<>();
    /** Records renewed successfully, returned again by the next poll (as Kafka's consumer does). */
    private final List<ConsumerRecord<K, V>> renewed = new ArrayList<>();
    /** Records decoded but not yet returned (a poll threw RecordDeserializationException). */
    private final List<ConsumerRecord<K, V>> buffered = new ArrayList<>();
    /** Plain acknowledgements not yet sent. */
    private final PendingAcks acks = new PendingAcks();
    /** Transactional acknowledgements not yet sent, by transaction id. */
    private final Map<String, PendingAcks> transactionalAcks = new LinkedHashMap<>();
    /** Outcomes not yet given to the callback. */
    private final List<AckResult> completed = new ArrayList<>();
    private AcknowledgementCommitCallback callback;
    private Integer acquisitionLockTimeoutMs;

    private static final class Session {
        int epoch;
        Set<TopicIdPart> partitions = new HashSet<>();
    }

    /** The outcome of the acknowledgements of one partition in one request. */
    private record AckResult(TopicIdPartition partition, Set<Long> offsets, KafkaException error) {}

    /**
     * A consumer configured by {@code props} (see the class docs); no network traffic until the
     * first poll. {@code null} deserializers are created from {@code key.deserializer} / {@code
     * value.deserializer} and configured with {@code props}.
     */
    public LockstepShareConsumer(Properties props, Deserializer<K> keyDeserializer,
            Deserializer<V> valueDeserializer) {
        this.groupId = props.getProperty("group.id");
        if (groupId == null || groupId.isEmpty()) {
            throw new ConfigException("group.id must be set for a share consumer");
        }
        String m = props.getProperty("share.acknowledgement.mode", "implicit").trim().toLowerCase(Locale.ROOT);
        switch (m) {
            case "implicit":
                this.mode = Mode.IMPLICIT;
                break;
            case "explicit":
                this.mode = Mode.EXPLICIT;
                break;
            case "transactional":
                this.mode = Mode.TRANSACTIONAL;
                break;
            default:
                throw new ConfigException("share.acknowledgement.mode", m,
                        "must be implicit, explicit or transactional");
        }
        this.keyDeserializer = keyDeserializer != null ? keyDeserializer : newDeserializer(props, true);
        this.valueDeserializer = valueDeserializer != null ? valueDeserializer : newDeserializer(props, false);
        this.requestTimeout = Duration.ofMillis(LockstepShareTransactionCoordinator.longProp(props,
                "request.timeout.ms", 30_000));
        this.defaultApiTimeout = Duration.ofMillis(LockstepShareTransactionCoordinator.longProp(props,
                "default.api.timeout.ms", 60_000));
        this.maxPollRecords = intProp(props, "max.poll.records", 500);
        this.fetchMaxWaitMs = intProp(props, "fetch.max.wait.ms", 500);
        this.fetchMinBytes = intProp(props, "fetch.min.bytes", 1);
        this.fetchMaxBytes = intProp(props, "fetch.max.bytes", 50 * 1024 * 1024);
        if (maxPollRecords < 1) {
            throw new ConfigException("max.poll.records", maxPollRecords, "must be at least 1");
        }
        this.maxPollIntervalMs = LockstepShareTransactionCoordinator.longProp(props, "max.poll.interval.ms",
                MAX_POLL_INTERVAL_DEFAULT_MS);
        if (maxPollIntervalMs < 1) {
            throw new ConfigException("max.poll.interval.ms", maxPollIntervalMs, "must be at least 1");
        }
        this.nodes = new NodePool(props.getProperty("bootstrap.servers"),
                props.getProperty("client.id", "lockstep-share-consumer-" + groupId), requestTimeout,
                ConnectionSecurity.fromProperties(props));
        this.heartbeatThread = new Thread(this::heartbeatLoop, "lockstep-share-heartbeat-" + groupId);
        heartbeatThread.setDaemon(true);
        heartbeatThread.start();
    }

    private static int intProp(Properties props, String name, int fallback) {
        long v = LockstepShareTransactionCoordinator.longProp(props, name, fallback);
        if (v > Integer.MAX_VALUE) {
            throw new ConfigException(name, v, "too large");
        }
        return (int) v;
    }

    @SuppressWarnings("unchecked")
    private static <T> Deserializer<T> newDeserializer(Properties props, boolean isKey) {
        String name = isKey ? "key.deserializer" : "value.deserializer";
        Object v = props.get(name);
        if (v == null) {
            throw new ConfigException(name + " must be set when no deserializer is given");
        }
        try {
            Class<?> c = v instanceof Class ? (Class<?>) v : Class.forName(v.toString().trim());
            Deserializer<T> d = (Deserializer<T>) c.getDeclaredConstructor().newInstance();
            Map<String, Object> configs = new HashMap<>();
            for (String k : props.stringPropertyNames()) {
                configs.put(k, props.getProperty(k));
            }
            d.configure(configs, isKey);
            return d;
        } catch (ReflectiveOperationException | ClassCastException e) {
            throw new ConfigException(name, v, "cannot instantiate: " + e);
        }
    }

    /** The member id (generated by this consumer in Kafka's 22-character form; the coordinator's if it assigned another). */
    public String memberId() {
        return memberId;
    }

    // ---- subscription ----

    @Override
    public Set<String> subscription() {
        acquireAndEnsureOpen();
        try {
            return Collections.unmodifiableSet(new TreeSet<>(subscription));
        } finally {
            release();
        }
    }

    @Override
    public void subscribe(Collection<String> topics) {
        acquireAndEnsureOpen();
        try {
            if (topics == null) {
                throw new IllegalArgumentException("Topic collection to subscribe to cannot be null");
            }
            if (topics.isEmpty()) {
                unsubscribeInternal();
                return;
            }
            TreeSet<String> wanted = new TreeSet<>();
            for (String t : topics) {
                if (t == null || t.isBlank()) {
                    throw new IllegalArgumentException("Topic collection to subscribe to cannot contain null or empty topic");
                }
                wanted.add(t.trim());
            }
            if (!wanted.equals(subscription)) {
                subscription.clear();
                subscription.addAll(wanted);
                subscriptionSent = false;
                metadataStale = true;
                nextHeartbeatMs = 0;
            }
        } finally {
            release();
        }
    }

    @Override
    public void unsubscribe() {
        acquireAndEnsureOpen();
        try {
            unsubscribeInternal();
        } finally {
            release();
        }
    }

    private void unsubscribeInternal() {
        if (subscription.isEmpty() && memberEpoch == 0) {
            return;
        }
        long deadline = deadlineAfter(defaultApiTimeout);
        settleDelivered();
        sendAll(deadline, true);
        leaveGroup(deadline);
        subscription.clear();
        assignment = new LinkedHashSet<>();
        memberEpoch = 0;
        subscriptionSent = false;
        renewing.clear();
        renewed.clear();
        invokeCallbacks();
    }

    // ---- poll ----

    @Override
    public ConsumerRecords<K, V> poll(Duration timeout) {
        acquireAndEnsureOpen();
        try {
            if (timeout == null || timeout.isNegative()) {
                throw new IllegalArgumentException("Timeout must not be negative");
            }
            if (subscription.isEmpty()) {
                throw new IllegalStateException("Consumer is not subscribed to any topics.");
            }
            checkWakeup();
            if (mode != Mode.IMPLICIT && hasUnacknowledged()) {
                throw new IllegalStateException("All records must be acknowledged in explicit acknowledgement mode.");
            }
            lastPollMs = System.currentTimeMillis();
            leftForPollInterval = false;
            if (backgroundError != null) {
                KafkaException e = backgroundError;
                backgroundError = null;
                throw e;
            }
            settleDelivered();
            long deadline = deadlineAfter(timeout);
            flushTransactional(deadlineAfter(requestTimeout));
            if (!renewing.isEmpty()) {
                // RENEW acknowledgements go alone (with the other pending ones) in ShareAcknowledge
                // v2 with IsRenewAck; the renewed records are this poll's result, nothing is fetched.
                int from = completed.size();
                sendPlainAcks(deadlineAfter(requestTimeout), false);
                collectRenewals(from);
            }
            List<ConsumerRecord<K, V>> records = new ArrayList<>(buffered);
            buffered.clear();
            records.addAll(renewed);
            renewed.clear();
            RecordDeserializationException failure = null;
            while (records.isEmpty()) {
                checkWakeup();
                long now = System.currentTimeMillis();
                if (now >= nextHeartbeatMs) {
                    heartbeat();
                }
                if (metadataStale) {
                    refreshMetadataQuietly();
                }
                Map<Integer, Set<TopicIdPart>> byLeader = new TreeMap<>();
                boolean leaderMissing = false;
                for (TopicIdPart tp : assignment) {
                    Integer leader = leaders.get(tp);
                    if (leader == null) {
                        leaderMissing = true;
                    } else {
                        byLeader.computeIfAbsent(leader, k -> new LinkedHashSet<>()).add(tp);
                    }
                }
                metadataStale |= leaderMissing;
                // Sessions with leaders that no longer lead anything assigned: close them (with
                // the acknowledgements of their partitions).
                for (Integer node : new ArrayList<>(sessions.keySet())) {
                    if (!byLeader.containsKey(node)) {
                        closeSession(node, deadlineAfter(requestTimeout));
                    }
                }
                if (byLeader.isEmpty()) {
                    sendPlainAcks(deadlineAfter(requestTimeout), false);
                    sleepUntil(Math.min(deadline, Math.min(nextHeartbeatMs, now + IDLE_SLEEP_MS)));
                    if (System.currentTimeMillis() >= deadline) {
                        break;
                    }
                    continue; // a wakeup during the sleep throws at the top of the loop
                }
                long waitMs = Math.max(0, Math.min(Math.min(deadline, nextHeartbeatMs) - now, fetchMaxWaitMs));
                boolean failed = false;
                for (Map.Entry<Integer, Set<TopicIdPart>> e : byLeader.entrySet()) {
                    try {
                        fetchFrom(e.getKey(), e.getValue(), (int) waitMs, records);
                    } catch (RecordDeserializationException ex) {
                        if (failure == null) {
                            failure = ex;
                        }
                    } catch (RetriableException | Wire.MalformedException ex) {
                        log.debug("ShareFetch to node {} failed: {}", e.getKey(), ex.toString());
                        failed = true;
                    }
                }
                sendPlainAcks(deadlineAfter(requestTimeout), false);
                if (failure != null) {
                    break;
                }
                if (System.currentTimeMillis() >= deadline) {
                    break;
                }
                if (failed && records.isEmpty()) {
                    sleepUntil(Math.min(deadline, System.currentTimeMillis() + RETRY_BACKOFF_MS));
                }
            }
            invokeCallbacks();
            if (failure != null) {
                buffered.addAll(records);
                throw failure;
            }
            return toConsumerRecords(records);
        } finally {
            release();
        }
    }

    private ConsumerRecords<K, V> toConsumerRecords(List<ConsumerRecord<K, V>> records) {
        Map<TopicPartition, List<ConsumerRecord<K, V>>> byPartition = new LinkedHashMap<>();
        for (ConsumerRecord<K, V> r : records) {
            byPartition.computeIfAbsent(new TopicPartition(r.topic(), r.partition()), k -> new ArrayList<>()).add(r);
            TopicIdPart tp = new TopicIdPart(topicIds.get(r.topic()), r.partition());
            inFlight.computeIfAbsent(tp, k -> new TreeMap<>()).put(r.offset(), r);
        }
        return new ConsumerRecords<>(byPartition, Map.of());
    }

    private boolean hasUnacknowledged() {
        return !inFlight.isEmpty() || !undeserializable.isEmpty();
    }

    /**
     * Implicit mode: every delivered record not yet acknowledged is accepted (a record that could
     * not be deserialized is released). Explicit mode: nothing to do.
     */
    private void settleDelivered() {
        if (mode != Mode.IMPLICIT) {
            return;
        }
        for (Map.Entry<TopicIdPart, TreeMap<Long, ConsumerRecord<K, V>>> e : inFlight.entrySet()) {
            for (long offset : e.getValue().keySet()) {
                acks.add(e.getKey(), offset, AcknowledgeType.ACCEPT.id);
            }
        }
        for (Map.Entry<TopicIdPart, TreeSet<Long>> e : undeserializable.entrySet()) {
            for (long offset : e.getValue()) {
                acks.add(e.getKey(), offset, AcknowledgeType.RELEASE.id);
            }
        }
        inFlight.clear();
        undeserializable.clear();
    }

    // ---- acknowledge ----

    @Override
    public void acknowledge(ConsumerRecord<K, V> record) {
        acknowledge(record, AcknowledgeType.ACCEPT);
    }

    @Override
    public void acknowledge(ConsumerRecord<K, V> record, AcknowledgeType type) {
        acquireAndEnsureOpen();
        try {
            ensureExplicit();
            checkType(type);
            acknowledgePlain(record.topic(), record.partition(), record.offset(), type);
        } finally {
            release();
        }
    }

    @Override
    public void acknowledge(String topic, int partition, long offset, AcknowledgeType type) {
        acquireAndEnsureOpen();
        try {
            ensureExplicit();
            checkType(type);
            acknowledgePlain(topic, partition, offset, type);
        } finally {
            release();
        }
    }

    private void acknowledgePlain(String topic, int partition, long offset, AcknowledgeType type) {
        TopicIdPart tp = delivered(topic, partition, offset);
        if (tp == null) {
            // Acknowledged already in this poll and not yet sent: the new type replaces the old.
            Uuid id = topicIds.get(topic);
            tp = id == null ? null : new TopicIdPart(id, partition);
            if (tp == null || !acks.contains(tp, offset)) {
                throw new IllegalStateException("The record cannot be acknowledged.");
            }
            TreeMap<Long, ConsumerRecord<K, V>> r = renewing.get(tp);
            boolean wasRenew = r != null && r.containsKey(offset);
            if (type == AcknowledgeType.RENEW && !wasRenew) {
                throw new IllegalStateException(
                        "The record was acknowledged with another type in this poll and cannot be renewed.");
            }
            if (type != AcknowledgeType.RENEW && wasRenew) {
                r.remove(offset);
                if (r.isEmpty()) {
                    renewing.remove(tp);
                }
            }
        } else {
            if (type == AcknowledgeType.RENEW) {
                TreeMap<Long, ConsumerRecord<K, V>> m = inFlight.get(tp);
                ConsumerRecord<K, V> record = m == null ? null : m.get(offset);
                if (record == null) {
                    throw new IllegalStateException("A record that could not be deserialized cannot be renewed.");
                }
                renewing.computeIfAbsent(tp, k -> new TreeMap<>()).put(offset, record);
            }
            removeDelivered(tp, offset);
        }
        acks.add(tp, offset, type.id);
    }

    /**
     * Moves the records whose RENEW was answered in {@code completed[from..]}: renewed ones are
     * returned by the next poll; a failed renewal ends the delivery attempt (the record is not
     * returned again here; the broker redelivers it when its lock ends). Anything still renewing
     * afterwards was not sent (no open session), which also ends its delivery attempt.
     */
    private void collectRenewals(int from) {
        for (AckResult r : completed.subList(from, completed.size())) {
            TopicIdPart tp = new TopicIdPart(r.partition().topicId(), r.partition().partition());
            TreeMap<Long, ConsumerRecord<K, V>> m = renewing.get(tp);
            if (m == null) {
                continue;
            }
            for (long offset : r.offsets()) {
                ConsumerRecord<K, V> record = m.remove(offset);
                if (record != null && r.error() == null) {
                    renewed.add(record);
                }
            }
            if (m.isEmpty()) {
                renewing.remove(tp);
            }
        }
        if (!acks.isEmpty()) {
            return; // not all sent yet (cannot happen after sendPlainAcks): keep the rest
        }
        renewing.clear();
    }

    @Override
    public void acknowledge(ConsumerRecord<K, V> record, AcknowledgeType type, String transactionId) {
        acquireAndEnsureOpen();
        try {
            ensureExplicit();
            checkType(type);
            if (type == AcknowledgeType.RENEW) {
                throw new IllegalArgumentException("AcknowledgeType RENEW cannot be part of a transaction");
            }
            if (transactionId == null || transactionId.isEmpty()) {
                throw new IllegalArgumentException("transactionId must not be empty");
            }
            if (!transactionalAcks.containsKey(transactionId)
                    && transactionalAcks.size() >= PENDING_TRANSACTIONS_MAX) {
                throw new IllegalStateException("more than " + PENDING_TRANSACTIONS_MAX
                        + " transactions with acknowledgements not yet sent; call commitSync");
            }
            TopicIdPart tp = delivered(record.topic(), record.partition(), record.offset());
            if (tp == null) {
                throw new IllegalStateException("The record cannot be acknowledged.");
            }
            removeDelivered(tp, record.offset());
            transactionalAcks.computeIfAbsent(transactionId, k -> new PendingAcks()).add(tp, record.offset(), type.id);
        } finally {
            release();
        }
    }

    private void ensureExplicit() {
        if (mode == Mode.IMPLICIT) {
            throw new IllegalStateException("Implicit acknowledgement of delivery is being used.");
        }
    }

    private static void checkType(AcknowledgeType type) {
        if (type == null) {
            throw new IllegalArgumentException("AcknowledgeType must not be null");
        }
    }

    /** The partition of a record the last poll delivered and nobody acknowledged, or null. */
    private TopicIdPart delivered(String topic, int partition, long offset) {
        Uuid id = topicIds.get(topic);
        if (id == null) {
            return null;
        }
        TopicIdPart tp = new TopicIdPart(id, partition);
        TreeMap<Long, ConsumerRecord<K, V>> m = inFlight.get(tp);
        if (m != null && m.containsKey(offset)) {
            return tp;
        }
        TreeSet<Long> bad = undeserializable.get(tp);
        if (bad != null && bad.contains(offset)) {
            return tp;
        }
        return null;
    }

    private void removeDelivered(TopicIdPart tp, long offset) {
        TreeMap<Long, ConsumerRecord<K, V>> m = inFlight.get(tp);
        if (m != null && m.remove(offset) != null && m.isEmpty()) {
            inFlight.remove(tp);
        }
        TreeSet<Long> bad = undeserializable.get(tp);
        if (bad != null && bad.remove(offset) && bad.isEmpty()) {
            undeserializable.remove(tp);
        }
    }

    // ---- commit ----

    @Override
    public Map<TopicIdPartition, Optional<KafkaException>> commitSync() {
        return commitSync(defaultApiTimeout);
    }

    @Override
    public Map<TopicIdPartition, Optional<KafkaException>> commitSync(Duration timeout) {
        acquireAndEnsureOpen();
        try {
            checkWakeup();
            settleDelivered();
            int from = completed.size();
            sendAll(deadlineAfter(timeout), false);
            collectRenewals(from);
            Map<TopicIdPartition, Optional<KafkaException>> out = new LinkedHashMap<>();
            for (AckResult r : completed.subList(from, completed.size())) {
                Optional<KafkaException> prior = out.get(r.partition());
                if (prior == null || prior.isEmpty()) {
                    out.put(r.partition(), Optional.ofNullable(r.error()));
                }
            }
            invokeCallbacks();
            return out;
        } finally {
            release();
        }
    }

    /**
     * Sends the pending acknowledgements now (transactional ones as ShareAcknowledgeTransactional,
     * the others as ShareAcknowledge) and waits for the answers; unlike Kafka's, only the callback
     * is deferred (to the next poll, commitSync or close).
     */
    @Override
    public void commitAsync() {
        acquireAndEnsureOpen();
        try {
            settleDelivered();
            int from = completed.size();
            sendAll(deadlineAfter(defaultApiTimeout), false);
            collectRenewals(from);
        } finally {
            release();
        }
    }

    @Override
    public void setAcknowledgementCommitCallback(AcknowledgementCommitCallback callback) {
        acquireAndEnsureOpen();
        try {
            this.callback = callback;
        } finally {
            release();
        }
    }

    /** Transactional, then plain acknowledgements; {@code closing} closes every share session. */
    private void sendAll(long deadline, boolean closing) {
        flushTransactional(deadline);
        sendPlainAcks(deadline, closing);
    }

    // ---- other ShareConsumer methods ----

    /**
     * Client telemetry (KIP-714) is not implemented; throws {@link IllegalStateException} as Kafka's
     * consumer does when {@code enable.metrics.push} is false.
     */
    @Override
    public Uuid clientInstanceId(Duration timeout) {
        acquireAndEnsureOpen();
        try {
            throw new IllegalStateException("Telemetry is not enabled. Set config `enable.metrics.push` to `true`.");
        } finally {
            release();
        }
    }

    @Override
    public Optional<Integer> acquisitionLockTimeoutMs() {
        acquireAndEnsureOpen();
        try {
            return Optional.ofNullable(acquisitionLockTimeoutMs);
        } finally {
            release();
        }
    }

    /** This client keeps no Kafka metrics: always empty. */
    @Override
    public Map<MetricName, ? extends Metric> metrics() {
        acquireAndEnsureOpen();
        try {
            return Map.of();
        } finally {
            release();
        }
    }

    /** No-op: client telemetry is not implemented (as Kafka's consumer with telemetry off). */
    @Override
    public void registerMetricForSubscription(KafkaMetric metric) {
        acquireAndEnsureOpen();
        release();
    }

    /** No-op: client telemetry is not implemented (as Kafka's consumer with telemetry off). */
    @Override
    public void unregisterMetricFromSubscription(KafkaMetric metric) {
        acquireAndEnsureOpen();
        release();
    }

    @Override
    public void close() {
        close(Duration.ofSeconds(30));
    }

    /**
     * Sends the pending acknowledgements (implicit mode: the delivered records are accepted first),
     * closes the share sessions (ShareAcknowledge with epoch -1, which releases the records not
     * acknowledged), leaves the group, and gives the outcomes to the callback. Network errors are
     * logged, not thrown.
     */
    @Override
    public void close(Duration timeout) {
        if (timeout == null || timeout.isNegative()) {
            throw new IllegalArgumentException("The timeout cannot be negative.");
        }
        acquire();
        try {
            if (closed) {
                return;
            }
            if (inCallback) {
                throw new IllegalStateException(
                        "KafkaShareConsumer methods are not accessible from user-defined acknowledgement commit callback.");
            }
            long deadline = deadlineAfter(timeout);
            try {
                settleDelivered();
                sendAll(deadline, true);
                leaveGroup(deadline);
                invokeCallbacks();
            } catch (InterruptException | WakeupException e) {
                throw e;
            } catch (RuntimeException e) {
                log.warn("error while closing the share consumer of group {}: {}", groupId, e.toString());
            } finally {
                closed = true;
                heartbeatThread.interrupt();
                nodes.close();
                Utils.closeQuietly(keyDeserializer, "key deserializer");
                Utils.closeQuietly(valueDeserializer, "value deserializer");
            }
        } finally {
            release();
        }
    }

    @Override
    public void wakeup() {
        wakeupRequested.set(true);
    }

    // ---- membership ----

    /** One ShareGroupHeartbeat; retriable failures set a short retry, others throw. */
    private void heartbeat() {
        ShareGroupHeartbeatResponseData response;
        try {
            response = sendHeartbeat(memberEpoch, memberEpoch == 0 || !subscriptionSent
                    ? new ArrayList<>(subscription) : null, requestTimeout);
        } catch (RetriableException | Wire.MalformedException e) {
            log.debug("ShareGroupHeartbeat of group {} failed: {}", groupId, e.toString());
            coordinator = null;
            nextHeartbeatMs = System.currentTimeMillis() + RETRY_BACKOFF_MS;
            return;
        }
        Errors error = Errors.forCode(response.errorCode());
        switch (error) {
            case NONE:
                break;
            case UNKNOWN_MEMBER_ID:
            case FENCED_MEMBER_EPOCH:
                // Rejoin with epoch 0, keeping the member id, as Kafka's consumer does.
                memberEpoch = 0;
                subscriptionSent = false;
                assignment = new LinkedHashSet<>();
                nextHeartbeatMs = 0;
                return;
            case NOT_COORDINATOR:
            case COORDINATOR_NOT_AVAILABLE:
            case COORDINATOR_LOAD_IN_PROGRESS:
                coordinator = null;
                nextHeartbeatMs = System.currentTimeMillis() + RETRY_BACKOFF_MS;
                return;
            default:
                throw error.exception(response.errorMessage());
        }
        if (response.memberId() != null && !response.memberId().isEmpty() && !response.memberId().equals(memberId)) {
            log.debug("coordinator renamed member {} to {}", memberId, response.memberId());
            memberId = response.memberId();
        }
        memberEpoch = response.memberEpoch();
        subscriptionSent = true;
        if (response.heartbeatIntervalMs() > 0) {
            heartbeatIntervalMs = response.heartbeatIntervalMs();
        }
        nextHeartbeatMs = System.currentTimeMillis() + heartbeatIntervalMs;
        if (response.assignment() != null) {
            Set<TopicIdPart> assigned = new LinkedHashSet<>();
            for (ShareGroupHeartbeatResponseData.TopicPartitions t : response.assignment().topicPartitions()) {
                for (int p : t.partitions()) {
                    TopicIdPart tp = new TopicIdPart(t.topicId(), p);
                    assigned.add(tp);
                    if (!topicNames.containsKey(t.topicId()) || !leaders.containsKey(tp)) {
                        metadataStale = true;
                    }
                }
            }
            assignment = assigned;
        }
    }

    private void leaveGroup(long deadline) {
        if (memberEpoch <= 0 && !subscriptionSent) {
            return;
        }
        try {
            ShareGroupHeartbeatResponseData response = sendHeartbeat(-1, null, remaining(deadline));
            if (response.errorCode() != 0 && response.errorCode() != Errors.UNKNOWN_MEMBER_ID.code()) {
                log.warn("leaving share group {} answered {}", groupId, Errors.forCode(response.errorCode()));
            }
        } catch (KafkaException e) {
            log.warn("leaving share group {} failed: {}", groupId, e.toString());
        } finally {
            memberEpoch = 0;
            subscriptionSent = false;
            assignment = new LinkedHashSet<>();
            nextHeartbeatMs = 0; // a poll after this joins again at once
        }
    }

    /** One ShareGroupHeartbeat v1 of this member with {@code epoch} (-1: leave) to the coordinator. */
    private ShareGroupHeartbeatResponseData sendHeartbeat(int epoch, List<String> subscribedTopics, Duration timeout) {
        BrokerConnection c = coordinatorConnection();
        short version = c.version(ApiKeys.SHARE_GROUP_HEARTBEAT.id, (short) 1, (short) 1);
        ShareGroupHeartbeatRequestData request = new ShareGroupHeartbeatRequestData()
                .setGroupId(groupId)
                .setMemberId(memberId)
                .setMemberEpoch(epoch)
                .setSubscribedTopicNames(subscribedTopics);
        ByteBuffer body = c.send(ApiKeys.SHARE_GROUP_HEARTBEAT, version, request, timeout);
        return new ShareGroupHeartbeatResponseData(new ByteBufferAccessor(body), version);
    }

    private BrokerConnection coordinatorConnection() {
        if (coordinator == null) {
            coordinator = nodes.findCoordinator(groupId, requestTimeout).id();
        }
        return nodes.connection(coordinator, requestTimeout);
    }

    private void refreshMetadataQuietly() {
        try {
            refreshMetadata();
        } catch (RetriableException | Wire.MalformedException e) {
            log.debug("Metadata refresh failed: {}", e.toString());
        }
    }

    /** Metadata for the subscribed topics: ids and names, partition leaders, broker addresses. */
    private void refreshMetadata() {
        BrokerConnection c = nodes.bootstrap(requestTimeout);
        short version = c.version(ApiKeys.METADATA.id, (short) 12, (short) 12);
        List<MetadataRequestData.MetadataRequestTopic> topics = new ArrayList<>();
        for (String t : subscription) {
            topics.add(new MetadataRequestData.MetadataRequestTopic().setName(t));
        }
        MetadataRequestData request = new MetadataRequestData().setTopics(topics).setAllowAutoTopicCreation(false);
        ByteBuffer body = c.send(ApiKeys.METADATA, version, request, requestTimeout);
        MetadataResponseData response = new MetadataResponseData(new ByteBufferAccessor(body), version);
        for (MetadataResponseData.MetadataResponseBroker b : response.brokers()) {
            nodes.learn(new NodePool.Node(b.nodeId(), b.host(), b.port()));
        }
        for (MetadataResponseData.MetadataResponseTopic t : response.topics()) {
            if (t.errorCode() != 0 || t.topicId() == null || Uuid.ZERO_UUID.equals(t.topicId())) {
                continue;
            }
            topicNames.put(t.topicId(), t.name());
            topicIds.put(t.name(), t.topicId());
            for (MetadataResponseData.MetadataResponsePartition p : t.partitions()) {
                TopicIdPart tp = new TopicIdPart(t.topicId(), p.partitionIndex());
                if (p.leaderId() >= 0) {
                    leaders.put(tp, p.leaderId());
                } else {
                    leaders.remove(tp);
                }
            }
        }
        metadataStale = false;
    }

    // ---- fetch ----

    /**
     * One ShareFetch to {@code node} for {@code wanted}, with the pending acknowledgements of those
     * partitions piggybacked once the session is open; appends the delivered records to {@code out}.
     */
    private void fetchFrom(int node, Set<TopicIdPart> wanted, int maxWaitMs, List<ConsumerRecord<K, V>> out) {
        Session session = sessions.computeIfAbsent(node, k -> new Session());
        int epoch = session.epoch;
        Set<TopicIdPart> send = new LinkedHashSet<>(wanted);
        Set<TopicIdPart> forget = new LinkedHashSet<>();
        Map<TopicIdPart, List<Batch>> piggybacked = new LinkedHashMap<>();
        if (epoch > 0) {
            send.removeAll(session.partitions);
            forget.addAll(session.partitions);
            forget.removeAll(wanted);
            // Acknowledgements cannot ride on the request that opens a session.
            for (TopicIdPart tp : wanted) {
                if (session.partitions.contains(tp)) {
                    List<Batch> b = acks.take(tp);
                    if (!b.isEmpty()) {
                        piggybacked.put(tp, b);
                    }
                }
            }
        }
        Set<TopicIdPart> listed = new LinkedHashSet<>(send);
        listed.addAll(piggybacked.keySet());

        ShareFetchRequestData request = new ShareFetchRequestData()
                .setGroupId(groupId)
                .setMemberId(memberId)
                .setShareSessionEpoch(epoch)
                .setMaxWaitMs(maxWaitMs)
                .setMinBytes(fetchMinBytes)
                .setMaxBytes(fetchMaxBytes)
                .setMaxRecords(maxPollRecords)
                .setBatchSize(maxPollRecords);
        ShareFetchRequestData.FetchTopicCollection topics = new ShareFetchRequestData.FetchTopicCollection();
        for (TopicIdPart tp : listed) {
            ShareFetchRequestData.FetchTopic topic = topics.find(tp.topicId());
            if (topic == null) {
                topic = new ShareFetchRequestData.FetchTopic().setTopicId(tp.topicId());
                topics.add(topic);
            }
            List<ShareFetchRequestData.AcknowledgementBatch> batches = new ArrayList<>();
            for (Batch b : piggybacked.getOrDefault(tp, List.of())) {
                batches.add(new ShareFetchRequestData.AcknowledgementBatch()
                        .setFirstOffset(b.first()).setLastOffset(b.last()).setAcknowledgeTypes(List.of(b.type())));
            }
            topic.partitions().add(new ShareFetchRequestData.FetchPartition()
                    .setPartitionIndex(tp.partition())
                    .setAcknowledgementBatches(batches));
        }
        request.setTopics(topics);
        List<ShareFetchRequestData.ForgottenTopic> forgotten = new ArrayList<>();
        for (TopicIdPart tp : forget) {
            ShareFetchRequestData.ForgottenTopic f = null;
            for (ShareFetchRequestData.ForgottenTopic x : forgotten) {
                if (x.topicId().equals(tp.topicId())) {
                    f = x;
                }
            }
            if (f == null) {
                f = new ShareFetchRequestData.ForgottenTopic().setTopicId(tp.topicId()).setPartitions(new ArrayList<>());
                forgotten.add(f);
            }
            f.partitions().add(tp.partition());
        }
        request.setForgottenTopicsData(forgotten);

        ShareFetchResponseData response;
        try {
            BrokerConnection c = nodes.connection(node, requestTimeout);
            short version = c.version(ApiKeys.SHARE_FETCH.id, (short) 1, (short) 2);
            Duration timeout = requestTimeout.plusMillis(maxWaitMs);
            ByteBuffer body = c.send(ApiKeys.SHARE_FETCH, version, request, timeout);
            response = new ShareFetchResponseData(new ByteBufferAccessor(body), version);
        } catch (KafkaException e) {
            failAll(piggybacked, asKafka(e));
            sessions.remove(node);
            metadataStale = true;
            nextHeartbeatMs = 0; // the broker may have restarted and forgotten this member
            throw e;
        }
        Errors error = Errors.forCode(response.errorCode());
        if (error != Errors.NONE) {
            failAll(piggybacked, error.exception(response.errorMessage()));
            sessions.remove(node);
            if (error == Errors.SHARE_SESSION_NOT_FOUND || error == Errors.INVALID_SHARE_SESSION_EPOCH
                    || error.exception() instanceof RetriableException) {
                metadataStale = true;
                nextHeartbeatMs = 0; // the broker may have restarted and forgotten this member
                return;
            }
            if (error == Errors.UNKNOWN_MEMBER_ID || error == Errors.FENCED_MEMBER_EPOCH) {
                nextHeartbeatMs = 0;
                return;
            }
            throw error.exception(response.errorMessage());
        }
        session.epoch = nextEpoch(epoch);
        session.partitions = new HashSet<>(wanted);
        if (response.acquisitionLockTimeoutMs() > 0) {
            acquisitionLockTimeoutMs = response.acquisitionLockTimeoutMs();
        }
        for (ShareFetchResponseData.NodeEndpoint n : response.nodeEndpoints()) {
            nodes.learn(new NodePool.Node(n.nodeId(), n.host(), n.port()));
        }
        RecordDeserializationException failure = null;
        for (ShareFetchResponseData.ShareFetchableTopicResponse topic : response.responses()) {
            for (ShareFetchResponseData.PartitionData p : topic.partitions()) {
                TopicIdPart tp = new TopicIdPart(topic.topicId(), p.partitionIndex());
                List<Batch> sent = piggybacked.remove(tp);
                if (sent != null) {
                    complete(tp, sent, p.acknowledgeErrorCode(), p.acknowledgeErrorMessage());
                }
                if (p.errorCode() != 0) {
                    metadataStale = true;
                    continue;
                }
                try {
                    deliver(tp, p, out);
                } catch (RecordDeserializationException e) {
                    if (failure == null) {
                        failure = e;
                    }
                }
            }
        }
        failAll(piggybacked, new KafkaException("the broker did not answer this partition's acknowledgements"));
        if (failure != null) {
            throw failure;
        }
    }

    private static int nextEpoch(int epoch) {
        return epoch == Integer.MAX_VALUE ? 1 : epoch + 1;
    }

    /** The records of a fetched partition that lie in its acquired ranges, with their delivery counts. */
    private void deliver(TopicIdPart tp, ShareFetchResponseData.PartitionData p, List<ConsumerRecord<K, V>> out) {
        BaseRecords base = p.records();
        if (p.acquiredRecords().isEmpty() || !(base instanceof MemoryRecords)) {
            return;
        }
        TreeMap<Long, long[]> ranges = new TreeMap<>();
        for (ShareFetchResponseData.AcquiredRecords a : p.acquiredRecords()) {
            if (a.firstOffset() <= a.lastOffset()) {
                ranges.put(a.firstOffset(), new long[] {a.lastOffset(), a.deliveryCount()});
            }
        }
        String topic = topicNames.get(tp.topicId());
        if (topic == null) {
            refreshMetadataQuietly();
            topic = topicNames.getOrDefault(tp.topicId(), tp.topicId().toString());
        }
        RecordDeserializationException failure = null;
        for (RecordBatch batch : ((MemoryRecords) base).batches()) {
            for (Record r : batch) {
                Map.Entry<Long, long[]> range = ranges.floorEntry(r.offset());
                if (range == null || r.offset() > range.getValue()[0]) {
                    continue;
                }
                if (batch.isControlBatch()) {
                    acks.add(tp, r.offset(), GAP);
                    continue;
                }
                short deliveryCount = (short) range.getValue()[1];
                RecordHeaders headers = new RecordHeaders(r.headers());
                byte[] keyBytes = r.hasKey() ? Utils.toArray(r.key()) : null;
                byte[] valueBytes = r.hasValue() ? Utils.toArray(r.value()) : null;
                K key = null;
                V value = null;
                RecordDeserializationException.DeserializationExceptionOrigin origin =
                        RecordDeserializationException.DeserializationExceptionOrigin.KEY;
                try {
                    key = keyDeserializer.deserialize(topic, headers, keyBytes);
                    origin = RecordDeserializationException.DeserializationExceptionOrigin.VALUE;
                    value = valueDeserializer.deserialize(topic, headers, valueBytes);
                } catch (RuntimeException e) {
                    undeserializable.computeIfAbsent(tp, k -> new TreeSet<>()).add(r.offset());
                    if (failure == null) {
                        failure = new RecordDeserializationException(origin, new TopicPartition(topic, tp.partition()),
                                r.offset(), r.timestamp(), batch.timestampType(),
                                keyBytes == null ? null : ByteBuffer.wrap(keyBytes),
                                valueBytes == null ? null : ByteBuffer.wrap(valueBytes), headers,
                                "Error deserializing " + origin.name().toLowerCase(Locale.ROOT) + " for partition "
                                        + topic + "-" + tp.partition() + " at offset " + r.offset(), e);
                    }
                    continue;
                }
                TimestampType timestampType = batch.timestampType();
                Optional<Integer> leaderEpoch = batch.partitionLeaderEpoch() >= 0
                        ? Optional.of(batch.partitionLeaderEpoch()) : Optional.empty();
                out.add(new ConsumerRecord<>(topic, tp.partition(), r.offset(), r.timestamp(), timestampType,
                        keyBytes == null ? -1 : keyBytes.length, valueBytes == null ? -1 : valueBytes.length,
                        key, value, headers, leaderEpoch, Optional.of(deliveryCount)));
            }
        }
        if (failure != null) {
            throw failure;
        }
    }

    // ---- acknowledgements on the wire ----

    /**
     * Sends the plain acknowledgements as ShareAcknowledge, one request per leader with an open
     * session; {@code closing} also closes every session (epoch -1), with or without
     * acknowledgements. Acknowledgements that cannot be routed (no leader or no open session) fail
     * with SHARE_SESSION_NOT_FOUND: their records were acquired in a session that no longer exists.
     */
    private void sendPlainAcks(long deadline, boolean closing) {
        Map<Integer, Map<TopicIdPart, List<Batch>>> byNode = new TreeMap<>();
        for (Map.Entry<TopicIdPart, List<Batch>> e : acks.takeAll().entrySet()) {
            Integer leader = leaders.get(e.getKey());
            Session s = leader == null ? null : sessions.get(leader);
            if (s == null || s.epoch <= 0) {
                complete(e.getKey(), e.getValue(), new ShareSessionNotFoundException(
                        "no open share session with the leader of this partition"));
                continue;
            }
            byNode.computeIfAbsent(leader, k -> new LinkedHashMap<>()).put(e.getKey(), e.getValue());
        }
        if (closing) {
            for (Map.Entry<Integer, Session> s : sessions.entrySet()) {
                if (s.getValue().epoch > 0) {
                    byNode.putIfAbsent(s.getKey(), new LinkedHashMap<>());
                }
            }
        }
        for (Map.Entry<Integer, Map<TopicIdPart, List<Batch>>> e : byNode.entrySet()) {
            shareAcknowledge(e.getKey(), e.getValue(), closing, deadline);
        }
    }

    /** Closes the share session with {@code node}, sending the acknowledgements of the partitions it leads. */
    private void closeSession(int node, long deadline) {
        Session s = sessions.get(node);
        if (s == null || s.epoch <= 0) {
            sessions.remove(node);
            return;
        }
        Map<TopicIdPart, List<Batch>> batches = new LinkedHashMap<>();
        for (TopicIdPart tp : new ArrayList<>(acks.partitions())) {
            if (Integer.valueOf(node).equals(leaders.get(tp))) {
                batches.put(tp, acks.take(tp));
            }
        }
        shareAcknowledge(node, batches, true, deadline);
    }

    private void shareAcknowledge(int node, Map<TopicIdPart, List<Batch>> batches, boolean closing, long deadline) {
        Session session = sessions.get(node);
        int epoch = closing ? -1 : session.epoch;
        ShareAcknowledgeRequestData request = new ShareAcknowledgeRequestData()
                .setGroupId(groupId)
                .setMemberId(memberId)
                .setShareSessionEpoch(epoch);
        ShareAcknowledgeRequestData.AcknowledgeTopicCollection topics =
                new ShareAcknowledgeRequestData.AcknowledgeTopicCollection();
        for (Map.Entry<TopicIdPart, List<Batch>> e : batches.entrySet()) {
            ShareAcknowledgeRequestData.AcknowledgeTopic topic = topics.find(e.getKey().topicId());
            if (topic == null) {
                topic = new ShareAcknowledgeRequestData.AcknowledgeTopic().setTopicId(e.getKey().topicId());
                topics.add(topic);
            }
            List<ShareAcknowledgeRequestData.AcknowledgementBatch> list = new ArrayList<>();
            for (Batch b : e.getValue()) {
                list.add(new ShareAcknowledgeRequestData.AcknowledgementBatch()
                        .setFirstOffset(b.first()).setLastOffset(b.last()).setAcknowledgeTypes(List.of(b.type())));
            }
            topic.partitions().add(new ShareAcknowledgeRequestData.AcknowledgePartition()
                    .setPartitionIndex(e.getKey().partition()).setAcknowledgementBatches(list));
        }
        request.setTopics(topics);
        boolean renew = false;
        for (List<Batch> list : batches.values()) {
            for (Batch b : list) {
                renew |= b.type() == AcknowledgeType.RENEW.id;
            }
        }
        request.setIsRenewAck(renew);
        Map<TopicIdPart, List<Batch>> unanswered = new LinkedHashMap<>(batches);
        ShareAcknowledgeResponseData response;
        try {
            BrokerConnection c = nodes.connection(node, requestTimeout);
            short version = c.version(ApiKeys.SHARE_ACKNOWLEDGE.id, (short) 1, (short) 2);
            if (renew && version < 2) {
                failAll(unanswered, new UnsupportedVersionException(
                        "the broker does not support RENEW acknowledgements (ShareAcknowledge v2)"));
                return;
            }
            ByteBuffer body = c.send(ApiKeys.SHARE_ACKNOWLEDGE, version, request, remaining(deadline));
            response = new ShareAcknowledgeResponseData(new ByteBufferAccessor(body), version);
        } catch (KafkaException e) {
            sessions.remove(node);
            failAll(unanswered, asKafka(e));
            return;
        }
        Errors error = Errors.forCode(response.errorCode());
        if (error != Errors.NONE) {
            sessions.remove(node);
            failAll(unanswered, error.exception(response.errorMessage()));
            return;
        }
        if (closing) {
            sessions.remove(node);
        } else {
            session.epoch = nextEpoch(epoch);
        }
        Map<TopicIdPart, List<Batch>> retry = new LinkedHashMap<>();
        boolean canRetry = !closing && deadline - System.currentTimeMillis() > RETRY_BACKOFF_MS;
        for (ShareAcknowledgeResponseData.ShareAcknowledgeTopicResponse t : response.responses()) {
            for (ShareAcknowledgeResponseData.PartitionData p : t.partitions()) {
                TopicIdPart tp = new TopicIdPart(t.topicId(), p.partitionIndex());
                List<Batch> sent = unanswered.remove(tp);
                if (sent == null) {
                    continue;
                }
                if (canRetry && retriable(Errors.forCode(p.errorCode()))) {
                    retry.put(tp, sent);
                } else {
                    complete(tp, sent, p.errorCode(), p.errorMessage());
                }
            }
        }
        failAll(unanswered, new KafkaException("the broker did not answer this partition's acknowledgements"));
        if (!retry.isEmpty()) {
            log.debug("retrying the acknowledgements of {} after a retriable error", retry.keySet());
            sleepUntil(System.currentTimeMillis() + RETRY_BACKOFF_MS);
            shareAcknowledge(node, retry, false, deadline);
        }
    }

    /**
     * Whether a partition's acknowledgement error is retried (until the call's deadline), as
     * Kafka's consumer decides for ShareAcknowledge: retriable errors, except a moved leader
     * (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH: the locks went with it) and a deleted topic.
     */
    private static boolean retriable(Errors error) {
        return error != Errors.NONE && error.exception() instanceof RetriableException
                && error != Errors.NOT_LEADER_OR_FOLLOWER && error != Errors.FENCED_LEADER_EPOCH
                && error != Errors.UNKNOWN_TOPIC_OR_PARTITION && error != Errors.UNKNOWN_TOPIC_ID;
    }

    /**
     * Sends every buffered transactional acknowledgement as ShareAcknowledgeTransactional (key 1001
     * v0), one request per transaction and partition leader. Each partition is all-or-nothing on the
     * broker; its outcome goes to the callback like any acknowledgement's. Nothing is retried.
     */
    private void flushTransactional(long deadline) {
        if (transactionalAcks.isEmpty()) {
            return;
        }
        Map<String, PendingAcks> all = new LinkedHashMap<>(transactionalAcks);
        transactionalAcks.clear();
        for (Map.Entry<String, PendingAcks> txn : all.entrySet()) {
            Map<Integer, Map<TopicIdPart, List<Batch>>> byNode = new TreeMap<>();
            for (Map.Entry<TopicIdPart, List<Batch>> e : txn.getValue().takeAll().entrySet()) {
                Integer leader = leaders.get(e.getKey());
                if (leader == null) {
                    complete(e.getKey(), e.getValue(), new NetworkException("leader of the partition unknown"));
                    continue;
                }
                byNode.computeIfAbsent(leader, k -> new LinkedHashMap<>()).put(e.getKey(), e.getValue());
            }
            for (Map.Entry<Integer, Map<TopicIdPart, List<Batch>>> e : byNode.entrySet()) {
                acknowledgeTransactional(e.getKey(), txn.getKey(), e.getValue(), deadline);
            }
        }
    }

    private void acknowledgeTransactional(int node, String transactionId, Map<TopicIdPart, List<Batch>> batches,
            long deadline) {
        Map<Uuid, Map<Integer, List<ShareTxnMessages.AckBatch>>> topics = new LinkedHashMap<>();
        for (Map.Entry<TopicIdPart, List<Batch>> e : batches.entrySet()) {
            List<ShareTxnMessages.AckBatch> list = new ArrayList<>();
            for (Batch b : e.getValue()) {
                list.add(new ShareTxnMessages.AckBatch(b.first(), b.last(), List.of(b.type())));
            }
            topics.computeIfAbsent(e.getKey().topicId(), k -> new LinkedHashMap<>()).put(e.getKey().partition(), list);
        }
        byte[] body = ShareTxnMessages.acknowledgeTransactionalRequest(groupId, memberId, transactionId, topics);
        Map<TopicIdPart, List<Batch>> unanswered = new LinkedHashMap<>(batches);
        ShareTxnMessages.AckResponse response;
        try {
            BrokerConnection c = nodes.connection(node, requestTimeout);
            response = ShareTxnMessages.decodeAcknowledgeTransactional(c.sendFlexible(
                    ShareTxnMessages.SHARE_ACKNOWLEDGE_TRANSACTIONAL, ShareTxnMessages.VERSION, body,
                    remaining(deadline)));
        } catch (KafkaException e) {
            failAll(unanswered, asKafka(e));
            return;
        }
        if (response.errorCode() != 0) {
            failAll(unanswered, Errors.forCode(response.errorCode()).exception(response.errorMessage()));
            return;
        }
        for (ShareTxnMessages.AckPartitionResult p : response.partitions()) {
            TopicIdPart tp = new TopicIdPart(p.topicId(), p.partitionIndex());
            List<Batch> sent = unanswered.remove(tp);
            if (sent != null) {
                complete(tp, sent, p.errorCode(), p.errorMessage());
            }
        }
        failAll(unanswered, new KafkaException("the broker did not answer this partition's acknowledgements"));
    }

    private void complete(TopicIdPart tp, List<Batch> batches, short errorCode, String errorMessage) {
        complete(tp, batches, errorCode == 0 ? null : Errors.forCode(errorCode).exception(errorMessage));
    }

    private void complete(TopicIdPart tp, List<Batch> batches, KafkaException error) {
        if (error instanceof org.apache.kafka.common.errors.UnknownMemberIdException) {
            // The coordinator forgot this member (e.g. it restarted): rejoin at once.
            nextHeartbeatMs = 0;
        }
        Set<Long> offsets = new TreeSet<>();
        for (Batch b : batches) {
            if (b.type() != GAP) {
                for (long o = b.first(); o <= b.last(); o++) {
                    offsets.add(o);
                }
            }
        }
        if (offsets.isEmpty() && error == null) {
            return;
        }
        TopicIdPartition tip = new TopicIdPartition(tp.topicId(), tp.partition(), topicNames.get(tp.topicId()));
        completed.add(new AckResult(tip, offsets, error));
    }

    private void failAll(Map<TopicIdPart, List<Batch>> batches, KafkaException error) {
        for (Map.Entry<TopicIdPart, List<Batch>> e : batches.entrySet()) {
            complete(e.getKey(), e.getValue(), error);
        }
        batches.clear();
    }

    private static KafkaException asKafka(KafkaException e) {
        return e instanceof ApiException || e instanceof RetriableException ? e
                : new NetworkException(e.getMessage(), e);
    }

    /** Gives the outcomes collected so far to the callback, one call per partition and request. */
    private void invokeCallbacks() {
        if (completed.isEmpty()) {
            return;
        }
        List<AckResult> results = new ArrayList<>(completed);
        completed.clear();
        AcknowledgementCommitCallback cb = callback;
        if (cb == null) {
            for (AckResult r : results) {
                if (r.error() != null) {
                    log.debug("acknowledgement of {} {} failed: {}", r.partition(), r.offsets(), r.error().toString());
                }
            }
            return;
        }
        RuntimeException first = null;
        inCallback = true;
        try {
            for (AckResult r : results) {
                try {
                    cb.onComplete(Map.of(r.partition(), r.offsets()), r.error());
                } catch (RuntimeException e) {
                    log.error("Failed invoking acknowledgement commit callback", e);
                    if (first == null) {
                        first = e;
                    }
                }
            }
        } finally {
            inCallback = false;
        }
        if (first != null) {
            throw first;
        }
    }

    // ---- threads, time ----

    private void acquire() {
        long thread = Thread.currentThread().getId();
        if (thread != owner.get() && !owner.compareAndSet(-1, thread)) {
            throw new ConcurrentModificationException("KafkaShareConsumer is not safe for multi-threaded access");
        }
        lock.lock();
        ownerDepth++;
    }

    private void release() {
        if (--ownerDepth == 0) {
            owner.set(-1);
        }
        lock.unlock();
    }

    // ---- background heartbeat ----

    /**
     * The background heartbeat thread: while the application is between calls (the lock is free)
     * and the member has joined, sends ShareGroupHeartbeat when due, so that processing longer than
     * {@code share.session.timeout.ms} between polls keeps the membership and the acquired
     * records. Polls heartbeat themselves (the thread never waits for the lock). After {@code
     * max.poll.interval.ms} without a poll it leaves the group, as Kafka's consumer does; the next
     * poll joins again.
     */
    private void heartbeatLoop() {
        while (true) {
            try {
                Thread.sleep(HEARTBEAT_THREAD_TICK_MS);
            } catch (InterruptedException e) {
                return;
            }
            if (!lock.tryLock()) {
                continue;
            }
            try {
                if (closed) {
                    return;
                }
                backgroundHeartbeat();
            } catch (RuntimeException e) {
                log.debug("background heartbeat of group {} failed: {}", groupId, e.toString());
            } finally {
                lock.unlock();
            }
        }
    }

    private void backgroundHeartbeat() {
        if (memberEpoch <= 0 || subscription.isEmpty() || lastPollMs == 0 || leftForPollInterval) {
            return; // not a member: the next poll joins
        }
        long now = System.currentTimeMillis();
        if (now - lastPollMs > maxPollIntervalMs) {
            log.warn("consumer poll timeout has expired: no poll for more than max.poll.interval.ms ({} ms);"
                    + " leaving share group {}", maxPollIntervalMs, groupId);
            leftForPollInterval = true;
            leaveGroup(deadlineAfter(requestTimeout));
            return;
        }
        if (now < nextHeartbeatMs) {
            return;
        }
        try {
            heartbeat();
        } catch (KafkaException e) {
            backgroundError = e;
            nextHeartbeatMs = now + heartbeatIntervalMs;
        }
    }

    private void acquireAndEnsureOpen() {
        acquire();
        if (closed) {
            release();
            throw new IllegalStateException("This consumer has already been closed.");
        }
        if (inCallback) {
            release();
            throw new IllegalStateException(
                    "KafkaShareConsumer methods are not accessible from user-defined acknowledgement commit callback.");
        }
    }

    private void checkWakeup() {
        if (wakeupRequested.compareAndSet(true, false)) {
            throw new WakeupException();
        }
        if (Thread.currentThread().isInterrupted()) {
            throw new InterruptException(new InterruptedException());
        }
    }

    private static long deadlineAfter(Duration d) {
        long now = System.currentTimeMillis();
        long ms = d.toMillis();
        return ms > Long.MAX_VALUE - now ? Long.MAX_VALUE : now + ms;
    }

    private Duration remaining(long deadline) {
        long left = deadline - System.currentTimeMillis();
        if (left <= 0) {
            throw new TimeoutException("the operation's time ran out");
        }
        return Duration.ofMillis(Math.min(left, requestTimeout.toMillis()));
    }

    /** Sleeps until {@code until} (wall-clock ms) or until {@link #wakeup} is called. */
    private void sleepUntil(long until) {
        while (true) {
            long left = until - System.currentTimeMillis();
            if (left <= 0 || wakeupRequested.get()) {
                return;
            }
            try {
                Thread.sleep(Math.min(left, 20));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new InterruptException(e);
            }
        }
    }

    @Override
    public String toString() {
        return "LockstepShareConsumer(group=" + groupId + ", member=" + memberId + ", mode=" + mode + ")";
    }
}
