package io.lockstep.clients;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ShareConsumer;

/**
 * A {@link ShareConsumer} that can acknowledge records inside a share transaction (the KIP's new
 * consumer method). A transactional acknowledgement moves the record from ACQUIRED to LOCKED on the
 * broker: it is neither redelivered nor acknowledged until the transaction commits (the record is
 * acknowledged for good) or aborts (the record becomes available again, with the delivery count it
 * had).
 *
 * @param <K> the record key type
 * @param <V> the record value type
 */
public interface TransactionalShareConsumer<K, V> extends ShareConsumer<K, V> {

    /**
     * Acknowledges {@code record}, delivered by the last {@link #poll}, into transaction {@code
     * transactionId}, which must be ONGOING when the acknowledgement reaches the broker. Like
     * explicit acknowledgements, it is sent by the next {@link #poll}, {@link #commitSync}, {@link
     * #commitAsync} or {@link #close}, and its outcome is reported in the same way (the
     * acknowledgement commit callback and the result of {@code commitSync}).
     *
     * @param type ACCEPT or REJECT (RELEASE inside a transaction is refused by the broker with
     *     INVALID_REQUEST)
     */
    void acknowledge(ConsumerRecord<K, V> record, AcknowledgeType type, String transactionId);
}
