package io.lockstep.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.errors.InvalidRecordStateException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.parallel.Execution;
import org.junit.jupiter.api.parallel.ExecutionMode;

/**
 * Processing that outlasts the broker's timeouts, as Kafka's consumer handles it: RENEW
 * acknowledgements (KIP-1222) keep records acquired past their lock, and the background heartbeat
 * keeps the membership (and so the acquired records) while the application processes longer than
 * {@code share.session.timeout.ms} between polls. The two long tests run concurrently (each mostly
 * waits out a broker timeout).
 */
class LongProcessingTest extends BrokerTest {
    /** Kafka's least group share.record.lock.duration.ms. */
    private static final long LOCK_MS = 15_000;
    /** Kafka's least (and default) group share.session.timeout.ms. */
    private static final long SESSION_TIMEOUT_MS = 45_000;

    private static LockstepShareConsumer<String, String> consumer(String group, String mode) {
        return LockstepShareConsumerTest.consumer(broker, group, mode);
    }

    /** Subscribes {@code c} to {@code topic}, its commit callback collecting the errors into {@code errors}. */
    private static void subscribeCollectingErrors(LockstepShareConsumer<String, String> c, String topic,
            List<Exception> errors) {
        c.setAcknowledgementCommitCallback((offsets, e) -> {
            if (e != null) {
                errors.add(e);
            }
        });
        c.subscribe(List.of(topic));
    }

