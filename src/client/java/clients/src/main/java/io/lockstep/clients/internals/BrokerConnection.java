package io.lockstep.clients.internals;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.BufferedOutputStream;
import java.io.EOFException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import javax.net.ssl.SSLHandshakeException;
import javax.security.sasl.SaslClient;
import javax.security.sasl.SaslException;
import org.apache.kafka.common.errors.NetworkException;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.SslAuthenticationException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.message.ApiVersionsRequestData;
import org.apache.kafka.common.message.ApiVersionsResponseData;
import org.apache.kafka.common.message.RequestHeaderData;
import org.apache.kafka.common.message.SaslAuthenticateRequestData;
import org.apache.kafka.common.message.SaslAuthenticateResponseData;
import org.apache.kafka.common.message.SaslHandshakeRequestData;
import org.apache.kafka.common.message.SaslHandshakeResponseData;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.ObjectSerializationCache;

/**
 * One blocking connection to one broker: size-prefixed Kafka frames over a socket (TLS and SASL
 * as {@link ConnectionSecurity} says), one request in flight at a time (the caller's thread waits
 * for its answer). On connect it asks ApiVersions, keeps the broker's version ranges for {@link
 * #version}, and then authenticates with SASL if configured.
 *
 * <p>Any I/O failure, timeout or unexpected correlation id closes the connection and surfaces as a
 * {@link NetworkException} or {@link TimeoutException} (both retriable); the owner reconnects.
 */
public final class BrokerConnection implements AutoCloseable {
    /** The largest response frame accepted, in bytes (a corrupt length prefix must not OOM us). */
    static final int RESPONSE_FRAME_BYTES_MAX = 100 * 1024 * 1024;

    private final String host;
    private final int port;
    private final String clientId;
    private final Socket socket;
    private final DataInputStream in;
    private final DataOutputStream out;
    private final Map<Short, short[]> versions = new HashMap<>();
    private int nextCorrelationId = 1;
    private boolean broken;
    private long lastUsedNanos = System.nanoTime();

    /** Idle time after which {@link #probeClosed} looks at the socket, in nanoseconds. */
    static final long PROBE_AFTER_IDLE_NANOS = 200_000_000L;

