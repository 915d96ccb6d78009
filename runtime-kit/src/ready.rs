//! Readiness: the moment a process has finished its start-up (attached,
//! bound, dropped privileges) and can do its work.
//!
//! Under the `ringtail` supervisor the child gets a pipe's write end in
//! `RINGTAIL_READY_FD`; under systemd (`Type=notify`) it gets
//! `NOTIFY_SOCKET`. Both are told; neither is required.

use std::io::Write;
use std::os::fd::FromRawFd;

/// The environment variable naming the supervisor's status pipe.
pub const READY_FD_ENV: &str = "RINGTAIL_READY_FD";

/// Reports readiness to whoever started us, then logs it.
pub fn notify_ready(component: &str) {
    if let Some(fd) = std::env::var(READY_FD_ENV).ok().and_then(|v| v.parse::<i32>().ok()) {
        if fd > 2 {
            // SAFETY: the supervisor passed this fd for us alone; we take
            // ownership and close it after one write.
            let mut pipe = unsafe { std::fs::File::from_raw_fd(fd) };
            if let Err(error) = pipe.write_all(b"ready\n") {
                tracing::warn!(%error, "could not report readiness to the supervisor");
            }
        }
        // Children of this process must not inherit a stale fd number.
        std::env::remove_var(READY_FD_ENV);
    }
    if let Ok(path) = std::env::var("NOTIFY_SOCKET") {
        if let Err(error) = sd_notify(&path, "READY=1") {
            tracing::warn!(%error, "could not notify systemd");
        }
    }
    tracing::info!(component, event = "ready", "ready");
}

fn sd_notify(path: &str, msg: &str) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let sock = UnixDatagram::unbound()?;
    let addr = match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
        None => SocketAddr::from_pathname(path)?,
    };
    sock.send_to_addr(msg.as_bytes(), &addr)?;
    Ok(())
}
