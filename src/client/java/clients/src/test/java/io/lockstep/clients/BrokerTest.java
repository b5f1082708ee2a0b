package io.lockstep.clients;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

/**
 * Base of the test classes that share one release broker per class ({@link LockstepBroker}),
 * started before the class's first test and stopped after its last. Test classes run one after
 * another (junit-platform.properties), so the one field serves each class in turn.
 */
abstract class BrokerTest {
    static LockstepBroker broker;

    @BeforeAll
    static void startBroker() {
        broker = LockstepBroker.start();
    }

    @AfterAll
    static void stopBroker() {
        if (broker != null) {
            broker.close();
            broker = null;
        }
    }
}
