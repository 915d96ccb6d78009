//! The `k=v,k2=v2` lists of the OpenTelemetry environment variables
//! (`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS`): values are
//! percent-encoded, keys trimmed, malformed items skipped.

/// Parses a `k=v,k2=v2` list.
pub fn parse_pairs(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            let k = k.trim();
            (!k.is_empty()).then(|| (k.to_owned(), percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    String::from_utf8_lossy(&crate::text::percent_decode(s.as_bytes())).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn pairs() {
        assert_eq!(
            super::parse_pairs("a=1, b = x%20y ,bad,=z,c=%zz,d=%2C"),
            vec![("a".into(), "1".into()), ("b".into(), "x y".into()), ("c".into(), "%zz".into()), ("d".into(), ",".into())]
        );
    }
}
