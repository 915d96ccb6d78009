//! Redis RESP2 and RESP3, client side: [`RedisConn`].
//!
//! # Layout
//! ```text
//! command = '*' N CRLF ('$' n CRLF n bytes CRLF){N}      (or an inline line: PING CRLF)
//! reply   = simple: '+' '-' ':' '_' ',' '#' '(' ... CRLF
//!         | blob:   '$' '!' '=' n CRLF n bytes CRLF       ('$-1': null)
//!         | aggregate: '*' '~' '>' N CRLF value{N},  '%' '|' N CRLF value{2N}
//! ```
//! A direction is read token by token (a line, or a blob's body whose
//! length its header gave), so a blob body in a LOST region is skipped;
//! aggregates nest up to [`MAX_DEPTH`].
//!
//! # Calls
//! Each command is a call (pipelines: N commands, N calls, paired with
//! the replies in order; MULTI's commands each get theirs, answered
//! `+QUEUED`, and EXEC its own). `db.operation.name` is the command's
//! name from a fixed table of Redis's commands (`COMMANDS`, matched
//! without regard to case, written uppercase), with its subcommand for
//! container commands when the table knows it (`CLIENT SETNAME`, `CONFIG
//! GET`); a first argument not in the table is `_OTHER` (the name is a
//! metric attribute and the span's name, and a client may put anything
//! there), with no `db.query.text`. `db.query.text` is the operation and
//! one `?` per other argument (`SET ? ?`): no key or value is kept,
//! `AUTH` and `HELLO` arguments included. A QUIT whose `+OK` did not come
//! before the connection closed is counted `no_reply`, not `unanswered`.
//! `db.namespace` is the database index: "0"
//! until a `SELECT n` is answered `+OK`. Errors: `status_code` and
//! `error.type` are the error's first word (`ERR`, `WRONGTYPE`,
//! `NOAUTH`); never the rest.
//!
//! Pub/sub: pushed messages (RESP2 arrays starting `message`, `pmessage`,
//! `smessage`; every RESP3 `>` push) are not replies: counted
//! `pushes_ignored`. A (un)subscribe confirmation (an array or push
//! starting `subscribe`, `unsubscribe`...) ends the oldest pending call
//! if that call is a (un)subscribe command, and is ignored otherwise (a
//! command with N channels gets N confirmations). RESP3 attributes (`|`)
//! before a reply are skipped.
//!
//! # Desync
//! RESP has no marker a byte tail could be recognised by, so a desync (a
//! header in a LOST region, bytes that are not RESP, nesting past
//! [`MAX_DEPTH`]) gives the connection up for good: counted `desync` and
//! `given_up`, its pending calls `unanswered`. This is the simplest rule
//! that never pairs a reply with the wrong command.
//!
//! # Memory
//! Two [`Stream`]s, at most [`MAX_PENDING`] pending calls (each an op of
//! a few short strings), a nesting stack of at most [`MAX_DEPTH`].

use std::collections::VecDeque;

use ipc_schema::db::system;
use ipc_schema::Text;

use super::pieces;
use super::stream::{Frame, Msg, Next, Stream, MAX_BUFFERED};
use super::{done, op, op_heap, DbCounts, DbOp, Out, MAX_PENDING, OTHER};

/// Deepest aggregate nesting read.
pub const MAX_DEPTH: usize = 32;

/// Longest command name or subcommand kept (longer: not a command).
const MAX_COMMAND: usize = 32;

