package io.lockstep.clients.internals;

import java.io.IOException;
import java.net.Socket;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLSocket;
import javax.security.auth.callback.Callback;
import javax.security.auth.callback.CallbackHandler;
import javax.security.auth.callback.NameCallback;
import javax.security.auth.callback.PasswordCallback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.auth.login.AppConfigurationEntry;
import javax.security.sasl.Sasl;
import javax.security.sasl.SaslClient;
import javax.security.sasl.SaslException;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.config.SslConfigs;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.security.JaasContext;
import org.apache.kafka.common.security.auth.SecurityProtocol;
import org.apache.kafka.common.security.scram.internals.ScramSaslClientProvider;
import org.apache.kafka.common.security.ssl.DefaultSslEngineFactory;

/**
 * How a client's connections are secured, read once from its {@link Properties} with
 * kafka-clients' own names, types and defaults ({@code ConfigDef.withClientSslSupport()} /
 * {@code withClientSaslSupport()}):
 *
 * <ul>
 *   <li>{@code security.protocol}: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL.
 *   <li>TLS (SSL, SASL_SSL): kafka-clients' {@link DefaultSslEngineFactory} builds the SSL context
 *       from {@code ssl.truststore.*} / {@code ssl.keystore.*} (JKS, PKCS12 or PEM, files or inline
 *       PEM), {@code ssl.protocol}, {@code ssl.enabled.protocols}, {@code ssl.cipher.suites};
 *       the socket gets the parameters of the factory's client engine, so host name verification
 *       follows {@code ssl.endpoint.identification.algorithm} (default {@code https}; empty turns
 *       it off) exactly as in Kafka's clients.
 *   <li>SASL (SASL_PLAINTEXT, SASL_SSL): {@code sasl.mechanism} PLAIN (the JDK's client),
 *       SCRAM-SHA-256 or SCRAM-SHA-512 (kafka-clients' SCRAM client), with {@code username} and
 *       {@code password} from the login module options of {@code sasl.jaas.config}.
 * </ul>
 *
 * <p>Immutable and shared by every connection of a client; {@link #handshake} runs on the
 * connecting thread.
 */
public final class ConnectionSecurity {
    /** The mechanisms {@link #saslClient} can run. */
    static final List<String> SASL_MECHANISMS = List.of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512");

    /** No TLS, no SASL. */
    public static final ConnectionSecurity PLAINTEXT = new ConnectionSecurity(SecurityProtocol.PLAINTEXT,
            null, null, null, null, null);

    private static final ConfigDef CLIENT_SECURITY_CONFIG = new ConfigDef()
            .define(org.apache.kafka.clients.CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, ConfigDef.Type.STRING,
                    SecurityProtocol.PLAINTEXT.name, ConfigDef.Importance.MEDIUM, "security protocol")
            .withClientSslSupport()
            .withClientSaslSupport();

    private final SecurityProtocol protocol;
    private final DefaultSslEngineFactory ssl;
    private final String endpointIdentification;
    private final String mechanism;
    private final String username;
    private final String password;

    private ConnectionSecurity(SecurityProtocol protocol, DefaultSslEngineFactory ssl, String endpointIdentification,
            String mechanism, String username, String password) {
        this.protocol = protocol;
        this.ssl = ssl;
        this.endpointIdentification = endpointIdentification;
        this.mechanism = mechanism;
        this.username = username;
        this.password = password;
    }

