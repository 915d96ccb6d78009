//! How the components get the configuration: a sealed memfd each child
//! inherits on fd [`CONFIG_FD`] and opens as `/proc/self/fd/4`, never a file.
//!
//! A file in the runtime directory would hold the exporter's credentials
//! (`export.otlp.headers`) for anyone who can read it, for as long as it
//! exists, and after a crash too. A memfd lives only in the processes that
//! hold it; the actors are non-dumpable, so their `/proc/PID/fd` is root's.
//! Two of them: the configuration with its secrets for the components the
//! table marks `secrets` (the exporter), without for the others.
//!
//! Sealed (`F_SEAL_WRITE|F_SEAL_GROW|F_SEAL_SHRINK|F_SEAL_SEAL`) because the
//! root loader and the unprivileged span-actor read the same one: an actor
//! cannot rewrite what the loader reads at its next restart (data flows
//! downhill).

use std::ffi::CStr;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use ipc_schema::ComponentInfo;
use ringtail_config::Settings;

/// The fd number a child finds its configuration on (3 is the readiness
/// pipe).
pub const CONFIG_FD: RawFd = 4;

/// Lowest fd number the memfds are kept on, so that putting the readiness
/// pipe and the configuration on 3 and 4 in a child never overwrites them.
const KEEP_ABOVE: RawFd = 10;

/// Why the configuration could not be handed over.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    #[error("cannot create the configuration's memfd (memfd_create)")]
    Create {
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the configuration into its memfd")]
    Write {
        #[source]
        source: std::io::Error,
    },
    #[error("cannot seal the configuration's memfd (fcntl F_ADD_SEALS)")]
    Seal {
        #[source]
        source: std::io::Error,
    },
}

/// One sealed, read-only configuration text.
#[derive(Debug)]
pub struct Sealed {
    fd: OwnedFd,
}

impl Sealed {
    /// `text` in a new memfd named `name` (shown in `/proc/PID/fd`), sealed.
    pub fn new(name: &CStr, text: &str) -> Result<Sealed, HandoverError> {
        // SAFETY: name is a valid C string; memfd_create touches no other memory.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if raw < 0 {
            return Err(HandoverError::Create { source: std::io::Error::last_os_error() });
        }
        // SAFETY: memfd_create returned a new fd that nothing else owns.
        let first = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: F_DUPFD_CLOEXEC takes an integer; the result is checked.
        let high = unsafe { libc::fcntl(first.as_raw_fd(), libc::F_DUPFD_CLOEXEC, KEEP_ABOVE) };
        if high < 0 {
            return Err(HandoverError::Create { source: std::io::Error::last_os_error() });
        }
        // SAFETY: fcntl returned a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(high) };
        drop(first);
        let mut file = std::fs::File::from(fd);
        file.write_all(text.as_bytes()).map_err(|source| HandoverError::Write { source })?;
        let seals = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
        // SAFETY: F_ADD_SEALS takes an integer.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(HandoverError::Seal { source: std::io::Error::last_os_error() });
        }
        Ok(Sealed { fd: file.into() })
    }

    /// Its fd number in the supervisor (>= 10, close-on-exec).
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The two configurations the components get.
#[derive(Debug)]
pub struct Handover {
    full: Sealed,
    without_secrets: Sealed,
}

impl Handover {
    /// Seals the effective configuration, with and without its secrets.
    pub fn new(settings: &Settings) -> Result<Handover, HandoverError> {
        Ok(Handover {
            full: Sealed::new(c"ringtail.toml", &settings.to_toml())?,
            without_secrets: Sealed::new(c"ringtail-without-secrets.toml", &settings.without_secrets().to_toml())?,
        })
    }

    /// The one `c` gets.
    pub fn for_component(&self, c: &ComponentInfo) -> &Sealed {
        if c.secrets {
            &self.full
        } else {
            &self.without_secrets
        }
    }

    /// The `--config` argument a child opens it by.
    pub fn path() -> String {
        format!("/proc/self/fd/{CONFIG_FD}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::Component;
    use std::io::{Read, Seek};

    fn reopen(s: &Sealed) -> std::fs::File {
        std::fs::OpenOptions::new().read(true).write(true).open(format!("/proc/self/fd/{}", s.raw())).expect("reopen the memfd")
    }

    #[test]
    fn sealed_text_reads_back_and_cannot_change() {
        let s = Sealed::new(c"test", "[log]\nlevel = \"debug\"\n").unwrap();
        assert!(s.raw() >= KEEP_ABOVE);
        // SAFETY: F_GETFD takes no pointer.
        assert_eq!(unsafe { libc::fcntl(s.raw(), libc::F_GETFD) } & libc::FD_CLOEXEC, libc::FD_CLOEXEC, "never leaks to other children");
        let mut f = reopen(&s);
        let mut text = String::new();
        f.read_to_string(&mut text).unwrap();
        assert_eq!(text, "[log]\nlevel = \"debug\"\n");
        // Writable open, but the seals refuse every change.
        f.rewind().unwrap();
        assert!(f.write_all(b"[probe]").is_err(), "F_SEAL_WRITE");
        assert!(f.set_len(0).is_err(), "F_SEAL_SHRINK");
        assert!(f.set_len(4096).is_err(), "F_SEAL_GROW");
        // SAFETY: F_ADD_SEALS takes an integer.
        assert_eq!(unsafe { libc::fcntl(s.raw(), libc::F_ADD_SEALS, 0) }, -1, "F_SEAL_SEAL");
    }

    #[test]
    fn only_the_exporter_gets_the_headers() {
        let settings = Settings::from_toml(
            "[actors]\nuser = \"ringtail\"\n[export.otlp]\nendpoint = \"http://127.0.0.1:4318\"\nheaders = { authorization = \"Bearer s3cr3t\" }\n",
        )
        .unwrap();
        let h = Handover::new(&settings).unwrap();
        for c in Component::supervised() {
            let mut text = String::new();
            reopen(h.for_component(c)).read_to_string(&mut text).unwrap();
            let back = Settings::from_toml(&text).unwrap();
            if c.component == Component::ExporterActor {
                assert_eq!(back, settings, "the exporter gets all of it");
            } else {
                assert!(!text.contains("s3cr3t"), "{}: {text}", c.name);
                assert_eq!(back, settings.without_secrets(), "{}", c.name);
            }
        }
    }
}
