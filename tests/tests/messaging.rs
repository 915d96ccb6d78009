//! Messaging calls read off the wire: a real broker from a Debian package
//! (mosquitto), started by the test in its own directory on its own port
//! (`probe.stream_ports`), real clients (mosquitto_pub, mosquitto_sub), a real
//! OTLP receiver. Exact PRODUCER and CONSUMER spans with the messaging
//! conventions' attributes, and no payload anywhere in what ringtail
//! wrote.

use std::process::Command;
use std::time::Duration;

use ringtail_tests::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);
const SETTLE: Duration = Duration::from_millis(500);
/// OTLP's span kinds.
const CLIENT: u64 = 3;
const PRODUCER: u64 = 4;
const CONSUMER: u64 = 5;

/// A mosquitto of its own on `port` (loopback only), keeping nothing.
fn mosquitto(port: u16, dir: &TempDir) -> Proc {
    let conf = dir.join("mosquitto.conf");
    std::fs::write(&conf, format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")).expect("write mosquitto.conf");
    let p = Proc::spawn("mosquitto", Command::new("mosquitto").args(["-c", &conf.display().to_string()]));
    assert!(wait_port(port, Duration::from_secs(10)), "mosquitto did not listen on {port}");
    p
}

/// What a messaging span is compared by: its kind, name, system,
/// operation type and destination.
type MsgKey = (u64, String, Option<String>, Option<String>, Option<String>);

fn msg_key(s: &Value) -> MsgKey {
    (
        s["kind"].as_u64().unwrap_or_default(),
        s["name"].as_str().unwrap_or_default().to_owned(),
        attr(s, "messaging.system"),
        attr(s, "messaging.operation.type"),
        attr(s, "messaging.destination.name"),
    )
}

fn k(kind: u64, name: &str, op_type: Option<&str>, destination: Option<&str>) -> MsgKey {
    (kind, name.to_owned(), Some("mqtt".to_owned()), op_type.map(str::to_owned), destination.map(str::to_owned))
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

on_both_backends!(mqtt_publish_and_receive);
