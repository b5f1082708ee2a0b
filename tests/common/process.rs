//! A `lockstep` broker child process for the tests that drive the binary itself
//! (`LOCKSTEP_BROKER_BIN` picks another binary): started on a free loopback port in a temporary
//! directory, its stdout and stderr
//! copied to `broker-N.log` there (N counts starts), ready once it printed its readiness line;
//! it can be waited for, SIGKILLed and restarted on the same data and port. SIGKILLed when
//! dropped, and when the test process dies (`die_with_parent`), so no broker outlives a test.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::{die_with_parent, free_port, BROKER_START_TIMEOUT};

/// The line the broker prints on stdout once every shard listens.
pub const READY_PREFIX: &str = "lockstep ready:";

pub struct Lockstep {
    child: Option<Child>,
    pub port: u16,
    pub shards: u32,
    dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
    starts: u32,
    /// When the last start printed its readiness line.
    pub ready_at: Instant,
}

impl Lockstep {
    /// Starts `lockstep --shards SHARDS EXTRA…` in a new temporary directory named with
    /// `prefix`, and waits until it is ready.
    pub fn start(prefix: &str, shards: u32, extra: &[&str]) -> Lockstep {
        let temp = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .expect("temporary directory");
        let dir = temp.path().to_path_buf();
        let mut broker = Lockstep {
            child: None,
            port: free_port(),
            shards,
            dir,
            _temp: Some(temp),
            starts: 0,
            ready_at: Instant::now(),
        };
        broker.spawn(extra);
        broker
    }

    /// `host:port` of the broker.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker's data directory (`DIR/data`).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log_path(&self, start: u32) -> PathBuf {
        self.dir.join(format!("broker-{start}.log"))
    }

    /// Starts the broker again (after it exited or was killed) on the same data and port.
    pub fn spawn(&mut self, extra: &[&str]) {
        assert!(self.child.is_none(), "the broker is running");
        self.starts += 1;
        let mut cmd = Command::new(binary());
        cmd.args(super::LOCKSTEP_TEST_ARGS)
            .arg("--listen")
            .arg(self.addr())
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--shards")
            .arg(self.shards.to_string())
            .args(extra);
        let mut child = die_with_parent(&mut cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the broker");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(self.starts))
            .expect("broker log file");
        let log2 = log.try_clone().expect("broker log file");
        let (tx, rx) = mpsc::channel();
        let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        thread::spawn(move || copy_lines(out, log, Some(tx)));
        thread::spawn(move || copy_lines(err, log2, None));
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if rx.try_recv().is_ok() {
                self.ready_at = Instant::now();
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "broker exited during start-up ({status}):\n{}",
                    self.log_tail()
                );
            }
            assert!(
                started.elapsed() < BROKER_START_TIMEOUT,
                "broker not ready within {BROKER_START_TIMEOUT:?}:\n{}",
                self.log_tail()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Panics with the log tail if the broker has exited.
    pub fn assert_alive(&mut self) {
        let child = self.child.as_mut().expect("the broker was started");
        if let Some(status) = child.try_wait().unwrap() {
            panic!("broker exited ({status}):\n{}", self.log_tail());
        }
    }

    /// SIGKILLs the broker and starts it again on the same data and port, without extra flags.
    pub fn sigkill_and_restart(&mut self) {
        self.kill();
        self.spawn(&[]);
    }

    /// Waits up to `within` for the broker to exit; its status, or `None` if it still runs.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            let child = self.child.as_mut().expect("the broker was started");
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Sends `signal` to the running broker.
    pub fn signal(&self, signal: i32) {
        let pid = self.child.as_ref().expect("the broker runs").id();
        // SAFETY: kill(2) with the pid of a child we spawned and have not reaped.
        assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
    }

    /// SIGKILLs the broker (if it runs) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The last 40 lines of every start's log.
    pub fn log_tail(&self) -> String {
        let mut text = String::new();
        for start in 1..=self.starts {
            let _ = File::open(self.log_path(start)).and_then(|mut f| f.read_to_string(&mut text));
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// The whole log of start `start` (1 is the first).
    pub fn log(&self, start: u32) -> String {
        std::fs::read_to_string(self.log_path(start)).unwrap_or_default()
    }
}

impl Drop for Lockstep {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("broker log tail:\n{}", self.log_tail());
        }
        self.kill();
    }
}

/// The broker binary: `LOCKSTEP_BROKER_BIN` if set, else the one cargo built for this test.
pub fn binary() -> PathBuf {
    std::env::var_os("LOCKSTEP_BROKER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_lockstep")))
}

fn copy_lines(src: impl Read, mut log: File, mut ready: Option<mpsc::Sender<()>>) {
    for line in BufReader::new(src).lines() {
        let Ok(line) = line else { break };
        let _ = writeln!(log, "{line}");
        if line.starts_with(READY_PREFIX) {
            if let Some(tx) = ready.take() {
                let _ = tx.send(());
            }
        }
    }
}
