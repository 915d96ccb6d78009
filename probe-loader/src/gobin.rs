//! Where the Go TLS uprobes go (`bpf/go_tls.h`) in one Go executable.
//!
//! A Go program does not use OpenSSL: its HTTPS goes through its own
//! `crypto/tls`, compiled into the executable. ringtail reads the plaintext
//! at `crypto/tls.(*Conn).Read` (its entry, and each of its `RET`
//! instructions: Go moves goroutine stacks, so a uretprobe's rewritten return
//! address would be copied to a new stack and crash the program) and at
//! `crypto/tls.(*Conn).Write` (its entry). This module finds those places,
//! as file offsets, and says whether the eBPF side may read the socket there:
//! it follows `tls.Conn.conn → net.TCPConn.fd → netFD.pfd.Sysfd` through
//! fixed offsets ([`EXPECTED`]), so a Go release whose layout is not known
//! to match ([`LAYOUTS`]) is refused.
//!
//! # What is read
//! - the ELF header and the section headers (64-bit little-endian x86-64;
//!   other ELF files are only looked at to tell a Go program, refused as
//!   [`Refusal::NotAmd64`]);
//! - `.go.buildinfo`: the magic `\xff Go buildinf:`, then (Go 1.18+, flags
//!   bit 2) the version string inline, varint-length-prefixed, at offset 32;
//!   an older build (pointers in the header) is [`Refusal::TooOld`];
//! - the functions, by name: through `.symtab` when the file has one, else
//!   through `.gopclntab`, which every Go program keeps (the runtime needs
//!   it for stack traces) even when linked with `-s -w`: its header (magic
//!   `0xfffffff0` for Go 1.18–1.19, `0xfffffff1` since 1.20; `minLC`,
//!   `ptrSize`, then `nfunc, nfiles, textStart, funcnameOffset, cuOffset,
//!   filetabOffset, pctabOffset, pclnOffset`), its function table (`nfunc +
//!   1` pairs of `entryoff, funcoff` at `pclnOffset`; the last entry is the
//!   end of the text) and each `_func` (`entryOff u32, nameOff i32`, the
//!   name NUL-terminated at `funcnameOffset + nameOff`). Entries are offsets
//!   from `textStart`, which Go 1.26 stopped writing (it needs a
//!   relocation): when it is 0, the `.text` section's address is used, as
//!   Go's own tools do (`cmd/internal/objfile`);
//! - the machine code of both functions, decoded by `iced-x86` (never a
//!   byte scan: `0xC3` is also an immediate, a displacement, a ModRM):
//!   every near `ret` of Read is a return uprobe.
//!
//! Before any uprobe is placed, each entry is checked to be one: Go's
//! register ABI keeps `g` in R14, and a function with a frame (both of
//! these) starts by comparing the stack pointer with `g.stackguard0`
//! (`cmp rsp, [r14+0x10]`, or `lea r12, [rsp-N]; cmp r12, [r14+0x10]`),
//! then jumps to grow the stack (`jbe`). A uprobe is an `int3` written over
//! an instruction's first byte: one placed inside an instruction would
//! corrupt the program, so an address that does not look like that is
//! refused ([`Refusal::NoPrologue`]), and so is a function with an
//! instruction the decoder does not know. The entry probes go on the
//! instruction after that jump: a call that grows the stack runs the
//! first instructions twice ([`stack_check_end`]).
//!
//! # Hostile files
//! The executable is another process's to choose. It is read by bounded
//! `pread`s only (never mapped: a file shortened meanwhile reads short, it
//! cannot fault), every size and offset by checked arithmetic, no more than
//! [`MAX_SECTION`] of any section, and large tables are streamed through a
//! [`Window`] of [`WINDOW`] bytes with a budget of reads: memory stays
//! at a few megabytes (the section headers, at most 4 MiB, are the most)
//! and time proportional to the sections read, whatever the file says.
//! The reader it is given (`crate::budget::Limited`) refuses a table in a
//! hole of a sparse file and stops at its job's bytes and time.
//! Whatever is wrong before the file is known to be Go makes it "not Go"
//! (`Ok(None)`); after, it is a refusal.

#[cfg(any(test, fuzzing))]
use std::fs::File;

use crate::budget::ReadAt;

use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};

/// The function whose entry and returns are probed.
pub const READ: &str = "crypto/tls.(*Conn).Read";
/// The function whose entry is probed.
pub const WRITE: &str = "crypto/tls.(*Conn).Write";
/// The function Read calls to read a record: its call for a waiting
/// close_notify, after Read copied its bytes, is probed on the lazy path
/// ([`Lazy`]).
pub const READ_RECORD: &str = "crypto/tls.(*Conn).readRecordOrCCS";
/// The function that ends a connection: its entry is probed on the lazy
/// path (the last Read's bytes, when nothing else follows them).
pub const CLOSE: &str = "crypto/tls.(*Conn).Close";
/// The functions looked for, in this order.
const NAMES: [&str; 4] = [READ, WRITE, READ_RECORD, CLOSE];
/// Most `RET`s of Read attached to (each one is a uprobe; Go's compilers
/// give it 7).
pub const MAX_RETURNS: usize = 32;
/// Largest section read from (a `.gopclntab` is about a third of a Go
/// executable: this admits executables of well over 100 MiB).
pub const MAX_SECTION: u64 = 64 << 20;
/// Largest function decoded (Read is under 1 KiB).
pub const MAX_FUNCTION: u64 = 64 << 10;
/// Bytes read at a time when streaming a table.
pub const WINDOW: usize = 64 << 10;
/// Largest section header table (65535 headers of 64 bytes).
const MAX_SECTION_HEADERS: u64 = 4 << 20;
/// Longest version string read from `.go.buildinfo`.
const MAX_VERSION: u64 = 256;
/// Most places a wanted name may be written in a string table: a real
/// binary has one.
const MAX_NAME_COPIES: usize = 16;

/// Where the Go TLS uprobes go in one executable (all file offsets, as the
/// uprobes take them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoTls {
    /// From `.go.buildinfo`, e.g. "go1.24.11".
    pub version: String,
    /// `crypto/tls.(*Conn).Read`'s entry probe: its first instruction past
    /// the stack check (see [`stack_check_end`]).
    pub read: u64,
    /// Each `RET` instruction of Read, in address order (at most
    /// [`MAX_RETURNS`]).
    pub read_returns: Vec<u64>,
    /// `crypto/tls.(*Conn).Write`'s entry probe: its first instruction
    /// past the stack check.
    pub write: u64,
    /// Found through `.symtab` (false: through `.gopclntab`, a stripped
    /// binary).
    pub symbols: bool,
    /// Where the lazy path's probes go, if it can be taken.
    pub lazy: Option<Lazy>,
}

/// The lazy path (`bpf/go_tls.h`: Read's and Write's entries alone, no
/// return probes), for a release whose `tls.Conn.input` offset is known
/// ([`INPUTS`]) and whose Read has the close_notify call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lazy {
    /// Read's call of `readRecordOrCCS` for a close_notify that waits
    /// after the bytes it returns (file offset of the `call`).
    pub alert: u64,
    /// `crypto/tls.(*Conn).Close`'s entry probe (past its stack check).
    pub close: u64,
    /// The offset of `tls.Conn.input` (a `bytes.Reader`).
    pub input: u64,
}

/// The struct offsets the eBPF side reads the socket fd through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// `tls.Conn.conn` (the `net.Conn` interface: its data word is the
    /// `*net.TCPConn`).
    pub conn: u64,
    /// `net.TCPConn` → its embedded `conn.fd` (the `*netFD`).
    pub tcp_fd: u64,
    /// `netFD.pfd.Sysfd` (the `int` file descriptor).
    pub sysfd: u64,
}

/// The layout `bpf/go_tls.h` reads: a Go release whose [`LAYOUTS`] entry
/// differs is refused.
pub const EXPECTED: Layout = Layout { conn: 0, tcp_fd: 0, sysfd: 16 };

/// Each Go release's layout, by minor version (18 for go1.18). 21, 24 and
/// 27 were printed by `tests/fixtures/go/layout.go` with those toolchains
/// (and are checked by this module's tests wherever they are installed);
/// the others are taken from Go's source history: `tls.Conn` has begun
/// with `conn net.Conn`, `net.TCPConn` with its embedded `conn{fd *netFD}`,
/// `netFD` with `pfd poll.FD` and `poll.FD` with `fdmu fdMutex` (16 bytes)
/// then `Sysfd int` since Go 1.9. A release newer than the last line is
/// refused ([`Refusal::UnknownLayout`]): when Go releases, run
/// `go run tests/fixtures/go/layout.go` with the new toolchain and add the
/// line it prints here (if it differs from [`EXPECTED`], `bpf/go_tls.h`
/// needs to learn the new layout first).
pub const LAYOUTS: &[(u32, Layout)] = &[
    (18, EXPECTED),
    (19, EXPECTED),
    (20, EXPECTED),
    (21, EXPECTED),
    (22, EXPECTED),
    (23, EXPECTED),
    (24, EXPECTED),
    (25, EXPECTED),
    (26, EXPECTED),
    (27, EXPECTED),
];

/// The offset of `tls.Conn.input` (a `bytes.Reader`, whose `s` and `i`
/// are at 0 and 24 in every release), by minor version, as
/// `tests/fixtures/go/layout.go` printed it with each toolchain the test
/// set-up installs. A release not here takes Read's return probes (five
/// hits a request, not three): when Go releases, add its line.
pub const INPUTS: &[(u32, u64)] = &[(21, 720), (24, 728), (27, 736)];

