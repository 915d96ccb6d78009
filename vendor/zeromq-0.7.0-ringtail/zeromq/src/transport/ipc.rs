use std::sync::Arc;

#[cfg(all(feature = "tokio-runtime", target_family = "unix"))]
use tokio::net::{UnixListener, UnixStream};

#[cfg(all(
    any(feature = "async-std-runtime", feature = "async-dispatcher-runtime"),
    target_family = "unix"
))]
use async_std::os::unix::net::{UnixListener, UnixStream};

// Compile the adapter on Unix in unit tests as well, so its I/O behavior can
// be exercised locally without replacing the native Unix runtime transports.
#[cfg(any(windows, test))]
mod windows;
#[cfg(windows)]
use windows::{UnixListener, UnixStream};

#[cfg(target_family = "unix")]
use super::make_framed;
use super::AcceptStopHandle;
use crate::async_rt;
use crate::codec::FramedIo;
use crate::endpoint::Endpoint;
use crate::task_handle::TaskHandle;
use crate::ZmqResult;

use futures::channel::oneshot;
use futures::{select, FutureExt};

use std::path::Path;

#[cfg(target_family = "unix")]
fn pathname_from_unix_addr(addr: impl UnixSocketAddrExt) -> Option<std::path::PathBuf> {
    addr.as_pathname().map(|a| a.to_owned())
}

#[cfg(target_family = "unix")]
trait UnixSocketAddrExt {
    fn as_pathname(&self) -> Option<&Path>;
}

#[cfg(target_family = "unix")]
impl UnixSocketAddrExt for std::os::unix::net::SocketAddr {
    fn as_pathname(&self) -> Option<&Path> {
        self.as_pathname()
    }
}

#[cfg(all(feature = "tokio-runtime", target_family = "unix"))]
impl UnixSocketAddrExt for tokio::net::unix::SocketAddr {
    fn as_pathname(&self) -> Option<&Path> {
        self.as_pathname()
    }
}

#[cfg(windows)]
fn make_framed(stream: UnixStream, options: Arc<crate::SocketOptions>) -> FramedIo {
    use futures::AsyncReadExt;
    let (read, write) = stream.split();
    FramedIo::new(Box::new(read), Box::new(write), options)
}

/// ringtail: applies `SocketOptions::peer_filter` to a new connection, before
/// any byte is read from it or written to it.
fn admit_peer(stream: &UnixStream, options: &crate::SocketOptions) -> std::io::Result<()> {
    let Some(filter) = &options.peer_filter else {
        return Ok(());
    };
    let cred = peer_cred(stream);
    if cred.as_ref().is_some_and(|cred| filter(cred)) {
        return Ok(());
    }
    options.report(crate::LimitEvent::PeerRefused { cred });
    Err(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        "ipc peer refused by the peer filter",
    ))
}

#[cfg(all(feature = "tokio-runtime", target_family = "unix"))]
fn peer_cred(stream: &UnixStream) -> Option<crate::PeerCred> {
    let cred = stream.peer_cred().ok()?;
    Some(crate::PeerCred {
        pid: cred.pid(),
        uid: cred.uid(),
        gid: cred.gid(),
    })
}

// Not implemented for other runtimes: a peer filter refuses every peer there.
#[cfg(not(all(feature = "tokio-runtime", target_family = "unix")))]
fn peer_cred(_stream: &UnixStream) -> Option<crate::PeerCred> {
    None
}

pub(crate) async fn connect(
    path: &Path,
    options: Arc<crate::SocketOptions>,
) -> ZmqResult<(FramedIo, Endpoint)> {
    let raw_socket = UnixStream::connect(path).await?;
    admit_peer(&raw_socket, &options)?;

    #[cfg(target_family = "unix")]
    let peer_addr = raw_socket.peer_addr()?;
    #[cfg(target_family = "unix")]
    let peer_addr = pathname_from_unix_addr(peer_addr);

    #[cfg(windows)]
    let peer_addr = Some(path.to_owned());

    Ok((make_framed(raw_socket, options), Endpoint::Ipc(peer_addr)))
}

