//! The systemd units in `systemd/`: systemd accepts them, they are as
//! hardened as docs/systemd.md says, and the loader needs exactly the
//! capabilities its unit grants.
//!
//! Test machines rarely run systemd as PID 1 (containers, CI), so everything
//! here is offline: `install.sh --root` stages the units, stand-in binaries
//! and the `ringtail` user in a temporary tree, `systemd-analyze verify
//! --root` checks that tree, and `systemd-analyze security --offline=yes`
//! scores each unit file. Run with `-- --nocapture` to see the scores.
//!
//! # Layout
//! - `Unit`: a unit file read into (section, key, value) assignments.
//! - `Stage` / `verify`: the staged install and `systemd-analyze verify`.
//! - `exposure`: `systemd-analyze security --offline=yes` and its score.
//! - the tests: verify, what verify must reject, scores, the actors' and the
//!   loader's privileges, the target's wiring, the example configuration,
//!   and the loader started with its unit's capabilities minus one.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use ringtail_tests::*;

/// The three services, by component.
const SERVICES: &[&str] = &["ringtail-probe-loader.service", "ringtail-span-actor.service", "ringtail-exporter-actor.service"];
const ACTORS: &[&str] = &["ringtail-span-actor.service", "ringtail-exporter-actor.service"];
const LOADER: &str = "ringtail-probe-loader.service";
const TARGET: &str = "ringtail.target";

/// Everything the loader may ever hold; docs/systemd.md justifies each one,
/// and `loader_needs_each_capability_of_its_unit` shows each is needed.
/// CAP_SYS_ADMIN is there for the TLS uprobes (HTTPS by default),
/// CAP_CHECKPOINT_RESTORE for the TLS attacher on Linux 6.6+.
const LOADER_CAPS: &[&str] = &[
    "CAP_BPF",
    "CAP_PERFMON",
    "CAP_SYS_PTRACE",
    "CAP_DAC_READ_SEARCH",
    "CAP_SETGID",
    "CAP_SETPCAP",
    "CAP_SYS_ADMIN",
    "CAP_CHECKPOINT_RESTORE",
];

/// Highest acceptable overall exposure per unit. With systemd 252 the units
/// score 2.4 (CAP_SYS_ADMIN for the TLS uprobes counts 0.3 of it), 0.3 and
/// 1.2; the headroom absorbs other versions' weights. A unit above its limit
/// has lost some of its hardening.
const EXPOSURE_LIMITS: &[(&str, f64)] =
    &[("ringtail-probe-loader.service", 2.8), ("ringtail-span-actor.service", 0.5), ("ringtail-exporter-actor.service", 1.5)];

/// Where the units, install.sh and the example configuration live.
fn systemd_dir() -> PathBuf {
    workspace().join("systemd")
}

/// A unit file as its assignments, in order. Our files use no line
/// continuations, so a line is an assignment, a section header or a comment.
struct Unit {
    name: String,
    text: String,
    entries: Vec<(String, String, String)>,
}

