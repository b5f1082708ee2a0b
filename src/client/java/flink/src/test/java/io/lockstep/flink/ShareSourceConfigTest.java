package io.lockstep.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lockstep.clients.LockstepShareTransactionCoordinator;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.common.config.ConfigException;
import org.junit.jupiter.api.Test;

/**
 * The source's security settings ({@code security.*}, {@code ssl.*}, {@code sasl.*}) reach all
 * three clients it makes: the share consumer, the transaction coordinator client and the admin
 * client; and the coordinator client reads them (an unsupported mechanism is refused naming it).
 */
class ShareSourceConfigTest {
    private static ShareSourceConfig config(Map<String, String> client) {
        return new ShareSourceConfig("127.0.0.1:9093", "g", List.of("t"), "job", client, Map.of(), 0, true,
                null, Duration.ofMillis(100), Duration.ofSeconds(10));
    }

    @Test
    void securitySettingsReachEveryClient() {
        Map<String, String> client = Map.of(
                "security.protocol", "SASL_SSL",
                "sasl.mechanism", "SCRAM-SHA-512",
                "sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required"
                        + " username=\"u\" password=\"p\";",
                "ssl.truststore.type", "PEM",
                "ssl.truststore.certificates", "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----",
                "ssl.endpoint.identification.algorithm", "");
        ShareSourceConfig c = config(client);
        for (Properties p : List.of(c.consumerProperties(0), c.coordinatorProperties("enumerator"),
                c.adminProperties())) {
            for (Map.Entry<String, String> e : client.entrySet()) {
                assertEquals(e.getValue(), p.getProperty(e.getKey()), e.getKey() + " in " + p.getProperty("client.id"));
            }
        }
    }

    @Test
    void theCoordinatorClientReadsThem() {
        ShareSourceConfig c = config(Map.of("security.protocol", "SASL_PLAINTEXT", "sasl.mechanism", "GSSAPI",
                "sasl.jaas.config", "com.sun.security.auth.module.Krb5LoginModule required;"));
        ConfigException e = assertThrows(ConfigException.class,
                () -> new LockstepShareTransactionCoordinator(c.coordinatorProperties("enumerator")));
        assertTrue(e.getMessage().contains("sasl.mechanism"), e.getMessage());
        ShareSourceConfig plain = config(Map.of("security.protocol", "SASL_PLAINTEXT", "sasl.mechanism", "PLAIN",
                "sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required"
                        + " username=\"u\" password=\"p\";"));
        new LockstepShareTransactionCoordinator(plain.coordinatorProperties("enumerator")).close();
        ShareSourceConfig bogus = config(Map.of("security.protocol", "TLS"));
        e = assertThrows(ConfigException.class,
                () -> new LockstepShareTransactionCoordinator(bogus.coordinatorProperties("enumerator")));
        assertTrue(e.getMessage().contains("security.protocol"), e.getMessage());
    }
}
