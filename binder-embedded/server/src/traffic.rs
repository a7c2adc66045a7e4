//! The octets a connection's socket carried, counted as they pass, for the management API
//! (RabbitMQ's `recv_oct` and `send_oct`): the handshake's, the frames', the heartbeats'.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Octets received and sent on one connection.
#[derive(Debug, Clone, Default)]
pub(crate) struct Traffic {
    received: Arc<AtomicU64>,
    sent: Arc<AtomicU64>,
}

impl Traffic {
    /// Octets read from the client so far.
    pub(crate) fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Octets written to the client so far.
    pub(crate) fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// The socket's read half, counting into [`Traffic::received`].
    pub(crate) fn reading<R>(&self, inner: R) -> Counted<R> {
        Counted {
            inner,
            count: self.received.clone(),
        }
    }

    /// The socket's write half, counting into [`Traffic::sent`].
    pub(crate) fn writing<W>(&self, inner: W) -> Counted<W> {
        Counted {
            inner,
            count: self.sent.clone(),
        }
    }
}

/// A socket half that adds the octets passing through it to a counter.
#[derive(Debug)]
pub(crate) struct Counted<S> {
    inner: S,
    count: Arc<AtomicU64>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Counted<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        self.count.fetch_add(read as u64, Ordering::Relaxed);
        polled
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Counted<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(written)) = &polled {
            self.count.fetch_add(*written as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn both_directions_are_counted() {
        let traffic = Traffic::default();
        let (client, server) = tokio::io::duplex(64);
        let (read, write) = tokio::io::split(server);
        let (mut read, mut write) = (traffic.reading(read), traffic.writing(write));
        let (mut client_read, mut client_write) = tokio::io::split(client);
        write.write_all(b"hello").await.unwrap();
        client_write.write_all(b"abc").await.unwrap();
        let mut got = [0u8; 3];
        read.read_exact(&mut got).await.unwrap();
        let mut echoed = [0u8; 5];
        client_read.read_exact(&mut echoed).await.unwrap();
        assert_eq!((traffic.received(), traffic.sent()), (3, 5));
    }
}
