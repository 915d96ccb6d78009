use std::sync::Arc;

#[cfg(all(feature = "ipc-transport", any(target_family = "unix", windows)))]
mod ipc;
#[cfg(feature = "tcp-transport")]
mod tcp;

use crate::codec::FramedIo;
use crate::endpoint::Endpoint;
use crate::task_handle::TaskHandle;
use crate::ZmqResult;

/// An already-bound transport listener that a `ZeroMQ` socket can adopt.
#[derive(Debug)]
#[non_exhaustive]
pub enum Listener {
    /// A TCP listener bound by the caller.
    #[cfg(feature = "tcp-transport")]
    Tcp(std::net::TcpListener),
    /// A Unix-domain listener bound by the caller.
    #[cfg(all(feature = "ipc-transport", target_family = "unix"))]
    Ipc(std::os::unix::net::UnixListener),
}

#[cfg(feature = "tcp-transport")]
impl From<std::net::TcpListener> for Listener {
    fn from(listener: std::net::TcpListener) -> Self {
        Self::Tcp(listener)
    }
}

#[cfg(all(feature = "ipc-transport", target_family = "unix"))]
impl From<std::os::unix::net::UnixListener> for Listener {
    fn from(listener: std::os::unix::net::UnixListener) -> Self {
        Self::Ipc(listener)
    }
}

macro_rules! do_if_enabled {
    ($feature:literal, $body:expr) => {{
        #[cfg(feature = $feature)]
        {
            $body
        }

        #[cfg(not(feature = $feature))]
        panic!("feature \"{}\" is not enabled", $feature)
    }};
}

/// Connectes to the given endpoint
///
/// # Panics
/// Panics if the requested endpoint uses a transport type that isn't enabled
pub(crate) async fn connect(
    endpoint: &Endpoint,
    options: Arc<crate::SocketOptions>,
) -> ZmqResult<(FramedIo, Endpoint)> {
    match endpoint {
        Endpoint::Tcp(_host, _port) => {
            do_if_enabled!("tcp-transport", tcp::connect(_host, *_port, options).await)
        }
        Endpoint::Ipc(_path) => {
            #[cfg(all(feature = "ipc-transport", any(target_family = "unix", windows)))]
            {
                if let Some(path) = _path {
                    ipc::connect(path, options).await
                } else {
                    Err(crate::error::ZmqError::Socket(
                        "Cannot connect to an unnamed ipc socket",
                    ))
                }
            }
            #[cfg(not(all(feature = "ipc-transport", any(target_family = "unix", windows))))]
            panic!("IPC transport is not available on this platform")
        }
    }
}

pub struct AcceptStopHandle(
    pub(crate) TaskHandle<()>,
    // Held for its `Drop`.
    #[allow(dead_code)] pub(crate) Option<BoundPath>,
);

/// ringtail: the file an ipc bind created. Dropping it (the socket is dropped
/// or unbinds) removes the file at once, and only if the path still names
/// that file.
///
/// Stock 0.7.0 removed the path by name from the accept task, whenever that
/// task next ran after the stop signal. A socket bound again at the same path
/// in the meantime (a restarted consumer, after unlinking the stale file) lost
/// its new file to the old task: nobody could connect to it any more, and
/// subscribers that lost the old peer timed out connecting.
pub(crate) struct BoundPath {
    path: std::path::PathBuf,
    #[cfg(target_family = "unix")]
    file: (u64, u64),
}

impl BoundPath {
    /// Records the file now at `path` (just bound); `None` if it is not there.
    #[cfg_attr(not(feature = "ipc-transport"), allow(dead_code))]
    pub(crate) fn new(path: std::path::PathBuf) -> Option<Self> {
        #[cfg(target_family = "unix")]
        {
            use std::os::unix::fs::MetadataExt;
            let meta = std::fs::symlink_metadata(&path).ok()?;
            Some(Self {
                path,
                file: (meta.dev(), meta.ino()),
            })
        }
        #[cfg(not(target_family = "unix"))]
        Some(Self { path })
    }
}

impl Drop for BoundPath {
    fn drop(&mut self) {
        #[cfg(target_family = "unix")]
        {
            use std::os::unix::fs::MetadataExt;
            match std::fs::symlink_metadata(&self.path) {
                Ok(meta) if (meta.dev(), meta.ino()) == self.file => {}
                // Gone, or another socket's file now: not ours to remove.
                _ => return,
            }
        }
        if let Err(err) = std::fs::remove_file(&self.path) {
            if err.kind() != std::io::ErrorKind::NotFound {
                log::warn!(
                    "Could not delete unix socket at {}: {}",
                    self.path.display(),
                    err
                );
            }
        }
    }
}

/// Spawns an async task that listens for connections at the provided endpoint.
///
/// `cback` will be invoked when a connection is accepted. If the result was
/// `Ok`, it will receive a tuple containing the framed raw socket, along with
/// the endpoint of the remote connection accepted.
///
/// Returns a `ZmqResult`, which when Ok is a tuple of the resolved bound
/// endpoint, as well as a channel to stop the async accept task
///
/// # Panics
/// Panics if the requested endpoint uses a transport type that isn't enabled
pub(crate) async fn begin_accept<T>(
    endpoint: Endpoint,
    options: Arc<crate::SocketOptions>,
    cback: impl Fn(ZmqResult<(FramedIo, Endpoint)>) -> T + Send + 'static,
) -> ZmqResult<(Endpoint, AcceptStopHandle)>
where
    T: std::future::Future<Output = ()> + Send + 'static,
{
    let _cback = cback;
    match endpoint {
        Endpoint::Tcp(_host, _port) => do_if_enabled!(
            "tcp-transport",
            tcp::begin_accept(_host, _port, options, _cback).await
        ),
        Endpoint::Ipc(_path) => {
            #[cfg(all(feature = "ipc-transport", any(target_family = "unix", windows)))]
            {
                if let Some(path) = _path {
                    ipc::begin_accept(&path, options, _cback).await
                } else {
                    Err(crate::error::ZmqError::Socket(
                        "Cannot begin accepting peers at an unnamed ipc socket",
                    ))
                }
            }
            #[cfg(not(all(feature = "ipc-transport", any(target_family = "unix", windows))))]
            panic!("IPC transport is not available on this platform")
        }
    }
}

