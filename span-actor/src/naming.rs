//! `service.name` and the rest of a span's resource.
//!
//! In order: a configured rule (by executable name, or by a port the
//! process serves on), `OTEL_SERVICE_NAME` from the process environment,
//! `service.name` from its `OTEL_RESOURCE_ATTRIBUTES`, the executable name,
//! the kernel's command name. Decided once per process (pid + start time,
//! so a reused pid is a new process) and cached.

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use ipc_schema::k8s::Stamp;
use ipc_schema::{ProcessInfo, ServiceResource};
use ringtail_config::{ExeRegex, ServiceSettings};

use crate::k8s::{Metadata, Outcome, Unselected};

/// Processes remembered before the cache starts over.
const CAPACITY: usize = 8192;

struct Rule {
    name: String,
    ports: Vec<u16>,
    exe: Option<ExeRegex>,
}

struct Entry {
    info: ProcessInfo,
    /// Set once the process is seen serving on a rule's port.
    port_name: Option<String>,
    resource: Arc<ServiceResource>,
    /// The Kubernetes snapshot it was built with.
    stamp: Option<Stamp>,
    outcome: Outcome,
    selected: Result<(), Unselected>,
}

/// A process's resource as built: what [`Entry`] caches.
struct Built {
    resource: Arc<ServiceResource>,
    outcome: Outcome,
    selected: Result<(), Unselected>,
}

/// Service resources by process.
pub struct Naming {
    rules: Vec<Rule>,
    host: String,
    known: HashMap<(u32, u64), Entry>,
    /// Kubernetes metadata, when on.
    k8s: Option<Metadata>,
}

/// The host's name (`host.name`).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Parses `OTEL_RESOURCE_ATTRIBUTES` (`k=v,k2=v2`, values percent-encoded),
/// at most 64 of them.
pub fn parse_resource_attributes(s: &str) -> Vec<(String, String)> {
    let mut v = runtime_kit::otel::parse_pairs(s);
    v.truncate(64);
    v
}

impl Naming {
    /// Naming by the (already compiled) rules.
    pub fn new(settings: &ServiceSettings, host: String) -> Naming {
        let rules = settings.rules.iter().map(|r| Rule { name: r.name.clone(), ports: r.ports.clone(), exe: r.exe_name.clone() }).collect();
        Naming { rules, host, known: HashMap::default(), k8s: None }
    }

    /// This naming with Kubernetes metadata (`None`: off).
    pub fn with_kubernetes(mut self, k8s: Option<Metadata>) -> Naming {
        self.k8s = k8s;
        self
    }

    /// The Kubernetes metadata, when on.
    pub fn k8s_mut(&mut self) -> Option<&mut Metadata> {
        self.k8s.as_mut()
    }

    /// Learns (or refreshes) what the loader said about a process.
    pub fn learn(&mut self, info: &ProcessInfo) {
        let key = (info.pid, info.proc_start_ns);
        if self.known.get(&key).is_some_and(|e| e.info == *info) {
            return;
        }
        if self.known.len() >= CAPACITY && !self.known.contains_key(&key) {
            self.known.clear();
        }
        let port_name = self.known.get(&key).and_then(|e| e.port_name.clone());
        let built = self.build(info, port_name.as_deref());
        let stamp = self.stamp();
        self.known.insert(
            key,
            Entry { info: info.clone(), port_name, resource: built.resource, stamp, outcome: built.outcome, selected: built.selected },
        );
    }

    fn stamp(&self) -> Option<Stamp> {
        self.k8s.as_ref().and_then(Metadata::stamp)
    }

    /// The resource of process (`pid`, `start`) as [`Naming::resource`],
    /// or `None` if the Kubernetes selection drops its spans (counted).
    pub fn selected_resource(&mut self, pid: u32, start: u64, served_port: Option<u16>) -> Option<Arc<ServiceResource>> {
        let resource = self.resource(pid, start, served_port);
        let (Some(k8s), Some(e)) = (&self.k8s, self.known.get(&(pid, start))) else { return Some(resource) };
        if let Err(why) = e.selected {
            k8s.count_unselected(why);
            return None;
        }
        if let Outcome::Undecorated(why) = e.outcome {
            k8s.count_undecorated(why, 1);
        }
        Some(resource)
    }

