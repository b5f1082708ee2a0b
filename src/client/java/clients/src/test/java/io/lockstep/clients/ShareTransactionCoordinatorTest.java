package io.lockstep.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.stream.Collectors;
import org.apache.kafka.common.errors.ConcurrentTransactionsException;
import org.apache.kafka.common.errors.InvalidRequestException;
import org.apache.kafka.common.errors.InvalidTxnStateException;
import org.apache.kafka.common.errors.InvalidTxnTimeoutException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.TransactionalIdNotFoundException;
import org.apache.kafka.common.protocol.Errors;
import org.junit.jupiter.api.Test;

/**
 * {@link LockstepShareTransactionCoordinator} against the release broker: the KIP's five calls,
 * their idempotency, the ONGOING timeout, the wire spec's error codes as Java exceptions, the
 * recovery routine, and retries across a broker restart.
 */
class ShareTransactionCoordinatorTest extends BrokerTest {
    static LockstepShareTransactionCoordinator coordinator(String group) {
        return coordinator(broker, group);
    }

    static LockstepShareTransactionCoordinator coordinator(LockstepBroker broker, String group) {
        Properties p = new Properties();
        p.put("bootstrap.servers", broker.bootstrap());
        p.put("group.id", group);
        p.put("default.api.timeout.ms", "20000");
        return new LockstepShareTransactionCoordinator(p);
    }

    private static Set<String> pendingIds(LockstepShareTransactionCoordinator c, String group) {
        return c.listPendingTransactions(group).stream().map(t -> t.id).collect(Collectors.toSet());
    }

    @Test
    void beginPrepareCommitAbortAndListThroughTheKipInterface() {
        String group = "jc-life";
        broker.createTopic("jc-life-t", 1, group);
        try (LockstepShareTransactionCoordinator c = coordinator(group)) {
            ShareTransactionCoordinator kip = c;
            kip.beginTransaction("jc-life-job-1", Duration.ofSeconds(60));
            kip.beginTransaction("jc-life-job-2", null);
            List<PendingTransaction> pending = kip.listPendingTransactions(group);
            assertEquals(Set.of("jc-life-job-1", "jc-life-job-2"),
                    pending.stream().map(PendingTransaction::id).collect(Collectors.toSet()));
            PendingTransaction first = pending.stream().filter(t -> t.id.equals("jc-life-job-1")).findFirst().get();
            assertEquals(TransactionState.ONGOING, first.state);
            assertEquals(60_000, first.timeoutMs());
            assertEquals(Optional.empty(), first.prepareTimeMs());
            assertEquals(group, first.groupId());
            assertTrue(first.createTimeMs() > 0);

            kip.prepareTransaction("jc-life-job-1");
            PendingTransaction prepared = kip.listPendingTransactions(group).stream()
                    .filter(t -> t.id.equals("jc-life-job-1")).findFirst().get();
            assertEquals(TransactionState.PREPARE, prepared.state);
            assertTrue(prepared.prepareTimeMs().isPresent());
            kip.commitTransaction("jc-life-job-1");
            kip.abortTransaction("jc-life-job-2");
            assertEquals(Set.of(), pendingIds(c, group));
            // The finished ones are listed by state.
            Set<String> done = c.listTransactions(group, List.of(TransactionState.COMMITTED, TransactionState.ABORTED))
                    .stream().map(t -> t.id + "=" + t.state).collect(Collectors.toSet());
            assertEquals(Set.of("jc-life-job-1=COMMITTED", "jc-life-job-2=ABORTED"), done);
        }
    }

    @Test
    void everyCallIsIdempotentByTransactionId() {
        String group = "jc-idem";
        broker.createTopic("jc-idem-t", 1, group);
        try (LockstepShareTransactionCoordinator c = coordinator(group)) {
            assertEquals(TransactionState.ONGOING, c.begin("jc-idem-a-1", null));
            assertEquals(TransactionState.ONGOING, c.begin("jc-idem-a-1", null));
            assertEquals(TransactionState.PREPARE, c.prepare("jc-idem-a-1"));
            assertEquals(TransactionState.PREPARE, c.prepare("jc-idem-a-1"));
            // begin of a known id returns its state.
            assertEquals(TransactionState.PREPARE, c.begin("jc-idem-a-1", null));
            assertEquals(TransactionState.COMMITTED, c.commit("jc-idem-a-1"));
            assertEquals(TransactionState.COMMITTED, c.commit("jc-idem-a-1"));
            // abort after commit changes nothing and says so.
            assertEquals(TransactionState.COMMITTED, c.abort("jc-idem-a-1"));
            c.abortTransaction("jc-idem-a-1");
            assertEquals(TransactionState.ONGOING, c.begin("jc-idem-a-2", null));
            assertEquals(TransactionState.ABORTED, c.abort("jc-idem-a-2"));
            assertEquals(TransactionState.ABORTED, c.abort("jc-idem-a-2"));
        }
    }