pub(crate) async fn begin_accept<T>(
    path: &Path,
    options: Arc<crate::SocketOptions>,
    cback: impl Fn(ZmqResult<(FramedIo, Endpoint)>) -> T + Send + 'static,
) -> ZmqResult<(Endpoint, AcceptStopHandle)>
where
    T: std::future::Future<Output = ()> + Send + 'static,
{
    let wildcard: &Path = "*".as_ref();
    if path == wildcard {
        todo!("Need to implement support for wildcard paths!");
    }

    #[cfg(all(feature = "tokio-runtime", target_family = "unix"))]
    let listener = UnixListener::bind(path)?;
    #[cfg(all(
        any(feature = "async-std-runtime", feature = "async-dispatcher-runtime"),
        target_family = "unix"
    ))]
    let listener = UnixListener::bind(path).await?;
    #[cfg(windows)]
    let listener = UnixListener::bind(path)?;

    #[cfg(target_family = "unix")]
    let resolved_addr = pathname_from_unix_addr(listener.local_addr()?);
    #[cfg(windows)]
    let resolved_addr = Some(path.to_owned());

    begin_accept_bound(listener, resolved_addr, options, cback).await
}

#[cfg(target_family = "unix")]
pub(crate) async fn begin_accept_listener<T>(
    listener: std::os::unix::net::UnixListener,
    options: Arc<crate::SocketOptions>,
    cback: impl Fn(ZmqResult<(FramedIo, Endpoint)>) -> T + Send + 'static,
) -> ZmqResult<(Endpoint, AcceptStopHandle)>
where
    T: std::future::Future<Output = ()> + Send + 'static,
{
    let resolved_addr = listener.local_addr()?;
    let resolved_addr = pathname_from_unix_addr(resolved_addr);
    listener.set_nonblocking(true)?;

    #[cfg(feature = "tokio-runtime")]
    let listener = UnixListener::from_std(listener)?;
    #[cfg(any(feature = "async-std-runtime", feature = "async-dispatcher-runtime"))]
    let listener = UnixListener::from(listener);

    begin_accept_bound(listener, resolved_addr, options, cback).await
}

async fn begin_accept_bound<T>(
    listener: UnixListener,
    resolved_addr: Option<std::path::PathBuf>,
    options: Arc<crate::SocketOptions>,
    cback: impl Fn(ZmqResult<(FramedIo, Endpoint)>) -> T + Send + 'static,
) -> ZmqResult<(Endpoint, AcceptStopHandle)>
where
    T: std::future::Future<Output = ()> + Send + 'static,
{
    let listener_addr = resolved_addr.clone();
    let bound = resolved_addr.clone().and_then(super::BoundPath::new);
    let (stop_channel, stop_callback) = oneshot::channel::<()>();
    // ringtail: at most `max_connections` open at once.
    let slots = super::ConnectionSlots::new(options.max_connections);
    let task_handle = async_rt::task::spawn(async move {
        let mut stop_callback = stop_callback.fuse();
        loop {
            select! {
                incoming = listener.accept().fuse() => {
                    let (raw_socket, peer_addr) = match incoming {
                        Ok(accepted) => accepted,
                        Err(error) => {
                            let paused = super::pause_after_failed_accept(&error, &options, &mut stop_callback).await;
                            async_rt::task::spawn(cback(Err(error.into())));
                            if paused {
                                continue;
                            }
                            break;
                        }
                    };
                    if let Err(error) = admit_peer(&raw_socket, &options) {
                        async_rt::task::spawn(cback(Err(error.into())));
                        continue;
                    }
                    // Closed at once beyond the limit (reported by `take`).
                    let Some(slot) = slots.take(&options) else {
                        continue;
                    };
                    #[cfg(target_family = "unix")]
                    let peer_addr = pathname_from_unix_addr(peer_addr);
                    #[cfg(windows)]
                    let peer_addr = {
                        let _ = peer_addr;
                        None
                    };
                    let framed = make_framed(super::Counted::new(raw_socket, slot), Arc::clone(&options));
                    async_rt::task::spawn(cback(Ok((framed, Endpoint::Ipc(peer_addr)))));
                },
                _ = stop_callback => {
                    log::debug!("Accept task received stop signal. {:?}", listener_addr);
                    break
                }
            }
        }
        // ringtail: the file is removed by the `BoundPath` in the stop
        // handle, when the socket is dropped or unbinds, not here.
        drop(listener);
        Ok(())
    });
    Ok((
        Endpoint::Ipc(resolved_addr),
        AcceptStopHandle(TaskHandle::new(stop_channel, task_handle), bound),
    ))
}