/// Why a Go executable is not attached (each a label of a counter
/// `ringtail_go_binaries_refused_total{reason}`, `tls::Refused`).
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// Built before Go 1.18 (no inline version; a stack-based ABI before
    /// 1.17).
    #[error("built by {version}, before go1.18")]
    TooOld { version: String },
    /// A release (or a build: an rc, a devel toolchain, an experiment)
    /// whose struct layout is not known to be [`EXPECTED`].
    #[error("built by {version}, whose crypto/tls and net struct layout ringtail does not know")]
    UnknownLayout { version: String },
    /// Links one of the two functions but not the other.
    #[error("built by {version}, links crypto/tls but has no {function}")]
    NoFunction { version: String, function: &'static str },
    /// A function's address is not a Go function's entry.
    #[error("built by {version}: {function} does not start with Go's stack check; not an entry")]
    NoPrologue { version: String, function: &'static str },
    /// Read has more returns than [`MAX_RETURNS`].
    #[error("built by {version}: {found} returns in crypto/tls.(*Conn).Read, over {MAX_RETURNS}")]
    TooManyReturns { version: String, found: usize },
    /// A Go program for another machine than x86-64.
    #[error("built by {version} for ELF machine {machine}, not x86-64")]
    NotAmd64 { version: String, machine: u16 },
    /// Malformed, truncated, or beyond this module's caps.
    #[error("malformed Go executable: {what}")]
    BadElf { what: &'static str },
    /// The file could not be read.
    #[error("cannot read the executable")]
    Io {
        #[source]
        source: std::io::Error,
    },
}

impl Refusal {
    /// Every [`Refusal::reason`], in variant order.
    pub const REASONS: [&'static str; 8] =
        ["too_old", "unknown_layout", "no_function", "no_prologue", "too_many_returns", "not_amd64", "bad_elf", "io"];

    /// The counter's `reason` label.
    pub fn reason(&self) -> &'static str {
        let at = match self {
            Refusal::TooOld { .. } => 0,
            Refusal::UnknownLayout { .. } => 1,
            Refusal::NoFunction { .. } => 2,
            Refusal::NoPrologue { .. } => 3,
            Refusal::TooManyReturns { .. } => 4,
            Refusal::NotAmd64 { .. } => 5,
            Refusal::BadElf { .. } => 6,
            Refusal::Io { .. } => 7,
        };
        Self::REASONS[at]
    }
}

fn bad(what: &'static str) -> Refusal {
    Refusal::BadElf { what }
}

/// A read error: a file shorter than its headers say is malformed.
fn io(source: std::io::Error) -> Refusal {
    if source.kind() == std::io::ErrorKind::UnexpectedEof {
        bad("truncated")
    } else {
        Refusal::Io { source }
    }
}

/// `len` bytes at `offset`, refused over `cap`.
fn pread(file: &dyn ReadAt, offset: u64, len: u64, cap: u64, what: &'static str) -> Result<Vec<u8>, Refusal> {
    if len > cap {
        return Err(bad(what));
    }
    offset.checked_add(len).ok_or_else(|| bad(what))?;
    let mut buf = vec![0; usize::try_from(len).map_err(|_| bad(what))?];
    file.read_exact_at(&mut buf, offset).map_err(io)?;
    Ok(buf)
}

/// Unsigned `width`-byte integer at `at` in `b`, of either byte order.
fn uint(b: &[u8], at: usize, width: usize, big: bool) -> Option<u64> {
    let s = b.get(at..at.checked_add(width)?)?;
    let fold = |v: u64, byte: &u8| v << 8 | u64::from(*byte);
    Some(if big { s.iter().fold(0, fold) } else { s.iter().rev().fold(0, fold) })
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    uint(b, at, 4, false).map(|v| v as u32)
}

fn le64(b: &[u8], at: usize) -> Option<u64> {
    uint(b, at, 8, false)
}

/// One section header.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Section {
    name: Vec<u8>,
    kind: u32,
    flags: u64,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
}

const SHT_SYMTAB: u32 = 2;
const SHT_NOBITS: u32 = 8;
const SHF_ALLOC: u64 = 2;
const SHF_EXECINSTR: u64 = 4;
const EM_X86_64: u16 = 62;

/// An ELF file's header fields and section headers.
struct Elf<'f> {
    file: &'f dyn ReadAt,
    machine: u16,
    /// ELF64, little-endian, x86-64.
    amd64: bool,
    sections: Vec<Section>,
}

impl<'f> Elf<'f> {
    /// None: not an ELF file whose section headers can be read.
    fn read(file: &'f dyn ReadAt) -> Option<Self> {
        let head = pread(file, 0, 64, 64, "header").ok()?;
        if head[..4] != *b"\x7fELF" {
            return None;
        }
        // EI_CLASS: 1 = 32-bit, 2 = 64-bit; EI_DATA: 1 = little-, 2 = big-endian.
        let (wide, big) = match (head[4], head[5]) {
            (c @ (1 | 2), d @ (1 | 2)) => (c == 2, d == 2),
            _ => return None,
        };
        let field = |at: usize, width: usize| uint(&head, at, width, big);
        let machine = field(0x12, 2)? as u16;
        let (shoff, shentsize, shnum, shstrndx, min) = if wide {
            (field(0x28, 8)?, field(0x3a, 2)?, field(0x3c, 2)?, field(0x3e, 2)?, 64)
        } else {
            (field(0x20, 4)?, field(0x2e, 2)?, field(0x30, 2)?, field(0x32, 2)?, 40)
        };
        if shentsize < min || shnum == 0 {
            return None;
        }
        let table = pread(file, shoff, shentsize.checked_mul(shnum)?, MAX_SECTION_HEADERS, "section headers").ok()?;
        let strings_at = |header: &[u8]| -> Option<(u64, u64)> {
            let f = |at: usize| uint(header, at, if wide { 8 } else { 4 }, big);
            if wide {
                Some((f(0x18)?, f(0x20)?))
            } else {
                Some((f(0x10)?, f(0x14)?))
            }
        };
        let names = table.chunks_exact(shentsize as usize).nth(shstrndx as usize).and_then(strings_at)?;
        let names = pread(file, names.0, names.1, 1 << 20, ".shstrtab").ok()?;
        let mut sections = Vec::with_capacity(shnum as usize);
        for header in table.chunks_exact(shentsize as usize) {
            let f = |at: usize, width: usize| uint(header, at, width, big);
            let w = if wide { 8 } else { 4 };
            let (flags, addr, (offset, size), link) = if wide {
                (f(0x08, w)?, f(0x10, w)?, strings_at(header)?, f(0x28, 4)?)
            } else {
                (f(0x08, w)?, f(0x0c, w)?, strings_at(header)?, f(0x18, 4)?)
            };
            let rest = usize::try_from(f(0, 4)?).ok().and_then(|at| names.get(at..)).unwrap_or_default();
            let name = rest[..rest.iter().take(64).position(|b| *b == 0).unwrap_or(0)].to_vec();
            sections.push(Section { name, kind: f(4, 4)? as u32, flags, addr, offset, size, link: link as u32 });
        }
        let amd64 = wide && !big && machine == EM_X86_64;
        Some(Elf { file, machine, amd64, sections })
    }

    fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name.as_bytes())
    }

    /// The file offset of `len` bytes at virtual address `addr`, through
    /// the loaded section holding all of them (executable ones only, if
    /// `code`).
    fn offset_of(&self, addr: u64, len: u64, code: bool) -> Option<u64> {
        let end = addr.checked_add(len)?;
        let s = self.sections.iter().find(|s| {
            s.flags & SHF_ALLOC != 0
                && s.kind != SHT_NOBITS
                && (!code || s.flags & SHF_EXECINSTR != 0)
                && s.addr <= addr
                && s.addr.checked_add(s.size).is_some_and(|e| end <= e)
        })?;
        (addr - s.addr).checked_add(s.offset)
    }
}

/// What `.go.buildinfo` says.
#[derive(Debug, PartialEq, Eq)]
enum Build {
    /// Go 1.18+: the version, inline.
    Inline(String),
    /// Before Go 1.18: pointers to the version (read if they can be).
    Pointers(String),
}

const BUILDINFO_MAGIC: &[u8; 14] = b"\xff Go buildinf:";

/// The build information; None: the section does not begin with the magic
/// (not Go).
fn build_info(elf: &Elf, section: &Section) -> Result<Option<Build>, Refusal> {
    let len = section.size.min(32 + 10 + MAX_VERSION);
    let head = pread(elf.file, section.offset, len, len, ".go.buildinfo")?;
    if head.len() < 32 || head[..14] != *BUILDINFO_MAGIC {
        return Ok(None);
    }
    let (ptr_size, flags) = (head[14], head[15]);
    if flags & 2 == 0 {
        let version = pointed_version(elf, &head, ptr_size, flags & 1 == 1).unwrap_or_else(|| "an unknown version".to_string());
        return Ok(Some(Build::Pointers(version)));
    }
    let (len, n) = uvarint(&head[32..]).ok_or_else(|| bad("the version's length in .go.buildinfo"))?;
    let start = 32 + n;
    let version = usize::try_from(len).ok().and_then(|len| head.get(start..start.checked_add(len)?));
    let version = version.filter(|v| !v.is_empty()).ok_or_else(|| bad("the version in .go.buildinfo"))?;
    Ok(Some(Build::Inline(String::from_utf8_lossy(version).into_owned())))
}

