//! What ringtail and the kernel hold: Prometheus samples ([`scrape`],
//! [`metric_value`]), a process's resident memory, and the entries of a
//! kernel map.

use std::process::Command;

use crate::{http_get, Value};

/// GET a Prometheus endpoint's text.
pub fn scrape(port: u16) -> String {
    http_get(port, "/metrics", &[]).map(|r| String::from_utf8_lossy(&r.body).into_owned()).unwrap_or_default()
}

/// Sum of the samples of `name` whose labels contain every `label="value"`.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The sum of the samples of `name{labels}` at a Prometheus endpoint, or
/// `None` when the endpoint does not answer or has no such sample (so an
/// unreachable endpoint never reads as 0).
pub fn metric_value(port: u16, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let text = scrape(port);
    let present = text.lines().any(|l| {
        !l.starts_with('#')
            && (l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
            && labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
    });
    present.then(|| metric(&text, name, labels))
}

/// Resident memory of process `pid` (`VmRSS`), in kB.
pub fn resident_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).expect("VmRSS")
}

/// Connection records alive in the kernel (socket-local storage), as the
/// loader last reported them: the `ringtail_kernel_connections` gauge, +1
/// when a record is created and -1 when one is deleted.
pub fn kernel_connections(prom: u16) -> Option<f64> {
    metric_value(prom, "ringtail_kernel_connections", &[("component", "probe-loader")])
}

/// Entries in the kernel map `name` held open by process `pid` (found
/// through its fds' `map_id`, then dumped with bpftool).
pub fn kernel_map_entries(pid: u32, name: &str) -> Option<usize> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).ok()?;
    for fd in fds.flatten() {
        let info = std::fs::read_to_string(fd.path()).unwrap_or_default();
        let Some(id) = info.lines().find_map(|l| l.strip_prefix("map_id:")).map(|v| v.trim().to_owned()) else {
            continue;
        };
        let show = Command::new("bpftool").args(["-j", "map", "show", "id", &id]).output().ok()?;
        let meta: Value = serde_json::from_slice(&show.stdout).ok()?;
        if meta["name"] != name {
            continue;
        }
        let dump = Command::new("bpftool").args(["-j", "map", "dump", "id", &id]).output().ok()?;
        let entries: Value = serde_json::from_slice(&dump.stdout).ok()?;
        return entries.as_array().map(Vec::len);
    }
    None
}