/// Redis commands, uppercase, sorted (binary searched): what `COMMAND
/// LIST` of Redis 7.0 names, and the commands Redis 7.2 to 8.2 and Valkey
/// added. A first argument not in it is not a command name (it may be
/// anything a client sends, a secret included): `_OTHER`.
const COMMANDS: &[&str] = &[
    "ACL",
    "APPEND",
    "ASKING",
    "AUTH",
    "BGREWRITEAOF",
    "BGSAVE",
    "BITCOUNT",
    "BITFIELD",
    "BITFIELD_RO",
    "BITOP",
    "BITPOS",
    "BLMOVE",
    "BLMPOP",
    "BLPOP",
    "BRPOP",
    "BRPOPLPUSH",
    "BZMPOP",
    "BZPOPMAX",
    "BZPOPMIN",
    "CLIENT",
    "CLUSTER",
    "COMMAND",
    "CONFIG",
    "COPY",
    "DBSIZE",
    "DEBUG",
    "DECR",
    "DECRBY",
    "DEL",
    "DISCARD",
    "DUMP",
    "ECHO",
    "EVAL",
    "EVALSHA",
    "EVALSHA_RO",
    "EVAL_RO",
    "EXEC",
    "EXISTS",
    "EXPIRE",
    "EXPIREAT",
    "EXPIRETIME",
    "FAILOVER",
    "FCALL",
    "FCALL_RO",
    "FLUSHALL",
    "FLUSHDB",
    "FUNCTION",
    "GEOADD",
    "GEODIST",
    "GEOHASH",
    "GEOPOS",
    "GEORADIUS",
    "GEORADIUSBYMEMBER",
    "GEORADIUSBYMEMBER_RO",
    "GEORADIUS_RO",
    "GEOSEARCH",
    "GEOSEARCHSTORE",
    "GET",
    "GETBIT",
    "GETDEL",
    "GETEX",
    "GETRANGE",
    "GETSET",
    "HDEL",
    "HELLO",
    "HEXISTS",
    "HEXPIRE",
    "HEXPIREAT",
    "HEXPIRETIME",
    "HGET",
    "HGETALL",
    "HGETDEL",
    "HGETEX",
    "HINCRBY",
    "HINCRBYFLOAT",
    "HKEYS",
    "HLEN",
    "HMGET",
    "HMSET",
    "HPERSIST",
    "HPEXPIRE",
    "HPEXPIREAT",
    "HPEXPIRETIME",
    "HPTTL",
    "HRANDFIELD",
    "HSCAN",
    "HSET",
    "HSETEX",
    "HSETNX",
    "HSTRLEN",
    "HTTL",
    "HVALS",
    "INCR",
    "INCRBY",
    "INCRBYFLOAT",
    "INFO",
    "KEYS",
    "LASTSAVE",
    "LATENCY",
    "LCS",
    "LINDEX",
    "LINSERT",
    "LLEN",
    "LMOVE",
    "LMPOP",
    "LOLWUT",
    "LPOP",
    "LPOS",
    "LPUSH",
    "LPUSHX",
    "LRANGE",
    "LREM",
    "LSET",
    "LTRIM",
    "MEMORY",
    "MGET",
    "MIGRATE",
    "MODULE",
    "MONITOR",
    "MOVE",
    "MSET",
    "MSETNX",
    "MULTI",
    "OBJECT",
    "PERSIST",
    "PEXPIRE",
    "PEXPIREAT",
    "PEXPIRETIME",
    "PFADD",
    "PFCOUNT",
    "PFDEBUG",
    "PFMERGE",
    "PFSELFTEST",
    "PING",
    "PSETEX",
    "PSUBSCRIBE",
    "PSYNC",
    "PTTL",
    "PUBLISH",
    "PUBSUB",
    "PUNSUBSCRIBE",
    "QUIT",
    "RANDOMKEY",
    "READONLY",
    "READWRITE",
    "RENAME",
    "RENAMENX",
    "REPLCONF",
    "REPLICAOF",
    "RESET",
    "RESTORE",
    "RESTORE-ASKING",
    "ROLE",
    "RPOP",
    "RPOPLPUSH",
    "RPUSH",
    "RPUSHX",
    "SADD",
    "SAVE",
    "SCAN",
    "SCARD",
    "SCRIPT",
    "SDIFF",
    "SDIFFSTORE",
    "SELECT",
    "SET",
    "SETBIT",
    "SETEX",
    "SETNX",
    "SETRANGE",
    "SHUTDOWN",
    "SINTER",
    "SINTERCARD",
    "SINTERSTORE",
    "SISMEMBER",
    "SLAVEOF",
    "SLOWLOG",
    "SMEMBERS",
    "SMISMEMBER",
    "SMOVE",
    "SORT",
    "SORT_RO",
    "SPOP",
    "SPUBLISH",
    "SRANDMEMBER",
    "SREM",
    "SSCAN",
    "SSUBSCRIBE",
    "STRLEN",
    "SUBSCRIBE",
    "SUBSTR",
    "SUNION",
    "SUNIONSTORE",
    "SUNSUBSCRIBE",
    "SWAPDB",
    "SYNC",
    "TIME",
    "TOUCH",
    "TTL",
    "TYPE",
    "UNLINK",
    "UNSUBSCRIBE",
    "UNWATCH",
    "WAIT",
    "WAITAOF",
    "WATCH",
    "XACK",
    "XACKDEL",
    "XADD",
    "XAUTOCLAIM",
    "XCLAIM",
    "XDEL",
    "XDELEX",
    "XGROUP",
    "XINFO",
    "XLEN",
    "XPENDING",
    "XRANGE",
    "XREAD",
    "XREADGROUP",
    "XREVRANGE",
    "XSETID",
    "XTRIM",
    "ZADD",
    "ZCARD",
    "ZCOUNT",
    "ZDIFF",
    "ZDIFFSTORE",
    "ZINCRBY",
    "ZINTER",
    "ZINTERCARD",
    "ZINTERSTORE",
    "ZLEXCOUNT",
    "ZMPOP",
    "ZMSCORE",
    "ZPOPMAX",
    "ZPOPMIN",
    "ZRANDMEMBER",
    "ZRANGE",
    "ZRANGEBYLEX",
    "ZRANGEBYSCORE",
    "ZRANGESTORE",
    "ZRANK",
    "ZREM",
    "ZREMRANGEBYLEX",
    "ZREMRANGEBYRANK",
    "ZREMRANGEBYSCORE",
    "ZREVRANGE",
    "ZREVRANGEBYLEX",
    "ZREVRANGEBYSCORE",
    "ZREVRANK",
    "ZSCAN",
    "ZSCORE",
    "ZUNION",
    "ZUNIONSTORE",
];

