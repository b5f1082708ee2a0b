package io.lockstep.clients;

import java.time.Duration;
import java.util.List;

/**
 * The KIP's coordinator API for transactional acknowledgements of a share group (KAFKA-19883,
 * "Public Interfaces"): a stream processor's coordinator begins a transaction per checkpoint, its
 * workers acknowledge records into it ({@link TransactionalShareConsumer#acknowledge(
 * org.apache.kafka.clients.consumer.ConsumerRecord, org.apache.kafka.clients.consumer.AcknowledgeType,
 * String)}), and the coordinator runs the two phases: {@link #prepareTransaction} makes the locks
 * durable, {@link #commitTransaction} acknowledges the locked records for good, and
 * {@link #abortTransaction} makes them available again.
 *
 * <p>All operations are idempotent by transaction id: a begin of a known id keeps it, a prepare of
 * a prepared one, a commit of a committed one and an abort of an aborted or committed one succeed
 * without effect.
 *
 * <p>Transaction ids have the form {@code {groupId}-{transactionalIdPrefix}-{checkpointId}}.
 */
public interface ShareTransactionCoordinator {

    /**
     * Starts {@code transactionId} (state ONGOING), or keeps it as it is if the broker knows it.
     *
     * @param timeout how long the transaction may stay ONGOING before the broker aborts it; {@code
     *     null} for the group's {@code share.transaction.timeout.ms}
     */
    void beginTransaction(String transactionId, Duration timeout);

    /**
     * Phase 1: returns once the transaction's locks are durable (state PREPARE).
     *
     * @throws TransactionPrepareException if the broker refused (its {@link
     *     TransactionPrepareException#state()} says what the transaction is now, e.g. ABORTED after
     *     its timeout)
     */
    void prepareTransaction(String transactionId) throws TransactionPrepareException;

    /**
     * Phase 2: the locked records become acknowledged for good (state COMMITTED); returns once the
     * decision is durable.
     *
     * @throws TransactionCommitException if the broker refused (e.g. the transaction is not prepared)
     */
    void commitTransaction(String transactionId) throws TransactionCommitException;

    /** Aborts the transaction: its locked records become available again (state ABORTED). */
    void abortTransaction(String transactionId);

    /** The group's pending transactions (ONGOING and PREPARE). */
    List<PendingTransaction> listPendingTransactions(String groupId);
}
