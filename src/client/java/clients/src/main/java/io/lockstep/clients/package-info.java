/**
 * The KIP's Java interfaces for transactional acknowledgements of share groups (KAFKA-19883) and
 * Lockstep's implementations of them.
 *
 * <ul>
 *   <li>{@link io.lockstep.clients.ShareTransactionCoordinator}, the KIP's coordinator API (begin,
 *       prepare, commit, abort, list), implemented by {@link
 *       io.lockstep.clients.LockstepShareTransactionCoordinator} with coordinator discovery, retries
 *       and the KIP's recovery routine ({@code recover}).
 *   <li>{@link io.lockstep.clients.TransactionalShareConsumer}, Kafka's {@code ShareConsumer} plus
 *       {@code acknowledge(record, type, transactionId)}, implemented by {@link
 *       io.lockstep.clients.LockstepShareConsumer}, which speaks the Kafka wire protocol itself
 *       (KIP-932 share groups and key 1001 ShareAcknowledgeTransactional).
 * </ul>
 *
 * <p>The wire specification of the share-transaction RPCs (keys 1000-1005) is {@code
 * schemas/share-transactions.md} with the JSON message specs {@code schemas/Share*.json}.
 */
package io.lockstep.clients;
