//! OpenTelemetry resources for traced services (and for ringtail itself):
//! the attribute list every exported span and metric of a service carries.

use ipc_schema::ServiceResource;

use ipc_schema::Value;

/// The resource attribute list, in the order it is exported.
pub type Attributes<'a> = Vec<(&'a str, Value<&'a str>)>;

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
/// `OTEL_RESOURCE_ATTRIBUTES`) never overrides what the process said, and
/// neither overrides the fixed attributes.
pub fn service<'a>(res: &'a ServiceResource, extra: &'a [(String, String)]) -> Attributes<'a> {
    with_language(res, extra, language(&res.executable_name))
}

fn with_language<'a>(res: &'a ServiceResource, extra: &'a [(String, String)], lang: &'static str) -> Attributes<'a> {
    let mut attrs: Attributes<'a> = Vec::with_capacity(8 + res.extra.len() + extra.len());
    attrs.extend([
        ("service.name", Value::Str(res.service_name.as_str())),
        ("service.instance.id", Value::Str(res.service_instance_id.as_str())),
        ("host.name", Value::Str(res.host_name.as_str())),
        ("process.pid", Value::Int(i64::from(res.pid))),
        ("process.executable.name", Value::Str(res.executable_name.as_str())),
        ("telemetry.sdk.name", Value::Str("ringtail")),
        ("telemetry.sdk.version", Value::Str(env!("CARGO_PKG_VERSION"))),
        ("telemetry.sdk.language", Value::Str(lang)),
    ]);
    for (k, v) in res.extra.iter().chain(extra) {
        if !attrs.iter().any(|(key, _)| key == k) {
            attrs.push((k.as_str(), Value::Str(v.as_str())));
        }
    }
    attrs
}

/// The description of ringtail itself, whose own metrics are reported under
/// [`ringtail`].
pub fn ringtail_process(host: &str) -> ServiceResource {
    ServiceResource {
        service_name: "ringtail".into(),
        service_instance_id: host.to_owned(),
        host_name: host.to_owned(),
        pid: std::process::id(),
        executable_name: "ringtail-exporter-actor".into(),
        extra: Vec::new(),
    }
}

/// The resource ringtail's own metrics are reported under (`res` from
/// [`ringtail_process`]).
pub fn ringtail<'a>(res: &'a ServiceResource, extra: &'a [(String, String)]) -> Attributes<'a> {
    with_language(res, extra, "rust")
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let extra =
            [("deployment.environment".into(), "prod".into()), ("team".into(), "ignored".into()), ("service.name".into(), "no".into())];
        let r = service(&res, &extra);
        let get = |k: &str| r.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        assert_eq!(get("service.name"), Some(Value::Str("web")));
        assert_eq!(get("process.pid"), Some(Value::Int(1)));
        assert_eq!(get("telemetry.sdk.language"), Some(Value::Str("python")));
        assert_eq!(get("team"), Some(Value::Str("a")));
        assert_eq!(get("deployment.environment"), Some(Value::Str("prod")));
        assert_eq!(r.len(), 10, "no duplicate keys: {r:?}");
        let me = ringtail_process("h");
        assert_eq!(ringtail(&me, &[]).iter().find(|(k, _)| *k == "telemetry.sdk.language").map(|(_, v)| *v), Some(Value::Str("rust")));
    }
}