impl Unit {
    fn read(path: &Path) -> Unit {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let mut entries = Vec::new();
        let mut section = String::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            assert!(!line.ends_with('\\'), "{}:{}: continuation lines are not supported by this test", path.display(), i + 1);
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_owned();
                continue;
            }
            let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("{}:{}: not an assignment: {line}", path.display(), i + 1));
            entries.push((section.clone(), key.trim().to_owned(), value.trim().to_owned()));
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Unit { name, text, entries }
    }

    /// One of ours, from `systemd/`.
    fn ours(name: &str) -> Unit {
        Unit::read(&systemd_dir().join(name))
    }

    /// Every value assigned to `key` in `section`, in order.
    fn all(&self, section: &str, key: &str) -> Vec<&str> {
        self.entries.iter().filter(|(s, k, _)| s == section && k == key).map(|(_, _, v)| v.as_str()).collect()
    }

    /// The one value of `key`; panics unless it is assigned exactly once.
    fn one(&self, section: &str, key: &str) -> &str {
        match self.all(section, key).as_slice() {
            [v] => v,
            other => panic!("{}: [{section}] {key}= should be set exactly once, found {other:?}", self.name),
        }
    }

    /// The words of all assignments of a list-valued key.
    fn words(&self, section: &str, key: &str) -> BTreeSet<String> {
        self.all(section, key).iter().flat_map(|v| v.split_whitespace()).map(str::to_owned).collect()
    }

    fn expect(&self, section: &str, key: &str, value: &str) {
        assert_eq!(self.one(section, key), value, "{}: [{section}] {key}=", self.name);
    }
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn text(out: &Output) -> String {
    format!("status: {}\nstdout:\n{}\nstderr:\n{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// True when the offline tools are here; otherwise says the test is skipped.
fn have_systemd_tools() -> bool {
    have("systemd-analyze") && have("systemd-sysusers")
}

/// The host's own units (sysinit.target, network-online.target…), which ours
/// refer to and `verify --root` looks for inside the root.
fn host_unit_dir() -> Option<PathBuf> {
    ["/usr/lib/systemd/system", "/lib/systemd/system"].iter().map(PathBuf::from).find(|p| p.join("sysinit.target").exists())
}

/// A staged install below `root`: what `install.sh --root` writes, with
/// stand-in binaries (verify only checks they are executable files), plus a
/// copy of the host's units.
struct Stage {
    _dir: TempDir,
    root: PathBuf,
}

impl Stage {
    /// None (and a loud skip) when the host lacks what staging needs.
    fn new() -> Option<Stage> {
        if !have_systemd_tools() {
            return None;
        }
        let Some(host_units) = host_unit_dir() else {
            skip("no systemd unit directory with sysinit.target on this host: verify has nothing to resolve our dependencies against");
            return None;
        };
        let dir = TempDir::new("sd");
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).expect("create the stand-in bin dir");
        for b in ["ringtail", "ringtail-probe-loader", "ringtail-span-actor", "ringtail-exporter-actor"] {
            let path = bin.join(b);
            // Exits with failure: a stand-in must never pass for the real thing.
            std::fs::write(&path, "#!/bin/sh\necho \"stand-in for $0\" >&2\nexit 1\n").expect("write a stand-in binary");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod a stand-in binary");
        }
        let root = dir.join("root");
        let out = Command::new(systemd_dir().join("install.sh"))
            .arg("--root")
            .arg(&root)
            .arg("--bin-dir")
            .arg(&bin)
            .output()
            .expect("run systemd/install.sh");
        assert!(out.status.success(), "install.sh --root failed\n{}", text(&out));
        let units = root.join("usr/lib/systemd");
        std::fs::create_dir_all(&units).expect("create usr/lib/systemd in the stage");
        let out = Command::new("cp").arg("-a").arg(&host_units).arg(units.join("system")).output().expect("run cp");
        assert!(out.status.success(), "copying {} failed\n{}", host_units.display(), text(&out));
        Some(Stage { _dir: dir, root })
    }

    fn unit(&self, name: &str) -> PathBuf {
        self.root.join("etc/systemd/system").join(name)
    }
}

/// `systemd-analyze verify` on staged units. Verify exits 0 on many
/// problems (a misspelt value is "ignoring"), so anything it prints is an
/// error too.
fn verify(stage: &Stage, units: &[&str]) -> Result<(), String> {
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", stage.root.display()))
        .arg("--man=no")
        .args(units.iter().map(|u| stage.unit(u)))
        .output()
        .expect("run systemd-analyze verify");
    if out.status.success() && out.stdout.is_empty() && out.stderr.is_empty() {
        Ok(())
    } else {
        Err(text(&out))
    }
}

/// `systemd-analyze security --offline=yes` on a unit file: the overall
/// exposure and the whole report. Warnings (stderr) fail the test.
fn exposure(path: &Path) -> (f64, String) {
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(path)
        .output()
        .expect("run systemd-analyze security");
    let report = text(&out);
    assert!(out.status.success(), "systemd-analyze security --offline=yes {} failed\n{report}", path.display());
    assert!(out.stderr.is_empty(), "systemd-analyze security warned about {}\n{report}", path.display());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    // "→ Overall exposure level for NAME: 0.3 SAFE 😀"
    let score = stdout
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for ")?.1.split_once(": ")?.1.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no overall exposure level in the report on {}\n{report}", path.display()));
    (score, stdout)
}