/// Container commands and their subcommands (`CLIENT SETNAME`), sorted;
/// an unknown subcommand leaves the container's name alone.
const SUBCOMMANDS: &[(&str, &[&str])] = &[
    ("ACL", &["CAT", "DELUSER", "DRYRUN", "GENPASS", "GETUSER", "HELP", "LIST", "LOAD", "LOG", "SAVE", "SETUSER", "USERS", "WHOAMI"]),
    (
        "CLIENT",
        &[
            "CACHING",
            "CAPA",
            "GETNAME",
            "GETREDIR",
            "HELP",
            "ID",
            "IMPORT-SOURCE",
            "INFO",
            "KILL",
            "LIST",
            "NO-EVICT",
            "NO-TOUCH",
            "PAUSE",
            "REPLY",
            "SETINFO",
            "SETNAME",
            "TRACKING",
            "TRACKINGINFO",
            "UNBLOCK",
            "UNPAUSE",
        ],
    ),
    (
        "CLUSTER",
        &[
            "ADDSLOTS",
            "ADDSLOTSRANGE",
            "BUMPEPOCH",
            "COUNT-FAILURE-REPORTS",
            "COUNTKEYSINSLOT",
            "DELSLOTS",
            "DELSLOTSRANGE",
            "FAILOVER",
            "FLUSHSLOTS",
            "FORGET",
            "GETKEYSINSLOT",
            "HELP",
            "INFO",
            "KEYSLOT",
            "LINKS",
            "MEET",
            "MYID",
            "MYSHARDID",
            "NODES",
            "REPLICAS",
            "REPLICATE",
            "RESET",
            "SAVECONFIG",
            "SET-CONFIG-EPOCH",
            "SETSLOT",
            "SHARDS",
            "SLAVES",
            "SLOT-STATS",
            "SLOTS",
        ],
    ),
    ("COMMAND", &["COUNT", "DOCS", "GETKEYS", "GETKEYSANDFLAGS", "HELP", "INFO", "LIST"]),
    ("CONFIG", &["GET", "HELP", "RESETSTAT", "REWRITE", "SET"]),
    ("FUNCTION", &["DELETE", "DUMP", "FLUSH", "HELP", "KILL", "LIST", "LOAD", "RESTORE", "STATS"]),
    ("LATENCY", &["DOCTOR", "GRAPH", "HELP", "HISTOGRAM", "HISTORY", "LATEST", "RESET"]),
    ("MEMORY", &["DOCTOR", "HELP", "MALLOC-STATS", "PURGE", "STATS", "USAGE"]),
    ("MODULE", &["HELP", "LIST", "LOAD", "LOADEX", "UNLOAD"]),
    ("OBJECT", &["ENCODING", "FREQ", "HELP", "IDLETIME", "REFCOUNT"]),
    ("PUBSUB", &["CHANNELS", "HELP", "NUMPAT", "NUMSUB", "SHARDCHANNELS", "SHARDNUMSUB"]),
    ("SCRIPT", &["DEBUG", "EXISTS", "FLUSH", "HELP", "KILL", "LOAD"]),
    ("SLOWLOG", &["GET", "HELP", "LEN", "RESET"]),
    ("XGROUP", &["CREATE", "CREATECONSUMER", "DELCONSUMER", "DESTROY", "HELP", "SETID"]),
    ("XINFO", &["CONSUMERS", "GROUPS", "HELP", "STREAM"]),
];

