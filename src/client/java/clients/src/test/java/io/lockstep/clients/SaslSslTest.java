package io.lockstep.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.errors.GroupAuthorizationException;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.SslAuthenticationException;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * {@code io.lockstep.clients} over SASL_SSL. One broker started from a {@code
 * server.properties} with a PLAINTEXT listener (the fixture's, principal {@code User:ANONYMOUS}, a
 * super user) and a SASL_SSL listener (PLAIN users from the JAAS text, SCRAM users added with
 * kafka-clients' Admin), StandardAuthorizer on, certificates made by the {@code openssl} CLI (the
 * server's names only IP 127.0.0.1). Proves: a share transaction (begin, acknowledge into it,
 * prepare, commit; an abort that redelivers at the same delivery count) through {@link
 * LockstepShareTransactionCoordinator} and a transactional {@link LockstepShareConsumer} with
 * PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (trust stores PEM, PKCS12, JKS); Kafka 4.4's {@code
 * KafkaShareConsumer} share-consuming on the same listener; a wrong password is
 * SASL_AUTHENTICATION_FAILED (58); a foreign CA and a host name not in the certificate fail the
 * TLS handshake (and pass with {@code ssl.endpoint.identification.algorithm=}); a user without
 * ACLs, and one with only DESCRIBE on the group, get GROUP_AUTHORIZATION_FAILED from the
 * share-transaction APIs (keys 1000-1005 are operations on their group), without GROUP READ the
 * share consumer's heartbeat does too, and a DENY on the group added after a fetch refuses
 * ShareAcknowledgeTransactional (key 1001).
 *
 * <p>{@code -Dsaslssl.target=kafka} runs what Kafka 4.4 can answer against a private Kafka 4.4
 * ({@code tools/kafka-reference.sh start}, free ports, configured alike, stopped at the end): our
 * consumer (explicit acknowledgement, RELEASE redelivered) with each mechanism and trust store
 * type, Kafka's {@code KafkaShareConsumer}, the wrong passwords, the certificate checks and the
 * group ACLs of FindCoordinator and ShareGroupHeartbeat. The share-transaction APIs are Lockstep's
 * own: those tests are skipped there.
 */
class SaslSslTest {
    private static final Duration DELIVERY_WAIT = Duration.ofSeconds(30);
    private static final Duration QUIET_WAIT = Duration.ofSeconds(3);
    private static final String PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule";
    private static final String SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule";

    /** {@code -Dsaslssl.target=kafka}: against a private Kafka 4.4 instead of Lockstep. */
    static final boolean KAFKA = "kafka".equals(System.getProperty("saslssl.target"));

    static Path dir;
    static LockstepBroker broker;
    /** The Kafka 4.4 broker's directory and PLAINTEXT port ({@link #KAFKA}). */
    static Path kafkaDir;
    static int kafkaPort;
    /** The PLAINTEXT listener (principal User:ANONYMOUS, a super user): set-up only. */
    static String plainBootstrap;
    static int saslSslPort;

