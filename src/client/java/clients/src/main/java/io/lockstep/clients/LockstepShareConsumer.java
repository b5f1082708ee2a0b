package io.lockstep.clients;

import java.time.Duration;
import java.util.Collection;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.AcknowledgementCommitCallback;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.serialization.Deserializer;

/** Lockstep's share consumer (work in progress). */
public class LockstepShareConsumer<K, V> implements TransactionalShareConsumer<K, V> {

    public LockstepShareConsumer(Properties props, Deserializer<K> keyDeserializer,
            Deserializer<V> valueDeserializer) {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public Set<String> subscription() {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public void subscribe(Collection<String> topics) {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public void unsubscribe() {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public ConsumerRecords<K, V> poll(Duration timeout) {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public void acknowledge(ConsumerRecord<K, V> record) {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public void acknowledge(ConsumerRecord<K, V> record, AcknowledgeType type) {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public void acknowledge(String topic, int partition, long offset, AcknowledgeType type) {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public void acknowledge(ConsumerRecord<K, V> record, AcknowledgeType type, String transactionId) {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public Map<TopicIdPartition, Optional<KafkaException>> commitSync() {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public Map<TopicIdPartition, Optional<KafkaException>> commitSync(Duration timeout) {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public void commitAsync() {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public void setAcknowledgementCommitCallback(AcknowledgementCommitCallback callback) {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public Uuid clientInstanceId(Duration timeout) {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public Optional<Integer> acquisitionLockTimeoutMs() {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public Map<MetricName, ? extends Metric> metrics() {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public void registerMetricForSubscription(KafkaMetric metric) {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public void unregisterMetricFromSubscription(KafkaMetric metric) {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public void close() {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public void close(Duration timeout) {
        throw new UnsupportedOperationException("not yet");
    }

    @Override
    public void wakeup() {
        throw new UnsupportedOperationException("not yet");
    }
}
