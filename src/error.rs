//! The crate's one error type.

use std::fmt;

/// Everything that can go wrong in packetpipe, with the numbers involved.
///
/// Every message says what was asked and what the limit was, so a log line is enough to find the
/// bug. Errors that wrap another ([`Peer`](Error::Peer), [`Io`](Error::Io)) say what happened in
/// their own message and return the wrapped error from [`source`](std::error::Error::source), as
/// the Rust API guidelines ask (print the chain to see both).
///
/// Converts into [`std::io::Error`] for use in I/O code, keeping the [`ErrorKind`] of an I/O error
/// that travelled through a pipe (a peer's `ConnectionReset` stays `ConnectionReset`), and from
/// [`std::io::Error`] for `?` in code that returns this type.
///
/// ```
/// use std::io::ErrorKind;
///
/// let err = packetpipe::Pool::global().rent(0).unwrap_err();
/// assert_eq!(err.to_string(), "cannot rent a buffer of 0 bytes: the size must be at least 1");
/// let io: std::io::Error = err.into();
/// assert_eq!(io.kind(), ErrorKind::InvalidInput);
///
/// // An I/O error the writer completed with keeps its kind on the reader's side.
/// let (mut writer, mut reader) = packetpipe::pipe::pipe();
/// writer.complete_with_error(std::io::Error::new(ErrorKind::ConnectionReset, "peer reset"));
/// let err = reader.read_blocking().unwrap_err();
/// assert_eq!(err.to_string(), "the writer completed with an error");
/// assert_eq!(std::error::Error::source(&err).unwrap().to_string(), "peer reset");
/// assert_eq!(std::io::Error::from(err).kind(), ErrorKind::ConnectionReset);
/// ```
///
/// [`ErrorKind`]: std::io::ErrorKind
///
/// Two errors are equal when they are the same variant with the same numbers; errors that wrap
/// another compare it as [`SharedError`] does (by message and I/O kind).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A buffer of zero bytes was requested.
    ZeroSizeRequest,
    /// A buffer larger than one block can be was requested (a block holds at most 4 GiB, and
    /// no allocation can exceed `isize::MAX` bytes).
    RequestTooLarge {
        /// Bytes asked for (after the headroom, for `rent_with_headroom`).
        requested: usize,
        /// Headroom asked for in front of them (0 for every other request).
        headroom: usize,
        /// The largest request that can be served.
        limit: usize,
    },
    /// The system allocator could not provide the memory.
    AllocationFailed {
        /// Bytes (payload plus block header) the allocator refused.
        size: usize,
    },
    /// A range or count went past the end of the data it applies to. (Slicing and splitting
    /// panic with this error's message; [`ByteSegments::copy_prefix_to`](crate::ByteSegments::copy_prefix_to)
    /// returns it.)
    OutOfRange {
        /// The operation.
        operation: Operation,
        /// Start of the requested range.
        start: usize,
        /// End of the requested range (exclusive).
        end: usize,
        /// Length of the data.
        len: usize,
    },
    /// A prepend did not fit in the headroom in front of the data.
    NoHeadroom {
        /// Bytes to prepend.
        needed: usize,
        /// Headroom available.
        available: usize,
    },
    /// An in-place change needs sole ownership of the block, but other packets share it.
    SharedBlock {
        /// References to the block at the time of the call. While a pipe's writer still writes
        /// into the block, this includes up to 15 it counted in advance for its next flushes.
        references: usize,
    },
    /// A write did not fit in the space left in a buffer.
    NoSpace {
        /// Bytes to write.
        needed: usize,
        /// Writable bytes left.
        available: usize,
    },
    /// `advance_to` was called with no read result to advance in.
    AdvanceWithoutRead,
    /// `read_buffer`/`try_read` after `take_frame` without `advance_to`: the rest of the last
    /// buffer would come back at once (a parser loop would spin). Call `advance_to` first.
    ReadWithoutAdvance {
        /// Bytes left in the last read's buffer (after frames taken from it).
        len: usize,
    },
    /// `advance_to` positions out of order or beyond the buffer last read.
    InvalidAdvance {
        /// Bytes to consume.
        consumed: usize,
        /// Bytes examined.
        examined: usize,
        /// Length of the buffer last read.
        len: usize,
    },
    /// `take_frame` asked for more bytes than the buffer last read holds.
    FrameBeyondBuffer {
        /// Bytes to drop before the frame (a decoder's skipped prefix; 0 for `take_frame`).
        skip: usize,
        /// Bytes of the frame asked for.
        requested: usize,
        /// Length of the buffer last read (after earlier frames were taken).
        len: usize,
    },
    /// The writer committed more than the space `spare_mut` handed out.
    CommitPastSpare {
        /// Bytes to commit.
        requested: usize,
        /// Bytes of the space `spare_mut` returned.
        available: usize,
    },
    /// The reader was used after it completed.
    ReaderCompleted,
    /// The writer was used after it completed.
    WriterCompleted,
    /// An I/O write or flush found the reader completed: nothing written would ever be read (the
    /// pipe's `EPIPE`; the native [`flush_pipe`](crate::pipe::PipeWriter::flush_pipe) reports it as
    /// `is_completed` instead).
    ReaderGone,
    /// The other side of the pipe completed with this error.
    Peer {
        /// Which side completed.
        side: Side,
        /// The error it completed with.
        source: SharedError,
    },
    /// A pool was configured with settings that contradict each other.
    InvalidPoolConfig {
        /// Smallest class, in bytes.
        min_class: usize,
        /// Largest class, in bytes.
        max_class: usize,
    },
    /// A pending read or flush was cut short by
    /// [`PipeCanceler`](crate::pipe::PipeCanceler) (the I/O adapters' form of `is_canceled`).
    Canceled {
        /// [`Operation::Read`] or [`Operation::Flush`].
        operation: Operation,
    },
    /// [`PipeReader::read_until`](crate::pipe::PipeReader::read_until) found no pattern within
    /// the first `max` bytes: the other side sent more than the limit without one (a request
    /// head too long, say). Nothing was consumed.
    PatternNotFound {
        /// Length of the pattern searched for.
        pattern_len: usize,
        /// The limit: the pattern had to end within this many bytes.
        max: usize,
        /// Bytes in the pipe when the search gave up (at least `max`).
        len: usize,
    },
    /// An I/O operation failed (a pump's socket read or write, or a `?` on an [`std::io::Error`]).
    Io {
        /// The I/O error.
        source: SharedError,
    },
    /// Never made: keeps `Error` at its size of 48 bytes (see `size::Hold`).
    #[doc(hidden)]
    __Hold(size::Hold),
}