/// The table's spelling of a command name (`None`: not a command).
fn known_command(name: &str) -> Option<&'static str> {
    COMMANDS.binary_search(&name).ok().map(|i| COMMANDS[i])
}

/// The table's spelling of a subcommand of `container`.
fn known_subcommand(container: &str, sub: &str) -> Option<&'static str> {
    let i = SUBCOMMANDS.binary_search_by(|(c, _)| c.cmp(&container)).ok()?;
    let subs = SUBCOMMANDS[i].1;
    subs.binary_search(&sub).ok().map(|j| subs[j])
}

/// Whether `name` is a container command (its second argument names it).
fn is_container(name: &str) -> bool {
    SUBCOMMANDS.binary_search_by(|(c, _)| c.cmp(&name)).is_ok()
}

/// Whether `b` starts like a RESP command array (`*N\r\n$`), for
/// [`super::detect`].
pub fn is_command_start(b: &[u8]) -> bool {
    let Some(rest) = b.strip_prefix(b"*") else { return false };
    let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    (1..=6).contains(&digits) && rest[digits..].starts_with(b"\r\n$")
}

/// Length of the line at the head of `h` (CRLF included), or Need.
fn line(h: &[u8]) -> Frame {
    match memchr::memmem::find(h, b"\r\n") {
        Some(i) => Frame::Len(i as u64 + 2),
        None => Frame::Need,
    }
}

/// The integer of a header line `Xn\r\n` (`-1`: null; `?`: streamed,
/// refused).
fn header_int(l: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(l.get(1..l.len().checked_sub(2)?)?).ok()?;
    s.parse().ok()
}

/// A command being read from the send side.
#[derive(Debug, Default)]
struct Cmd {
    /// Bulk strings still to come.
    remaining: u64,
    /// Arguments seen.
    args: u64,
    name: Option<String>,
    sub: Option<String>,
    /// SELECT's index (not secret).
    select: Option<String>,
}

/// The reply being read.
#[derive(Debug, Default)]
struct Reply {
    /// Remaining elements of each open aggregate.
    stack: Vec<u64>,
    /// The top-level value's type byte.
    kind: u8,
    /// The error's first word.
    error: Option<String>,
    /// The first element of a top-level array or push (pub/sub kind).
    first: Option<String>,
    /// Inside a top-level attribute (`|`): the reply proper follows it.
    attribute: bool,
    /// A simple-string reply's text, when short (`OK`, `QUEUED`).
    simple: Option<String>,
}

/// What a pending call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    /// (P/S)SUBSCRIBE and their UNSUBSCRIBE: answered by confirmations.
    Subscribe,
    /// SELECT n.
    Select,
    /// QUIT: the server may close before its `+OK` is read (and 7.2+
    /// clients close without sending it): not an unanswered call.
    Quit,
}

#[derive(Debug)]
struct Pending {
    op: DbOp,
    kind: Kind,
    /// SELECT's index.
    index: Option<String>,
}

