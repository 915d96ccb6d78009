//! The Kubernetes metadata of this node's containers: what the k8s-actor
//! publishes and the span-actor reads.
//!
//! The k8s-actor watches the pods of its node and writes a [`Snapshot`] of
//! them to one file (`endpoints::k8s_snapshot`), whole, by a rename, each
//! time it changes (at most every ~100 ms). A reader looks a container up
//! by the id the loader found in its cgroups ([`Table::lookup`]) and puts
//! [`ContainerView::resource`] on the resource of the container's spans:
//! the derivation from Kubernetes facts to resource attributes is the
//! k8s-actor's, done once per pod, not the reader's.
//!
//! The file is read as hostile bytes (the actors' uid writes it, and a
//! compromised actor is that uid): [`decode`] checks the size before
//! parsing, then the version, and never panics; the bounds below hold for
//! whatever decodes (checked by [`Snapshot::check`]).
//!
//! Layout of the file (msgpack, structs as arrays): `[version, [instance,
//! generation], node, synced, connected, pods]`, so that
//! [`peek_stamp`] reads whether it changed from its first bytes.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// Version of the snapshot's layout; a reader refuses any other.
pub const SNAPSHOT_VERSION: u16 = 1;

/// Largest snapshot written or read, in bytes (a pod takes ~1-2 KB; the
/// k8s-actor keeps its table under this, counting what it leaves out).
pub const MAX_SNAPSHOT_BYTES: usize = 32 << 20;

/// Most pods a snapshot may hold (`kubernetes.max_pods` is at most this).
pub const MAX_PODS: usize = 10_000;

/// Most containers of one pod kept (init, ephemeral and restarted ones
/// included).
pub const MAX_CONTAINERS_PER_POD: usize = 64;

/// Most labels of one pod kept.
pub const MAX_LABELS: usize = 64;

/// Most `resource.opentelemetry.io/` annotations of one pod kept.
pub const MAX_ANNOTATIONS: usize = 32;

/// Most resource attributes of a pod, or of a container.
pub const MAX_ATTRIBUTES: usize = 64;

/// Longest string kept (a name, a label value, an annotation's value):
/// Kubernetes names are at most 253 bytes, label values 63; annotations
/// are free text, cut short here.
pub const MAX_TEXT: usize = 512;

/// Length of a container id: 64 lowercase hexadecimal digits, as the
/// runtimes make them and as the loader reads them from cgroups.
pub const CONTAINER_ID_LEN: usize = 64;

/// True if `s` is a container id (see [`CONTAINER_ID_LEN`]).
pub fn is_container_id(s: &str) -> bool {
    s.len() == CONTAINER_ID_LEN && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Which table a snapshot is: the k8s-actor's start (`instance`, random)
/// and the table's `generation` in it (from 1, one more per change). Two
/// snapshots with the same stamp hold the same table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Stamp {
    pub instance: u64,
    pub generation: u64,
}

/// The pods of one node as the k8s-actor knows them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Always [`SNAPSHOT_VERSION`] when written by this build.
    pub version: u16,
    pub stamp: Stamp,
    /// The node watched (`k8s.node.name` of every pod here).
    pub node: String,
    /// The k8s-actor has listed the node's pods at least once since it
    /// started: a container missing from a synced table is not (yet) one
    /// of a pod the API server knows; before, nothing is known.
    pub synced: bool,
    /// The watch is up now. While it is down the table is the last one
    /// known (pods deleted meanwhile stay until the watch comes back).
    pub connected: bool,
    pub pods: Vec<Pod>,
}

/// An owner of a pod: its controller (`ownerReferences` with
/// `controller: true`) and, for a ReplicaSet or a Job, the Deployment or
/// CronJob above it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The owner's kind, e.g. `ReplicaSet`, `Deployment`, `StatefulSet`,
    /// `DaemonSet`, `Job`, `CronJob`, or another controller's.
    pub kind: String,
    pub name: String,
}

/// One pod of the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pod {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The pod's controller first, then the owner above it, if known.
    pub owners: Vec<Owner>,
    /// The pod's labels (for selection by label), at most [`MAX_LABELS`].
    pub labels: Vec<(String, String)>,
    /// The pod's `resource.opentelemetry.io/<attribute>` annotations, as
    /// (`<attribute>`, value), at most [`MAX_ANNOTATIONS`].
    pub annotations: Vec<(String, String)>,
    /// The resource attributes every container of the pod gets (k8s.*,
    /// service.name, service.namespace, …): see [`ContainerView::resource`].
    pub resource: Vec<(String, String)>,
    /// Its containers that have an id (started at least once).
    pub containers: Vec<Container>,
}

