//! Sends encoded OTLP requests: gRPC (tonic, with a codec that passes the
//! bytes through) or HTTP/protobuf (reqwest), with opentelemetry-otlp's
//! conventions:
//!
//! - one shared connection (gRPC channel or HTTP client) per endpoint; TLS
//!   when the scheme is https (the system's roots); the configured headers
//!   on every request; `export.otlp.timeout` per request (attempt);
//! - retryable failures are retried with exponential back-off and jitter
//!   while `retry.max_elapsed` allows; permanent ones are not:
//!   - gRPC: `UNAVAILABLE`, `CANCELLED`, `DEADLINE_EXCEEDED`, `ABORTED`,
//!     `OUT_OF_RANGE`, `DATA_LOSS` are retryable, and `RESOURCE_EXHAUSTED`
//!     when the server sends a `RetryInfo`; everything else is permanent;
//!   - HTTP: 429, 502, 503, 504 and network errors are retryable, any other
//!     status permanent;
//! - the server's wish is honoured: `RetryInfo.retry_delay` (gRPC) or
//!   `Retry-After` (HTTP 429/503; seconds or a date) sets the next delay
//!   (at most 30 s, as in opentelemetry-otlp);
//! - the response is read for its `partial_success`, which the caller logs
//!   and counts.

use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Buf, BufMut, Bytes};
use http::uri::PathAndQuery;
use ringtail_config::{OtlpEndpoint, OtlpProtocol, RetrySettings};
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::config::OtlpConfig;
use super::OtlpError;

/// What a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `ExportTraceServiceRequest`.
    Traces,
    /// `ExportMetricsServiceRequest`.
    Metrics,
}

impl Signal {
    fn grpc_path(self) -> &'static str {
        match self {
            Signal::Traces => "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            Signal::Metrics => "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
        }
    }
}

/// The `User-Agent` of every request.
const USER_AGENT: &str = concat!("ringtail/", env!("CARGO_PKG_VERSION"));
/// Longest delay a server can ask for between attempts (as opentelemetry-otlp).
const MAX_THROTTLE: Duration = Duration::from_secs(30);
/// Longest response body read (a response is a few bytes; a hostile or
/// broken server must not make us buffer more).
const MAX_RESPONSE: usize = 64 * 1024;

/// A shared connection to one endpoint.
#[derive(Clone, Debug)]
pub enum Transport {
    /// gRPC over one HTTP/2 channel.
    Grpc { channel: Channel, metadata: MetadataMap },
    /// HTTP/protobuf: POST to `url`.
    Http { client: reqwest::Client, url: String, headers: http::HeaderMap },
}

impl Transport {
    /// Connects (lazily) to `endpoint` with the configured protocol, headers and
    /// per-request timeout. TLS when the scheme is https.
    pub fn new(endpoint: &OtlpEndpoint, cfg: &OtlpConfig) -> Result<Transport, OtlpError> {
        let url = endpoint.as_str();
        match cfg.protocol {
            OtlpProtocol::Grpc => {
                // Shown without its user information.
                let err = |source| OtlpError::Endpoint { endpoint: endpoint.to_string(), source };
                let mut ep = Endpoint::from_str(url)
                    .map_err(err)?
                    .user_agent(USER_AGENT)
                    .map_err(err)?
                    .timeout(cfg.timeout)
                    .connect_timeout(cfg.timeout.min(Duration::from_secs(5)));
                if url.starts_with("https://") {
                    ep = ep.tls_config(ClientTlsConfig::new().with_native_roots()).map_err(err)?;
                }
                let mut metadata = MetadataMap::new();
                for (k, v) in &cfg.headers {
                    // Validated by OtlpConfig::resolve.
                    if let (Ok(k), Ok(v)) = (MetadataKey::from_bytes(k.as_bytes()), MetadataValue::try_from(v.as_str())) {
                        metadata.insert(k, v);
                    }
                }
                Ok(Transport::Grpc { channel: ep.connect_lazy(), metadata })
            }
            OtlpProtocol::HttpProtobuf => {
                let client = reqwest::Client::builder()
                    .timeout(cfg.timeout)
                    .user_agent(USER_AGENT)
                    .build()
                    .map_err(|source| OtlpError::HttpClient { source })?;
                let mut headers = http::HeaderMap::new();
                for (k, v) in &cfg.headers {
                    // Validated by OtlpConfig::resolve.
                    if let (Ok(k), Ok(v)) = (http::HeaderName::from_bytes(k.as_bytes()), http::HeaderValue::from_str(v)) {
                        headers.insert(k, v);
                    }
                }
                headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/x-protobuf"));
                Ok(Transport::Http { client, url: url.to_owned(), headers })
            }
        }
    }

