package io.lockstep.flink;

import io.lockstep.clients.LockstepShareConsumer;
import io.lockstep.clients.LockstepShareTransactionCoordinator;
import io.lockstep.clients.TransactionState;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.Optional;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.SourceEvent;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.core.io.InputStatus;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.util.FlinkRuntimeException;
import org.apache.flink.util.UserCodeClassLoader;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.errors.ConcurrentTransactionsException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One parallel reader: a member of the share group that acknowledges every record it emits into the
 * transaction of the checkpoint the record belongs to.
 *
 * <p>Everything runs on the task's mailbox thread, the thread that also sees the checkpoint
 * barriers: {@link #pollNext} (poll, acknowledge, emit one record), {@link #snapshotState} and
 * {@link #notifyCheckpointComplete}. So "emitted before the barrier of checkpoint N" and
 * "acknowledged into the transaction that checkpoint N prepares" are the same set of records.
 *
 * <p>Life of a transaction {@code T} (ids: {@link TransactionIds}):
 *
 * <ol>
 *   <li>begun at the first record this reader emits after its last snapshot (named after that
 *       snapshot's checkpoint + 1); every record emitted until the next snapshot is acknowledged
 *       (ACCEPT) into it: its acknowledgement travels with the next poll;
 *   <li>{@code snapshotState(m)}: {@code commitSync} sends the acknowledgements not yet sent and
 *       waits for every answer (any failure fails the checkpoint: a record emitted but not locked
 *       would come back), then {@code prepareTransaction(T)}: the locks are durable, T is closed to
 *       new acknowledgements. Only then does the snapshot return, so checkpoint m cannot complete
 *       before T is prepared;
 *   <li>{@code notifyCheckpointComplete(k)}: every prepared transaction of a checkpoint {@code <= k}
 *       is committed (the records are acknowledged for good). A commit that fails is retried at the
 *       next notification; a job restored before that commits it in its recovery. A checkpoint that
 *       is aborted leaves its transaction prepared: the sink commits that checkpoint's output with
 *       the next completed checkpoint, and so does this reader.
 * </ol>
 *
 * <p>At start the reader waits for the enumerator's {@link RecoveredEvent} (job-wide recovery done),
 * then recovers its own subtask's transactions (a region failover restarts this reader alone, with
 * the enumerator still running) against the checkpoint it was restored from, then subscribes.
 */
final class LockstepShareReader<T> implements SourceReader<T, LockstepShareSplit> {
    private static final Logger LOG = LoggerFactory.getLogger(LockstepShareReader.class);
    /** Pause before retrying a begin refused with CONCURRENT_TRANSACTIONS (max.pending reached). */
    private static final long BEGIN_RETRY_MS = 100;
    /** A begin refused for longer than this fails the task. */
    private static final long BEGIN_RETRY_WINDOW_MS = 120_000;

    private final SourceReaderContext context;
    private final ShareSourceConfig config;
    private final DeserializationSchema<T> deserializer;
    private final int subtask;
    /** Random per reader instance: the ids it opens are new to the broker (see {@link TransactionIds}). */
    private final String token = TransactionIds.newToken();

    /** The checkpoint this reader was restored from (0: none): its recovery's bound. */
    private long restoredCheckpointId;
    /** The last checkpoint this reader snapshotted or was restored from. */
    private long lastCheckpointId;
    private boolean recoveredEventSeen;
    private CompletableFuture<Void> available = new CompletableFuture<>();

    private LockstepShareConsumer<byte[], byte[]> consumer;
    private LockstepShareTransactionCoordinator coordinator;
    /** Records of the last poll not emitted yet (ACQUIRED by this member). */
    private Iterator<ConsumerRecord<byte[], byte[]>> polled;
    private ConsumerRecord<byte[], byte[]> next;
    /** The transaction emitted records are acknowledged into; null until the first record after a snapshot. */
    private String currentTxn;
    private long currentTxnRecords;
    /** Since when begins have been refused with CONCURRENT_TRANSACTIONS (ns), or 0. */
    private long beginRefusedSinceNs;
    /** Prepared transactions by the checkpoint that prepared them, waiting for its completion. */
    private final NavigableMap<Long, List<String>> prepared = new TreeMap<>();
    /** An acknowledgement the broker refused (reported by the commit callback at a poll). */
    private KafkaException ackFailure;

    LockstepShareReader(SourceReaderContext context, ShareSourceConfig config, DeserializationSchema<T> deserializer) {
        this.context = context;
        this.config = config;
        this.deserializer = deserializer;
        this.subtask = context.getIndexOfSubtask();
    }

    @Override
    public void start() {
        try {
            deserializer.open(new DeserializationSchema.InitializationContext() {
                @Override
                public MetricGroup getMetricGroup() {
                    return context.metricGroup().addGroup("deserializer");
                }

                @Override
                public UserCodeClassLoader getUserCodeClassLoader() {
                    return context.getUserCodeClassLoader();
                }
            });
        } catch (Exception e) {
            throw new FlinkRuntimeException("opening the value deserializer failed", e);
        }
    }

    @Override
    public void addSplits(List<LockstepShareSplit> splits) {
        // Only at restore (the enumerator assigns nothing): the checkpoint we were restored from.
        for (LockstepShareSplit split : splits) {
            restoredCheckpointId = Math.max(restoredCheckpointId, split.checkpointId());
        }
        lastCheckpointId = Math.max(lastCheckpointId, restoredCheckpointId);
        LOG.info("subtask {} restored from checkpoint {} ({})", subtask, restoredCheckpointId, splits);
    }

    @Override
    public void handleSourceEvents(SourceEvent event) {
        if (event instanceof RecoveredEvent) {
            // A reader restored with no state of its own (a restore with a higher parallelism)
            // learns the restored checkpoint here; one with state already knows it (in a region
            // failover its own is the later one: the enumerator kept its start-up value).
            long restored = ((RecoveredEvent) event).restoredCheckpointId();
            restoredCheckpointId = Math.max(restoredCheckpointId, restored);
            lastCheckpointId = Math.max(lastCheckpointId, restoredCheckpointId);
            recoveredEventSeen = true;
            available.complete(null);
        }
    }

    @Override
    public CompletableFuture<Void> isAvailable() {
        return available;
    }

    @Override
    public InputStatus pollNext(ReaderOutput<T> output) throws Exception {
        if (ackFailure != null) {
            throw new FlinkRuntimeException("an acknowledgement into " + currentTxn + " was refused", ackFailure);
        }
        if (consumer == null) {
            if (!recoveredEventSeen) {
                return waitFor(available);
            }
            startConsuming();
        }
        if (next == null) {
            if (polled == null || !polled.hasNext()) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(config.pollTimeout);
                polled = records.iterator();
                if (ackFailure != null) {
                    throw new FlinkRuntimeException("an acknowledgement into " + currentTxn + " was refused",
                            ackFailure);
                }
                if (!polled.hasNext()) {
                    return InputStatus.MORE_AVAILABLE;
                }
            }
            next = polled.next();
        }
        if (currentTxn == null && !beginTransaction()) {
            return waitFor(CompletableFuture.runAsync(() -> {},
                    CompletableFuture.delayedExecutor(BEGIN_RETRY_MS, TimeUnit.MILLISECONDS)));
        }
        ConsumerRecord<byte[], byte[]> record = next;
        T value = record.value() == null ? null : deserializer.deserialize(record.value());
        consumer.acknowledge(record, AcknowledgeType.ACCEPT, currentTxn);
        currentTxnRecords++;
        next = null;
        if (value != null) {
            output.collect(value, record.timestamp());
        }
        return InputStatus.MORE_AVAILABLE;
    }

    private InputStatus waitFor(CompletableFuture<Void> future) {
        available = future;
        return InputStatus.NOTHING_AVAILABLE;
    }

    /** After the job-wide recovery: recover this subtask's transactions, then join the group. */
    private void startConsuming() {
        coordinator = new LockstepShareTransactionCoordinator(config.coordinatorProperties(Integer.toString(subtask)));
        Recovery.run(config, coordinator, restoredCheckpointId, subtask);
        consumer = new LockstepShareConsumer<>(config.consumerProperties(subtask),
                new ByteArrayDeserializer(), new ByteArrayDeserializer());
        consumer.setAcknowledgementCommitCallback((offsets, exception) -> {
            if (exception != null && ackFailure == null) {
                ackFailure = exception instanceof KafkaException
                        ? (KafkaException) exception : new KafkaException(exception);
            }
        });
        consumer.subscribe(config.topics);
        available = CompletableFuture.completedFuture(null);
        LOG.info("subtask {} consuming {} in share group {} (restored from checkpoint {}, token {})",
                subtask, config.topics, config.groupId, restoredCheckpointId, token);
    }

    /** Begins the next transaction; false if the group has too many pending ones (retry later). */
    private boolean beginTransaction() {
        String id = TransactionIds.format(config.groupId, config.transactionalIdPrefix, subtask, token,
                lastCheckpointId + 1);
        try {
            TransactionState state = coordinator.begin(id, config.transactionTimeout);
            if (state != TransactionState.ONGOING) {
                // Ids hold a fresh random token: the broker cannot know this one.
                throw new FlinkRuntimeException("transaction " + id + " is already " + state);
            }
        } catch (ConcurrentTransactionsException e) {
            long now = System.nanoTime();
            if (beginRefusedSinceNs == 0) {
                beginRefusedSinceNs = now;
                LOG.warn("subtask {}: share.transaction.max.pending of group {} reached, waiting ({} prepared here)",
                        subtask, config.groupId, prepared.size());
            } else if (now - beginRefusedSinceNs > TimeUnit.MILLISECONDS.toNanos(BEGIN_RETRY_WINDOW_MS)) {
                throw new FlinkRuntimeException("share.transaction.max.pending of group " + config.groupId
                        + " reached for " + BEGIN_RETRY_WINDOW_MS + " ms", e);
            }
            return false;
        }
        beginRefusedSinceNs = 0;
        currentTxn = id;
        currentTxnRecords = 0;
        return true;
    }

    @Override
    public List<LockstepShareSplit> snapshotState(long checkpointId) {
        if (currentTxn != null) {
            Map<TopicIdPartition, Optional<KafkaException>> results = consumer.commitSync();
            for (Map.Entry<TopicIdPartition, Optional<KafkaException>> r : results.entrySet()) {
                if (r.getValue().isPresent()) {
                    throw new FlinkRuntimeException("acknowledging into " + currentTxn + " failed on "
                            + r.getKey(), r.getValue().get());
                }
            }
            if (ackFailure != null) {
                throw new FlinkRuntimeException("an acknowledgement into " + currentTxn + " was refused", ackFailure);
            }
            coordinator.prepareTransaction(currentTxn);
            prepared.computeIfAbsent(checkpointId, k -> new ArrayList<>()).add(currentTxn);
            LOG.debug("subtask {}: checkpoint {} prepared {} ({} records)", subtask, checkpointId, currentTxn,
                    currentTxnRecords);
            currentTxn = null;
        }
        lastCheckpointId = Math.max(lastCheckpointId, checkpointId);
        return List.of(new LockstepShareSplit(subtask, checkpointId));
    }

    @Override
    public void notifyCheckpointComplete(long checkpointId) {
        NavigableMap<Long, List<String>> done = prepared.headMap(checkpointId, true);
        for (Iterator<Map.Entry<Long, List<String>>> it = done.entrySet().iterator(); it.hasNext(); ) {
            Map.Entry<Long, List<String>> entry = it.next();
            for (Iterator<String> ids = entry.getValue().iterator(); ids.hasNext(); ) {
                String id = ids.next();
                try {
                    coordinator.commitTransaction(id);
                    ids.remove();
                } catch (KafkaException e) {
                    // Still PREPARE on the broker: the next notification retries, a restored job's
                    // recovery commits it (its checkpoint completed).
                    LOG.warn("subtask {}: commit of {} (checkpoint {}) failed, retrying later: {}", subtask, id,
                            entry.getKey(), e.toString());
                }
            }
            if (entry.getValue().isEmpty()) {
                it.remove();
            }
        }
    }

    @Override
    public void notifyCheckpointAborted(long checkpointId) {
        // Nothing: the prepared transaction is committed with the next completed checkpoint, as the
        // sink commits this checkpoint's output with it.
    }

    @Override
    public void notifyNoMoreSplits() {}

    @Override
    public void close() {
        Exception first = null;
        if (consumer != null) {
            try {
                consumer.close(Duration.ofSeconds(5));
            } catch (Exception e) {
                first = e;
            }
        }
        if (coordinator != null) {
            try {
                coordinator.close();
            } catch (Exception e) {
                if (first == null) {
                    first = e;
                }
            }
        }
        if (first != null) {
            LOG.warn("subtask {}: closing failed: {}", subtask, first.toString());
        }
    }
}