/// One container of a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    /// The runtime's id (see [`is_container_id`]).
    pub id: String,
    /// `k8s.container.name`.
    pub name: String,
    /// The image as the pod's spec names it (may be empty).
    pub image: String,
    /// The resource attributes of this container on top of its pod's
    /// (`k8s.container.name`, `service.instance.id`, …).
    pub resource: Vec<(String, String)>,
}

/// Why a snapshot was not encoded or read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot of {len} bytes exceeds the {limit}-byte limit")]
    TooLarge { len: usize, limit: usize },
    #[error("snapshot version {found} is not the supported version {expected}")]
    Version { found: u64, expected: u16 },
    #[error("snapshot header is not msgpack")]
    Header,
    #[error("snapshot is not msgpack")]
    Malformed {
        #[source]
        source: rmp_serde::decode::Error,
    },
    #[error("msgpack encoding failed")]
    Encode {
        #[source]
        source: rmp_serde::encode::Error,
    },
    #[error("snapshot breaks a bound: {what}")]
    Bounds { what: &'static str },
}

impl Snapshot {
    /// An empty table of this build's version.
    pub fn empty(stamp: Stamp, node: String) -> Snapshot {
        Snapshot { version: SNAPSHOT_VERSION, stamp, node, synced: false, connected: false, pods: Vec::new() }
    }

    /// Checks the bounds of this module on a decoded (or built) snapshot.
    pub fn check(&self) -> Result<(), SnapshotError> {
        if self.pods.len() > MAX_PODS {
            return Err(SnapshotError::Bounds { what: "too many pods" });
        }
        if self.node.len() > MAX_TEXT {
            return Err(SnapshotError::Bounds { what: "node name too long" });
        }
        self.pods.iter().try_for_each(Pod::check)
    }
}

impl Pod {
    /// Checks this module's bounds on one pod.
    pub fn check(&self) -> Result<(), SnapshotError> {
        let bounds = |what| Err(SnapshotError::Bounds { what });
        let text_ok = |s: &str| s.len() <= MAX_TEXT;
        let pairs_ok = |v: &[(String, String)], max: usize| v.len() <= max && v.iter().all(|(k, x)| text_ok(k) && text_ok(x));
        if ![&self.uid, &self.namespace, &self.name].iter().all(|s| text_ok(s)) || self.owners.len() > 2 {
            return bounds("pod name, uid or owners");
        }
        if !self.owners.iter().all(|o| text_ok(&o.kind) && text_ok(&o.name)) {
            return bounds("owner name too long");
        }
        if !pairs_ok(&self.labels, MAX_LABELS) || !pairs_ok(&self.annotations, MAX_ANNOTATIONS) || !pairs_ok(&self.resource, MAX_ATTRIBUTES)
        {
            return bounds("labels, annotations or attributes");
        }
        if self.containers.len() > MAX_CONTAINERS_PER_POD {
            return bounds("too many containers");
        }
        for c in &self.containers {
            if !is_container_id(&c.id) || !text_ok(&c.name) || !text_ok(&c.image) || !pairs_ok(&c.resource, MAX_ATTRIBUTES) {
                return bounds("container id, name, image or attributes");
            }
        }
        Ok(())
    }
}

/// A snapshot to write, borrowing its pods (from the writer's own table,
/// not copied for each write); encodes exactly as the [`Snapshot`] it
/// describes.
#[derive(Debug, Serialize)]
pub struct SnapshotRef<'a> {
    pub version: u16,
    pub stamp: Stamp,
    pub node: &'a str,
    pub synced: bool,
    pub connected: bool,
    pub pods: Vec<&'a Pod>,
}

/// Encodes a snapshot from borrowed pods (checked against the bounds, then
/// the size).
pub fn encode_ref(s: &SnapshotRef<'_>) -> Result<Vec<u8>, SnapshotError> {
    if s.pods.len() > MAX_PODS || s.node.len() > MAX_TEXT {
        return Err(SnapshotError::Bounds { what: "too many pods, or node name too long" });
    }
    s.pods.iter().try_for_each(|p| p.check())?;
    let mut bytes = Vec::with_capacity(256 + 1024 * s.pods.len());
    rmp_serde::encode::write(&mut bytes, s).map_err(|source| SnapshotError::Encode { source })?;
    if bytes.len() > MAX_SNAPSHOT_BYTES {
        return Err(SnapshotError::TooLarge { len: bytes.len(), limit: MAX_SNAPSHOT_BYTES });
    }
    Ok(bytes)
}

/// Encodes a snapshot (checked against the bounds, then the size).
pub fn encode(s: &Snapshot) -> Result<Vec<u8>, SnapshotError> {
    encode_ref(&SnapshotRef {
        version: s.version,
        stamp: s.stamp,
        node: &s.node,
        synced: s.synced,
        connected: s.connected,
        pods: s.pods.iter().collect(),
    })
}

