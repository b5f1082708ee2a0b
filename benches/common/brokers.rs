//! The brokers the benches measure, as child processes on loopback: the release `lockstep` binary
//! and Apache Kafka 4.4 (one KRaft node through `tools/kafka-reference.sh run`). One copy for every
//! bench (`broker`, `share`, `suite`).
//!
//! Invariants: a started broker is ready (Lockstep printed its readiness line; Kafka logged
//! "Kafka Server started" and accepts connections); each child dies with the bench
//! (PR_SET_PDEATHSIG) and is killed when its [`Broker`] is dropped, so no run leaves a broker
//! behind. Every wait is bounded (`LOCKSTEP_READY_WITHIN`, `KAFKA_READY_WITHIN`, the stop grace).
//!
//! Either broker can serve secured listeners beside its PLAINTEXT one ([`Secured`]): SSL
//! ([`Broker::tls_port`]) and optionally SASL_SSL with SCRAM-SHA-512 ([`Broker::sasl_ssl_port`];
//! users are added with AlterUserScramCredentials), the same PEM key store for both (private
//! key and certificate chain in one file, `ssl.keystore.type=PEM`), Lockstep through a
//! `--config` file, Kafka through `KAFKA_EXTRA_PROPS`, with the same property lines;
//! [`make_certificates`] makes a CA and a server certificate for 127.0.0.1 with the `openssl` CLI.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The line the `lockstep` binary prints on stdout once every shard listens.
pub const READY_PREFIX: &str = "lockstep ready:";
const LOCKSTEP_READY_WITHIN: Duration = Duration::from_secs(30);
const KAFKA_READY_WITHIN: Duration = Duration::from_secs(180);
const LOCKSTEP_STOP_WITHIN: Duration = Duration::from_secs(20);
const KAFKA_STOP_WITHIN: Duration = Duration::from_secs(60);
/// What `target/test-deps/kafka/libs/.installed` holds once the reference broker is installed.
const KAFKA_STAMP: &str = "kafka_2.13:4.4.0";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Lockstep,
    Kafka,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Lockstep => "lockstep",
            Kind::Kafka => "kafka",
        }
    }
}

/// How to start Lockstep.
#[derive(Clone, Copy, Debug, Default)]
pub struct LockstepOptions {
    /// `--shards`; `None`: one per available core.
    pub shards: Option<usize>,
    /// Serve Prometheus metrics on a free loopback port (`Broker::metrics_port`).
    pub metrics: bool,
}

pub struct Broker {
    pub kind: Kind,
    child: Option<Child>,
    /// The PLAINTEXT listener.
    pub port: u16,
    /// The SSL listener, when started with a key store.
    pub tls_port: Option<u16>,
    /// The SASL_SSL (SCRAM-SHA-512) listener, when asked for.
    pub sasl_ssl_port: Option<u16>,
    /// Lockstep's Prometheus endpoint, when asked for.
    pub metrics_port: Option<u16>,
    /// Lockstep's shard count (0 for Kafka).
    pub shards: usize,
}

/// Secured listeners a broker serves beside its PLAINTEXT one.
#[derive(Clone, Copy, Debug)]
pub struct Secured<'a> {
    /// The server's PEM key store: private key and certificate chain.
    pub keystore: &'a Path,
    /// Also a SASL_SSL listener with SCRAM-SHA-512.
    pub sasl_scram: bool,
}

/// The listener name of the SASL_SSL listener (mapped to SASL_SSL).
const SASL_SSL_LISTENER: &str = "SASLS";

