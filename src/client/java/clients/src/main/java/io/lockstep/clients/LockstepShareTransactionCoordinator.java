package io.lockstep.clients;

import io.lockstep.clients.internals.BrokerConnection;
import io.lockstep.clients.internals.ConnectionSecurity;
import io.lockstep.clients.internals.NodePool;
import io.lockstep.clients.internals.ShareTxnMessages;
import io.lockstep.clients.internals.Wire;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.function.Function;
import java.util.function.Predicate;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.NetworkException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.protocol.Errors;

/**
 * Lockstep's {@link ShareTransactionCoordinator}: a blocking client of the share-transaction RPCs
 * (keys 1000-1005, schemas/share-transactions.md) for one share group, plus the KIP's recovery
 * routine ({@link #recover}).
 *
 * <p>Configuration ({@link Properties}): {@code bootstrap.servers} (required), {@code group.id}
 * (required: the group of begin/prepare/commit/abort), {@code client.id}, {@code
 * request.timeout.ms} (one request's wait, default 30000), {@code default.api.timeout.ms} (one
 * call's deadline including retries, default 60000), {@code retry.backoff.ms} (first backoff,
 * default 100), {@code retry.backoff.max.ms} (default 1600), and kafka-clients' security settings:
 * {@code security.protocol} (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), {@code ssl.truststore.*} /
 * {@code ssl.keystore.*} (JKS, PKCS12, PEM), {@code ssl.endpoint.identification.algorithm}, {@code
 * sasl.mechanism} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and {@code sasl.jaas.config}. A refused
 * login is thrown at once as {@code SaslAuthenticationException} (SASL_AUTHENTICATION_FAILED), a
 * refused TLS handshake as {@code SslAuthenticationException}.
 *
 * <p>Routing: every call goes to the group's coordinator, found with FindCoordinator (key type
 * GROUP) on a bootstrap connection and cached until an error says it moved.
 *
 * <p>Retries, as the Rust client's: until the call's deadline, with doubling backoff, on connection
 * loss, timeout or an undecodable answer (reconnect and rediscover), COORDINATOR_NOT_AVAILABLE and
 * NOT_COORDINATOR (rediscover), COORDINATOR_LOAD_IN_PROGRESS, and CONCURRENT_TRANSACTIONS on
 * prepare/commit/abort (another phase of the id is in progress). On begin, CONCURRENT_TRANSACTIONS
 * means {@code share.transaction.max.pending} is reached and is thrown at once. Every other error
 * is thrown as Kafka's exception for its code (for prepare and commit wrapped in {@link
 * TransactionPrepareException} / {@link TransactionCommitException}). A call that runs out of time
 * throws {@link TimeoutException} (prepare and commit: wrapped, with error REQUEST_TIMED_OUT).
 *
 * <p>Thread-safe: calls are serialized (one request in flight per instance).
 */
public class LockstepShareTransactionCoordinator implements ShareTransactionCoordinator, AutoCloseable {
    private final String groupId;
    private final Duration requestTimeout;
    private final Duration apiTimeout;
    private final long backoffInitialMs;
    private final long backoffMaxMs;
    private final NodePool nodes;
    /** Coordinator node id per group, until an error invalidates it. */
    private final Map<String, Integer> coordinators = new HashMap<>();

    /** A client configured by {@code props} (see the class docs). No traffic until the first call. */
    public LockstepShareTransactionCoordinator(Properties props) {
        Objects.requireNonNull(props, "props");
        this.groupId = props.getProperty("group.id");
        if (groupId == null || groupId.isEmpty()) {
            throw new ConfigException("group.id must be set");
        }
        this.requestTimeout = Duration.ofMillis(longProp(props, "request.timeout.ms", 30_000));
        this.apiTimeout = Duration.ofMillis(longProp(props, "default.api.timeout.ms", 60_000));
        this.backoffInitialMs = longProp(props, "retry.backoff.ms", 100);
        this.backoffMaxMs = Math.max(backoffInitialMs, longProp(props, "retry.backoff.max.ms", 1_600));
        this.nodes = new NodePool(props.getProperty("bootstrap.servers"),
                props.getProperty("client.id", "lockstep-share-txn-coordinator"), requestTimeout,
                ConnectionSecurity.fromProperties(props));
    }