mod size {
    /// The payload of `Error::__Hold`, which no one can make (its field is private): it keeps
    /// `Error` 48 bytes, larger than a `Packet` (40), as it was while `OutOfRange` named its
    /// operation with a string. Measured (`scripts/instructions.sh`, `decode_length_delimited`):
    /// an `Error` smaller than a `Packet` lays out the `Result<Packet, Error>` of the take path in
    /// the packet's niche and costs 36 more instructions per decoded 64-byte frame (3.7%).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Hold([usize; 5]);
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::ZeroSizeRequest => {
                f.write_str("cannot rent a buffer of 0 bytes: the size must be at least 1")
            }
            Error::RequestTooLarge {
                requested,
                headroom: 0,
                limit,
            } => write!(
                f,
                "cannot rent a buffer of {requested} bytes: the largest possible request is {limit} bytes"
            ),
            Error::RequestTooLarge {
                requested,
                headroom,
                limit,
            } => write!(
                f,
                "cannot rent a buffer of {requested} bytes with {headroom} bytes of headroom: the \
                 largest possible request is {limit} bytes, headroom included"
            ),
            Error::AllocationFailed { size } => {
                write!(f, "the system allocator refused {size} bytes")
            }
            Error::OutOfRange { operation, start, end, len } => {
                if start > end {
                    write!(f, "{operation}: range start {start} is greater than range end {end} (length {len})")
                } else {
                    write!(f, "{operation}: range {start}..{end} is out of bounds for length {len}")
                }
            }
            Error::NoHeadroom { needed, available } => write!(
                f,
                "cannot prepend {needed} bytes: only {available} bytes of headroom are available"
            ),
            Error::SharedBlock { references } => write!(
                f,
                "cannot change the block in place: it is shared by {references} references"
            ),
            Error::NoSpace { needed, available } => write!(
                f,
                "cannot write {needed} bytes: only {available} bytes of space remain in the buffer"
            ),
            Error::AdvanceWithoutRead => f.write_str(
                "advance_to called without a read result to advance in (read first; each read allows one advance_to)",
            ),
            Error::ReadWithoutAdvance { len } => write!(
                f,
                "read after take_frame without advance_to: the {len} bytes left of the last read would come back at once (call advance_to(consumed, examined) first)"
            ),
            Error::InvalidAdvance { consumed, examined, len } => {
                if consumed > examined {
                    write!(f, "advance_to: consumed ({consumed}) is greater than examined ({examined})")
                } else {
                    write!(f, "advance_to: examined ({examined}) is beyond the end of the buffer ({len} bytes)")
                }
            }
            Error::FrameBeyondBuffer {
                skip: 0,
                requested,
                len,
            } => write!(
                f,
                "take_frame of {requested} bytes: the buffer last read holds only {len} bytes"
            ),
            Error::FrameBeyondBuffer {
                skip,
                requested,
                len,
            } => write!(
                f,
                "a frame of {requested} bytes after {skip} skipped: the buffer last read holds \
                 only {len} bytes"
            ),
            Error::CommitPastSpare { requested, available } => write!(
                f,
                "commit of {requested} bytes is beyond the {available} bytes spare_mut handed out"
            ),
            Error::ReaderCompleted => f.write_str("the reader has completed: no more reads"),
            Error::WriterCompleted => f.write_str("the writer has completed: no more writes or flushes"),
            Error::ReaderGone => {
                f.write_str("the reader has completed: bytes written now would never be read")
            }
            // The source's text is left to `source()`: printing both would say it twice in a chain.
            Error::Peer { side, .. } => write!(f, "the {side} completed with an error"),
            Error::InvalidPoolConfig { min_class, max_class } => write!(
                f,
                "invalid pool configuration: smallest class {min_class} bytes is larger than largest class {max_class} bytes"
            ),
            Error::Canceled { operation } => {
                write!(f, "the pending {operation} was canceled by its end's PipeCanceler")
            }
            Error::PatternNotFound { pattern_len, max, len } => write!(
                f,
                "no {pattern_len}-byte pattern within the first {max} bytes ({len} bytes in the pipe)"
            ),
            Error::Io { ref source } => write!(f, "I/O error ({})", io_kind(source.get())),
            Error::__Hold(_) => unreachable!("Error::__Hold is never made"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Peer { source, .. } | Error::Io { source } => Some(&*source.0),
            _ => None,
        }
    }
}

