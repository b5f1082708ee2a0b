package io.lockstep.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import io.lockstep.clients.LockstepBroker;
import io.lockstep.clients.LockstepShareTransactionCoordinator;
import io.lockstep.clients.PendingTransaction;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExternalizedCheckpointRetention;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.SavepointRestoreSettings;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.io.TempDir;

/**
 * End to end: a Flink job on a MiniCluster (2 task managers) reads N records from a Lockstep
 * share group (4 partitions, parallelism 2, a checkpoint every 500 ms) into an exactly-once sink
 * while failures are injected: a map function throws twice (the task restarts from the last
 * checkpoint), a task manager is terminated (and a new one started), and the broker is SIGKILLed and
 * restarted on the same port and data directory. The sink's published output holds every record
 * exactly once.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class ExactlyOnceMiniClusterTest {
    private static final int RECORDS = 20_000;
    private static final int PARTITIONS = 4;
    private static final int PARALLELISM = 2;
    /** The map throws when its run-wide count of processed records reaches a multiple of this (twice). */
    private static final long THROW_EVERY_RECORDS = 4_000;
    private static final int THROWS = 2;
    private static final Duration DEADLINE = Duration.ofSeconds(150);
    /** The map sleeps this long per record, so that the faults land while records are in flight
     *  (about 2 000 records/s with parallelism 2: 10 s of work without faults). */
    private static final long MAP_SLEEP_MS = 1;

    /** Per run: records processed by the map (over all attempts) and throws done. */
    static final Map<String, AtomicLong> PROCESSED = new java.util.concurrent.ConcurrentHashMap<>();
    static final Map<String, AtomicInteger> THROWN = new java.util.concurrent.ConcurrentHashMap<>();

    @TempDir
    Path tmp;

    @Test
    @Order(1)
    void everyRecordExactlyOnceUnderTaskBrokerAndTaskManagerFailures() throws Exception {
        String run = "p15flink-eo-" + UUID.randomUUID().toString().substring(0, 8);
        PROCESSED.put(run, new AtomicLong());
        THROWN.put(run, new AtomicInteger());
        long started = System.nanoTime();
        try (LockstepBroker broker = LockstepBroker.start(tmp.resolve("broker"))) {
            produce(broker.bootstrap(), run, RECORDS);

            Configuration conf = new Configuration();
            conf.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
            conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, 1_000);
            conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ofMillis(200));
            conf.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MemorySize.parse("16m"));
            MiniCluster cluster = new MiniCluster(new MiniClusterConfiguration.Builder()
                    .setConfiguration(conf).setNumTaskManagers(2).setNumSlotsPerTaskManager(PARALLELISM).build());
            cluster.start();
            try {
                JobGraph job = jobGraph(conf, broker.bootstrap(), run, PARALLELISM);
                JobID id = cluster.submitJob(job).get().getJobID();

                LongSupplier published = () -> distinct(run);
                waitFor(cluster, id, started, "a third published", () -> published.getAsLong() >= RECORDS / 3);
                System.out.println("[flink-eo] terminating a task manager at " + published.getAsLong() + " published");
                cluster.terminateTaskManager(0).get(60, TimeUnit.SECONDS);
                cluster.startTaskManager();
                waitFor(cluster, id, started, "two thirds published", () -> published.getAsLong() >= 2L * RECORDS / 3);
                System.out.println("[flink-eo] SIGKILL broker at " + published.getAsLong() + " published");
                broker.kill();
                Thread.sleep(500);
                broker.restart();
                waitFor(cluster, id, started, "all published", () -> published.getAsLong() >= RECORDS);
                // A few more checkpoints: anything redelivered by mistake would be published now.
                Thread.sleep(3_000);
                cluster.cancelJob(id).get(30, TimeUnit.SECONDS);
            } finally {
                cluster.close();
            }
        }

        assertExactlyOnce(run, RECORDS, started);
        assertEquals(THROWS, THROWN.get(run).get(), "the map threw as planned");
    }

    /**
     * A restore with another parallelism from a retained checkpoint: a job with parallelism 3 is
     * cancelled mid-stream (its readers leave ONGOING and maybe PREPARE transactions of subtasks 0-2
     * behind), and the same job is submitted with parallelism 1, restored from the job's last
     * retained checkpoint. Its enumerator's recovery must end the transactions of all three old
     * subtasks (committing those of completed checkpoints), and the output of both runs together
     * holds every record exactly once.
     */
    @Test
    @Order(2)
    void restoreWithAnotherParallelismRecoversEveryOldSubtask() throws Exception {
        String run = "p15flink-rescale-" + UUID.randomUUID().toString().substring(0, 8);
        int records = 6_000;
        PROCESSED.put(run, new AtomicLong());
        THROWN.put(run, new AtomicInteger(THROWS)); // no injected map failures here
        long started = System.nanoTime();
        Path checkpoints = tmp.resolve("checkpoints");
        try (LockstepBroker broker = LockstepBroker.start(tmp.resolve("broker"));
                LockstepShareTransactionCoordinator coordinator = coordinator(broker.bootstrap(), run)) {
            produce(broker.bootstrap(), run, records);
            Configuration conf = new Configuration();
            conf.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
            conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, 1_000);
            conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ofMillis(200));
            conf.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MemorySize.parse("16m"));
            conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, checkpoints.toUri().toString());
            conf.set(CheckpointingOptions.EXTERNALIZED_CHECKPOINT_RETENTION,
                    ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION);
            MiniCluster cluster = new MiniCluster(new MiniClusterConfiguration.Builder()
                    .setConfiguration(conf).setNumTaskManagers(1).setNumSlotsPerTaskManager(3).build());
            cluster.start();
            List<String> leftBehind;
            try {
                JobID first = cluster.submitJob(jobGraph(conf, broker.bootstrap(), run, 3)).get().getJobID();
                waitFor(cluster, first, started, "a third published", () -> distinct(run) >= records / 3);
                cluster.cancelJob(first).get(30, TimeUnit.SECONDS);
                waitTerminal(cluster, first);
                leftBehind = new ArrayList<>();
                for (PendingTransaction t : coordinator.listPendingTransactions(run)) {
                    leftBehind.add(t.id + " " + t.state);
                }
                Path retained = latestCheckpoint(checkpoints.resolve(first.toString()));
                System.out.printf("[flink-eo] %s: cancelled parallelism 3 at %d published; pending: %s; restoring %s"
                        + " with parallelism 1%n", run, distinct(run), leftBehind, retained.getFileName());

                JobGraph second = jobGraph(conf, broker.bootstrap(), run, 1);
                second.setSavepointRestoreSettings(SavepointRestoreSettings.forPath(retained.toString(), false));
                JobID id = cluster.submitJob(second).get().getJobID();
                waitFor(cluster, id, started, "all published", () -> distinct(run) >= records);
                Thread.sleep(2_000);
                for (PendingTransaction t : coordinator.listPendingTransactions(run)) {
                    for (String old : leftBehind) {
                        assertTrue(!old.startsWith(t.id + " "), "still pending after the restore: " + t);
                    }
                }
                cluster.cancelJob(id).get(30, TimeUnit.SECONDS);
            } finally {
                cluster.close();
            }
        }
        assertExactlyOnce(run, records, started);
    }

    /**
     * Three readers share a group whose {@code share.transaction.max.pending} is 2: begins are
     * refused with CONCURRENT_TRANSACTIONS whenever two transactions are ONGOING or PREPARE; a
     * refused reader keeps its polled records and retries after the others' commits, without
     * blocking its task thread (checkpoints go on). Every record arrives exactly once.
     */
    @Test
    @Order(3)
    void readersWaitForTransactionSlotsWhenMaxPendingIsReached() throws Exception {
        String run = "p15flink-pending-" + UUID.randomUUID().toString().substring(0, 8);
        int records = 1_000;
        PROCESSED.put(run, new AtomicLong());
        THROWN.put(run, new AtomicInteger(THROWS)); // no injected map failures here
        long started = System.nanoTime();
        try (LockstepBroker broker = LockstepBroker.start(tmp.resolve("broker"))) {
            produce(broker.bootstrap(), run, records);
            Configuration conf = new Configuration();
            conf.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MemorySize.parse("16m"));
            MiniCluster cluster = new MiniCluster(new MiniClusterConfiguration.Builder()
                    .setConfiguration(conf).setNumTaskManagers(1).setNumSlotsPerTaskManager(3).build());
            cluster.start();
            try {
                JobID id = cluster.submitJob(jobGraph(conf, broker.bootstrap(), run, 3, 2)).get().getJobID();
                waitFor(cluster, id, started, "all published", () -> distinct(run) >= records);
                Thread.sleep(2_000);
                cluster.cancelJob(id).get(30, TimeUnit.SECONDS);
            } finally {
                cluster.close();
            }
        }
        assertExactlyOnce(run, records, started);
    }

    private static LockstepShareTransactionCoordinator coordinator(String bootstrap, String group) {
        Properties p = new Properties();
        p.setProperty("bootstrap.servers", bootstrap);
        p.setProperty("group.id", group);
        return new LockstepShareTransactionCoordinator(p);
    }

    private static void waitTerminal(MiniCluster cluster, JobID id) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!cluster.getJobStatus(id).get(30, TimeUnit.SECONDS).isGloballyTerminalState()) {
            assertTrue(System.nanoTime() < deadline, "job " + id + " did not end");
            Thread.sleep(50);
        }
    }

    /** The retained checkpoint with the highest id under a job's checkpoint directory. */
    private static Path latestCheckpoint(Path jobDir) throws java.io.IOException {
        try (java.util.stream.Stream<Path> dirs = java.nio.file.Files.list(jobDir)) {
            return dirs.filter(d -> d.getFileName().toString().startsWith("chk-")
                            && java.nio.file.Files.exists(d.resolve("_metadata")))
                    .max(java.util.Comparator.comparingLong(
                            d -> Long.parseLong(d.getFileName().toString().substring(4))))
                    .orElseThrow(() -> new AssertionError("no retained checkpoint under " + jobDir));
        }
    }

    /** Source (the run's group and topic) → throttled map that may throw → the committed-output sink. */
    private static JobGraph jobGraph(Configuration conf, String bootstrap, String run, int parallelism) {
        return jobGraph(conf, bootstrap, run, parallelism, 0);
    }

    private static JobGraph jobGraph(Configuration conf, String bootstrap, String run, int parallelism,
            int maxPending) {
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(parallelism);
        env.enableCheckpointing(500, CheckpointingMode.EXACTLY_ONCE);
        LockstepShareSourceBuilder<String> builder = LockstepShareSource.<String>builder()
                .setBootstrapServers(bootstrap)
                .setGroupId(run)
                .setTopics(run)
                .setValueDeserializer(new SimpleStringSchema())
                .setTransactionalIdPrefix("job")
                .setStartingOffsetEarliest()
                .setGroupConfig("share.record.lock.duration.ms", "15000");
        if (maxPending > 0) {
            builder.setMaxPendingTransactions(maxPending);
        }
        LockstepShareSource<String> source = builder.build();
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "lockstep")
                .map(new FailingMap(run)).name("failing-map")
                .sinkTo(new CommittedOutputSink(run)).name("committed-output");
        return env.getStreamGraph().getJobGraph();
    }

    private static void assertExactlyOnce(String run, int records, long startedNs) {
        Map<String, Integer> counts = new HashMap<>();
        long total = 0;
        for (List<String> batch : CommittedOutputSink.published(run)) {
            for (String v : batch) {
                counts.merge(v, 1, Integer::sum);
                total++;
            }
        }
        List<String> duplicated = new ArrayList<>();
        List<String> missing = new ArrayList<>();
        for (int i = 0; i < records; i++) {
            Integer c = counts.get(Integer.toString(i));
            if (c == null) {
                missing.add(Integer.toString(i));
            } else if (c > 1) {
                duplicated.add(i + "x" + c);
            }
        }
        System.out.printf("[flink-eo] %s: %d records, %d published in %d batches, map processed %d (%d throws), %.1f s%n",
                run, records, total, CommittedOutputSink.published(run).size(), PROCESSED.get(run).get(),
                THROWN.get(run).get(), (System.nanoTime() - startedNs) / 1e9);
        assertTrue(missing.isEmpty(), "missing: " + head(missing));
        assertTrue(duplicated.isEmpty(), "duplicated: " + head(duplicated));
        assertEquals(records, counts.size());
        assertEquals(records, total);
    }

    private static List<String> head(List<String> l) {
        return l.subList(0, Math.min(20, l.size()));
    }

    private static long distinct(String run) {
        java.util.Set<String> seen = new java.util.HashSet<>();
        for (List<String> batch : CommittedOutputSink.published(run)) {
            seen.addAll(batch);
        }
        return seen.size();
    }

    private static void waitFor(MiniCluster cluster, JobID id, long startedNs, String what,
            java.util.function.BooleanSupplier condition) throws Exception {
        waitFor(cluster, id, startedNs, what, condition, "");
    }

    private static void waitFor(MiniCluster cluster, JobID id, long startedNs, String what,
            java.util.function.BooleanSupplier condition, String detail) throws Exception {
        while (!condition.getAsBoolean()) {
            JobStatus status = cluster.getJobStatus(id).get(30, TimeUnit.SECONDS);
            if (status.isGloballyTerminalState()) {
                fail("job ended (" + status + ") before " + what + ": "
                        + cluster.requestJobResult(id).get().getSerializedThrowable());
            }
            if (System.nanoTime() - startedNs > DEADLINE.toNanos()) {
                fail("not " + what + " within " + DEADLINE + " " + detail);
            }
            Thread.sleep(100);
        }
    }

    private static void produce(String bootstrap, String topic, int records) throws Exception {
        Properties p = new Properties();
        p.setProperty("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(p)) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get(30, TimeUnit.SECONDS);
        }
        p.setProperty("acks", "all");
        p.setProperty("linger.ms", "5");
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < records; i++) {
                producer.send(new ProducerRecord<>(topic, i % PARTITIONS, null, Integer.toString(i)));
            }
            producer.flush();
        }
    }

    /** Passes values through; throws when the run-wide processed count hits a multiple of THROW_EVERY_RECORDS. */
    static final class FailingMap implements MapFunction<String, String> {
        private static final long serialVersionUID = 1L;
        private final String run;

        FailingMap(String run) {
            this.run = run;
        }

        @Override
        public String map(String value) throws InterruptedException {
            Thread.sleep(MAP_SLEEP_MS);
            long n = PROCESSED.get(run).incrementAndGet();
            if (n % THROW_EVERY_RECORDS != 0) {
                return value;
            }
            AtomicInteger thrown = THROWN.get(run);
            int t;
            do {
                t = thrown.get();
                if (t >= THROWS) {
                    return value;
                }
            } while (!thrown.compareAndSet(t, t + 1));
            System.out.println("[flink-eo] map throws at processed record " + n);
            throw new IllegalStateException("injected failure at processed record " + n);
        }
    }
}
