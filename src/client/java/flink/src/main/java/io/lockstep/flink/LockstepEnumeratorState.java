package io.lockstep.flink;

import java.nio.ByteBuffer;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * The enumerator's checkpointed state: the id of the checkpoint it was taken in. An enumerator
 * restored from it runs the recovery of every subtask's transactions against that id.
 */
public final class LockstepEnumeratorState {
    private final long checkpointId;

    public LockstepEnumeratorState(long checkpointId) {
        this.checkpointId = checkpointId;
    }

    /** The checkpoint this state was taken in. */
    public long checkpointId() {
        return checkpointId;
    }

    @Override
    public String toString() {
        return "LockstepEnumeratorState(checkpoint=" + checkpointId + ")";
    }

    /** Version 1: long checkpoint id. */
    static final class Serializer implements SimpleVersionedSerializer<LockstepEnumeratorState> {
        static final Serializer INSTANCE = new Serializer();

        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(LockstepEnumeratorState state) {
            return ByteBuffer.allocate(Long.BYTES).putLong(state.checkpointId).array();
        }

        @Override
        public LockstepEnumeratorState deserialize(int version, byte[] serialized) throws java.io.IOException {
            if (version != 1 || serialized.length != Long.BYTES) {
                throw new java.io.IOException("unknown LockstepEnumeratorState version " + version
                        + " (" + serialized.length + " bytes)");
            }
            return new LockstepEnumeratorState(ByteBuffer.wrap(serialized).getLong());
        }
    }
}
