import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.ConcurrentLinkedQueue;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * kafka-clients 4.4: produce + read-back by partition assignment (the Java twin of produce_consume.py).
 *
 *   java ProduceConsume --bootstrap H:P --topic T [--partitions 4] [--count 100000] [--mode both|produce|verify]
 *                       [--compression none|gzip|snappy|lz4|zstd] [--timeout 120] [--base-ts MS]
 *
 * Prints one line "RESULT {json}" and exits 0 only if everything matched.
 */
public final class ProduceConsume {
    static String bootstrap, topic, mode = "both", compression = "none";
    static int partitions = 4;
    static long count = 100_000;
    static long timeoutMs = 120_000;
    static boolean baseGiven = false;

    public static void main(String[] args) throws Exception {
        for (int n = 0; n < args.length; n += 2) {
            String v = args[n + 1];
            switch (args[n]) {
                case "--bootstrap": bootstrap = v; break;
                case "--topic": topic = v; break;
                case "--partitions": partitions = Integer.parseInt(v); break;
                case "--count": count = Long.parseLong(v); break;
                case "--mode": mode = v; break;
                case "--compression": compression = v; break;
                case "--base-ts": Records.baseTs = Long.parseLong(v); baseGiven = true; break;
                case "--timeout": timeoutMs = (long) (Double.parseDouble(v) * 1000); break;
                default: throw new IllegalArgumentException("unknown argument " + args[n]);
            }
        }
        if (mode.equals("verify") && !baseGiven)
            throw new IllegalArgumentException("--mode verify needs --base-ts (printed in the produce run's RESULT)");
        Map<String, Object> out = new HashMap<>();
        out.put("base_ts", Records.baseTs);
        out.put("partitions", partitions);
        out.put("client", "kafka-clients " + org.apache.kafka.common.utils.internals.AppInfoParser.getVersion());
        out.put("mode", mode);
        out.put("topic", topic);
        boolean ok = true;
        try {
            if (mode.equals("both") || mode.equals("produce")) {
                createTopic();
                ok &= produce(out);
            }
            if (mode.equals("both") || mode.equals("verify")) ok &= verify(out);
        } catch (Exception e) {
            e.printStackTrace();
            out.put("exception", e.toString());
            ok = false;
        }
        out.put("ok", ok);
        Records.result(out);
        System.exit(ok ? 0 : 1);
    }

    static Properties base(String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", clientId);
        return p;
    }

    static void createTopic() throws Exception {
        try (Admin admin = Admin.create(base("lockstep-interop-java-admin"))) {
            try {
                admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get(60, TimeUnit.SECONDS);
                Records.log("created topic " + topic + " with " + partitions + " partitions");
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) throw e;
                Records.log("topic " + topic + " already exists");
            }
            // No describeTopics() wait: in 4.4 that uses DescribeCluster v2 + DescribeTopicPartitions v0
            // when advertised; the producer's own Metadata requests wait for the new topic instead.
        }
    }

    static boolean produce(Map<String, Object> out) throws Exception {
        Properties p = base("lockstep-interop-java-producer");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 120_000);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        AtomicLong acked = new AtomicLong();
        ConcurrentLinkedQueue<String> errors = new ConcurrentLinkedQueue<>();
        ConcurrentLinkedQueue<String> badOffsets = new ConcurrentLinkedQueue<>();
        long t0 = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (long i = 0; i < count; i++) {
                final long idx = i;
                int part = (int) (i % partitions);
                producer.send(new ProducerRecord<>(topic, part, Records.timestamp(i), Records.key(i), Records.value(i), Records.headers(i)),
                    (md, e) -> {
                        if (e != null) {
                            errors.add("record " + idx + ": " + e);
                            return;
                        }
                        acked.incrementAndGet();
                        if (md.partition() != idx % partitions || md.offset() != idx / partitions)
                            badOffsets.add("record " + idx + " -> p" + md.partition() + " o" + md.offset());
                    });
            }
            producer.flush();
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        errors.stream().limit(10).forEach(s -> Records.log("delivery error: " + s));
        badOffsets.stream().limit(10).forEach(s -> Records.log("unexpected partition/offset: " + s));
        out.put("produced", count);
        out.put("acked", acked.get());
        out.put("produce_errors", errors.size());
        out.put("bad_offsets", badOffsets.size());
        out.put("produce_seconds", Math.round(secs * 100) / 100.0);
        return errors.isEmpty() && badOffsets.isEmpty() && acked.get() == count;
    }

    static boolean verify(Map<String, Object> out) {
        Properties p = base("lockstep-interop-java-consumer");
        // no group.id: partition assignment only, no coordinator, no commits
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 5000);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        long[] exp = new long[partitions];
        for (long i = 0; i < count; i++) exp[(int) (i % partitions)]++;
        long[] next = new long[partitions];
        List<String> mismatches = new ArrayList<>();
        long consumed = 0;
        boolean ok = true;
        long t0 = System.nanoTime();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int n = 0; n < partitions; n++) tps.add(new TopicPartition(topic, n));
            Map<TopicPartition, Long> lo = c.beginningOffsets(tps, Duration.ofSeconds(30));
            Map<TopicPartition, Long> hi = c.endOffsets(tps, Duration.ofSeconds(30));
            for (TopicPartition tp : tps) {
                if (lo.get(tp) != 0 || hi.get(tp) != exp[tp.partition()]) {
                    Records.log(tp + ": offsets [" + lo.get(tp) + ", " + hi.get(tp) + "), expected [0, " + exp[tp.partition()] + ")");
                    ok = false;
                }
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (System.currentTimeMillis() < deadline) {
                boolean done = true;
                for (int n = 0; n < partitions; n++) done &= next[n] >= exp[n];
                if (done) break;
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(1000))) {
                    consumed++;
                    int part = r.partition();
                    long off = r.offset();
                    if (off != next[part]) {
                        mismatches.add("p" + part + ": offset " + off + ", expected " + next[part]);
                        next[part] = Math.max(next[part], off + 1);
                        continue;
                    }
                    next[part] = off + 1;
                    long i = off * partitions + part;
                    if (i >= count) {
                        mismatches.add("p" + part + ": unexpected extra record at offset " + off);
                        continue;
                    }
                    boolean same = Arrays.equals(r.key(), Records.key(i)) && Arrays.equals(r.value(), Records.value(i))
                        && Records.sameHeaders(Records.headers(i), r.headers())
                        && r.timestamp() == Records.timestamp(i) && r.timestampType() == TimestampType.CREATE_TIME;
                    if (!same) mismatches.add("record " + i + " (p" + part + " o" + off + ") differs");
                }
            }
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        int shortParts = 0;
        for (int n = 0; n < partitions; n++) {
            if (next[n] != exp[n]) {
                shortParts++;
                Records.log("partition " + n + " read up to " + next[n] + ", expected " + exp[n]);
            }
        }
        mismatches.stream().limit(10).forEach(s -> Records.log("MISMATCH " + s));
        out.put("consumed", consumed);
        out.put("expected", count);
        out.put("mismatches", mismatches.size());
        out.put("short_partitions", shortParts);
        out.put("consume_seconds", Math.round(secs * 100) / 100.0);
        return ok && mismatches.isEmpty() && shortParts == 0 && consumed == count;
    }
}