#[test]
fn every_unit_passes_systemd_analyze_verify() {
    let Some(stage) = Stage::new() else { return };
    for name in SERVICES.iter().chain([&TARGET]) {
        let staged = std::fs::read(stage.unit(name)).unwrap_or_else(|e| panic!("install.sh did not stage {name}: {e}"));
        assert_eq!(staged, std::fs::read(systemd_dir().join(name)).unwrap(), "install.sh changed {name} on the way");
    }
    let all: Vec<&str> = SERVICES.iter().chain([&TARGET]).copied().collect();
    if let Err(report) = verify(&stage, &all) {
        panic!("systemd-analyze verify rejects the units\n{report}");
    }
    // One by one too: each must stand with only what it names.
    for name in &all {
        if let Err(report) = verify(&stage, &[name]) {
            panic!("systemd-analyze verify rejects {name} on its own\n{report}");
        }
    }
}

#[test]
fn verify_catches_a_missing_binary_and_a_misspelt_setting() {
    let Some(stage) = Stage::new() else { return };
    assert!(verify(&stage, &["ringtail-span-actor.service"]).is_ok(), "the staged span-actor should verify before we break it");

    std::fs::remove_file(stage.root.join("usr/local/bin/ringtail-span-actor")).expect("remove a staged binary");
    let report = verify(&stage, &["ringtail-span-actor.service"]).expect_err("verify accepted a unit whose binary is missing");
    assert!(report.contains("/usr/local/bin/ringtail-span-actor"), "verify failed, but not over the missing binary\n{report}");

    // A misspelt value: verify only warns and exits 0, which verify() must
    // still count as a failure.
    let unit = stage.unit("ringtail-exporter-actor.service");
    let good = std::fs::read_to_string(&unit).unwrap();
    std::fs::write(&unit, good.replace("ProtectSystem=strict", "ProtectSystem=strickt")).unwrap();
    let report = verify(&stage, &["ringtail-exporter-actor.service"]).expect_err("verify accepted ProtectSystem=strickt");
    assert!(report.contains("strickt"), "verify failed, but not over the misspelt value\n{report}");
}

#[test]
fn exposure_scores_stay_below_their_limits() {
    if !have("systemd-analyze") {
        return;
    }
    let mut table = String::from("systemd-analyze security --offline=yes:\n");
    let mut over = Vec::new();
    for (name, limit) in EXPOSURE_LIMITS {
        let (score, report) = exposure(&systemd_dir().join(name));
        table.push_str(&format!("  {name:<34} {score:.1}  (limit {limit:.1})\n"));
        if score > *limit {
            let open: Vec<&str> = report.lines().filter(|l| l.starts_with('✗')).collect();
            over.push(format!("{name}: {score} > {limit}; open:\n{}", open.join("\n")));
        }
    }
    println!("{table}");
    assert!(over.is_empty(), "exposure above the limit:\n{}", over.join("\n"));
}

#[test]
fn actors_run_unprivileged() {
    for name in ACTORS {
        let u = Unit::ours(name);
        let binary = name.trim_end_matches(".service");
        u.expect("Service", "ExecStart", &format!("/usr/local/bin/{binary} --config /etc/ringtail/ringtail.toml"));
        u.expect("Service", "User", "ringtail");
        u.expect("Service", "Group", "ringtail");
        // Every assignment empty: a non-empty one would add to the set.
        let bounding = u.all("Service", "CapabilityBoundingSet");
        assert!(
            !bounding.is_empty() && bounding.iter().all(|v| v.is_empty()),
            "{name}: CapabilityBoundingSet= must be empty, got {bounding:?}"
        );
        let ambient = u.all("Service", "AmbientCapabilities");
        assert!(ambient.iter().all(|v| v.is_empty()), "{name}: AmbientCapabilities= must be empty, got {ambient:?}");
        assert!(u.all("Service", "SupplementaryGroups").is_empty(), "{name}: the actors need no other group");
        u.expect("Service", "NoNewPrivileges", "yes");
        u.expect("Service", "PrivateUsers", "yes");
        u.expect("Service", "ProtectSystem", "strict");
        u.expect("Service", "ProtectHome", "yes");
        u.expect("Service", "PrivateTmp", "yes");
        u.expect("Service", "ProtectProc", "invisible");
        u.expect("Service", "RuntimeDirectory", "ringtail/actors");
        u.expect("Service", "RuntimeDirectoryMode", "0750");
        u.expect("Service", "RuntimeDirectoryPreserve", "yes");
        u.expect("Service", "Type", "notify");
        u.expect("Service", "Restart", "on-failure");
    }
    let span = Unit::ours("ringtail-span-actor.service");
    span.expect("Service", "PrivateNetwork", "yes");
    span.expect("Service", "RestrictAddressFamilies", "AF_UNIX");
    span.expect("Service", "IPAddressDeny", "any");
    let exporter = Unit::ours("ringtail-exporter-actor.service");
    assert_eq!(
        exporter.words("Service", "RestrictAddressFamilies"),
        set(&["AF_UNIX", "AF_INET", "AF_INET6"]),
        "exporter: address families"
    );
    exporter.expect("Service", "EnvironmentFile", "-/etc/ringtail/otel.env");
}

