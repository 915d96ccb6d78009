//! Reading what the k8s-actor publishes: the Kubernetes metadata snapshot
//! of the node's containers (`ipc_schema::k8s`) and the k8s-actor's health,
//! two files in `endpoints::k8s_dir` that the k8s-actor's uid writes by
//! rename (the supervisor makes that directory in root's runtime
//! directory: the k8s-actor's uid, the actors' group, 2750).
//!
//! Opened as files another process wrote ([`crate::files`]): without
//! following a symlink, only if regular, only if the uid that owns their
//! directory wrote them (or the reader's own: the k8s-actor run alone), in
//! a directory no one else may write, size checked by `fstat` before a
//! byte is read, then decoded as hostile bytes.
//!
//! The span-actor's use: [`SnapshotReader::refresh`] when it wants news
//! (cheap when nothing changed: the stamp is read from the file's first
//! bytes), then [`SnapshotReader::table`]'s `lookup(container_id)` and
//! `resource()` per process.
//!
//! Layout: [`SnapshotReader`], [`read_health`], [`ReadError`].

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ipc_schema::k8s::{self, SnapshotError, Stamp, Table};
use ipc_schema::{endpoints, Body, Component, HealthReport};

use crate::files::{self, FileError};

/// Why a file of the k8s-actor's was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot open {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: FileError,
    },
    #[error("{path} belongs to uid {owner}, not its directory's owner {expected} nor this process's uid: refused")]
    Owner { path: PathBuf, owner: u32, expected: u32 },
    #[error("{path}'s directory may be written by others (mode {mode:04o}): refused")]
    OpenDirectory { path: PathBuf, mode: u32 },
    #[error("{path} is {len} bytes, over the {limit}-byte limit: refused")]
    TooLarge { path: PathBuf, len: u64, limit: usize },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a Kubernetes metadata snapshot")]
    Snapshot {
        path: PathBuf,
        #[source]
        source: SnapshotError,
    },
    #[error("{path} is not the k8s-actor's health report")]
    Health {
        path: PathBuf,
        #[source]
        source: Option<ipc_schema::DecodeError>,
    },
}

/// Reads at most `limit` bytes of `path` (`at_most` of them when given: a
/// head), if it is a regular file of the uid that owns its directory (or
/// of this process's uid), in a directory nobody else may write; `None` if
/// there is no such file.
fn read_own(path: &Path, limit: usize, at_most: Option<usize>) -> Result<Option<Vec<u8>>, ReadError> {
    use std::os::unix::fs::MetadataExt;
    let parent = path.parent().unwrap_or(Path::new("/"));
    let dir = match files::open_at(None, parent, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW) {
        Ok(fd) => std::fs::File::from(fd),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ReadError::Read { path: path.to_owned(), source }),
    };
    let dir_meta = dir.metadata().map_err(|source| ReadError::Read { path: path.to_owned(), source })?;
    if dir_meta.mode() & 0o022 != 0 {
        return Err(ReadError::OpenDirectory { path: path.to_owned(), mode: dir_meta.mode() & 0o7777 });
    }
    let (file, st) = match files::open_regular(path, false) {
        Ok(f) => f,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(source) => return Err(ReadError::Open { path: path.to_owned(), source }),
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if st.st_uid != dir_meta.uid() && st.st_uid != me {
        return Err(ReadError::Owner { path: path.to_owned(), owner: st.st_uid, expected: dir_meta.uid() });
    }
    let len = u64::try_from(st.st_size).unwrap_or(u64::MAX);
    if len > limit as u64 {
        return Err(ReadError::TooLarge { path: path.to_owned(), len, limit });
    }
    let want = at_most.unwrap_or(limit).min(limit);
    let mut bytes = Vec::with_capacity((len as usize).min(want));
    // One more than allowed: a file that grew after fstat is caught.
    file.take(want as u64 + 1).read_to_end(&mut bytes).map_err(|source| ReadError::Read { path: path.to_owned(), source })?;
    if at_most.is_none() && bytes.len() > limit {
        return Err(ReadError::TooLarge { path: path.to_owned(), len: bytes.len() as u64, limit });
    }
    Ok(Some(bytes))
}

