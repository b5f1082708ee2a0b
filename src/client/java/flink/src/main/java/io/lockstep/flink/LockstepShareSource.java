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
 * committed and the reader stops at {@code share.transaction.max.pending}); a checkpoint interval
 * well under the group's {@code share.record.lock.duration.ms} is not needed (records are LOCKED by
 * their transaction as soon as the next poll sends their acknowledgements) but a checkpoint must
 * finish within the transaction timeout ({@code share.transaction.timeout.ms}, default 60 s).
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