/// The version string a pre-1.18 header points to: a Go string (data
/// pointer, length) at the address in the header's word 16.
fn pointed_version(elf: &Elf, head: &[u8], ptr_size: u8, big: bool) -> Option<String> {
    let w = usize::from(ptr_size);
    if w != 4 && w != 8 {
        return None;
    }
    let at = uint(head, 16, w, big)?;
    let string = pread(elf.file, elf.offset_of(at, 2 * w as u64, false)?, 2 * w as u64, 16, "version").ok()?;
    let (data, len) = (uint(&string, 0, w, big)?, uint(&string, w, w, big)?);
    let len = len.min(64);
    let bytes = pread(elf.file, elf.offset_of(data, len, false)?, len, 64, "version").ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Go's `binary.Uvarint`: the value and the bytes it took.
fn uvarint(b: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, byte) in b.iter().take(10).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// The minor version of a release "go1.N" or "go1.N.P"; None for anything
/// else (an rc, a beta, a devel build, an experiment suffix " X:...").
fn release_minor(version: &str) -> Option<u32> {
    let rest = version.strip_prefix("go1.")?;
    let (minor, patch) = rest.split_once('.').map_or((rest, None), |(m, p)| (m, Some(p)));
    let digits = |s: &str| !s.is_empty() && s.len() <= 6 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(minor) || !patch.is_none_or(digits) {
        return None;
    }
    minor.parse().ok()
}

/// Whether `version`'s layout is [`EXPECTED`].
fn check_layout(version: &str) -> Result<(), Refusal> {
    let unknown = || Refusal::UnknownLayout { version: version.to_string() };
    let minor = release_minor(version).ok_or_else(unknown)?;
    if minor < 18 {
        return Err(Refusal::TooOld { version: version.to_string() });
    }
    match LAYOUTS.iter().find(|(m, _)| *m == minor) {
        Some((_, layout)) if *layout == EXPECTED => Ok(()),
        _ => Err(unknown()),
    }
}

/// A region of the file read through a cached window of [`WINDOW`] bytes;
/// each refill spends one of `budget` reads, so that a table pointing all
/// over the file costs bounded time.
pub(crate) struct Window<'f> {
    file: &'f dyn ReadAt,
    start: u64,
    size: u64,
    at: u64,
    buf: Vec<u8>,
    budget: u64,
}

impl<'f> Window<'f> {
    /// The region `[start, start + size)`, read at most about twice over
    /// when read in order.
    pub(crate) fn new(file: &'f dyn ReadAt, start: u64, size: u64) -> Result<Self, Refusal> {
        if size > MAX_SECTION {
            return Err(bad("a section over 64 MiB"));
        }
        start.checked_add(size).ok_or_else(|| bad("a section past the end"))?;
        Ok(Window { file, start, size, at: 0, buf: Vec::new(), budget: 2 * (size / WINDOW as u64) + 64 })
    }

    /// Up to `len` bytes at `offset` into the region (fewer at its end,
    /// none past it); `len` is at most [`WINDOW`].
    pub(crate) fn bytes(&mut self, offset: u64, len: usize) -> Result<&[u8], Refusal> {
        if offset >= self.size {
            return Ok(&[]);
        }
        let len = (len.min(WINDOW) as u64).min(self.size.saturating_sub(offset));
        let cached = offset >= self.at && offset + len <= self.at + self.buf.len() as u64;
        if !cached {
            self.budget = self.budget.checked_sub(1).ok_or_else(|| bad("a table read all over the file"))?;
            let n = (WINDOW as u64).min(self.size.saturating_sub(offset));
            self.buf.resize(n as usize, 0);
            self.file.read_exact_at(&mut self.buf, self.start + offset).map_err(io)?;
            self.at = offset;
        }
        let from = (offset - self.at) as usize;
        Ok(&self.buf[from..from + len as usize])
    }
}

/// Each place in a string region where `names[i]` is written,
/// NUL-terminated (a name may be the tail of a longer string: ELF string
/// tables share tails), read front to back.
pub(crate) fn find_names(window: &mut Window, names: &[&str]) -> Result<Vec<Vec<u64>>, Refusal> {
    let longest = names.iter().map(|n| n.len()).max().unwrap_or(0) as u64;
    let step = WINDOW as u64 - longest - 1;
    let mut found = vec![Vec::new(); names.len()];
    let mut chunk = 0u64;
    while chunk < window.size {
        // The NULs in [chunk, chunk + step), with the name bytes before them.
        let from = chunk.saturating_sub(longest);
        let ahead = (chunk - from) as usize;
        let buf = window.bytes(from, WINDOW)?;
        let end = buf.len().min(ahead + step as usize);
        for nul in (ahead..end).filter(|&i| buf[i] == 0) {
            for (name, at) in names.iter().zip(found.iter_mut()) {
                let n = name.len();
                if nul >= n && buf[nul - n..nul] == *name.as_bytes() {
                    if at.len() == MAX_NAME_COPIES {
                        return Err(bad("a function name written too many times"));
                    }
                    at.push(from + (nul - n) as u64);
                }
            }
        }
        chunk += step;
    }
    Ok(found)
}

/// A function: its virtual address and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Func {
    addr: u64,
    size: u64,
}

/// [`NAMES`] through `.symtab`; None: the file has none.
fn by_symtab(elf: &Elf) -> Result<Option<[Option<Func>; 4]>, Refusal> {
    let Some(symtab) = elf.sections.iter().find(|s| s.kind == SHT_SYMTAB) else { return Ok(None) };
    let strtab = elf.sections.get(symtab.link as usize).ok_or_else(|| bad("the symbol table's strings"))?;
    let names = find_names(&mut Window::new(elf.file, strtab.offset, strtab.size)?, &NAMES)?;
    let mut symbols = Window::new(elf.file, symtab.offset, symtab.size)?;
    let mut found = [None, None, None, None];
    const STT_FUNC: u8 = 2;
    let mut at = 0;
    // Elf64_Sym: st_name u32, st_info u8, st_other u8, st_shndx u16, st_value u64, st_size u64
    while at + 24 <= symtab.size && found.iter().any(Option::is_none) {
        let sym = symbols.bytes(at, 24)?;
        at += 24;
        let name = u64::from(le32(sym, 0).unwrap_or_default());
        if sym[4] & 0xf != STT_FUNC {
            continue;
        }
        for (slot, offsets) in found.iter_mut().zip(&names) {
            if slot.is_none() && offsets.contains(&name) {
                let size = le64(sym, 16).unwrap_or_default();
                if size == 0 {
                    return Err(bad("a function symbol without a size"));
                }
                *slot = Some(Func { addr: le64(sym, 8).unwrap_or_default(), size });
            }
        }
    }
    Ok(Some(found))
}

const PCLNTAB_118: u32 = 0xffff_fff0;
const PCLNTAB_120: u32 = 0xffff_fff1;
/// Go 1.2–1.15 and 1.16–1.17.
const PCLNTAB_OLD: [u32; 2] = [0xffff_fffb, 0xffff_fffa];

/// [`NAMES`] through `.gopclntab` (`version` for refusals).
fn by_pclntab(elf: &Elf, version: &str) -> Result<[Option<Func>; 4], Refusal> {
    let pcln = elf.section(".gopclntab").or_else(|| elf.section(".data.rel.ro.gopclntab")).ok_or_else(|| bad("no .gopclntab section"))?;
    let mut table = Window::new(elf.file, pcln.offset, pcln.size)?;
    let head = table.bytes(0, 8 + 8 * 8)?.to_vec();
    let magic = le32(&head, 0).ok_or_else(|| bad("a short .gopclntab"))?;
    if PCLNTAB_OLD.contains(&magic) {
        return Err(Refusal::TooOld { version: version.to_string() });
    }
    if magic != PCLNTAB_118 && magic != PCLNTAB_120 {
        return Err(Refusal::UnknownLayout { version: version.to_string() });
    }
    // pad, pad, minLC (1 on x86), ptrSize
    if head.get(4..8) != Some(&[0, 0, 1, 8][..]) {
        return Err(bad("the .gopclntab header"));
    }
    let word = |i: usize| le64(&head, 8 + 8 * i).ok_or_else(|| bad("a short .gopclntab header"));
    let (nfunc, text_start, funcnames, functab) = (word(0)?, word(2)?, word(3)?, word(7)?);
    // The functab: nfunc + 1 entries, (entryoff, funcoff) but the last.
    let entries = nfunc.checked_mul(8).and_then(|n| n.checked_add(4)).and_then(|n| n.checked_add(functab));
    if entries.is_none_or(|end| end > pcln.size) || funcnames >= pcln.size {
        return Err(bad("the .gopclntab offsets"));
    }
    let text = match text_start {
        0 => elf.section(".text").ok_or_else(|| bad("no .text section"))?.addr,
        start => start,
    };
    let names = find_names(&mut Window::new(elf.file, pcln.offset + funcnames, pcln.size - funcnames)?, &NAMES)?;
    let mut funcs = Window::new(elf.file, pcln.offset, pcln.size)?;
    let mut found = [None, None, None, None];
    for i in 0..nfunc {
        let pair = table.bytes(functab + 8 * i, 12)?;
        let (entry, funcoff, next) = (le32(pair, 0), le32(pair, 4), le32(pair, 8));
        let (Some(entry), Some(funcoff), Some(next)) = (entry, funcoff, next) else { return Err(bad("a short .gopclntab")) };
        let func = funcs.bytes(functab + u64::from(funcoff), 8)?;
        let (Some(entry_again), Some(name)) = (le32(func, 0), le32(func, 4)) else { return Err(bad("a _func past .gopclntab")) };
        if entry_again != entry {
            return Err(bad("a _func of another entry than its functab's"));
        }
        for (slot, offsets) in found.iter_mut().zip(&names) {
            if slot.is_none() && offsets.contains(&u64::from(name)) {
                let size = next.checked_sub(entry).filter(|s| *s > 0).ok_or_else(|| bad("an unsorted .gopclntab"))?;
                let addr = text.checked_add(u64::from(entry)).ok_or_else(|| bad("a function past the address space"))?;
                *slot = Some(Func { addr, size: u64::from(size) });
            }
        }
        if found.iter().all(Option::is_some) {
            break;
        }
    }
    Ok(found)
}