/// Bytes enough for a snapshot's stamp (`[version, [instance, generation]`).
const HEAD: usize = 32;

/// The k8s-actor's snapshot as a reader keeps it: the table last read, and
/// whether the file has changed since.
pub struct SnapshotReader {
    path: PathBuf,
    table: Option<Arc<Table>>,
}

impl SnapshotReader {
    /// A reader of the snapshot under `runtime_dir` (`pipeline.runtime_dir`).
    pub fn new(runtime_dir: &Path) -> SnapshotReader {
        SnapshotReader::at(endpoints::k8s_snapshot(runtime_dir))
    }

    /// A reader of the snapshot file `path`.
    pub fn at(path: PathBuf) -> SnapshotReader {
        SnapshotReader { path, table: None }
    }

    /// The stamp of the snapshot on disk now (from its first bytes only);
    /// `None` while there is none (the k8s-actor has not written yet, or
    /// Kubernetes metadata is off).
    pub fn stamp_on_disk(&self) -> Result<Option<Stamp>, ReadError> {
        let Some(head) = read_own(&self.path, k8s::MAX_SNAPSHOT_BYTES, Some(HEAD))? else {
            return Ok(None);
        };
        k8s::peek_stamp(&head).map(Some).map_err(|source| ReadError::Snapshot { path: self.path.clone(), source })
    }

    /// Whether the snapshot on disk is another than the one stamped
    /// `since` (`None`: none read yet).
    pub fn changed_since(&self, since: Option<Stamp>) -> Result<bool, ReadError> {
        Ok(self.stamp_on_disk()? != since)
    }

    /// Reads the snapshot if it changed since the table this reader holds:
    /// true if [`SnapshotReader::table`] is a new one. On an error the
    /// table read before stays (the caller counts the error).
    pub fn refresh(&mut self) -> Result<bool, ReadError> {
        let held = self.table.as_ref().map(|t| t.stamp());
        if !self.changed_since(held)? {
            return Ok(false);
        }
        let Some(bytes) = read_own(&self.path, k8s::MAX_SNAPSHOT_BYTES, None)? else {
            return Ok(false);
        };
        let snapshot = k8s::decode(&bytes).map_err(|source| ReadError::Snapshot { path: self.path.clone(), source })?;
        self.table = Some(Arc::new(Table::new(snapshot)));
        Ok(true)
    }

    /// The table last read, if any.
    pub fn table(&self) -> Option<&Arc<Table>> {
        self.table.as_ref()
    }
}

/// Largest health file read (a report of a few dozen points is ~3 KB).
pub const MAX_HEALTH_BYTES: usize = 64 << 10;

