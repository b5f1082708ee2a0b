package io.lockstep.flink.example;

import io.lockstep.clients.LockstepShareTransactionCoordinator;
import io.lockstep.clients.PendingTransaction;
import io.lockstep.flink.LockstepShareSource;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Stream;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.api.connector.sink2.Committer;
import org.apache.flink.api.connector.sink2.CommitterInitContext;
import org.apache.flink.api.connector.sink2.CommittingSinkWriter;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.SupportsCommitter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.io.SimpleVersionedSerializer;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The README's Flink example ({@code tools/flink-example.sh} runs it against a broker it starts):
 * produces 1 000 orders, runs a local Flink job (parallelism 2, a checkpoint every 500 ms) that
 * reads them from a Lockstep share group with {@link LockstepShareSource} into an exactly-once file
 * sink while its map fails once, then runs the job a second time on the same group, and prints what
 * happened: every order in the output exactly once, nothing delivered to the second run.
 *
 * <p>Arguments: {@code BOOTSTRAP OUTPUT_DIR}.
 */
public final class ShareSourceExample {
    private static final int ORDERS = 1_000;
    private static final String TOPIC = "orders";
    private static final String GROUP = "orders-to-files";

    private ShareSourceExample() {}

    public static void main(String[] args) throws Exception {
        String bootstrap = args.length > 0 ? args[0] : "127.0.0.1:9092";
        Path out = Path.of(args.length > 1 ? args[1] : "flink-example-output");
        Files.createDirectories(out);

        Properties p = new Properties();
        p.setProperty("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(p)) {
            admin.createTopics(List.of(new NewTopic(TOPIC, 4, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < ORDERS; i++) {
                producer.send(new ProducerRecord<>(TOPIC, "order-" + i));
            }
        }
        say("produced %d orders to topic '%s' (4 partitions) on %s", ORDERS, TOPIC, bootstrap);

        say("run 1: Flink job (parallelism 2, checkpoint every 500 ms), share group '%s'; the map fails once at order 500", GROUP);
        runJob(bootstrap, out, true, ORDERS);
        Map<String, Integer> counts = readOutput(out);
        long total = counts.values().stream().mapToLong(Integer::longValue).sum();
        long dup = counts.values().stream().filter(c -> c > 1).count();
        say("run 1 done: output holds %d lines, %d distinct orders, %d duplicated (in %s)", total, counts.size(), dup, out);

        Properties cp = new Properties();
        cp.setProperty("bootstrap.servers", bootstrap);
        cp.setProperty("group.id", GROUP);
        try (LockstepShareTransactionCoordinator coordinator = new LockstepShareTransactionCoordinator(cp)) {
            List<PendingTransaction> pending = coordinator.listPendingTransactions(GROUP);
            say("after cancelling run 1, %d share transaction(s) pending: %s", pending.size(), pending);
            say("run 2: the same job again; its recovery ends those (PREPARE of a completed checkpoint -> commit,"
                    + " anything else -> abort), then it reads for 5 s");
            runJob(bootstrap, out, false, -1);
            Map<String, Integer> after = readOutput(out);
            long total2 = after.values().stream().mapToLong(Integer::longValue).sum();
            say("run 2 done: output holds %d lines (%+d): no order delivered again", total2, total2 - total);
            say("pending share transactions now: %s", coordinator.listPendingTransactions(GROUP));
            boolean ok = after.size() == ORDERS && total2 == ORDERS;
            say(ok ? "OK: every order exactly once" : "UNEXPECTED: see the output directory");
            System.exit(ok ? 0 : 1);
        }
    }

    private static void runJob(String bootstrap, Path out, boolean failOnce, int expected) throws Exception {
        Configuration conf = new Configuration();
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
        conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, 10);
        conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ofMillis(200));
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(2, conf);
        env.enableCheckpointing(500, CheckpointingMode.EXACTLY_ONCE);
        LockstepShareSource<String> source = LockstepShareSource.<String>builder()
                .setBootstrapServers(bootstrap)
                .setGroupId(GROUP)
                .setTopics(TOPIC)
                .setValueDeserializer(new SimpleStringSchema())
                .setTransactionalIdPrefix("example")
                .setStartingOffsetEarliest()
                .build();
        FAIL_ONCE.set(failOnce);
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "lockstep-orders")
                .map(new Enrich())
                .sinkTo(new FileBatchSink(out.toAbsolutePath().toString()));
        JobClient job = env.executeAsync(failOnce ? "orders-run-1" : "orders-run-2");
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        if (expected > 0) {
            while (readOutput(out).size() < expected && System.nanoTime() < deadline) {
                Thread.sleep(100);
            }
            Thread.sleep(1_500); // a few more checkpoints: their transactions commit
        } else {
            Thread.sleep(5_000);
        }
        job.cancel().get(30, TimeUnit.SECONDS);
    }

    static final AtomicBoolean FAIL_ONCE = new AtomicBoolean();

    /** Tags each order; throws once at order-500 in run 1. */
    static final class Enrich implements MapFunction<String, String> {
        private static final long serialVersionUID = 1L;

        @Override
        public String map(String order) {
            if (order.equals("order-500") && FAIL_ONCE.compareAndSet(true, false)) {
                System.out.println("[example] map fails at order-500: the job restarts from its last checkpoint");
                throw new IllegalStateException("injected failure");
            }
            return order;
        }
    }

    static Map<String, Integer> readOutput(Path out) throws IOException {
        Map<String, Integer> counts = new HashMap<>();
        try (Stream<Path> files = Files.list(out)) {
            for (Path f : (Iterable<Path>) files.filter(f -> f.toString().endsWith(".txt"))::iterator) {
                for (String line : Files.readAllLines(f, StandardCharsets.UTF_8)) {
                    counts.merge(line, 1, Integer::sum);
                }
            }
        }
        return counts;
    }

    private static void say(String format, Object... args) {
        System.out.println("[example] " + String.format(format, args));
    }

    /**
     * An exactly-once file sink (Flink's two-phase Sink V2): each checkpoint's lines go to one file
     * named by a random batch id, written (temp file + rename) only when the checkpoint completes,
     * and never twice.
     */
    static final class FileBatchSink implements Sink<String>, SupportsCommitter<String> {
        private static final long serialVersionUID = 1L;
        private final String dir;

        FileBatchSink(String dir) {
            this.dir = dir;
        }

        @Override
        public SinkWriter<String> createWriter(WriterInitContext context) {
            return new CommittingSinkWriter<String, String>() {
                private StringBuilder open = new StringBuilder();

                @Override
                public void write(String line, Context c) {
                    open.append(line).append('\n');
                }

                @Override
                public void flush(boolean endOfInput) {}

                @Override
                public Collection<String> prepareCommit() {
                    if (open.length() == 0) {
                        return List.of();
                    }
                    String committable = UUID.randomUUID() + "\n" + open;
                    open = new StringBuilder();
                    return List.of(committable);
                }

                @Override
                public void close() {}
            };
        }

        @Override
        public Committer<String> createCommitter(CommitterInitContext context) {
            return new Committer<>() {
                @Override
                public void commit(Collection<CommitRequest<String>> requests) throws IOException {
                    for (CommitRequest<String> r : requests) {
                        String c = r.getCommittable();
                        int nl = c.indexOf('\n');
                        Path target = Path.of(dir, "batch-" + c.substring(0, nl) + ".txt");
                        if (Files.exists(target)) {
                            continue;
                        }
                        Path tmp = Path.of(dir, ".tmp-" + c.substring(0, nl));
                        Files.writeString(tmp, c.substring(nl + 1), StandardCharsets.UTF_8);
                        Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE);
                    }
                }

                @Override
                public void close() {}
            };
        }

        @Override
        public SimpleVersionedSerializer<String> getCommittableSerializer() {
            return new SimpleVersionedSerializer<>() {
                @Override
                public int getVersion() {
                    return 1;
                }

                @Override
                public byte[] serialize(String s) {
                    return s.getBytes(StandardCharsets.UTF_8);
                }

                @Override
                public String deserialize(int version, byte[] bytes) {
                    return new String(bytes, StandardCharsets.UTF_8);
                }
            };
        }
    }

}