    /**
     * Reads {@code props} (keys other than security ones are ignored).
     *
     * @throws ConfigException naming the key of an unknown protocol or mechanism, a missing or
     *     unusable {@code sasl.jaas.config}, or key / trust stores that cannot be loaded
     */
    public static ConnectionSecurity fromProperties(Properties props) {
        Map<String, Object> raw = new HashMap<>();
        for (String name : props.stringPropertyNames()) {
            if (name.startsWith("security.") || name.startsWith("ssl.") || name.startsWith("sasl.")) {
                raw.put(name, props.getProperty(name));
            }
        }
        for (Map.Entry<Object, Object> e : props.entrySet()) {
            // Typed values (e.g. a Password or a List) as kafka-clients accepts them.
            if (e.getKey() instanceof String && !(e.getValue() instanceof String)) {
                String name = (String) e.getKey();
                if (name.startsWith("security.") || name.startsWith("ssl.") || name.startsWith("sasl.")) {
                    raw.put(name, e.getValue());
                }
            }
        }
        Map<String, Object> configs = CLIENT_SECURITY_CONFIG.parse(raw);
        String protocolName = ((String) configs.get("security.protocol")).trim();
        SecurityProtocol protocol;
        try {
            protocol = SecurityProtocol.forName(protocolName.toUpperCase(Locale.ROOT));
        } catch (IllegalArgumentException e) {
            throw new ConfigException("security.protocol", protocolName,
                    "not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL");
        }
        DefaultSslEngineFactory ssl = null;
        String endpointIdentification = null;
        if (protocol == SecurityProtocol.SSL || protocol == SecurityProtocol.SASL_SSL) {
            ssl = new DefaultSslEngineFactory();
            try {
                ssl.configure(configs);
            } catch (KafkaException e) {
                throw new ConfigException("ssl.* settings unusable: " + e.getMessage());
            }
            Object id = configs.get(SslConfigs.SSL_ENDPOINT_IDENTIFICATION_ALGORITHM_CONFIG);
            endpointIdentification = id == null ? "" : id.toString();
        }
        String mechanism = null;
        String username = null;
        String password = null;
        if (protocol == SecurityProtocol.SASL_PLAINTEXT || protocol == SecurityProtocol.SASL_SSL) {
            mechanism = ((String) configs.get(SaslConfigs.SASL_MECHANISM)).trim().toUpperCase(Locale.ROOT);
            if (!SASL_MECHANISMS.contains(mechanism)) {
                throw new ConfigException(SaslConfigs.SASL_MECHANISM, mechanism,
                        "supported mechanisms are " + String.join(", ", SASL_MECHANISMS));
            }
            if (configs.get(SaslConfigs.SASL_JAAS_CONFIG) == null) {
                throw new ConfigException(SaslConfigs.SASL_JAAS_CONFIG + " must be set for " + protocol.name);
            }
            List<AppConfigurationEntry> entries = JaasContext.loadClientContext(configs).configurationEntries();
            username = JaasContext.configEntryOption(entries, "username", null);
            password = JaasContext.configEntryOption(entries, "password", null);
            if (username == null || password == null) {
                throw new ConfigException(SaslConfigs.SASL_JAAS_CONFIG
                        + " needs the login module options username and password");
            }
            if (mechanism.startsWith("SCRAM-")) {
                ScramSaslClientProvider.initialize();
            }
        }
        return new ConnectionSecurity(protocol, ssl, endpointIdentification, mechanism, username, password);
    }

    /** The configured {@code security.protocol}. */
    public SecurityProtocol protocol() {
        return protocol;
    }

    /** Whether connections run TLS. */
    boolean tls() {
        return ssl != null;
    }

    /** The SASL mechanism, or null without SASL. */
    String mechanism() {
        return mechanism;
    }

    /**
     * Wraps a connected {@code socket} to {@code host:port} in TLS and completes the handshake
     * (the caller has set the socket's read timeout). A socket without TLS is returned as is.
     *
     * @throws IOException the handshake failed (an {@link javax.net.ssl.SSLException} when the
     *     peer or its certificate was refused)
     */
    Socket secure(Socket socket, String host, int port) throws IOException {
        if (ssl == null) {
            return socket;
        }
        SSLContext context = ssl.sslContext();
        SSLSocket s = (SSLSocket) context.getSocketFactory().createSocket(socket, host, port, true);
        // The parameters Kafka's own client engine gets: protocols, cipher suites, endpoint
        // identification, SNI.
        SSLEngine engine = ssl.createClientSslEngine(host, port, endpointIdentification);
        s.setUseClientMode(true);
        s.setSSLParameters(engine.getSSLParameters());
        s.startHandshake();
        return s;
    }

    /**
     * A SASL client for this configuration, talking to {@code host}.
     *
     * @throws SaslAuthenticationException if the JDK offers no client for the mechanism
     */
    SaslClient saslClient(String host) {
        CallbackHandler handler = callbacks -> {
            for (Callback c : callbacks) {
                if (c instanceof NameCallback) {
                    ((NameCallback) c).setName(username);
                } else if (c instanceof PasswordCallback) {
                    ((PasswordCallback) c).setPassword(password.toCharArray());
                } else {
                    throw new UnsupportedCallbackException(c);
                }
            }
        };
        try {
            SaslClient client = Sasl.createSaslClient(new String[] {mechanism}, null, "kafka", host,
                    Map.of(), handler);
            if (client == null) {
                throw new SaslAuthenticationException("no SASL client for mechanism " + mechanism);
            }
            return client;
        } catch (SaslException e) {
            throw new SaslAuthenticationException("cannot create a " + mechanism + " client: " + e.getMessage(), e);
        }
    }

    @Override
    public String toString() {
        return protocol.name + (mechanism != null ? "/" + mechanism : "");
    }
}