/// The machine code of `func`: its file offset and bytes (at most
/// `limit`).
fn code(elf: &Elf, func: Func, limit: u64) -> Result<(u64, Vec<u8>), Refusal> {
    if func.size > MAX_FUNCTION {
        return Err(bad("a function over 64 KiB"));
    }
    let offset = elf.offset_of(func.addr, func.size, true).ok_or_else(|| bad("a function outside the executable sections"))?;
    let len = func.size.min(limit);
    Ok((offset, pread(elf.file, offset, len, MAX_FUNCTION, "a function")?))
}

/// Where the body of a Go function with a frame begins in its `code`:
/// the instruction after its stack check, a compare of the stack pointer
/// with `g.stackguard0` (`[r14+0x10]`) among the first four instructions,
/// then the conditional jump to the stack growth (`jbe`, Go's `JLS`).
/// None when `code` does not start so.
///
/// The entry probes go there, not on the first instruction: a goroutine
/// whose stack is too small jumps to `runtime.morestack`, which copies the
/// stack and starts the function again from its first instruction — a
/// probe there would see the same call twice (a Write walked twice puts
/// HTTP/2's framing out of step: seen under load, a 1 MiB answer read as
/// thousands of empty frames). The arguments are still in their registers
/// there: the check only compares (R12 is no argument register).
fn stack_check_end(code: &[u8]) -> Option<u64> {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut instr = Instruction::default();
    let mut compared = false;
    for _ in 0..5 {
        if !decoder.can_decode() {
            return None;
        }
        decoder.decode_out(&mut instr);
        if instr.is_invalid() {
            return None;
        }
        if compared {
            return (instr.mnemonic() == Mnemonic::Jbe).then_some(instr.next_ip());
        }
        compared = instr.mnemonic() == Mnemonic::Cmp && instr.memory_base() == Register::R14 && instr.memory_displacement64() == 0x10;
    }
    None
}

/// The offsets in `code` of each near `ret` (`C3`, `C2 iw`); an invalid
/// or cut instruction is an error.
fn returns(code: &[u8]) -> Result<Vec<u64>, Refusal> {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut instr = Instruction::default();
    let mut found = Vec::new();
    while decoder.can_decode() {
        decoder.decode_out(&mut instr);
        if instr.is_invalid() {
            return Err(bad("an invalid instruction in crypto/tls.(*Conn).Read"));
        }
        if instr.mnemonic() == Mnemonic::Ret {
            found.push(instr.ip());
        }
    }
    Ok(found)
}

/// Where the Go TLS uprobes go in `file`. None: not a Go executable (as
/// far as can be told: an unreadable ELF is not recognised), or one that
/// does not link crypto/tls: nothing to do, no refusal.
pub fn inspect(file: &dyn ReadAt) -> Result<Option<GoTls>, Refusal> {
    let Some(elf) = Elf::read(file) else { return Ok(None) };
    let Some(info) = elf.section(".go.buildinfo") else { return Ok(None) };
    let build = match build_info(&elf, info) {
        Ok(Some(build)) => build,
        Ok(None) => return Ok(None),
        Err(_) if !elf.amd64 => return Err(Refusal::NotAmd64 { version: "an unknown version".to_string(), machine: elf.machine }),
        Err(refusal) => return Err(refusal),
    };
    let version = match build {
        Build::Inline(version) | Build::Pointers(version) if !elf.amd64 => return Err(Refusal::NotAmd64 { version, machine: elf.machine }),
        Build::Pointers(version) => {
            // Not attached either way: refused only if it links crypto/tls,
            // as far as a symbol table says.
            return match by_symtab(&elf) {
                Ok(Some([None, None, ..])) => Ok(None),
                _ => Err(Refusal::TooOld { version }),
            };
        }
        Build::Inline(version) => version,
    };
    let (funcs, symbols) = match by_symtab(&elf)? {
        Some([None, None, ..]) | None => (by_pclntab(&elf, &version)?, false),
        Some(found) => (found, true),
    };
    let [read, write] = match funcs {
        [None, None, ..] => return Ok(None),
        [Some(read), Some(write), ..] => [read, write],
        [None, ..] => return Err(Refusal::NoFunction { version, function: READ }),
        [_, None, ..] => return Err(Refusal::NoFunction { version, function: WRITE }),
    };
    check_layout(&version)?;
    let (write_at, write_code) = code(&elf, write, 32)?;
    let Some(write_body) = stack_check_end(&write_code) else {
        return Err(Refusal::NoPrologue { version, function: WRITE });
    };
    let (read_at, read_code) = code(&elf, read, MAX_FUNCTION)?;
    let Some(read_body) = stack_check_end(&read_code) else {
        return Err(Refusal::NoPrologue { version, function: READ });
    };
    let found = read_returns(&version, &read_code)?;
    if found.first().is_some_and(|&r| r < read_body) {
        return Err(bad("a return before crypto/tls.(*Conn).Read's stack check"));
    }
    let read_returns = found.iter().map(|r| read_at + r).collect();
    let input = release_minor(&version).and_then(|m| INPUTS.iter().find(|(minor, _)| *minor == m)).map(|(_, off)| *off);
    let lazy = match (input, funcs[2], funcs[3]) {
        // Any doubt about Close or the call: entry and returns, as before.
        (Some(input), Some(record), Some(close)) => {
            let close = code(&elf, close, 32).ok().and_then(|(at, code)| stack_check_end(&code).map(|body| at + body));
            match (alert_call(&read_code, read.addr, record.addr), close) {
                (Some(at), Some(close)) => Some(Lazy { alert: read_at + at, close, input }),
                _ => None,
            }
        }
        _ => None,
    };
    Ok(Some(GoTls { version, read: read_at + read_body, read_returns, write: write_at + write_body, symbols, lazy }))
}

/// Where, in Read's `code` (at address `at`), Read calls `record`
/// (`readRecordOrCCS`) for a close_notify after copying its bytes: Read
/// calls it twice, in its loop for a record and then in that branch, with
/// another call (the copy, `runtime.memmove`) between them. The second
/// call's offset; None for any other shape (the lazy path is not taken).
fn alert_call(code: &[u8], at: u64, record: u64) -> Option<u64> {
    let mut decoder = Decoder::with_ip(64, code, at, DecoderOptions::NONE);
    let mut instr = Instruction::default();
    let mut calls = Vec::new();
    let mut between = false;
    while decoder.can_decode() {
        decoder.decode_out(&mut instr);
        if instr.is_invalid() {
            return None;
        }
        if instr.mnemonic() != Mnemonic::Call {
            continue;
        }
        if instr.op0_kind() == OpKind::NearBranch64 && instr.near_branch64() == record {
            calls.push(instr.ip() - at);
        } else if calls.len() == 1 {
            between = true;
        }
    }
    (calls.len() == 2 && between).then(|| calls[1])
}

/// The returns of Read's `code`, as offsets into it: at least one, at
/// most [`MAX_RETURNS`].
fn read_returns(version: &str, code: &[u8]) -> Result<Vec<u64>, Refusal> {
    let found = returns(code)?;
    if found.len() > MAX_RETURNS {
        return Err(Refusal::TooManyReturns { version: version.to_string(), found: found.len() });
    }
    if found.is_empty() {
        return Err(bad("crypto/tls.(*Conn).Read without a return"));
    }
    Ok(found)
}

/// The fuzz target's check (`span-actor/fuzz/fuzz_targets/go_binary.rs`;
/// this module's tests replay it over its seeds): whatever an executable
/// holds, [`inspect`] returns, and what it accepts is inside the file, in a
/// known layout, with 1 to [`MAX_RETURNS`] returns in order within Read,
/// and the lazy path's probes (if any) inside Read and the file.
#[cfg(any(test, fuzzing))]
pub fn check(data: &[u8]) {
    check_result(&inspect(&scratch_file(data)), data.len() as u64);
}

/// What [`check`] asserts of [`inspect`]'s answer for a file of `len` bytes.
#[cfg(any(test, fuzzing))]
fn check_result(result: &Result<Option<GoTls>, Refusal>, len: u64) {
    match result {
        Ok(Some(go)) => {
            assert!(go.read < len && go.write < len, "{go:?} in {len} bytes");
            assert!((1..=MAX_RETURNS).contains(&go.read_returns.len()), "{go:?}");
            assert!(go.read_returns.windows(2).all(|w| w[0] < w[1]), "{go:?}");
            assert!(go.read_returns.iter().all(|r| (go.read..go.read + MAX_FUNCTION).contains(r) && *r < len), "{go:?}");
            assert!(check_layout(&go.version).is_ok(), "{go:?}");
            if let Some(lazy) = go.lazy {
                assert!(go.read < lazy.alert && lazy.alert < go.read + MAX_FUNCTION && lazy.alert + 5 <= len, "{go:?}");
                assert!(lazy.close < len, "{go:?}");
                assert!(INPUTS.iter().any(|(_, off)| *off == lazy.input), "{go:?}");
            }
        }
        Ok(None) => {}
        Err(refusal) => {
            assert!(Refusal::REASONS.contains(&refusal.reason()));
            assert!(!refusal.to_string().is_empty());
        }
    }
}