    /// Sends `body` once; the response body on success.
    async fn attempt(&self, signal: Signal, body: &Bytes) -> Result<Bytes, Failure> {
        match self {
            Transport::Grpc { channel, metadata } => {
                let mut grpc = tonic::client::Grpc::new(channel.clone());
                grpc.ready()
                    .await
                    .map_err(|e| Failure { retry: Retry::Backoff, reason: format!("gRPC channel not ready: {}", error_chain(&e)) })?;
                let mut req = tonic::Request::new(body.clone());
                *req.metadata_mut() = metadata.clone();
                let path = PathAndQuery::from_static(signal.grpc_path());
                match grpc.unary(req, path, RawCodec).await {
                    Ok(resp) => Ok(resp.into_inner()),
                    Err(status) => Err(Failure {
                        retry: classify_grpc(&status),
                        reason: format!("gRPC status {:?}: {}", status.code(), status.message()),
                    }),
                }
            }
            Transport::Http { client, url, headers } => {
                let mut resp = client
                    .post(url.as_str())
                    .headers(headers.clone())
                    .body(body.clone())
                    .send()
                    .await
                    .map_err(|e| Failure { retry: Retry::Backoff, reason: format!("HTTP request failed: {}", error_chain(&e)) })?;
                let status = resp.status();
                if !status.is_success() {
                    let after = resp.headers().get(http::header::RETRY_AFTER).and_then(|v| v.to_str().ok());
                    return Err(Failure { retry: classify_http(status.as_u16(), after), reason: format!("HTTP status {status}") });
                }
                // The data was accepted; a body that cannot be read only
                // loses the partial-success details.
                let mut out = Vec::new();
                while let Ok(Some(chunk)) = resp.chunk().await {
                    if out.len() + chunk.len() > MAX_RESPONSE {
                        break;
                    }
                    out.extend_from_slice(&chunk);
                }
                Ok(Bytes::from(out))
            }
        }
    }

    /// Sends `body`, retrying as the module docs say; the response body
    /// once accepted.
    pub async fn send(&self, signal: Signal, body: Bytes, retry: &RetrySettings) -> Result<Bytes, SendError> {
        let start = Instant::now();
        let mut delay = retry.initial_backoff;
        let mut cap = retry.max_backoff;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let failure = match self.attempt(signal, &body).await {
                Ok(resp) => return Ok(resp),
                Err(f) => f,
            };
            let elapsed = start.elapsed();
            let wait = match failure.retry {
                Retry::Never => return Err(SendError::Permanent { reason: failure.reason }),
                Retry::Backoff => delay,
                Retry::After(server) => {
                    let server = server.min(MAX_THROTTLE);
                    if server > cap {
                        cap = MAX_THROTTLE;
                    }
                    delay = delay.max(server);
                    delay
                }
            };
            let sleep = (wait + jitter(retry.initial_backoff / 2)).min(cap);
            if elapsed + sleep >= retry.max_elapsed {
                return Err(SendError::GaveUp { attempts, reason: failure.reason });
            }
            tracing::debug!(reason = failure.reason, ?sleep, attempts, "OTLP export failed, retrying");
            tokio::time::sleep(sleep).await;
            delay = (delay * 2).min(cap);
        }
    }
}

/// Buffers requests are written into, reused from one request to the
/// next: a request is a few hundred kB, and a fresh one each time costs
/// page faults (huge pages zeroed) rather than a copy.
#[derive(Debug, Default)]
pub struct BufferPool {
    /// Sent requests, until the transport has let go of them.
    returned: Vec<Bytes>,
    /// The last request's size: the next one is likely alike.
    hint: usize,
}

/// Buffers kept for reuse.
const POOL: usize = 8;

