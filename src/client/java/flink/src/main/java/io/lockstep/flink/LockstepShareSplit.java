package io.lockstep.flink;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import org.apache.flink.api.connector.source.SourceSplit;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * A reader's checkpointed state. A share group has no splits to hand out (the broker spreads
 * partitions over the members), so each reader makes up its own "split" to be checkpointed: it
 * names the reader's subtask and the checkpoint it was taken in. A reader restored from it knows
 * which checkpoint it was restored from, which is what its recovery needs ({@link
 * TransactionIds#decide}).
 */
public final class LockstepShareSplit implements SourceSplit {
    private final int subtask;
    private final long checkpointId;

    public LockstepShareSplit(int subtask, long checkpointId) {
        this.subtask = subtask;
        this.checkpointId = checkpointId;
    }

    /** The subtask whose state this is. */
    public int subtask() {
        return subtask;
    }

    /** The checkpoint this state belongs to. */
    public long checkpointId() {
        return checkpointId;
    }

    @Override
    public String splitId() {
        return "lockstep-reader-" + subtask;
    }

    @Override
    public String toString() {
        return "LockstepShareSplit(subtask=" + subtask + ", checkpoint=" + checkpointId + ")";
    }

    /** Version 1: int subtask, long checkpoint id. */
    static final class Serializer implements SimpleVersionedSerializer<LockstepShareSplit> {
        static final Serializer INSTANCE = new Serializer();

        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(LockstepShareSplit split) throws IOException {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream(12);
            try (DataOutputStream out = new DataOutputStream(bytes)) {
                out.writeInt(split.subtask);
                out.writeLong(split.checkpointId);
            }
            return bytes.toByteArray();
        }

        @Override
        public LockstepShareSplit deserialize(int version, byte[] serialized) throws IOException {
            if (version != 1) {
                throw new IOException("unknown LockstepShareSplit version " + version);
            }
            try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(serialized))) {
                return new LockstepShareSplit(in.readInt(), in.readLong());
            }
        }
    }
}
