package io.lockstep.clients;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.lockstep.clients.internals.PendingAcks;
import io.lockstep.clients.internals.ShareTxnMessages;
import io.lockstep.clients.internals.ShareTxnMessages.AckBatch;
import io.lockstep.clients.internals.Wire;
import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.common.Uuid;
import org.junit.jupiter.api.Test;

/**
 * The hand-written codecs of keys 1000-1005 against the golden bytes of the Rust codec's tests
 * (src/protocol/share_txn.rs), which were written by hand from the wire spec.
 */
class ShareTxnMessagesTest {

    private static byte[] bytes(int... v) {
        byte[] out = new byte[v.length];
        for (int i = 0; i < v.length; i++) {
            out[i] = (byte) v[i];
        }
        return out;
    }

    private static byte[] concat(byte[]... parts) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        for (byte[] p : parts) {
            out.writeBytes(p);
        }
        return out.toByteArray();
    }

    @Test
    void beginRequestGoldenBytes() {
        byte[] golden = bytes(
                0x03, 'g', '1',
                0x07, 'g', '1', '-', 'p', '-', '7',
                0, 0, 0, 0, 0, 0, 0x75, 0x30,
                0x00);
        assertArrayEquals(golden, ShareTxnMessages.beginRequest("g1", "g1-p-7", 30_000));
        byte[] defaultTimeout = ShareTxnMessages.beginRequest("g1", "g1-p-7", -1);
        for (int i = 10; i < 18; i++) {
            assertEquals((byte) 0xff, defaultTimeout[i]);
        }
    }

    @Test
    void phaseAndListRequests() {
        assertArrayEquals(bytes(0x02, 'g', 0x04, 'g', '-', 'x', 0x00), ShareTxnMessages.phaseRequest("g", "g-x"));
        assertArrayEquals(bytes(0x02, 'g', 0x01, 0x00), ShareTxnMessages.listRequest("g", List.of()));
        assertArrayEquals(bytes(0x02, 'g', 0x03, 1, 2, 0x00), ShareTxnMessages.listRequest("g", List.of((byte) 1, (byte) 2)));
    }

    @Test
    void acknowledgeTransactionalRequestGoldenBytes() {
        Uuid topic = new Uuid(0, 1);
        byte[] body = ShareTxnMessages.acknowledgeTransactionalRequest("g", "m", "g-x",
                Map.of(topic, Map.of(1, List.of(new AckBatch(4, 5, List.of((byte) 1, (byte) 3))))));
        byte[] golden = concat(
                bytes(0x02, 'g', 0x02, 'm', 0x04, 'g', '-', 'x'),
                bytes(0x02), new byte[15], bytes(1),
                bytes(0x02), bytes(0, 0, 0, 1),
                bytes(0x02), bytes(0, 0, 0, 0, 0, 0, 0, 4), bytes(0, 0, 0, 0, 0, 0, 0, 5),
                bytes(0x03, 1, 3),
                bytes(0, 0, 0, 0));
        assertArrayEquals(golden, body);
    }

    private static byte[] listGolden(byte[] partitionTags) {
        return concat(
                bytes(0, 0, 0, 5, 0, 0, 0x00, 0x02, 0x04, 't', '-', '1', 0x02),
                bytes(0, 0, 0, 0, 0, 0, 0xea, 0x60),
                bytes(0, 0, 0, 0, 0, 0, 0x03, 0xe8),
                bytes(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff),
                bytes(0x02),
                bytes(0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f),
                bytes(0, 0, 0, 3),
                bytes(0, 0, 0, 0, 0, 0, 0x01, 0x2c),
                partitionTags,
                bytes(0x00, 0x00));
    }

    private static void checkListGolden(ShareTxnMessages.ListResponse r) {
        assertEquals(5, r.throttleTimeMs());
        assertEquals(0, r.errorCode());
        assertNull(r.errorMessage());
        assertEquals(1, r.transactions().size());
        ShareTxnMessages.ListedTransaction t = r.transactions().get(0);
        assertEquals("t-1", t.transactionId());
        assertEquals(TransactionState.PREPARE, TransactionState.forCode(t.state()));
        assertEquals(60_000, t.timeoutMs());
        assertEquals(1_000, t.createTimeMs());
        assertEquals(-1, t.prepareTimeMs());
        assertEquals(1, t.partitions().size());
        assertEquals(new Uuid(0x0001020304050607L, 0x08090a0b0c0d0e0fL), t.partitions().get(0).topicId());
        assertEquals(3, t.partitions().get(0).partitionIndex());
        assertEquals(300, t.partitions().get(0).lockedRecords());
    }

    @Test
    void listResponseGoldenBytesAndUnknownTaggedFields() {
        checkListGolden(ShareTxnMessages.decodeList(ByteBuffer.wrap(listGolden(bytes(0x00)))));
        // Two unknown tagged fields in a nested structure are skipped: tag 5 (3 bytes), tag 200 (1 byte).
        byte[] tags = bytes(0x02, 0x05, 0x03, 'a', 'b', 'c', 0xc8, 0x01, 0x01, 'z');
        checkListGolden(ShareTxnMessages.decodeList(ByteBuffer.wrap(listGolden(tags))));
        ShareTxnMessages.ListResponse withError =
                ShareTxnMessages.decodeList(ByteBuffer.wrap(bytes(0, 0, 0, 5, 0, 69, 0x03, 'n', 'o', 0x01, 0x00)));
        assertEquals(69, withError.errorCode());
        assertEquals("no", withError.errorMessage());
        assertEquals(List.of(), withError.transactions());
    }

    @Test
    void phaseBeginAndAckResponses() {
        ShareTxnMessages.PhaseResponse phase =
                ShareTxnMessages.decodePhase(ByteBuffer.wrap(bytes(0, 0, 0, 0, 0, 48, 0x03, 'n', 'o', 4, 0)));
        assertEquals(48, phase.errorCode());
        assertEquals("no", phase.errorMessage());
        assertEquals(TransactionState.ABORTED, TransactionState.forCode(phase.transactionState()));
        ShareTxnMessages.BeginResponse begin = ShareTxnMessages.decodeBegin(ByteBuffer.wrap(
                bytes(0, 0, 0, 0, 0, 0, 0x00, 1, 0, 0, 0, 0, 0, 0, 0x75, 0x30, 0)));
        assertEquals(TransactionState.ONGOING, TransactionState.forCode(begin.transactionState()));
        assertEquals(30_000, begin.timeoutMs());
        byte[] ack = concat(bytes(0, 0, 0, 0, 0, 0, 0x00, 0x02), new byte[15], bytes(7), bytes(0x02),
                bytes(0, 0, 0, 2, 0, 121, 0x00, 0x00), bytes(0x00, 0x00));
        ShareTxnMessages.AckResponse r = ShareTxnMessages.decodeAcknowledgeTransactional(ByteBuffer.wrap(ack));
        assertEquals(1, r.partitions().size());
        assertEquals(new Uuid(0, 7), r.partitions().get(0).topicId());
        assertEquals(2, r.partitions().get(0).partitionIndex());
        assertEquals(121, r.partitions().get(0).errorCode());
    }

    @Test
    void truncatedOrTrailingInputIsAnError() {
        byte[] golden = listGolden(bytes(0x00));
        for (int cut = 0; cut < golden.length; cut++) {
            byte[] part = java.util.Arrays.copyOf(golden, cut);
            assertThrows(Wire.MalformedException.class, () -> ShareTxnMessages.decodeList(ByteBuffer.wrap(part)),
                    "cut at " + cut);
        }
        byte[] longer = java.util.Arrays.copyOf(golden, golden.length + 1);
        assertThrows(Wire.MalformedException.class, () -> ShareTxnMessages.decodeList(ByteBuffer.wrap(longer)));
        // A huge array count in a tiny body is refused, not allocated.
        assertThrows(Wire.MalformedException.class, () -> ShareTxnMessages.decodeList(
                ByteBuffer.wrap(bytes(0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f))));
    }

    @Test
    void acknowledgementsCoalesceLikeAPerOffsetModel() {
        java.util.Random random = new java.util.Random(7);
        for (int round = 0; round < 200; round++) {
            TreeMap<Long, Byte> acks = new TreeMap<>();
            for (int i = 0; i < 30; i++) {
                acks.put((long) random.nextInt(40), (byte) (1 + random.nextInt(3)));
            }
            List<PendingAcks.Batch> batches = PendingAcks.coalesce(acks);
            TreeMap<Long, Byte> back = new TreeMap<>();
            for (int i = 0; i < batches.size(); i++) {
                PendingAcks.Batch b = batches.get(i);
                for (long o = b.first(); o <= b.last(); o++) {
                    back.put(o, b.type());
                }
                if (i > 0) {
                    PendingAcks.Batch prev = batches.get(i - 1);
                    // Maximal: neighbours are not both adjacent and of one type.
                    assertEquals(false, prev.last() + 1 == b.first() && prev.type() == b.type());
                }
            }
            assertEquals(acks, back);
        }
    }
}