    @Test
    void theWireSpecsErrorCodesArriveAsKafkasExceptions() {
        String group = "jc-errs";
        broker.createTopic("jc-errs-t", 1, group);
        try (LockstepShareTransactionCoordinator c = coordinator(group)) {
            c.beginTransaction("jc-errs-a-1", null);
            // 48 INVALID_TXN_STATE: commit from ONGOING.
            TransactionCommitException commit =
                    assertThrows(TransactionCommitException.class, () -> c.commitTransaction("jc-errs-a-1"));
            assertEquals(Errors.INVALID_TXN_STATE, commit.error());
            assertInstanceOf(InvalidTxnStateException.class, commit.getCause());
            assertEquals(Optional.of(TransactionState.ONGOING), commit.state());
            assertEquals("jc-errs-a-1", commit.transactionId());
            // 42 INVALID_REQUEST: an id not of the form {groupId}-...
            assertThrows(InvalidRequestException.class, () -> c.beginTransaction("other-a-1", null));
            // 50 INVALID_TRANSACTION_TIMEOUT: timeout 0.
            assertThrows(InvalidTxnTimeoutException.class, () -> c.beginTransaction("jc-errs-t0-1", Duration.ZERO));
            // 105 TRANSACTIONAL_ID_NOT_FOUND: phases of an unknown id.
            TransactionPrepareException prepare =
                    assertThrows(TransactionPrepareException.class, () -> c.prepareTransaction("jc-errs-never-1"));
            assertEquals(Errors.TRANSACTIONAL_ID_NOT_FOUND, prepare.error());
            assertInstanceOf(TransactionalIdNotFoundException.class, prepare.getCause());
            commit = assertThrows(TransactionCommitException.class, () -> c.commitTransaction("jc-errs-never-1"));
            assertEquals(Errors.TRANSACTIONAL_ID_NOT_FOUND, commit.error());
            assertThrows(TransactionalIdNotFoundException.class, () -> c.abortTransaction("jc-errs-never-1"));
            // 51 CONCURRENT_TRANSACTIONS: share.transaction.max.pending (5) reached, thrown at once.
            for (int i = 2; i <= 5; i++) {
                c.beginTransaction("jc-errs-a-" + i, null);
            }
            long t0 = System.nanoTime();
            assertThrows(ConcurrentTransactionsException.class, () -> c.beginTransaction("jc-errs-a-6", null));
            assertTrue(System.nanoTime() - t0 < 5_000_000_000L, "not retried on begin");
            // The recovery routine: nothing is PREPARE, so all five are aborted.
            RecoveryReport report = c.recover(t -> true);
            assertEquals(5, report.aborted().size(), report.toString());
            assertEquals(List.of(), report.committed());
            assertEquals(Set.of(), pendingIds(c, group));
        }
    }

    @Test
    void anOngoingTransactionTimesOutIntoAborted() throws Exception {
        String group = "jc-tmo";
        broker.createTopic("jc-tmo-t", 1, group);
        try (LockstepShareTransactionCoordinator c = coordinator(group)) {
            assertEquals(TransactionState.ONGOING, c.begin("jc-tmo-a-1", Duration.ofMillis(1_000)));
            long deadline = System.currentTimeMillis() + 15_000;
            while (pendingIds(c, group).contains("jc-tmo-a-1") && System.currentTimeMillis() < deadline) {
                Thread.sleep(200);
            }
            assertEquals(Set.of(), pendingIds(c, group));
            TransactionPrepareException e =
                    assertThrows(TransactionPrepareException.class, () -> c.prepareTransaction("jc-tmo-a-1"));
            assertEquals(Errors.INVALID_TXN_STATE, e.error());
            assertEquals(Optional.of(TransactionState.ABORTED), e.state());
        }
    }

    @Test
    void recoveryCommitsPreparedCheckpointsThatCompletedAndAbortsTheRest() {
        String group = "jc-rec";
        broker.createTopic("jc-rec-t", 1, group);
        try (LockstepShareTransactionCoordinator c = coordinator(group)) {
            c.beginTransaction("jc-rec-job-1", null);
            c.prepareTransaction("jc-rec-job-1");
            c.beginTransaction("jc-rec-job-2", null);
            c.prepareTransaction("jc-rec-job-2");
            c.beginTransaction("jc-rec-job-3", null);
            // Checkpoint 1 completed, 2 did not (prepared only), 3 is ONGOING.
            RecoveryReport report = c.recover(t -> t.id.endsWith("-1"));
            assertEquals(List.of("jc-rec-job-1"), report.committed());
            assertEquals(Set.of("jc-rec-job-2", "jc-rec-job-3"), Set.copyOf(report.aborted()));
            assertTrue(report.failed().isEmpty());
            assertEquals(Set.of(), pendingIds(c, group));
            // Through the interface only, the same routine.
            c.beginTransaction("jc-rec-job-4", null);
            RecoveryReport again = LockstepShareTransactionCoordinator.recover(c, group, t -> false);
            assertEquals(List.of("jc-rec-job-4"), again.aborted());
        }
    }

    @Test
    void callsRetryAcrossABrokerRestartAndTimeOutWhenItStaysDown() throws Exception {
        String group = "jc-retry";
        broker.createTopic("jc-retry-t", 1, group);
        try (LockstepShareTransactionCoordinator c = coordinator(group)) {
            c.beginTransaction("jc-retry-a-1", null);
            c.prepareTransaction("jc-retry-a-1");
            broker.killAndRestart();
            // The cached connection is dead: the call reconnects, rediscovers and succeeds; the
            // prepared transaction survived the crash.
            assertEquals(Set.of("jc-retry-a-1"), pendingIds(c, group));
            assertEquals(TransactionState.COMMITTED, c.commit("jc-retry-a-1"));
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", "127.0.0.1:1");
        p.put("group.id", group);
        p.put("default.api.timeout.ms", "1500");
        try (LockstepShareTransactionCoordinator dead = new LockstepShareTransactionCoordinator(p)) {
            assertThrows(TimeoutException.class, () -> dead.beginTransaction("jc-retry-b-1", null));
            TransactionPrepareException e =
                    assertThrows(TransactionPrepareException.class, () -> dead.prepareTransaction("jc-retry-b-1"));
            assertEquals(Errors.REQUEST_TIMED_OUT, e.error());
            assertEquals(Optional.empty(), e.state());
        }
    }
}
