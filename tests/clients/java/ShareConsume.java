import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * kafka-clients 4.4 KafkaShareConsumer (KIP-932) scenarios; the Java twin of share_consume.py.
 *
 *   java ShareConsume --bootstrap H:P --topic T --group G --scenario accept|ackmodes|renew
 *                     [--partitions 1] [--count 5000] [--consumers 3] [--limit 3] [--timeout 90]
 *                     [--lock-ms 15000] [--process-ms 20000]
 *
 * Both create the topic, produce --count records (Records.java, partition i % partitions) and set the
 * GROUP config share.auto.offset.reset=earliest with IncrementalAlterConfigs.
 *   accept    K consumers (threads), explicit mode, every record ACCEPTed: the consumers' sets are
 *             disjoint and together hold every record exactly once with delivery count 1, byte-exact;
 *             at least 2 consumers got records.
 *   ackmodes  one consumer: i % 3 == 0 ACCEPT, == 1 RELEASE, == 2 REJECT; RELEASEd records return with
 *             delivery counts 1..limit (group config share.delivery.count.limit = --limit), then are
 *             archived; a fresh consumer afterwards gets only a sentinel record produced at the end.
 *   join      (--count is the total, half produced first) consumer 0 alone takes the first half; then
 *             consumer 1 joins and the second half is produced over ~7 s while both poll (and keep
 *             polling past two heartbeat intervals). Neither member may be fenced (the consumer's
 *             "... is fenced" INFO log lines are counted: "fenced"); every record exactly once;
 *             consumer 1 gets records and consumer 0 keeps getting them after the join.
 *   renew     one consumer, explicit mode, the pattern of Flink's share-group source (FLIP-573, KIP-1222):
 *             GROUP configs share.record.lock.duration.ms = --lock-ms and share.renew.acknowledge.enable =
 *             true; every record is "processed" for --process-ms (longer than the lock), and until then it
 *             is acknowledged RENEW on every poll (the client hands a renewed record back on a later poll),
 *             then ACCEPT. Checks: every record seen only with delivery count 1 (never redelivered by the
 *             broker), none returned after its ACCEPT, every record ACCEPTed once (none lost), no
 *             acknowledgement error in the commit callback, and a fresh consumer afterwards gets only a
 *             sentinel record produced at the end.
 * Prints one line "RESULT {json}" and exits 0 only if every check held.
 */
public final class ShareConsume {
    static String bootstrap, topic, group, scenario;
    static int partitions = 1, consumers = 3, limit = 3;
    static long count = 5000;
    static long timeoutMs = 90_000, idleMs = 4_000, lockMs = 15_000, processMs = 20_000;
    static final ConcurrentLinkedQueue<String> errors = new ConcurrentLinkedQueue<>();
    static java.nio.file.Path joinLog;

    static void err(String s) {
        errors.add(s);
        Records.log("CHECK FAILED: " + s);
    }