/// Per-direction token state besides the stream.
#[derive(Debug, Default)]
struct St {
    given_up: bool,
    namespace: String,
    /// Length (CRLF included) of the blob body that comes next, per side.
    send_body: Option<u64>,
    recv_body: Option<u64>,
    cmd: Option<Cmd>,
    reply: Option<Reply>,
    pending: VecDeque<Pending>,
    subscribed: bool,
}

/// One Redis client connection. See the module doc.
#[derive(Debug)]
pub struct RedisConn {
    send: Stream,
    recv: Stream,
    st: St,
}

impl Default for RedisConn {
    fn default() -> RedisConn {
        RedisConn { send: Stream::new(), recv: Stream::new(), st: St { namespace: "0".to_owned(), ..St::default() } }
    }
}

impl RedisConn {
    /// Calls awaiting replies.
    pub fn pending(&self) -> usize {
        self.st.pending.len()
    }

    /// Approximate bytes held.
    pub fn held_bytes(&self) -> usize {
        self.send.held() + self.recv.held() + self.st.pending.iter().map(|p| op_heap(&p.op) + 200).sum::<usize>()
    }

    /// Counts pending calls unanswered (a QUIT: `no_reply`) and forgets
    /// them.
    pub fn abort(&mut self, counts: &mut DbCounts) {
        for p in self.st.pending.drain(..) {
            if p.kind == Kind::Quit {
                counts.no_reply += 1;
            } else {
                counts.unanswered += 1;
            }
        }
    }

    fn give_up(&mut self, counts: &mut DbCounts) {
        counts.desync += 1;
        counts.given_up += 1;
        self.abort(counts);
        self.st.given_up = true;
        self.send.desync();
        self.recv.desync();
    }

    /// One record (see [`super::DbConn::feed`]; `pieces` is valid).
    pub fn feed(&mut self, send: bool, ts: u64, _tls: bool, bytes: &[u8], out: &mut Out<'_>, counts: &mut DbCounts) {
        if self.st.given_up {
            return;
        }
        for piece in pieces::pieces(bytes).flatten() {
            let stream = if send { &mut self.send } else { &mut self.recv };
            stream.push(piece);
            let mut bad = false;
            loop {
                let body = if send { self.st.send_body } else { self.st.recv_body };
                let next = stream.next(|h| match body {
                    Some(n) => Frame::Len(n),
                    None => line(h),
                });
                match next {
                    Next::Msg(m) => {
                        if m.len > MAX_BUFFERED as u64 {
                            counts.too_large += 1;
                        }
                        let ok = if send { self.st.on_send(m, ts, counts) } else { self.st.on_recv(m, ts, out, counts) };
                        if !ok {
                            bad = true;
                            break;
                        }
                    }
                    Next::Wait => break,
                    Next::Desync => {
                        bad = true;
                        break;
                    }
                }
            }
            if bad {
                self.give_up(counts);
                return;
            }
        }
    }
}

fn word(b: &[u8]) -> Option<String> {
    (!b.is_empty() && b.len() <= MAX_COMMAND && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'|' | b'.')))
        .then(|| String::from_utf8_lossy(b).to_ascii_uppercase())
}

