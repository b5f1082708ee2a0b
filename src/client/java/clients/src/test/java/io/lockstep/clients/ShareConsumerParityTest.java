package io.lockstep.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;
import java.util.function.Function;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * {@link LockstepShareConsumer} behaves as Kafka 4.4's {@link KafkaShareConsumer}: one scenario
 * runs through the {@link ShareConsumer} interface with each, and the transcripts of what they
 * observed (records, delivery counts, which calls throw what) must be equal. Against the release
 * broker by default; {@code -Dparity.bootstrap=HOST:PORT} runs it against another broker (e.g. the
 * Kafka 4.4 reference, {@code tools/kafka-reference.sh}), which proves the same of Kafka itself.
 */
class ShareConsumerParityTest {
    private static final Duration DELIVERY_WAIT = Duration.ofSeconds(30);
    private static LockstepBroker broker;
    private static String bootstrap;

    @BeforeAll
    static void start() {
        bootstrap = System.getProperty("parity.bootstrap");
        if (bootstrap == null || bootstrap.isBlank()) {
            broker = LockstepBroker.start();
            bootstrap = broker.bootstrap();
        }
    }

    @AfterAll
    static void stop() {
        if (broker != null) {
            broker.close();
        }
    }

    /** A topic with one partition holding v0..v(n-1), for a share group reading from the start. */
    private static void setup(String topic, String group, int n) throws Exception {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, group),
                    List.of(new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"),
                            AlterConfigOp.OpType.SET)))).all().get();
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("enable.idempotence", "false");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < n; i++) {
                producer.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i)).get();
            }
        }
    }

    private static Properties props(String group, String mode) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", mode);
        p.put("enable.metrics.push", "false");
        return p;
    }

    private static String outcome(Runnable r) {
        try {
            r.run();
            return "ok";
        } catch (RuntimeException e) {
            return e.getClass().getSimpleName();
        }
    }

    /** The scenario; returns what it observed. */
    private static List<String> explicitScenario(ShareConsumer<String, String> c, String topic) {
        List<String> t = new ArrayList<>();
        c.subscribe(List.of(topic));
        t.add("subscription " + c.subscription());
        t.add("first poll: " + outcome(() -> c.poll(Duration.ZERO)));
        Map<Long, String> first = new TreeMap<>();
        List<ConsumerRecord<String, String>> previous = new ArrayList<>();
        boolean checkedRefusal = false;
        long deadline = System.currentTimeMillis() + DELIVERY_WAIT.toMillis();
        while (first.size() < 3 && System.currentTimeMillis() < deadline) {
            ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(500));
            if (rs.isEmpty()) {
                continue;
            }
            if (!checkedRefusal) {
                t.add("poll before acknowledging: " + outcome(() -> c.poll(Duration.ZERO)));
                checkedRefusal = true;
            }
            for (ConsumerRecord<String, String> r : rs) {
                first.put(r.offset(), r.value() + " key=" + r.key() + " dc=" + r.deliveryCount());
                c.acknowledge(r);
                if (r.offset() == 1) {
                    t.add("ACCEPT then RELEASE: " + outcome(() -> c.acknowledge(r, AcknowledgeType.RELEASE)));
                }
                previous.add(r);
            }
        }
        t.add("first delivery " + first);
        t.add("lock timeout " + c.acquisitionLockTimeoutMs());
        Map<Long, String> again = new TreeMap<>();
        deadline = System.currentTimeMillis() + DELIVERY_WAIT.toMillis();
        boolean checkedOld = false;
        while (again.isEmpty() && System.currentTimeMillis() < deadline) {
            ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(500));
            if (!checkedOld) {
                t.add("acknowledge a record of an earlier poll: "
                        + outcome(() -> c.acknowledge(previous.get(0), AcknowledgeType.ACCEPT)));
                checkedOld = true;
            }
            for (ConsumerRecord<String, String> r : rs) {
                again.put(r.offset(), r.value() + " dc=" + r.deliveryCount());
                c.acknowledge(r, AcknowledgeType.REJECT);
            }
        }
        t.add("redelivered " + again);
        Map<String, Optional<String>> committed = new TreeMap<>();
        c.commitSync().forEach((tip, e) -> committed.put(tip.topic() + "-" + tip.partition(),
                e.map(x -> x.getClass().getSimpleName())));
        t.add("commitSync " + committed);
        t.add("commitSync with nothing pending " + c.commitSync());
        Map<Long, String> more = new TreeMap<>();
        long quiet = System.currentTimeMillis() + 2_000;
        while (System.currentTimeMillis() < quiet) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                more.put(r.offset(), r.value());
                c.acknowledge(r);
            }
        }
        t.add("afterwards " + more);
        c.unsubscribe();
        t.add("subscription after unsubscribe " + c.subscription());
        t.add("poll after unsubscribe: " + outcome(() -> c.poll(Duration.ZERO)));
        c.close();
        t.add("close twice: " + outcome(c::close));
        t.add("poll after close: " + outcome(() -> c.poll(Duration.ZERO)));
        return t;
    }

    private static List<String> implicitScenario(ShareConsumer<String, String> c, String topic) {
        List<String> t = new ArrayList<>();
        c.subscribe(List.of(topic));
        Map<Long, String> got = new TreeMap<>();
        long deadline = System.currentTimeMillis() + DELIVERY_WAIT.toMillis();
        ConsumerRecord<String, String> one = null;
        while (got.size() < 3 && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                got.put(r.offset(), r.value() + " dc=" + r.deliveryCount());
                one = r;
            }
        }
        t.add("delivered " + got);
        ConsumerRecord<String, String> last = one;
        t.add("acknowledge in implicit mode: " + outcome(() -> c.acknowledge(last)));
        t.add("wakeup then poll: " + outcome(() -> {
            c.wakeup();
            c.poll(Duration.ofSeconds(5));
        }));
        Map<Long, String> more = new TreeMap<>();
        long quiet = System.currentTimeMillis() + 2_000;
        while (System.currentTimeMillis() < quiet) {
            c.poll(Duration.ofMillis(200)).forEach(r -> more.put(r.offset(), r.value()));
        }
        t.add("afterwards " + more);
        c.close();
        return t;
    }

    private static void compare(String name, int records,
            Function<ShareConsumer<String, String>, List<String>> scenario,
            Function<Properties, ShareConsumer<String, String>> kafka,
            Function<Properties, ShareConsumer<String, String>> ours, String mode) throws Exception {
        String suffix = Long.toString(System.nanoTime() % 1_000_000);
        String kt = "jp-" + name + "-kafka-" + suffix;
        String ot = "jp-" + name + "-ours-" + suffix;
        setup(kt, kt, records);
        setup(ot, ot, records);
        List<String> fromKafka = scenario.apply(kafka.apply(props(kt, mode))).stream()
                .map(s -> s.replace(kt, "TOPIC")).toList();
        List<String> fromOurs = scenario.apply(ours.apply(props(ot, mode))).stream()
                .map(s -> s.replace(ot, "TOPIC")).toList();
        if (Boolean.getBoolean("parity.print")) {
            System.out.println("== " + name + "\n" + String.join("\n", fromOurs));
        }
        assertEquals(String.join("\n", fromKafka), String.join("\n", fromOurs));
    }

    @Test
    void explicitModeMatchesKafkasShareConsumer() throws Exception {
        compare("expl", 3, c -> explicitScenario(c, topicOf(c)),
                p -> withTopic(new KafkaShareConsumer<>(p, new StringDeserializer(), new StringDeserializer()), p),
                p -> withTopic(new LockstepShareConsumer<>(p, new StringDeserializer(), new StringDeserializer()), p),
                "explicit");
    }

    @Test
    void implicitModeMatchesKafkasShareConsumer() throws Exception {
        compare("impl", 3, c -> implicitScenario(c, topicOf(c)),
                p -> withTopic(new KafkaShareConsumer<>(p, new StringDeserializer(), new StringDeserializer()), p),
                p -> withTopic(new LockstepShareConsumer<>(p, new StringDeserializer(), new StringDeserializer()), p),
                "implicit");
    }

    // Each group reads the topic of its own name.
    private static final Map<ShareConsumer<String, String>, String> TOPICS = new java.util.IdentityHashMap<>();

    private static ShareConsumer<String, String> withTopic(ShareConsumer<String, String> c, Properties p) {
        TOPICS.put(c, p.getProperty("group.id"));
        return c;
    }

    private static String topicOf(ShareConsumer<String, String> c) {
        return TOPICS.get(c);
    }
}
