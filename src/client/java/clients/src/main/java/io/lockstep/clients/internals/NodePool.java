package io.lockstep.clients.internals;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.errors.NetworkException;
import org.apache.kafka.common.message.FindCoordinatorRequestData;
import org.apache.kafka.common.message.FindCoordinatorResponseData;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Errors;

/**
 * The brokers a client talks to: the bootstrap addresses, the node addresses learned from
 * FindCoordinator / Metadata / ShareFetch answers, and one lazily opened {@link BrokerConnection}
 * per address, secured as the client's {@link ConnectionSecurity} says. A broken connection is
 * dropped and reopened on next use. Authentication failures ({@code SaslAuthenticationException},
 * {@code SslAuthenticationException}) are not retriable and reach the caller.
 */
public final class NodePool implements AutoCloseable {
    /** A broker's node id and address. */
    public record Node(int id, String host, int port) {
        public String address() {
            return host + ":" + port;
        }
    }

    private final List<String[]> bootstrap = new ArrayList<>();
    private final String clientId;
    private final Duration connectTimeout;
    private final ConnectionSecurity security;
    private final Map<Integer, Node> nodes = new HashMap<>();
    private final Map<String, BrokerConnection> connections = new HashMap<>();
    private int nextBootstrap;

    /**
     * A pool of plaintext connections.
     *
     * @param bootstrapServers comma-separated {@code host:port} list
     */
    public NodePool(String bootstrapServers, String clientId, Duration connectTimeout) {
        this(bootstrapServers, clientId, connectTimeout, ConnectionSecurity.PLAINTEXT);
    }

    /**
     * @param bootstrapServers comma-separated {@code host:port} list
     * @param security TLS and SASL of every connection
     */
    public NodePool(String bootstrapServers, String clientId, Duration connectTimeout, ConnectionSecurity security) {
        if (bootstrapServers == null || bootstrapServers.isBlank()) {
            throw new ConfigException("bootstrap.servers must be set");
        }
        for (String s : bootstrapServers.split(",")) {
            String a = s.trim();
            int colon = a.lastIndexOf(':');
            if (colon <= 0 || colon == a.length() - 1) {
                throw new ConfigException("bootstrap.servers entry '" + a + "' is not host:port");
            }
            bootstrap.add(new String[] {a.substring(0, colon), a.substring(colon + 1)});
        }
        this.clientId = clientId;
        this.connectTimeout = connectTimeout;
        this.security = java.util.Objects.requireNonNull(security, "security");
    }

    /** Records (or updates) the address of node {@code node.id()}. */
    public void learn(Node node) {
        Node old = nodes.put(node.id(), node);
        if (old != null && !old.address().equals(node.address())) {
            drop(old.address());
        }
    }

    /** The address of node {@code id}, if known. */
    public Node node(int id) {
        return nodes.get(id);
    }

    /** A connection to any bootstrap server (trying each in turn). */
    public BrokerConnection bootstrap(Duration requestTimeout) {
        KafkaException last = null;
        for (int i = 0; i < bootstrap.size(); i++) {
            String[] a = bootstrap.get(nextBootstrap % bootstrap.size());
            try {
                return connection(a[0], Integer.parseInt(a[1]), requestTimeout);
            } catch (NetworkException e) {
                last = e;
                nextBootstrap++;
            }
        }
        throw last != null ? last : new NetworkException("no bootstrap server");
    }

    /** A connection to node {@code id}, whose address must be known. */
    public BrokerConnection connection(int id, Duration requestTimeout) {
        Node node = nodes.get(id);
        if (node == null) {
            throw new NetworkException("address of node " + id + " unknown");
        }
        return connection(node.host(), node.port(), requestTimeout);
    }

    private BrokerConnection connection(String host, int port, Duration requestTimeout) {
        String address = host + ":" + port;
        BrokerConnection c = connections.get(address);
        if (c != null && !c.probeClosed()) {
            return c;
        }
        c = BrokerConnection.connect(host, port, clientId, security, connectTimeout, requestTimeout);
        connections.put(address, c);
        return c;
    }

    /** Closes and forgets the connection to {@code address}. */
    public void drop(String address) {
        BrokerConnection c = connections.remove(address);
        if (c != null) {
            c.close();
        }
    }

    /**
     * FindCoordinator (key type GROUP) for {@code groupId} on a bootstrap connection; learns and
     * returns the coordinator node.
     *
     * @throws org.apache.kafka.common.errors.ApiException with the broker's error (e.g.
     *     COORDINATOR_NOT_AVAILABLE, retriable)
     */
    public Node findCoordinator(String groupId, Duration requestTimeout) {
        BrokerConnection c = bootstrap(requestTimeout);
        short version = c.version(ApiKeys.FIND_COORDINATOR.id, (short) 4, (short) 6);
        FindCoordinatorRequestData request = new FindCoordinatorRequestData()
                .setKeyType((byte) 0)
                .setCoordinatorKeys(List.of(groupId));
        ByteBuffer body = c.send(ApiKeys.FIND_COORDINATOR, version, request, requestTimeout);
        FindCoordinatorResponseData response = new FindCoordinatorResponseData(new ByteBufferAccessor(body), version);
        if (response.coordinators().size() != 1) {
            throw new NetworkException("FindCoordinator answered " + response.coordinators().size() + " coordinators");
        }
        FindCoordinatorResponseData.Coordinator co = response.coordinators().get(0);
        if (co.errorCode() != Errors.NONE.code()) {
            throw Errors.forCode(co.errorCode()).exception(co.errorMessage());
        }
        Node node = new Node(co.nodeId(), co.host(), co.port());
        learn(node);
        return node;
    }

    @Override
    public void close() {
        for (BrokerConnection c : connections.values()) {
            c.close();
        }
        connections.clear();
    }
}
