//! SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) over SASL_PLAINTEXT and SASL_SSL,
//! SCRAM users managed with `kafka-configs`, fuzzed SASL exchanges and TLS handshakes,
//! connection limits.
//!
//! One broker started from a `--config` file with four listeners: `PLAINTEXT`, `SASLP`
//! (SASL_PLAINTEXT), `SASLS` (SASL_SSL, a certificate made by the `openssl` CLI) and `TLS` (SSL), every
//! mechanism enabled, PLAIN users `admin` and `carol` from the JAAS text. Clients: librdkafka
//! (confluent-kafka, `tests/clients/python/sasl_client.py`) and Java (Kafka 4.4's
//! `kafka-configs` and ProducerPerformance through `tools/kafka-reference.sh class`).
//!
//! With `LOCKSTEP_INTEROP_TARGET=kafka` the SASL and fuzz scenarios run against a private
//! Kafka 4.4 (`tools/kafka-reference.sh start` on free ports, configured alike, stopped at the
//! end) instead; the connection-limit test is Lockstep's only (Kafka delays, rather than
//! closes, a connection over `max.connections` or the creation rate).
//!
//! ```text
//! cargo test --release --test sasl
//! ```

mod common;

use common::{check_deps, die_with_parent, free_port, sh, ROOT};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const JAAS_PLAIN: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
    username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" \
    user_carol=\"carol-secret\";";
const JAAS_SCRAM: &str = "org.apache.kafka.common.security.scram.ScramLoginModule required;";

fn against_kafka() -> bool {
    std::env::var("LOCKSTEP_INTEROP_TARGET").as_deref() == Ok("kafka")
}

/// The broker under test: Lockstep (a child) or a private Kafka 4.4 (a directory).
enum Target {
    Lockstep(Child),
    Kafka { dir: PathBuf, port: u16 },
}

