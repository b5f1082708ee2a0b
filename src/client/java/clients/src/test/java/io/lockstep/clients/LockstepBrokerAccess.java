package io.lockstep.clients;

/** Test fixture {@link LockstepBroker} for tests outside this package (the example). */
public final class LockstepBrokerAccess implements AutoCloseable {
    private final LockstepBroker broker;

    private LockstepBrokerAccess(LockstepBroker broker) {
        this.broker = broker;
    }

    public static LockstepBrokerAccess start() {
        return new LockstepBrokerAccess(LockstepBroker.start());
    }

    public String bootstrap() {
        return broker.bootstrap();
    }

    public void createTopic(String topic, int partitions, String group) {
        broker.createTopic(topic, partitions, group);
    }

    public void produce(String topic, int partitions, String prefix, int n) {
        broker.produce(topic, partitions, prefix, n);
    }

    @Override
    public void close() {
        broker.close();
    }
}