impl BufferPool {
    /// An empty buffer for the next request (memory of a sent one when
    /// nobody holds it any more).
    pub fn take(&mut self) -> Vec<u8> {
        let mut v = Vec::new();
        let mut i = 0;
        while i < self.returned.len() {
            if self.returned[i].is_unique() {
                if let Ok(b) = self.returned.swap_remove(i).try_into_mut() {
                    v = Vec::from(b);
                    break;
                }
            } else {
                i += 1;
            }
        }
        v.clear();
        v.reserve(self.hint + self.hint / 8);
        v
    }

    /// Freezes a written request for sending.
    pub fn freeze(&mut self, v: Vec<u8>) -> Bytes {
        self.hint = v.len();
        Bytes::from(v)
    }

    /// Takes a sent request back; its memory is reused once the transport
    /// lets go of it.
    pub fn give(&mut self, b: Bytes) {
        if self.returned.len() < POOL {
            self.returned.push(b);
        }
    }
}

/// Why a request was finally not delivered.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The receiver refused it for good (not retried).
    #[error("refused by the receiver: {reason}")]
    Permanent { reason: String },
    /// Retryable failures until `retry.max_elapsed` ran out.
    #[error("gave up after {attempts} attempts: {reason}")]
    GaveUp { attempts: u32, reason: String },
}

/// Whether and when a failed attempt may be repeated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Permanent.
    Never,
    /// After the back-off delay.
    Backoff,
    /// After what the server asked for (or the back-off, if longer).
    After(Duration),
}

struct Failure {
    retry: Retry,
    reason: String,
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    // Errors may quote the URL; its user information is a secret.
    ringtail_config::redact_userinfo(&s).into_owned()
}

/// The OTLP specification's retryable gRPC codes.
fn classify_grpc(status: &tonic::Status) -> Retry {
    use tonic::Code;
    let delay = retry_info(status.details());
    match status.code() {
        Code::ResourceExhausted => delay.map_or(Retry::Never, Retry::After),
        Code::Unavailable => delay.filter(|d| !d.is_zero()).map_or(Retry::Backoff, Retry::After),
        Code::Cancelled | Code::DeadlineExceeded | Code::Aborted | Code::OutOfRange | Code::DataLoss => Retry::Backoff,
        _ => Retry::Never,
    }
}

/// The OTLP specification's retryable HTTP statuses.
fn classify_http(status: u16, retry_after: Option<&str>) -> Retry {
    match status {
        429 | 503 => retry_after.and_then(parse_retry_after).map_or(Retry::Backoff, Retry::After),
        502 | 504 => Retry::Backoff,
        _ => Retry::Never,
    }
}

/// `Retry-After`: delay-seconds or an HTTP date.
fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs.min(600)));
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(when.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO).min(Duration::from_secs(600)))
}

/// `google.rpc.Status` as carried in `grpc-status-details-bin`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(message, repeated, tag = "3")]
    details: Vec<ProtoAny>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// The `RetryInfo.retry_delay` in a gRPC status's details, if any.
fn retry_info(details: &[u8]) -> Option<Duration> {
    use prost::Message as _;
    if details.is_empty() {
        return None;
    }
    let status = RpcStatus::decode(details).ok()?;
    let any = status.details.iter().find(|a| a.type_url.ends_with("/google.rpc.RetryInfo"))?;
    let d = RetryInfo::decode(any.value.as_slice()).ok()?.retry_delay?;
    let secs = u64::try_from(d.seconds).ok()?;
    let nanos = u32::try_from(d.nanos).ok().filter(|n| *n < 1_000_000_000)?;
    Some(Duration::new(secs, nanos))
}

/// `Export*ServiceResponse.partial_success`.
#[derive(Clone, PartialEq, prost::Message)]
struct ExportResponse {
    #[prost(message, optional, tag = "1")]
    partial_success: Option<PartialSuccess>,
}

/// `Export*PartialSuccess`: `rejected_spans` or `rejected_data_points`.
#[derive(Clone, PartialEq, prost::Message)]
struct PartialSuccess {
    #[prost(int64, tag = "1")]
    rejected: i64,
    #[prost(string, tag = "2")]
    error_message: String,
}