    public static void main(String[] args) throws Exception {
        if (Arrays.asList(args).contains("join")) {
            // The consumer logs a fenced heartbeat at INFO; keep those lines in a file to count them.
            joinLog = java.nio.file.Files.createTempFile("share-join", ".log");
            System.setProperty("org.slf4j.simpleLogger.log.org.apache.kafka.clients.consumer.internals", "info");
            System.setProperty("org.slf4j.simpleLogger.logFile", joinLog.toString());
        }
        for (int n = 0; n < args.length; n += 2) {
            String v = args[n + 1];
            switch (args[n]) {
                case "--bootstrap": bootstrap = v; break;
                case "--topic": topic = v; break;
                case "--group": group = v; break;
                case "--scenario": scenario = v; break;
                case "--partitions": partitions = Integer.parseInt(v); break;
                case "--count": count = Long.parseLong(v); break;
                case "--consumers": consumers = Integer.parseInt(v); break;
                case "--limit": limit = Integer.parseInt(v); break;
                case "--timeout": timeoutMs = (long) (Double.parseDouble(v) * 1000); break;
                case "--lock-ms": lockMs = Long.parseLong(v); break;
                case "--process-ms": processMs = Long.parseLong(v); break;
                default: throw new IllegalArgumentException("unknown argument " + args[n]);
            }
        }
        Map<String, Object> out = new HashMap<>();
        out.put("client", "kafka-clients " + org.apache.kafka.common.utils.internals.AppInfoParser.getVersion());
        out.put("scenario", scenario);
        out.put("count", count);
        long t0 = System.nanoTime();
        try {
            Map<String, String> cfg = new HashMap<>();
            cfg.put("share.auto.offset.reset", "earliest");
            if (scenario.equals("ackmodes")) cfg.put("share.delivery.count.limit", Integer.toString(limit));
            long total = count;
            if (scenario.equals("join")) count = total / 2;
            if (scenario.equals("renew")) {
                cfg.put("share.record.lock.duration.ms", Long.toString(lockMs));
                cfg.put("share.renew.acknowledge.enable", "true");
            }
            setup(cfg);
            count = total;
            if (scenario.equals("accept")) accept(out);
            else if (scenario.equals("ackmodes")) ackmodes(out);
            else if (scenario.equals("join")) join(out);
            else if (scenario.equals("renew")) renew(out);
            else throw new IllegalArgumentException("unknown scenario " + scenario);
        } catch (Exception e) {
            e.printStackTrace();
            err("exception: " + e);
        }
        out.put("seconds", Math.round((System.nanoTime() - t0) / 1e7) / 100.0);
        out.put("failures", errors.size());
        out.put("ok", errors.isEmpty());
        Records.result(out);
        System.exit(errors.isEmpty() ? 0 : 1);
    }

    static Properties base(String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", clientId);
        return p;
    }

    static KafkaProducer<byte[], byte[]> producer() {
        Properties p = base("lockstep-interop-java-share-producer");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
    }

