//! The harness: the real pipe next to the model, one operation at a time, every result compared.

use super::*;

pub(crate) struct Harness {
    pub(crate) pool: Pool,
    pub(crate) packet_pool: Pool,
    pub(crate) writer: Option<PipeWriter>,
    pub(crate) reader: Option<PipeReader>,
    pub(crate) read_canceler: PipeCanceler,
    pub(crate) flush_canceler: PipeCanceler,
    pub(crate) flush_wakes: Arc<CountWaker>,
    pub(crate) flush_waker: Waker,
    pub(crate) read_wakes: Arc<CountWaker>,
    pub(crate) read_waker: Waker,
    /// Wake counts at the end of the previous step.
    pub(crate) flush_wakes_seen: usize,
    /// Whether the flush waker had been woken when the flush was polled again.
    pub(crate) flush_wakes_seen_before_poll: bool,
    pub(crate) read_wakes_seen: usize,
    /// The last `read` was a coalescing yield (`Pending`, no wait).
    pub(crate) read_yielded: bool,
    pub(crate) m: Model,
    /// Bytes the reader received: consumed prefixes of read buffers, and frames.
    pub(crate) received: Vec<u8>,
    /// Content of the last read buffer (less frames taken).
    pub(crate) last_buffer: Vec<u8>,
    pub(crate) frames: Vec<(Vec<u8>, Packet)>,
    pub(crate) chains: Vec<(Vec<u8>, PacketChain)>,
    /// Counter for fresh data bytes.
    pub(crate) seq: u64,
    pub(crate) rents_at_reader_done: Option<u64>,
}

/// Wakes an operation may cause without being able to complete the pending one (the model checks
/// the rest: a wake is required when the pending operation can complete, and allowed only then
/// or when the step says so).
#[derive(Default)]
pub(crate) struct MayWake {
    pub(crate) flush: bool,
    pub(crate) read: bool,
}

impl Harness {
    pub(crate) fn new(config: &CaseConfig) -> Harness {
        let mut pool = packetpipe::PoolOptions {
            min_class_size: config.pool_min_class,
            max_class_size: config.pool_max_class,
            ..packetpipe::PoolOptions::default()
        };
        if let Some(depth) = config.pool_thread_cache_depth {
            pool.thread_cache_depth = depth;
        }
        let pool = Pool::with_options(pool).unwrap();
        let packet_pool = Pool::with_options(packetpipe::PoolOptions {
            min_class_size: 16,
            max_class_size: 256,
            ..packetpipe::PoolOptions::default()
        })
        .unwrap();
        let options = PipeOptions {
            pause_threshold: config.pause,
            resume_threshold: config.resume,
            min_segment_size: config.min_segment,
            copy_threshold: config.copy_threshold,
            pool: Some(pool.clone()),
        };
        let (writer, reader) = pipe_with(options);
        // Each end's canceler cancels that end's pending operation.
        let (read_canceler, flush_canceler) = (reader.canceler(), writer.canceler());
        let flush_wakes = Arc::new(CountWaker::default());
        let read_wakes = Arc::new(CountWaker::default());
        let m = Model {
            pause: config.pause as u64,
            resume: config.resume.clamp(1, config.pause.max(1)) as u64,
            copy_threshold: config.copy_threshold,
            ..Model::default()
        };
        Harness {
            pool,
            packet_pool,
            writer: Some(writer),
            reader: Some(reader),
            read_canceler,
            flush_canceler,
            flush_waker: Waker::from(flush_wakes.clone()),
            flush_wakes,
            read_waker: Waker::from(read_wakes.clone()),
            read_wakes,
            flush_wakes_seen: 0,
            flush_wakes_seen_before_poll: false,
            read_wakes_seen: 0,
            read_yielded: false,
            m,
            received: Vec::new(),
            last_buffer: Vec::new(),
            frames: Vec::new(),
            chains: Vec::new(),
            seq: 0,
            rents_at_reader_done: None,
        }
    }

