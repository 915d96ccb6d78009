use std::sync::Arc;

#[cfg(feature = "tokio-runtime")]
use tokio::net::{TcpListener, TcpStream};

#[cfg(any(feature = "async-std-runtime", feature = "async-dispatcher-runtime"))]
use async_std::net::{TcpListener, TcpStream};

use super::make_framed;
use super::AcceptStopHandle;
use crate::async_rt;
use crate::codec::FramedIo;
use crate::endpoint::{Endpoint, Host, Port};
use crate::task_handle::TaskHandle;
use crate::ZmqResult;

use futures::{select, FutureExt};

#[cfg(feature = "tokio-runtime")]
const TCP_SOCKET_BUFFER_SIZE: usize = 4 * 1024 * 1024;

/// ringtail: a TCP peer has no credentials, so a socket with a
/// `SocketOptions::peer_filter` refuses it.
fn admit_peer(options: &crate::SocketOptions) -> std::io::Result<()> {
    if options.peer_filter.is_none() {
        return Ok(());
    }
    options.report(crate::LimitEvent::PeerRefused { cred: None });
    Err(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        "a socket with a peer filter refuses TCP peers",
    ))
}

pub(crate) async fn connect(
    host: &Host,
    port: Port,
    options: Arc<crate::SocketOptions>,
) -> ZmqResult<(FramedIo, Endpoint)> {
    let raw_socket = TcpStream::connect((host.to_string().as_str(), port)).await?;
    admit_peer(&options)?;
    // For some reason set_nodelay doesn't work on windows. See
    // https://github.com/zeromq/zmq.rs/issues/148 for details
    #[cfg(not(windows))]
    raw_socket.set_nodelay(true)?;
    tune_socket_buffers(&raw_socket);
    let peer_addr = raw_socket.peer_addr()?;

    Ok((
        make_framed(raw_socket, options),
        Endpoint::from_tcp_addr(peer_addr),
    ))
}

pub(crate) async fn begin_accept<T>(
    host: Host,
    port: Port,
    options: Arc<crate::SocketOptions>,
    cback: impl Fn(ZmqResult<(FramedIo, Endpoint)>) -> T + Send + 'static,
) -> ZmqResult<(Endpoint, AcceptStopHandle)>
where
    T: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind((host.to_string().as_str(), port)).await?;
    let resolved_addr = listener.local_addr()?;
    debug_assert_ne!(resolved_addr.port(), 0);
    let endpoint = Endpoint::Tcp(host, resolved_addr.port());
    begin_accept_bound(listener, endpoint, options, cback).await
}

pub(crate) async fn begin_accept_listener<T>(
    listener: std::net::TcpListener,
    options: Arc<crate::SocketOptions>,
    cback: impl Fn(ZmqResult<(FramedIo, Endpoint)>) -> T + Send + 'static,
) -> ZmqResult<(Endpoint, AcceptStopHandle)>
where
    T: std::future::Future<Output = ()> + Send + 'static,
{
    let resolved_addr = listener.local_addr()?;
    listener.set_nonblocking(true)?;

    #[cfg(feature = "tokio-runtime")]
    let listener = TcpListener::from_std(listener)?;
    #[cfg(any(feature = "async-std-runtime", feature = "async-dispatcher-runtime"))]
    let listener = TcpListener::from(listener);

    begin_accept_bound(
        listener,
        Endpoint::from_tcp_addr(resolved_addr),
        options,
        cback,
    )
    .await
}

async fn begin_accept_bound<T>(
    listener: TcpListener,
    endpoint: Endpoint,
    options: Arc<crate::SocketOptions>,
    cback: impl Fn(ZmqResult<(FramedIo, Endpoint)>) -> T + Send + 'static,
) -> ZmqResult<(Endpoint, AcceptStopHandle)>
where
    T: std::future::Future<Output = ()> + Send + 'static,
{
    let (stop_channel, stop_callback) = futures::channel::oneshot::channel::<()>();
    // ringtail: at most `max_connections` open at once.
    let slots = super::ConnectionSlots::new(options.max_connections);
    let task_handle = async_rt::task::spawn(async move {
        let mut stop_callback = stop_callback.fuse();
        loop {
            select! {
                incoming = listener.accept().fuse() => {
                    let (raw_socket, remote_addr) = match incoming {
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
                    if let Err(error) = admit_peer(&options) {
                        async_rt::task::spawn(cback(Err(error.into())));
                        continue;
                    }
                    // Closed at once beyond the limit (reported by `take`).
                    let Some(slot) = slots.take(&options) else {
                        continue;
                    };
                    let maybe_accepted: Result<_, _> = raw_socket
                        .set_nodelay(true)
                        .map(|_| {
                            tune_socket_buffers(&raw_socket);
                            (
                                make_framed(super::Counted::new(raw_socket, slot), Arc::clone(&options)),
                                Endpoint::from_tcp_addr(remote_addr),
                            )
                        })
                        .map_err(|err| err.into());
                    async_rt::task::spawn(cback(maybe_accepted));
                }
                _ = stop_callback => {
                    break
                }
            }
        }
        Ok(())
    });
    Ok((
        endpoint,
        AcceptStopHandle(TaskHandle::new(stop_channel, task_handle), None),
    ))
}

#[cfg(feature = "tokio-runtime")]
fn tune_socket_buffers(raw_socket: &TcpStream) {
    let socket = socket2::SockRef::from(raw_socket);
    if let Err(error) = socket.set_recv_buffer_size(TCP_SOCKET_BUFFER_SIZE) {
        log::debug!("failed to set TCP receive buffer size: {error}");
    }
    if let Err(error) = socket.set_send_buffer_size(TCP_SOCKET_BUFFER_SIZE) {
        log::debug!("failed to set TCP send buffer size: {error}");
    }
}

#[cfg(not(feature = "tokio-runtime"))]
fn tune_socket_buffers(_raw_socket: &TcpStream) {}
