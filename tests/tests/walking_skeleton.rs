//! The walking skeleton, end to end: a real Python server, real kernel
//! probes, all four ringtail processes, a real OTLP receiver.

use std::collections::BTreeMap;
use std::time::Duration;

use ringtail_tests::*;

const N: usize = 10;

#[test]
fn python_http_server_requests_become_server_spans_at_the_receiver() {
    if !can_trace() || !Rotel::available() {
        return;
    }
    let rotel = Rotel::start();
    let port = free_port();
    let ringtail = Ringtail::start(&format!(
        r#"
[probe]
flush_interval = "20ms"
[discovery]
open_ports = [{port}]
[export]
stdout = true
[export.otlp]
endpoint = "http://127.0.0.1:{grpc}"
protocol = "grpc"
[pipeline]
batch_timeout = "50ms"
"#,
        grpc = rotel.grpc
    ));

    let docroot = TempDir::new("www");
    for i in 0..N {
        std::fs::write(docroot.join(&format!("hello-{i}")), format!("hello {i}\n")).unwrap();
    }
    let _server = python_http_server(port, &docroot.0);

    let mut expected: BTreeMap<String, u16> = BTreeMap::new();
    for i in 0..N {
        let path = format!("/hello-{i}");
        let r = http_get(port, &path, &[]).unwrap();
        assert_eq!(r.status, 200, "{}", r.head);
        expected.insert(path, 200);
    }
    let r = http_get(port, "/no-such-page", &[]).unwrap();
    assert_eq!(r.status, 404);
    expected.insert("/no-such-page".into(), 404);

    let ours = |s: &Value| s["kind"] == 2 && attr(s, "server.port").as_deref() == Some(&port.to_string());
    wait_until(Duration::from_secs(30), || {
        let spans: Vec<Value> = rotel.spans().into_iter().filter(ours).collect();
        (spans.len() > N).then_some(spans)
    })
    .unwrap_or_else(|| panic!("receiver got {:?}\nringtail log:\n{}", rotel.spans(), ringtail.log()));
    // Nothing more should arrive: exactly one span per request.
    std::thread::sleep(Duration::from_secs(2));
    let got: Vec<Value> = rotel.spans().into_iter().filter(ours).collect();
    assert_eq!(got.len(), N + 1, "exactly one span per request: {got:#?}");

    let python = std::fs::read_link(format!("/proc/{}/exe", _server.pid())).unwrap();
    let service = python.file_name().unwrap().to_string_lossy().into_owned();
    let mut seen = BTreeMap::new();
    for s in &got {
        let path = attr(s, "url.path").expect("url.path");
        let status: u16 = attr(s, "http.response.status_code").unwrap().parse().unwrap();
        assert_eq!(attr(s, "http.request.method").as_deref(), Some("GET"));
        // An unmatched path answered 4xx has no route (a 404 scan must not
        // spend the route budget): the span is named by its method alone.
        match attr(s, "http.route") {
            Some(route) => assert_eq!(s["name"], format!("GET {route}")),
            None => assert_eq!((s["name"].as_str(), status), (Some("GET"), 404), "{s}"),
        }
        assert_eq!(res_attr(s, "service.name").as_deref(), Some(service.as_str()), "{s}");
        assert_eq!(res_attr(s, "process.pid").as_deref(), Some(_server.pid().to_string().as_str()));
        assert_eq!(attr(s, "client.address").as_deref(), Some("127.0.0.1"));
        assert_eq!(attr(s, "user_agent.original").as_deref(), Some("ringtail-tests"));
        let (start, end) = (s["start"].as_u64().unwrap(), s["end"].as_u64().unwrap());
        assert!(end > start, "duration > 0: {s}");
        // Wall-clock: within a minute of now.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        assert!(now.abs_diff(start) < 60_000_000_000, "start {start} is not now ({now})");
        assert!(seen.insert(path, status).is_none(), "one span per path");
    }
    assert_eq!(seen, expected);

    // The stdout exporter printed the same requests, one line each.
    let out = ringtail.stdout();
    for path in expected.keys() {
        assert_eq!(out.lines().filter(|l| l.contains(&format!(" GET {path} "))).count(), 1, "{path} in stdout:\n{out}");
    }
}

#[test]
fn ringtail_stops_cleanly_on_sigterm() {
    if !can_trace() {
        return;
    }
    let mut ringtail = Ringtail::start("[export]\nstdout = false\n[discovery]\nopen_ports = [1]\n");
    let pids: Vec<u32> = ["probe-loader", "span-actor", "exporter-actor"].iter().filter_map(|c| ringtail.pid(c)).collect();
    assert_eq!(pids.len(), 3);
    assert!(ringtail.stop(), "ringtail did not stop within 10 s:\n{}", ringtail.log());
    for pid in pids {
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "component {pid} outlived ringtail");
    }
    let run = ringtail.dir.join("run");
    let left: Vec<_> = std::fs::read_dir(&run).map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(!left.iter().any(|n| n.to_string_lossy().ends_with(".sock")), "stale sockets left: {left:?}");
    // A second start on the same runtime directory works.
    let again = Ringtail::start(&format!(
        "[export]\nstdout = false\n[discovery]\nopen_ports = [1]\n[pipeline]\nruntime_dir = \"{}\"\n",
        run.display()
    ));
    drop(again);
}
