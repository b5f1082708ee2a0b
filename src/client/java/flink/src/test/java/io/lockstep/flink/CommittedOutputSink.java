package io.lockstep.flink;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.flink.api.connector.sink2.Committer;
import org.apache.flink.api.connector.sink2.CommitterInitContext;
import org.apache.flink.api.connector.sink2.CommittingSinkWriter;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.SupportsCommitter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * The test's exactly-once sink (Flink's two-phase Sink V2): a writer collects the values of one
 * checkpoint into a batch with a random id; the committer publishes a batch once its checkpoint
 * completes (also after a restore, from the committer's state), idempotently by batch id. What
 * was published is what the job's output holds: a value appears twice only if the source emitted
 * it in two completed checkpoints.
 */
final class CommittedOutputSink implements Sink<String>, SupportsCommitter<CommittedOutputSink.Batch> {
    private static final long serialVersionUID = 1L;

    /** Published batches per run (the MiniCluster runs in the test's JVM): run → batch id → values. */
    static final Map<String, Map<String, List<String>>> PUBLISHED = new ConcurrentHashMap<>();

    private final String run;

    CommittedOutputSink(String run) {
        this.run = run;
        PUBLISHED.putIfAbsent(run, new ConcurrentHashMap<>());
    }

    /** Everything published in {@code run}. */
    static Collection<List<String>> published(String run) {
        return PUBLISHED.getOrDefault(run, Map.of()).values();
    }

    static final class Batch {
        final String id;
        final List<String> values;

        Batch(String id, List<String> values) {
            this.id = id;
            this.values = values;
        }
    }

    @Override
    public SinkWriter<String> createWriter(WriterInitContext context) {
        return new Writer();
    }

    @Override
    public Committer<Batch> createCommitter(CommitterInitContext context) {
        return new Publisher(run);
    }

    @Override
    public SimpleVersionedSerializer<Batch> getCommittableSerializer() {
        return new BatchSerializer();
    }

    private static final class Writer implements CommittingSinkWriter<String, Batch> {
        private List<String> open = new ArrayList<>();

        @Override
        public void write(String value, Context context) {
            open.add(value);
        }

        @Override
        public void flush(boolean endOfInput) {}

        @Override
        public Collection<Batch> prepareCommit() {
            if (open.isEmpty()) {
                return Collections.emptyList();
            }
            Batch b = new Batch(UUID.randomUUID().toString(), open);
            open = new ArrayList<>();
            return List.of(b);
        }

        @Override
        public void close() {}
    }

    private static final class Publisher implements Committer<Batch> {
        private final String run;

        Publisher(String run) {
            this.run = run;
        }

        @Override
        public void commit(Collection<CommitRequest<Batch>> requests) {
            Map<String, List<String>> out = PUBLISHED.computeIfAbsent(run, r -> new ConcurrentHashMap<>());
            for (CommitRequest<Batch> r : requests) {
                out.putIfAbsent(r.getCommittable().id, List.copyOf(r.getCommittable().values));
            }
        }

        @Override
        public void close() {}
    }

    private static final class BatchSerializer implements SimpleVersionedSerializer<Batch> {
        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(Batch b) throws IOException {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            try (DataOutputStream out = new DataOutputStream(bytes)) {
                out.writeUTF(b.id);
                out.writeInt(b.values.size());
                for (String v : b.values) {
                    out.writeUTF(v);
                }
            }
            return bytes.toByteArray();
        }

        @Override
        public Batch deserialize(int version, byte[] serialized) throws IOException {
            try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(serialized))) {
                String id = in.readUTF();
                int n = in.readInt();
                List<String> values = new ArrayList<>(n);
                for (int i = 0; i < n; i++) {
                    values.add(in.readUTF());
                }
                return new Batch(id, values);
            }
        }
    }
}