    @BeforeAll
    static void start() throws Exception {
        dir = Files.createTempDirectory("lockstep-java-sasl-ssl-");
        certificates(dir);
        saslSslPort = LockstepBroker.freePort();
        String jaasPlain = PLAIN_MODULE + " required user_alice=\"alice-secret\" user_dora=\"dora-secret\""
                + " user_mallory=\"mallory-secret\";";
        String security = String.join("\n",
                "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                "listener.name.sasls.plain.sasl.jaas.config=" + jaasPlain,
                "listener.name.sasls.scram-sha-256.sasl.jaas.config=" + SCRAM_MODULE + " required;",
                "listener.name.sasls.scram-sha-512.sasl.jaas.config=" + SCRAM_MODULE + " required;",
                "ssl.keystore.type=PEM",
                "ssl.keystore.location=" + dir.resolve("server-keystore.pem"),
                "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users=User:ANONYMOUS",
                "");
        if (KAFKA) {
            kafkaPort = LockstepBroker.freePort();
            int controller = LockstepBroker.freePort();
            kafkaDir = dir.resolve("kafka");
            ProcessBuilder pb = new ProcessBuilder(kafkaScript(), "start", kafkaDir.toString(),
                    Integer.toString(kafkaPort)).inheritIO();
            pb.environment().put("KAFKA_CONTROLLER_PORT", Integer.toString(controller));
            pb.environment().put("KAFKA_EXTRA_PROPS", String.join("\n",
                    "listeners=PLAINTEXT://127.0.0.1:" + kafkaPort + ",SASLS://127.0.0.1:" + saslSslPort
                            + ",CONTROLLER://127.0.0.1:" + controller,
                    "advertised.listeners=PLAINTEXT://127.0.0.1:" + kafkaPort + ",SASLS://127.0.0.1:" + saslSslPort,
                    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASLS:SASL_SSL",
                    security));
            assertEquals(0, pb.start().waitFor(), "Kafka 4.4 did not start");
            plainBootstrap = "127.0.0.1:" + kafkaPort;
        } else {
            broker = LockstepBroker.startWithConfig(dir.resolve("broker"), (port, data) -> String.join("\n",
                    "listeners=PLAINTEXT://127.0.0.1:" + port + ",SASLS://127.0.0.1:" + saslSslPort,
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASLS:SASL_SSL",
                    "log.dirs=" + data,
                    "num.partitions=1",
                    security));
            plainBootstrap = broker.bootstrap();
        }
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", plainBootstrap))) {
            // One mechanism per request for the same user (Kafka refuses a user twice in one).
            for (ScramMechanism m : List.of(ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)) {
                admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion("sam",
                        new ScramCredentialInfo(m, 4096), "sam-secret"))).all().get(30, TimeUnit.SECONDS);
            }
            List<AclBinding> acls = new ArrayList<>();
            for (String user : List.of("alice", "sam")) {
                acls.add(allow(ResourceType.GROUP, "jsec-", user, AclOperation.READ));
                acls.add(allow(ResourceType.TOPIC, "jsec-", user, AclOperation.READ));
            }
            acls.add(allow(ResourceType.GROUP, "jsec-", "dora", AclOperation.DESCRIBE));
            admin.createAcls(acls).all().get(30, TimeUnit.SECONDS);
        }
    }

    static String kafkaScript() {
        return Paths.get(System.getProperty("user.dir"), "../../../../tools/kafka-reference.sh").normalize().toString();
    }

    @AfterAll
    static void stop() throws Exception {
        if (broker != null) {
            broker.close(); // deletes dir/broker
            broker = null;
        }
        if (kafkaDir != null) {
            new ProcessBuilder(kafkaScript(), "stop", kafkaDir.toString(), Integer.toString(kafkaPort))
                    .inheritIO().start().waitFor();
            kafkaDir = null;
        }
        try (var files = Files.walk(dir)) {
            files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        }
    }

    private static AclBinding allow(ResourceType type, String prefix, String user, AclOperation op) {
        return new AclBinding(new ResourcePattern(type, prefix, PatternType.PREFIXED),
                new AccessControlEntry("User:" + user, "*", op, AclPermissionType.ALLOW));
    }

    private static void sh(Path cwd, String script) throws IOException, InterruptedException {
        Process p = new ProcessBuilder("sh", "-ec", script).directory(cwd.toFile()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertEquals(0, p.waitFor(), "failed: " + script + "\n" + out);
    }

    /**
     * A CA, a server certificate naming only IP 127.0.0.1 (so {@code localhost} fails host name
     * verification), another CA nobody uses, and the CA as PKCS12 and JKS trust stores.
     */
    static void certificates(Path d) throws Exception {
        sh(d, String.join("\n",
                "for ca in ca other-ca; do",
                "  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $ca.key \\",
                "    -out $ca.pem -days 2 -subj /CN=jsec-$ca",
                "done",
                "printf 'subjectAltName=IP:127.0.0.1\\n' > server.ext",
                "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key \\",
                "  -out server.csr -subj /CN=jsec-server",
                "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \\",
                "  -extfile server.ext -out server.pem",
                "cat server.key server.pem > server-keystore.pem"));
        Certificate ca;
        try (InputStream in = Files.newInputStream(d.resolve("ca.pem"))) {
            ca = CertificateFactory.getInstance("X.509").generateCertificate(in);
        }
        for (String type : List.of("PKCS12", "JKS")) {
            KeyStore ks = KeyStore.getInstance(type);
            ks.load(null, null);
            ks.setCertificateEntry("ca", ca);
            try (OutputStream out = Files.newOutputStream(d.resolve("truststore." + type.toLowerCase()))) {
                ks.store(out, "trust-secret".toCharArray());
            }
        }
    }

    /** Client settings for SASL_SSL as {@code user} with {@code mechanism}, trusting the CA from a {@code trustType} store. */
    static Properties secure(String group, String mechanism, String user, String password, String trustType) {
        Properties p = new Properties();
        p.put("bootstrap.servers", "127.0.0.1:" + saslSslPort);
        p.put("group.id", group);
        p.put("security.protocol", "SASL_SSL");
        p.put("sasl.mechanism", mechanism);
        p.put("sasl.jaas.config", (mechanism.equals("PLAIN") ? PLAIN_MODULE : SCRAM_MODULE)
                + " required username=\"" + user + "\" password=\"" + password + "\";");
        p.put("ssl.truststore.type", trustType);
        if (trustType.equals("PEM")) {
            p.put("ssl.truststore.location", dir.resolve("ca.pem").toString());
        } else {
            p.put("ssl.truststore.location", dir.resolve("truststore." + trustType.toLowerCase()).toString());
            p.put("ssl.truststore.password", "trust-secret");
        }
        p.put("default.api.timeout.ms", "20000");
        p.put("request.timeout.ms", "10000");
        p.put("fetch.max.wait.ms", "200");
        return p;
    }

    private static List<ConsumerRecord<String, String>> pollFor(LockstepShareConsumer<String, String> c, int n,
            Duration wait, java.util.function.Consumer<ConsumerRecords<String, String>> eachPoll) {
        return LockstepShareConsumerTest.pollFor(c, n, wait, eachPoll);
    }

    @ParameterizedTest(name = "{0} as {1}, trust store {2}")
    @CsvSource({"PLAIN,alice,alice-secret,PEM", "SCRAM-SHA-256,sam,sam-secret,PKCS12",
            "SCRAM-SHA-512,sam,sam-secret,JKS"})
    void aShareTransactionCommitsAndAnAbortRedeliversOverSaslSsl(String mechanism, String user, String password,
            String trustType) {
        Assumptions.assumeFalse(KAFKA, "the share-transaction APIs are Lockstep's own");
        String tag = mechanism.toLowerCase().replace("-", "");
        String group = "jsec-" + tag;
        String topic = "jsec-" + tag + "-t";
        LockstepBroker.createTopic(plainBootstrap, topic, 1, group);
        LockstepBroker.produce(plainBootstrap, topic, 1, "v", 6);
        Properties props = secure(group, mechanism, user, password, trustType);
        Properties consumerProps = (Properties) props.clone();
        consumerProps.put("share.acknowledgement.mode", "transactional");
        String t1 = group + "-job-1";
        String t2 = group + "-job-2";
        String t3 = group + "-job-3";
        try (LockstepShareTransactionCoordinator coord = new LockstepShareTransactionCoordinator(props);
                LockstepShareConsumer<String, String> c = new LockstepShareConsumer<>(consumerProps,
                        new StringDeserializer(), new StringDeserializer())) {
            assertEquals(TransactionState.ONGOING, coord.begin(t1, Duration.ofSeconds(60)));
            assertEquals(TransactionState.ONGOING, coord.begin(t2, Duration.ofSeconds(60)));
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = pollFor(c, 6, DELIVERY_WAIT, rs -> rs.forEach(
                    r -> c.acknowledge(r, AcknowledgeType.ACCEPT, r.offset() < 3 ? t1 : t2)));
            assertEquals(6, got.size());
            Map<Long, Short> counts = new TreeMap<>();
            got.forEach(r -> counts.put(r.offset(), r.deliveryCount().get()));
            c.commitSync().values().forEach(e -> assertEquals(Optional.empty(), e));
            Map<String, Long> locked = new HashMap<>();
            coord.listPendingTransactions(group).forEach(t -> locked.put(t.id, t.lockedRecordCount()));
            assertEquals(Map.of(t1, 3L, t2, 3L), locked);

            // Abort: the three come back, at the delivery count they had; into a third transaction.
            assertEquals(TransactionState.ABORTED, coord.abort(t2));
            assertEquals(TransactionState.ONGOING, coord.begin(t3, Duration.ofSeconds(60)));
            List<ConsumerRecord<String, String>> back = pollFor(c, 3, DELIVERY_WAIT,
                    rs -> rs.forEach(r -> c.acknowledge(r, AcknowledgeType.ACCEPT, t3)));
            Map<Long, Short> backCounts = new TreeMap<>();
            back.forEach(r -> backCounts.put(r.offset(), r.deliveryCount().get()));
            Map<Long, Short> want = new TreeMap<>(counts);
            want.keySet().removeIf(o -> o < 3);
            assertEquals(want, backCounts, "abort redelivers at the same delivery count");
            c.commitSync().values().forEach(e -> assertEquals(Optional.empty(), e));

            for (String t : List.of(t1, t3)) {
                assertEquals(TransactionState.PREPARE, coord.prepare(t));
                assertEquals(TransactionState.COMMITTED, coord.commit(t));
            }
            assertEquals(0, pollFor(c, 1, QUIET_WAIT, rs -> rs.forEach(r -> c.acknowledge(r, AcknowledgeType.ACCEPT)))
                    .size(), "committed records never come back");
            assertEquals(List.of(), coord.listPendingTransactions(group));
            Set<String> done = coord.listTransactions(group,
                    List.of(TransactionState.COMMITTED, TransactionState.ABORTED)).stream()
                    .map(t -> t.id + "=" + t.state).collect(Collectors.toSet());
            assertEquals(Set.of(t1 + "=COMMITTED", t2 + "=ABORTED", t3 + "=COMMITTED"), done);
        }
    }

    @ParameterizedTest(name = "{0} as {1}, trust store {2}")
    @CsvSource({"PLAIN,alice,alice-secret,PEM", "SCRAM-SHA-256,sam,sam-secret,PKCS12",
            "SCRAM-SHA-512,sam,sam-secret,JKS"})
    void ourConsumerAcceptsAndReleasesOverSaslSsl(String mechanism, String user, String password,
            String trustType) {
        String tag = mechanism.toLowerCase().replace("-", "");
        String group = "jsec-x" + tag;
        String topic = "jsec-x" + tag + "-t";
        LockstepBroker.createTopic(plainBootstrap, topic, 1, group);
        LockstepBroker.produce(plainBootstrap, topic, 1, "v", 4);
        Properties props = secure(group, mechanism, user, password, trustType);
        props.put("share.acknowledgement.mode", "explicit");
        try (LockstepShareConsumer<String, String> c = new LockstepShareConsumer<>(props, new StringDeserializer(),
                new StringDeserializer())) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = pollFor(c, 4, DELIVERY_WAIT, rs -> rs.forEach(
                    r -> c.acknowledge(r, r.offset() < 2 ? AcknowledgeType.ACCEPT : AcknowledgeType.RELEASE)));
            assertEquals(4, got.size());
            c.commitSync().values().forEach(e -> assertEquals(Optional.empty(), e));
            List<ConsumerRecord<String, String>> back = pollFor(c, 2, DELIVERY_WAIT,
                    rs -> rs.forEach(r -> c.acknowledge(r, AcknowledgeType.ACCEPT)));
            Map<Long, Short> counts = new TreeMap<>();
            back.forEach(r -> counts.put(r.offset(), r.deliveryCount().get()));
            assertEquals(Map.of(2L, (short) 2, 3L, (short) 2), counts, "released records come back, count 2");
            c.commitSync().values().forEach(e -> assertEquals(Optional.empty(), e));
        }
    }

    @Test
    void kafkasShareConsumerShareConsumesOverSaslSsl() {
        String group = "jsec-kafka";
        String topic = "jsec-kafka-t";
        LockstepBroker.createTopic(plainBootstrap, topic, 1, group);
        LockstepBroker.produce(plainBootstrap, topic, 1, "k", 20);
        Properties p = secure(group, "SCRAM-SHA-512", "sam", "sam-secret", "PEM");
        p.remove("fetch.max.wait.ms");
        p.remove("default.api.timeout.ms");
        p.remove("request.timeout.ms");
        Set<String> values = new java.util.TreeSet<>();
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p, new StringDeserializer(),
                new StringDeserializer())) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + DELIVERY_WAIT.toMillis();
            while (values.size() < 20 && System.currentTimeMillis() < deadline) {
                c.poll(Duration.ofMillis(500)).forEach(r -> values.add(r.value()));
            }
            c.commitSync();
        }
        assertEquals(LockstepShareConsumerTest.expected("k", 20), values);
    }

    @Test
    void aWrongPasswordIsSaslAuthenticationFailed() {
        for (String[] login : List.of(new String[] {"PLAIN", "alice"}, new String[] {"SCRAM-SHA-256", "sam"},
                new String[] {"SCRAM-SHA-512", "nobody"})) {
            Properties p = secure("jsec-wrong", login[0], login[1], "wrong", "PEM");
            try (LockstepShareTransactionCoordinator coord = new LockstepShareTransactionCoordinator(p)) {
                SaslAuthenticationException e = assertThrows(SaslAuthenticationException.class,
                        () -> coord.listPendingTransactions("jsec-wrong"), login[0]);
                assertEquals(Errors.SASL_AUTHENTICATION_FAILED, Errors.forException(e));
                assertEquals(58, Errors.forException(e).code());
                assertTrue(e.getMessage().contains("Authentication failed"), e.getMessage());
            }
        }
        Properties p = secure("jsec-wrong", "PLAIN", "alice", "wrong", "PEM");
        p.put("share.acknowledgement.mode", "explicit");
        try (LockstepShareConsumer<String, String> c = new LockstepShareConsumer<>(p, new StringDeserializer(),
                new StringDeserializer())) {
            c.subscribe(List.of("jsec-wrong-t"));
            assertThrows(SaslAuthenticationException.class, () -> c.poll(Duration.ofSeconds(5)));
        }
        // A mechanism the client cannot run is a configuration error, named.
        Properties gssapi = secure("jsec-wrong", "PLAIN", "alice", "alice-secret", "PEM");
        gssapi.put("sasl.mechanism", "GSSAPI");
        ConfigException e = assertThrows(ConfigException.class, () -> new LockstepShareTransactionCoordinator(gssapi));
        assertTrue(e.getMessage().contains("sasl.mechanism"), e.getMessage());
    }

    @Test
    void theServerCertificateIsVerified() {
        // A trust store without the broker's CA.
        Properties foreign = secure("jsec-tls", "PLAIN", "alice", "alice-secret", "PEM");
        foreign.put("ssl.truststore.location", dir.resolve("other-ca.pem").toString());
        try (LockstepShareTransactionCoordinator coord = new LockstepShareTransactionCoordinator(foreign)) {
            assertThrows(SslAuthenticationException.class, () -> coord.listPendingTransactions("jsec-tls"));
        }
        // The certificate names 127.0.0.1 only: "localhost" fails host name verification (https, the
        // default) and passes with the algorithm turned off.
        Properties byName = secure("jsec-tls", "PLAIN", "alice", "alice-secret", "PEM");
        byName.put("bootstrap.servers", "localhost:" + saslSslPort);
        try (LockstepShareTransactionCoordinator coord = new LockstepShareTransactionCoordinator(byName)) {
            SslAuthenticationException e = assertThrows(SslAuthenticationException.class,
                    () -> coord.listPendingTransactions("jsec-tls"));
            assertTrue(String.valueOf(e.getCause()).contains("localhost") || e.getMessage().contains("localhost"),
                    e.toString());
        }
        byName.put("ssl.endpoint.identification.algorithm", "");
        LockstepBroker.createTopic(plainBootstrap, "jsec-tls-t", 1, "jsec-tls");
        LockstepBroker.produce(plainBootstrap, "jsec-tls-t", 1, "v", 1);
        byName.put("share.acknowledgement.mode", "implicit");
        try (LockstepShareConsumer<String, String> c = new LockstepShareConsumer<>(byName, new StringDeserializer(),
                new StringDeserializer())) {
            c.subscribe(List.of("jsec-tls-t"));
            assertEquals(1, pollFor(c, 1, DELIVERY_WAIT, rs -> { }).size());
        }
    }

    @Test
    void usersWithoutGroupAclsGetGroupAuthorizationFailed() {
        String group = "jsec-acl";
        // mallory: no ACL at all; FindCoordinator (GROUP DESCRIBE) is refused already.
        Properties mallory = secure(group, "PLAIN", "mallory", "mallory-secret", "PEM");
        try (LockstepShareTransactionCoordinator coord = new LockstepShareTransactionCoordinator(mallory)) {
            assertThrows(GroupAuthorizationException.class, () -> coord.begin(group + "-job-1", null));
            assertThrows(GroupAuthorizationException.class, () -> coord.listPendingTransactions(group));
        }
        // dora: DESCRIBE on the group; her share consumer's heartbeat (GROUP READ) is refused.
        Properties dora = secure(group, "PLAIN", "dora", "dora-secret", "PEM");
        Properties doraConsumer = (Properties) dora.clone();
        doraConsumer.put("share.acknowledgement.mode", "explicit");
        LockstepBroker.createTopic(plainBootstrap, "jsec-acl-t", 1, null);
        try (LockstepShareConsumer<String, String> c = new LockstepShareConsumer<>(doraConsumer,
                new StringDeserializer(), new StringDeserializer())) {
            c.subscribe(List.of("jsec-acl-t"));
            assertThrows(GroupAuthorizationException.class, () -> c.poll(Duration.ofSeconds(5)));
        }
        if (KAFKA) {
            return; // the share-transaction APIs are Lockstep's own
        }
        // ShareListTransactions (GROUP DESCRIBE) answers her; begin, prepare, commit and abort
        // (GROUP READ) are refused.
        try (LockstepShareTransactionCoordinator coord = new LockstepShareTransactionCoordinator(dora)) {
            assertEquals(List.of(), coord.listPendingTransactions(group));
            GroupAuthorizationException begin = assertThrows(GroupAuthorizationException.class,
                    () -> coord.begin(group + "-job-1", null));
            assertEquals(Errors.GROUP_AUTHORIZATION_FAILED, Errors.forException(begin));
            TransactionPrepareException prepare = assertThrows(TransactionPrepareException.class,
                    () -> coord.prepare(group + "-job-1"));
            assertEquals(Errors.GROUP_AUTHORIZATION_FAILED, prepare.error());
            TransactionCommitException commit = assertThrows(TransactionCommitException.class,
                    () -> coord.commit(group + "-job-1"));
            assertEquals(Errors.GROUP_AUTHORIZATION_FAILED, commit.error());
            assertThrows(GroupAuthorizationException.class, () -> coord.abort(group + "-job-1"));
        }
        // alice (GROUP READ on jsec-*) may do what dora may not.
        Properties alice = secure(group, "PLAIN", "alice", "alice-secret", "PEM");
        try (LockstepShareTransactionCoordinator coord = new LockstepShareTransactionCoordinator(alice)) {
            assertEquals(TransactionState.ONGOING, coord.begin(group + "-job-1", null));
            assertEquals(TransactionState.ABORTED, coord.abort(group + "-job-1"));
        }

    }

    @Test
    void aDeniedGroupRefusesTransactionalAcknowledgements() throws Exception {
        Assumptions.assumeFalse(KAFKA, "the share-transaction APIs are Lockstep's own");
        // alice holds records of jsec-deny and has begun a transaction; then READ on the group is
        // denied to her: ShareAcknowledgeTransactional (key 1001, GROUP READ + TOPIC READ) answers
        // GROUP_AUTHORIZATION_FAILED for her partition.
        String group = "jsec-deny";
        String topic = "jsec-deny-t";
        LockstepBroker.createTopic(plainBootstrap, topic, 1, group);
        LockstepBroker.produce(plainBootstrap, topic, 1, "v", 2);
        Properties alice = secure(group, "PLAIN", "alice", "alice-secret", "PEM");
        Properties consumerProps = (Properties) alice.clone();
        consumerProps.put("share.acknowledgement.mode", "transactional");
        AclBinding deny = new AclBinding(new ResourcePattern(ResourceType.GROUP, group, PatternType.LITERAL),
                new AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.DENY));
        try (LockstepShareTransactionCoordinator coord = new LockstepShareTransactionCoordinator(alice);
                LockstepShareConsumer<String, String> c = new LockstepShareConsumer<>(consumerProps,
                        new StringDeserializer(), new StringDeserializer());
                Admin admin = Admin.create(Map.of("bootstrap.servers", plainBootstrap))) {
            String txn = group + "-job-1";
            coord.begin(txn, null);
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = pollFor(c, 2, DELIVERY_WAIT, rs -> { });
            assertEquals(2, got.size());
            admin.createAcls(List.of(deny)).all().get(30, TimeUnit.SECONDS);
            try {
                got.forEach(r -> c.acknowledge(r, AcknowledgeType.ACCEPT, txn));
                Map<org.apache.kafka.common.TopicIdPartition, Optional<org.apache.kafka.common.KafkaException>> result =
                        c.commitSync();
                assertEquals(1, result.size(), result.toString());
                Optional<org.apache.kafka.common.KafkaException> error = result.values().iterator().next();
                assertTrue(error.isPresent(), "refused: " + result);
                assertInstanceOf(GroupAuthorizationException.class, error.get());
                assertThrows(GroupAuthorizationException.class, () -> coord.abort(txn));
            } finally {
                admin.deleteAcls(List.of(deny.toFilter())).all().get(30, TimeUnit.SECONDS);
            }
            assertEquals(Map.of(txn, 0L), coord.listPendingTransactions(group).stream()
                    .collect(Collectors.toMap(t -> t.id, t -> t.lockedRecordCount())), "nothing was locked");
            assertEquals(TransactionState.ABORTED, coord.abort(txn));
        }
    }
}