    /// The resource of process (`pid`, `start`); `served_port` is the
    /// local port when the span is a server span.
    pub fn resource(&mut self, pid: u32, start: u64, served_port: Option<u16>) -> Arc<ServiceResource> {
        let key = (pid, start);
        if !self.known.contains_key(&key) {
            // The loader always sends process info with a batch; without it
            // the process is still named, just not well.
            let info = ProcessInfo {
                pid,
                proc_start_ns: start,
                comm: String::new(),
                exe_name: None,
                exe_path: None,
                env_service_name: None,
                env_resource_attributes: None,
                container_id: None,
            };
            self.learn(&info);
        }
        if let Some(e) = self.known.get(&key) {
            // The snapshot changed since: the pod may be known now, or
            // relabelled, or gone.
            if self.k8s.is_some() && e.stamp != self.stamp() {
                let (info, port_name) = (e.info.clone(), e.port_name.clone());
                let built = self.build(&info, port_name.as_deref());
                let stamp = self.stamp();
                if let Some(e) = self.known.get_mut(&key) {
                    (e.resource, e.outcome, e.selected, e.stamp) = (built.resource, built.outcome, built.selected, stamp);
                }
            }
        }
        if let Some(port) = served_port {
            let rule_name = self.rules.iter().find(|r| r.ports.contains(&port)).map(|r| r.name.clone());
            if let Some(name) = rule_name {
                let stale = self.known.get(&key).is_some_and(|e| e.port_name.as_deref() != Some(name.as_str()));
                if stale {
                    let info = self.known[&key].info.clone();
                    let built = self.build(&info, Some(&name));
                    if let Some(e) = self.known.get_mut(&key) {
                        e.port_name = Some(name);
                        (e.resource, e.outcome, e.selected) = (built.resource, built.outcome, built.selected);
                    }
                }
            }
        }
        // Present: inserted above if it was missing.
        self.known.get(&key).map(|e| e.resource.clone()).unwrap_or_else(|| Arc::new(self.fallback(pid)))
    }

    fn fallback(&self, pid: u32) -> ServiceResource {
        ServiceResource {
            service_name: "unknown_service".into(),
            service_instance_id: format!("{}:{pid}", self.host),
            host_name: self.host.clone(),
            pid,
            executable_name: String::new(),
            extra: Vec::new(),
        }
    }

    fn build(&self, info: &ProcessInfo, port_name: Option<&str>) -> Built {
        let (base, explicit) = self.build_base(info, port_name);
        let Some(k8s) = &self.k8s else {
            return Built { resource: Arc::new(base), outcome: Outcome::NotApplicable, selected: Ok(()) };
        };
        let Some(id) = info.container_id.as_deref() else {
            return Built { resource: Arc::new(base), outcome: Outcome::NotApplicable, selected: k8s.judge_host() };
        };
        let (resource, selected, outcome) = k8s.decorate(base, id, explicit);
        Built { resource: Arc::new(resource), outcome, selected }
    }

