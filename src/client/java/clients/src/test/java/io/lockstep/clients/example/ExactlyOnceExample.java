package io.lockstep.clients.example;

import io.lockstep.clients.LockstepShareConsumer;
import io.lockstep.clients.LockstepShareTransactionCoordinator;
import io.lockstep.clients.RecoveryReport;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * The README's example of the Java API: read a share group's records in checkpoints, each
 * checkpoint one share transaction, into a "sink" whose output becomes visible only when the
 * checkpoint commits. Records of a checkpoint that fails come back; records of a committed one
 * never again.
 *
 * <p>Run against a broker: {@code ExactlyOnceExample.run("127.0.0.1:9092", "events", "demo", "job1", 3)};
 * {@link ExactlyOnceExampleTest} starts one and runs it.
 */
public final class ExactlyOnceExample {
    private ExactlyOnceExample() {}

    /**
     * Reads {@code topic} through share group {@code group} in {@code checkpoints} checkpoints of job
     * {@code job} (the transactional-id prefix: a job must not reuse another run's ids); returns the
     * sink.
     */
    public static List<String> run(String bootstrap, String topic, String group, String job, int checkpoints) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("share.acknowledgement.mode", "transactional");
        List<String> sink = new ArrayList<>();           // committed output
        Set<String> committedCheckpoints = new HashSet<>(); // what the sink knows it committed
        try (LockstepShareTransactionCoordinator coordinator = new LockstepShareTransactionCoordinator(props);
                LockstepShareConsumer<String, String> consumer =
                        new LockstepShareConsumer<>(props, new StringDeserializer(), new StringDeserializer())) {
            // The KIP's recovery routine: a PREPARE whose checkpoint the sink committed is committed,
            // everything else pending is aborted (its records come back).
            RecoveryReport recovered = coordinator.recover(txn -> committedCheckpoints.contains(txn.id));
            System.out.println("recovered: " + recovered);
            consumer.subscribe(List.of(topic));
            for (int checkpoint = 1; checkpoint <= checkpoints; checkpoint++) {
                String txn = group + "-" + job + "-" + checkpoint;        // {groupId}-{prefix}-{checkpointId}
                coordinator.beginTransaction(txn, Duration.ofMinutes(1));
                List<String> staged = new ArrayList<>();
                long until = System.currentTimeMillis() + 2_000;
                while (System.currentTimeMillis() < until) {
                    for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                        staged.add(record.value());
                        consumer.acknowledge(record, AcknowledgeType.ACCEPT, txn); // ACQUIRED -> LOCKED
                    }
                }
                Map<TopicIdPartition, Optional<KafkaException>> sent = consumer.commitSync();
                boolean ok = sent.values().stream().allMatch(Optional::isEmpty);
                if (!ok) {
                    coordinator.abortTransaction(txn);                    // the records come back
                    System.out.println(txn + ": acknowledgements refused " + sent + ", aborted");
                    continue;
                }
                coordinator.prepareTransaction(txn);                      // phase 1: locks durable
                sink.addAll(staged);                                      // the sink commits its output
                committedCheckpoints.add(txn);
                coordinator.commitTransaction(txn);                       // phase 2: LOCKED -> acknowledged
                System.out.println(txn + ": committed " + staged.size() + " records");
            }
        }
        return sink;
    }
}