pub(crate) async fn begin_accept_listener<T>(
    listener: Listener,
    options: Arc<crate::SocketOptions>,
    cback: impl Fn(ZmqResult<(FramedIo, Endpoint)>) -> T + Send + 'static,
) -> ZmqResult<(Endpoint, AcceptStopHandle)>
where
    T: std::future::Future<Output = ()> + Send + 'static,
{
    match listener {
        #[cfg(feature = "tcp-transport")]
        Listener::Tcp(listener) => tcp::begin_accept_listener(listener, options, cback).await,
        #[cfg(all(feature = "ipc-transport", target_family = "unix"))]
        Listener::Ipc(listener) => ipc::begin_accept_listener(listener, options, cback).await,
    }
}

/// ringtail: the connections a bound endpoint has open (accepted, until
/// closed), against `SocketOptions::max_connections`.
#[derive(Clone)]
pub(crate) struct ConnectionSlots {
    open: Arc<std::sync::atomic::AtomicUsize>,
    limit: usize,
}

impl ConnectionSlots {
    #[cfg_attr(
        not(any(feature = "ipc-transport", feature = "tcp-transport")),
        allow(dead_code)
    )]
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            open: Arc::default(),
            limit,
        }
    }

    /// A slot for one more connection, or `None` (reported) at the limit.
    #[cfg_attr(
        not(any(feature = "ipc-transport", feature = "tcp-transport")),
        allow(dead_code)
    )]
    pub(crate) fn take(&self, options: &crate::SocketOptions) -> Option<Slot> {
        use std::sync::atomic::Ordering;
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok();
        if !taken {
            options.report(crate::LimitEvent::ConnectionRefused { limit: self.limit });
            return None;
        }
        Some(Slot(self.open.clone()))
    }
}

/// One open connection; dropping it frees the slot.
pub(crate) struct Slot(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// ringtail: an accepted stream and its [`Slot`]: the slot is freed when the
/// stream is closed, i.e. when both halves the codec splits it into are gone.
pub(crate) struct Counted<S> {
    stream: S,
    _slot: Slot,
}

impl<S> Counted<S> {
    #[cfg_attr(
        not(any(feature = "ipc-transport", feature = "tcp-transport")),
        allow(dead_code)
    )]
    pub(crate) fn new(stream: S, slot: Slot) -> Self {
        Self {
            stream,
            _slot: slot,
        }
    }
}

#[cfg(feature = "tokio-runtime")]
impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Counted<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

#[cfg(feature = "tokio-runtime")]
impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(any(feature = "async-std-runtime", feature = "async-dispatcher-runtime"))]
impl<S: futures::AsyncRead + Unpin> futures::AsyncRead for Counted<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

#[cfg(any(feature = "async-std-runtime", feature = "async-dispatcher-runtime"))]
impl<S: futures::AsyncWrite + Unpin> futures::AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_close(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_close(cx)
    }
}

/// ringtail: after a failed accept, reports it and pauses
/// [`crate::ACCEPT_BACKOFF`]; false if the listener was told to stop
/// meanwhile. A failed accept (`EMFILE`) leaves the connection in the
/// backlog, so accepting again at once fails again at once: the stock
/// accept loop spun at a full CPU while out of descriptors.
#[cfg_attr(
    not(any(feature = "ipc-transport", feature = "tcp-transport")),
    allow(dead_code)
)]
pub(crate) async fn pause_after_failed_accept(
    error: &std::io::Error,
    options: &crate::SocketOptions,
    mut stop: &mut futures::future::Fuse<futures::channel::oneshot::Receiver<()>>,
) -> bool {
    use futures::FutureExt;
    options.report(crate::LimitEvent::AcceptFailed { kind: error.kind() });
    let mut pause = crate::async_rt::task::sleep(crate::ACCEPT_BACKOFF)
        .boxed()
        .fuse();
    futures::select! {
        _ = pause => true,
        _ = stop => false,
    }
}

#[allow(unused)]
#[cfg(feature = "tokio-runtime")]
fn make_framed<T>(stream: T, options: Arc<crate::SocketOptions>) -> FramedIo
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Sync + 'static,
{
    use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
    let (read, write) = tokio::io::split(stream);
    FramedIo::new(
        Box::new(read.compat()),
        Box::new(write.compat_write()),
        options,
    )
}

#[allow(unused)]
#[cfg(any(feature = "async-std-runtime", feature = "async-dispatcher-runtime"))]
fn make_framed<T>(stream: T, options: Arc<crate::SocketOptions>) -> FramedIo
where
    T: futures::AsyncRead + futures::AsyncWrite + Send + Sync + 'static,
{
    use futures::AsyncReadExt;
    let (read, write) = stream.split();
    FramedIo::new(Box::new(read), Box::new(write), options)
}