    pub(crate) fn fresh_bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                self.seq += 1;
                (self.seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
            })
            .collect()
    }

    #[track_caller]
    pub(crate) fn expect_err<T: std::fmt::Debug>(
        &mut self,
        actual: Result<T, Error>,
        expected: &Expect,
    ) {
        match actual {
            Ok(v) => panic!("expected error {expected:?}, got Ok({v:?})"),
            Err(e) => check_error(&e, expected),
        }
    }

    pub(crate) fn run(&mut self, step: &Step) {
        let published_before = self.m.published;
        let writer_done_before = self.m.writer_done;
        let mut may = MayWake::default();
        match &step.op {
            Op::CancelRead => {
                self.read_canceler.cancel();
                self.m.cancel_read = true;
            }
            Op::CancelFlush => {
                self.flush_canceler.cancel();
                self.m.cancel_flush = true;
            }
            Op::Append { .. }
            | Op::BufferAdvance { .. }
            | Op::Advance { .. }
            | Op::Write { .. }
            | Op::Flush
            | Op::PollFlush
            | Op::WriterComplete
            | Op::WriterCompleteWithError
            | Op::DropWriter => self.writer_op(step),
            _ => self.reader_op(step, &mut may),
        }
        // Publishing wakes a waiting reader even when it still lacks bytes (read_at_least).
        may.read |=
            self.m.published != published_before || self.m.writer_done != writer_done_before;
        self.check_wakes(&may);
        self.check_unflushed();
    }

    /// No lost wakeups, no wakes out of nowhere.
    pub(crate) fn check_wakes(&mut self, may: &MayWake) {
        let fw = self.flush_wakes.get();
        if self.m.flush_pending {
            if self.m.flush_ready() {
                assert!(
                    fw > 0,
                    "a pending flush that can now complete was not woken"
                );
            }
            if fw > self.flush_wakes_seen {
                assert!(
                    self.m.flush_ready() || may.flush,
                    "a pending flush was woken although nothing lets it complete"
                );
            }
        }
        self.flush_wakes_seen = fw;
        let rw = self.read_wakes.get();
        if let Some(want) = self.m.read_pending {
            if self.m.read_ready(want) {
                assert!(
                    rw > 0,
                    "a pending read ({want:?}) that can now complete was not woken"
                );
            }
            if rw > self.read_wakes_seen {
                assert!(
                    self.m.read_ready(want) || may.read,
                    "a pending read ({want:?}) was woken although nothing lets it complete"
                );
            }
        }
        self.read_wakes_seen = rw;
    }

    pub(crate) fn check_unflushed(&self) {
        if let Some(writer) = &self.writer {
            if !self.m.reader_done {
                assert_eq!(writer.unflushed_len(), self.m.staged.len(), "unflushed_len");
            }
        }
    }

    // --- writer -----------------------------------------------------------------------------

    pub(crate) fn writer_op(&mut self, step: &Step) {
        if self.writer.is_none() {
            return;
        }
        let mut op = step.op.clone();
        if self.m.flush_pending {
            let ends = matches!(
                op,
                Op::WriterComplete | Op::WriterCompleteWithError | Op::DropWriter
            );
            if !ends && step.gate % 4 != 0 {
                // Keep waiting: poll the pending flush again.
                op = Op::PollFlush;
            } else if !matches!(op, Op::PollFlush) {
                // Drop the pending flush and go on writing.
                self.m.flush_pending = false;
            }
        }
        match op {
            Op::Append { kind, len, off } => self.append(kind, len, off),
            Op::BufferAdvance { hint, n, over } => self.buffer_advance(hint, n, over),
            Op::Advance { n, over } => self.advance(n, over),
            Op::Write { len } => {
                let data = self.fresh_bytes(len);
                let result = self.writer.as_mut().unwrap().write_slice(&data);
                if self.m.writer_done {
                    self.expect_err(result, &Expect::WriterCompleted);
                } else {
                    result.unwrap();
                    self.m.stage(&data);
                    // `write` closes the space `buffer_mut` handed out (an empty write does
                    // nothing at all).
                    if len > 0 {
                        self.m.handed = Some(Vec::new());
                    }
                }
            }
            Op::Flush => self.flush(true),
            Op::PollFlush => self.flush(false),
            Op::WriterComplete => {
                self.writer.as_mut().unwrap().complete();
                self.m.writer_complete(None);
            }
            Op::WriterCompleteWithError => {
                let message = format!("writer failure {}", self.seq);
                self.writer
                    .as_mut()
                    .unwrap()
                    .complete_with_error(message.clone());
                self.m.writer_complete(Some(message));
            }
            Op::DropWriter => {
                self.writer = None;
                self.m.writer_complete(None);
            }
            _ => unreachable!(),
        }
    }

    pub(crate) fn append(&mut self, kind: Kind, len: usize, off: usize) {
        let (data, packet): (Vec<u8>, Packet) = match kind {
            Kind::Pooled => {
                let data = self.fresh_bytes(len);
                let packet = self.packet_pool.copy_from_slice(&data).unwrap();
                (data, packet)
            }
            Kind::PooledSlice => {
                let data = self.fresh_bytes(len + 6);
                let packet = self.packet_pool.copy_from_slice(&data).unwrap();
                (data[3..3 + len].to_vec(), packet.slice(3..3 + len))
            }
            Kind::PacketBuf => {
                let data = self.fresh_bytes(len);
                let mut buf = self.packet_pool.rent(len.max(1)).unwrap();
                buf.extend_from_slice(&data).unwrap();
                (data, buf.into())
            }
            Kind::Bytes => {
                let data = self.fresh_bytes(len);
                let packet = Bytes::copy_from_slice(&data);
                (data, packet.into())
            }
            Kind::BytesStatic => {
                let off = off.min(STATIC.len());
                let len = len.min(STATIC.len() - off);
                let s = &STATIC[off..off + len];
                (s.to_vec(), Bytes::from_static(s).into())
            }
            Kind::Vec => {
                let data = self.fresh_bytes(len);
                (data.clone(), data.into())
            }
            Kind::Static => {
                let off = off.min(STATIC.len());
                let len = len.min(STATIC.len() - off);
                let s: &'static [u8] = &STATIC[off..off + len];
                (s.to_vec(), s.into())
            }
            Kind::Inline => {
                let data = self.fresh_bytes(len);
                let packet = Packet::copy_from_slice(&data);
                // Inline exactly when it fits: a clone of an inline packet is a copy.
                assert_eq!(
                    packet.clone().get_mut().is_some(),
                    len <= Packet::INLINE_CAPACITY
                );
                (data, packet)
            }
            Kind::Empty => (Vec::new(), Packet::new()),
        };
        let result = self.writer.as_mut().unwrap().append(packet);
        if self.m.writer_done {
            self.expect_err(result, &Expect::WriterCompleted);
        } else {
            result.unwrap();
            if data.is_empty() {
                return; // an empty packet is ignored: it changes nothing
            }
            self.m.stage(&data);
            // `append` closes the space `buffer_mut` handed out: bytes committed later must come
            // after the packet. (Once the writer has noticed that the reader completed, it
            // returns before that, so then the space left is unknown to the model.)
            self.m.handed = if self.m.reader_done {
                None
            } else {
                Some(Vec::new())
            };
        }
    }

    pub(crate) fn buffer_advance(&mut self, hint: usize, n: Pick, over: bool) {
        let writer_done = self.m.writer_done;
        let mut fill = Vec::new();
        {
            let seq = &mut self.seq;
            let writer = self.writer.as_mut().unwrap();
            match writer.spare_mut(hint) {
                Err(e) => {
                    assert!(writer_done, "buffer_mut({hint}) failed: {e}");
                    check_error(&e, &Expect::WriterCompleted);
                    return;
                }
                Ok(space) => {
                    assert!(
                        !writer_done,
                        "buffer_mut after the writer completed must fail"
                    );
                    assert!(
                        space.len() >= hint.max(1),
                        "buffer_mut({hint}) gave {}",
                        space.len()
                    );
                    for b in space.iter_mut() {
                        *seq += 1;
                        *b = (seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8;
                    }
                    fill.extend_from_slice(space);
                }
            }
        }
        let len = fill.len();
        let n = if over { n.beyond(len) } else { n.within(len) };
        let result = self.writer.as_mut().unwrap().commit(n);
        if n > len {
            self.expect_err(
                result,
                &Expect::CommitPastSpare {
                    requested: n,
                    available: Some(len),
                },
            );
            self.m.handed = Some(fill);
        } else {
            result.unwrap();
            self.m.stage(&fill[..n]);
            self.m.handed = Some(fill[n..].to_vec());
        }
    }

    pub(crate) fn advance(&mut self, n: Pick, over: bool) {
        let known = self.m.handed.clone();
        let n = match &known {
            Some(h) if over => n.beyond(h.len()),
            Some(h) => n.within(h.len()),
            // Unknown space: only 0 (always fine) and far too much (always an error) are defined.
            None if over => 1 << 40,
            None => 0,
        };
        let result = self.writer.as_mut().unwrap().commit(n);
        if self.m.writer_done {
            return self.expect_err(result, &Expect::WriterCompleted);
        }
        match known {
            Some(h) if n <= h.len() => {
                result.unwrap();
                self.m.stage(&h[..n]);
                self.m.handed = Some(h[n..].to_vec());
            }
            Some(h) => self.expect_err(
                result,
                &Expect::CommitPastSpare {
                    requested: n,
                    available: Some(h.len()),
                },
            ),
            None if n == 0 => result.unwrap(),
            None => self.expect_err(
                result,
                &Expect::CommitPastSpare {
                    requested: n,
                    available: None,
                },
            ),
        }
    }

    pub(crate) fn flush(&mut self, fresh: bool) {
        let writer = self.writer.as_mut().unwrap();
        self.flush_wakes_seen_before_poll = self.flush_wakes.get() > 0;
        self.flush_wakes.reset();
        self.flush_wakes_seen = 0;
        let mut cx = Context::from_waker(&self.flush_waker);
        let actual = if fresh {
            let mut future = writer.flush_pipe();
            Pin::new(&mut future).poll(&mut cx)
        } else {
            writer.poll_flush_pipe(&mut cx)
        };
        let was_pending = self.m.flush_pending;
        let reader_needs_lifts = self.m.reader_needs > self.m.published;
        let woken = self.flush_wakes_seen_before_poll;
        let expected = self.m.poll_flush_pipe(fresh);
        cover_flush(
            &expected,
            was_pending && !fresh,
            reader_needs_lifts,
            woken,
            &self.m,
        );
        match (actual, expected) {
            (Poll::Pending, Outcome::Pending) => {}
            (Poll::Ready(Ok(r)), Outcome::Ok(e)) => {
                assert_eq!(
                    (r.is_completed, r.is_canceled),
                    e,
                    "flush (is_completed, is_canceled)"
                )
            }
            (Poll::Ready(Err(e)), Outcome::Err(x)) => {
                check_error(&e, &x);
            }
            (actual, expected) => panic!("flush: expected {expected:?}, got {actual:?}"),
        }
    }

    // --- reader -----------------------------------------------------------------------------

    pub(crate) fn reader_op(&mut self, step: &Step, may: &mut MayWake) {
        if self.reader.is_none() {
            return;
        }
        let ends = matches!(
            step.op,
            Op::ReaderComplete | Op::ReaderCompleteWithError | Op::DropReader
        );
        if let Some(want) = self.m.read_pending {
            if !ends {
                // A pending read borrows the reader: the only thing to do is poll it again.
                let form = if step.gate % 2 == 0 {
                    ReadForm::Future
                } else {
                    ReadForm::Poll
                };
                self.read(want, form, false, may);
                return;
            }
        }
        match step.op {
            Op::Read { form } => {
                self.read(Want::New, form, false, may);
            }
            Op::ReadAtLeast { n, form } => {
                let n = n.within(self.m.flushed.len() + 40);
                self.read(Want::AtLeast(n), form, false, may);
            }
            Op::ReadAtLeastAbandoned { n } => {
                let n = n.within(self.m.flushed.len() + 40);
                self.read(Want::AtLeast(n), ReadForm::Future, true, may);
            }
            Op::TryRead => self.try_read(),
            Op::AdvanceTo {
                consumed,
                examined,
                mode,
            } => self.advance_to(consumed, examined, mode),
            Op::TakeFrame { n, over } => self.take_frame(None, n, over, false),
            Op::TakeFrameChain { n, over } => self.take_frame(None, n, over, true),
            Op::TakeFrameAfter { skip, n, over } => self.take_frame(Some(skip), n, over, false),
            Op::ConsumeAll => self.consume_all(),
            Op::ReaderComplete => {
                self.reader.as_mut().unwrap().complete();
                self.reader_completed(None);
            }
            Op::ReaderCompleteWithError => {
                let message = format!("reader failure {}", self.seq);
                self.reader
                    .as_mut()
                    .unwrap()
                    .complete_with_error(message.clone());
                self.reader_completed(Some(message));
            }
            Op::DropReader => {
                self.reader = None;
                self.reader_completed(None);
            }
            _ => unreachable!(),
        }
    }

    pub(crate) fn reader_completed(&mut self, error: Option<String>) {
        if !self.m.reader_done {
            self.rents_at_reader_done = Some(self.pool.stats().rents);
        }
        self.m.reader_complete(error);
    }

    /// Poll a read once and check it; returns whether it gave a buffer.
    pub(crate) fn read(
        &mut self,
        want: Want,
        form: ReadForm,
        abandon: bool,
        may: &mut MayWake,
    ) -> bool {
        let was_pending = self.m.read_pending.is_some();
        let will_wait = !self.m.read_check_peek(want);
        // A `read_at_least` future dropped while pending takes its backpressure lift with it, so a
        // read that is to stay pending goes through the poll form unless it is meant to be dropped.
        let form = match want {
            Want::AtLeast(_) if will_wait && !abandon => ReadForm::Poll,
            _ => form,
        };
        self.read_wakes.reset();
        self.read_wakes_seen = 0;
        let seen = self.m.examined.max(self.m.consumed);
        let unseen = (self.m.consumed + self.m.flushed.len() as u64).saturating_sub(seen);
        let advanced = !(self.m.frames_taken && self.m.last_len.is_some());
        let would_yield = matches!((form, want), (ReadForm::Future, Want::New))
            && advanced
            && !self.m.reader_done
            && self.m.small_async_read
            && unseen > 0
            && unseen < SMALL_READ;
        // A pending read is polled again: the same future's second poll, which does not yield. A
        // fresh future here would, so such a poll goes through the poll form, which is that poll.
        let form = if would_yield && was_pending {
            ReadForm::Poll
        } else {
            form
        };
        let coalescing = matches!((form, want), (ReadForm::Future, Want::New));
        if would_yield && !was_pending {
            // Read coalescing: a fresh `read_buffer()` after a small one, with a few new bytes
            // there, yields once (wakes its task, returns `Pending`) before it looks: no cancel
            // consumed, nothing registered, the model unchanged.
            cover("read yielded to coalesce");
            let reader = self.reader.as_mut().unwrap();
            let mut cx = Context::from_waker(&self.read_waker);
            let mut future = reader.read_buffer();
            let poll = Pin::new(&mut future).poll(&mut cx).map(|r| r.map(drop));
            assert!(
                poll.is_pending(),
                "a coalescing read yields first, got {poll:?}"
            );
            assert_eq!(self.read_wakes.get(), 1, "a yield wakes its task once");
            self.read_wakes.reset();
            self.read_yielded = true;
            // The yield is spent on the reader: the next `read_buffer()`, even a fresh future
            // after this one is dropped (as here), does not yield again.
            self.m.small_async_read = false;
            return false;
        }
        self.read_yielded = false;
        let expected = self.m.poll_read_buffer(want);
        match (&expected, was_pending) {
            (Outcome::Pending, false) => {
                cover("read waited");
                if let Want::AtLeast(_) = want {
                    cover(if abandon {
                        "read_at_least abandoned while waiting"
                    } else {
                        "read_at_least waited"
                    });
                }
            }
            (Outcome::Ok((_, true)), true) => cover("pending read canceled"),
            (Outcome::Ok(_), true) if self.m.writer_done => {
                cover("pending read completed by writer completion")
            }
            (Outcome::Ok(_), true) => cover("pending read completed by a flush"),
            (Outcome::Err(Expect::Peer { .. }), _) => cover("read got the writer's error"),
            _ => {}
        }
        if matches!(expected, Outcome::Pending) && matches!(want, Want::AtLeast(_)) {
            // Registering a read_at_least wakes a paused writer (backpressure is lifted).
            may.flush = true;
        }
        let expected_bytes: Vec<u8> = self.m.flushed.iter().copied().collect();
        let pick = self.seq as usize;
        let reader = self.reader.as_mut().unwrap();
        let mut cx = Context::from_waker(&self.read_waker);
        // (is_completed, is_canceled if reported) of a ready result.
        let actual: Poll<Result<(bool, Option<bool>), Error>> = match form {
            ReadForm::Future => {
                let mut future = match want {
                    Want::New => reader.read_buffer(),
                    Want::AtLeast(n) => reader.read_at_least(n),
                };
                match Pin::new(&mut future).poll(&mut cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Ready(Ok(result)) => {
                        check_buffer_parts(result.buffer, &expected_bytes, pick);
                        Poll::Ready(Ok((result.is_completed, Some(result.is_canceled))))
                    }
                }
            }
            ReadForm::Poll => {
                let polled = match want {
                    Want::New => reader.poll_read_buffer(&mut cx),
                    Want::AtLeast(n) => reader.poll_read_at_least(&mut cx, n),
                };
                match polled {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Ready(Ok(())) => {
                        let result = reader
                            .last_read()
                            .expect("a ready poll_read leaves a result");
                        check_buffer_parts(result.buffer, &expected_bytes, pick);
                        Poll::Ready(Ok((result.is_completed, Some(result.is_canceled))))
                    }
                }
            }
        };
        let gave_buffer = matches!(actual, Poll::Ready(Ok(_)));
        match (actual, expected) {
            (Poll::Pending, Outcome::Pending) => {
                if abandon {
                    self.m.read_pending = None;
                    self.m.reader_needs = 0;
                }
            }
            (Poll::Ready(Ok((completed, canceled))), Outcome::Ok((e_completed, e_canceled))) => {
                if coalescing {
                    self.m.small_async_read =
                        self.m.consumed + expected_bytes.len() as u64 - seen < SMALL_READ;
                }
                assert_eq!(completed, e_completed, "read is_completed");
                if let Some(canceled) = canceled {
                    assert_eq!(canceled, e_canceled, "read is_canceled");
                }
                self.last_buffer = expected_bytes;
            }
            (Poll::Ready(Err(e)), Outcome::Err(x)) => {
                check_error(&e, &x);
            }
            (actual, expected) => panic!(
                "read {want:?} ({form:?}, was pending: {was_pending}): expected {expected:?}, got {actual:?}"
            ),
        }
        self.check_last_read();
        gave_buffer
    }

    pub(crate) fn try_read(&mut self) {
        let expected = self.m.try_read();
        let pick = self.seq as usize;
        let expected_bytes: Vec<u8> = self.m.flushed.iter().copied().collect();
        let actual = self.reader.as_mut().unwrap().try_read();
        match (actual, expected) {
            (Ok(None), Ok(None)) => cover("try_read found nothing"),
            (Ok(Some(result)), Ok(Some((completed, canceled)))) => {
                check_buffer_parts(result.buffer, &expected_bytes, pick);
                assert_eq!(result.is_completed, completed, "try_read is_completed");
                assert_eq!(result.is_canceled, canceled, "try_read is_canceled");
                self.last_buffer = expected_bytes;
            }
            (Err(e), Err(x)) => {
                check_error(&e, &x);
            }
            (Ok(Some(r)), e) => panic!("try_read: expected {e:?}, got a result {r:?}"),
            (actual, expected) => panic!("try_read: expected {expected:?}, got {actual:?}"),
        }
        self.check_last_read();
    }

    pub(crate) fn advance_to(&mut self, consumed: Pick, examined: Pick, mode: u8) {
        let len = self.m.last_len.unwrap_or(self.m.flushed.len());
        let (c, e) = match mode {
            0..=6 => {
                let e = examined.within(len);
                (consumed.within(e), e)
            }
            7 => {
                let e = examined.within(len);
                (consumed.beyond(e), e)
            }
            8 => (consumed.within(len), examined.beyond(len)),
            _ => (len, len),
        };
        let actual = self.reader.as_mut().unwrap().advance_to(c, e);
        let examined_max = self.m.examined_max;
        match self.m.advance_to(c, e) {
            Ok(()) => {
                if self.m.examined < examined_max {
                    cover("examined moved backwards");
                }
                if let Err(err) = actual {
                    panic!(
                        "advance_to({c}, {e}) with last_len {:?}: {err}",
                        self.m.last_len
                    );
                }
                self.received.extend_from_slice(&self.last_buffer[..c]);
                self.last_buffer.clear();
            }
            Err(x) => self.expect_err(actual, &x),
        }
        self.check_last_read();
    }

    pub(crate) fn consume_all(&mut self) {
        let actual = consume_all(self.reader.as_mut().unwrap());
        match self.m.consume_all() {
            Ok(len) => {
                if let Err(err) = actual {
                    panic!("consume_all with last_len {len}: {err}");
                }
                self.received.extend_from_slice(&self.last_buffer[..len]);
                self.last_buffer.clear();
                cover("consume_all");
            }
            Err(x) => self.expect_err(actual, &x),
        }
        self.check_last_read();
    }

    /// `take_frame(n)`, `take_frame_chain(n)`, or with `skip`, a header taken and dropped
    /// (`take_frame(skip)`) and then the frame after it (`take_frame(n)`).
    pub(crate) fn take_frame(&mut self, skip: Option<Pick>, n: Pick, over: bool, chain: bool) {
        let len = self.m.last_len.unwrap_or(self.m.flushed.len());
        let after = skip.is_some();
        let skip = skip.map_or(0, |s| s.within(len));
        let n = if over {
            n.beyond(len - skip)
        } else {
            n.within(len - skip)
        };
        if after {
            // The header: a frame of its own, dropped (within the buffer: `skip <= len`).
            self.take_exact(skip, false, false);
        }
        self.take_exact(n, chain, after);
    }

    /// One `take_frame(n)` (or `take_frame_chain(n)`) against the model's; `after`: it follows a
    /// header taken just before.
    fn take_exact(&mut self, n: usize, chain: bool, after: bool) {
        let skip = 0;
        let expected = self.m.take_frame(skip, n);
        let reader = self.reader.as_mut().unwrap();
        match expected {
            Ok((skipped, bytes)) => {
                self.received.extend_from_slice(&skipped);
                self.last_buffer.drain(..skip);
                if chain {
                    let frame = reader.take_frame_chain(n).unwrap();
                    assert_eq!(frame.len(), n);
                    assert!(frame.iter().all(|p| !p.is_empty()), "empty chain segment");
                    assert!(frame.to_vec() == bytes, "take_frame_chain({n}) contents");
                    self.chains.push((bytes.clone(), frame));
                    cover("frame chain taken");
                } else {
                    if after {
                        cover("frame taken after a header");
                    }
                    let frame = reader.take_frame(n).unwrap();
                    assert!(frame[..] == *bytes, "take_frame({skip}, {n}) contents");
                    if n > 0 && n <= self.m.copy_threshold.min(Packet::INLINE_CAPACITY) {
                        assert!(
                            frame.clone().get_mut().is_some(),
                            "a frame of {n} bytes is copied into the packet value"
                        );
                        cover("frame inline");
                    } else if n > 0 && n <= self.m.copy_threshold {
                        assert!(
                            frame.clone().get_mut().is_none(),
                            "a frame of {n} bytes is copied into a pooled buffer"
                        );
                        cover("frame copied");
                    } else if n > self.m.copy_threshold {
                        cover("frame shared");
                    }
                    self.frames.push((bytes.clone(), frame));
                }
                self.received.extend_from_slice(&bytes);
                self.last_buffer.drain(..n);
            }
            Err(x) => {
                let actual = if chain {
                    reader.take_frame_chain(n).map(|c| c.to_vec())
                } else {
                    reader.take_frame(n).map(|p| p.to_vec())
                };
                self.expect_err(actual, &x);
            }
        }
        self.check_last_read();
    }

    /// `last_read` shows what is left of the last buffer, or nothing after an advance.
    pub(crate) fn check_last_read(&mut self) {
        let pick = self.seq as usize;
        let reader = self.reader.as_ref().unwrap();
        match (reader.last_read(), self.m.last_len) {
            (None, None) => {}
            (Some(result), Some(len)) => {
                assert_eq!(result.buffer.len(), len);
                let expected: Vec<u8> = self.m.flushed.iter().take(len).copied().collect();
                check_buffer_parts(result.buffer, &expected, pick);
            }
            (result, len) => panic!("last_read: expected a buffer of {len:?}, got {result:?}"),
        }
    }

    // --- end of case ------------------------------------------------------------------------

    pub(crate) fn finish(mut self) {
        // Drop whatever is pending (a pending read_at_least through the poll form: complete it by
        // completing the writer below).
        self.m.flush_pending = false;
        if let Some(writer) = self.writer.as_mut() {
            writer.complete();
        }
        self.m.writer_complete(None);
        let rents_before_drain = self.pool.stats().rents;
        if self.reader.is_some() && !self.m.reader_done {
            let mut may = MayWake::default();
            if self.m.frames_taken && self.m.last_len.is_some() {
                // Frames were taken: advance before reading on (nothing consumed, nothing examined).
                self.reader.as_mut().unwrap().advance_to(0, 0).unwrap();
                self.m.advance_to(0, 0).unwrap();
            }
            let mut want = self.m.read_pending.unwrap_or(Want::New);
            let mut form = ReadForm::Future;
            for round in 0.. {
                assert!(round < 8, "draining a completed pipe does not end");
                if !self.read(want, form, false, &mut may) {
                    if self.read_yielded {
                        // Read coalescing: the woken task polls the same future again, which
                        // does not yield twice; the poll form is that second poll.
                        form = ReadForm::Poll;
                        continue;
                    }
                    if matches!(want, Want::AtLeast(_)) {
                        // A failed writer's error reaches an unsatisfiable `read_at_least` before
                        // the bytes flushed ahead of it are seen: `read_buffer` still gets them.
                        want = Want::New;
                        continue;
                    }
                    break; // the writer's error
                }
                want = Want::New;
                form = ReadForm::Future;
                let len = self.m.last_len.unwrap();
                let completed = self.m.completed_flag();
                let reader = self.reader.as_mut().unwrap();
                reader.advance_to(len, len).unwrap();
                self.m.advance_to(len, len).unwrap();
                self.received.extend_from_slice(&self.last_buffer[..len]);
                if completed && len == 0 {
                    break;
                }
            }
            // Only a failed writer leaves bytes behind: ones the reader examined without consuming
            // (reads then return the error, as there is nothing beyond the examined point).
            if !self.m.flushed.is_empty() {
                assert!(
                    self.m.writer_error.is_some(),
                    "bytes left after draining a completed pipe"
                );
                assert_eq!(self.m.examined, self.m.published);
            }
        }
        // Nothing lost, nothing duplicated, nothing reordered.
        match self.m.consumed_at_reader_done {
            None => {
                let mut delivered = self.received.clone();
                delivered.extend(self.m.flushed.iter());
                assert_eq!(
                    delivered.len(),
                    self.m.written.len(),
                    "bytes received vs written"
                );
                assert!(
                    delivered == self.m.written,
                    "received bytes differ from written bytes"
                );
            }
            Some(consumed) => {
                assert_eq!(
                    self.received.len() as u64,
                    consumed,
                    "bytes received before the reader completed"
                );
                assert!(
                    self.m.written.starts_with(&self.received),
                    "received bytes are not a prefix of the written bytes"
                );
            }
        }
        if let Some(rents) = self.rents_at_reader_done {
            assert_eq!(
                rents_before_drain, rents,
                "the writer rented after the reader completed"
            );
        }
        self.writer = None;
        self.reader = None;
        // Frames outlive the pipe.
        for (bytes, frame) in &self.frames {
            assert!(
                frame[..] == bytes[..],
                "a frame changed after the pipe dropped"
            );
        }
        for (bytes, chain) in &self.chains {
            assert!(
                chain.to_vec() == *bytes,
                "a frame chain changed after the pipe dropped"
            );
        }
        self.frames.clear();
        self.chains.clear();
        for (name, pool) in [("pipe", &self.pool), ("packet", &self.packet_pool)] {
            let stats = pool.stats();
            assert_eq!(stats.rents, stats.returns, "{name} pool: {stats:?}");
            assert_eq!(stats.outstanding, 0, "{name} pool: {stats:?}");
        }
    }
}

