package io.lockstep.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lockstep.clients.TransactionState;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;

/**
 * The source's protocol (transaction per reader and checkpoint, named by {@link TransactionIds},
 * prepared at the snapshot, committed at the completion, recovered by {@link TransactionIds#decide})
 * run against a trivial model of the broker, of Flink's checkpoints and of a two-phase sink, with
 * random checkpoints that do not reach every reader, aborted checkpoints, lost completion
 * notifications, region failovers, global failovers (also with another parallelism) and broker restarts (ONGOING transactions
 * aborted). After the faults stop and the job drains, the sink holds every record exactly once and
 * no transaction is pending. No Flink, no broker: 300 seeds in a few seconds.
 */
class CheckpointTransactionModelTest {
    private static final String GROUP = "g";
    private static final String PREFIX = "job";

    enum RecState { AVAILABLE, ACQUIRED, LOCKED, ACKED }

    /** The broker: records and transactions. */
    static final class Broker {
        final RecState[] records;
        final Map<String, List<Integer>> locks = new HashMap<>();
        final Map<String, TransactionState> txns = new HashMap<>();
        /** Ids of ONGOING and PREPARE transactions (the pending list). */
        final Set<String> pending = new java.util.LinkedHashSet<>();

        Broker(int n) {
            records = new RecState[n];
            java.util.Arrays.fill(records, RecState.AVAILABLE);
        }

        void begin(String id) {
            assertFalse(txns.containsKey(id), "transaction id reused: " + id);
            txns.put(id, TransactionState.ONGOING);
            pending.add(id);
        }

        boolean ack(int r, String id) {
            if (txns.get(id) != TransactionState.ONGOING) {
                return false;
            }
            assertEquals(RecState.ACQUIRED, records[r]);
            records[r] = RecState.LOCKED;
            locks.computeIfAbsent(id, x -> new ArrayList<>()).add(r);
            return true;
        }

        boolean prepare(String id) {
            if (txns.get(id) != TransactionState.ONGOING) {
                return false;
            }
            txns.put(id, TransactionState.PREPARE);
            return true;
        }

        void end(String id, boolean commit) {
            TransactionState s = txns.get(id);
            assertTrue(s == TransactionState.PREPARE || (!commit && s == TransactionState.ONGOING), id + " " + s);
            txns.put(id, commit ? TransactionState.COMMITTED : TransactionState.ABORTED);
            for (int r : locks.getOrDefault(id, List.of())) {
                assertEquals(RecState.LOCKED, records[r]);
                records[r] = commit ? RecState.ACKED : RecState.AVAILABLE;
            }
            locks.remove(id);
            pending.remove(id);
        }

        /** Restart: ACQUIRED is not persisted, ONGOING transactions are aborted. */
        void restart() {
            for (int r = 0; r < records.length; r++) {
                if (records[r] == RecState.ACQUIRED) {
                    records[r] = RecState.AVAILABLE;
                }
            }
            for (String id : new ArrayList<>(pending)) {
                if (txns.get(id) == TransactionState.ONGOING) {
                    end(id, false);
                }
            }
        }

        /** The KIP's recovery over the pending transactions of the scope. */
        void recover(long restored, int onlySubtask) {
            for (String id : new ArrayList<>(pending)) {
                switch (TransactionIds.decide(GROUP, PREFIX, id, txns.get(id), restored, onlySubtask)) {
                    case COMMIT -> end(id, true);
                    case ABORT -> end(id, false);
                    case IGNORE -> { }
                }
            }
        }
    }

    /** One reader instance (LockstepShareReader's steps) plus its sink writer's open batch. */
    static final class Reader {
        final int subtask;
        final String token = TransactionIds.newToken();
        long lastCheckpoint;
        String current;
        final List<Integer> acquired = new ArrayList<>();
        final NavigableMap<Long, List<String>> prepared = new TreeMap<>();
        List<Integer> writerOpen = new ArrayList<>();
        boolean broken;

        Reader(int subtask, long restored) {
            this.subtask = subtask;
            this.lastCheckpoint = restored;
        }
    }

    /** Sink committables per subtask: checkpoint → records; and the published output. */
    static final class Sink {
        final List<NavigableMap<Long, List<Integer>>> pending = new ArrayList<>();
        final Map<Integer, Integer> published;

        Sink(int p) {
            this(p, new HashMap<>());
        }

        Sink(int p, Map<Integer, Integer> published) {
            this.published = published;
            for (int i = 0; i < p; i++) {
                pending.add(new TreeMap<>());
            }
        }

        void commitUpTo(int subtask, long checkpoint) {
            NavigableMap<Long, List<Integer>> head = pending.get(subtask).headMap(checkpoint, true);
            for (List<Integer> batch : head.values()) {
                for (int r : batch) {
                    published.merge(r, 1, Integer::sum);
                }
            }
            head.clear();
        }

        /** Restore of subtask from checkpoint c: committables up to c are in its state (committed), later ones lost. */
        void restore(int subtask, long c) {
            commitUpTo(subtask, c);
            pending.get(subtask).clear();
        }
    }

    @Test
    void everyRecordExactlyOnceAcrossSeeds() {
        for (long seed = 1; seed <= 300; seed++) {
            runSeed(seed);
        }
    }