/// The stamp of an encoded snapshot, read from its first bytes only (the
/// cheap "has it changed?").
pub fn peek_stamp(bytes: &[u8]) -> Result<Stamp, SnapshotError> {
    let mut rd = bytes;
    let n = rmp::decode::read_array_len(&mut rd).map_err(|_| SnapshotError::Header)?;
    if n < 2 {
        return Err(SnapshotError::Header);
    }
    let found: u64 = rmp::decode::read_int(&mut rd).map_err(|_| SnapshotError::Header)?;
    if found != u64::from(SNAPSHOT_VERSION) {
        return Err(SnapshotError::Version { found, expected: SNAPSHOT_VERSION });
    }
    if rmp::decode::read_array_len(&mut rd).map_err(|_| SnapshotError::Header)? != 2 {
        return Err(SnapshotError::Header);
    }
    let instance = rmp::decode::read_int(&mut rd).map_err(|_| SnapshotError::Header)?;
    let generation = rmp::decode::read_int(&mut rd).map_err(|_| SnapshotError::Header)?;
    Ok(Stamp { instance, generation })
}

/// Decodes a snapshot: size first, then the version, then the whole, then
/// the bounds. Never panics, whatever the bytes.
pub fn decode(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    if bytes.len() > MAX_SNAPSHOT_BYTES {
        return Err(SnapshotError::TooLarge { len: bytes.len(), limit: MAX_SNAPSHOT_BYTES });
    }
    peek_stamp(bytes)?;
    let s: Snapshot = rmp_serde::from_slice(bytes).map_err(|source| SnapshotError::Malformed { source })?;
    s.check()?;
    Ok(s)
}

/// A snapshot with its index by container id: what a reader keeps.
#[derive(Debug, Clone)]
pub struct Table {
    snapshot: Snapshot,
    by_id: HashMap<String, (u32, u32)>,
}

/// One container and its pod, as [`Table::lookup`] finds them.
#[derive(Debug, Clone, Copy)]
pub struct ContainerView<'a> {
    pub pod: &'a Pod,
    pub container: &'a Container,
}