/// The k8s-actor's latest health report under `runtime_dir`, if it has
/// written one; anything but a health report of the k8s-actor is refused.
pub fn read_health(runtime_dir: &Path) -> Result<Option<HealthReport>, ReadError> {
    let path = endpoints::k8s_health(runtime_dir);
    let Some(bytes) = read_own(&path, MAX_HEALTH_BYTES, None)? else {
        return Ok(None);
    };
    let env = ipc_schema::decode(&bytes).map_err(|e| ReadError::Health { path: path.clone(), source: Some(e) })?;
    match env.body {
        Body::Health(report) if report.component == Component::K8sActor && env.producer.component == Component::K8sActor => {
            Ok(Some(report))
        }
        _ => Err(ReadError::Health { path, source: None }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::k8s::{Container, Pod, Snapshot};
    use std::os::unix::fs::PermissionsExt;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rk-k8s-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn snapshot(generation: u64, container: &str) -> Snapshot {
        let mut s = Snapshot::empty(Stamp { instance: 9, generation }, "node-1".into());
        s.synced = true;
        s.pods.push(Pod {
            uid: "u".into(),
            namespace: "ns".into(),
            name: "web-0".into(),
            owners: Vec::new(),
            labels: Vec::new(),
            annotations: Vec::new(),
            resource: vec![("k8s.pod.name".into(), "web-0".into())],
            containers: vec![Container { id: container.into(), name: "web".into(), image: String::new(), resource: Vec::new() }],
        });
        s
    }

    /// Written as the k8s-actor does: a new file renamed over the old.
    fn publish(path: &Path, s: &Snapshot) {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, k8s::encode(s).unwrap()).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    #[test]
    fn a_reader_reads_only_what_changed() {
        let d = dir("read");
        let path = d.join("pods.msgpack");
        let mut r = SnapshotReader::at(path.clone());
        assert_eq!(r.stamp_on_disk().unwrap(), None, "no file yet: nothing known, no error");
        assert!(!r.refresh().unwrap() && r.table().is_none());
        let a = "a".repeat(64);
        publish(&path, &snapshot(1, &a));
        assert!(r.changed_since(None).unwrap());
        assert!(r.refresh().unwrap(), "first read");
        assert!(!r.refresh().unwrap(), "unchanged");
        let t = r.table().unwrap().clone();
        assert_eq!(t.lookup(&a).map(|v| v.pod.name.as_str()), Some("web-0"));
        assert!(!r.changed_since(Some(t.stamp())).unwrap());
        let b = "b".repeat(64);
        publish(&path, &snapshot(2, &b));
        assert!(r.changed_since(Some(t.stamp())).unwrap());
        assert!(r.refresh().unwrap());
        let t2 = r.table().unwrap();
        assert!(t2.lookup(&a).is_none() && t2.lookup(&b).is_some(), "the new table replaces the old whole");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_symlink_a_fifo_garbage_or_a_huge_file_is_refused_and_the_last_table_kept() {
        let d = dir("hostile");
        let path = d.join("pods.msgpack");
        let mut r = SnapshotReader::at(path.clone());
        publish(&path, &snapshot(1, &"a".repeat(64)));
        assert!(r.refresh().unwrap());
        std::fs::write(&path, b"\x96\x01\x92\x09\x05garbage").unwrap();
        assert!(matches!(r.refresh(), Err(ReadError::Snapshot { .. })));
        assert_eq!(r.table().unwrap().stamp().generation, 1, "kept");
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(d.join("elsewhere"), &path).unwrap();
        assert!(matches!(r.refresh(), Err(ReadError::Open { .. })), "a symlink is not followed");
        std::fs::remove_file(&path).unwrap();
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(r.refresh(), Err(ReadError::Open { .. })), "a FIFO never blocks the reader");
        std::fs::remove_file(&path).unwrap();
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(k8s::MAX_SNAPSHOT_BYTES as u64 + 1).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(r.refresh(), Err(ReadError::TooLarge { .. })), "sized before reading");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn another_uid_s_file_is_refused() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: needs root (a file of another uid)");
            return;
        }
        let d = dir("owner");
        let path = d.join("pods.msgpack");
        publish(&path, &snapshot(1, &"a".repeat(64)));
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        assert!(matches!(SnapshotReader::at(path).refresh(), Err(ReadError::Owner { owner: 65534, .. })));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_health_file_is_the_k8s_actor_s_report_only() {
        use ipc_schema::{encode, Envelope, Producer};
        let d = dir("health");
        let run = d.join("run");
        std::fs::create_dir_all(endpoints::k8s_dir(&run)).unwrap();
        assert!(read_health(&run).unwrap().is_none());
        let report = HealthReport { component: Component::K8sActor, instance: 3, points: Vec::new() };
        let me = Producer { component: Component::K8sActor, instance: 3 };
        std::fs::write(endpoints::k8s_health(&run), encode(&Envelope::new(me, 0, Body::Health(report.clone()))).unwrap()).unwrap();
        assert_eq!(read_health(&run).unwrap(), Some(report));
        let other = HealthReport { component: Component::ProbeLoader, instance: 3, points: Vec::new() };
        std::fs::write(endpoints::k8s_health(&run), encode(&Envelope::new(me, 0, Body::Health(other))).unwrap()).unwrap();
        assert!(matches!(read_health(&run), Err(ReadError::Health { .. })), "not another component's report");
        let _ = std::fs::remove_dir_all(&d);
    }
}
