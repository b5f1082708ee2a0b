package io.lockstep.clients.internals;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.Uuid;

/**
 * Codecs of Lockstep's share-transaction RPCs, keys 1000-1005, version 0, flexible (written from
 * {@code schemas/Share*.json}; the wire spec is {@code schemas/share-transactions.md}). Requests
 * are encoded to bytes (the body after the request header); responses decoded from the body after
 * the response header. Every structure ends with an empty tagged-field section.
 */
public final class ShareTxnMessages {
    private ShareTxnMessages() {}

    public static final short SHARE_BEGIN_TRANSACTION = 1000;
    public static final short SHARE_ACKNOWLEDGE_TRANSACTIONAL = 1001;
    public static final short SHARE_PREPARE_TRANSACTION = 1002;
    public static final short SHARE_COMMIT_TRANSACTION = 1003;
    public static final short SHARE_ABORT_TRANSACTION = 1004;
    public static final short SHARE_LIST_TRANSACTIONS = 1005;
    /** The only version of each. */
    public static final short VERSION = 0;

    // ---- requests ----

    /** ShareBeginTransaction (1000): GroupId TransactionId TimeoutMs. */
    public static byte[] beginRequest(String groupId, String transactionId, long timeoutMs) {
        return new Wire.Writer()
                .compactString(groupId)
                .compactString(transactionId)
                .int64(timeoutMs)
                .noTaggedFields()
                .toByteArray();
    }

    /** SharePrepare/Commit/AbortTransaction (1002-1004): GroupId TransactionId. */
    public static byte[] phaseRequest(String groupId, String transactionId) {
        return new Wire.Writer()
                .compactString(groupId)
                .compactString(transactionId)
                .noTaggedFields()
                .toByteArray();
    }

    /** ShareListTransactions (1005): GroupId [States] (empty: the pending ones). */
    public static byte[] listRequest(String groupId, List<Byte> states) {
        Wire.Writer w = new Wire.Writer().compactString(groupId).arrayLength(states.size());
        for (byte s : states) {
            w.int8(s);
        }
        return w.noTaggedFields().toByteArray();
    }

    /** One acknowledgement batch: an inclusive offset range with one type or one type per offset. */
    public record AckBatch(long firstOffset, long lastOffset, List<Byte> types) {}

    /**
     * ShareAcknowledgeTransactional (1001): GroupId MemberId TransactionId [Topics [Partitions
     * [AcknowledgementBatches]]]; {@code topics} maps topic id → partition → batches, written in the
     * map's iteration order.
     */
    public static byte[] acknowledgeTransactionalRequest(String groupId, String memberId,
            String transactionId, Map<Uuid, Map<Integer, List<AckBatch>>> topics) {
        Wire.Writer w = new Wire.Writer()
                .compactString(groupId)
                .compactString(memberId)
                .compactString(transactionId)
                .arrayLength(topics.size());
        for (Map.Entry<Uuid, Map<Integer, List<AckBatch>>> topic : topics.entrySet()) {
            w.uuid(topic.getKey()).arrayLength(topic.getValue().size());
            for (Map.Entry<Integer, List<AckBatch>> partition : topic.getValue().entrySet()) {
                w.int32(partition.getKey()).arrayLength(partition.getValue().size());
                for (AckBatch b : partition.getValue()) {
                    w.int64(b.firstOffset()).int64(b.lastOffset()).arrayLength(b.types().size());
                    for (byte t : b.types()) {
                        w.int8(t);
                    }
                    w.noTaggedFields();
                }
                w.noTaggedFields();
            }
            w.noTaggedFields();
        }
        return w.noTaggedFields().toByteArray();
    }

    // ---- responses ----

    /** ShareBeginTransaction response. */
    public record BeginResponse(int throttleTimeMs, short errorCode, String errorMessage,
            byte transactionState, long timeoutMs) {}

    /** SharePrepare/Commit/AbortTransaction response (identical layouts). */
    public record PhaseResponse(int throttleTimeMs, short errorCode, String errorMessage,
            byte transactionState) {}

    /** A partition of a ShareAcknowledgeTransactional response. */
    public record AckPartitionResult(Uuid topicId, int partitionIndex, short errorCode, String errorMessage) {}

    /** ShareAcknowledgeTransactional response, its partitions flattened. */
    public record AckResponse(int throttleTimeMs, short errorCode, String errorMessage,
            List<AckPartitionResult> partitions) {}

    /** A partition of a listed transaction. */
    public record LockedPartition(Uuid topicId, int partitionIndex, long lockedRecords) {}

    /** A transaction of a ShareListTransactions response. */
    public record ListedTransaction(String transactionId, byte state, long timeoutMs, long createTimeMs,
            long prepareTimeMs, List<LockedPartition> partitions) {}

    /** ShareListTransactions response. */
    public record ListResponse(int throttleTimeMs, short errorCode, String errorMessage,
            List<ListedTransaction> transactions) {}

    public static BeginResponse decodeBegin(ByteBuffer body) {
        Wire.Reader r = new Wire.Reader(body);
        BeginResponse response = new BeginResponse(r.int32(), r.int16(), r.compactNullableString(), r.int8(),
                r.int64());
        r.skipTaggedFields();
        r.expectEnd();
        return response;
    }

    public static PhaseResponse decodePhase(ByteBuffer body) {
        Wire.Reader r = new Wire.Reader(body);
        PhaseResponse response = new PhaseResponse(r.int32(), r.int16(), r.compactNullableString(), r.int8());
        r.skipTaggedFields();
        r.expectEnd();
        return response;
    }

    public static AckResponse decodeAcknowledgeTransactional(ByteBuffer body) {
        Wire.Reader r = new Wire.Reader(body);
        int throttle = r.int32();
        short error = r.int16();
        String message = r.compactNullableString();
        List<AckPartitionResult> partitions = new ArrayList<>();
        int topics = r.arrayLength();
        for (int t = 0; t < topics; t++) {
            Uuid topicId = r.uuid();
            int n = r.arrayLength();
            for (int p = 0; p < n; p++) {
                partitions.add(new AckPartitionResult(topicId, r.int32(), r.int16(), r.compactNullableString()));
                r.skipTaggedFields();
            }
            r.skipTaggedFields();
        }
        r.skipTaggedFields();
        r.expectEnd();
        return new AckResponse(throttle, error, message, partitions);
    }

    public static ListResponse decodeList(ByteBuffer body) {
        Wire.Reader r = new Wire.Reader(body);
        int throttle = r.int32();
        short error = r.int16();
        String message = r.compactNullableString();
        List<ListedTransaction> transactions = new ArrayList<>();
        int n = r.arrayLength();
        for (int i = 0; i < n; i++) {
            String id = r.compactString();
            byte state = r.int8();
            long timeout = r.int64();
            long created = r.int64();
            long prepared = r.int64();
            List<LockedPartition> partitions = new ArrayList<>();
            int np = r.arrayLength();
            for (int p = 0; p < np; p++) {
                partitions.add(new LockedPartition(r.uuid(), r.int32(), r.int64()));
                r.skipTaggedFields();
            }
            r.skipTaggedFields();
            transactions.add(new ListedTransaction(id, state, timeout, created, prepared, partitions));
        }
        r.skipTaggedFields();
        r.expectEnd();
        return new ListResponse(throttle, error, message, transactions);
    }
}