impl Error {
    /// The [`std::io::ErrorKind`] this error converts to. For an error that wraps an I/O error
    /// (directly, or as the error a peer completed with), the kind of that I/O error.
    pub fn io_kind(&self) -> std::io::ErrorKind {
        use std::io::ErrorKind;
        match self {
            Error::AllocationFailed { .. } => ErrorKind::OutOfMemory,
            Error::ReaderCompleted | Error::WriterCompleted | Error::ReaderGone => {
                ErrorKind::BrokenPipe
            }
            Error::Peer { source, .. } | Error::Io { source } => io_kind(source.get()),
            Error::Canceled { .. } => ErrorKind::Other,
            // The other side's bytes are at fault, not the caller's request.
            Error::PatternNotFound { .. } => ErrorKind::InvalidData,
            _ => ErrorKind::InvalidInput,
        }
    }
}

/// The kind of an I/O error behind `error`: an `std::io::Error` itself, or one wrapped by this
/// crate's types; `Other` for anything else.
pub(crate) fn io_kind(error: &(dyn std::error::Error + 'static)) -> std::io::ErrorKind {
    if let Some(io) = error.downcast_ref::<std::io::Error>() {
        io.kind()
    } else if let Some(err) = error.downcast_ref::<Error>() {
        err.io_kind()
    } else if let Some(shared) = error.downcast_ref::<SharedError>() {
        io_kind(shared.get())
    } else {
        std::io::ErrorKind::Other
    }
}

impl From<Error> for std::io::Error {
    fn from(err: Error) -> Self {
        std::io::Error::new(err.io_kind(), err)
    }
}

impl From<std::io::Error> for Error {
    fn from(err: std::io::Error) -> Self {
        Error::Io {
            source: SharedError::new(err),
        }
    }
}

/// Resolve a `RangeBounds` against a length, or say why it does not fit.
pub(crate) fn check_range(
    operation: Operation,
    range: impl std::ops::RangeBounds<usize>,
    len: usize,
) -> Result<std::ops::Range<usize>, Error> {
    use std::ops::Bound::*;
    let start = match range.start_bound() {
        Included(&s) => s,
        Excluded(&s) => s.saturating_add(1),
        Unbounded => 0,
    };
    let end = match range.end_bound() {
        Included(&e) => e.saturating_add(1),
        Excluded(&e) => e,
        Unbounded => len,
    };
    if start <= end && end <= len {
        Ok(start..end)
    } else {
        Err(Error::OutOfRange {
            operation,
            start,
            end,
            len,
        })
    }
}

/// Which end of a pipe an [`Error::Peer`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The writing end ([`PipeWriter`](crate::PipeWriter)).
    Writer,
    /// The reading end ([`PipeReader`](crate::PipeReader)).
    Reader,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Writer => "writer",
            Side::Reader => "reader",
        })
    }
}