    private void runSeed(long seed) {
        Random rnd = new Random(seed);
        int n = 100 + rnd.nextInt(200);
        int p = 1 + rnd.nextInt(3);
        Broker broker = new Broker(n);
        Sink sink = new Sink(p);
        Reader[] readers = new Reader[p];
        for (int i = 0; i < p; i++) {
            readers[i] = new Reader(i, 0);
        }
        broker.recover(0, -1);
        long checkpointCounter = 0;
        long latestCompleted = 0;
        for (int step = 0; step < 20_000; step++) {
            boolean faults = step < 2_000;
            int action = rnd.nextInt(100);
            if (action < 70) {
                // a reader polls one record, acknowledges it into its transaction, emits it
                Reader rd = readers[rnd.nextInt(p)];
                int r = pickAvailable(broker, rnd);
                if (r >= 0) {
                    broker.records[r] = RecState.ACQUIRED;
                    if (rd.current == null) {
                        rd.current = TransactionIds.format(GROUP, PREFIX, rd.subtask, rd.token, rd.lastCheckpoint + 1);
                        broker.begin(rd.current);
                    }
                    if (!broker.ack(r, rd.current)) {
                        rd.broken = true; // the ack is refused: the reader fails at its next poll
                        broker.records[r] = RecState.AVAILABLE;
                    }
                    rd.writerOpen.add(r);
                }
            } else if (action < 85 || !faults) {
                // a checkpoint
                long k = ++checkpointCounter;
                boolean all = true;
                for (Reader rd : readers) {
                    boolean reached = !faults || rnd.nextInt(10) != 0;
                    if (!reached || rd.broken) {
                        all = false;
                        continue;
                    }
                    if (rd.current != null) {
                        if (!broker.prepare(rd.current)) {
                            rd.broken = true;
                            all = false;
                            continue;
                        }
                        rd.prepared.computeIfAbsent(k, x -> new ArrayList<>()).add(rd.current);
                        rd.current = null;
                    }
                    rd.lastCheckpoint = k;
                    if (!rd.writerOpen.isEmpty()) {
                        sink.pending.get(rd.subtask).put(k, rd.writerOpen);
                        rd.writerOpen = new ArrayList<>();
                    }
                }
                if (all && (!faults || rnd.nextInt(10) < 8)) {
                    latestCompleted = k;
                    for (Reader rd : readers) {
                        sink.commitUpTo(rd.subtask, k);
                        if (!faults || rnd.nextInt(10) < 8) {
                            NavigableMap<Long, List<String>> done = rd.prepared.headMap(k, true);
                            for (List<String> ids : done.values()) {
                                ids.forEach(id -> broker.end(id, true));
                            }
                            done.clear();
                        }
                    }
                }
                for (Reader rd : readers) {
                    if (rd.broken) {
                        // region failover of a reader whose ack or prepare was refused
                        readers[rd.subtask] = regionFailover(broker, sink, rd, latestCompleted);
                    }
                }
                if (!faults && allAcked(broker) && nothingPending(broker)) {
                    break;
                }
            } else if (action < 90) {
                int s = rnd.nextInt(p);
                readers[s] = regionFailover(broker, sink, readers[s], latestCompleted);
            } else if (action < 94) {
                // global failover: everything restarts from the latest completed checkpoint, half
                // of the time with another parallelism (a restore from a retained checkpoint)
                for (int s = 0; s < p; s++) {
                    release(broker, readers[s]);
                    sink.restore(s, latestCompleted);
                }
                broker.recover(latestCompleted, -1);
                if (rnd.nextBoolean()) {
                    p = 1 + rnd.nextInt(4);
                    sink = new Sink(p, sink.published);
                    readers = new Reader[p];
                }
                for (int s = 0; s < p; s++) {
                    // a reader with no state of its own learns the checkpoint from the enumerator
                    readers[s] = new Reader(s, latestCompleted);
                }
            } else {
                broker.restart();
                for (Reader rd : readers) {
                    rd.acquired.clear();
                    if (rd.current != null && broker.txns.get(rd.current) != TransactionState.ONGOING) {
                        rd.broken = true;
                    }
                }
            }
        }
        assertTrue(allAcked(broker), "seed " + seed + ": not every record acknowledged");
        assertTrue(nothingPending(broker), "seed " + seed + ": transactions pending");
        Set<Integer> missing = new HashSet<>();
        for (int r = 0; r < n; r++) {
            Integer c = sink.published.get(r);
            if (c == null) {
                missing.add(r);
            } else {
                assertEquals(1, c, "seed " + seed + ": record " + r + " published " + c + " times");
            }
        }
        assertTrue(missing.isEmpty(), "seed " + seed + ": missing " + missing);
    }

    private static Reader regionFailover(Broker broker, Sink sink, Reader rd, long restored) {
        release(broker, rd);
        sink.restore(rd.subtask, restored);
        broker.recover(restored, rd.subtask);
        return new Reader(rd.subtask, restored);
    }

    /** A dead reader's records that are ACQUIRED (polled, not yet acknowledged) become available. */
    private static void release(Broker broker, Reader rd) {
        // In this model acks are immediate, so a dead reader holds nothing ACQUIRED.
        rd.acquired.clear();
    }

    private static int pickAvailable(Broker broker, Random rnd) {
        int n = broker.records.length;
        int start = rnd.nextInt(n);
        for (int i = 0; i < n; i++) {
            int r = (start + i) % n;
            if (broker.records[r] == RecState.AVAILABLE) {
                return r;
            }
        }
        return -1;
    }

    private static boolean allAcked(Broker broker) {
        for (RecState s : broker.records) {
            if (s != RecState.ACKED) {
                return false;
            }
        }
        return true;
    }

    private static boolean nothingPending(Broker broker) {
        return broker.locks.isEmpty() && broker.pending.isEmpty();
    }
}