/// The `listeners` entries of `secured` on `tls` / `sasl` and the lines both brokers get for
/// them (the map without the controller, which Kafka adds).
fn secured_props(secured: &Secured<'_>, tls: u16, sasl: Option<u16>) -> (String, String, String) {
    let mut listeners = format!("SSL://127.0.0.1:{tls}");
    let mut map = "PLAINTEXT:PLAINTEXT,SSL:SSL".to_string();
    let mut lines = format!(
        "ssl.keystore.type=PEM\nssl.keystore.location={}\n",
        secured.keystore.display()
    );
    if let Some(sasl) = sasl {
        listeners += &format!(",{SASL_SSL_LISTENER}://127.0.0.1:{sasl}");
        map += &format!(",{SASL_SSL_LISTENER}:SASL_SSL");
        lines += &format!(
            "sasl.enabled.mechanisms=SCRAM-SHA-512\n\
             listener.name.{}.scram-sha-512.sasl.jaas.config=\
             org.apache.kafka.common.security.scram.ScramLoginModule required;\n",
            SASL_SSL_LISTENER.to_lowercase()
        );
    }
    (listeners, map, lines)
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The child is killed if this process dies (PR_SET_PDEATHSIG), so a crashed or interrupted
/// bench leaves no broker behind.
pub fn die_with_parent(command: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec and only calls prctl(2),
    // which is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Broker {
    /// `host:port` for clients.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// `host:port` of the SSL listener.
    pub fn tls_bootstrap(&self) -> Option<String> {
        self.tls_port.map(|p| format!("127.0.0.1:{p}"))
    }

    /// `host:port` of the SASL_SSL listener.
    pub fn sasl_ssl_bootstrap(&self) -> Option<String> {
        self.sasl_ssl_port.map(|p| format!("127.0.0.1:{p}"))
    }

    /// Starts the release `lockstep` binary with its data in `dir/data`.
    pub fn start_lockstep(dir: &Path, options: LockstepOptions) -> Result<Broker, String> {
        Broker::start_lockstep_with(dir, options, None)
    }

    /// [`start_lockstep`](Self::start_lockstep), and with `secured` its secured listeners on
    /// more free ports, configured through a Kafka-style `dir/server.properties`.
    pub fn start_lockstep_with(
        dir: &Path,
        options: LockstepOptions,
        secured: Option<Secured<'_>>,
    ) -> Result<Broker, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let port = free_port();
        let tls_port = secured.map(|_| free_port());
        let sasl_ssl_port = secured.filter(|s| s.sasl_scram).map(|_| free_port());
        let shards = options.shards.unwrap_or_else(cores);
        let metrics_port = options.metrics.then(free_port);
        // `LOCKSTEP_BROKER_BIN` runs another build (an A/B of two engines in one bench build).
        let binary = std::env::var_os("LOCKSTEP_BROKER_BIN")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_lockstep").into());
        let mut command = Command::new(&binary);
        match (secured, tls_port) {
            (Some(secured), Some(tls)) => {
                let config = dir.join("server.properties");
                let (listeners, map, lines) = secured_props(&secured, tls, sasl_ssl_port);
                std::fs::write(
                    &config,
                    format!(
                        "listeners=PLAINTEXT://127.0.0.1:{port},{listeners}\n\
                         listener.security.protocol.map={map}\n{lines}"
                    ),
                )
                .map_err(|e| format!("{}: {e}", config.display()))?;
                command.arg("--config").arg(&config);
            }
            _ => {
                command.args(["--listen", &format!("127.0.0.1:{port}")]);
            }
        }
        command
            .args(["--shards", &shards.to_string()])
            // Classic groups assign at once, as on the Kafka the benches start (its test
            // configuration); the rebalance bench measures the protocol, not the wait.
            .args(["--override", "group.initial.rebalance.delay.ms=0"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(m) = metrics_port {
            command.args(["--metrics-listen", &format!("127.0.0.1:{m}")]);
        }
        die_with_parent(&mut command);
        let mut child = command
            .spawn()
            .map_err(|e| format!("starting {}: {e}", binary.display()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.starts_with(READY_PREFIX) {
                    let _ = tx.send(line);
                }
            }
        });
        let mut broker = Broker {
            kind: Kind::Lockstep,
            child: Some(child),
            port,
            tls_port,
            sasl_ssl_port,
            metrics_port,
            shards,
        };
        match rx.recv_timeout(LOCKSTEP_READY_WITHIN) {
            Ok(_) => Ok(broker),
            Err(_) => {
                let status = broker
                    .child
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten());
                Err(format!(
                    "lockstep printed no readiness line within {} s (exit: {status:?})",
                    LOCKSTEP_READY_WITHIN.as_secs()
                ))
            }
        }
    }

    /// Starts Kafka 4.4 in `dir` (formatted on first start); `extra_props` are extra
    /// `server.properties` lines (`KAFKA_EXTRA_PROPS`). Its output goes to `dir/kafka.out`.
    pub fn start_kafka(dir: &Path, extra_props: &str) -> Result<Broker, String> {
        Broker::start_kafka_with(dir, extra_props, None)
    }

    /// [`start_kafka`](Self::start_kafka), and with `secured` (as for Lockstep) its secured
    /// listeners beside the PLAINTEXT one the script needs (`listeners` with the controller's
    /// port, which the bench then chooses: `KAFKA_CONTROLLER_PORT`).
    pub fn start_kafka_with(
        dir: &Path,
        extra_props: &str,
        secured: Option<Secured<'_>>,
    ) -> Result<Broker, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let port = free_port();
        let tls_port = secured.map(|_| free_port());
        let sasl_ssl_port = secured.filter(|s| s.sasl_scram).map(|_| free_port());
        let controller_port = free_port();
        let mut props = extra_props.to_string();
        if let (Some(secured), Some(tls)) = (secured, tls_port) {
            let (listeners, map, lines) = secured_props(&secured, tls, sasl_ssl_port);
            // Later lines win in a properties file: these replace the script's listeners.
            props.push_str(&format!(
                "\nlisteners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port},{listeners}\n\
                 advertised.listeners=PLAINTEXT://127.0.0.1:{port},{listeners}\n\
                 listener.security.protocol.map=CONTROLLER:PLAINTEXT,{map}\n{lines}"
            ));
        }
        let out_path = dir.join("kafka.out");
        let out = std::fs::File::create(&out_path).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        // `run` execs the JVM, so the child is Kafka itself (its CPU time is Kafka's).
        let mut command = Command::new(kafka_script());
        command
            .arg("run")
            .arg(dir.join("kafka"))
            .arg(port.to_string())
            .env("KAFKA_EXTRA_PROPS", &props)
            .env("KAFKA_CONTROLLER_PORT", controller_port.to_string())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        die_with_parent(&mut command);
        let child = command
            .spawn()
            .map_err(|e| format!("starting kafka-reference.sh run: {e}"))?;
        let mut broker = Broker {
            kind: Kind::Kafka,
            child: Some(child),
            port,
            tls_port,
            sasl_ssl_port,
            metrics_port: None,
            shards: 0,
        };
        let deadline = Instant::now() + KAFKA_READY_WITHIN;
        loop {
            if let Some(status) = broker.child.as_mut().unwrap().try_wait().ok().flatten() {
                return Err(format!(
                    "kafka exited during start-up ({status}); see {}",
                    out_path.display()
                ));
            }
            let started = std::fs::read_to_string(&out_path)
                .map(|s| s.contains("Kafka Server started"))
                .unwrap_or(false);
            if started && TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(broker);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "kafka did not start within {} s; see {}",
                    KAFKA_READY_WITHIN.as_secs(),
                    out_path.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// SIGTERM, then SIGKILL if it has not exited in time; the exit status.
    pub fn stop(mut self) -> Result<ExitStatus, String> {
        let within = match self.kind {
            Kind::Lockstep => LOCKSTEP_STOP_WITHIN,
            Kind::Kafka => KAFKA_STOP_WITHIN,
        };
        let mut child = self.child.take().expect("running");
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + within;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "broker did not exit within {} s of SIGTERM; killed",
                        within.as_secs()
                    ));
                }
            }
        }
    }

    /// [`stop`](Self::stop), and for Lockstep an error unless it exited 0.
    pub fn stop_clean(self) -> Result<(), String> {
        let kind = self.kind;
        let status = self.stop()?;
        if kind == Kind::Lockstep && !status.success() {
            return Err(format!("lockstep exited with {status} after SIGTERM"));
        }
        Ok(())
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn kafka_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/kafka-reference.sh")
}

