//! The service manager's readiness protocol (systemd's `sd_notify`, `Type=notify` units).
//!
//! When the broker runs under a service manager that set `NOTIFY_SOCKET`, it sends `READY=1`
//! once every shard listens (after recovery) and `STOPPING=1` when a shutdown signal arrives, as
//! datagrams on that Unix socket (a path, or an abstract name written with a leading `@`).
//! Without `NOTIFY_SOCKET` nothing is sent. A failure to notify is logged, never fatal: the
//! broker serves either way, and the manager's start timeout reports a broker that never said
//! it was ready.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The environment variable naming the service manager's socket.
pub const NOTIFY_SOCKET_ENV: &str = "NOTIFY_SOCKET";

fn socket_addr(name: &str) -> io::Result<SocketAddr> {
    match name.strip_prefix('@') {
        Some(abstract_name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(abstract_name.as_bytes())
        }
        None => SocketAddr::from_pathname(name),
    }
}

/// Sends `state` (newline-separated `KEY=VALUE` lines) to the service manager, if there is one.
/// Returns whether a message was sent.
pub fn notify(state: &str) -> io::Result<bool> {
    let Some(name) = std::env::var_os(NOTIFY_SOCKET_ENV) else {
        return Ok(false);
    };
    let name = name
        .into_string()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NOTIFY_SOCKET is not UTF-8"))?;
    let addr = socket_addr(&name)?;
    let socket = UnixDatagram::unbound()?;
    socket.send_to_addr(state.as_bytes(), &addr)?;
    Ok(true)
}

/// [`notify`], logging a failure instead of returning it.
pub fn notify_or_log(state: &str) {
    if let Err(error) = notify(state) {
        tracing::warn!(%error, state, "cannot notify the service manager");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_and_abstract_socket_names() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        let addr = socket_addr(path.to_str().unwrap()).unwrap();
        UnixDatagram::unbound()
            .unwrap()
            .send_to_addr(b"READY=1", &addr)
            .unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let abstract_addr = socket_addr("@lockstep-notify-test").unwrap();
        use std::os::linux::net::SocketAddrExt;
        assert_eq!(
            abstract_addr.as_abstract_name(),
            Some(&b"lockstep-notify-test"[..])
        );
    }
}
