use crate::codec::{CodecResult, Message, ZmqFramedWrite};

use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};

const WRITE_BATCH_LIMIT: usize = 128;

/// ringtail: the write buffer capacity kept between bursts. Each message is
/// copied whole into the buffer before it is written, so the buffer grows
/// to the largest message of a burst; beyond this, it is given back once
/// flushed instead of being kept for the connection's life (a span-actor
/// kept ~13 MiB after one burst of 3 MiB span batches, on top of its bounds).
const WRITE_BUFFER_KEEP: usize = 256 * 1024;

/// Writes queued socket messages into the underlying framed sink in small batches.
#[inline]
pub(crate) async fn write_message_queue(
    queue_receiver: mpsc::Receiver<Message>,
    send_queue: ZmqFramedWrite,
) -> CodecResult<()> {
    write_message_queue_with(queue_receiver, send_queue, |_| {}).await
}

/// ringtail: [`write_message_queue`], telling `taken` of each message as it
/// leaves the queue (a PUB subscriber's queued bytes).
pub(crate) async fn write_message_queue_with(
    mut queue_receiver: mpsc::Receiver<Message>,
    mut send_queue: ZmqFramedWrite,
    mut taken: impl FnMut(&Message),
) -> CodecResult<()> {
    while let Some(message) = queue_receiver.next().await {
        taken(&message);
        // When backlog already exists, feed a batch before flushing once to avoid per-message flush cost during bursts.
        send_queue.feed(message).await?;

        for _ in 1..WRITE_BATCH_LIMIT {
            let message = match queue_receiver.try_recv() {
                Ok(message) => message,
                Err(_) => break,
            };
            taken(&message);
            send_queue.feed(message).await?;
        }

        send_queue.flush().await?;
        send_queue = shrunk(send_queue);
    }

    Ok(())
}

/// ringtail: `send_queue` with a fresh buffer if its (flushed, empty) one
/// grew beyond [`WRITE_BUFFER_KEEP`].
fn shrunk(send_queue: ZmqFramedWrite) -> ZmqFramedWrite {
    let mut parts = send_queue.into_parts();
    if parts.buffer.is_empty() && parts.buffer.capacity() > WRITE_BUFFER_KEEP {
        parts.buffer = bytes::BytesMut::new();
    }
    asynchronous_codec::FramedWrite::from_parts(parts)
}

#[cfg(test)]
mod tests {
    mod batch_boundaries;

    use super::*;
    use crate::codec::{CodecError, ZmqCodec};
    use crate::ZmqMessage;

    use bytes::Bytes;
    use futures::{AsyncWrite, SinkExt};
    use parking_lot::Mutex;
    use std::io;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    #[derive(Default)]
    struct WriteStats {
        bytes: Vec<u8>,
        flushes: usize,
    }

    struct RecordingWrite {
        stats: Arc<Mutex<WriteStats>>,
    }

    impl AsyncWrite for RecordingWrite {
        fn poll_write(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let mut stats = self.stats.lock();
            stats.bytes.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.stats.lock().flushes += 1;
            Poll::Ready(Ok(()))
        }

        fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    struct FailingWrite;

    impl AsyncWrite for FailingWrite {
        fn poll_write(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            _buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "writer failed",
            )))
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[crate::async_rt::test]
    async fn test_write_message_queue_batches_ready_messages_into_one_flush() {
        let (mut sender, receiver) = mpsc::channel(8);
        sender
            .send(Message::Message(ZmqMessage::from(Bytes::from_static(b"a"))))
            .await
            .expect("send first message");
        sender
            .send(Message::Message(ZmqMessage::from(Bytes::from_static(b"b"))))
            .await
            .expect("send second message");
        sender
            .send(Message::Message(ZmqMessage::from(Bytes::from_static(b"c"))))
            .await
            .expect("send third message");
        drop(sender);

        let stats = Arc::new(Mutex::new(WriteStats::default()));
        let writer = RecordingWrite {
            stats: Arc::clone(&stats),
        };
        let send_queue = ZmqFramedWrite::new(Box::new(writer), ZmqCodec::new());

        write_message_queue(receiver, send_queue)
            .await
            .expect("write queued messages");

        let stats = stats.lock();
        assert_eq!(1, stats.flushes);
        assert_eq!(
            stats.bytes,
            vec![0x00, 0x01, b'a', 0x00, 0x01, b'b', 0x00, 0x01, b'c']
        );
    }

    #[crate::async_rt::test]
    async fn test_write_message_queue_returns_writer_errors() {
        let (mut sender, receiver) = mpsc::channel(1);
        sender
            .send(Message::Message(ZmqMessage::from(Bytes::from_static(b"a"))))
            .await
            .expect("send message");
        drop(sender);

        let send_queue = ZmqFramedWrite::new(Box::new(FailingWrite), ZmqCodec::new());
        let error = write_message_queue(receiver, send_queue)
            .await
            .expect_err("write error");

        let CodecError::Io(error) = error else {
            panic!("unexpected error type");
        };
        assert_eq!(io::ErrorKind::BrokenPipe, error.kind());
    }
}