impl Drop for Target {
    fn drop(&mut self) {
        match self {
            Target::Lockstep(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Target::Kafka { dir, port } => {
                let _ = Command::new(Path::new(ROOT).join("tools/kafka-reference.sh"))
                    .arg("stop")
                    .arg(&*dir)
                    .arg(port.to_string())
                    .stdout(Stdio::null())
                    .status();
            }
        }
    }
}

fn start_lockstep(config: &Path) -> Target {
    Target::Lockstep(common::spawn_with_config(
        env!("CARGO_BIN_EXE_lockstep"),
        config,
    ))
}

/// A CA and a server certificate for 127.0.0.1/localhost (EC P-256, PKCS#8 key).
fn make_certificates(dir: &Path) {
    sh(
        dir,
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
         -out ca.pem -days 2 -subj /CN=p18-sasl-ca\n\
         printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > server.ext\n\
         openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key \
           -out server.csr -subj /CN=localhost\n\
         openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
           -extfile server.ext -out server.pem\n\
         cat server.key server.pem > server-keystore.pem",
    );
}

/// Ports of the three listeners.
#[derive(Clone, Copy)]
struct Ports {
    plain: u16,
    saslp: u16,
    sasls: u16,
    /// An SSL listener (TLS without SASL), for the TLS fuzz.
    tls: u16,
}

/// The SASL and TLS lines both brokers get.
fn security_props(dir: &Path) -> String {
    let mut text = format!(
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512\n\
         ssl.keystore.type=PEM\n\
         ssl.keystore.location={}\n",
        dir.join("server-keystore.pem").display()
    );
    for l in ["saslp", "sasls"] {
        text += &format!("listener.name.{l}.plain.sasl.jaas.config={JAAS_PLAIN}\n");
        for m in ["scram-sha-256", "scram-sha-512"] {
            text += &format!("listener.name.{l}.{m}.sasl.jaas.config={JAAS_SCRAM}\n");
        }
    }
    text
}

fn start_target(dir: &Path, extra: &str) -> (Target, Ports) {
    let ports = Ports {
        plain: free_port(),
        saslp: free_port(),
        sasls: free_port(),
        tls: free_port(),
    };
    let Ports {
        plain,
        saslp,
        sasls,
        tls,
    } = ports;
    let listeners = format!(
        "PLAINTEXT://127.0.0.1:{plain},SASLP://127.0.0.1:{saslp},SASLS://127.0.0.1:{sasls},TLS://127.0.0.1:{tls}"
    );
    if against_kafka() {
        let cport = free_port();
        let kdir = dir.join("kafka");
        let props = format!(
            "listeners={listeners},CONTROLLER://127.0.0.1:{cport}\n\
             advertised.listeners={listeners}\n\
             listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASLP:SASL_PLAINTEXT,SASLS:SASL_SSL,TLS:SSL\n\
             {}{extra}",
            security_props(dir)
        );
        let status = Command::new(Path::new(ROOT).join("tools/kafka-reference.sh"))
            .arg("start")
            .arg(&kdir)
            .arg(plain.to_string())
            .env("KAFKA_CONTROLLER_PORT", cport.to_string())
            .env("KAFKA_EXTRA_PROPS", props)
            .status()
            .expect("run kafka-reference.sh start");
        assert!(status.success(), "Kafka 4.4 did not start");
        return (
            Target::Kafka {
                dir: kdir,
                port: plain,
            },
            ports,
        );
    }
    let config = dir.join("server.properties");
    std::fs::write(
        &config,
        format!(
            "listeners={listeners}\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASLP:SASL_PLAINTEXT,SASLS:SASL_SSL,TLS:SSL\n\
             log.dirs={}\n\
             num.partitions=2\n\
             {}{extra}",
            dir.join("data").display(),
            security_props(dir)
        ),
    )
    .unwrap();
    (start_lockstep(&config), ports)
}

fn python_client(python: &Path, request: Value) -> Value {
    let script = Path::new(ROOT).join("tests/clients/python/sasl_client.py");
    let out = die_with_parent(&mut Command::new(python))
        .arg(script)
        .arg(request.to_string())
        .stderr(Stdio::inherit())
        .output()
        .expect("run the python client");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line: {text}"));
    let result: Value = serde_json::from_str(line).expect("RESULT json");
    eprintln!(
        "{} {} -> {result}",
        request["action"], request["conf"]["sasl.username"]
    );
    result
}

/// librdkafka settings for `user` with `mechanism` on `port` (TLS if `tls`).
fn sasl_conf(dir: &Path, port: u16, tls: bool, mechanism: &str, user: &str, pw: &str) -> Value {
    let mut conf = json!({
        "bootstrap.servers": format!("127.0.0.1:{port}"),
        "security.protocol": if tls { "SASL_SSL" } else { "SASL_PLAINTEXT" },
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": pw,
    });
    if tls {
        conf["ssl.ca.location"] = json!(dir.join("ca.pem").display().to_string());
    }
    conf
}

/// Java client properties (a `--command-config` / `--producer.config` file).
fn java_props(dir: &Path, name: &str, tls: bool, mechanism: &str, user: &str, pw: &str) -> PathBuf {
    let module = if mechanism == "PLAIN" {
        "org.apache.kafka.common.security.plain.PlainLoginModule"
    } else {
        "org.apache.kafka.common.security.scram.ScramLoginModule"
    };
    let mut text = format!(
        "security.protocol={}\nsasl.mechanism={mechanism}\n\
         sasl.jaas.config={module} required username=\"{user}\" password=\"{pw}\";\n",
        if tls { "SASL_SSL" } else { "SASL_PLAINTEXT" }
    );
    if tls {
        text += &format!(
            "ssl.truststore.type=PEM\nssl.truststore.location={}\n",
            dir.join("ca.pem").display()
        );
    }
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn java_tool(class: &str, args: &[&str]) -> String {
    let out = die_with_parent(&mut Command::new(
        Path::new(ROOT).join("tools/kafka-reference.sh"),
    ))
    .arg("class")
    .arg(class)
    .args(args)
    .stdin(Stdio::null())
    .output()
    .expect("run kafka-reference.sh class");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    eprintln!("$ {class} {}\n{text}", args.join(" "));
    text
}

fn auth_failed(r: &Value) -> bool {
    let text = r.to_string().to_lowercase();
    r.get("error").is_some() && text.contains("authentication")
}

#[test]
fn sasl_mechanisms_over_plaintext_and_tls() {
    let python = check_deps();
    let tmp = tempfile::Builder::new()
        .prefix("p18-sasl")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    make_certificates(dir);
    let (target, ports) = start_target(dir, "");
    let admin = sasl_conf(dir, ports.saslp, false, "PLAIN", "admin", "admin-secret");

    // PLAIN from the JAAS text.
    let md = python_client(&python, json!({"conf": admin, "action": "metadata"}));
    assert!(md.get("brokers").is_some(), "{md}");

    // kafka-configs adds SCRAM users (alice: both mechanisms, one per command: Kafka refuses a
    // user altered twice in one request, DUPLICATE_RESOURCE), librdkafka another (bob).
    let admin_props = java_props(
        dir,
        "admin.properties",
        false,
        "PLAIN",
        "admin",
        "admin-secret",
    );
    let bootstrap = format!("127.0.0.1:{}", ports.saslp);
    let configs = |args: &[&str]| {
        let mut all = vec![
            "--bootstrap-server",
            &bootstrap,
            "--command-config",
            admin_props.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        java_tool("org.apache.kafka.tools.ConfigCommand", &all)
    };
    let alter_alice = |config: &str| {
        configs(&[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
            "--add-config",
            config,
        ])
    };
    let out = alter_alice("SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]");
    assert!(out.contains("DuplicateResourceException"), "{out}");
    for config in [
        "SCRAM-SHA-256=[iterations=8192,password=alice-secret]",
        "SCRAM-SHA-512=[password=alice-secret]",
    ] {
        let out = alter_alice(config);
        assert!(
            out.contains("Completed updating config for user alice"),
            "{out}"
        );
    }
    let r = python_client(
        &python,
        json!({"conf": admin, "action": "scram_upsert", "user": "bob",
               "mechanism": "SCRAM-SHA-512", "password": "bob-secret", "iterations": 4096}),
    );
    assert_eq!(r["upserted"], true, "{r}");
    let out = configs(&["--describe", "--entity-type", "users"]);
    let line = |user: &str| {
        out.lines()
            .find(|l| {
                l.contains(&format!(
                    "SCRAM credential configs for user-principal '{user}' are"
                ))
            })
            .unwrap_or_else(|| panic!("no line for {user}: {out}"))
            .to_string()
    };
    let alice = line("alice");
    assert!(alice.contains("SCRAM-SHA-256=iterations=8192"), "{alice}");
    assert!(alice.contains("SCRAM-SHA-512=iterations=4096"), "{alice}");
    assert!(
        line("bob").ends_with("are SCRAM-SHA-512=iterations=4096"),
        "{out}"
    );
    let r = python_client(
        &python,
        json!({"conf": admin, "action": "scram_describe", "users": ["alice", "nobody"]}),
    );
    assert!(
        r.get("error").is_some() || r["described"].get("nobody").is_none(),
        "{r}"
    );

    // Every mechanism on both listeners: create, produce, Java produce, consume, share-consume.
    let alice256 = sasl_conf(
        dir,
        ports.sasls,
        true,
        "SCRAM-SHA-256",
        "alice",
        "alice-secret",
    );
    let bob512 = sasl_conf(
        dir,
        ports.saslp,
        false,
        "SCRAM-SHA-512",
        "bob",
        "bob-secret",
    );
    let carol_tls = sasl_conf(dir, ports.sasls, true, "PLAIN", "carol", "carol-secret");
    let topic = "p18-sasl-topic";
    let r = python_client(
        &python,
        json!({"conf": alice256, "action": "create", "topic": topic, "partitions": 2}),
    );
    assert_eq!(r["created"], true, "{r}");
    let r = python_client(
        &python,
        json!({"conf": bob512, "action": "produce", "topic": topic, "count": 300}),
    );
    assert_eq!(r["produced"], 300, "{r}");
    let alice_props = java_props(
        dir,
        "alice.properties",
        true,
        "SCRAM-SHA-512",
        "alice",
        "alice-secret",
    );
    let out = java_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        &[
            "--topic",
            topic,
            "--num-records",
            "200",
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--producer.config",
            alice_props.to_str().unwrap(),
            "--producer-props",
            &format!("bootstrap.servers=127.0.0.1:{}", ports.sasls),
            "acks=all",
        ],
    );
    assert!(
        out.contains("200 records sent"),
        "Java SCRAM-SHA-512 over SASL_SSL: {out}"
    );
    let r = python_client(
        &python,
        json!({"conf": alice256, "action": "consume", "topic": topic, "partitions": 2, "count": 500}),
    );
    assert_eq!(r["consumed"], 500, "{r}");
    let r = python_client(
        &python,
        json!({"conf": carol_tls, "action": "share_consume", "topic": topic,
               "group": "p18-sasl-share", "count": 500}),
    );
    assert_eq!(r["share_consumed"], 500, "{r}");

    // Wrong passwords, an unknown user, a mechanism the user has no credential for.
    for conf in [
        sasl_conf(dir, ports.saslp, false, "PLAIN", "carol", "wrong"),
        sasl_conf(dir, ports.sasls, true, "SCRAM-SHA-256", "alice", "wrong"),
        sasl_conf(dir, ports.saslp, false, "SCRAM-SHA-512", "nobody", "x"),
        sasl_conf(
            dir,
            ports.saslp,
            false,
            "SCRAM-SHA-256",
            "bob",
            "bob-secret",
        ),
    ] {
        let r = python_client(
            &python,
            json!({"conf": conf, "action": "metadata", "timeout": 3}),
        );
        assert!(auth_failed(&r), "expected an authentication failure: {r}");
    }
    let wrong = java_props(
        dir,
        "wrong.properties",
        false,
        "SCRAM-SHA-512",
        "bob",
        "nope",
    );
    let out = java_tool(
        "org.apache.kafka.tools.ConfigCommand",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--command-config",
            wrong.to_str().unwrap(),
            "--describe",
            "--entity-type",
            "users",
        ],
    );
    assert!(out.contains("SaslAuthenticationException"), "{out}");

    // Lockstep: the SCRAM users survive a restart.
    if let Target::Lockstep(_) = target {
        drop(target);
        let config = dir.join("server.properties");
        let _again = start_lockstep(&config);
        let r = python_client(&python, json!({"conf": bob512, "action": "metadata"}));
        assert!(r.get("brokers").is_some(), "{r}");
        let r = python_client(
            &python,
            json!({"conf": alice256, "action": "consume", "topic": topic, "partitions": 2, "count": 500}),
        );
        assert_eq!(r["consumed"], 500, "{r}");
    }
}

/// A non-flexible request frame (header v1).
fn request(api_key: i16, version: i16, correlation: i32, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend(api_key.to_be_bytes());
    f.extend(version.to_be_bytes());
    f.extend(correlation.to_be_bytes());
    f.extend(4i16.to_be_bytes());
    f.extend(b"fuzz");
    f.extend(body);
    let mut framed = (f.len() as i32).to_be_bytes().to_vec();
    framed.extend(f);
    framed
}

fn string(s: &str) -> Vec<u8> {
    let mut v = (s.len() as i16).to_be_bytes().to_vec();
    v.extend(s.as_bytes());
    v
}

fn bytes_field(b: &[u8]) -> Vec<u8> {
    let mut v = (b.len() as i32).to_be_bytes().to_vec();
    v.extend(b);
    v
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// The next response frame (without its size), or `None` at EOF / error / timeout.
fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    s.read_exact(&mut size).ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    s.read_exact(&mut body).ok()?;
    Some(body)
}

/// True once the peer has closed (EOF or reset) without sending anything more.
fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(0) | Err(_))
}

