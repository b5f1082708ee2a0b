package io.lockstep.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.lockstep.clients.TransactionState;
import io.lockstep.flink.TransactionIds.Decision;
import org.junit.jupiter.api.Test;

class TransactionIdsTest {
    @Test
    void formatParsesBack() {
        String id = TransactionIds.format("my-group", "my-job", 3, "k2x9a0zq", 42);
        assertEquals("my-group-my-job-3-k2x9a0zq-42", id);
        TransactionIds.Parsed p = TransactionIds.parse("my-group", "my-job", id).orElseThrow();
        assertEquals(3, p.subtask);
        assertEquals("k2x9a0zq", p.token);
        assertEquals(42, p.checkpointId);
    }

    @Test
    void idsOfOtherPrefixesAndGroupsDoNotParse() {
        String longer = TransactionIds.format("g", "job-1", 0, "tok", 5);
        assertFalse(TransactionIds.parse("g", "job", longer).isPresent(), longer);
        assertFalse(TransactionIds.parse("g", "jo", TransactionIds.format("g", "job", 0, "tok", 5)).isPresent());
        assertFalse(TransactionIds.parse("g2", "job", TransactionIds.format("g", "job", 0, "tok", 5)).isPresent());
        for (String bad : new String[] {"g-job-0-tok", "g-job-x-tok-5", "g-job-0--5", "g-job-0-tok-05",
                "g-job--1-tok-5", "g-job-0-tok-5-6", "g-job-0-tok-"}) {
            assertFalse(TransactionIds.parse("g", "job", bad).isPresent(), bad);
        }
        assertThrows(IllegalArgumentException.class, () -> TransactionIds.format("g", "job", 0, "a-b", 1));
    }

    @Test
    void tokensAreFreshAndDashFree() {
        String a = TransactionIds.newToken();
        assertEquals(TransactionIds.TOKEN_CHARS, a.length());
        assertFalse(a.contains("-"));
        assertNotEquals(a, TransactionIds.newToken());
    }

    @Test
    void recoveryRule() {
        String t5 = TransactionIds.format("g", "job", 1, "tok", 5);
        // PREPARE of a completed checkpoint (named at or below the restored one): commit.
        assertEquals(Decision.COMMIT, TransactionIds.decide("g", "job", t5, TransactionState.PREPARE, 5, -1));
        assertEquals(Decision.COMMIT, TransactionIds.decide("g", "job", t5, TransactionState.PREPARE, 9, 1));
        // PREPARE of a checkpoint after the restored one, or ONGOING: abort.
        assertEquals(Decision.ABORT, TransactionIds.decide("g", "job", t5, TransactionState.PREPARE, 4, -1));
        assertEquals(Decision.ABORT, TransactionIds.decide("g", "job", t5, TransactionState.ONGOING, 9, -1));
        assertEquals(Decision.ABORT, TransactionIds.decide("g", "job", t5, TransactionState.PREPARE, 0, -1));
        // Another subtask in a scoped recovery, another job, a finished transaction: leave alone.
        assertEquals(Decision.IGNORE, TransactionIds.decide("g", "job", t5, TransactionState.PREPARE, 9, 0));
        assertEquals(Decision.IGNORE, TransactionIds.decide("g", "other", t5, TransactionState.PREPARE, 9, -1));
        assertEquals(Decision.IGNORE, TransactionIds.decide("g", "job", "g-manual-7", TransactionState.ONGOING, 9, -1));
        assertEquals(Decision.IGNORE, TransactionIds.decide("g", "job", t5, TransactionState.COMMITTED, 9, -1));
    }
}