    /// The resource from the rules and the process alone, and whether its
    /// `service.name` came from a rule or the process's environment.
    fn build_base(&self, info: &ProcessInfo, port_name: Option<&str>) -> (ServiceResource, bool) {
        let exe = info.exe_name.clone().filter(|e| !e.is_empty()).unwrap_or_else(|| info.comm.clone());
        let attrs = info.env_resource_attributes.as_deref().map(parse_resource_attributes).unwrap_or_default();
        let attr_name = attrs.iter().find(|(k, _)| k == "service.name").map(|(_, v)| v.clone());
        let by_exe = self.rules.iter().find(|r| r.exe.as_ref().is_some_and(|re| re.is_match(&exe))).map(|r| r.name.clone());
        let explicit = by_exe.or_else(|| port_name.map(str::to_owned)).or_else(|| info.env_service_name.clone()).or(attr_name);
        let is_explicit = explicit.is_some();
        let name = explicit.or_else(|| (!exe.is_empty()).then(|| exe.clone())).unwrap_or_else(|| "unknown_service".to_owned());
        // The container is the kernel's word (its cgroups), not the
        // process's: its own `container.id` in OTEL_RESOURCE_ATTRIBUTES
        // gives way to it.
        let container = info.container_id.as_deref().map(|id| ("container.id".to_owned(), id.to_owned()));
        let in_container = container.is_some();
        let extra = attrs
            .into_iter()
            .filter(|(k, _)| {
                let ours = matches!(k.as_str(), "service.name" | "service.instance.id" | "host.name" | "process.pid");
                let kernels = in_container && k == "container.id";
                !(ours || kernels)
            })
            .chain(container)
            .collect();
        let resource = ServiceResource {
            service_name: name,
            service_instance_id: format!("{}:{}", self.host, info.pid),
            host_name: self.host.clone(),
            pid: info.pid,
            executable_name: exe,
            extra,
        };
        (resource, is_explicit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringtail_config::ServiceRule;

    fn info(pid: u32, exe: &str) -> ProcessInfo {
        ProcessInfo {
            pid,
            proc_start_ns: 1,
            comm: "comm".into(),
            exe_name: Some(exe.into()),
            exe_path: Some(format!("/usr/bin/{exe}")),
            env_service_name: None,
            env_resource_attributes: None,
            container_id: None,
        }
    }

    fn naming(rules: Vec<ServiceRule>) -> Naming {
        Naming::new(&ServiceSettings { rules }, "h".into())
    }

    #[test]
    fn order_of_precedence() {
        let mut n = naming(vec![
            ServiceRule { name: "by-exe".into(), ports: vec![], exe_name: Some("^nginx$".parse().unwrap()) },
            ServiceRule { name: "by-port".into(), ports: vec![8080], exe_name: None },
        ]);
        n.learn(&info(1, "nginx"));
        assert_eq!(n.resource(1, 1, Some(8080)).service_name, "by-exe");

        let mut p = info(2, "python3.11");
        p.env_service_name = Some("from-env".into());
        p.env_resource_attributes = Some("service.name=from-attrs,team=a%2Cb".into());
        n.learn(&p);
        assert_eq!(n.resource(2, 1, None).service_name, "from-env");
        // serving on a rule port wins over the environment, and sticks
        assert_eq!(n.resource(2, 1, Some(8080)).service_name, "by-port");
        assert_eq!(n.resource(2, 1, None).service_name, "by-port");
        let r = n.resource(2, 1, None);
        assert_eq!(r.extra, vec![("team".to_owned(), "a,b".to_owned())]);

        let mut q = info(3, "python3.11");
        q.env_resource_attributes = Some("service.name=from-attrs".into());
        n.learn(&q);
        assert_eq!(n.resource(3, 1, None).service_name, "from-attrs");

        n.learn(&info(4, "python3.11"));
        let r = n.resource(4, 1, None);
        assert_eq!((r.service_name.as_str(), r.executable_name.as_str(), r.pid), ("python3.11", "python3.11", 4));
        assert_eq!(r.service_instance_id, "h:4");
    }

    #[test]
    fn without_exe_the_command_name_is_used() {
        let mut n = naming(vec![]);
        let mut i = info(5, "");
        i.exe_name = None;
        n.learn(&i);
        assert_eq!(n.resource(5, 1, None).service_name, "comm");
        // a process never described still gets a resource
        assert_eq!(n.resource(99, 1, None).service_name, "unknown_service");
    }

    #[test]
    fn reused_pid_is_a_new_process() {
        let mut n = naming(vec![]);
        n.learn(&info(6, "old"));
        let mut newer = info(6, "new");
        newer.proc_start_ns = 2;
        n.learn(&newer);
        assert_eq!(n.resource(6, 1, None).service_name, "old");
        assert_eq!(n.resource(6, 2, None).service_name, "new");
    }

    #[test]
    fn resource_attribute_parsing() {
        assert_eq!(
            parse_resource_attributes("a=1, b = x%20y ,bad,=z,c=%zz"),
            vec![("a".into(), "1".into()), ("b".into(), "x y".into()), ("c".into(), "%zz".into())]
        );
    }
}