impl St {
    /// A send token. `false`: not RESP (give up).
    fn on_send(&mut self, m: Msg<'_>, ts: u64, counts: &mut DbCounts) -> bool {
        if let Some(_n) = self.send_body.take() {
            // An argument's body: only the name, subcommand and SELECT's
            // index are read, and only when whole.
            let Some(cmd) = self.cmd.as_mut() else { return false };
            let arg = if m.whole { m.bytes.get(..m.bytes.len().saturating_sub(2)) } else { None };
            cmd.args += 1;
            match cmd.args {
                1 => cmd.name = arg.and_then(word),
                2 if cmd.name.as_deref().is_some_and(is_container) => cmd.sub = arg.and_then(word),
                2 if cmd.name.as_deref() == Some("SELECT") => {
                    cmd.select =
                        arg.filter(|a| a.len() <= 5 && a.iter().all(u8::is_ascii_digit)).map(|a| String::from_utf8_lossy(a).into_owned())
                }
                _ => {}
            }
            cmd.remaining -= 1;
            if cmd.remaining == 0 {
                let cmd = self.cmd.take().unwrap_or_default();
                return self.command(cmd, ts, counts);
            }
            return true;
        }
        let l = m.bytes;
        if !m.whole {
            return false;
        }
        match (self.cmd.is_some(), l.first()) {
            (false, Some(b'*')) => match header_int(l) {
                Some(n) if n > 0 => {
                    self.cmd = Some(Cmd { remaining: n as u64, ..Cmd::default() });
                    true
                }
                // `*0` / `*-1`: nothing to run.
                Some(_) => true,
                None => false,
            },
            (true, Some(b'$')) => match header_int(l) {
                Some(n) if n >= 0 => {
                    // n + CRLF.
                    self.send_body = Some(n as u64 + 2);
                    true
                }
                _ => false,
            },
            (true, _) => false,
            (false, _) => {
                // An inline command: words separated by spaces.
                let text = &l[..l.len() - 2];
                let mut words = text.split(|c| *c == b' ').filter(|w| !w.is_empty());
                let Some(first) = words.next() else { return true };
                let name = word(first);
                if name.is_none() {
                    return false;
                }
                let mut cmd = Cmd { name, args: 1, ..Cmd::default() };
                for w in words {
                    cmd.args += 1;
                    if cmd.args == 2 && cmd.name.as_deref().is_some_and(is_container) {
                        cmd.sub = word(w);
                    }
                    if cmd.args == 2 && cmd.name.as_deref() == Some("SELECT") && w.len() <= 5 && w.iter().all(u8::is_ascii_digit) {
                        cmd.select = Some(String::from_utf8_lossy(w).into_owned());
                    }
                }
                self.command(cmd, ts, counts)
            }
        }
    }

    /// A whole command: a pending call. Its name is the table's (a first
    /// argument that is not a command is `_OTHER`, with no text: whatever
    /// a client sends there is never exported).
    fn command(&mut self, cmd: Cmd, ts: u64, counts: &mut DbCounts) -> bool {
        let mut o = op(system::REDIS, ts);
        o.call.namespace = Some(Text::Owned(self.namespace.clone()));
        let name = cmd.name.as_deref().and_then(known_command);
        if let Some(name) = name {
            let mut operation = name.to_owned();
            let mut shown = 1;
            if let Some(sub) = cmd.sub.as_deref().and_then(|s| known_subcommand(name, s)) {
                operation.push(' ');
                operation.push_str(sub);
                shown = 2;
            }
            let mut text = operation.clone();
            // Bounded: at most 2 KiB of `?`.
            for _ in shown..cmd.args.min(1000) {
                text.push_str(" ?");
            }
            o.call.query_text = Some(Text::Owned(text));
            o.call.query_summary = Some(Text::Owned(operation.clone()));
            o.call.operation = Some(Text::Owned(operation));
        } else if cmd.args > 0 {
            o.call.operation = Some(Text::Owned(OTHER.to_owned()));
        }
        let kind = match name {
            Some("SUBSCRIBE" | "PSUBSCRIBE" | "SSUBSCRIBE" | "UNSUBSCRIBE" | "PUNSUBSCRIBE" | "SUNSUBSCRIBE") => Kind::Subscribe,
            Some("SELECT") => Kind::Select,
            Some("QUIT") => Kind::Quit,
            _ => Kind::Plain,
        };
        if self.pending.len() >= MAX_PENDING {
            counts.too_many_pending += 1;
            return false;
        }
        if kind == Kind::Subscribe {
            self.subscribed = true;
        }
        self.pending.push_back(Pending { op: o, kind, index: cmd.select });
        true
    }