impl Model {
    /// Whether a read of `want` would return now (no state change).
    pub(crate) fn read_check_peek(&self, want: Want) -> bool {
        self.reader_done || self.read_ready(want)
    }
}

/// Check a read buffer against the expected bytes: length, contents, chunks (none empty), the
/// `Buf` cursor, a slice and `get`.
#[track_caller]
pub(crate) fn check_buffer_parts(
    buffer: packetpipe::pipe::ReadBuffer<'_>,
    expected: &[u8],
    pick: usize,
) {
    assert_eq!(buffer.len(), expected.len(), "read buffer length");
    assert_eq!(buffer.is_empty(), expected.is_empty());
    assert!(
        buffer.to_vec() == expected,
        "read buffer contents differ from the model"
    );
    assert_eq!(ByteSegments::len(&buffer), expected.len());
    let mut joined = Vec::with_capacity(expected.len());
    for chunk in buffer.segments() {
        assert!(!chunk.is_empty(), "a read buffer chunk is empty");
        joined.extend_from_slice(chunk);
    }
    assert!(
        joined == expected,
        "read buffer chunks differ from the model"
    );
    let mut cursor = buffer.cursor();
    assert_eq!(cursor.remaining(), expected.len());
    let mut through_cursor = vec![0; expected.len()];
    cursor.copy_to_slice(&mut through_cursor);
    assert!(
        through_cursor == expected,
        "read buffer cursor differs from the model"
    );
    assert_eq!(cursor.remaining(), 0);
    if !expected.is_empty() {
        let a = pick % expected.len();
        let b = a + (pick / 7) % (expected.len() - a + 1);
        let slice = buffer.slice(a..b);
        assert!(slice.to_vec() == expected[a..b], "slice {a}..{b} differs");
        assert!(
            slice.segments().all(|c| !c.is_empty()),
            "slice {a}..{b} has an empty chunk"
        );
        assert_eq!(buffer.peek_be::<u8>(a), Some(expected[a]));
    }
    assert_eq!(buffer.peek_be::<u8>(expected.len()), None);
}

/// Consume the whole buffer of the last read: `advance_to(len, len)`.
pub(crate) fn consume_all(reader: &mut PipeReader) -> Result<(), Error> {
    let len = reader.last_read().map_or(0, |r| r.buffer.len());
    reader.advance_to(len, len)
}
