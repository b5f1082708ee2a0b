import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * kafka-clients 4.4: the exactly-once read-process-write loop, for tests/producer_txn_interop.rs.
 *
 *   java TxnReadProcessWrite run    --bootstrap H:P --in T --out U --group G --txn-id X --partitions N
 *                                   [--batch 100] [--pause-ms 20] [--deadline-s 240]
 *   java TxnReadProcessWrite verify --bootstrap H:P --in T --out U --partitions N
 *
 * run: a KafkaConsumer (read_committed, group G, no auto commit) and a transactional KafkaProducer
 * (transactional.id X). Each poll's records (at most --batch) are copied to partition p of U, for
 * input partition p, in one transaction that also carries the consumer's positions
 * (sendOffsetsToTransaction with the consumer's group metadata); then commitTransaction. Any error
 * (the broker killed under it: timeouts, disconnects, fencing, aborted transactions) closes both
 * clients and starts again: the new producer's initTransactions ends the old transaction and the
 * new consumer resumes from the group's committed offsets (read_committed: stable offsets only).
 * Prints "PROGRESS n" after every commit (n = input records whose processing is committed, from
 * the committed offsets), "RESTART reason" after every error, and at the end
 * "RESULT {json}" once every input record is committed (committed offsets = end offsets).
 *
 * verify: reads U read_committed to its end and T to its end; RESULT {"ok": bool, ...}: every
 * partition of U holds exactly T's records of the same partition, in the same order, each once.
 */
public final class TxnReadProcessWrite {
    static String bootstrap, in, out, group, txnId;
    static int partitions, batch = 100, pauseMs = 20, deadlineS = 240;

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        for (int n = 1; n < args.length; n += 2) {
            String v = args[n + 1];
            switch (args[n]) {
                case "--bootstrap": bootstrap = v; break;
                case "--in": in = v; break;
                case "--out": out = v; break;
                case "--group": group = v; break;
                case "--txn-id": txnId = v; break;
                case "--partitions": partitions = Integer.parseInt(v); break;
                case "--batch": batch = Integer.parseInt(v); break;
                case "--pause-ms": pauseMs = Integer.parseInt(v); break;
                case "--deadline-s": deadlineS = Integer.parseInt(v); break;
                default: throw new IllegalArgumentException("unknown argument " + args[n]);
            }
        }
        if (mode.equals("run")) {
            run();
        } else if (mode.equals("verify")) {
            verify();
        } else {
            throw new IllegalArgumentException("mode run|verify");
        }
    }

    static List<TopicPartition> parts(String topic) {
        List<TopicPartition> l = new ArrayList<>();
        for (int p = 0; p < partitions; p++) l.add(new TopicPartition(topic, p));
        return l;
    }

    static KafkaConsumer<String, String> consumer(String groupId) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        if (groupId != null) p.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.toString(batch));
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    static KafkaProducer<String, String> producer() {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "20000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "20000");
        p.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    static void say(String s) {
        System.out.println(s);
        System.out.flush();
    }

    static void run() throws Exception {
        long deadline = System.currentTimeMillis() + deadlineS * 1000L;
        long total;
        Map<TopicPartition, Long> ends;
        try (KafkaConsumer<String, String> c = consumer(null)) {
            ends = c.endOffsets(parts(in), Duration.ofSeconds(60));
        }
        total = ends.values().stream().mapToLong(Long::longValue).sum();
        int restarts = 0, transactions = 0;
        long committed = 0;
        List<String> reasons = new ArrayList<>();
        while (committed < total) {
            if (System.currentTimeMillis() > deadline) {
                say("RESULT {\"done\": false, \"committed\": " + committed + ", \"total\": " + total
                        + ", \"restarts\": " + restarts + "}");
                System.exit(1);
            }
            KafkaProducer<String, String> producer = null;
            KafkaConsumer<String, String> consumer = null;
            try {
                producer = producer();
                producer.initTransactions();
                consumer = consumer(group);
                consumer.subscribe(List.of(in));
                while (committed < total) {
                    ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(200));
                    if (recs.isEmpty()) {
                        committed = committedCount(consumer);
                        continue;
                    }
                    producer.beginTransaction();
                    for (ConsumerRecord<String, String> r : recs) {
                        producer.send(new ProducerRecord<>(out, r.partition(), r.key(), r.value()));
                    }
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    for (TopicPartition tp : recs.partitions()) {
                        List<ConsumerRecord<String, String>> l = recs.records(tp);
                        offsets.put(tp, new OffsetAndMetadata(l.get(l.size() - 1).offset() + 1));
                    }
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    producer.commitTransaction();
                    transactions++;
                    committed = committedCount(consumer);
                    say("PROGRESS " + committed);
                    if (pauseMs > 0) Thread.sleep(pauseMs);
                }
            } catch (KafkaException | IllegalStateException e) {
                restarts++;
                String reason = e.getClass().getSimpleName() + ": " + e.getMessage();
                if (reasons.size() < 50) reasons.add(e.getClass().getSimpleName());
                say("RESTART " + reason.replace('\n', ' '));
                Thread.sleep(200);
            } finally {
                // No abort here: the next producer's initTransactions ends an open transaction.
                if (producer != null) producer.close(Duration.ZERO);
                if (consumer != null) {
                    try {
                        consumer.close(org.apache.kafka.clients.consumer.CloseOptions.timeout(Duration.ZERO));
                    } catch (KafkaException e) {
                        // the broker may be down
                    }
                }
            }
        }
        StringBuilder r = new StringBuilder("{\"done\": true, \"committed\": " + committed
                + ", \"total\": " + total + ", \"restarts\": " + restarts + ", \"transactions\": "
                + transactions + ", \"reasons\": [");
        for (int i = 0; i < reasons.size(); i++) {
            r.append(i == 0 ? "" : ", ").append('"').append(reasons.get(i)).append('"');
        }
        say("RESULT " + r + "]}");
    }

    /** Input records whose processing the group has committed (stable offsets). */
    static long committedCount(KafkaConsumer<String, String> c) {
        long n = 0;
        Map<TopicPartition, OffsetAndMetadata> m = c.committed(new java.util.HashSet<>(parts(in)),
                Duration.ofSeconds(15));
        for (OffsetAndMetadata o : m.values()) {
            if (o != null) n += o.offset();
        }
        return n;
    }

    static Map<Integer, List<String>> readAll(String topic) {
        Map<Integer, List<String>> got = new TreeMap<>();
        try (KafkaConsumer<String, String> c = consumer(null)) {
            List<TopicPartition> tps = parts(topic);
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = c.endOffsets(tps, Duration.ofSeconds(60));
            long deadline = System.currentTimeMillis() + 120_000;
            for (TopicPartition tp : tps) got.put(tp.partition(), new ArrayList<>());
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    if (c.position(tp, Duration.ofSeconds(30)) < ends.get(tp)) done = false;
                }
                if (done || System.currentTimeMillis() > deadline) break;
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    got.get(r.partition()).add(r.value());
                }
            }
        }
        return got;
    }

    static void verify() {
        Map<Integer, List<String>> input = readAll(in);
        Map<Integer, List<String>> output = readAll(out);
        boolean ok = true;
        StringBuilder detail = new StringBuilder();
        long inCount = 0, outCount = 0;
        for (int p = 0; p < partitions; p++) {
            List<String> a = input.get(p), b = output.get(p);
            inCount += a.size();
            outCount += b.size();
            if (!a.equals(b)) {
                ok = false;
                int i = 0;
                while (i < a.size() && i < b.size() && a.get(i).equals(b.get(i))) i++;
                detail.append(String.format("partition %d: input %d records, output %d, first "
                        + "difference at %d (input %s, output %s); ", p, a.size(), b.size(), i,
                        i < a.size() ? a.get(i) : "-", i < b.size() ? b.get(i) : "-"));
            }
        }
        say("RESULT {\"ok\": " + ok + ", \"input\": " + inCount + ", \"output\": " + outCount
                + ", \"detail\": \"" + detail + "\"}");
    }
}
