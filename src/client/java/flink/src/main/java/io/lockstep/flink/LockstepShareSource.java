package io.lockstep.flink;

import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.api.java.typeutils.ResultTypeQueryable;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * An exactly-once Flink source on a Lockstep share group (FLIP-27 Source API, unbounded).
 *
 * <p>Every parallel reader is a member of the share group; the broker spreads the topics' records
 * over them (the parallelism is independent of the partition count). Each record a reader emits is
 * acknowledged into the share transaction of the checkpoint it belongs to; the checkpoint prepares
 * that transaction (in the reader's {@code snapshotState}) and its completion commits it. So a record
 * whose checkpoint completed is never delivered again, and the records of a checkpoint that did not
 * complete come back (their transaction is aborted by the recovery of the restored job). With an
 * exactly-once sink the job's output holds every record exactly once.
 *
 * <pre>{@code
 * LockstepShareSource<String> source = LockstepShareSource.<String>builder()
 *         .setBootstrapServers("127.0.0.1:9092")
 *         .setGroupId("orders-job")
 *         .setTopics("orders")
 *         .setValueDeserializer(new SimpleStringSchema())
 *         .setStartingOffsetEarliest()
 *         .build();
 * env.enableCheckpointing(500);
 * env.fromSource(source, WatermarkStrategy.noWatermarks(), "lockstep");
 * }</pre>
 *
 * <p>Transaction ids, the recovery rule and why it is exact: {@link TransactionIds}. The reader's
 * steps: {@link LockstepShareReader}. Requirements: checkpointing enabled (without it nothing is ever
 * committed, and each reader stops at its first transaction's timeout); a checkpoint interval well
 * under the transaction timeout ({@code share.transaction.timeout.ms}, default 60 s: an ONGOING
 * transaction older than that is aborted by the broker and the next checkpoint fails, so the job
 * restarts from the last one); {@code share.transaction.max.pending} of at least 3 per reader (the
 * enumerator sets it when the job starts, see {@link LockstepShareSourceBuilder#setMaxPendingTransactions}).
 * A job started without a checkpoint to restore (not from a savepoint or retained checkpoint) aborts
 * every pending transaction of its prefix, including a previous run's prepared ones whose commit
 * had not arrived: their records are read again (exactly-once holds across restores, not across
 * unrelated runs).
 *
 * @param <T> the type of the emitted values
 */
public final class LockstepShareSource<T>
        implements Source<T, LockstepShareSplit, LockstepEnumeratorState>, ResultTypeQueryable<T> {
    private static final long serialVersionUID = 1L;

    private final ShareSourceConfig config;
    private final DeserializationSchema<T> deserializer;

    LockstepShareSource(ShareSourceConfig config, DeserializationSchema<T> deserializer) {
        this.config = config;
        this.deserializer = deserializer;
    }

    /** A builder for a source. */
    public static <T> LockstepShareSourceBuilder<T> builder() {
        return new LockstepShareSourceBuilder<>();
    }

    /** The share group the readers join. */
    public String groupId() {
        return config.groupId;
    }

    /** The transactional id prefix: ids are {@code {group}-{prefix}-{subtask}-{token}-{checkpoint}}. */
    public String transactionalIdPrefix() {
        return config.transactionalIdPrefix;
    }

    @Override
    public Boundedness getBoundedness() {
        return Boundedness.CONTINUOUS_UNBOUNDED;
    }

    @Override
    public SourceReader<T, LockstepShareSplit> createReader(SourceReaderContext readerContext) {
        return new LockstepShareReader<>(readerContext, config, deserializer);
    }

    @Override
    public SplitEnumerator<LockstepShareSplit, LockstepEnumeratorState> createEnumerator(
            SplitEnumeratorContext<LockstepShareSplit> enumContext) {
        return new LockstepShareEnumerator(enumContext, config, 0);
    }

    @Override
    public SplitEnumerator<LockstepShareSplit, LockstepEnumeratorState> restoreEnumerator(
            SplitEnumeratorContext<LockstepShareSplit> enumContext, LockstepEnumeratorState checkpoint) {
        return new LockstepShareEnumerator(enumContext, config, checkpoint.checkpointId());
    }

    @Override
    public SimpleVersionedSerializer<LockstepShareSplit> getSplitSerializer() {
        return LockstepShareSplit.Serializer.INSTANCE;
    }

    @Override
    public SimpleVersionedSerializer<LockstepEnumeratorState> getEnumeratorCheckpointSerializer() {
        return LockstepEnumeratorState.Serializer.INSTANCE;
    }

    @Override
    public TypeInformation<T> getProducedType() {
        return deserializer.getProducedType();
    }
}
