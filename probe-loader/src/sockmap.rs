//! What a socket map does to the sockets in it, tried on this kernel
//! (`probe.propagate`): a socket in a sockhash gets the kernel's tcp_bpf
//! socket calls, and kernels with commit 929e30f93125 ("bpf, sockmap: Fix
//! FIONREAD for sockmap": Linux 6.6.128+, 6.12.75+, 6.18.14+, 6.19+, until
//! its fix) answer `ioctl(FIONREAD)` on it from the map's own queue, which
//! holds nothing for a socket that only has an sk_msg program: 0, whatever
//! TCP has queued. nginx, Java and .NET size reads with it and then wait
//! for data that is already there. So, by trying it, never by version:
//! a sockhash of our own (no program), a loopback connection of our own in
//! it, bytes sent to it, and FIONREAD asked.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use ringtail_config::probe::KeepAlive;

/// What FIONREAD says of a socket in a socket map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fionread {
    /// The bytes TCP holds, as for any socket.
    Right,
    /// 0 while TCP holds bytes.
    ReadsZero,
}

/// Bytes the probe sends.
const PROBE_BYTES: usize = 100;

/// Tries FIONREAD on a loopback socket in a sockhash (needs what creating
/// a sockhash needs: CAP_BPF and CAP_NET_ADMIN, or CAP_SYS_ADMIN).
pub fn fionread_in_socket_map() -> Result<Fionread, String> {
    let map = sockhash().map_err(|e| format!("cannot create a sockhash: {e}"))?;
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("loopback listener: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("loopback listener: {e}"))?;
    let member = TcpStream::connect(addr).map_err(|e| format!("loopback connection: {e}"))?;
    let (mut peer, _) = listener.accept().map_err(|e| format!("loopback accept: {e}"))?;
    insert(&map, &member).map_err(|e| format!("cannot put a socket in a sockhash: {e}"))?;
    peer.write_all(&[b'x'; PROBE_BYTES]).map_err(|e| format!("loopback send: {e}"))?;
    // until the bytes are there (loopback: at once)
    let mut fds = libc::pollfd { fd: member.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, its count passed.
    let ready = unsafe { libc::poll(&mut fds, 1, 2000) };
    if ready != 1 {
        return Err("the loopback bytes never arrived".into());
    }
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer given.
    if unsafe { libc::ioctl(member.as_raw_fd(), libc::FIONREAD, &mut n) } != 0 {
        return Err(format!("FIONREAD: {}", std::io::Error::last_os_error()));
    }
    // what it says once the socket is out of the map (closing the map
    // takes it out): the bytes are really there
    drop(map);
    let mut buf = [0u8; PROBE_BYTES];
    let mut member = member;
    member.set_read_timeout(Some(Duration::from_secs(2))).map_err(|e| format!("loopback: {e}"))?;
    member.read_exact(&mut buf).map_err(|e| format!("loopback read: {e}"))?;
    Ok(if n == 0 { Fionread::ReadsZero } else { Fionread::Right })
}

/// Whether connections stay in the socket map after their first request
/// (`probe.propagate_keep_alive`), and why, for the log.
pub fn keep_alive(setting: KeepAlive, write_seq_known: bool) -> (bool, String) {
    if !write_seq_known {
        return (false, "struct tcp_sock's write_seq is not in the kernel's BTF: requests cannot be framed".into());
    }
    match setting {
        KeepAlive::Always => (true, "probe.propagate_keep_alive = \"always\"".into()),
        KeepAlive::Never => (false, "probe.propagate_keep_alive = \"never\"".into()),
        KeepAlive::Auto => match fionread_in_socket_map() {
            Ok(Fionread::Right) => (true, "FIONREAD is right for a socket in a socket map".into()),
            Ok(Fionread::ReadsZero) => {
                (false, "FIONREAD reads 0 for a socket in a socket map on this kernel (kernel commit 929e30f93125)".into())
            }
            Err(e) => (false, format!("FIONREAD in a socket map could not be tried ({e})")),
        },
    }
}

/// A sockhash of one entry (u64 keys, u32 fd values).
fn sockhash() -> std::io::Result<OwnedFd> {
    // union bpf_attr for BPF_MAP_CREATE: map_type, key_size, value_size,
    // max_entries (then zeros).
    let mut attr = [0u32; 32];
    attr[0] = 18; // BPF_MAP_TYPE_SOCKHASH
    attr[1] = 8;
    attr[2] = 4;
    attr[3] = 1;
    // SAFETY: attr is a zero-padded bpf_attr of the size passed.
    let fd = unsafe {
        libc::syscall(libc::SYS_bpf, 0 /* BPF_MAP_CREATE */, attr.as_ptr(), std::mem::size_of_val(&attr))
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a non-negative return is a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Puts `sock` in `map` (key 1).
fn insert(map: &OwnedFd, sock: &TcpStream) -> std::io::Result<()> {
    let key: u64 = 1;
    let value: u32 = sock.as_raw_fd() as u32;
    // union bpf_attr for BPF_MAP_UPDATE_ELEM: map_fd (u32, padded to 8),
    // key (u64 pointer), value (u64 pointer), flags (u64).
    let mut attr = [0u64; 16];
    attr[0] = map.as_raw_fd() as u64;
    attr[1] = &key as *const u64 as u64;
    attr[2] = &value as *const u32 as u64;
    // SAFETY: attr is a zero-padded bpf_attr of the size passed; key and
    // value outlive the call.
    let r = unsafe {
        libc::syscall(libc::SYS_bpf, 2 /* BPF_MAP_UPDATE_ELEM */, attr.as_ptr(), std::mem::size_of_val(&attr))
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_do_not_ask_the_kernel() {
        assert!(keep_alive(KeepAlive::Always, true).0);
        assert!(!keep_alive(KeepAlive::Never, true).0);
        assert!(!keep_alive(KeepAlive::Always, false).0, "no framing without write_seq");
    }
}
