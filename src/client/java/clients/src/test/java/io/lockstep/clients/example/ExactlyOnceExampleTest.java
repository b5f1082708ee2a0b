package io.lockstep.clients.example;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.lockstep.clients.LockstepBroker;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;

/** Runs the README's example against a fresh release broker: every record lands in the sink once. */
class ExactlyOnceExampleTest {
    @Test
    void everyRecordReachesTheSinkExactlyOnce() {
        try (LockstepBroker broker = LockstepBroker.start()) {
            broker.createTopic("events", 2, "demo");
            broker.produce("events", 2, "e", 50);
            List<String> sink = ExactlyOnceExample.run(broker.bootstrap(), "events", "demo", "job1", 2);
            Set<String> want = new TreeSet<>();
            for (int i = 0; i < 50; i++) {
                want.add("e" + i);
            }
            assertEquals(want, new TreeSet<>(sink));
            assertEquals(50, sink.size(), "no duplicates");
            // A second run (a restarted job) finds nothing pending and nothing left to read.
            assertEquals(List.of(), ExactlyOnceExample.run(broker.bootstrap(), "events", "demo", "job2", 1));
        }
    }
}