/// What the receiver said it did not keep: (items rejected, its message).
/// `None` when it kept everything (or the response says nothing readable).
pub fn partial_success(response: &[u8]) -> Option<(u64, String)> {
    use prost::Message as _;
    let p = ExportResponse::decode(response).ok()?.partial_success?;
    (p.rejected > 0 || !p.error_message.is_empty()).then(|| (u64::try_from(p.rejected).unwrap_or(0), p.error_message))
}

/// A random delay in `[0, max]`: spreads the retries of many exporters.
fn jitter(max: Duration) -> Duration {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new(
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1
        );
    }
    let ms = max.as_millis() as u64;
    if ms == 0 {
        return Duration::ZERO;
    }
    let r = STATE.with(|s| {
        // xorshift64*
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    });
    Duration::from_millis(r % (ms + 1))
}

/// A gRPC codec that sends the request bytes as they are and hands back the
/// response bytes: the request is already a serialized protobuf.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        // A request is one message of a few hundred kB: one buffer for it.
        BufferSettings::new(256 * 1024, 256 * 1024)
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    #[test]
    fn http_statuses() {
        assert_eq!(classify_http(429, Some("7")), Retry::After(Duration::from_secs(7)));
        assert_eq!(classify_http(503, Some("soon")), Retry::Backoff);
        assert_eq!(classify_http(503, None), Retry::Backoff);
        assert_eq!(classify_http(429, Some("100000")), Retry::After(Duration::from_secs(600)));
        for s in [502, 504] {
            assert_eq!(classify_http(s, Some("3")), Retry::Backoff);
        }
        for s in [400, 401, 403, 404, 413, 500, 501] {
            assert_eq!(classify_http(s, None), Retry::Never, "{s}");
        }
        let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(20));
        let Some(d) = parse_retry_after(&date) else { panic!("{date}") };
        assert!((18..=20).contains(&d.as_secs()), "{d:?}");
    }

    fn status_with_retry_info(code: tonic::Code, delay: Option<Duration>) -> tonic::Status {
        let details = delay.map(|d| {
            let info = RetryInfo { retry_delay: Some(ProtoDuration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 }) };
            RpcStatus {
                details: vec![ProtoAny { type_url: "type.googleapis.com/google.rpc.RetryInfo".into(), value: info.encode_to_vec() }],
            }
            .encode_to_vec()
        });
        tonic::Status::with_details(code, "x", details.unwrap_or_default().into())
    }

    #[test]
    fn grpc_codes() {
        use tonic::Code;
        let s = |c, d| classify_grpc(&status_with_retry_info(c, d));
        assert_eq!(s(Code::Unavailable, None), Retry::Backoff);
        assert_eq!(s(Code::Unavailable, Some(Duration::from_millis(1500))), Retry::After(Duration::from_millis(1500)));
        assert_eq!(s(Code::ResourceExhausted, None), Retry::Never);
        assert_eq!(s(Code::ResourceExhausted, Some(Duration::from_secs(2))), Retry::After(Duration::from_secs(2)));
        for c in [Code::Cancelled, Code::DeadlineExceeded, Code::Aborted, Code::OutOfRange, Code::DataLoss] {
            assert_eq!(s(c, None), Retry::Backoff, "{c:?}");
        }
        for c in [
            Code::Unknown,
            Code::InvalidArgument,
            Code::NotFound,
            Code::PermissionDenied,
            Code::Unauthenticated,
            Code::Internal,
            Code::Unimplemented,
        ] {
            assert_eq!(s(c, None), Retry::Never, "{c:?}");
        }
        // Garbage details are ignored, never a panic.
        assert_eq!(retry_info(&[0xff, 0xff, 0xff]), None);
        assert_eq!(retry_info(&[0x1a, 0x05, 0x0a]), None);
    }

    #[test]
    fn partial_success_is_read() {
        let r = ExportResponse { partial_success: Some(PartialSuccess { rejected: 3, error_message: "too old".into() }) };
        assert_eq!(partial_success(&r.encode_to_vec()), Some((3, "too old".into())));
        assert_eq!(partial_success(&[]), None);
        assert_eq!(partial_success(&ExportResponse { partial_success: Some(PartialSuccess::default()) }.encode_to_vec()), None);
        assert_eq!(partial_success(&[0x0a, 0x80]), None);
    }

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..1000 {
            assert!(jitter(Duration::from_millis(250)) <= Duration::from_millis(250));
        }
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
    }
}
