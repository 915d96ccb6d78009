use thiserror::Error;

/// Represents an error when encoding/decoding raw byte buffers and frames
#[non_exhaustive]
#[derive(Error, Debug)]
pub enum CodecError {
    #[error("{0}")]
    Command(&'static str),
    #[error("{0}")]
    Greeting(&'static str),
    #[error("{0}")]
    Mechanism(&'static str),
    #[error("{0}")]
    Decode(&'static str),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Other(&'static str),
    /// ringtail: a peer declared more than `SocketOptions::max_message_size`.
    #[error("peer declared a message of {declared} bytes, more than the limit of {limit}")]
    MessageTooLarge { declared: u64, limit: usize },
}

pub(crate) type CodecResult<T> = Result<T, CodecError>;