    static long longProp(Properties props, String name, long fallback) {
        String v = props.getProperty(name);
        if (v == null) {
            Object o = props.get(name);
            if (o instanceof Number) {
                return ((Number) o).longValue();
            }
            return fallback;
        }
        try {
            long parsed = Long.parseLong(v.trim());
            if (parsed < 0) {
                throw new ConfigException(name, v, "must be >= 0");
            }
            return parsed;
        } catch (NumberFormatException e) {
            throw new ConfigException(name, v, "not a number");
        }
    }

    /** The share group of begin / prepare / commit / abort. */
    public String groupId() {
        return groupId;
    }

    // ---- the KIP's interface ----

    @Override
    public void beginTransaction(String transactionId, Duration timeout) {
        begin(transactionId, timeout);
    }

    @Override
    public void prepareTransaction(String transactionId) throws TransactionPrepareException {
        prepare(transactionId);
    }

    @Override
    public void commitTransaction(String transactionId) throws TransactionCommitException {
        commit(transactionId);
    }

    @Override
    public void abortTransaction(String transactionId) {
        abort(transactionId);
    }

    @Override
    public List<PendingTransaction> listPendingTransactions(String groupId) {
        return listTransactions(groupId, List.of());
    }

    // ---- the same calls, answering the state the broker reports ----

    /**
     * {@link #beginTransaction}, returning the state after the call: ONGOING for a new transaction,
     * the existing state for a known id.
     *
     * @throws org.apache.kafka.common.errors.InvalidTxnTimeoutException a timeout of 0 or above the
     *     broker's maximum (INVALID_TRANSACTION_TIMEOUT)
     * @throws org.apache.kafka.common.errors.ConcurrentTransactionsException {@code
     *     share.transaction.max.pending} reached (CONCURRENT_TRANSACTIONS)
     * @throws org.apache.kafka.common.errors.InvalidRequestException an id not of the form {@code
     *     {groupId}-…} (INVALID_REQUEST)
     */
    public synchronized TransactionState begin(String transactionId, Duration timeout) {
        Objects.requireNonNull(transactionId, "transactionId");
        long timeoutMs = timeout == null ? -1 : timeout.toMillis();
        byte[] body = ShareTxnMessages.beginRequest(groupId, transactionId, timeoutMs);
        ShareTxnMessages.BeginResponse r = call("ShareBeginTransaction " + transactionId, groupId,
                ShareTxnMessages.SHARE_BEGIN_TRANSACTION, body, ShareTxnMessages::decodeBegin,
                ShareTxnMessages.BeginResponse::errorCode, false);
        throwIfError(r.errorCode(), r.errorMessage());
        return TransactionState.forCode(r.transactionState());
    }

    /** {@link #prepareTransaction}, returning the state after the call (PREPARE). */
    public synchronized TransactionState prepare(String transactionId) throws TransactionPrepareException {
        ShareTxnMessages.PhaseResponse r;
        try {
            r = phase("SharePrepareTransaction", ShareTxnMessages.SHARE_PREPARE_TRANSACTION, transactionId);
        } catch (TimeoutException e) {
            throw new TransactionPrepareException(transactionId, Errors.REQUEST_TIMED_OUT, null, e);
        }
        if (r.errorCode() != 0) {
            Errors error = Errors.forCode(r.errorCode());
            throw new TransactionPrepareException(transactionId, error, stateOrNull(r.transactionState()),
                    error.exception(r.errorMessage()));
        }
        return TransactionState.forCode(r.transactionState());
    }

