//! The authorizer and ACLs, end to end.
//!
//! One broker with an SSL listener (`ssl.client.auth=required`) and Kafka's StandardAuthorizer
//! name, `super.users=User:CN=admin`. Three client certificates (made by the `openssl` CLI):
//! `CN=admin` (a super user), `CN=alice` and `CN=bob`. ACLs are managed with Kafka 4.4's own
//! `kafka-acls` (org.apache.kafka.tools.AclCommand, through `tools/kafka-reference.sh class`) as the
//! admin; clients are librdkafka (`tests/clients/python/acl_client.py`).
//!
//! Checked: without ACLs alice gets TOPIC_AUTHORIZATION_FAILED on produce and
//! GROUP_AUTHORIZATION_FAILED on share-consume; with DESCRIBE only, TOPIC_AUTHORIZATION_FAILED on
//! fetch and produce; after `--add` each works; the authorized operations of DescribeCluster,
//! Metadata and DescribeGroups are hers (and every one for the super user); a PREFIXED ACL lets bob
//! write every topic under its prefix and nothing else; a DENY beats an ALLOW; `--list` shows the
//! ACLs; they survive a restart; `--remove` takes one away.
//!
//! ```text
//! cargo test --release --test acl
//! LOCKSTEP_INTEROP_TARGET=kafka cargo test --release --test acl   # the same against Kafka 4.4
//! ```
//! Against Kafka the test starts a private Kafka 4.4 (tools/kafka-reference.sh with
//! KAFKA_EXTRA_PROPS: an SSL listener beside the PLAINTEXT one the script needs, the
//! StandardAuthorizer, `super.users=User:CN=admin;User:ANONYMOUS` for its own PLAINTEXT and
//! controller connections), never the shared one.

mod common;

use common::{check_deps, die_with_parent, free_port, sh, ROOT};
use serde_json::{json, Value};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

const AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// A CA, a server certificate for 127.0.0.1/localhost, client certificates CN=admin, CN=alice,
/// CN=bob; EC P-256, unencrypted PKCS#8 keys; `NAME-keystore.pem` = key + certificate.
fn make_certificates(dir: &Path) {
    sh(
        dir,
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
         -out ca.pem -days 2 -subj /CN=p18acl-ca\n\
         printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > server.ext\n\
         printf 'extendedKeyUsage=clientAuth\\n' > client.ext\n\
         for who in server admin alice bob; do\n\
           if [ $who = server ]; then subj=/CN=localhost; ext=server.ext; else subj=/CN=$who; ext=client.ext; fi\n\
           openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $who.key \
             -out $who.csr -subj $subj\n\
           openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
             -extfile $ext -out $who.pem\n\
           cat $who.key $who.pem > $who-keystore.pem\n\
         done",
    );
}

enum Target {
    Lockstep,
    Kafka,
}

/// The broker under test, reached on its SSL port.
struct Broker {
    target: Target,
    dir: PathBuf,
    ssl: u16,
    /// Lockstep: its process and config file.
    child: Option<Child>,
    config: PathBuf,
    /// Kafka: its directory for tools/kafka-reference.sh stop.
    kafka_dir: Option<PathBuf>,
}

impl Broker {
    fn start(dir: &Path) -> Broker {
        let ssl = free_port();
        let target = match std::env::var("LOCKSTEP_INTEROP_TARGET").as_deref() {
            Ok("kafka") => Target::Kafka,
            _ => Target::Lockstep,
        };
        let d = |n: &str| dir.join(n).display().to_string();
        let tls = format!(
            "ssl.keystore.type=PEM\n\
             ssl.keystore.location={}\n\
             ssl.truststore.type=PEM\n\
             ssl.truststore.location={}\n\
             ssl.client.auth=required\n\
             authorizer.class.name={AUTHORIZER}\n",
            d("server-keystore.pem"),
            d("ca.pem")
        );
        let mut broker = Broker {
            target,
            dir: dir.to_path_buf(),
            ssl,
            child: None,
            config: dir.join("server.properties"),
            kafka_dir: None,
        };
        match broker.target {
            Target::Lockstep => {
                std::fs::write(
                    &broker.config,
                    format!(
                        "listeners=SSL://127.0.0.1:{ssl}\n\
                         log.dirs={}\n\
                         super.users=User:CN=admin\n{tls}",
                        d("data")
                    ),
                )
                .unwrap();
                broker.child = Some(spawn_lockstep(&broker.config));
            }
            Target::Kafka => {
                let (port, cport) = (free_port(), free_port());
                let kdir = PathBuf::from(format!(
                    "{ROOT}/target/acl-kafka/{}-{port}",
                    std::process::id()
                ));
                let _ = std::fs::remove_dir_all(&kdir);
                let extra = format!(
                    "listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport},SSL://127.0.0.1:{ssl}\n\
                     advertised.listeners=PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl}\n\
                     listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL\n\
                     super.users=User:CN=admin;User:ANONYMOUS\n{tls}"
                );
                let t0 = Instant::now();
                let st = Command::new(format!("{ROOT}/tools/kafka-reference.sh"))
                    .arg("start")
                    .arg(&kdir)
                    .arg(port.to_string())
                    .env("KAFKA_CONTROLLER_PORT", cport.to_string())
                    .env("KAFKA_EXTRA_PROPS", extra)
                    .status()
                    .expect("run tools/kafka-reference.sh");
                assert!(st.success(), "tools/kafka-reference.sh start failed");
                eprintln!("kafka started in {:.1} s", t0.elapsed().as_secs_f64());
                broker.kafka_dir = Some(kdir);
            }
        }
        broker
    }

