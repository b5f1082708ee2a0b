package io.lockstep.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Consumer;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.errors.InvalidRequestException;
import org.apache.kafka.common.errors.InvalidTxnStateException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.junit.jupiter.api.Test;

/**
 * {@link LockstepShareConsumer} against the release broker: implicit and explicit
 * acknowledgement, RELEASE redelivery with its delivery count, the commit callback, two members
 * sharing partitions, transactional acknowledgement (abort redelivers at the same delivery count,
 * commit never again, the wire spec's errors per partition), and the KIP's recovery routine after
 * a broker crash.
 */
class LockstepShareConsumerTest extends BrokerTest {
    private static final Duration DELIVERY_WAIT = Duration.ofSeconds(30);
    private static final Duration QUIET_WAIT = Duration.ofSeconds(3);

    static LockstepShareConsumer<String, String> consumer(String group, String mode) {
        return consumer(broker, group, mode);
    }

    static LockstepShareConsumer<String, String> consumer(LockstepBroker broker, String group, String mode) {
        return new LockstepShareConsumer<>(props(broker, group, mode), new StringDeserializer(), new StringDeserializer());
    }

    /** The test consumers' configuration (a short fetch.max.wait.ms keeps polls brisk). */
    static Properties props(LockstepBroker broker, String group, String mode) {
        Properties p = new Properties();
        p.put("bootstrap.servers", broker.bootstrap());
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", mode);
        p.put("fetch.max.wait.ms", "200");
        return p;
    }

    static LockstepShareTransactionCoordinator coordinator(String group) {
        return ShareTransactionCoordinatorTest.coordinator(broker, group);
    }