    /** {@link #commitTransaction}, returning the state after the call (COMMITTED). */
    public synchronized TransactionState commit(String transactionId) throws TransactionCommitException {
        ShareTxnMessages.PhaseResponse r;
        try {
            r = phase("ShareCommitTransaction", ShareTxnMessages.SHARE_COMMIT_TRANSACTION, transactionId);
        } catch (TimeoutException e) {
            throw new TransactionCommitException(transactionId, Errors.REQUEST_TIMED_OUT, null, e);
        }
        if (r.errorCode() != 0) {
            Errors error = Errors.forCode(r.errorCode());
            throw new TransactionCommitException(transactionId, error, stateOrNull(r.transactionState()),
                    error.exception(r.errorMessage()));
        }
        return TransactionState.forCode(r.transactionState());
    }

    /**
     * {@link #abortTransaction}, returning the state after the call: ABORTED, or COMMITTED for a
     * transaction that had committed (the abort then changes nothing).
     */
    public synchronized TransactionState abort(String transactionId) {
        ShareTxnMessages.PhaseResponse r =
                phase("ShareAbortTransaction", ShareTxnMessages.SHARE_ABORT_TRANSACTION, transactionId);
        throwIfError(r.errorCode(), r.errorMessage());
        return TransactionState.forCode(r.transactionState());
    }

    /**
     * The transactions of {@code groupId} in {@code states} (empty: the pending ones, ONGOING and
     * PREPARE).
     */
    public synchronized List<PendingTransaction> listTransactions(String groupId, Collection<TransactionState> states) {
        Objects.requireNonNull(groupId, "groupId");
        List<Byte> codes = new ArrayList<>();
        for (TransactionState s : states) {
            codes.add(s.code());
        }
        byte[] body = ShareTxnMessages.listRequest(groupId, codes);
        ShareTxnMessages.ListResponse r = call("ShareListTransactions", groupId,
                ShareTxnMessages.SHARE_LIST_TRANSACTIONS, body, ShareTxnMessages::decodeList,
                ShareTxnMessages.ListResponse::errorCode, false);
        throwIfError(r.errorCode(), r.errorMessage());
        List<PendingTransaction> out = new ArrayList<>();
        for (ShareTxnMessages.ListedTransaction t : r.transactions()) {
            Map<TopicIdPartition, Long> locked = new LinkedHashMap<>();
            for (ShareTxnMessages.LockedPartition p : t.partitions()) {
                locked.put(new TopicIdPartition(p.topicId(), p.partitionIndex(), null), p.lockedRecords());
            }
            out.add(new PendingTransaction(groupId, t.transactionId(), TransactionState.forCode(t.state()),
                    t.timeoutMs(), t.createTimeMs(), t.prepareTimeMs(), locked));
        }
        return out;
    }

    // ---- the KIP's recovery routine ----

    /**
     * The KIP's recovery routine for this coordinator's group, run when a framework's coordinator
     * starts (e.g. a Flink job restored from a checkpoint): every pending transaction is listed; a
     * PREPARE one for which {@code shouldCommit} says yes (its checkpoint completed) is committed,
     * every other one is aborted. Failures of single transactions are reported, not thrown; only a
     * failed list throws.
     */
    public RecoveryReport recover(Predicate<PendingTransaction> shouldCommit) {
        return recover(this, groupId, shouldCommit);
    }

    /** {@link #recover(Predicate)} over any {@link ShareTransactionCoordinator}. */
    public static RecoveryReport recover(ShareTransactionCoordinator coordinator, String groupId,
            Predicate<PendingTransaction> shouldCommit) {
        RecoveryReport report = new RecoveryReport();
        for (PendingTransaction txn : coordinator.listPendingTransactions(groupId)) {
            try {
                if (txn.state == TransactionState.PREPARE && shouldCommit.test(txn)) {
                    coordinator.commitTransaction(txn.id);
                    report.addCommitted(txn.id);
                } else if (coordinator instanceof LockstepShareTransactionCoordinator) {
                    // An abort of an id committed meanwhile answers COMMITTED: report what is true.
                    TransactionState s = ((LockstepShareTransactionCoordinator) coordinator).abort(txn.id);
                    if (s == TransactionState.COMMITTED) {
                        report.addCommitted(txn.id);
                    } else {
                        report.addAborted(txn.id);
                    }
                } else {
                    coordinator.abortTransaction(txn.id);
                    report.addAborted(txn.id);
                }
            } catch (KafkaException e) {
                report.addFailed(txn.id, e);
            }
        }
        return report;
    }

