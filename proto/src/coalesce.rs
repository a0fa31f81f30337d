//! A stream that gathers what HTTP/2 writes in one turn of the runtime into one
//! write.
//!
//! The scheduler sends a pod's messages on several streams at once (the Replicate
//! stream's delta, CycleEnd and CycleStart, then the Filter call). h2 writes a DATA
//! frame larger than 256 bytes as soon as it is queued, so each stream's frame was
//! its own `writev`, and the sidecar woke once for each. Here the first flush of new
//! data yields once (the task is woken again at the back of the run queue), so frames
//! the other streams queue in that turn go out in the same write.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Above this many buffered bytes a write goes out at once.
const LIMIT: usize = 256 << 10;

pub struct Coalesce<S> {
    inner: S,
    buf: Vec<u8>,
    written: usize,
    yielded: bool,
}

impl<S> Coalesce<S> {
    pub fn new(inner: S) -> Self {
        Coalesce {
            inner,
            buf: Vec::new(),
            written: 0,
            yielded: false,
        }
    }
}

impl<S: AsyncWrite + Unpin> Coalesce<S> {
    /// Writes out the buffer.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.buf.len() {
            let n = match Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.written..]) {
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.buf.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.buf.len() >= LIMIT {
            return self.poll_drain(cx);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Coalesce<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Coalesce<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(data)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        match me.poll_room(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        let mut n = 0;
        for b in bufs {
            me.buf.extend_from_slice(b);
            n += b.len();
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        if me.buf.is_empty() {
            return Pin::new(&mut me.inner).poll_flush(cx);
        }
        if !me.yielded {
            // Once per batch: let the other ready tasks queue their frames first.
            me.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        match me.poll_drain(cx) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        me.yielded = false;
        Pin::new(&mut me.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        match me.poll_drain(cx) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        Pin::new(&mut me.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    /// Records each write the stream makes.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl AsyncWrite for Writes {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.0.push(data.to_vec());
            Poll::Ready(Ok(data.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    struct Wakes(AtomicUsize);
    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn frames_queued_before_the_second_flush_go_out_in_one_write() {
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut s = Coalesce::new(Writes::default());
        let mut p = Pin::new(&mut s);
        assert!(matches!(
            p.as_mut().poll_write(&mut cx, b"replicate"),
            Poll::Ready(Ok(9))
        ));
        // The first flush yields and asks to be polled again.
        assert!(p.as_mut().poll_flush(&mut cx).is_pending());
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
        assert!(p.inner.0.is_empty());
        let slices = [io::IoSlice::new(b"+fil"), io::IoSlice::new(b"ter")];
        assert!(matches!(
            p.as_mut().poll_write_vectored(&mut cx, &slices),
            Poll::Ready(Ok(7))
        ));
        assert!(p.as_mut().poll_flush(&mut cx).is_ready());
        assert_eq!(p.inner.0, vec![b"replicate+filter".to_vec()]);
        // Nothing buffered: a flush goes straight through, and the next batch yields
        // again.
        assert!(p.as_mut().poll_flush(&mut cx).is_ready());
        assert!(matches!(
            p.as_mut().poll_write(&mut cx, b"x"),
            Poll::Ready(Ok(1))
        ));
        assert!(p.as_mut().poll_flush(&mut cx).is_pending());
        assert!(matches!(
            p.as_mut().poll_shutdown(&mut cx),
            Poll::Ready(Ok(()))
        ));
        assert_eq!(p.inner.0.len(), 2);
    }

    #[test]
    fn a_full_buffer_is_written_before_more_is_taken() {
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut s = Coalesce::new(Writes::default());
        let big = vec![7u8; LIMIT];
        let mut p = Pin::new(&mut s);
        assert!(p.as_mut().poll_write(&mut cx, &big).is_ready());
        assert!(p.inner.0.is_empty());
        assert!(p.as_mut().poll_write(&mut cx, b"more").is_ready());
        assert_eq!(p.inner.0.len(), 1);
        assert_eq!(p.buf, b"more");
    }
}
