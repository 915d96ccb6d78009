//! A received span batch, read in place: every sink takes this.

use ipc_schema::{HttpSpan, ServiceResource, SpanBatch};

/// A span batch's resources and its spans, whose strings borrow from the
/// batch (reading them allocates one vector, not a string a field).
#[derive(Debug)]
pub struct Spans<'a> {
    pub resources: &'a [ServiceResource],
    pub spans: Vec<HttpSpan<&'a str>>,
}

impl<'a> Spans<'a> {
    /// Every span of `batch`.
    pub fn of(batch: &'a SpanBatch) -> Spans<'a> {
        Spans { resources: &batch.resources, spans: batch.spans().collect() }
    }

    /// The spans of `batch` for which `keep` is true.
    pub fn filtered(batch: &'a SpanBatch, mut keep: impl FnMut(&HttpSpan<&'a str>) -> bool) -> Spans<'a> {
        Spans { resources: &batch.resources, spans: batch.spans().filter(|s| keep(s)).collect() }
    }
}
