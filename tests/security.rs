//! The configuration file, several listeners, TLS (rustls) with mutual TLS.
//!
//! One broker started from a `--config` file with two listeners: `PLAINTEXT` on one port
//! (advertising `localhost`) and `SSL` on another with `ssl.client.auth=required`, certificates
//! made by the `openssl` CLI at test time. Clients: librdkafka (confluent-kafka in
//! target/test-deps/venv, `tests/clients/python/security_client.py`) and Java (Kafka 4.4's
//! ProducerPerformance with PEM key and trust stores, `tools/kafka-reference.sh class`).
//!
//! With `LOCKSTEP_INTEROP_TARGET=kafka` the TLS scenario runs against a private Kafka 4.4
//! (`tools/kafka-reference.sh start` on free ports, the same listeners, certificates and TLS
//! settings, stopped at the end); the configuration-file checks (unknown keys, a bad value) are
//! Lockstep's own.
//!
//! ```text
//! cargo test --release --test security
//! ```

mod common;

use common::{check_deps, die_with_parent, free_port, sh, ROOT};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn against_kafka() -> bool {
    std::env::var("LOCKSTEP_INTEROP_TARGET").as_deref() == Ok("kafka")
}

/// The broker under test: Lockstep (a child) or a private Kafka 4.4 (its directory and port).
enum Running {
    Lockstep(Child),
    Kafka(PathBuf, u16),
}

