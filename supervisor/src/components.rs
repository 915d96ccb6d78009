//! The component table: what the supervisor runs, and with what privilege.
//! Unprivileged is the default; only the probe-loader is privileged.

/// One supervised process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Component {
    /// Name in logs.
    pub name: &'static str,
    /// Executable, found next to `ringtail`.
    pub binary: &'static str,
    /// Keeps root (it drops what it does not need itself).
    pub privileged: bool,
}

/// In start order: the loader first (it owns the runtime directory's
/// socket the others read).
pub const COMPONENTS: [Component; 3] = [
    Component { name: "probe-loader", binary: "ringtail-probe-loader", privileged: true },
    Component { name: "span-actor", binary: "ringtail-span-actor", privileged: false },
    Component { name: "exporter-actor", binary: "ringtail-exporter-actor", privileged: false },
];

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_loader_is_privileged() {
        let privileged: Vec<&str> = super::COMPONENTS.iter().filter(|c| c.privileged).map(|c| c.name).collect();
        assert_eq!(privileged, ["probe-loader"]);
    }
}
