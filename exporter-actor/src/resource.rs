//! OpenTelemetry resources for traced services (and for ringtail itself).

use ipc_schema::ServiceResource;
use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;

/// `telemetry.sdk.language` guessed from the executable name, as the spec
/// requires one; `unknown` when the name says nothing.
pub fn language(exe: &str) -> &'static str {
    let e = exe.to_ascii_lowercase();
    match () {
        _ if e.starts_with("python") || e.starts_with("gunicorn") || e.starts_with("uvicorn") => "python",
        _ if e.starts_with("node") || e == "bun" || e == "deno" => "nodejs",
        _ if e.starts_with("java") => "java",
        _ if e.starts_with("ruby") || e == "puma" => "ruby",
        _ if e.starts_with("php") => "php",
        _ if e.starts_with("dotnet") => "dotnet",
        _ if e.starts_with("beam") || e == "erl" => "erlang",
        _ => "unknown",
    }
}

/// The resource of a traced service. `extra` (from ringtail's own
/// `OTEL_RESOURCE_ATTRIBUTES`) never overrides what the process said.
pub fn service(res: &ServiceResource, extra: &[(String, String)]) -> Resource {
    let mut attrs = vec![
        KeyValue::new("service.name", res.service_name.clone()),
        KeyValue::new("service.instance.id", res.service_instance_id.clone()),
        KeyValue::new("host.name", res.host_name.clone()),
        KeyValue::new("process.pid", i64::from(res.pid)),
        KeyValue::new("process.executable.name", res.executable_name.clone()),
        KeyValue::new("telemetry.sdk.name", "ringtail"),
        KeyValue::new("telemetry.sdk.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new("telemetry.sdk.language", language(&res.executable_name)),
    ];
    let fixed: Vec<String> = attrs.iter().map(|kv| kv.key.as_str().to_owned()).collect();
    for (k, v) in res.extra.iter().chain(extra) {
        if !fixed.contains(k) && !attrs.iter().any(|kv| kv.key.as_str() == k) {
            attrs.push(KeyValue::new(k.clone(), v.clone()));
        }
    }
    Resource::builder_empty().with_attributes(attrs).build()
}

/// The resource ringtail's own metrics are reported under.
pub fn ringtail(host: &str, extra: &[(String, String)]) -> Resource {
    let res = ServiceResource {
        service_name: "ringtail".into(),
        service_instance_id: host.to_owned(),
        host_name: host.to_owned(),
        pid: std::process::id(),
        executable_name: "ringtail-exporter-actor".into(),
        extra: Vec::new(),
    };
    let mut r = service(&res, extra);
    r = Resource::builder_empty()
        .with_attributes(r.iter().filter(|(k, _)| k.as_str() != "telemetry.sdk.language").map(|(k, v)| KeyValue::new(k.clone(), v.clone())))
        .with_attribute(KeyValue::new("telemetry.sdk.language", "rust"))
        .build();
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::Key;

    #[test]
    fn service_resource_attributes() {
        let res = ServiceResource {
            service_name: "web".into(),
            service_instance_id: "h:1".into(),
            host_name: "h".into(),
            pid: 1,
            executable_name: "python3.11".into(),
            extra: vec![("team".into(), "a".into())],
        };
        let r = service(&res, &[("deployment.environment".into(), "prod".into()), ("team".into(), "ignored".into())]);
        let get = |k: &'static str| r.get(&Key::from_static_str(k)).map(|v| v.to_string());
        assert_eq!(get("service.name").as_deref(), Some("web"));
        assert_eq!(get("process.pid").as_deref(), Some("1"));
        assert_eq!(get("telemetry.sdk.language").as_deref(), Some("python"));
        assert_eq!(get("team").as_deref(), Some("a"));
        assert_eq!(get("deployment.environment").as_deref(), Some("prod"));
    }
}