/// The components are installed execute-only, so that each is non-dumpable
/// from its exec (`tests/tests/attacks_ipc.rs` races such an exporter);
/// `ringtail`, the command users run, stays readable.
#[test]
fn install_sh_installs_the_components_execute_only() {
    let Some(stage) = Stage::new() else {
        return;
    };
    for (binary, mode) in
        [("ringtail", 0o755), ("ringtail-probe-loader", 0o711), ("ringtail-span-actor", 0o711), ("ringtail-exporter-actor", 0o711)]
    {
        let path = stage.root.join("usr/local/bin").join(binary);
        let got = std::fs::metadata(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o7777;
        assert_eq!(got, mode, "{binary}: installed {got:o}, want {mode:o}");
    }
}

#[test]
fn loader_bounding_set_is_exactly_the_documented_list() {
    let u = Unit::ours(LOADER);
    let expected = set(LOADER_CAPS);
    assert_eq!(u.words("Service", "CapabilityBoundingSet"), expected, "{LOADER}: CapabilityBoundingSet=");
    assert_eq!(
        u.all("Service", "CapabilityBoundingSet").len(),
        1,
        "{LOADER}: one CapabilityBoundingSet= line, so that it reads as the whole list"
    );

    // The comment above it says why, one capability per line:
    // "#   CAP_X   why" (three spaces in; prose mentioning others has one).
    let commented: BTreeSet<String> =
        u.text.lines().filter_map(|l| l.strip_prefix("#   CAP_")?.split_once("  ").map(|(rest, _)| format!("CAP_{rest}"))).collect();
    assert_eq!(commented, expected, "{LOADER}: the capabilities explained in its comments");

    // And the table of docs/systemd.md: "| CAP_X | why | without it |".
    let doc = std::fs::read_to_string(workspace().join("docs/systemd.md")).expect("read docs/systemd.md");
    let table: BTreeSet<String> =
        doc.lines().filter_map(|l| l.strip_prefix("| CAP_")?.split_once(' ').map(|(rest, _)| format!("CAP_{rest}"))).collect();
    assert_eq!(table, expected, "docs/systemd.md: the loader's capability table");

    // Root, joining the actors' group, nothing to add, nothing to gain.
    assert!(u.all("Service", "User").is_empty(), "{LOADER}: runs as root (it owns /run/ringtail and raw.sock)");
    u.expect("Service", "SupplementaryGroups", "ringtail");
    assert!(u.all("Service", "AmbientCapabilities").iter().all(|v| v.is_empty()), "{LOADER}: root needs no ambient capabilities");
    u.expect("Service", "NoNewPrivileges", "yes");
    u.expect("Service", "ExecStart", "/usr/local/bin/ringtail-probe-loader --config /etc/ringtail/ringtail.toml");
    u.expect("Service", "RuntimeDirectory", "ringtail");
    u.expect("Service", "RuntimeDirectoryMode", "0755");
    u.expect("Service", "RuntimeDirectoryPreserve", "yes");
    u.expect("Service", "ProtectSystem", "strict");
    u.expect("Service", "ProtectHome", "yes");
    u.expect("Service", "PrivateTmp", "yes");
    u.expect("Service", "RestrictAddressFamilies", "AF_UNIX");
    u.expect("Service", "Type", "notify");
    u.expect("Service", "Restart", "on-failure");
    let filter = u.all("Service", "SystemCallFilter");
    assert!(
        filter.first().is_some_and(|f| f.split_whitespace().any(|w| w == "bpf")),
        "{LOADER}: the system call allow list must have bpf, got {filter:?}"
    );
}

#[test]
fn the_target_starts_stops_and_enables_the_three() {
    let target = Unit::ours(TARGET);
    let services = set(SERVICES);
    assert_eq!(target.words("Unit", "Wants"), services, "{TARGET}: Wants=");
    assert_eq!(target.words("Install", "Also"), services, "{TARGET}: Also=");
    target.expect("Install", "WantedBy", "multi-user.target");
    for name in SERVICES {
        let u = Unit::ours(name);
        u.expect("Unit", "PartOf", TARGET);
        u.expect("Install", "WantedBy", TARGET);
    }
    // Start consumers first, so that a full stop ends with them.
    Unit::ours(LOADER).expect("Unit", "After", "ringtail-span-actor.service");
    Unit::ours("ringtail-span-actor.service").expect("Unit", "After", "ringtail-exporter-actor.service");
}

#[test]
fn example_config_matches_the_units() {
    let config = std::fs::read_to_string(systemd_dir().join("ringtail.toml")).expect("read systemd/ringtail.toml");
    // A flat reading of the few keys the units depend on.
    let mut section = "";
    let mut keys = Vec::new();
    for line in config.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s;
        } else if let Some((k, v)) = line.split_once('=') {
            keys.push((format!("{section}.{}", k.trim()), v.trim().to_owned()));
        }
    }
    let get = |key: &str| keys.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    assert_eq!(get("actors.user"), Some("\"ringtail\""), "systemd/ringtail.toml: actors.user must be the units' User=");
    assert_eq!(get("actors.group"), Some("\"ringtail\""), "systemd/ringtail.toml: actors.group must be the loader's SupplementaryGroups=");
    assert_eq!(
        get("pipeline.runtime_dir"),
        Some("\"/run/ringtail\""),
        "systemd/ringtail.toml: runtime_dir must be the units' RuntimeDirectory="
    );

    let sysusers = std::fs::read_to_string(systemd_dir().join("sysusers.d/ringtail.conf")).expect("read sysusers.d/ringtail.conf");
    assert!(
        sysusers.lines().any(|l| l.split_whitespace().take(2).eq(["u", "ringtail"])),
        "sysusers.d/ringtail.conf must create the user ringtail:\n{sysusers}"
    );

    // Every component accepts it (each checks its part).
    let ringtail = bin_dir().join("ringtail");
    if !ringtail.exists() {
        skip(&format!(
            "{} missing (run `cargo build --workspace`): systemd/ringtail.toml not checked by the components",
            ringtail.display()
        ));
        return;
    }
    let out = Command::new(&ringtail)
        .arg("check-config")
        .arg("--config")
        .arg(systemd_dir().join("ringtail.toml"))
        .env("RINGTAIL_BIN_DIR", bin_dir())
        .output()
        .expect("run ringtail check-config");
    assert!(out.status.success(), "ringtail check-config refuses systemd/ringtail.toml\n{}", text(&out));

    // One user everywhere: `actors.user`'s default (what `ringtail run`
    // uses), the units' and sysusers.d's, and the one ./ringtail.sh makes.
    let out = Command::new(&ringtail).arg("check-config").env("RINGTAIL_BIN_DIR", bin_dir()).output().expect("run ringtail check-config");
    assert!(out.status.success(), "ringtail check-config refuses the defaults\n{}", text(&out));
    let defaults = String::from_utf8_lossy(&out.stdout).into_owned();
    let actors = defaults.split("[actors]").nth(1).unwrap_or_default();
    assert!(actors.lines().any(|l| l.trim() == "user = \"ringtail\""), "actors.user's default is not the units' user:\n{defaults}");
    let script = std::fs::read_to_string(workspace().join("ringtail.sh")).expect("read ringtail.sh");
    assert!(
        script.lines().any(|l| l.contains("--user-group ringtail") && l.trim_start().starts_with("--comment")),
        "ringtail.sh must make the user ringtail"
    );
}