/// The operation an [`Error::OutOfRange`] or [`Error::Canceled`] names; it displays as the
/// method's name (`"split_to"`, `"read"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Taking a range of bytes (`slice`).
    Slice,
    /// Splitting off the first bytes (`split_to`).
    SplitTo,
    /// Splitting off the last bytes (`split_off`).
    SplitOff,
    /// Copying the first bytes out ([`ByteSegments::copy_prefix_to`](crate::ByteSegments::copy_prefix_to)).
    CopyPrefixTo,
    /// A pending read of a pipe.
    Read,
    /// A pending flush of a pipe.
    Flush,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Slice => "slice",
            Operation::SplitTo => "split_to",
            Operation::SplitOff => "split_off",
            Operation::CopyPrefixTo => "copy_prefix_to",
            Operation::Read => "read",
            Operation::Flush => "flush",
        })
    }
}

/// An error one side of a pipe completed with, shared by every later read or flush of the other
/// side. Its `Display` and `source` are the wrapped error's own.
///
/// Two shared errors are equal when they display the same message and have the same
/// [`std::io::ErrorKind`] (an error that is not an I/O error counts as `Other`), whether or not
/// they are one shared value: so an error read back from a pipe equals an error made the same
/// way.
///
/// ```
/// use std::io::{Error as IoError, ErrorKind};
///
/// let (mut writer, mut reader) = packetpipe::pipe();
/// writer.complete_with_error(IoError::new(ErrorKind::ConnectionReset, "peer reset"));
/// let packetpipe::Error::Peer { source, .. } = reader.read_blocking().unwrap_err() else {
///     unreachable!()
/// };
/// assert_eq!(source.to_string(), "peer reset");
/// let io = source.get().downcast_ref::<IoError>().unwrap();
/// assert_eq!(io.kind(), ErrorKind::ConnectionReset);
/// ```
#[derive(Clone)]
pub struct SharedError(pub(crate) std::sync::Arc<dyn std::error::Error + Send + Sync>);

impl SharedError {
    pub(crate) fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> SharedError {
        SharedError(std::sync::Arc::from(error.into()))
    }

    /// The error itself.
    pub fn get(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }

    /// An [`std::io::Error`] that shows this error as is: its kind (if it is or wraps an I/O
    /// error), its message and its source chain (the I/O adapters' form of a peer's error).
    pub(crate) fn to_io_error(&self) -> std::io::Error {
        std::io::Error::new(io_kind(self.get()), self.clone())
    }
}

/// Transparent: the message and the source are the shared error's own.
impl std::error::Error for SharedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl fmt::Debug for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl PartialEq for SharedError {
    fn eq(&self, other: &SharedError) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
            || (io_kind(self.get()) == io_kind(other.get())
                && self.to_string() == other.to_string())
    }
}

impl Eq for SharedError {}

#[cfg(test)]
mod tests {
    /// `Error` keeps its 48 bytes (see `size::Hold`; the packet module checks that a `Packet` is
    /// smaller).
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn error_keeps_its_size() {
        assert_eq!(std::mem::size_of::<super::Error>(), 48);
    }
}