impl Drop for Running {
    fn drop(&mut self) {
        match self {
            Running::Lockstep(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Running::Kafka(dir, port) => {
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

fn start(config: &Path) -> Running {
    Running::Lockstep(common::spawn_with_config(
        env!("CARGO_BIN_EXE_lockstep"),
        config,
    ))
}

/// A private Kafka 4.4 with the PLAINTEXT listener on `plain` and `extra` server.properties lines.
fn start_kafka(dir: &Path, plain: u16, extra: &str) -> Running {
    let cport = free_port();
    let kdir = dir.join("kafka");
    let status = Command::new(Path::new(ROOT).join("tools/kafka-reference.sh"))
        .arg("start")
        .arg(&kdir)
        .arg(plain.to_string())
        .env("KAFKA_CONTROLLER_PORT", cport.to_string())
        .env(
            "KAFKA_EXTRA_PROPS",
            extra.replace("{cport}", &cport.to_string()),
        )
        .status()
        .expect("run kafka-reference.sh start");
    assert!(status.success(), "Kafka 4.4 did not start");
    Running::Kafka(kdir, plain)
}

/// A CA, a server certificate for 127.0.0.1/localhost and a client certificate
/// (`CN=client,O=Lockstep`), EC P-256, unencrypted PKCS#8 keys.
fn make_certificates(dir: &Path) {
    sh(
        dir,
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
         -out ca.pem -days 2 -subj /CN=p18-test-ca\n\
         printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > server.ext\n\
         printf 'extendedKeyUsage=clientAuth\\n' > client.ext\n\
         for who in server client; do\n\
           if [ $who = server ]; then subj=/CN=localhost; else subj=/O=Lockstep/CN=client; fi\n\
           openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $who.key \
             -out $who.csr -subj $subj\n\
           openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
             -extfile $who.ext -out $who.pem\n\
           cat $who.key $who.pem > $who-keystore.pem\n\
         done",
    );
}

fn python_client(python: &Path, request: Value) -> Value {
    let script = Path::new(ROOT).join("tests/clients/python/security_client.py");
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
    eprintln!("{request} -> {result}");
    result
}

#[test]
fn config_file_two_listeners_and_mutual_tls() {
    let python = check_deps();
    let dir = tempfile::Builder::new()
        .prefix("p18-security")
        .tempdir()
        .unwrap();
    make_certificates(dir.path());
    let (plain, ssl) = (free_port(), free_port());
    let config = dir.path().join("server.properties");
    std::fs::write(
        &config,
        format!(
            "# a Kafka-style file\n\
             node.id=1\n\
             listeners=PLAINTEXT://127.0.0.1:{plain},SECURE://127.0.0.1:{ssl}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{plain}\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SECURE:SSL\n\
             log.dirs={data}\n\
             num.partitions=2\n\
             log.retention.hours=168\n\
             ssl.keystore.type=PEM\n\
             ssl.keystore.location=server-keystore.pem\n\
             ssl.client.auth=required\n\
             ssl.truststore.type=PEM\n\
             ssl.truststore.location=ca.pem\n\
             some.unknown.key=1\n",
            data = dir.path().join("data").display()
        ),
    )
    .unwrap();
    let d = |name: &str| dir.path().join(name).display().to_string();
    let _broker = if against_kafka() {
        // Kafka needs both listeners advertised (Lockstep advertises an unnamed one as it binds).
        start_kafka(
            dir.path(),
            plain,
            &format!(
                "listeners=PLAINTEXT://127.0.0.1:{plain},SECURE://127.0.0.1:{ssl},CONTROLLER://127.0.0.1:{{cport}}\n\
                 advertised.listeners=PLAINTEXT://127.0.0.1:{plain},SECURE://127.0.0.1:{ssl}\n\
                 listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SECURE:SSL\n\
                 num.partitions=2\n\
                 ssl.keystore.type=PEM\n\
                 ssl.keystore.location={}\n\
                 ssl.client.auth=required\n\
                 ssl.truststore.type=PEM\n\
                 ssl.truststore.location={}\n",
                d("server-keystore.pem"),
                d("ca.pem")
            ),
        )
    } else {
        start(&config)
    };
    let plain_conf = serde_json::json!({"bootstrap.servers": format!("127.0.0.1:{plain}")});
    let tls_conf = serde_json::json!({
        "bootstrap.servers": format!("127.0.0.1:{ssl}"),
        "security.protocol": "SSL",
        "ssl.ca.location": d("ca.pem"),
        "ssl.certificate.location": d("client.pem"),
        "ssl.key.location": d("client.key"),
    });

    // Metadata names the advertised address of the listener the client came through.
    let md = python_client(
        &python,
        serde_json::json!({"conf": plain_conf, "action": "metadata"}),
    );
    assert_eq!(
        md["brokers"],
        serde_json::json!([format!("127.0.0.1:{plain}")])
    );
    let md = python_client(
        &python,
        serde_json::json!({"conf": tls_conf, "action": "metadata"}),
    );
    assert_eq!(
        md["brokers"],
        serde_json::json!([format!("127.0.0.1:{ssl}")])
    );

    // librdkafka over TLS: create, produce, consume.
    let topic = "p18-tls";
    let r = python_client(
        &python,
        serde_json::json!({"conf": tls_conf, "action": "create", "topic": topic, "partitions": 2}),
    );
    assert_eq!(r["created"], true, "{r}");
    let r = python_client(
        &python,
        serde_json::json!({"conf": tls_conf, "action": "produce", "topic": topic, "count": 1000}),
    );
    assert_eq!(r["produced"], 1000, "{r}");

    // Java over TLS (PEM key and trust stores): Kafka's ProducerPerformance.
    let java = die_with_parent(&mut Command::new(
        Path::new(ROOT).join("tools/kafka-reference.sh"),
    ))
    .args([
        "class",
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        topic,
        "--num-records",
        "500",
        "--record-size",
        "100",
        "--throughput",
        "-1",
        "--producer-props",
        &format!("bootstrap.servers=127.0.0.1:{ssl}"),
        "security.protocol=SSL",
        "ssl.truststore.type=PEM",
        &format!("ssl.truststore.location={}", d("ca.pem")),
        "ssl.keystore.type=PEM",
        &format!("ssl.keystore.location={}", d("client-keystore.pem")),
        "acks=all",
    ])
    .stdin(Stdio::null())
    .output()
    .expect("run ProducerPerformance");
    let java_out =
        String::from_utf8_lossy(&java.stdout).to_string() + &String::from_utf8_lossy(&java.stderr);
    eprintln!("{java_out}");
    assert!(
        java_out.contains("500 records sent"),
        "Java producer over TLS: {java_out}"
    );
    let r = python_client(
        &python,
        serde_json::json!({"conf": tls_conf, "action": "consume", "topic": topic, "partitions": 2, "count": 1500}),
    );
    assert_eq!(r["consumed"], 1500, "{r}");
    // The same records through the plaintext listener.
    let r = python_client(
        &python,
        serde_json::json!({"conf": plain_conf, "action": "consume", "topic": topic, "partitions": 2, "count": 1500}),
    );
    assert_eq!(r["consumed"], 1500, "{r}");

    // A TLS client without a certificate is refused (ssl.client.auth=required).
    let mut no_cert = tls_conf.clone();
    no_cert
        .as_object_mut()
        .unwrap()
        .retain(|k, _| !k.starts_with("ssl.certificate") && !k.starts_with("ssl.key"));
    let r = python_client(
        &python,
        serde_json::json!({"conf": no_cert, "action": "metadata"}),
    );
    assert!(r.get("error").is_some(), "{r}");

    // A plaintext Kafka request on the TLS port gets no Kafka response (at most a TLS alert)
    // and the broker goes on serving.
    let mut raw = TcpStream::connect(("127.0.0.1", ssl)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut request = vec![0, 0, 0, 0];
    request.extend([0, 18, 0, 3, 0, 0, 0, 7, 0, 4]);
    request.extend(b"test");
    request.extend([0, 0, 0]);
    let size = (request.len() - 4) as u32;
    request[..4].copy_from_slice(&size.to_be_bytes());
    raw.write_all(&request).unwrap();
    let mut answer = Vec::new();
    let _ = raw.read_to_end(&mut answer);
    assert!(
        answer.is_empty() || answer[0] == 0x15,
        "plaintext client on the TLS port got {answer:?}"
    );
    for garbage in [
        &b"\x16\x03\x01\xff\xff"[..],
        &[0u8; 64][..],
        &b"GET / HTTP/1.0\r\n\r\n"[..],
    ] {
        let mut raw = TcpStream::connect(("127.0.0.1", ssl)).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let _ = raw.write_all(garbage);
        let _ = raw.read_to_end(&mut Vec::new());
    }
    let md = python_client(
        &python,
        serde_json::json!({"conf": tls_conf, "action": "metadata"}),
    );
    assert_eq!(
        md["brokers"],
        serde_json::json!([format!("127.0.0.1:{ssl}")])
    );
}

#[test]
fn bad_config_file_is_refused_with_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server.properties");
    std::fs::write(
        &config,
        "listeners=PLAINTEXT://127.0.0.1:1\nnum.partitions=none\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2: num.partitions"), "{err}");
}
