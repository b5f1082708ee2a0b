package io.lockstep.clients.internals;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.common.Uuid;

/**
 * Acknowledgements not yet sent, per partition: offset → acknowledge type code (0 GAP, 1 ACCEPT, 2
 * RELEASE, 3 REJECT). A later type for the same offset replaces the earlier one, as in Kafka's
 * consumer. {@link #batches} coalesces consecutive offsets of one type into one batch.
 */
public final class PendingAcks {
    /** A partition by topic id (topic names are the consumer's business). */
    public record TopicIdPart(Uuid topicId, int partition) {}

    /** A coalesced batch: offsets {@code first..last} inclusive, all of type {@code type}. */
    public record Batch(long first, long last, byte type) {}

    private final Map<TopicIdPart, TreeMap<Long, Byte>> byPartition = new LinkedHashMap<>();

    public void add(TopicIdPart tp, long offset, byte type) {
        byPartition.computeIfAbsent(tp, k -> new TreeMap<>()).put(offset, type);
    }

    public boolean contains(TopicIdPart tp, long offset) {
        TreeMap<Long, Byte> m = byPartition.get(tp);
        return m != null && m.containsKey(offset);
    }

    public boolean isEmpty() {
        return byPartition.isEmpty();
    }

    public Set<TopicIdPart> partitions() {
        return Collections.unmodifiableSet(byPartition.keySet());
    }

    /** Removes and returns the partition's acknowledgements, coalesced (empty if none). */
    public List<Batch> take(TopicIdPart tp) {
        TreeMap<Long, Byte> m = byPartition.remove(tp);
        return m == null ? List.of() : coalesce(m);
    }

    /** Removes and returns everything, coalesced per partition. */
    public Map<TopicIdPart, List<Batch>> takeAll() {
        Map<TopicIdPart, List<Batch>> out = new LinkedHashMap<>();
        for (Map.Entry<TopicIdPart, TreeMap<Long, Byte>> e : byPartition.entrySet()) {
            out.put(e.getKey(), coalesce(e.getValue()));
        }
        byPartition.clear();
        return out;
    }

    /** Consecutive offsets with one type become one batch. */
    public static List<Batch> coalesce(TreeMap<Long, Byte> acks) {
        List<Batch> out = new ArrayList<>();
        long first = 0;
        long last = 0;
        byte type = 0;
        boolean open = false;
        for (Map.Entry<Long, Byte> e : acks.entrySet()) {
            long offset = e.getKey();
            byte t = e.getValue();
            if (open && offset == last + 1 && t == type) {
                last = offset;
                continue;
            }
            if (open) {
                out.add(new Batch(first, last, type));
            }
            first = offset;
            last = offset;
            type = t;
            open = true;
        }
        if (open) {
            out.add(new Batch(first, last, type));
        }
        return out;
    }
}