/// How a loader run ended.
struct LoaderRun {
    ready: bool,
    selected: Option<usize>,
    /// TLS uprobe links the loader pinned: each is a uprobe the kernel
    /// attached (a refused attach pins nothing).
    tls_links: usize,
    log: String,
}

/// Starts the loader as root with only `caps` (setpriv, as systemd does with
/// `CapabilityBoundingSet=`), the actors' group as its only supplementary
/// group and no_new_privs, until it is ready or has exited.
fn run_loader(caps: &[&str], config: &Path, pins: &Path, actors_gid: u32, dir: &TempDir, tag: &str) -> LoaderRun {
    let bounding: String = std::iter::once("-all".to_owned())
        .chain(caps.iter().map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase())))
        .collect::<Vec<_>>()
        .join(",");
    let log_path = dir.join(&format!("loader-{tag}.log"));
    let log = std::fs::File::create(&log_path).expect("create the loader log");
    let mut loader = Proc::spawn(
        "ringtail-probe-loader",
        Command::new("setpriv")
            .arg(format!("--groups={actors_gid}"))
            .args(["--no-new-privs", "--inh-caps=-all", "--ambient-caps=-all"])
            .arg(format!("--bounding-set={bounding}"))
            .arg(bin_dir().join("ringtail-probe-loader"))
            .arg("--config")
            .arg(config)
            .stdout(Stdio::null())
            .stderr(log),
    );
    let read = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let ready = wait_until(Duration::from_secs(60), || {
        if read().contains("event=\"ready\"") {
            return Some(true);
        }
        loader.child.try_wait().ok().flatten().map(|_| false)
    })
    .unwrap_or_else(|| panic!("the loader with {bounding} neither got ready nor exited in 60 s:\n{}", read()));
    loader.stop(Duration::from_secs(10));
    let tls_links = count_tls_links(pins);
    // A loader leaves its pins (the supervisor or the unit's ExecStopPost
    // removes them): each run loads afresh.
    let _ = std::fs::remove_dir_all(pins);
    let log = read();
    let selected = log.lines().find_map(|l| l.split_once("selection seeded processes=")?.1.split_whitespace().next()?.parse().ok());
    LoaderRun { ready, selected, tls_links, log }
}

