import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;
import java.io.BufferedReader;
import java.io.InputStreamReader;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * kafka-clients 4.4: one member of a consumer group, driven by the test through stdin/stdout.
 *
 *   java GroupMember --bootstrap H:P --topic T --group G [--protocol consumer|classic]
 *
 * Subscribes to T, polls, and commits synchronously after every poll that returned records.
 * Prints one line per event: "ASSIGNED p,p,..." (the whole assignment after each change, sorted),
 * "RECORD partition offset value", "COMMITTED n" (records committed so far). Reading "quit" or
 * the end of stdin closes the consumer (leaving the group) and prints "CLOSED".
 */
public final class GroupMember {
    public static void main(String[] args) throws Exception {
        String bootstrap = null, topic = null, group = null, protocol = "consumer";
        for (int n = 0; n < args.length; n += 2) {
            String v = args[n + 1];
            switch (args[n]) {
                case "--bootstrap": bootstrap = v; break;
                case "--topic": topic = v; break;
                case "--group": group = v; break;
                case "--protocol": protocol = v; break;
                default: throw new IllegalArgumentException("unknown argument " + args[n]);
            }
        }
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        if (protocol.equals("classic")) {
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        }
        AtomicBoolean quit = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = r.readLine()) != null) {
                    if (line.trim().equals("quit")) break;
                }
            } catch (Exception e) {
                // end of input
            }
            quit.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        long committed = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            TreeSet<Integer> assigned = new TreeSet<>();
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    for (TopicPartition tp : parts) assigned.remove(tp.partition());
                    report(assigned);
                }
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    for (TopicPartition tp : parts) assigned.add(tp.partition());
                    report(assigned);
                }
            });
            while (!quit.get()) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) continue;
                for (ConsumerRecord<String, String> r : records) {
                    System.out.println("RECORD " + r.partition() + " " + r.offset() + " " + r.value());
                }
                consumer.commitSync();
                committed += records.count();
                System.out.println("COMMITTED " + committed);
                System.out.flush();
            }
        }
        System.out.println("CLOSED");
        System.out.flush();
    }

    static void report(TreeSet<Integer> assigned) {
        List<String> parts = new ArrayList<>();
        for (int p : assigned) parts.add(Integer.toString(p));
        System.out.println("ASSIGNED " + String.join(",", parts));
        System.out.flush();
    }
}
