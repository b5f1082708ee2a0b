package io.lockstep.clients;

import java.util.Optional;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.protocol.Errors;

/**
 * A phase of a share transaction failed: the broker refused it ({@link #error()} is its Kafka
 * error, the cause is that error's exception, {@link #state()} the state it reported) or the client
 * could not reach it in time ({@link #error()} is the error it last saw, e.g. REQUEST_TIMED_OUT or
 * NETWORK_EXCEPTION, and the state is unknown).
 */
public abstract class ShareTransactionException extends KafkaException {
    private static final long serialVersionUID = 1L;

    private final String transactionId;
    private final Errors error;
    private final TransactionState state;

    protected ShareTransactionException(
            String phase, String transactionId, Errors error, TransactionState state, Throwable cause) {
        super(phase + " of share transaction " + transactionId + " failed: " + error.name()
                + (cause != null && cause.getMessage() != null ? " (" + cause.getMessage() + ")" : "")
                + (state != null ? ", transaction now " + state : ""), cause);
        this.transactionId = transactionId;
        this.error = error;
        this.state = state;
    }

    /** The transaction. */
    public String transactionId() {
        return transactionId;
    }

    /** The Kafka error code the broker answered, or the client-side error that ended the call. */
    public Errors error() {
        return error;
    }

    /** The state the broker reported with the error; empty if no answer came. */
    public Optional<TransactionState> state() {
        return Optional.ofNullable(state);
    }
}