    /**
     * Polls until {@code n} records arrived or {@code wait} passed; {@code eachPoll} sees each
     * poll's records (explicit mode acknowledges there).
     */
    static List<ConsumerRecord<String, String>> pollFor(LockstepShareConsumer<String, String> c, int n,
            Duration wait, Consumer<ConsumerRecords<String, String>> eachPoll) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + wait.toMillis();
        while (got.size() < n && System.currentTimeMillis() < deadline) {
            ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(500));
            records.forEach(got::add);
            eachPoll.accept(records);
        }
        return got;
    }

    static Set<String> values(List<ConsumerRecord<String, String>> records) {
        Set<String> out = new TreeSet<>();
        records.forEach(r -> out.add(r.value()));
        return out;
    }

    static Set<String> expected(String prefix, int n) {
        Set<String> out = new TreeSet<>();
        for (int i = 0; i < n; i++) {
            out.add(prefix + i);
        }
        return out;
    }

    @Test
    void implicitModeAcceptsEverythingDeliveredOnce() {
        String group = "jk-impl";
        String topic = "jk-impl-t";
        broker.createTopic(topic, 2, group);
        broker.produce(topic, 2, "v", 20);
        try (LockstepShareConsumer<String, String> c = consumer(group, "implicit")) {
            c.subscribe(List.of(topic));
            assertEquals(Set.of(topic), c.subscription());
            List<ConsumerRecord<String, String>> got = pollFor(c, 20, DELIVERY_WAIT, r -> { });
            assertEquals(expected("v", 20), values(got));
            assertEquals(20, got.size(), "each record once");
            for (ConsumerRecord<String, String> r : got) {
                assertEquals(Optional.of((short) 1), r.deliveryCount());
                assertEquals("k" + r.value().substring(1), r.key());
            }
            // Explicit acknowledgement is refused in implicit mode, as in Kafka.
            assertThrows(IllegalStateException.class, () -> c.acknowledge(got.get(0)));
            assertTrue(c.acquisitionLockTimeoutMs().isPresent());
            // The next poll accepts what the last one delivered; nothing more comes.
            assertEquals(0, pollFor(c, 1, QUIET_WAIT, r -> { }).size());
        }
        try (LockstepShareConsumer<String, String> again = consumer(group, "implicit")) {
            again.subscribe(List.of(topic));
            assertEquals(0, pollFor(again, 1, QUIET_WAIT, r -> { }).size(), "accepted records never come back");
        }
    }

    @Test
    void explicitModeReleaseRedeliversWithTheNextDeliveryCount() {
        String group = "jk-expl";
        String topic = "jk-expl-t";
        broker.createTopic(topic, 1, group);
        broker.produce(topic, 1, "v", 5);
        try (LockstepShareConsumer<String, String> c = consumer(group, "explicit")) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> first = new ArrayList<>();
            List<ConsumerRecord<String, String>> released = new ArrayList<>();
            long deadline = System.currentTimeMillis() + DELIVERY_WAIT.toMillis();
            boolean refused = false;
            while (first.size() < 5 && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(500));
                if (rs.isEmpty()) {
                    continue;
                }
                if (!refused) {
                    // A poll before every record is acknowledged is refused.
                    assertThrows(IllegalStateException.class, () -> c.poll(Duration.ZERO));
                    refused = true;
                }
                for (ConsumerRecord<String, String> r : rs) {
                    first.add(r);
                    c.acknowledge(r);
                    if (r.offset() == 1) {
                        // ACCEPT, then RELEASE: the later type replaces the earlier.
                        c.acknowledge(r, AcknowledgeType.RELEASE);
                        released.add(r);
                    }
                }
            }
            assertEquals(5, first.size());
            assertEquals(1, released.size());
            List<ConsumerRecord<String, String>> again = pollFor(c, 1, DELIVERY_WAIT, r -> r.forEach(c::acknowledge));
            assertEquals(1, again.size());
            assertEquals(1, again.get(0).offset());
            assertEquals(Optional.of((short) 2), again.get(0).deliveryCount());
            // A record of an earlier poll cannot be acknowledged any more.
            assertThrows(IllegalStateException.class, () -> c.acknowledge(first.get(0)));
            Map<TopicIdPartition, Optional<KafkaException>> result = c.commitSync();
            assertEquals(1, result.size(), result.toString());
            assertEquals(Optional.empty(), result.values().iterator().next());
            assertEquals(0, pollFor(c, 1, QUIET_WAIT, r -> r.forEach(c::acknowledge)).size());
        }
    }

    @Test
    void commitAsyncOutcomesReachTheCallbackAtTheNextCall() {
        String group = "jk-cb";
        String topic = "jk-cb-t";
        broker.createTopic(topic, 1, group);
        broker.produce(topic, 1, "v", 4);
        List<Map<TopicIdPartition, Set<Long>>> calls = new CopyOnWriteArrayList<>();
        List<Exception> errors = new CopyOnWriteArrayList<>();
        try (LockstepShareConsumer<String, String> c = consumer(group, "explicit")) {
            c.setAcknowledgementCommitCallback((offsets, e) -> {
                calls.add(offsets);
                if (e != null) {
                    errors.add(e);
                }
                // The consumer is off limits inside the callback, as in Kafka.
                assertThrows(IllegalStateException.class, () -> c.poll(Duration.ZERO));
            });
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = pollFor(c, 4, DELIVERY_WAIT,
                    rs -> rs.forEach(r -> c.acknowledge(r, AcknowledgeType.ACCEPT)));
            assertEquals(4, got.size());
            // (Acknowledgements an earlier poll carried were reported by that poll.)
            int before = calls.size();
            c.commitAsync();
            assertEquals(before, calls.size(), "deferred to the next call");
            c.poll(Duration.ofMillis(100));
            assertEquals(before + 1, calls.size());
            Set<Long> offsets = new TreeSet<>();
            for (Map<TopicIdPartition, Set<Long>> call : calls) {
                TopicIdPartition tip = call.keySet().iterator().next();
                assertEquals(topic, tip.topic());
                assertEquals(0, tip.partition());
                offsets.addAll(call.get(tip));
            }
            assertEquals(Set.of(0L, 1L, 2L, 3L), offsets);
            assertEquals(List.of(), errors);
        }
    }

    @Test
    void twoMembersShareThePartitionsWithoutDuplicates() throws Exception {
        String group = "jk-two";
        String topic = "jk-two-t";
        int n = 200;
        broker.createTopic(topic, 2, group);
        broker.produce(topic, 2, "v", n);
        List<ConsumerRecord<String, String>> a = new ArrayList<>();
        List<ConsumerRecord<String, String>> b = new ArrayList<>();
        try (LockstepShareConsumer<String, String> ca = consumer(group, "implicit");
                LockstepShareConsumer<String, String> cb = consumer(group, "explicit")) {
            ca.subscribe(List.of(topic));
            cb.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + DELIVERY_WAIT.toMillis();
            while (a.size() + b.size() < n && System.currentTimeMillis() < deadline) {
                ca.poll(Duration.ofMillis(100)).forEach(a::add);
                ConsumerRecords<String, String> rb = cb.poll(Duration.ofMillis(100));
                rb.forEach(b::add);
                rb.forEach(cb::acknowledge);
            }
            ca.commitSync();
            cb.commitSync();
        }
        Set<String> seenA = values(a);
        Set<String> seenB = values(b);
        Set<String> both = new HashSet<>(seenA);
        both.retainAll(seenB);
        assertEquals(Set.of(), both, "no record went to both members");
        Set<String> all = new TreeSet<>(seenA);
        all.addAll(seenB);
        assertEquals(expected("v", n), all);
        assertEquals(n, a.size() + b.size());
        assertTrue(!a.isEmpty() && !b.isEmpty(), "both members got records: " + a.size() + "/" + b.size());
    }

    @Test
    void kafkasOwnShareConsumerSharesTheGroupWithOurs() {
        String group = "jk-mix";
        String topic = "jk-mix-t";
        int n = 100;
        broker.createTopic(topic, 2, group);
        broker.produce(topic, 2, "v", n);
        List<String> ours = new ArrayList<>();
        List<String> kafkas = new ArrayList<>();
        Properties p = new Properties();
        p.put("bootstrap.servers", broker.bootstrap());
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", "explicit");
        try (LockstepShareConsumer<String, String> c = consumer(group, "explicit");
                KafkaShareConsumer<String, String> k =
                        new KafkaShareConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            c.subscribe(List.of(topic));
            k.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + DELIVERY_WAIT.toMillis();
            while (ours.size() + kafkas.size() < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                    ours.add(r.value());
                    c.acknowledge(r);
                }
                for (ConsumerRecord<String, String> r : k.poll(Duration.ofMillis(100))) {
                    kafkas.add(r.value());
                    k.acknowledge(r);
                }
            }
            c.commitSync();
            k.commitSync();
        }
        Set<String> both = new HashSet<>(ours);
        both.retainAll(kafkas);
        assertEquals(Set.of(), both, "no record went to both members");
        Set<String> all = new TreeSet<>(ours);
        all.addAll(kafkas);
        assertEquals(expected("v", n), all);
        assertEquals(n, ours.size() + kafkas.size());
    }

    @Test
    void transactionalAcknowledgementsAbortRedeliversCommitNeverAgain() {
        String group = "jk-txn";
        String topic = "jk-txn-t";
        broker.createTopic(topic, 1, group);
        broker.produce(topic, 1, "v", 6);
        try (LockstepShareTransactionCoordinator coord = coordinator(group);
                LockstepShareConsumer<String, String> c = consumer(group, "transactional")) {
            coord.beginTransaction("jk-txn-job-1", Duration.ofSeconds(60));
            coord.beginTransaction("jk-txn-job-2", Duration.ofSeconds(60));
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = pollFor(c, 6, DELIVERY_WAIT, rs -> rs.forEach(
                    r -> c.acknowledge(r, AcknowledgeType.ACCEPT, r.offset() < 3 ? "jk-txn-job-1" : "jk-txn-job-2")));
            assertEquals(6, got.size());
            Map<Long, Short> counts = new TreeMap<>();
            for (ConsumerRecord<String, String> r : got) {
                counts.put(r.offset(), r.deliveryCount().get());
            }
            // Acknowledged into a transaction: not again, in any way.
            assertThrows(IllegalStateException.class, () -> c.acknowledge(got.get(0), AcknowledgeType.ACCEPT));
            assertThrows(IllegalStateException.class,
                    () -> c.acknowledge(got.get(0), AcknowledgeType.ACCEPT, "jk-txn-job-2"));
            Map<TopicIdPartition, Optional<KafkaException>> result = c.commitSync();
            assertEquals(1, result.size());
            assertEquals(Optional.empty(), result.values().iterator().next());
            Map<String, Long> locked = new HashMap<>();
            coord.listPendingTransactions(group).forEach(t -> locked.put(t.id, t.lockedRecordCount()));
            assertEquals(Map.of("jk-txn-job-1", 3L, "jk-txn-job-2", 3L), locked);

            try (LockstepShareConsumer<String, String> other = consumer(group, "explicit")) {
                other.subscribe(List.of(topic));
                assertEquals(0, pollFor(other, 1, QUIET_WAIT, r -> r.forEach(other::acknowledge)).size(),
                        "LOCKED records go to nobody");
                coord.abortTransaction("jk-txn-job-2");
                List<ConsumerRecord<String, String>> back =
                        pollFor(other, 3, DELIVERY_WAIT, r -> r.forEach(x -> other.acknowledge(x, AcknowledgeType.ACCEPT)));
                Map<Long, Short> backCounts = new TreeMap<>();
                back.forEach(r -> backCounts.put(r.offset(), r.deliveryCount().get()));
                Map<Long, Short> want = new TreeMap<>(counts);
                want.keySet().removeIf(o -> o < 3);
                assertEquals(want, backCounts, "abort redelivers at the same delivery count");
                other.commitSync();
                coord.prepareTransaction("jk-txn-job-1");
                coord.commitTransaction("jk-txn-job-1");
                assertEquals(0, pollFor(other, 1, QUIET_WAIT, r -> r.forEach(other::acknowledge)).size(),
                        "committed records never come back");
            }
        }
    }

    @Test
    void refusedTransactionalAcknowledgementsReportTheWireSpecsErrors() {
        String group = "jk-txe";
        String topic = "jk-txe-t";
        broker.createTopic(topic, 2, group);
        broker.produce(topic, 2, "v", 4);
        Map<Integer, Exception> callbackErrors = Collections.synchronizedMap(new TreeMap<>());
        try (LockstepShareTransactionCoordinator coord = coordinator(group);
                LockstepShareConsumer<String, String> c = consumer(group, "explicit")) {
            coord.beginTransaction("jk-txe-p-1", null);
            coord.prepareTransaction("jk-txe-p-1");
            coord.beginTransaction("jk-txe-p-2", null);
            c.setAcknowledgementCommitCallback((offsets, e) -> {
                if (e != null) {
                    offsets.keySet().forEach(tip -> callbackErrors.put(tip.partition(), e));
                }
            });
            c.subscribe(List.of(topic));
            // The first record of partition 0 goes into a transaction that is not ONGOING:
            // INVALID_TXN_STATE (48). The first of partition 1 is RELEASEd inside a transaction:
            // INVALID_REQUEST (42). Every other record is released.
            Set<Integer> done = new HashSet<>();
            long deadline = System.currentTimeMillis() + DELIVERY_WAIT.toMillis();
            while (done.size() < 2 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    if (r.partition() == 0 && done.add(0)) {
                        c.acknowledge(r, AcknowledgeType.ACCEPT, "jk-txe-p-1");
                    } else if (r.partition() == 1 && done.add(1)) {
                        c.acknowledge(r, AcknowledgeType.RELEASE, "jk-txe-p-2");
                    } else {
                        c.acknowledge(r, AcknowledgeType.RELEASE);
                    }
                }
            }
            assertEquals(Set.of(0, 1), done);
            // Sent by the next poll or commitSync; each partition's outcome reaches the callback.
            c.commitSync();
            assertInstanceOf(InvalidTxnStateException.class, callbackErrors.get(0), callbackErrors.toString());
            assertInstanceOf(InvalidRequestException.class, callbackErrors.get(1), callbackErrors.toString());
        }
    }

    @Test
    void recoveryAfterABrokerCrashCommitsTheCompletedCheckpointAndRedeliversTheOther() throws Exception {
        String group = "jk-rec";
        String topic = "jk-rec-t";
        broker.createTopic(topic, 1, group);
        broker.produce(topic, 1, "v", 4);
        try (LockstepShareConsumer<String, String> c = consumer(group, "transactional")) {
            try (LockstepShareTransactionCoordinator coord = coordinator(group)) {
                coord.beginTransaction("jk-rec-job-1", null);
                coord.beginTransaction("jk-rec-job-2", null);
                c.subscribe(List.of(topic));
                List<ConsumerRecord<String, String>> got = pollFor(c, 4, DELIVERY_WAIT, rs -> rs.forEach(
                        r -> c.acknowledge(r, AcknowledgeType.ACCEPT, r.offset() < 2 ? "jk-rec-job-1" : "jk-rec-job-2")));
                assertEquals(4, got.size());
                c.commitSync().values().forEach(e -> assertEquals(Optional.empty(), e));
                // Checkpoint 1 completed its phase 1 and its sink commit; checkpoint 2 was
                // prepared but its sink never committed.
                coord.prepareTransaction("jk-rec-job-1");
                coord.prepareTransaction("jk-rec-job-2");
            }
        }
        broker.killAndRestart();
        try (LockstepShareTransactionCoordinator coord = coordinator(group)) {
            RecoveryReport report = coord.recover(t -> t.id.equals("jk-rec-job-1"));
            assertEquals(List.of("jk-rec-job-1"), report.committed(), report.toString());
            assertEquals(List.of("jk-rec-job-2"), report.aborted(), report.toString());
        }
        try (LockstepShareConsumer<String, String> c = consumer(group, "explicit")) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> back = pollFor(c, 2, DELIVERY_WAIT, r -> r.forEach(c::acknowledge));
            assertEquals(Set.of("v2", "v3"), values(back));
            c.commitSync();
            assertEquals(0, pollFor(c, 1, QUIET_WAIT, r -> r.forEach(c::acknowledge)).size());
        }
    }

    @Test
    void anUndeserializableRecordIsReportedAndCanBeRejectedByOffset() {
        String group = "jk-deser";
        String topic = "jk-deser-t";
        broker.createTopic(topic, 1, group);
        broker.produce(topic, 1, "v", 3);
        Properties p = new Properties();
        p.put("bootstrap.servers", broker.bootstrap());
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", "explicit");
        StringDeserializer strings = new StringDeserializer();
        org.apache.kafka.common.serialization.Deserializer<String> picky = (t, data) -> {
            String v = strings.deserialize(t, data);
            if ("v1".equals(v)) {
                throw new IllegalArgumentException("no v1");
            }
            return v;
        };
        try (LockstepShareConsumer<String, String> c = new LockstepShareConsumer<>(p, new StringDeserializer(), picky)) {
            c.subscribe(List.of(topic));
            org.apache.kafka.common.errors.RecordDeserializationException e = null;
            long deadline = System.currentTimeMillis() + DELIVERY_WAIT.toMillis();
            List<ConsumerRecord<String, String>> got = new ArrayList<>();
            while (e == null && System.currentTimeMillis() < deadline) {
                try {
                    ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(500));
                    rs.forEach(got::add);
                    rs.forEach(c::acknowledge);
                } catch (org.apache.kafka.common.errors.RecordDeserializationException ex) {
                    e = ex;
                }
            }
            assertTrue(e != null, "poll reported the bad record");
            assertEquals(1, e.offset());
            assertEquals(org.apache.kafka.common.errors.RecordDeserializationException.DeserializationExceptionOrigin.VALUE,
                    e.origin());
            // Until it is acknowledged the next poll refuses, as for any delivered record.
            assertThrows(IllegalStateException.class, () -> c.poll(Duration.ZERO));
            c.acknowledge(topic, 0, 1, AcknowledgeType.REJECT);
            got.addAll(pollFor(c, 2 - got.size(), DELIVERY_WAIT, rs -> rs.forEach(c::acknowledge)));
            assertEquals(Set.of("v0", "v2"), values(got));
            c.commitSync();
            assertEquals(0, pollFor(c, 1, QUIET_WAIT, rs -> rs.forEach(c::acknowledge)).size(), "v1 was rejected");
        }
    }

    @Test
    void aConsumerRidesOutABrokerRestart() throws Exception {
        String group = "jk-crash";
        String topic = "jk-crash-t";
        broker.createTopic(topic, 2, group);
        broker.produce(topic, 2, "a", 10);
        try (LockstepShareConsumer<String, String> c = consumer(group, "explicit")) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> before = pollFor(c, 10, DELIVERY_WAIT, rs -> rs.forEach(c::acknowledge));
            assertEquals(expected("a", 10), values(before));
            c.commitSync();
            broker.killAndRestart();
            broker.produce(topic, 2, "b", 10);
            // The member rejoins (UNKNOWN_MEMBER_ID after the restart), reopens its share sessions
            // and reads on; acknowledged records stay acknowledged.
            List<ConsumerRecord<String, String>> after = pollFor(c, 10, DELIVERY_WAIT, rs -> rs.forEach(c::acknowledge));
            assertEquals(expected("b", 10), values(after));
        }
    }

    @Test
    void transactionalAcknowledgementsOfRecordsAcquiredBeforeABrokerRestartAreRefused() throws Exception {
        String group = "jk-stale";
        String topic = "jk-stale-t";
        broker.createTopic(topic, 1, group);
        broker.produce(topic, 1, "v", 3);
        Map<Integer, Exception> errors = Collections.synchronizedMap(new TreeMap<>());
        try (LockstepShareTransactionCoordinator coord = coordinator(group);
                LockstepShareConsumer<String, String> c = consumer(group, "transactional")) {
            coord.beginTransaction("jk-stale-job-1", null);
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = new ArrayList<>();
            long deadline = System.currentTimeMillis() + DELIVERY_WAIT.toMillis();
            while (got.isEmpty() && System.currentTimeMillis() < deadline) {
                c.poll(Duration.ofMillis(500)).forEach(got::add);
            }
            assertTrue(!got.isEmpty());
            // ACQUIRED is not durable: after the crash the records are AVAILABLE again and this
            // member is unknown, so acknowledging them into a transaction is refused.
            broker.killAndRestart();
            // An ONGOING transaction does not survive a restart.
            assertEquals(List.of(), coord.listPendingTransactions(group));
            coord.beginTransaction("jk-stale-job-2", null);
            got.forEach(r -> c.acknowledge(r, AcknowledgeType.ACCEPT, "jk-stale-job-2"));
            Map<TopicIdPartition, Optional<KafkaException>> result = c.commitSync();
            assertEquals(1, result.size(), result.toString());
            KafkaException e = result.values().iterator().next().orElseThrow();
            assertTrue(e instanceof org.apache.kafka.common.errors.UnknownMemberIdException
                    || e instanceof org.apache.kafka.common.errors.InvalidRecordStateException, e.toString());
            // The transaction locked nothing; the records come back to the rejoined member.
            assertEquals(0L, coord.listPendingTransactions(group).get(0).lockedRecordCount());
            List<ConsumerRecord<String, String>> back = pollFor(c, got.size(), DELIVERY_WAIT,
                    rs -> rs.forEach(r -> c.acknowledge(r, AcknowledgeType.ACCEPT, "jk-stale-job-2")));
            assertEquals(values(got), values(back));
            c.commitSync().values().forEach(x -> assertEquals(Optional.empty(), x));
            assertEquals((long) got.size(), coord.listPendingTransactions(group).get(0).lockedRecordCount());
            coord.prepareTransaction("jk-stale-job-2");
            coord.commitTransaction("jk-stale-job-2");
        }
    }

    @Test
    void wakeupInterruptsPollAndClosedConsumersRefuseCalls() throws Exception {
        String group = "jk-wake";
        String topic = "jk-wake-t";
        broker.createTopic(topic, 1, group);
        LockstepShareConsumer<String, String> c = consumer(group, "implicit");
        c.subscribe(List.of(topic));
        c.wakeup();
        assertThrows(WakeupException.class, () -> c.poll(Duration.ofSeconds(5)));
        Thread waker = new Thread(() -> {
            try {
                Thread.sleep(500);
            } catch (InterruptedException ignored) {
                return;
            }
            c.wakeup();
        });
        long t0 = System.currentTimeMillis();
        waker.start();
        assertThrows(WakeupException.class, () -> c.poll(Duration.ofSeconds(20)));
        assertTrue(System.currentTimeMillis() - t0 < 5_000);
        waker.join();
        assertThrows(IllegalStateException.class, () -> c.clientInstanceId(Duration.ofSeconds(1)));
        assertEquals(Map.of(), c.metrics());
        c.unsubscribe();
        assertEquals(Set.of(), c.subscription());
        assertThrows(IllegalStateException.class, () -> c.poll(Duration.ZERO));
        c.close();
        c.close();
        assertThrows(IllegalStateException.class, () -> c.subscribe(List.of(topic)));
    }
}