    static void setup(Map<String, String> groupConfigs) throws Exception {
        try (Admin admin = Admin.create(base("lockstep-interop-java-share-admin"))) {
            try {
                admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get(60, TimeUnit.SECONDS);
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) throw e;
            }
            try (KafkaProducer<byte[], byte[]> p = producer()) {
                List<java.util.concurrent.Future<?>> sent = new ArrayList<>();
                for (long i = 0; i < count; i++)
                    sent.add(p.send(new ProducerRecord<>(topic, (int) (i % partitions), Records.timestamp(i), Records.key(i),
                        Records.value(i), Records.headers(i))));
                p.flush();
                for (java.util.concurrent.Future<?> f : sent) f.get(60, TimeUnit.SECONDS); // throws if any failed
            }
            List<AlterConfigOp> ops = new ArrayList<>();
            groupConfigs.forEach((k, v) -> ops.add(new AlterConfigOp(new ConfigEntry(k, v), AlterConfigOp.OpType.SET)));
            admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, group), ops))
                .all().get(30, TimeUnit.SECONDS);
        }
        Records.log("produced " + count + " records to " + topic + "; group " + group + " configs " + groupConfigs);
    }

    static KafkaShareConsumer<byte[], byte[]> consumer(int n) {
        Properties p = base("lockstep-interop-java-share-" + n);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", "explicit");
        KafkaShareConsumer<byte[], byte[]> c = new KafkaShareConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        c.subscribe(List.of(topic));
        return c;
    }

    /** Checks a record against the generator; returns its index or -1. */
    static long check(ConsumerRecord<byte[], byte[]> r) {
        long i = r.offset() * partitions + r.partition();
        if (!r.topic().equals(topic) || i < 0 || i >= count) {
            err("unexpected record " + r.topic() + " p" + r.partition() + " o" + r.offset());
            return -1;
        }
        if (!Arrays.equals(r.key(), Records.key(i)) || !Arrays.equals(r.value(), Records.value(i))
            || !Records.sameHeaders(Records.headers(i), r.headers()) || r.timestamp() != Records.timestamp(i))
            err("record " + i + " (p" + r.partition() + " o" + r.offset() + ") content differs");
        return i;
    }

    static int deliveryCount(ConsumerRecord<?, ?> r) {
        Optional<Short> dc = r.deliveryCount();
        return dc.isPresent() ? dc.get() : -1;
    }

    static void commit(KafkaShareConsumer<byte[], byte[]> c) {
        Map<TopicIdPartition, Optional<KafkaException>> res = c.commitSync(Duration.ofSeconds(30));
        res.forEach((tp, e) -> e.ifPresent(x -> err("commitSync " + tp + ": " + x)));
    }

    static void accept(Map<String, Object> out) throws Exception {
        ConcurrentHashMap<Long, Integer> got = new ConcurrentHashMap<>();
        ConcurrentLinkedQueue<String> dup = new ConcurrentLinkedQueue<>();
        AtomicLong badDc = new AtomicLong();
        long[] per = new long[consumers];
        AtomicBoolean stop = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        for (int n = 0; n < consumers; n++) {
            final int me = n;
            Thread t = new Thread(() -> {
                try (KafkaShareConsumer<byte[], byte[]> c = consumer(me)) {
                    while (!stop.get()) {
                        int k = 0;
                        for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                            k++;
                            long i = check(r);
                            c.acknowledge(r, AcknowledgeType.ACCEPT);
                            if (i < 0) continue;
                            if (deliveryCount(r) != 1) badDc.incrementAndGet();
                            Integer prev = got.putIfAbsent(i, me);
                            if (prev != null) dup.add(i + ": consumers " + prev + " and " + me);
                            synchronized (per) { per[me]++; }
                        }
                        if (k > 0) {
                            commit(c);
                            Thread.sleep(2L * k); // pretend to work so that the other members join and share
                        }
                    }
                } catch (Exception e) {
                    err("consumer " + me + ": " + e);
                }
            });
            t.start();
            threads.add(t);
            Thread.sleep(200);
        }
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (got.size() < count && System.currentTimeMillis() < deadline && errors.isEmpty()) Thread.sleep(100);
        Thread.sleep(2000); // anything delivered twice would show up now
        stop.set(true);
        for (Thread t : threads) t.join(60_000);
        int active = 0;
        StringBuilder perS = new StringBuilder();
        for (long x : per) {
            if (x > 0) active++;
            perS.append(perS.length() > 0 ? " " : "").append(x);
        }
        out.put("received", got.size());
        out.put("duplicates", dup.size());
        out.put("per_consumer", perS.toString());
        out.put("bad_delivery_counts", badDc.get());
        if (got.size() != count) err("received " + got.size() + " distinct records, expected " + count);
        if (!dup.isEmpty()) err(dup.size() + " records delivered twice, e.g. " + dup.peek());
        if (badDc.get() > 0) err(badDc.get() + " records with delivery count != 1");
        if (consumers > 1 && active < 2) err("only one consumer received records: " + perS);
    }

    static void join(Map<String, Object> out) throws Exception {
        long half = count / 2;
        ConcurrentHashMap<Long, Integer> got = new ConcurrentHashMap<>();
        ConcurrentLinkedQueue<String> dup = new ConcurrentLinkedQueue<>();
        long[] per = new long[2];
        AtomicLong firstAfterJoin = new AtomicLong();
        AtomicBoolean joined = new AtomicBoolean();
        AtomicBoolean stop = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        for (int n = 0; n < 2; n++) {
            final int me = n;
            Thread t = new Thread(() -> {
                try (KafkaShareConsumer<byte[], byte[]> c = consumer(me)) {
                    while (!stop.get()) {
                        int k = 0;
                        for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                            k++;
                            long i = check(r);
                            c.acknowledge(r, AcknowledgeType.ACCEPT);
                            if (i < 0) continue;
                            Integer prev = got.putIfAbsent(i, me);
                            if (prev != null) dup.add(i + ": consumers " + prev + " and " + me);
                            synchronized (per) { per[me]++; }
                            if (me == 0 && joined.get() && i >= half) firstAfterJoin.incrementAndGet();
                        }
                        if (k > 0) commit(c);
                    }
                } catch (Exception e) {
                    err("consumer " + me + ": " + e);
                }
            });
            if (n == 1) {
                while (got.size() < half && System.currentTimeMillis() < deadline && errors.isEmpty()) Thread.sleep(100);
                if (got.size() < half) err("consumer 0 alone received " + got.size() + " of " + half);
                Records.log("consumer 0 has the first " + got.size() + " records; consumer 1 joins");
                joined.set(true);
            }
            t.start();
            threads.add(t);
        }
        Thread.sleep(1000);
        try (KafkaProducer<byte[], byte[]> p = producer()) {
            int slices = 10;
            for (int s = 0; s < slices; s++) {
                for (long i = half + (count - half) * s / slices; i < half + (count - half) * (s + 1) / slices; i++)
                    p.send(new ProducerRecord<>(topic, (int) (i % partitions), Records.timestamp(i), Records.key(i),
                        Records.value(i), Records.headers(i)));
                p.flush();
                Thread.sleep(700);
            }
        }
        while (got.size() < count && System.currentTimeMillis() < deadline && errors.isEmpty()) Thread.sleep(100);
        Thread.sleep(6000); // two members heartbeating past the join: a fence would show up now
        stop.set(true);
        for (Thread t : threads) t.join(60_000);
        long fenced = 0;
        if (joinLog != null) {
            for (String line : java.nio.file.Files.readAllLines(joinLog)) {
                if (line.contains("is fenced") || line.contains("FENCED_MEMBER_EPOCH")) {
                    fenced++;
                    Records.log("fenced: " + line);
                }
            }
        }
        out.put("received", got.size());
        out.put("duplicates", dup.size());
        out.put("per_consumer", per[0] + " " + per[1]);
        out.put("consumer0_after_join", firstAfterJoin.get());
        out.put("fenced", fenced);
        if (got.size() != count) err("received " + got.size() + " distinct records, expected " + count);
        if (!dup.isEmpty()) err(dup.size() + " records delivered twice, e.g. " + dup.peek());
        if (per[1] == 0) err("consumer 1 received nothing after joining");
        if (fenced > 0) err(fenced + " fenced heartbeats");
    }

    static void ackmodes(Map<String, Object> out) throws Exception {
        Map<Long, List<Integer>> seen = new HashMap<>();
        try (KafkaShareConsumer<byte[], byte[]> c = consumer(0)) {
            long deadline = System.currentTimeMillis() + timeoutMs;
            long lastNew = -1; // the idle clock starts with the first record (joining takes a heartbeat or two)
            while (System.currentTimeMillis() < deadline && (lastNew < 0 || System.currentTimeMillis() - lastNew < idleMs)) {
                int k = 0;
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                    k++;
                    long i = check(r);
                    if (i < 0) {
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                        continue;
                    }
                    seen.computeIfAbsent(i, x -> new ArrayList<>()).add(deliveryCount(r));
                    c.acknowledge(r, i % 3 == 0 ? AcknowledgeType.ACCEPT : i % 3 == 1 ? AcknowledgeType.RELEASE : AcknowledgeType.REJECT);
                    lastNew = System.currentTimeMillis();
                }
                if (k > 0) commit(c);
            }
        }
        long deliveries = 0;
        for (long i = 0; i < count; i++) {
            List<Integer> want = new ArrayList<>();
            if (i % 3 == 1) for (int d = 1; d <= limit; d++) want.add(d);
            else want.add(1);
            List<Integer> dcs = seen.getOrDefault(i, Collections.emptyList());
            deliveries += dcs.size();
            if (!dcs.equals(want)) err("record " + i + ": delivery counts " + dcs + ", expected " + want);
        }
        // all acknowledged or archived: a fresh member gets only the sentinel produced now
        try (KafkaProducer<byte[], byte[]> p = producer()) {
            p.send(new ProducerRecord<>(topic, 0, Records.ascii("sentinel"), Records.ascii("sentinel"))).get(30, TimeUnit.SECONDS);
        }
        List<Long> extra = new ArrayList<>();
        boolean sentinel = false;
        try (KafkaShareConsumer<byte[], byte[]> c = consumer(1)) {
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (!sentinel && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                    if (Arrays.equals(r.key(), Records.ascii("sentinel"))) sentinel = true;
                    else extra.add(r.offset() * partitions + r.partition());
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                commit(c);
            }
        }
        if (!sentinel) err("fresh consumer did not receive the sentinel record");
        if (!extra.isEmpty()) err("records delivered after all were acknowledged/archived: " + extra.subList(0, Math.min(10, extra.size())));
        out.put("distinct", seen.size());
        out.put("deliveries", deliveries);
        out.put("after_archive", extra.size());
        out.put("limit", limit);
    }

    /** Produces a sentinel; a fresh consumer must get it and nothing else. Returns the other records it got. */
    static List<Long> afterSentinel(int consumerNo) throws Exception {
        try (KafkaProducer<byte[], byte[]> p = producer()) {
            p.send(new ProducerRecord<>(topic, 0, Records.ascii("sentinel"), Records.ascii("sentinel"))).get(30, TimeUnit.SECONDS);
        }
        List<Long> extra = new ArrayList<>();
        boolean sentinel = false;
        try (KafkaShareConsumer<byte[], byte[]> c = consumer(consumerNo)) {
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (!sentinel && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                    if (Arrays.equals(r.key(), Records.ascii("sentinel"))) sentinel = true;
                    else extra.add(r.offset() * partitions + r.partition());
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                commit(c);
            }
        }
        if (!sentinel) err("fresh consumer did not receive the sentinel record");
        return extra;
    }

    static void renew(Map<String, Object> out) throws Exception {
        if (processMs <= lockMs) err("--process-ms " + processMs + " must exceed --lock-ms " + lockMs);
        Map<Long, Long> firstSeen = new HashMap<>();
        java.util.Set<Long> accepted = new java.util.HashSet<>();
        long renews = 0, returns = 0, redelivered = 0, afterAccept = 0, maxHeldMs = 0;
        ConcurrentLinkedQueue<String> ackErrors = new ConcurrentLinkedQueue<>();
        try (KafkaShareConsumer<byte[], byte[]> c = consumer(0)) {
            c.setAcknowledgementCommitCallback((offsets, e) -> {
                if (e != null) ackErrors.add(offsets + ": " + e);
            });
            long deadline = System.currentTimeMillis() + timeoutMs + processMs;
            while (accepted.size() < count && System.currentTimeMillis() < deadline && ackErrors.isEmpty()) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    long i = check(r);
                    if (i < 0) {
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                        continue;
                    }
                    long now = System.currentTimeMillis();
                    returns++;
                    if (deliveryCount(r) != 1) {
                        redelivered++;
                        err("record " + i + " delivered with count " + deliveryCount(r) + " (redelivered)");
                    }
                    if (accepted.contains(i)) {
                        afterAccept++;
                        err("record " + i + " returned after its ACCEPT");
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                        continue;
                    }
                    long held = now - firstSeen.computeIfAbsent(i, x -> now);
                    if (held >= processMs) {
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                        accepted.add(i);
                        maxHeldMs = Math.max(maxHeldMs, held);
                    } else {
                        c.acknowledge(r, AcknowledgeType.RENEW);
                        renews++;
                    }
                }
                Thread.sleep(300); // a slice of the (slow) processing
            }
            commit(c);
        }
        ackErrors.forEach(e -> err("acknowledgement callback: " + e));
        if (accepted.size() != count) err("accepted " + accepted.size() + " distinct records, expected " + count);
        if (renews == 0) err("no RENEW was sent");
        if (maxHeldMs <= lockMs) err("records were held " + maxHeldMs + " ms, not longer than the lock " + lockMs + " ms");
        List<Long> extra = afterSentinel(1);
        if (!extra.isEmpty()) err("records delivered again after all were accepted: " + extra.subList(0, Math.min(10, extra.size())));
        out.put("distinct", firstSeen.size());
        out.put("accepted", accepted.size());
        out.put("renews", renews);
        out.put("returns", returns);
        out.put("redelivered", redelivered);
        out.put("after_accept", afterAccept);
        out.put("after_all_accepted", extra.size());
        out.put("max_held_ms", maxHeldMs);
        out.put("lock_ms", lockMs);
    }
}