    /**
     * Three records renewed on every poll while their processing (20 s) outlasts the 15 s lock,
     * with a second member polling the same partition all along: it never gets them, the
     * processing consumer gets each back at delivery count 1 after every renewal, then accepts it.
     */
    @Test
    @Execution(ExecutionMode.CONCURRENT)
    void renewKeepsRecordsAcquiredPastTheirLock() throws Exception {
        String group = "jk-renew";
        String topic = "jk-renew-t";
        broker.createTopic(topic, 1, group);
        broker.setGroupConfig(group, "share.record.lock.duration.ms", Long.toString(LOCK_MS));
        broker.produce(topic, 1, "v", 3);
        long processMs = LOCK_MS + 5_000;
        List<String> stolen = new CopyOnWriteArrayList<>();
        AtomicBoolean done = new AtomicBoolean();
        List<Exception> ackErrors = new CopyOnWriteArrayList<>();
        Map<Long, Long> firstSeen = new HashMap<>();
        Set<Long> accepted = new TreeSet<>();
        int renews = 0;
        int returns = 0;
        long maxHeldMs = 0;
        try (LockstepShareConsumer<String, String> c = consumer(group, "explicit")) {
            subscribeCollectingErrors(c, topic, ackErrors);
            // Started once this member holds all three records: from then on it polls the
            // partition too, and would get any record whose lock ran out.
            Thread other = new Thread(() -> {
                try (LockstepShareConsumer<String, String> o = consumer(group, "implicit")) {
                    o.subscribe(List.of(topic));
                    while (!done.get()) {
                        o.poll(Duration.ofMillis(300)).forEach(r -> stolen.add(r.value()));
                    }
                }
            }, "jk-renew-other");
            other.setDaemon(true);
            try {
                long deadline = System.currentTimeMillis() + 60_000;
                while (accepted.size() < 3 && System.currentTimeMillis() < deadline && ackErrors.isEmpty()) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                        returns++;
                        assertEquals(Optional.of((short) 1), r.deliveryCount(), "never redelivered: " + r);
                        long now = System.currentTimeMillis();
                        long held = now - firstSeen.computeIfAbsent(r.offset(), x -> now);
                        if (held >= processMs) {
                            c.acknowledge(r, AcknowledgeType.ACCEPT);
                            accepted.add(r.offset());
                            maxHeldMs = Math.max(maxHeldMs, held);
                        } else {
                            c.acknowledge(r, AcknowledgeType.RENEW);
                            renews++;
                        }
                    }
                    if (firstSeen.size() == 3 && other.getState() == Thread.State.NEW) {
                        other.start();
                    }
                    Thread.sleep(2_000); // a slice of the (slow) processing
                }
                Map<TopicIdPartition, Optional<KafkaException>> result = c.commitSync();
                result.values().forEach(e -> assertEquals(Optional.empty(), e));
            } finally {
                done.set(true);
                if (other.getState() != Thread.State.NEW) {
                    other.join(30_000);
                }
            }
        }
        assertEquals(List.of(), ackErrors);
        assertEquals(Set.of(0L, 1L, 2L), accepted);
        assertTrue(renews >= 3 * 5, "renewed on every poll: " + renews);
        assertTrue(returns > renews, "each renewed record came back: " + returns);
        assertTrue(maxHeldMs > LOCK_MS, "held " + maxHeldMs + " ms, past the lock");
        assertEquals(List.of(), stolen, "the other member got nothing");
    }

    /**
     * The member processes its records for longer than share.session.timeout.ms without polling
     * (their lock, 60 s, outlasts it): the background heartbeat keeps it in the group, so the
     * acknowledgements afterwards succeed and nothing is redelivered. Without it the coordinator
     * would evict the member and release its records.
     */
    @Test
    @Execution(ExecutionMode.CONCURRENT)
    void backgroundHeartbeatKeepsTheMembershipWhileProcessingOutlastsTheSessionTimeout() throws Exception {
        String group = "jk-hb";
        String topic = "jk-hb-t";
        broker.createTopic(topic, 1, group);
        broker.setGroupConfig(group, "share.session.timeout.ms", Long.toString(SESSION_TIMEOUT_MS));
        broker.setGroupConfig(group, "share.record.lock.duration.ms", "60000");
        broker.produce(topic, 1, "v", 3);
        List<Exception> ackErrors = new CopyOnWriteArrayList<>();
        try (LockstepShareConsumer<String, String> c = consumer(group, "explicit")) {
            subscribeCollectingErrors(c, topic, ackErrors);
            List<ConsumerRecord<String, String>> got = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 30_000;
            while (got.size() < 3 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    got.add(r);
                }
                if (got.size() < 3) {
                    got.forEach(r -> c.acknowledge(r, AcknowledgeType.RELEASE));
                    got.clear();
                }
            }
            assertEquals(3, got.size());
            String member = c.memberId();
            Thread.sleep(SESSION_TIMEOUT_MS + 3_000); // processing, no poll
            got.forEach(r -> c.acknowledge(r, AcknowledgeType.ACCEPT));
            Map<TopicIdPartition, Optional<KafkaException>> result = c.commitSync();
            assertEquals(1, result.size(), result.toString());
            assertEquals(Optional.empty(), result.values().iterator().next(), "acknowledged after the session timeout");
            assertEquals(member, c.memberId());
            assertEquals(0, LockstepShareConsumerTest.pollFor(c, 1, Duration.ofSeconds(2),
                    rs -> rs.forEach(c::acknowledge)).size(), "nothing redelivered");
        }
        assertEquals(List.of(), ackErrors);
    }

    /**
     * No poll for max.poll.interval.ms: the consumer leaves the group (as Kafka's does), and the
     * next poll joins it again.
     */
    @Test
    void noPollForMaxPollIntervalLeavesTheGroupAndTheNextPollRejoins() throws Exception {
        String group = "jk-mpi";
        String topic = "jk-mpi-t";
        broker.createTopic(topic, 1, group);
        broker.produce(topic, 1, "v", 2);
        Properties p = LockstepShareConsumerTest.props(broker, group, "implicit");
        p.put("max.poll.interval.ms", "1500");
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", broker.bootstrap()));
                LockstepShareConsumer<String, String> c =
                        new LockstepShareConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            c.subscribe(List.of(topic));
            assertEquals(2, LockstepShareConsumerTest.pollFor(c, 2, Duration.ofSeconds(30), rs -> { }).size());
            assertEquals(1, members(admin, group));
            Thread.sleep(3_000);
            assertEquals(0, members(admin, group), "left after max.poll.interval.ms without a poll");
            c.poll(Duration.ofMillis(500));
            assertEquals(1, members(admin, group), "the next poll joined again");
        }
    }

    private static int members(Admin admin, String group) throws Exception {
        return admin.describeShareGroups(List.of(group)).all().get(30, TimeUnit.SECONDS).get(group).members().size();
    }

    /**
     * RENEW on a group with share.renew.acknowledge.enable=false fails as on Kafka
     * (InvalidRecordStateException to the callback; the record is not returned again); RENEW is
     * refused in implicit mode and inside a transaction.
     */
    @Test
    void renewRefusals() {
        String group = "jk-renew-off";
        String topic = "jk-renew-off-t";
        broker.createTopic(topic, 1, group);
        broker.setGroupConfig(group, "share.renew.acknowledge.enable", "false");
        broker.produce(topic, 1, "v", 1);
        List<Exception> ackErrors = new CopyOnWriteArrayList<>();
        try (LockstepShareConsumer<String, String> c = consumer(group, "explicit")) {
            subscribeCollectingErrors(c, topic, ackErrors);
            List<ConsumerRecord<String, String>> got = LockstepShareConsumerTest.pollFor(c, 1, Duration.ofSeconds(30),
                    rs -> { });
            assertEquals(1, got.size());
            assertThrows(IllegalArgumentException.class, () -> c.acknowledge(got.get(0), AcknowledgeType.RENEW, "t1"));
            c.acknowledge(got.get(0), AcknowledgeType.RENEW);
            assertEquals(0, c.poll(Duration.ofMillis(500)).count(), "a failed renewal returns nothing");
            assertEquals(1, ackErrors.size(), ackErrors.toString());
            assertInstanceOf(InvalidRecordStateException.class, ackErrors.get(0));
        }
        try (LockstepShareConsumer<String, String> c = consumer(group, "implicit")) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = LockstepShareConsumerTest.pollFor(c, 1, Duration.ofSeconds(30),
                    rs -> { });
            assertEquals(1, got.size(), "released by the first consumer's close");
            assertThrows(IllegalStateException.class, () -> c.acknowledge(got.get(0), AcknowledgeType.RENEW));
        }
    }
}