    /// Stops and starts the broker on the same data (Lockstep: SIGKILL, so only what was
    /// durable survives; Kafka: clean stop and start).
    fn restart(&mut self) {
        match self.target {
            Target::Lockstep => {
                if let Some(mut c) = self.child.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                self.child = Some(spawn_lockstep(&self.config));
            }
            Target::Kafka => {
                let kdir = self.kafka_dir.clone().expect("kafka dir");
                let port = std::fs::read_to_string(kdir.join("server.properties"))
                    .unwrap()
                    .lines()
                    .find_map(|l| l.strip_prefix("listeners=PLAINTEXT://127.0.0.1:"))
                    .and_then(|rest| rest.split(',').next())
                    .expect("the PLAINTEXT port")
                    .to_string();
                let script = format!("{ROOT}/tools/kafka-reference.sh");
                let st = Command::new(&script)
                    .arg("stop")
                    .arg(&kdir)
                    .status()
                    .unwrap();
                assert!(st.success());
                let st = Command::new(&script)
                    .arg("start")
                    .arg(&kdir)
                    .arg(&port)
                    .status()
                    .unwrap();
                assert!(st.success());
            }
        }
    }

    /// librdkafka settings of a client with `who`'s certificate.
    fn conf(&self, who: &str) -> Value {
        let d = |n: &str| self.dir.join(n).display().to_string();
        json!({
            "bootstrap.servers": format!("127.0.0.1:{}", self.ssl),
            "security.protocol": "SSL",
            "ssl.ca.location": d("ca.pem"),
            "ssl.certificate.location": d(&format!("{who}.pem")),
            "ssl.key.location": d(&format!("{who}.key")),
        })
    }

    /// Runs Kafka 4.4's kafka-acls (AclCommand) as the admin; returns its output.
    fn acls(&self, args: &[&str]) -> String {
        let props = self.dir.join("admin.properties");
        let d = |n: &str| self.dir.join(n).display().to_string();
        std::fs::write(
            &props,
            format!(
                "security.protocol=SSL\n\
                 ssl.truststore.type=PEM\n\
                 ssl.truststore.location={}\n\
                 ssl.keystore.type=PEM\n\
                 ssl.keystore.location={}\n",
                d("ca.pem"),
                d("admin-keystore.pem")
            ),
        )
        .unwrap();
        let bootstrap = format!("127.0.0.1:{}", self.ssl);
        let mut all = vec![
            "class",
            "org.apache.kafka.tools.AclCommand",
            "--bootstrap-server",
            &bootstrap,
            "--command-config",
        ];
        let props_s = props.display().to_string();
        all.push(&props_s);
        all.extend(args);
        let out = die_with_parent(&mut Command::new(format!(
            "{ROOT}/tools/kafka-reference.sh"
        )))
        .args(&all)
        .stdin(Stdio::null())
        .output()
        .expect("run AclCommand");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        eprintln!("kafka-acls {args:?}:\n{text}");
        assert!(out.status.success(), "kafka-acls {args:?} failed: {text}");
        text
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(kdir) = &self.kafka_dir {
            let _ = Command::new(format!("{ROOT}/tools/kafka-reference.sh"))
                .arg("kill")
                .arg(kdir)
                .status();
            let _ = std::fs::remove_dir_all(kdir);
        }
    }
}

fn spawn_lockstep(config: &Path) -> Child {
    common::spawn_with_config(env!("CARGO_BIN_EXE_lockstep"), config)
}