    private BrokerConnection(String host, int port, String clientId, Socket socket) throws IOException {
        this.host = host;
        this.port = port;
        this.clientId = clientId;
        this.socket = socket;
        this.in = new DataInputStream(socket.getInputStream());
        this.out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream()));
    }

    /**
     * Connects to {@code host:port} in plaintext and negotiates API versions.
     *
     * @throws NetworkException if the broker cannot be reached or answers ApiVersions with an error
     */
    public static BrokerConnection connect(String host, int port, String clientId, Duration connectTimeout,
            Duration requestTimeout) {
        return connect(host, port, clientId, ConnectionSecurity.PLAINTEXT, connectTimeout, requestTimeout);
    }

    /**
     * Connects to {@code host:port}, runs the TLS handshake and SASL authentication {@code
     * security} asks for (ApiVersions, then SaslHandshake v1 and SaslAuthenticate, as Kafka's
     * clients do), and negotiates API versions.
     *
     * @throws NetworkException if the broker cannot be reached, closes the connection or answers
     *     ApiVersions with an error (retriable)
     * @throws SslAuthenticationException the TLS handshake failed (certificate refused either
     *     way, host name mismatch, no common protocol)
     * @throws SaslAuthenticationException the broker refused the credentials
     *     (SASL_AUTHENTICATION_FAILED) or the exchange broke off
     * @throws org.apache.kafka.common.errors.UnsupportedSaslMechanismException the listener does
     *     not enable the mechanism
     */
    public static BrokerConnection connect(String host, int port, String clientId, ConnectionSecurity security,
            Duration connectTimeout, Duration requestTimeout) {
        Socket socket = new Socket();
        BrokerConnection c;
        try {
            socket.setTcpNoDelay(true);
            int connectMs = (int) Math.max(1, Math.min(Integer.MAX_VALUE, connectTimeout.toMillis()));
            socket.connect(new InetSocketAddress(host, port), connectMs);
            socket.setSoTimeout(connectMs);
            Socket secured;
            try {
                secured = security.secure(socket, host, port);
            } catch (SSLHandshakeException e) {
                closeQuietly(socket);
                throw new SslAuthenticationException("TLS handshake with " + host + ":" + port + " failed: "
                        + e.getMessage(), e);
            }
            c = new BrokerConnection(host, port, clientId, secured);
        } catch (IOException e) {
            closeQuietly(socket);
            throw new NetworkException("cannot connect to " + host + ":" + port + ": " + e.getMessage(), e);
        }
        try {
            ApiVersionsRequestData request = new ApiVersionsRequestData()
                    .setClientSoftwareName("lockstep-java")
                    .setClientSoftwareVersion("0.1.0");
            short version = 3;
            ByteBuffer body = c.send(ApiKeys.API_VERSIONS, version, request, requestTimeout);
            ApiVersionsResponseData response = new ApiVersionsResponseData(new ByteBufferAccessor(body), version);
            if (response.errorCode() != Errors.NONE.code()) {
                throw new NetworkException("ApiVersions to " + host + ":" + port + " answered "
                        + Errors.forCode(response.errorCode()));
            }
            for (ApiVersionsResponseData.ApiVersion v : response.apiKeys()) {
                c.versions.put(v.apiKey(), new short[] {v.minVersion(), v.maxVersion()});
            }
            if (security.mechanism() != null) {
                c.authenticate(security, requestTimeout);
            }
            return c;
        } catch (RuntimeException e) {
            c.close();
            throw e;
        }
    }

    /**
     * SaslHandshake v1 naming the mechanism, then SaslAuthenticate rounds until the SASL client is
     * complete. Errors in either answer are thrown as Kafka's exception for the code (with the
     * broker's message); a token the client cannot accept (e.g. a wrong server signature) as
     * {@link SaslAuthenticationException}.
     */
    private void authenticate(ConnectionSecurity security, Duration timeout) {
        String mechanism = security.mechanism();
        short handshakeVersion = version(ApiKeys.SASL_HANDSHAKE.id, (short) 1, (short) 1);
        ByteBuffer body = send(ApiKeys.SASL_HANDSHAKE, handshakeVersion,
                new SaslHandshakeRequestData().setMechanism(mechanism), timeout);
        SaslHandshakeResponseData handshake = new SaslHandshakeResponseData(new ByteBufferAccessor(body),
                handshakeVersion);
        if (handshake.errorCode() != Errors.NONE.code()) {
            Errors error = Errors.forCode(handshake.errorCode());
            throw error.exception("SaslHandshake " + mechanism + " with " + address() + ": " + error.name()
                    + " (enabled: " + handshake.mechanisms() + ")");
        }
        short authVersion = version(ApiKeys.SASL_AUTHENTICATE.id, (short) 0, (short) 2);
        SaslClient client = security.saslClient(host);
        try {
            byte[] challenge = new byte[0];
            while (!client.isComplete()) {
                byte[] token;
                try {
                    token = client.evaluateChallenge(challenge);
                } catch (SaslException e) {
                    throw new SaslAuthenticationException(mechanism + " authentication with " + address()
                            + " failed: " + e.getMessage(), e);
                }
                if (token == null) {
                    break;
                }
                ByteBuffer answer = send(ApiKeys.SASL_AUTHENTICATE, authVersion,
                        new SaslAuthenticateRequestData().setAuthBytes(token), timeout);
                SaslAuthenticateResponseData r = new SaslAuthenticateResponseData(new ByteBufferAccessor(answer),
                        authVersion);
                if (r.errorCode() != Errors.NONE.code()) {
                    throw Errors.forCode(r.errorCode()).exception(r.errorMessage());
                }
                challenge = r.authBytes() == null ? new byte[0] : r.authBytes();
            }
            if (!client.isComplete()) {
                throw new SaslAuthenticationException(mechanism + " authentication with " + address()
                        + " did not complete");
            }
        } finally {
            try {
                client.dispose();
            } catch (SaslException ignored) {
                // nothing held
            }
        }
    }

    /** {@code host:port}. */
    public String address() {
        return host + ":" + port;
    }

    /** Whether an error has closed this connection. */
    public boolean isBroken() {
        return broken;
    }

    /**
     * Whether the broker has closed this connection while it was idle (e.g. it restarted): a
     * connection unused for a while is probed with a 1 ms read, which sees the end of stream. A
     * closed one is closed here too. No request is in flight between calls, so any byte read is
     * out of protocol and also closes it.
     */
    public boolean probeClosed() {
        if (broken) {
            return true;
        }
        if (System.nanoTime() - lastUsedNanos < PROBE_AFTER_IDLE_NANOS) {
            return false;
        }
        try {
            socket.setSoTimeout(1);
            in.read();
            close();
            return true; // end of stream (-1) or a stray byte
        } catch (SocketTimeoutException e) {
            return false; // alive, nothing to read
        } catch (IOException e) {
            close();
            return true;
        }
    }

    /**
     * The highest version of {@code apiKey} both sides speak, within {@code [min, max]}.
     *
     * @throws org.apache.kafka.common.errors.UnsupportedVersionException if there is none
     */
    public short version(short apiKey, short min, short max) {
        short[] range = versions.get(apiKey);
        if (range == null || range[1] < min || range[0] > max) {
            throw new org.apache.kafka.common.errors.UnsupportedVersionException("broker " + address()
                    + " does not support API key " + apiKey + " versions " + min + "-" + max);
        }
        return (short) Math.min(range[1], max);
    }

    /** Sends a Kafka request and returns its response body (after the response header). */
    public ByteBuffer send(ApiKeys api, short version, Message request, Duration timeout) {
        return sendFramed(api.id, version, api.requestHeaderVersion(version),
                api.responseHeaderVersion(version), request, null, timeout);
    }

    /**
     * Sends a request of one of Lockstep's flexible-from-v0 APIs (keys 1000-1005: request header v2,
     * response header v1) with the encoded {@code body}, and returns the response body.
     */
    public ByteBuffer sendFlexible(short apiKey, short version, byte[] body, Duration timeout) {
        return sendFramed(apiKey, version, (short) 2, (short) 1, null, body, timeout);
    }

    private ByteBuffer sendFramed(short apiKey, short version, short requestHeaderVersion,
            short responseHeaderVersion, Message message, byte[] rawBody, Duration timeout) {
        if (broken) {
            throw new NetworkException("connection to " + address() + " is closed");
        }
        int correlationId = nextCorrelationId++;
        RequestHeaderData header = new RequestHeaderData()
                .setRequestApiKey(apiKey)
                .setRequestApiVersion(version)
                .setCorrelationId(correlationId)
                .setClientId(clientId);
        ObjectSerializationCache cache = new ObjectSerializationCache();
        int headerSize = header.size(cache, requestHeaderVersion);
        int bodySize = message != null ? message.size(cache, version) : rawBody.length;
        ByteBuffer frame = ByteBuffer.allocate(4 + headerSize + bodySize);
        frame.putInt(headerSize + bodySize);
        ByteBufferAccessor accessor = new ByteBufferAccessor(frame);
        header.write(accessor, cache, requestHeaderVersion);
        if (message != null) {
            message.write(accessor, cache, version);
        } else {
            frame.put(rawBody);
        }
        if (frame.hasRemaining()) {
            throw new IllegalStateException("request size mismatch for API key " + apiKey);
        }
        try {
            lastUsedNanos = System.nanoTime();
            socket.setSoTimeout((int) Math.max(1, Math.min(Integer.MAX_VALUE, timeout.toMillis())));
            out.write(frame.array());
            out.flush();
            int size = in.readInt();
            if (size < 4 || size > RESPONSE_FRAME_BYTES_MAX) {
                throw new IOException("bad response frame size " + size);
            }
            byte[] response = new byte[size];
            in.readFully(response);
            ByteBuffer buffer = ByteBuffer.wrap(response);
            int answered = buffer.getInt();
            if (answered != correlationId) {
                throw new IOException("correlation id " + answered + " answers request " + correlationId);
            }
            if (responseHeaderVersion >= 1) {
                Wire.skipTaggedFields(buffer);
            }
            lastUsedNanos = System.nanoTime();
            return buffer.slice();
        } catch (SocketTimeoutException e) {
            close();
            throw new TimeoutException("no answer from " + address() + " to API key " + apiKey + " within "
                    + timeout.toMillis() + " ms");
        } catch (EOFException e) {
            close();
            throw new NetworkException("connection to " + address() + " closed by the broker", e);
        } catch (IOException | RuntimeException e) {
            close();
            if (e instanceof NetworkException) {
                throw (NetworkException) e;
            }
            throw new NetworkException("connection to " + address() + " failed: " + e, e);
        }
    }

    @Override
    public void close() {
        broken = true;
        closeQuietly(socket);
    }

    private static void closeQuietly(Socket socket) {
        try {
            socket.close();
        } catch (IOException ignored) {
            // closing a broken socket
        }
    }
}