    /// A recv token. `false`: not RESP (give up).
    fn on_recv(&mut self, m: Msg<'_>, ts: u64, out: &mut Out<'_>, counts: &mut DbCounts) -> bool {
        let r = self.reply.get_or_insert_with(Reply::default);
        if let Some(_n) = self.recv_body.take() {
            let body = m.bytes.get(..m.bytes.len().saturating_sub(2)).unwrap_or(&[]);
            if r.stack.is_empty() && r.kind == b'!' {
                r.error = error_word(body);
            }
            if r.stack.len() == 1 && r.first.is_none() && m.whole && body.len() <= 16 {
                r.first = Some(String::from_utf8_lossy(body).to_ascii_lowercase());
            }
            return self.value_done(ts, out, counts);
        }
        if !m.whole {
            return false;
        }
        let l = m.bytes;
        let Some(&t) = l.first() else { return false };
        let top = r.stack.is_empty();
        if top {
            r.kind = t;
        }
        match t {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {
                let content = &l[1..l.len() - 2];
                if top && t == b'-' {
                    r.error = error_word(content);
                }
                if top && t == b'+' && content.len() <= 16 {
                    r.simple = Some(String::from_utf8_lossy(content).into_owned());
                }
                if r.stack.len() == 1 && r.first.is_none() && t == b'+' && content.len() <= 16 {
                    r.first = Some(String::from_utf8_lossy(content).to_ascii_lowercase());
                }
                self.value_done(ts, out, counts)
            }
            b'$' | b'!' | b'=' => match header_int(l) {
                Some(n) if n >= 0 => {
                    self.recv_body = Some(n as u64 + 2);
                    true
                }
                Some(-1) => self.value_done(ts, out, counts),
                _ => false,
            },
            b'*' | b'~' | b'>' | b'%' | b'|' => match header_int(l) {
                Some(n) if n > 0 => {
                    if r.stack.len() >= MAX_DEPTH {
                        return false;
                    }
                    let n = n as u64;
                    let elems = if matches!(t, b'%' | b'|') { n.saturating_mul(2) } else { n };
                    if top && t == b'|' {
                        r.attribute = true;
                    }
                    r.stack.push(elems);
                    true
                }
                Some(0 | -1) => self.value_done(ts, out, counts),
                _ => false,
            },
            _ => false,
        }
    }

    /// A value ended: pops finished aggregates; a finished top-level
    /// reply is paired.
    fn value_done(&mut self, ts: u64, out: &mut Out<'_>, counts: &mut DbCounts) -> bool {
        let Some(r) = self.reply.as_mut() else { return true };
        while let Some(n) = r.stack.last_mut() {
            *n -= 1;
            if *n > 0 {
                return true;
            }
            r.stack.pop();
        }
        let r = self.reply.take().unwrap_or_default();
        if r.attribute {
            // An attribute precedes the reply proper.
            return true;
        }
        self.reply_done(r, ts, out, counts);
        true
    }

    fn reply_done(&mut self, r: Reply, ts: u64, out: &mut Out<'_>, counts: &mut DbCounts) {
        let first = r.first.as_deref();
        let confirmation =
            matches!(first, Some("subscribe" | "psubscribe" | "ssubscribe" | "unsubscribe" | "punsubscribe" | "sunsubscribe"));
        let message = matches!(first, Some("message" | "pmessage" | "smessage"));
        let front_subscribe = self.pending.front().is_some_and(|p| p.kind == Kind::Subscribe);
        if r.kind == b'>' || (self.subscribed && r.kind == b'*' && (message || confirmation)) {
            if confirmation && front_subscribe {
                // Ends its command's call (below).
            } else {
                counts.pushes_ignored += 1;
                return;
            }
        }
        let Some(mut p) = self.pending.pop_front() else {
            counts.unpaired_answers += 1;
            return;
        };
        if let Some(e) = r.error {
            p.op.call.status_code = Some(Text::Owned(e.clone()));
            p.op.call.error_type = Some(Text::Owned(e));
        } else if r.kind == b'-' || r.kind == b'!' {
            p.op.call.error_type = Some(Text::Owned("_OTHER".to_owned()));
        }
        if p.kind == Kind::Select && r.simple.as_deref() == Some("OK") {
            if let Some(i) = p.index.take() {
                self.namespace = i;
            }
        }
        p.op.end_ns = ts.max(p.op.start_ns);
        done(out, Box::new(p.op));
    }
}

/// An error's first word (`ERR`, `WRONGTYPE`), uppercase letters only;
/// never the message.
fn error_word(b: &[u8]) -> Option<String> {
    let w = b.split(|c| *c == b' ').next()?;
    (!w.is_empty() && w.len() <= MAX_COMMAND && w.iter().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_'))
        .then(|| String::from_utf8_lossy(w).into_owned())
}

#[cfg(test)]
pub(super) mod tests;