fn client(python: &Path, request: Value) -> Value {
    let script = Path::new(ROOT).join("tests/clients/python/acl_client.py");
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
    eprintln!("{} {} -> {result}", request["action"], request["topic"]);
    result
}

fn errors(r: &Value) -> String {
    format!("{} {}", r["errors"], r["error"])
}

#[test]
fn acls_authorize_produce_fetch_and_share_consume() {
    let python = check_deps();
    let dir = tempfile::Builder::new()
        .prefix("p18-acl")
        .tempdir()
        .unwrap();
    make_certificates(dir.path());
    let mut broker = Broker::start(dir.path());
    let (t1, orders1, group) = ("p18acl-t1", "p18acl-orders-1", "p18acl-share");
    let admin = broker.conf("admin");
    let alice = broker.conf("alice");
    let bob = broker.conf("bob");

    // The super user may do anything without ACLs.
    for t in [t1, orders1] {
        let r = client(
            &python,
            json!({"conf": admin, "action": "create", "topic": t, "partitions": 2}),
        );
        assert_eq!(r["created"], true, "{r}");
    }
    let r = client(
        &python,
        json!({"conf": admin, "action": "produce", "topic": t1, "count": 20}),
    );
    assert_eq!(r["produced"], 20, "{r}");
    let r = client(
        &python,
        json!({"conf": admin, "action": "group_config", "group": group}),
    );
    assert_eq!(r["set"], true, "{r}");

    // Without ACLs alice may do nothing (allow.everyone.if.no.acl.found defaults to false).
    let r = client(
        &python,
        json!({"conf": alice, "action": "produce", "topic": t1, "count": 5}),
    );
    assert_eq!(r["produced"], 0, "{r}");
    assert!(errors(&r).contains("TOPIC_AUTHORIZATION_FAILED"), "{r}");
    let r = client(
        &python,
        json!({"conf": alice, "action": "share", "topic": t1, "group": group, "count": 20, "seconds": 15}),
    );
    assert_eq!(r["consumed"], 0, "{r}");
    assert!(errors(&r).contains("GROUP_AUTHORIZATION_FAILED"), "{r}");
    // DESCRIBE only: Metadata names the topic's leader, but Fetch and Produce are refused.
    broker.acls(&[
        "--add",
        "--allow-principal",
        "User:CN=alice",
        "--operation",
        "Describe",
        "--topic",
        t1,
    ]);
    let r = client(
        &python,
        json!({"conf": alice, "action": "consume", "topic": t1, "partitions": 2, "count": 20, "seconds": 15}),
    );
    assert_eq!(r["consumed"], 0, "{r}");
    assert!(errors(&r).contains("TOPIC_AUTHORIZATION_FAILED"), "{r}");
    let r = client(
        &python,
        json!({"conf": alice, "action": "produce", "topic": t1, "count": 5}),
    );
    assert_eq!(r["produced"], 0, "{r}");
    assert!(errors(&r).contains("TOPIC_AUTHORIZATION_FAILED"), "{r}");

    // ALLOW WRITE and READ on the topic: produce and fetch work.
    broker.acls(&[
        "--add",
        "--allow-principal",
        "User:CN=alice",
        "--operation",
        "Write",
        "--operation",
        "Read",
        "--topic",
        t1,
    ]);
    let r = client(
        &python,
        json!({"conf": alice, "action": "produce", "topic": t1, "count": 5}),
    );
    assert_eq!(r["produced"], 5, "{r}");
    let r = client(
        &python,
        json!({"conf": alice, "action": "consume", "topic": t1, "partitions": 2, "count": 25}),
    );
    assert_eq!(r["consumed"], 25, "{r}");
    // The share group still refuses her (GROUP READ missing); with it she share-consumes.
    let r = client(
        &python,
        json!({"conf": alice, "action": "share", "topic": t1, "group": group, "count": 25, "seconds": 15}),
    );
    assert_eq!(r["consumed"], 0, "{r}");
    assert!(errors(&r).contains("GROUP_AUTHORIZATION_FAILED"), "{r}");
    broker.acls(&[
        "--add",
        "--allow-principal",
        "User:CN=alice",
        "--operation",
        "Read",
        "--group",
        group,
    ]);
    let r = client(
        &python,
        json!({"conf": alice, "action": "share", "topic": t1, "group": group, "count": 25, "seconds": 30}),
    );
    assert_eq!(r["consumed"], 25, "{r}");

    // Authorized operations (KIP-430) are the principal's: alice's from her ACLs (READ and
    // WRITE imply DESCRIBE), every one for the super user.
    let r = client(
        &python,
        json!({"conf": alice, "action": "describe", "topic": t1, "group": group}),
    );
    assert_eq!(r["topic"], json!(["DESCRIBE", "READ", "WRITE"]), "{r}");
    assert_eq!(r["group"], json!(["DESCRIBE", "READ"]), "{r}");
    // No CLUSTER DESCRIBE: the field is 0 (the unit tests of `authorize` check the wire),
    // which librdkafka reports as no list at all.
    assert_eq!(r["cluster"], Value::Null, "{r}");
    let r = client(
        &python,
        json!({"conf": admin, "action": "describe", "topic": t1, "group": group}),
    );
    let every = |ops: &[&str]| json!(ops);
    assert_eq!(
        r["topic"],
        every(&[
            "ALTER",
            "ALTER_CONFIGS",
            "CREATE",
            "DELETE",
            "DESCRIBE",
            "DESCRIBE_CONFIGS",
            "READ",
            "WRITE"
        ]),
        "{r}"
    );
    assert_eq!(
        r["group"],
        every(&[
            "ALTER_CONFIGS",
            "DELETE",
            "DESCRIBE",
            "DESCRIBE_CONFIGS",
            "READ"
        ]),
        "{r}"
    );
    assert_eq!(
        r["cluster"],
        every(&[
            "ALTER",
            "ALTER_CONFIGS",
            "CLUSTER_ACTION",
            "CREATE",
            "DESCRIBE",
            "DESCRIBE_CONFIGS",
            "IDEMPOTENT_WRITE"
        ]),
        "{r}"
    );

    // PREFIXED: bob may write every p18acl-orders-* topic, and nothing else.
    broker.acls(&[
        "--add",
        "--allow-principal",
        "User:CN=bob",
        "--operation",
        "Write",
        "--topic",
        "p18acl-orders-",
        "--resource-pattern-type",
        "prefixed",
    ]);
    let r = client(
        &python,
        json!({"conf": bob, "action": "produce", "topic": orders1, "count": 5}),
    );
    assert_eq!(r["produced"], 5, "{r}");
    let r = client(
        &python,
        json!({"conf": bob, "action": "produce", "topic": t1, "count": 5}),
    );
    assert!(errors(&r).contains("TOPIC_AUTHORIZATION_FAILED"), "{r}");

    // DENY beats ALLOW.
    broker.acls(&[
        "--add",
        "--deny-principal",
        "User:CN=bob",
        "--operation",
        "Write",
        "--topic",
        orders1,
    ]);
    let r = client(
        &python,
        json!({"conf": bob, "action": "produce", "topic": orders1, "count": 5}),
    );
    assert_eq!(r["produced"], 0, "{r}");
    assert!(errors(&r).contains("TOPIC_AUTHORIZATION_FAILED"), "{r}");

    let listed = broker.acls(&["--list"]);
    for expected in ["User:CN=alice", "User:CN=bob", "PREFIXED", "DENY", group] {
        assert!(
            listed.contains(expected),
            "--list lacks {expected}: {listed}"
        );
    }
    let listed_bob = broker.acls(&["--list", "--principal", "User:CN=bob"]);
    assert!(!listed_bob.contains("User:CN=alice"), "{listed_bob}");

    // ACLs survive a restart.
    broker.restart();
    let after = broker.acls(&["--list"]);
    for expected in ["User:CN=alice", "User:CN=bob", "PREFIXED", "DENY", group] {
        assert!(
            after.contains(expected),
            "after restart --list lacks {expected}: {after}"
        );
    }
    let r = client(
        &python,
        json!({"conf": bob, "action": "produce", "topic": orders1, "count": 5}),
    );
    assert!(errors(&r).contains("TOPIC_AUTHORIZATION_FAILED"), "{r}");
    let r = client(
        &python,
        json!({"conf": alice, "action": "produce", "topic": t1, "count": 5}),
    );
    assert_eq!(r["produced"], 5, "{r}");

    // --remove the DENY: bob writes again.
    broker.acls(&[
        "--remove",
        "--force",
        "--deny-principal",
        "User:CN=bob",
        "--operation",
        "Write",
        "--topic",
        orders1,
    ]);
    let r = client(
        &python,
        json!({"conf": bob, "action": "produce", "topic": orders1, "count": 5}),
    );
    assert_eq!(r["produced"], 5, "{r}");
}
