//! The component table: every ringtail process, written once. The
//! supervisor starts what it lists (in order, with the privilege it says),
//! each binary profiles on its offset from `profile.port`, and messages name
//! their producer by it.

use serde::{Deserialize, Serialize};

/// A ringtail process (also: which one produced a message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Component {
    /// Loads the eBPF programs and publishes raw events (privileged).
    ProbeLoader,
    /// Turns raw events into spans.
    SpanActor,
    /// Exports spans and metrics.
    ExporterActor,
    /// `ringtail`: starts and restarts the others.
    Supervisor,
    /// Watches the Kubernetes API for the node's pods and publishes their
    /// metadata (only when `kubernetes` is on). (New variants go at the
    /// end, so the wire form of the others never changes.)
    K8sActor,
}

/// One row of the component table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComponentInfo {
    /// Which component.
    pub component: Component,
    /// Name in logs, metric labels and readiness lines.
    pub name: &'static str,
    /// Executable, found next to `ringtail`.
    pub binary: &'static str,
    /// Keeps root when started (it drops what it does not need itself);
    /// unprivileged is the default.
    pub privileged: bool,
    /// Its CPU-profiling port is `profile.port` + this.
    pub profiling_offset: u16,
    /// Gets the configuration's secrets (`export.otlp.headers`) from the
    /// supervisor; the others get the configuration without them.
    pub secrets: bool,
}

/// Every component, indexed by [`Component`]; the supervised ones start in
/// this order: the loader first (it owns the runtime directory's socket the
/// others read); the k8s-actor, which nothing waits for, after the
/// supervisor's row.
pub const COMPONENTS: [ComponentInfo; 5] = [
    ComponentInfo {
        component: Component::ProbeLoader,
        name: "probe-loader",
        binary: "ringtail-probe-loader",
        privileged: true,
        profiling_offset: 0,
        secrets: false,
    },
    ComponentInfo {
        component: Component::SpanActor,
        name: "span-actor",
        binary: "ringtail-span-actor",
        privileged: false,
        profiling_offset: 1,
        secrets: false,
    },
    ComponentInfo {
        component: Component::ExporterActor,
        name: "exporter-actor",
        binary: "ringtail-exporter-actor",
        privileged: false,
        profiling_offset: 2,
        secrets: true,
    },
    ComponentInfo {
        component: Component::Supervisor,
        name: "supervisor",
        binary: "ringtail",
        privileged: true,
        profiling_offset: 3,
        secrets: true,
    },
    ComponentInfo {
        component: Component::K8sActor,
        name: "k8s-actor",
        binary: "ringtail-k8s-actor",
        privileged: false,
        profiling_offset: 4,
        secrets: false,
    },
];

impl Component {
    /// Its row of [`COMPONENTS`].
    pub fn info(self) -> &'static ComponentInfo {
        &COMPONENTS[self as usize]
    }

    /// The name used in logs, metrics labels and binary names.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// The components the supervisor starts and watches, in start order.
    pub fn supervised() -> impl Iterator<Item = &'static ComponentInfo> {
        COMPONENTS.iter().filter(|c| c.component != Component::Supervisor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_indexed_by_component() {
        for (i, c) in COMPONENTS.iter().enumerate() {
            assert_eq!(c.component as usize, i);
            assert_eq!(c.component.info(), c);
        }
        let offsets: Vec<u16> = COMPONENTS.iter().map(|c| c.profiling_offset).collect();
        assert_eq!(offsets, [0, 1, 2, 3, 4], "profile.port documents five consecutive ports");
    }

    #[test]
    fn only_the_loader_is_privileged() {
        let privileged: Vec<&str> = Component::supervised().filter(|c| c.privileged).map(|c| c.name).collect();
        assert_eq!(privileged, ["probe-loader"]);
    }

    #[test]
    fn only_the_exporter_gets_the_secrets() {
        let secrets: Vec<&str> = Component::supervised().filter(|c| c.secrets).map(|c| c.name).collect();
        assert_eq!(secrets, ["exporter-actor"]);
    }
}