/// Ok if the Kafka 4.4 reference broker is installed (fetching it if needed).
pub fn kafka_available() -> Result<(), String> {
    let stamp =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps/kafka/libs/.installed");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == KAFKA_STAMP) {
        return Ok(());
    }
    let output = Command::new(kafka_script())
        .arg("fetch")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run tools/kafka-reference.sh fetch: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or("").to_string();
        Err(format!("tools/kafka-reference.sh fetch failed: {last}"))
    }
}

/// A CA (`dir/ca.pem`, what a client's PEM trust store names) and a server certificate for
/// IP 127.0.0.1 and localhost signed by it, with its unencrypted PKCS#8 key, in one PEM key store
/// (`dir/server-keystore.pem`), made with the `openssl` CLI (EC P-256, valid 2 days). Returns the
/// key store's path.
pub fn make_certificates(dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let script = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
                  -keyout ca.key -out ca.pem -days 2 -subj /CN=lockstep-bench-ca\n\
                  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > server.ext\n\
                  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
                  -keyout server.key -out server.csr -subj /CN=localhost\n\
                  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
                  -days 2 -extfile server.ext -out server.pem\n\
                  cat server.key server.pem > server-keystore.pem";
    let out = Command::new("sh")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run sh for openssl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "openssl failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(dir.join("server-keystore.pem"))
}
