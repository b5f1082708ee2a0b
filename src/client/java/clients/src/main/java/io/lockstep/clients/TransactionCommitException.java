package io.lockstep.clients;

import org.apache.kafka.common.protocol.Errors;

/**
 * {@link ShareTransactionCoordinator#commitTransaction(String)} failed. The wire spec's errors
 * (schemas/share-transactions.md) arrive as {@link #error()} with Kafka's exception as the cause:
 * INVALID_TXN_STATE (the state machine does not allow it; {@link #state()} tells the state, e.g.
 * ABORTED after a timeout), TRANSACTIONAL_ID_NOT_FOUND, GROUP_ID_NOT_FOUND, INVALID_REQUEST.
 */
public class TransactionCommitException extends ShareTransactionException {
    private static final long serialVersionUID = 1L;

    public TransactionCommitException(
            String transactionId, Errors error, TransactionState state, Throwable cause) {
        super("Commit", transactionId, error, state, cause);
    }
}
