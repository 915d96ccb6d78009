//! A received span batch, read in place: every sink takes this.

use ipc_schema::{ServiceResource, Span, SpanBatch, WireError};

/// A span batch's resources and its spans, whose strings borrow from the
/// batch (reading them allocates one vector, not a string a field).
#[derive(Debug)]
pub struct Spans<'a> {
    pub resources: &'a [ServiceResource],
    pub spans: Vec<Span<&'a str>>,
}

impl<'a> Spans<'a> {
    /// Every span of `batch`, checked as it is read (see
    /// [`SpanBatch::read`]): an error for a malformed batch.
    pub fn of(batch: &'a SpanBatch) -> Result<Spans<'a>, WireError> {
        Ok(Spans { resources: &batch.resources, spans: batch.read()? })
    }

    /// [`Spans::of`] for a batch made here, whose spans are well formed.
    pub fn of_own(batch: &'a SpanBatch) -> Spans<'a> {
        // SpanBatch::push writes only what SpanBatch::read reads back.
        Spans::of(batch).expect("a batch made by push reads back")
    }
}
