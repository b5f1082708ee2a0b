package io.lockstep.clients;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Test fixture: the release {@code lockstep} binary on a free loopback port with a fresh data
 * directory ({@code --shards 2}, as tests/common/mod.rs starts it), ready once it prints {@code
 * lockstep ready:}. The binary is the system property {@code lockstep.bin}, else env {@code
 * LOCKSTEP_BIN}, else {@code ../../../../target/release/lockstep} from the module directory.
 * {@link #startWithConfig} starts it from a {@code server.properties} instead (TLS, SASL, ACLs).
 * Shared with the flink module through this module's test-jar.
 */
public final class LockstepBroker implements AutoCloseable {
    private static final Duration START_TIMEOUT = Duration.ofSeconds(30);
    /** Starts tried before giving up (a broker start once hung in a long suite; its output is shown). */
    private static final int START_ATTEMPTS = 2;

    private final Path dir;
    private final int port;
    /** The {@code --config} file, or null for {@code --listen} on {@link #port}. */
    private Path config;
    private Process process;
    private final List<String> output = new ArrayList<>();

    private LockstepBroker(Path dir, int port) {
        this.dir = dir;
        this.port = port;
    }

    public static Path binary() {
        String bin = System.getProperty("lockstep.bin");
        if (bin == null || bin.isBlank() || bin.contains("${")) {
            bin = System.getenv("LOCKSTEP_BIN");
        }
        if (bin == null || bin.isBlank()) {
            bin = "../../../../target/release/lockstep";
        }
        Path p = Paths.get(bin).toAbsolutePath().normalize();
        if (!Files.isExecutable(p)) {
            throw new IllegalStateException("lockstep binary not found at " + p
                    + " (build it with `cargo build --release --bin lockstep`, or set -Dlockstep.bin / LOCKSTEP_BIN)");
        }
        return p;
    }

    public static LockstepBroker start() {
        try {
            return start(Files.createTempDirectory("lockstep-java-"));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Starts a broker with its data under {@code dir} (created if missing; deleted by {@link #close}). */
    public static LockstepBroker start(Path dir) {
        try {
            Files.createDirectories(dir);
            LockstepBroker b = new LockstepBroker(dir, freePort());
            b.launch();
            return b;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private void launch() throws IOException {
        for (int attempt = 1; ; attempt++) {
            try {
                spawn();
                return;
            } catch (IllegalStateException e) {
                if (attempt >= START_ATTEMPTS) {
                    throw e;
                }
                System.out.println("[lockstep-broker] start attempt " + attempt + " failed, retrying: " + e.getMessage());
            }
        }
    }

    /**
     * Starts a broker from a {@code server.properties} text: {@code configText} gets the free port
     * {@link #bootstrap} names (give it to a PLAINTEXT listener) and the data directory (for {@code
     * log.dirs}), and answers the file's text. The file is written into {@code dir}.
     */
    public static LockstepBroker startWithConfig(Path dir, java.util.function.BiFunction<Integer, Path, String> configText) {
        try {
            Files.createDirectories(dir);
            LockstepBroker b = new LockstepBroker(dir, freePort());
            b.config = dir.resolve("server.properties");
            Files.writeString(b.config, configText.apply(b.port, dir.resolve("data")));
            b.launch();
            return b;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** A free loopback port. */
    public static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    private void spawn() throws IOException {
        ProcessBuilder pb = config != null
                ? new ProcessBuilder(binary().toString(), "--config", config.toString(), "--shards", "2")
                : new ProcessBuilder(binary().toString(), "--listen", "127.0.0.1:" + port,
                        "--data-dir", dir.resolve("data").toString(), "--shards", "2",
                        // Classic groups assign at once, as on the Kafka reference broker.
                        "--override", "group.initial.rebalance.delay.ms=0");
        pb.redirectErrorStream(true);
        process = pb.start();
        process.getOutputStream().close();
        CountDownLatch ready = new CountDownLatch(1);
        Process p = process;
        Thread reader = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    synchronized (output) {
                        output.add(line);
                        if (output.size() > 200) {
                            output.remove(0);
                        }
                    }
                    if (line.contains("lockstep ready:")) {
                        ready.countDown();
                    }
                }
            } catch (IOException ignored) {
                // the process ended
            }
        }, "lockstep-output");
        reader.setDaemon(true);
        reader.start();
        try {
            if (!ready.await(START_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS)) {
                process.destroyForcibly();
                process.waitFor(10, TimeUnit.SECONDS);
                throw new IllegalStateException("broker not ready within " + START_TIMEOUT + ":\n" + tail());
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    public String tail() {
        synchronized (output) {
            return String.join("\n", output);
        }
    }

    public String bootstrap() {
        return "127.0.0.1:" + port;
    }

    /** SIGKILLs the broker and starts it again on the same data and port. */
    public void killAndRestart() throws IOException {
        kill();
        restart();
    }

    /** Starts the broker again (after {@link #kill}) on the same data and port. */
    public void restart() throws IOException {
        launch();
    }

    /** Kills the broker (SIGKILL) without restarting it. */
    public void kill() {
        process.destroyForcibly();
        try {
            process.waitFor(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Creates {@code topic} and sets {@code group}'s share.auto.offset.reset to earliest. */
    public void createTopic(String topic, int partitions, String group) {
        createTopic(bootstrap(), topic, partitions, group);
    }

    /** {@link #createTopic(String, int, String)} on any broker (e.g. a Kafka 4.4 for a differential run). */
    public static void createTopic(String bootstrap, String topic, int partitions, String group) {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get(30, TimeUnit.SECONDS);
            if (group != null) {
                setGroupConfig(admin, group, "share.auto.offset.reset", "earliest");
            }
        } catch (InterruptedException | ExecutionException | java.util.concurrent.TimeoutException e) {
            throw new IllegalStateException("topic setup of " + topic + " failed", e);
        }
    }

    /** Sets a share-group config. */
    public void setGroupConfig(String group, String name, String value) {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap()))) {
            setGroupConfig(admin, group, name, value);
        } catch (InterruptedException | ExecutionException | java.util.concurrent.TimeoutException e) {
            throw new IllegalStateException("group config " + name + " of " + group + " failed", e);
        }
    }

    private static void setGroupConfig(Admin admin, String group, String name, String value)
            throws InterruptedException, ExecutionException, java.util.concurrent.TimeoutException {
        ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
        Collection<AlterConfigOp> ops = List.of(new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET));
        admin.incrementalAlterConfigs(Map.of(r, ops)).all().get(30, TimeUnit.SECONDS);
    }

    /** Produces values {@code prefix0 .. prefix(n-1)} round-robin over {@code partitions} partitions. */
    public void produce(String topic, int partitions, String prefix, int n) {
        produce(bootstrap(), topic, partitions, prefix, n);
    }

    /** {@link #produce(String, int, String, int)} to any broker. */
    public static void produce(String bootstrap, String topic, int partitions, String prefix, int n) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("enable.idempotence", "false");
        p.put("linger.ms", "0");
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < n; i++) {
                producer.send(new ProducerRecord<>(topic, i % partitions, "k" + i, prefix + i)).get(30, TimeUnit.SECONDS);
            }
        } catch (InterruptedException | ExecutionException | java.util.concurrent.TimeoutException e) {
            throw new IllegalStateException("produce to " + topic + " failed", e);
        }
    }

    @Override
    public void close() {
        if (process != null) {
            process.destroyForcibly();
            try {
                process.waitFor(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        try (Stream<Path> files = Files.walk(dir)) {
            files.sorted(Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        } catch (IOException ignored) {
            // best effort
        }
    }
}