impl<'a> ContainerView<'a> {
    /// The container's resource attributes: its pod's, then its own (no
    /// key twice). Values the process set itself (`OTEL_SERVICE_NAME`,
    /// `OTEL_RESOURCE_ATTRIBUTES`) come first by the conventions: the
    /// reader lets them win.
    pub fn resource(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.pod.resource.iter().chain(self.container.resource.iter()).map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl Table {
    /// Indexes a (checked) snapshot. A container id listed twice is found
    /// in its first pod.
    pub fn new(snapshot: Snapshot) -> Table {
        let mut by_id = HashMap::new();
        for (p, pod) in snapshot.pods.iter().enumerate() {
            for (c, container) in pod.containers.iter().enumerate() {
                // Bounded by MAX_PODS and MAX_CONTAINERS_PER_POD: fits u32.
                by_id.entry(container.id.clone()).or_insert((p as u32, c as u32));
            }
        }
        Table { snapshot, by_id }
    }

    /// The snapshot.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// Its stamp.
    pub fn stamp(&self) -> Stamp {
        self.snapshot.stamp
    }

    /// The container `id` (as the loader gives `container.id`) and its pod.
    pub fn lookup(&self, id: &str) -> Option<ContainerView<'_>> {
        let &(p, c) = self.by_id.get(id)?;
        let pod = self.snapshot.pods.get(p as usize)?;
        Some(ContainerView { pod, container: pod.containers.get(c as usize)? })
    }

    /// Containers known.
    pub fn containers(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID_A: &str = "3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a";
    const ID_B: &str = "0000000000000000000000000000000000000000000000000000000000000b0b";

    fn pair(k: &str, v: &str) -> (String, String) {
        (k.to_owned(), v.to_owned())
    }

    fn sample() -> Snapshot {
        let mut s = Snapshot::empty(Stamp { instance: 7, generation: 42 }, "node-1".into());
        s.synced = true;
        s.connected = true;
        s.pods.push(Pod {
            uid: "6f1d0b0e-3c1a-4b7e-9d0a-1f2e3d4c5b6a".into(),
            namespace: "shop".into(),
            name: "checkout-7d9f8c6b5-x2x4q".into(),
            owners: vec![
                Owner { kind: "ReplicaSet".into(), name: "checkout-7d9f8c6b5".into() },
                Owner { kind: "Deployment".into(), name: "checkout".into() },
            ],
            labels: vec![pair("app.kubernetes.io/name", "checkout"), pair("pod-template-hash", "7d9f8c6b5")],
            annotations: vec![pair("deployment.environment.name", "prod")],
            resource: vec![pair("k8s.namespace.name", "shop"), pair("service.name", "checkout")],
            containers: vec![
                Container {
                    id: ID_A.into(),
                    name: "app".into(),
                    image: "registry.example/checkout:1.4".into(),
                    resource: vec![pair("k8s.container.name", "app"), pair("service.instance.id", "shop.checkout-7d9f8c6b5-x2x4q.app")],
                },
                Container {
                    id: ID_B.into(),
                    name: "sidecar".into(),
                    image: String::new(),
                    resource: vec![pair("k8s.container.name", "sidecar")],
                },
            ],
        });
        s
    }

    #[test]
    fn a_snapshot_round_trips_and_its_stamp_is_read_from_the_head() {
        let s = sample();
        let bytes = encode(&s).unwrap();
        assert_eq!(decode(&bytes).unwrap(), s);
        let mut direct = Vec::new();
        rmp_serde::encode::write(&mut direct, &s).unwrap();
        assert_eq!(bytes, direct, "the borrowed form encodes as the owned one");
        assert_eq!(peek_stamp(&bytes).unwrap(), Stamp { instance: 7, generation: 42 });
        let empty = Snapshot::empty(Stamp { instance: 1, generation: 1 }, "n".into());
        assert_eq!(decode(&encode(&empty).unwrap()).unwrap(), empty);
    }

    #[test]
    fn lookup_by_container_id_gives_the_pod_s_then_the_container_s_attributes() {
        let t = Table::new(sample());
        assert_eq!(t.containers(), 2);
        let v = t.lookup(ID_A).expect("known");
        assert_eq!((v.pod.name.as_str(), v.container.name.as_str()), ("checkout-7d9f8c6b5-x2x4q", "app"));
        let attrs: Vec<(&str, &str)> = v.resource().collect();
        assert_eq!(
            attrs,
            [
                ("k8s.namespace.name", "shop"),
                ("service.name", "checkout"),
                ("k8s.container.name", "app"),
                ("service.instance.id", "shop.checkout-7d9f8c6b5-x2x4q.app")
            ]
        );
        assert_eq!(t.lookup(ID_B).map(|v| v.container.name.as_str()), Some("sidecar"));
        assert!(t.lookup(&"f".repeat(64)).is_none());
        assert!(t.lookup("").is_none());
    }

    #[test]
    fn another_version_is_reported_as_such() {
        let mut s = sample();
        s.version = SNAPSHOT_VERSION + 1;
        let mut bytes = Vec::new();
        rmp_serde::encode::write(&mut bytes, &s).unwrap();
        assert!(matches!(decode(&bytes), Err(SnapshotError::Version { found, .. }) if found == u64::from(SNAPSHOT_VERSION) + 1));
        assert!(matches!(peek_stamp(&bytes), Err(SnapshotError::Version { .. })));
    }

    #[test]
    fn hostile_bytes_are_errors_never_panics() {
        for bytes in [
            &b""[..],
            b"\x00",
            b"\x91",
            b"\x96\x01\xc1",
            b"\x96\x01\x92\x01",
            b"hello world",
            &[0xdc, 0xff, 0xff],
            &[0x96, 0x01, 0x92, 0xcf],
        ] {
            assert!(decode(bytes).is_err(), "{bytes:?}");
        }
        let good = encode(&sample()).unwrap();
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err(), "a prefix of {cut} bytes decoded");
        }
        // Every byte flipped: an error or a snapshot within the bounds.
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0xff;
            if let Ok(s) = decode(&bad) {
                assert!(s.check().is_ok());
            }
        }
        let big = vec![0u8; MAX_SNAPSHOT_BYTES + 1];
        assert!(matches!(decode(&big), Err(SnapshotError::TooLarge { .. })));
    }

    #[test]
    fn what_breaks_a_bound_is_neither_written_nor_read() {
        let mut bad_id = sample();
        bad_id.pods[0].containers[0].id = "ABC".into();
        let mut long = sample();
        long.pods[0].labels.push(pair("k", &"v".repeat(MAX_TEXT + 1)));
        let mut many = sample();
        many.pods[0].labels = (0..=MAX_LABELS).map(|i| pair(&format!("k{i}"), "v")).collect();
        for s in [bad_id, long, many] {
            assert!(matches!(encode(&s), Err(SnapshotError::Bounds { .. })));
            let mut bytes = Vec::new();
            rmp_serde::encode::write(&mut bytes, &s).unwrap();
            assert!(matches!(decode(&bytes), Err(SnapshotError::Bounds { .. })), "a hostile writer's table is refused whole");
        }
    }

    #[test]
    fn container_ids_are_64_lowercase_hex_digits() {
        assert!(is_container_id(ID_A));
        for bad in ["", "abc", &ID_A[1..], &ID_A.to_uppercase(), &format!("{}g", &ID_A[1..])] {
            assert!(!is_container_id(bad), "{bad}");
        }
    }
}