/// `data` in a file of its own, already unlinked.
#[cfg(any(test, fuzzing))]
fn scratch_file(data: &[u8]) -> File {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!("ringtail-gobin-check-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let path = std::env::temp_dir().join(name);
    let mut file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).expect("a scratch file");
    std::fs::remove_file(&path).expect("the scratch file unlinked");
    file.write_all(data).expect("the scratch file written");
    file
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::OnceLock;

    /// A client that calls `(*tls.Conn).Write` and `Read` (never run: only
    /// its code is looked at).
    const TLS_PROGRAM: &str = r#"package main

import (
	"crypto/tls"
	"os"
)

func main() {
	c, err := tls.Dial("tcp", "127.0.0.1:1", &tls.Config{ServerName: "localhost"})
	if err != nil {
		os.Exit(1)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		os.Exit(2)
	}
	buf := make([]byte, 4096)
	n, _ := c.Read(buf)
	os.Stdout.Write(buf[:n])
}
"#;

    /// A Go program without crypto/tls.
    const PLAIN_PROGRAM: &str = "package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.WriteString(\"plain\\n\") }\n";

    /// One toolchain and what the tests built with it.
    struct Toolchain {
        go: PathBuf,
        /// What `go version` says, e.g. "go1.24.11".
        version: String,
        /// The TLS program: default, `-ldflags=-s -w`, `-buildmode=pie`, both.
        default: PathBuf,
        stripped: PathBuf,
        pie: PathBuf,
        pie_stripped: PathBuf,
        /// [`PLAIN_PROGRAM`], default flags.
        plain: PathBuf,
    }

    impl Toolchain {
        /// (name, binary, has a symbol table) of each TLS build.
        fn builds(&self) -> [(&'static str, &Path, bool); 4] {
            [
                ("default", &self.default, true),
                ("stripped", &self.stripped, false),
                ("pie", &self.pie, true),
                ("pie+stripped", &self.pie_stripped, false),
            ]
        }
    }

    /// `target/tmp/gobin-go`: Go's build caches there outlive the run (the
    /// first run compiles the standard library twice per toolchain, plain
    /// and PIE; later ones only link).
    fn work_dir() -> PathBuf {
        let exe = std::env::current_exe().expect("the test executable");
        // target/debug/deps/probe_loader-HASH
        exe.ancestors().nth(3).expect("a target directory").join("tmp/gobin-go")
    }

    fn toolchain_paths() -> Vec<PathBuf> {
        let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv");
        let mut paths = vec![venv.join("go-1.21/go/bin/go"), venv.join("go-1.24/go/bin/go"), venv.join("bin/go")];
        if let Some(more) = std::env::var_os("RINGTAIL_TEST_GO_TOOLCHAINS") {
            paths.extend(std::env::split_paths(&more));
        }
        paths
    }

    /// `go` with the tests' environment: offline, this toolchain only, no cgo.
    fn go_command(go: &Path, version: &str) -> Command {
        let dir = work_dir();
        let mut cmd = Command::new(go);
        cmd.env("GOCACHE", dir.join(version).join("cache"))
            .env("GOPATH", dir.join("gopath"))
            .env("GOTOOLCHAIN", "local")
            .env("GOPROXY", "off")
            .env("GOFLAGS", "-mod=mod")
            .env("CGO_ENABLED", "0");
        cmd
    }

    /// The release `go version` names ("go version go1.24.11 linux/amd64").
    fn go_version(go: &Path) -> Option<String> {
        let out = Command::new(go).arg("version").env("GOTOOLCHAIN", "local").output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        out.status.success().then(|| text.split_whitespace().nth(2).map(str::to_string))?
    }

    /// Builds `source` (one file) with `flags` into `out`, through a
    /// temporary name (a concurrent run never reads half a file).
    fn build(go: &Path, version: &str, source: &str, flags: &[&str], out: &Path) {
        let dir = out.parent().expect("a directory");
        let name = out.file_name().expect("a name").to_string_lossy();
        let src = dir.join(format!("{name}-src"));
        std::fs::create_dir_all(&src).expect("source dir");
        std::fs::write(src.join("main.go"), source).expect("write the program");
        let partial = dir.join(format!(".{name}.{}", std::process::id()));
        let status = go_command(go, version)
            .current_dir(&src)
            .arg("build")
            .args(flags)
            .arg("-o")
            .arg(&partial)
            .arg("main.go")
            .status()
            .expect("run go build");
        assert!(status.success(), "go build {flags:?} with {} failed", go.display());
        std::fs::rename(&partial, out).expect("rename the binary");
    }

    /// The toolchains found, each built for once per test run.
    fn toolchains() -> &'static [Toolchain] {
        static BUILT: OnceLock<Vec<Toolchain>> = OnceLock::new();
        BUILT.get_or_init(|| {
            let mut built: Vec<Toolchain> = Vec::new();
            for go in toolchain_paths() {
                let Some(version) = go_version(&go) else { continue };
                if built.iter().any(|t| t.version == version) {
                    continue;
                }
                let started = std::time::Instant::now();
                let dir = work_dir().join(&version);
                std::fs::create_dir_all(&dir).expect("build dir");
                let at = |name: &str| dir.join(name);
                let t = Toolchain {
                    default: at("default"),
                    stripped: at("stripped"),
                    pie: at("pie"),
                    pie_stripped: at("pie-stripped"),
                    plain: at("plain"),
                    go,
                    version,
                };
                let strip = "-ldflags=-s -w";
                build(&t.go, &t.version, TLS_PROGRAM, &[], &t.default);
                build(&t.go, &t.version, TLS_PROGRAM, &[strip], &t.stripped);
                build(&t.go, &t.version, TLS_PROGRAM, &["-buildmode=pie"], &t.pie);
                build(&t.go, &t.version, TLS_PROGRAM, &["-buildmode=pie", strip], &t.pie_stripped);
                build(&t.go, &t.version, PLAIN_PROGRAM, &[], &t.plain);
                eprintln!("built with {} ({}) in {:?}", t.version, t.go.display(), started.elapsed());
                built.push(t);
            }
            built
        })
    }

    /// The toolchains, or None after saying loudly that `test` is skipped
    /// (a failure where RINGTAIL_REQUIRE_ALL=1: CI).
    fn toolchains_or_skip(test: &str) -> Option<&'static [Toolchain]> {
        let found = toolchains();
        if found.is_empty() {
            let why = "no Go toolchain at .venv/go-1.21, .venv/go-1.24, .venv/bin/go nor in RINGTAIL_TEST_GO_TOOLCHAINS (./ringtail.sh test installs them)";
            assert!(std::env::var("RINGTAIL_REQUIRE_ALL").as_deref() != Ok("1"), "{test}: {why}; RINGTAIL_REQUIRE_ALL=1 forbids skipping");
            eprintln!("SKIPPED: {test}: {why}");
            return None;
        }
        Some(found)
    }

    fn open(path: &Path) -> File {
        File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
    }

    /// Read's function as the (always present) pclntab says.
    fn pclntab_read(path: &Path) -> Func {
        let file = open(path);
        let elf = Elf::read(&file).expect("an ELF");
        by_pclntab(&elf, "test").expect("a pclntab")[0].expect("Read")
    }

    #[test]
    fn every_build_gives_the_same_functions_and_their_returns() {
        let Some(toolchains) = toolchains_or_skip("every_build_gives_the_same_functions_and_their_returns") else { return };
        for t in toolchains {
            let mut seen: Vec<(&str, GoTls)> = Vec::new();
            for (name, path, symbols) in t.builds() {
                let what = format!("{} {name}", t.version);
                let go =
                    inspect(&open(path)).unwrap_or_else(|e| panic!("{what}: refused: {e}")).unwrap_or_else(|| panic!("{what}: not Go TLS"));
                assert_eq!(go.version, t.version, "{what}");
                assert_eq!(go.symbols, symbols, "{what}");
                assert_ne!(go.read, go.write, "{what}");
                assert!((1..=MAX_RETURNS).contains(&go.read_returns.len()), "{what}: {go:?}");
                let bytes = std::fs::read(path).expect("read the binary");
                let read = pclntab_read(path);
                let end = go.read + read.size;
                for &ret in &go.read_returns {
                    assert!(go.read < ret && ret < end, "{what}: a return at {ret:#x} outside Read [{:#x}, {end:#x})", go.read);
                    assert!(matches!(bytes[ret as usize], 0xc3 | 0xc2), "{what}: {:#x} at {ret:#x}", bytes[ret as usize]);
                }
                // Go's stack check, the first bytes of both functions; the
                // probes just past it.
                let elf_file = open(path);
                let elf = Elf::read(&elf_file).expect("an ELF");
                let [Some(r), Some(w), Some(_), Some(c)] = by_pclntab(&elf, "test").expect("a pclntab") else {
                    panic!("{what}: no Read, Write, readRecordOrCCS or Close")
                };
                for (f, probe) in [(r, go.read), (w, go.write), (c, go.lazy.expect("the lazy path").close)] {
                    let entry = elf.offset_of(f.addr, f.size, true).expect("in the file");
                    let body = stack_check_end(&bytes[entry as usize..]).unwrap_or_else(|| panic!("{what}: no stack check at {entry:#x}"));
                    assert_eq!(probe, entry + body, "{what}");
                    assert!((6..=18).contains(&body), "{what}: the stack check is {body} bytes");
                }
                // The lazy path: the close_notify call, a `call rel32` in
                // Read after its first return (the loop's call is before).
                let minor = release_minor(&t.version).expect("a release");
                let lazy = go.lazy.unwrap_or_else(|| panic!("{what}: no lazy path"));
                assert_eq!(Some(lazy.input), INPUTS.iter().find(|(m, _)| *m == minor).map(|(_, o)| *o), "{what}");
                assert!(go.read < lazy.alert && lazy.alert < end, "{what}: the close_notify call at {:#x} outside Read", lazy.alert);
                assert_eq!(bytes[lazy.alert as usize], 0xe8, "{what}: no call at {:#x}", lazy.alert);
                assert!(go.read_returns[0] < lazy.alert, "{what}: the close_notify call before Read's first return");
                eprintln!(
                    "{what}: Read at {:#x}, {} returns, Write at {:#x}, close_notify call at {:#x}",
                    go.read,
                    go.read_returns.len(),
                    go.write,
                    lazy.alert
                );
                seen.push((name, go));
            }
            // -s -w changes no code: the same offsets with or without symbols.
            let same = |a: &GoTls, b: &GoTls| (a.read, &a.read_returns, a.write, a.lazy) == (b.read, &b.read_returns, b.write, b.lazy);
            assert!(same(&seen[0].1, &seen[1].1), "{}: default and stripped differ: {seen:?}", t.version);
            assert!(same(&seen[2].1, &seen[3].1), "{}: pie and pie+stripped differ: {seen:?}", t.version);
        }
    }

    #[test]
    fn the_symbol_table_and_the_pclntab_agree() {
        let Some(toolchains) = toolchains_or_skip("the_symbol_table_and_the_pclntab_agree") else { return };
        for t in toolchains {
            for (name, path, symbols) in t.builds() {
                let what = format!("{} {name}", t.version);
                let file = open(path);
                let elf = Elf::read(&file).expect("an ELF");
                let pcln = by_pclntab(&elf, &t.version).unwrap_or_else(|e| panic!("{what}: {e}"));
                let Some(sym) = by_symtab(&elf).unwrap_or_else(|e| panic!("{what}: {e}")) else {
                    assert!(!symbols, "{what}: no .symtab");
                    continue;
                };
                assert!(symbols, "{what}: a .symtab in a stripped build");
                for (i, function) in NAMES.into_iter().enumerate() {
                    let (s, p) = (sym[i].expect(function), pcln[i].expect(function));
                    assert_eq!(s.addr, p.addr, "{what}: {function}");
                    // The pclntab's size runs to the next function, over
                    // the int3 padding the symbol's size leaves out.
                    assert!(s.size <= p.size && p.size - s.size < 64, "{what}: {function}: {s:?} {p:?}");
                }
                let (s, p) = (sym[0].expect(READ), pcln[0].expect(READ));
                let (_, s_code) = code(&elf, s, MAX_FUNCTION).expect("Read by its symbol");
                let (_, p_code) = code(&elf, p, MAX_FUNCTION).expect("Read by the pclntab");
                assert_eq!(returns(&s_code).expect("decoded"), returns(&p_code).expect("decoded"), "{what}");
            }
        }
    }

    #[test]
    fn the_layout_fixture_matches_the_table() {
        let Some(toolchains) = toolchains_or_skip("the_layout_fixture_matches_the_table") else { return };
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/go/layout.go");
        for t in toolchains {
            let out = go_command(&t.go, &t.version).arg("run").arg(&fixture).output().expect("go run layout.go");
            assert!(out.status.success(), "{}: {}", t.version, String::from_utf8_lossy(&out.stderr));
            let minor = release_minor(&t.version).expect("a release");
            let (_, l) = LAYOUTS.iter().find(|(m, _)| *m == minor).unwrap_or_else(|| panic!("{} is not in LAYOUTS", t.version));
            let (_, input) = INPUTS.iter().find(|(m, _)| *m == minor).unwrap_or_else(|| panic!("{} is not in INPUTS", t.version));
            let want = format!(
                "{{\"go\":\"{}\",\"conn\":{},\"tcp_fd\":{},\"sysfd\":{},\"input\":{input}}}\n",
                t.version, l.conn, l.tcp_fd, l.sysfd
            );
            assert_eq!(String::from_utf8_lossy(&out.stdout), want);
        }
    }

    #[test]
    fn go_programs_without_tls_are_nothing_to_do() {
        let Some(toolchains) = toolchains_or_skip("go_programs_without_tls_are_nothing_to_do") else { return };
        for t in toolchains {
            assert!(matches!(inspect(&open(&t.plain)), Ok(None)), "{}", t.version);
        }
    }

    #[test]
    fn other_files_are_not_go() {
        let exe = std::env::current_exe().expect("the test executable");
        for path in [exe.as_path(), Path::new("/bin/true")] {
            assert!(matches!(inspect(&open(path)), Ok(None)), "{}", path.display());
        }
        let dir = work_dir().join(format!("other-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        for (name, bytes) in [("empty", &b""[..]), ("short", &b"\x7fELF\x02\x01"[..]), ("text", &b"#!/bin/sh\necho\n"[..])] {
            std::fs::write(dir.join(name), bytes).expect("write");
            assert!(matches!(inspect(&open(&dir.join(name))), Ok(None)), "{name}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A fixed-seed xorshift: the same damage every run.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    /// Writes `bytes` to `path` and inspects it: whatever it is, no panic,
    /// and what is accepted passes [`check_result`].
    fn inspect_bytes(path: &Path, bytes: &[u8]) -> Result<Option<GoTls>, Refusal> {
        std::fs::write(path, bytes).expect("write a damaged copy");
        let got = inspect(&open(path));
        check_result(&got, bytes.len() as u64);
        got
    }

    #[test]
    fn damaged_go_binaries_are_refused_or_ignored() {
        let Some(toolchains) = toolchains_or_skip("damaged_go_binaries_are_refused_or_ignored") else { return };
        let dir = work_dir().join(format!("damaged-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("copy");
        let mut rng = Rng(0x5eed_0f91_7a11);
        let mut outcomes = std::collections::BTreeMap::<&str, u32>::new();
        let mut note = |r: &Result<Option<GoTls>, Refusal>| {
            *outcomes
                .entry(match r {
                    Ok(None) => "none",
                    Ok(Some(_)) => "attached",
                    Err(e) => e.reason(),
                })
                .or_default() += 1;
        };
        for t in toolchains {
            for binary in [&t.default, &t.pie_stripped] {
                let good = std::fs::read(binary).expect("read the binary");
                let file = open(binary);
                let elf = Elf::read(&file).expect("an ELF");
                let section = |name: &str| elf.section(name).map(|s| (s.offset, s.size)).expect(name);
                let pcln = elf.section(".gopclntab").or_else(|| elf.section(".data.rel.ro.gopclntab")).map(|s| s.offset).expect("pclntab");
                let shoff = u64::from_le_bytes(good[0x28..0x30].try_into().expect("8 bytes"));
                // Cut at 20 places: in the header, through the sections, in the section headers.
                let len = good.len() as u64;
                let cuts = [0, 1, 4, 16, 63, 64, 65, 4096, len / 8, len / 4, len / 3, len / 2, 2 * len / 3, 3 * len / 4, shoff - 1, shoff];
                // Without all of the section headers, no Go is seen; with them,
                // what is cut may be nothing read (the file's tail).
                let headers_end = shoff + 64 * u64::from(u16::from_le_bytes([good[0x3c], good[0x3d]]));
                for cut in cuts.into_iter().chain([shoff + 64, shoff + 100, len - 64, len - 1]) {
                    let r = inspect_bytes(&path, &good[..cut as usize]);
                    assert!(cut >= headers_end || matches!(r, Ok(None) | Err(_)), "cut at {cut}: {r:?}");
                    note(&r);
                }
                // Random bytes flipped in the headers.
                let (info, _) = section(".go.buildinfo");
                let regions = [(0, 64), (shoff, len - shoff), (info, 64), (pcln, 72), (pcln, 8192)];
                std::fs::write(&path, &good).expect("write a copy");
                let copy = std::fs::OpenOptions::new().read(true).write(true).open(&path).expect("open the copy");
                for i in 0..200 {
                    let (start, size) = regions[i % regions.len()];
                    let flips: Vec<u64> = (0..1 + rng.below(4)).map(|_| start + rng.below(size)).collect();
                    for &at in &flips {
                        copy.write_all_at(&[good[at as usize] ^ 1 << rng.below(8)], at).expect("flip");
                    }
                    let got = inspect(&open(&path));
                    check_result(&got, len);
                    note(&got);
                    for &at in &flips {
                        copy.write_all_at(&good[at as usize..at as usize + 1], at).expect("restore");
                    }
                }
                // Targeted: another machine, a pre-1.18 header, a release not in the table.
                let mut arm = good.clone();
                arm[0x12..0x14].copy_from_slice(&183u16.to_le_bytes());
                assert!(
                    matches!(inspect_bytes(&path, &arm), Err(Refusal::NotAmd64 { machine: 183, ref version }) if *version == t.version)
                );
                let mut old = good.clone();
                old[info as usize + 15] &= !2;
                assert!(matches!(inspect_bytes(&path, &old), Err(Refusal::TooOld { .. })));
                let mut newer = good.clone();
                let v = info as usize + 33;
                newer[v..v + 4].copy_from_slice(b"go2.");
                assert!(matches!(inspect_bytes(&path, &newer), Err(Refusal::UnknownLayout { ref version }) if version.starts_with("go2.")));
            }
        }
        eprintln!("damaged copies: {outcomes:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn versions_and_layouts() {
        assert_eq!(release_minor("go1.24.11"), Some(24));
        assert_eq!(release_minor("go1.21"), Some(21));
        for v in ["go1.22rc1", "devel go1.23-abc Tue", "go1.21.0 X:loopvar", "go1.", "go1.2x", "go2.0", "go1.21.", ""] {
            assert_eq!(release_minor(v), None, "{v}");
        }
        assert!(check_layout("go1.18").is_ok() && check_layout("go1.27.3").is_ok());
        assert!(matches!(check_layout("go1.17.13"), Err(Refusal::TooOld { .. })));
        for v in ["go1.28.0", "go1.22rc1", "devel go1.27-abcdef"] {
            assert!(matches!(check_layout(v), Err(Refusal::UnknownLayout { .. })), "{v}");
        }
        // One line per release from 18, in order.
        for (i, (minor, _)) in LAYOUTS.iter().enumerate() {
            assert_eq!(*minor as usize, 18 + i);
        }
        assert_eq!(uvarint(&[0x96, 0x01]), Some((150, 2)));
        assert_eq!(uvarint(&[0x80; 12]), None);
    }

    #[test]
    fn reasons_are_distinct_labels() {
        let all = [
            Refusal::TooOld { version: String::new() },
            Refusal::UnknownLayout { version: String::new() },
            Refusal::NoFunction { version: String::new(), function: READ },
            Refusal::NoPrologue { version: String::new(), function: READ },
            Refusal::TooManyReturns { version: String::new(), found: 33 },
            Refusal::NotAmd64 { version: String::new(), machine: 183 },
            bad("x"),
            Refusal::Io { source: std::io::Error::other("x") },
        ];
        let reasons: Vec<&str> = all.iter().map(Refusal::reason).collect();
        assert_eq!(reasons, Refusal::REASONS);
        assert!(matches!(io(std::io::ErrorKind::UnexpectedEof.into()), Refusal::BadElf { .. }));
    }

    #[test]
    fn the_close_notify_call_is_the_second_of_two_with_a_call_between() {
        let call = |at: u64, to: u64| {
            let rel = (to as i64 - (at as i64 + 5)) as i32;
            let mut c = vec![0xe8];
            c.extend_from_slice(&rel.to_le_bytes());
            c
        };
        let (at, record, copy) = (0x1000, 0x2000, 0x3000);
        let code = [call(at, record), call(at + 5, copy), call(at + 10, record)].concat();
        assert_eq!(alert_call(&code, at, record), Some(10));
        // no call between: not Read's shape
        let code = [call(at, record), call(at + 5, record)].concat();
        assert_eq!(alert_call(&code, at, record), None);
        // three calls, or one
        let code = [call(at, record), call(at + 5, copy), call(at + 10, record), call(at + 15, record)].concat();
        assert_eq!(alert_call(&code, at, record), None);
        assert_eq!(alert_call(&call(at, record), at, record), None);
        // an invalid instruction: nothing taken
        let code = [call(at, record), call(at + 5, copy), call(at + 10, record), vec![0x06]].concat();
        assert_eq!(alert_call(&code, at, record), None);
    }

    #[test]
    fn returns_are_decoded_not_scanned() {
        // mov rbx, rax (48 89 C3: a C3 that is no ret); ret
        assert_eq!(returns(&[0x48, 0x89, 0xc3, 0xc3]).expect("valid"), vec![3]);
        // ret 8; int3 padding; ret
        assert_eq!(returns(&[0xc2, 0x08, 0x00, 0xcc, 0xcc, 0xc3]).expect("valid"), vec![0, 5]);
        // push es: invalid in 64-bit mode; a cut instruction
        assert!(matches!(returns(&[0xc3, 0x06]), Err(Refusal::BadElf { .. })));
        assert!(matches!(returns(&[0xc3, 0x48]), Err(Refusal::BadElf { .. })));
        assert!(matches!(read_returns("go1.24.1", &[0x90]), Err(Refusal::BadElf { .. })));
        assert!(matches!(read_returns("go1.24.1", &[0xc3; MAX_RETURNS + 1]), Err(Refusal::TooManyReturns { found: 33, .. })));
        assert_eq!(read_returns("go1.24.1", &[0xc3; MAX_RETURNS]).expect("at the limit").len(), MAX_RETURNS);
        // cmp rsp, [r14+0x10]; jbe: the body after the jump
        assert_eq!(stack_check_end(&[0x49, 0x3b, 0x66, 0x10, 0x76, 0x00, 0x55]), Some(6));
        assert_eq!(stack_check_end(&[0x49, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0, 1, 0, 0, 0x55]), Some(10));
        // lea r12, [rsp-0x48]; cmp r12, [r14+0x10]; jbe
        assert_eq!(stack_check_end(&[0x4c, 0x8d, 0x64, 0x24, 0xb8, 0x4d, 0x3b, 0x66, 0x10, 0x76, 0x10]), Some(11));
        // a compare with no jump after it, or another jump
        assert_eq!(stack_check_end(&[0x4c, 0x8d, 0x64, 0x24, 0xb8, 0x4d, 0x3b, 0x66, 0x10]), None);
        assert_eq!(stack_check_end(&[0x49, 0x3b, 0x66, 0x10, 0x74, 0x00]), None);
        // push rbp; ret: no stack check; mid-instruction bytes
        assert_eq!(stack_check_end(&[0x55, 0xc3]), None);
        assert_eq!(stack_check_end(&[0x3b, 0x66, 0x10]), None);
    }

    #[test]
    fn names_are_found_across_windows_and_reads_are_budgeted() {
        let dir = work_dir().join(format!("names-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("strings");
        // READ straddling the first window's end, WRITE as a shared tail, a prefix that is no name.
        let mut strings = vec![b'x'; WINDOW - 10];
        strings.push(0);
        let read_at = strings.len() as u64;
        strings.extend_from_slice(READ.as_bytes());
        strings.push(0);
        strings.extend_from_slice(b"vendor/");
        let write_at = strings.len() as u64;
        strings.extend_from_slice(WRITE.as_bytes());
        strings.push(0);
        strings.extend_from_slice(&READ.as_bytes()[..10]);
        std::fs::write(&path, &strings).expect("write");
        let file = open(&path);
        let mut window = Window::new(&file, 0, strings.len() as u64).expect("a window");
        assert_eq!(find_names(&mut window, &[READ, WRITE]).expect("found"), vec![vec![read_at], vec![write_at]]);
        // Past the end: nothing, no read.
        assert_eq!(window.bytes(1 << 40, 8).expect("empty"), &[] as &[u8]);
        // A region read back and forth runs out of reads.
        let mut window = Window::new(&file, 0, strings.len() as u64).expect("a window");
        let hops = (0..200).try_for_each(|i| window.bytes(if i % 2 == 0 { 0 } else { WINDOW as u64 }, 8).map(|_| ()));
        assert!(matches!(hops, Err(Refusal::BadElf { .. })));
        assert!(matches!(Window::new(&file, 0, MAX_SECTION + 1), Err(Refusal::BadElf { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// How a [`synthetic`] executable names its functions.
    #[derive(Clone, Copy)]
    enum Names {
        /// `.symtab` and `.strtab`.
        Symbols,
        /// `.gopclntab` only (stripped), with this `textStart` (0: Go 1.26+).
        Pclntab { text_start: u64 },
    }

    /// Where [`synthetic`] puts `.text` and the two functions in it.
    const TEXT_ADDR: u64 = 0x40_1000;
    const WRITE_AT: u64 = 0;
    const READ_AT: u64 = 0x40;
    /// Write: `cmp rsp, [r14+0x10]; jbe +0; ret`.
    const WRITE_CODE: [u8; 7] = [0x49, 0x3b, 0x66, 0x10, 0x76, 0x00, 0xc3];
    /// Where the probes go: past the stack check (`cmp` and `jbe`).
    const BODY: u64 = 6;
    /// Read: `cmp rsp, [r14+0x10]; jbe +3; xor eax, eax; ret; mov eax, 1; ret`.
    const READ_CODE: [u8; 15] = [0x49, 0x3b, 0x66, 0x10, 0x76, 0x03, 0x31, 0xc0, 0xc3, 0xb8, 0x01, 0, 0, 0, 0xc3];
    const READ_RETURNS: [u64; 2] = [8, 14];

    /// One section of a [`synthetic`] executable.
    struct Synth {
        name: &'static str,
        kind: u32,
        flags: u64,
        addr: u64,
        contents: Vec<u8>,
        link: u32,
        entsize: u64,
    }

    /// The smallest executable [`inspect`] attaches to: an ELF header,
    /// `.text` with Write ([`WRITE_CODE`]) and Read
    /// ([`READ_CODE`]), `.go.buildinfo` saying go1.27.3, the names as
    /// `names` says, `.shstrtab`, then the section headers. The fuzz
    /// target's seeds (`span-actor/fuzz/seeds/go_binary/`), written by
    /// [`synthetic_executables_are_read_and_are_the_fuzz_seeds`].
    fn synthetic(names: Names) -> Vec<u8> {
        let mut text = vec![0u8; 0x80];
        text[WRITE_AT as usize..][..WRITE_CODE.len()].copy_from_slice(&WRITE_CODE);
        text[READ_AT as usize..][..READ_CODE.len()].copy_from_slice(&READ_CODE);
        let read_end = READ_AT + READ_CODE.len() as u64;
        let mut buildinfo = BUILDINFO_MAGIC.to_vec();
        buildinfo.extend_from_slice(&[8, 2]);
        buildinfo.resize(32, 0);
        buildinfo.push(8);
        buildinfo.extend_from_slice(b"go1.27.3");
        buildinfo.push(0);
        let mut sections = vec![
            Synth { name: "", kind: 0, flags: 0, addr: 0, contents: Vec::new(), link: 0, entsize: 0 },
            Synth { name: ".text", kind: 1, flags: SHF_ALLOC | SHF_EXECINSTR, addr: TEXT_ADDR, contents: text, link: 0, entsize: 0 },
            Synth { name: ".go.buildinfo", kind: 1, flags: SHF_ALLOC | 1, addr: 0x50_0000, contents: buildinfo, link: 0, entsize: 0 },
        ];
        match names {
            Names::Symbols => {
                let mut strtab = vec![0u8];
                let mut symtab = vec![0u8; 24];
                for (name, at, size) in [(READ, READ_AT, read_end - READ_AT), (WRITE, WRITE_AT, READ_AT - WRITE_AT)] {
                    symtab.extend_from_slice(&(strtab.len() as u32).to_le_bytes());
                    // STB_GLOBAL, STT_FUNC; in section 1 (.text)
                    symtab.extend_from_slice(&[0x12, 0, 1, 0]);
                    symtab.extend_from_slice(&(TEXT_ADDR + at).to_le_bytes());
                    symtab.extend_from_slice(&size.to_le_bytes());
                    strtab.extend_from_slice(name.as_bytes());
                    strtab.push(0);
                }
                sections.push(Synth { name: ".symtab", kind: SHT_SYMTAB, flags: 0, addr: 0, contents: symtab, link: 4, entsize: 24 });
                sections.push(Synth { name: ".strtab", kind: 3, flags: 0, addr: 0, contents: strtab, link: 0, entsize: 0 });
            }
            Names::Pclntab { text_start } => {
                let mut names = Vec::new();
                let mut name_offs = [0u32; 2];
                for (slot, name) in name_offs.iter_mut().zip([WRITE, READ]) {
                    *slot = names.len() as u32;
                    names.extend_from_slice(name.as_bytes());
                    names.push(0);
                }
                let funcnames = 8 + 8 * 8;
                let functab = (funcnames + names.len() as u64).next_multiple_of(8);
                // magic, pad, minLC, ptrSize; nfunc, nfiles, textStart,
                // funcnameOffset, cuOffset, filetabOffset, pctabOffset, pclnOffset
                let mut pcln = PCLNTAB_120.to_le_bytes().to_vec();
                pcln.extend_from_slice(&[0, 0, 1, 8]);
                for word in [2, 0, text_start, funcnames, 0, 0, 0, functab] {
                    pcln.extend_from_slice(&word.to_le_bytes());
                }
                pcln.extend_from_slice(&names);
                pcln.resize(functab as usize, 0);
                // (entryoff, funcoff) twice, the end of the text, then each _func.
                let funcs = [(WRITE_AT, name_offs[0]), (READ_AT, name_offs[1])];
                for (i, (entry, _)) in funcs.iter().enumerate() {
                    pcln.extend_from_slice(&(*entry as u32).to_le_bytes());
                    pcln.extend_from_slice(&(20 + 8 * i as u32).to_le_bytes());
                }
                pcln.extend_from_slice(&(read_end as u32).to_le_bytes());
                for (entry, name) in funcs {
                    pcln.extend_from_slice(&(entry as u32).to_le_bytes());
                    pcln.extend_from_slice(&name.to_le_bytes());
                }
                sections.push(Synth {
                    name: ".gopclntab",
                    kind: 1,
                    flags: SHF_ALLOC,
                    addr: 0x60_0000,
                    contents: pcln,
                    link: 0,
                    entsize: 0,
                });
            }
        }
        let mut shstrtab = vec![0u8];
        let mut name_at = Vec::new();
        for Synth { name, .. } in &sections {
            name_at.push(if name.is_empty() { 0 } else { shstrtab.len() as u32 });
            if !name.is_empty() {
                shstrtab.extend_from_slice(name.as_bytes());
                shstrtab.push(0);
            }
        }
        name_at.push(shstrtab.len() as u32);
        shstrtab.extend_from_slice(b".shstrtab\0");
        sections.push(Synth { name: ".shstrtab", kind: 3, flags: 0, addr: 0, contents: shstrtab, link: 0, entsize: 0 });
        // The contents after the 64-byte header, each 16-aligned; then the headers.
        let mut file = vec![0u8; 64];
        let mut headers = Vec::new();
        for (Synth { kind, flags, addr, contents, link, entsize, .. }, name) in sections.iter().zip(&name_at) {
            let offset = if contents.is_empty() { 0 } else { file.len().next_multiple_of(16) as u64 };
            if !contents.is_empty() {
                file.resize(offset as usize, 0);
                file.extend_from_slice(contents);
            }
            headers.extend_from_slice(&name.to_le_bytes());
            headers.extend_from_slice(&kind.to_le_bytes());
            for word in [*flags, *addr, offset, contents.len() as u64] {
                headers.extend_from_slice(&word.to_le_bytes());
            }
            headers.extend_from_slice(&link.to_le_bytes());
            headers.extend_from_slice(&0u32.to_le_bytes());
            headers.extend_from_slice(&1u64.to_le_bytes());
            headers.extend_from_slice(&entsize.to_le_bytes());
        }
        let shoff = file.len().next_multiple_of(8) as u64;
        file.resize(shoff as usize, 0);
        file.extend_from_slice(&headers);
        // e_ident (ELF64, little-endian, version 1), ET_EXEC, x86-64, version 1
        file[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
        file[0x10..0x18].copy_from_slice(&[2, 0, EM_X86_64 as u8, 0, 1, 0, 0, 0]);
        file[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        file[0x34..0x36].copy_from_slice(&64u16.to_le_bytes());
        file[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        file[0x3c..0x3e].copy_from_slice(&(sections.len() as u16).to_le_bytes());
        file[0x3e..0x40].copy_from_slice(&(sections.len() as u16 - 1).to_le_bytes());
        file
    }

    /// The checked-in seeds of the `go_binary` fuzz target.
    fn seed_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../span-actor/fuzz/seeds/go_binary")
    }

    const SEEDS: [(&str, Names); 3] = [
        ("symbols", Names::Symbols),
        ("stripped", Names::Pclntab { text_start: 0 }),
        ("stripped_text_start", Names::Pclntab { text_start: TEXT_ADDR }),
    ];

    /// `RINGTAIL_WRITE_SEEDS=1 cargo test -p probe-loader synthetic`
    /// rewrites the seeds after a change to [`synthetic`].
    #[test]
    fn synthetic_executables_are_read_and_are_the_fuzz_seeds() {
        for (name, names) in SEEDS {
            let bytes = synthetic(names);
            let go = inspect(&scratch_file(&bytes)).unwrap_or_else(|e| panic!("{name}: {e}")).unwrap_or_else(|| panic!("{name}: not Go"));
            let text = bytes.windows(READ_CODE.len()).position(|w| w == READ_CODE).expect("Read's code") as u64 - READ_AT;
            assert_eq!(
                go,
                GoTls {
                    version: "go1.27.3".to_string(),
                    read: text + READ_AT + BODY,
                    read_returns: READ_RETURNS.iter().map(|r| text + READ_AT + r).collect(),
                    write: text + WRITE_AT + BODY,
                    symbols: matches!(names, Names::Symbols),
                    lazy: None,
                },
                "{name}"
            );
            let path = seed_dir().join(name);
            if std::env::var_os("RINGTAIL_WRITE_SEEDS").is_some() {
                std::fs::create_dir_all(seed_dir()).expect("the seed directory");
                std::fs::write(&path, &bytes).expect("write a seed");
            }
            let seed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (RINGTAIL_WRITE_SEEDS=1 writes it)", path.display()));
            assert!(seed == bytes, "{} is not what synthetic() makes now (RINGTAIL_WRITE_SEEDS=1 rewrites it)", path.display());
        }
    }

    /// The fuzz target's check over each seed, each of its prefixes and
    /// 2,000 seeded flips of each (the fuzzer's own runs are `cargo fuzz`'s,
    /// on nightly: FUZZING.md).
    #[test]
    fn fuzz_seeds_replay() {
        let mut rng = Rng(0xf022_5eed);
        let mut seeds: Vec<_> = std::fs::read_dir(seed_dir()).expect("the seed directory").map(|e| e.expect("an entry").path()).collect();
        seeds.sort();
        assert!(seeds.len() >= SEEDS.len(), "{seeds:?}");
        let mut attached = 0;
        for path in seeds {
            let seed = std::fs::read(&path).expect("a seed");
            attached += usize::from(matches!(inspect(&scratch_file(&seed)), Ok(Some(_))));
            for cut in 0..=seed.len() {
                check(&seed[..cut]);
            }
            for _ in 0..2_000 {
                let mut copy = seed.clone();
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(copy.len() as u64) as usize;
                    copy[at] ^= 1 << rng.below(8);
                }
                check(&copy);
            }
        }
        assert!(attached >= SEEDS.len());
    }
}
