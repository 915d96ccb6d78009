//! A network namespace the test makes, joined to the host's by a veth pair
//! with an address at each end (10.254.0.0/16, a /30 per pair): another
//! address on this host, as a container on a bridge has. Removed on drop
//! (the namespace, and with it both ends of the pair). No traffic leaves
//! the host: the pair's ends are its only members.

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::{time_scale, wait_until};

/// A namespace and its veth pair.
pub struct VethNs {
    /// The namespace's name (`ip netns`).
    pub name: String,
    /// The host end's address.
    pub host_addr: String,
    /// The namespace end's address.
    pub ns_addr: String,
}

/// Runs `ip ARGS`; panics with its error output if it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).stdin(Stdio::null()).output().expect("run ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

impl VethNs {
    /// A new namespace with a veth pair up at both ends.
    pub fn create() -> VethNs {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // a /30 per pair: .1 the host's end, .2 the namespace's
        let (third, fourth) = (pid % 250, (n % 63) * 4);
        let tag = format!("rtj{}{n}", pid % 100_000);
        let ns = VethNs {
            name: tag.clone(),
            host_addr: format!("10.254.{third}.{}", fourth + 1),
            ns_addr: format!("10.254.{third}.{}", fourth + 2),
        };
        let (host_if, ns_if) = (format!("{tag}h"), format!("{tag}n"));
        let _ = Command::new("ip").args(["netns", "del", &tag]).stderr(Stdio::null()).status();
        ip(&["netns", "add", &tag]);
        ip(&["link", "add", &host_if, "type", "veth", "peer", "name", &ns_if]);
        ip(&["link", "set", &ns_if, "netns", &tag]);
        ip(&["addr", "add", &format!("{}/30", ns.host_addr), "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&["-n", &tag, "addr", "add", &format!("{}/30", ns.ns_addr), "dev", &ns_if]);
        ip(&["-n", &tag, "link", "set", &ns_if, "up"]);
        ip(&["-n", &tag, "link", "set", "lo", "up"]);
        ns
    }

    /// `program` to be run inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Whether something in the namespace accepts connections on `port` of
    /// its address within `timeout`.
    pub fn wait_port(&self, port: u16, timeout: Duration) -> bool {
        let addr = (self.ns_addr.as_str(), port);
        wait_until(timeout.mul_f64(time_scale()), || TcpStream::connect(addr).ok()).is_some()
    }
}

impl Drop for VethNs {
    fn drop(&mut self) {
        // deleting the namespace deletes its end of the pair, and the pair
        let _ = Command::new("ip").args(["netns", "del", &self.name]).stderr(Stdio::null()).status();
    }
}