/// The pinned TLS uprobe links (`link_tls_DEV_INODE_I`; not
/// `link_tls_sock_state`, a tracepoint's) in the pin sets under `pins`.
fn count_tls_links(pins: &Path) -> usize {
    let Ok(sets) = std::fs::read_dir(pins) else { return 0 };
    let uprobe = |name: &str| {
        let fields: Vec<&str> = name.split('_').collect();
        fields.len() == 3 && fields.iter().all(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
    };
    sets.flatten()
        .filter_map(|set| std::fs::read_dir(set.path()).ok())
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_str().and_then(|n| n.strip_prefix("link_tls_")).is_some_and(uprobe))
        .count()
}

#[test]
fn loader_needs_each_capability_of_its_unit() {
    let loader = bin_dir().join("ringtail-probe-loader");
    if !loader.exists() {
        skip(&format!("{} missing (run `cargo build --workspace`): the loader's capabilities are not tried", loader.display()));
        return;
    }
    if !can_trace() || !have("setpriv") {
        return;
    }
    let caps: Vec<String> = Unit::ours(LOADER).words("Service", "CapabilityBoundingSet").into_iter().collect();
    let caps: Vec<&str> = caps.iter().map(String::as_str).collect();

    // A listener owned by another user (nobody), which only a loader with
    // CAP_DAC_READ_SEARCH finds through /proc/PID/fd.
    // SAFETY: getpwnam returns static storage or null; both ids are copied at once.
    let (uid, gid) = unsafe {
        let pw = libc::getpwnam(c"nobody".as_ptr());
        assert!(!pw.is_null(), "no user nobody");
        ((*pw).pw_uid, (*pw).pw_gid)
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a listener");
    let port = listener.local_addr().unwrap().port();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
    let mut cmd = Command::new("sleep");
    cmd.arg("300").uid(uid).gid(gid).current_dir("/");
    // SAFETY: fcntl is async-signal-safe. Clearing close-on-exec lets the
    // child keep the socket, whose only holder it is once we drop ours.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let _owner = Proc::spawn("sleep as nobody", &mut cmd);
    drop(listener);

    let dir = TempDir::new("sdcap");
    let pins = test_pin_dir();
    let config = dir.join("ringtail.toml");
    std::fs::write(
        &config,
        format!(
            "[actors]\nuser = \"nobody\"\nallow_shared_user = true\n[pipeline]\nruntime_dir = \"{}\"\n[discovery]\nopen_ports = [{port}]\n[probe]\npin_dir = \"{}\"\n",
            dir.0.display(),
            pins.display()
        ),
    )
    .expect("write the loader's config");

    // With its unit's capabilities: ready, nobody's listener selected, the
    // TLS uprobes attached to this host's OpenSSL (found in the loader's
    // library directories), and nothing kept.
    let all = run_loader(&caps, &config, &pins, gid, &dir, "all");
    assert!(all.ready, "the loader with its unit's capabilities {caps:?} did not get ready:\n{}", all.log);
    assert_eq!(all.selected, Some(1), "the loader with its unit's capabilities should select nobody's listener on {port}:\n{}", all.log);
    assert!(all.log.contains("kept=none"), "the loader should keep no capability after start:\n{}", all.log);
    assert!(
        all.tls_links > 0 && all.log.contains("event=\"tls_attached\"") && !all.log.contains("tls_attach_failed"),
        "the loader with its unit's capabilities should attach the TLS uprobes (HTTPS by default); {} links pinned:\n{}",
        all.tls_links,
        all.log
    );

    // Without each one: what docs/systemd.md says happens.
    for missing in &caps {
        let fewer: Vec<&str> = caps.iter().copied().filter(|c| c != missing).collect();
        let run = run_loader(&fewer, &config, &pins, gid, &dir, missing);
        let expected = match *missing {
            // It stands in for both: the loader runs, with HTTPS.
            "CAP_BPF" | "CAP_PERFMON" => {
                assert!(run.ready && run.tls_links > 0, "without {missing}, CAP_SYS_ADMIN should stand in for it:\n{}", run.log);
                // ...and without CAP_SYS_ADMIN as well, the loader stops.
                let fewer: Vec<&str> = fewer.iter().copied().filter(|c| *c != "CAP_SYS_ADMIN").collect();
                let run = run_loader(&fewer, &config, &pins, gid, &dir, &format!("{missing}-sys_admin"));
                assert!(!run.ready, "the loader got ready without {missing} and CAP_SYS_ADMIN:\n{}", run.log);
                assert!(
                    run.log.contains("needs CAP_BPF and CAP_PERFMON"),
                    "without {missing} and CAP_SYS_ADMIN the loader should say what it needs:\n{}",
                    run.log
                );
                continue;
            }
            // HTTPS is lost, said loudly; the rest runs (tls.enabled = false
            // and no CAP_SYS_ADMIN is the documented way to run without it).
            "CAP_SYS_ADMIN" => {
                assert!(run.ready, "the loader without CAP_SYS_ADMIN should still start:\n{}", run.log);
                assert_eq!(run.selected, Some(1), "without CAP_SYS_ADMIN the selection should not change:\n{}", run.log);
                if run.log.contains("kind=\"perf events\"") {
                    assert!(
                        run.log.contains("event=\"tls_attacher_caps\" missing=CAP_SYS_ADMIN"),
                        "the TLS attacher should say it lacks CAP_SYS_ADMIN:\n{}",
                        run.log
                    );
                    // Uprobes as perf events: perf_event_open(2) refuses them
                    // to CAP_BPF + CAP_PERFMON alone.
                    assert!(
                        run.tls_links == 0 && run.log.contains("tls_attach_failed"),
                        "without CAP_SYS_ADMIN perf-event uprobes should not attach, and the attacher should say so ({} links):\n{}",
                        run.tls_links,
                        run.log
                    );
                } else {
                    // uprobe_multi links (6.6+) need CAP_BPF and CAP_PERFMON
                    // alone: the attacher does not keep CAP_SYS_ADMIN.
                    assert!(
                        run.tls_links > 0 && !run.log.contains("tls_attach_failed") && !run.log.contains("missing=CAP_SYS_ADMIN"),
                        "without CAP_SYS_ADMIN uprobe_multi links should still attach ({} links):\n{}",
                        run.tls_links,
                        run.log
                    );
                }
                continue;
            }
            // map_files, for the attacher on 6.6+: without it a mapped
            // file is found by its name; the rest runs.
            "CAP_CHECKPOINT_RESTORE" => {
                assert!(run.ready && run.tls_links > 0, "the loader without CAP_CHECKPOINT_RESTORE should still attach:\n{}", run.log);
                if !run.log.contains("kind=\"perf events\"") {
                    assert!(run.log.contains("missing=CAP_CHECKPOINT_RESTORE"), "the TLS attacher should say it lacks it:\n{}", run.log);
                }
                continue;
            }
            "CAP_SETGID" => "cannot join the actors' group",
            "CAP_SETPCAP" => "cannot drop capabilities",
            "CAP_SYS_PTRACE" | "CAP_DAC_READ_SEARCH" => "CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH for probe.read_process_env",
            other => panic!("{LOADER} grants {other}, which this test does not know: say here what it is for"),
        };
        assert!(!run.ready, "the loader got ready without {missing}: drop it from {LOADER}\n{}", run.log);
        assert!(run.log.contains(expected), "without {missing} the loader should fail with {expected:?}:\n{}", run.log);
    }
}
