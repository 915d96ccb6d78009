//! `[tls]`: the plaintext of TLS connections (OpenSSL), read by uprobes.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{invalid, ConfigError};

/// Most `tls.libraries` entries accepted (each is a file to attach to).
pub const MAX_LIBRARIES: usize = 64;

/// TLS capture: uprobes on OpenSSL's `SSL_read`/`SSL_write` (and `_ex`),
/// `SSL_do_handshake` and `SSL_free`, and on Go's crypto/tls, so HTTPS
/// requests become spans like cleartext ones (`url.scheme = "https"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSettings {
    /// Attach the TLS uprobes (by the TLS attacher, a small privileged
    /// process: docs/security.md): at start to every OpenSSL `libssl` in
    /// the dynamic loader's cache and the standard library directories,
    /// every one mapped by a selected process, every executable of those
    /// processes that exports the OpenSSL symbols (Node's `node`) or is a Go
    /// program, and `libraries`; after start to what a selected process
    /// execs or maps. Off: no uprobe, TLS connections are not traced
    /// (their ciphertext is never taken for HTTP either way). Each uprobe hit
    /// is a trap into the kernel: see docs/tls.md for the cost per request.
    pub enabled: bool,
    /// More files to attach to (absolute paths): a `libssl` or an
    /// executable exporting the OpenSSL symbols that the search above does
    /// not find (e.g. in a container's root, `/proc/PID/root/...`, or an
    /// application's private copy). A file that is missing or has none of
    /// the symbols stops the start, with its path.
    pub libraries: Vec<PathBuf>,
    /// Deprecated and ignored (the loader warns): files and programs that
    /// appear after start are attached by default now, by the TLS attacher
    /// (docs/tls.md), and the loader keeps no capability. It made the
    /// loader keep five for its life; accepted so that an old configuration
    /// still starts.
    pub attach_later: bool,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings { enabled: true, libraries: Vec::new(), attach_later: false }
    }
}

impl TlsSettings {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.libraries.len() > MAX_LIBRARIES {
            return Err(invalid("tls.libraries", "must list at most 64 files", "[\"/opt/app/lib/libssl.so.3\"]", self.libraries.len()));
        }
        for (i, lib) in self.libraries.iter().enumerate() {
            if !lib.is_absolute() || lib.file_name().is_none() {
                return Err(invalid(
                    format!("tls.libraries[{i}]"),
                    "must be an absolute file path",
                    "\"/opt/app/lib/libssl.so.3\"",
                    lib.display(),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::Settings;

    #[test]
    fn tls_is_on_by_default_with_no_extra_library() {
        let s = Settings::from_toml("").expect("defaults");
        assert!(s.tls.enabled);
        assert!(s.tls.libraries.is_empty());
        // Deprecated, still accepted (an old configuration starts).
        assert!(!s.tls.attach_later);
        assert!(Settings::from_toml("[tls]\nattach_later = true").expect("valid").tls.attach_later);
        let err = Settings::from_toml("[tls]\nattach_later = \"maybe\"").unwrap_err().to_string();
        assert!(err.contains("attach_later"), "{err}");
    }

    #[test]
    fn libraries_must_be_absolute_files() {
        let err = Settings::from_toml("[tls]\nlibraries = [\"libssl.so.3\"]").unwrap_err().to_string();
        assert_eq!(err, "tls.libraries[0]: must be an absolute file path, e.g. \"/opt/app/lib/libssl.so.3\" (got libssl.so.3)");
        let ok = Settings::from_toml("[tls]\nenabled = false\nlibraries = [\"/opt/x/libssl.so.3\"]").expect("valid");
        assert!(!ok.tls.enabled);
        assert_eq!(ok.tls.libraries, vec![std::path::PathBuf::from("/opt/x/libssl.so.3")]);
    }

    #[test]
    fn unknown_tls_keys_are_refused() {
        let err = Settings::from_toml("[tls]\nlibrary = []").unwrap_err().to_string();
        assert!(err.starts_with("tls"), "{err}");
    }
}