const API_VERSIONS_V0: (i16, i16) = (18, 0);
const METADATA_V1: (i16, i16) = (3, 1);

fn error_code_after_correlation(frame: &[u8]) -> i16 {
    i16::from_be_bytes([frame[4], frame[5]])
}

#[test]
fn sasl_exchange_on_the_wire_and_fuzzed() {
    let python = check_deps();
    let tmp = tempfile::Builder::new()
        .prefix("p18-sasl-fuzz")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    make_certificates(dir);
    let (_target, ports) = start_target(dir, "");
    let port = ports.saslp;
    let all_topics = (-1i32).to_be_bytes();

    // ApiVersions, then a Metadata request before authenticating: closed, no response.
    let mut s = connect(port);
    s.write_all(&request(API_VERSIONS_V0.0, API_VERSIONS_V0.1, 1, &[]))
        .unwrap();
    let r = read_frame(&mut s).expect("ApiVersions answered before authentication");
    assert_eq!(&r[..4], &1i32.to_be_bytes());
    s.write_all(&request(METADATA_V1.0, METADATA_V1.1, 2, &all_topics))
        .unwrap();
    assert!(closed(&mut s), "Metadata before authentication must close");

    // Handshake v1 + SaslAuthenticate v1 (PLAIN), then Metadata works.
    let mut s = connect(port);
    s.write_all(&request(17, 1, 1, &string("PLAIN"))).unwrap();
    let r = read_frame(&mut s).unwrap();
    assert_eq!(error_code_after_correlation(&r), 0);
    s.write_all(&request(36, 1, 2, &bytes_field(b"\0admin\0admin-secret")))
        .unwrap();
    let r = read_frame(&mut s).unwrap();
    assert_eq!(error_code_after_correlation(&r), 0, "{r:?}");
    s.write_all(&request(METADATA_V1.0, METADATA_V1.1, 3, &all_topics))
        .unwrap();
    let r = read_frame(&mut s).expect("Metadata after authentication");
    assert_eq!(&r[..4], &3i32.to_be_bytes());
    // A second handshake after authentication: ILLEGAL_SASL_STATE.
    s.write_all(&request(17, 1, 4, &string("PLAIN"))).unwrap();
    let r = read_frame(&mut s).unwrap();
    assert_eq!(error_code_after_correlation(&r), 34);

    // Handshake v0: raw tokens (PLAIN's answer is an empty token), then requests.
    let mut s = connect(port);
    s.write_all(&request(17, 0, 1, &string("PLAIN"))).unwrap();
    let r = read_frame(&mut s).unwrap();
    assert_eq!(error_code_after_correlation(&r), 0);
    s.write_all(&bytes_field(b"\0carol\0carol-secret")).unwrap();
    assert_eq!(read_frame(&mut s).unwrap(), Vec::<u8>::new());
    s.write_all(&request(METADATA_V1.0, METADATA_V1.1, 2, &all_topics))
        .unwrap();
    assert!(read_frame(&mut s).is_some(), "Metadata after a v0 exchange");

    // Wrong password: SASL_AUTHENTICATION_FAILED, then closed.
    let mut s = connect(port);
    s.write_all(&request(17, 1, 1, &string("PLAIN"))).unwrap();
    read_frame(&mut s).unwrap();
    s.write_all(&request(36, 1, 2, &bytes_field(b"\0carol\0nope")))
        .unwrap();
    let r = read_frame(&mut s).unwrap();
    assert_eq!(error_code_after_correlation(&r), 58);
    assert!(closed(&mut s));

    // An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled ones, then closed.
    let mut s = connect(port);
    s.write_all(&request(17, 1, 1, &string("GSSAPI"))).unwrap();
    let r = read_frame(&mut s).unwrap();
    assert_eq!(error_code_after_correlation(&r), 33);
    assert!(String::from_utf8_lossy(&r).contains("SCRAM-SHA-512"));
    assert!(closed(&mut s));

    // A frame above the unauthenticated bound (512 KiB) closes before its body is read.
    let mut s = connect(port);
    s.write_all(&(600_000i32).to_be_bytes()).unwrap();
    assert!(closed(&mut s));

    // Fuzz: random bytes, random sizes, truncated and mutated handshakes; the broker survives.
    let mut rng = rand::rngs::SmallRng::seed_from_u64(18);
    let good = [
        request(17, 1, 1, &string("SCRAM-SHA-256")),
        request(36, 1, 2, &bytes_field(b"n,,n=alice,r=abcdefgh")),
    ]
    .concat();
    for i in 0..150 {
        let mut s = connect(port);
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let payload: Vec<u8> = match i % 5 {
            0 => (0..rng.gen_range(1..200)).map(|_| rng.gen()).collect(),
            1 => {
                let mut v = rng.gen::<i32>().to_be_bytes().to_vec();
                v.extend((0..rng.gen_range(0..64)).map(|_| rng.gen::<u8>()));
                v
            }
            2 => good[..rng.gen_range(1..good.len())].to_vec(),
            3 => {
                let mut v = good.clone();
                for _ in 0..rng.gen_range(1..4) {
                    let at = rng.gen_range(0..v.len());
                    v[at] = rng.gen();
                }
                v
            }
            _ => {
                // Valid handshake, then a garbage SCRAM message.
                let mut v = request(17, 1, 1, &string("SCRAM-SHA-512"));
                let junk: Vec<u8> = (0..rng.gen_range(0..100)).map(|_| rng.gen()).collect();
                v.extend(request(36, 1, 2, &bytes_field(&junk)));
                v
            }
        };
        let _ = s.write_all(&payload);
        if rng.gen_bool(0.5) {
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    // Fuzzed TLS handshakes on the SSL and SASL_SSL listeners (same seeded RNG).
    let client_tls = tls_client_config(&dir.join("ca.pem"));
    for port in [ports.tls, ports.sasls] {
        fuzz_tls(port, &client_tls, &mut rng, TLS_FUZZ_ROUNDS);
    }
    let tls_only = json!({
        "bootstrap.servers": format!("127.0.0.1:{}", ports.tls),
        "security.protocol": "SSL",
        "ssl.ca.location": dir.join("ca.pem").display().to_string(),
    });
    let md = python_client(&python, json!({"conf": tls_only, "action": "metadata"}));
    assert!(
        md.get("brokers").is_some(),
        "the SSL listener serves after the TLS fuzzing: {md}"
    );
    let admin = sasl_conf(dir, ports.saslp, false, "PLAIN", "admin", "admin-secret");
    let md = python_client(&python, json!({"conf": admin, "action": "metadata"}));
    assert!(
        md.get("brokers").is_some(),
        "the broker serves after the fuzzing: {md}"
    );
    let tls = sasl_conf(dir, ports.sasls, true, "PLAIN", "admin", "admin-secret");
    let md = python_client(&python, json!({"conf": tls, "action": "metadata"}));
    assert!(md.get("brokers").is_some(), "{md}");
}

/// Connections per port of the TLS fuzz.
const TLS_FUZZ_ROUNDS: usize = 300;

/// A rustls client trusting `ca` (the broker's certificate names 127.0.0.1).
fn tls_client_config(ca: &Path) -> std::sync::Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("ca.pem") {
        roots.add(cert.expect("a CA certificate")).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    std::sync::Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

fn tls_client(config: &std::sync::Arc<rustls::ClientConfig>) -> rustls::ClientConnection {
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    rustls::ClientConnection::new(config.clone(), name).unwrap()
}

fn random_bytes<R: Rng>(rng: &mut R, max: usize) -> Vec<u8> {
    (0..rng.gen_range(1..max)).map(|_| rng.gen()).collect()
}

/// `rounds` fuzzed connections to the TLS listener on `port`: truncated and mutated ClientHello
/// records, records with random bodies and lengths, random bytes after a valid ClientHello, and,
/// after a completed handshake, random raw bytes (not TLS records) or random bytes inside
/// application-data records (random Kafka frames). Each connection ends with the write side shut
/// and whatever the broker sends read until it closes or 2 s pass. Panics only on the setup.
fn fuzz_tls<R: Rng>(
    port: u16,
    config: &std::sync::Arc<rustls::ClientConfig>,
    rng: &mut R,
    rounds: usize,
) {
    // One real ClientHello (its randoms are rustls's; the mutations are the seed's).
    let mut hello = Vec::new();
    tls_client(config).write_tls(&mut hello).unwrap();
    assert_eq!(hello[0], 0x16, "a handshake record");
    let mut handshakes = 0;
    for i in 0..rounds {
        let mut s = connect(port);
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let payload: Vec<u8> = match i % 6 {
            0 => hello[..rng.gen_range(1..hello.len())].to_vec(),
            1 => {
                let mut v = hello.clone();
                for _ in 0..rng.gen_range(1..6) {
                    let at = rng.gen_range(0..v.len());
                    v[at] = rng.gen();
                }
                v
            }
            2 => {
                // A record header of any type and version with a random length and body.
                let mut v = vec![
                    [0x14u8, 0x15, 0x16, 0x17, rng.gen()][rng.gen_range(0..5)],
                    3,
                    rng.gen_range(0..5),
                ];
                v.extend(rng.gen::<u16>().to_be_bytes());
                v.extend(random_bytes(rng, 300));
                v
            }
            3 => {
                let mut v = hello.clone();
                v.extend(random_bytes(rng, 300));
                v
            }
            _ => {
                let mut tls = tls_client(config);
                let mut done = true;
                while tls.is_handshaking() {
                    if tls.complete_io(&mut s).is_err() {
                        done = false;
                        break;
                    }
                }
                assert!(
                    done,
                    "round {i}: a real TLS handshake with port {port} failed"
                );
                handshakes += 1;
                if i % 6 == 4 {
                    random_bytes(rng, 300)
                } else {
                    // Random frames inside TLS: a size prefix then junk.
                    let mut plain = (rng.gen_range(-8i32..4096)).to_be_bytes().to_vec();
                    plain.extend(random_bytes(rng, 200));
                    let _ = tls.writer().write_all(&plain);
                    let mut v = Vec::new();
                    let _ = tls.write_tls(&mut v);
                    v
                }
            }
        };
        let _ = s.write_all(&payload);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let _ = s.read_to_end(&mut Vec::new());
    }
    eprintln!("TLS fuzz on port {port}: {rounds} connections, {handshakes} completed handshakes");
}

/// Whether a new connection to `port` is served (ApiVersions answered) or refused.
fn served(port: u16) -> (bool, Option<TcpStream>) {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return (false, None);
    };
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    if s.write_all(&request(18, 0, 9, &[])).is_err() {
        return (false, None);
    }
    match read_frame(&mut s) {
        Some(_) => (true, Some(s)),
        None => (false, None),
    }
}

#[test]
fn connection_limits_refuse_the_extra_connection() {
    if against_kafka() {
        eprintln!("connection limits: Lockstep only (Kafka delays rather than closes)");
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("p18-limits")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    let (a, b, c) = (free_port(), free_port(), free_port());
    let config = dir.join("server.properties");
    std::fs::write(
        &config,
        format!(
            "listeners=A://127.0.0.1:{a},B://127.0.0.1:{b},C://127.0.0.1:{c}\n\
             listener.security.protocol.map=A:PLAINTEXT,B:PLAINTEXT,C:PLAINTEXT\n\
             log.dirs={}\n\
             max.connections.per.ip=3\n\
             listener.name.a.max.connections=2\n\
             listener.name.c.max.connection.creation.rate=2\n",
            dir.join("data").display()
        ),
    )
    .unwrap();
    let _broker = start_lockstep(&config);
    // Listener A: two connections, the third refused.
    let (ok1, a1) = served(a);
    let (ok2, a2) = served(a);
    assert!(ok1 && ok2);
    assert!(!served(a).0, "listener A is at max.connections=2");
    // Per IP: the third connection from 127.0.0.1 is served, the fourth refused.
    let (ok3, b1) = served(b);
    assert!(ok3);
    assert!(!served(b).0, "127.0.0.1 is at max.connections.per.ip=3");
    drop((a1, a2, b1));
    std::thread::sleep(Duration::from_millis(300));
    // Creation rate on C: two within a second, the third refused; a second later, served.
    let (ok4, c1) = served(c);
    let (ok5, c2) = served(c);
    assert!(ok4 && ok5);
    assert!(
        !served(c).0,
        "listener C is at max.connection.creation.rate=2"
    );
    drop((c1, c2));
    std::thread::sleep(Duration::from_millis(1100));
    assert!(served(c).0, "the rate window has passed");
    assert!(served(a).0, "closed connections free their slots");
}