    @Override
    public synchronized void close() {
        nodes.close();
    }

    // ---- transport ----

    private ShareTxnMessages.PhaseResponse phase(String name, short key, String transactionId) {
        Objects.requireNonNull(transactionId, "transactionId");
        byte[] body = ShareTxnMessages.phaseRequest(groupId, transactionId);
        return call(name + " " + transactionId, groupId, key, body, ShareTxnMessages::decodePhase,
                ShareTxnMessages.PhaseResponse::errorCode, true);
    }

    private static TransactionState stateOrNull(byte code) {
        try {
            return TransactionState.forCode(code);
        } catch (IllegalArgumentException e) {
            return null;
        }
    }

    private static void throwIfError(short code, String message) {
        if (code != 0) {
            throw Errors.forCode(code).exception(message);
        }
    }

    /**
     * Sends {@code body} as API {@code key} to {@code group}'s coordinator and decodes the answer,
     * retrying as the class docs say until the deadline. Returns the last answer (whose error, if
     * any, is not retriable or ran out of time).
     */
    private <T> T call(String what, String group, short key, byte[] body, Function<ByteBuffer, T> decode,
            Function<T, Short> errorOf, boolean concurrentRetriable) {
        long deadline = System.nanoTime() + apiTimeout.toNanos();
        long backoff = backoffInitialMs;
        RuntimeException lastFailure = null;
        while (true) {
            long remainingMs = (deadline - System.nanoTime()) / 1_000_000;
            if (remainingMs <= 0) {
                break;
            }
            Duration timeout = Duration.ofMillis(Math.min(requestTimeout.toMillis(), remainingMs));
            boolean rediscover = false;
            try {
                BrokerConnection c = coordinatorConnection(group, timeout);
                T response = decode.apply(c.sendFlexible(key, ShareTxnMessages.VERSION, body, timeout));
                Errors error = Errors.forCode(errorOf.apply(response));
                switch (error) {
                    case NOT_COORDINATOR:
                    case COORDINATOR_NOT_AVAILABLE:
                        rediscover = true;
                        break;
                    case COORDINATOR_LOAD_IN_PROGRESS:
                        break;
                    case CONCURRENT_TRANSACTIONS:
                        if (!concurrentRetriable) {
                            return response;
                        }
                        break;
                    default:
                        return response;
                }
                lastFailure = error.exception(what + ": " + error.name());
            } catch (NetworkException | TimeoutException | Wire.MalformedException e) {
                lastFailure = e;
                rediscover = true;
            } catch (ApiException e) {
                // FindCoordinator's own error (e.g. COORDINATOR_NOT_AVAILABLE while the broker starts).
                if (!(e instanceof org.apache.kafka.common.errors.RetriableException)) {
                    throw e;
                }
                lastFailure = e;
                rediscover = true;
            }
            if (rediscover) {
                Integer node = coordinators.remove(group);
                if (node != null && nodes.node(node) != null) {
                    nodes.drop(nodes.node(node).address());
                }
            }
            long sleep = Math.min(backoff, Math.max(0, (deadline - System.nanoTime()) / 1_000_000));
            try {
                Thread.sleep(sleep);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new InterruptException(e);
            }
            backoff = Math.min(backoff * 2, backoffMaxMs);
        }
        throw new TimeoutException(what + " (group " + group + ") did not complete within "
                + apiTimeout.toMillis() + " ms" + (lastFailure != null ? ": " + lastFailure.getMessage() : ""),
                lastFailure);
    }

    private BrokerConnection coordinatorConnection(String group, Duration timeout) {
        Integer node = coordinators.get(group);
        if (node == null) {
            node = nodes.findCoordinator(group, timeout).id();
            coordinators.put(group, node);
        }
        return nodes.connection(node, timeout);
    }
}
