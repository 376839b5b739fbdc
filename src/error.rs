//! The crate's one error type.

use std::fmt;

/// Everything that can go wrong in packetpipe, with the numbers involved.
///
/// Every message says what was asked and what the limit was, so a log line is enough to find the
/// bug. Converts into [`std::io::Error`] for use in I/O code.
///
/// ```
/// let err = packetpipe::Pool::global().rent(0).unwrap_err();
/// assert_eq!(err.to_string(), "cannot rent a buffer of 0 bytes: the size must be at least 1");
/// let io: std::io::Error = err.into();
/// assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A buffer of zero bytes was requested.
    ZeroSizeRequest,
    /// A buffer larger than any allocation can be was requested.
    RequestTooLarge {
        /// Bytes asked for.
        requested: usize,
        /// The largest request that can be served.
        limit: usize,
    },
    /// The system allocator could not provide the memory.
    AllocationFailed {
        /// Bytes (payload plus block header) the allocator refused.
        size: usize,
    },
    /// A range or count went past the end of the data it applies to.
    OutOfRange {
        /// The operation, for example `"slice"` or `"split_to"`.
        operation: &'static str,
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
        /// References to the block at the time of the call.
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
        /// Bytes asked for.
        requested: usize,
        /// Length of the buffer last read (after earlier frames were taken).
        len: usize,
    },
    /// The writer advanced past the space `buffer_mut` handed out.
    AdvancePastBuffer {
        /// Bytes to commit.
        requested: usize,
        /// Bytes of the buffer `buffer_mut` returned.
        available: usize,
    },
    /// The reader was used after it completed.
    ReaderCompleted,
    /// The writer was used after it completed.
    WriterCompleted,
    /// The other side of the pipe completed with this error.
    Peer {
        /// Which side completed: `"writer"` or `"reader"`.
        side: &'static str,
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
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::ZeroSizeRequest => {
                f.write_str("cannot rent a buffer of 0 bytes: the size must be at least 1")
            }
            Error::RequestTooLarge { requested, limit } => write!(
                f,
                "cannot rent a buffer of {requested} bytes: the largest possible request is {limit} bytes"
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
            Error::InvalidAdvance { consumed, examined, len } => {
                if consumed > examined {
                    write!(f, "advance_to: consumed ({consumed}) is greater than examined ({examined})")
                } else {
                    write!(f, "advance_to: examined ({examined}) is beyond the end of the buffer ({len} bytes)")
                }
            }
            Error::FrameBeyondBuffer { requested, len } => write!(
                f,
                "take_frame of {requested} bytes: the buffer last read holds only {len} bytes"
            ),
            Error::AdvancePastBuffer { requested, available } => write!(
                f,
                "advance of {requested} bytes is beyond the {available} bytes buffer_mut handed out"
            ),
            Error::ReaderCompleted => f.write_str("the reader has completed: no more reads"),
            Error::WriterCompleted => f.write_str("the writer has completed: no more writes or flushes"),
            Error::Peer { side, ref source } => write!(f, "the {side} completed with an error: {source}"),
            Error::InvalidPoolConfig { min_class, max_class } => write!(
                f,
                "invalid pool configuration: smallest class {min_class} bytes is larger than largest class {max_class} bytes"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Peer { source, .. } => Some(&*source.0),
            _ => None,
        }
    }
}

impl From<Error> for std::io::Error {
    fn from(err: Error) -> Self {
        let kind = match err {
            Error::AllocationFailed { .. } => std::io::ErrorKind::OutOfMemory,
            Error::ReaderCompleted | Error::WriterCompleted => std::io::ErrorKind::BrokenPipe,
            Error::Peer { .. } => std::io::ErrorKind::Other,
            _ => std::io::ErrorKind::InvalidInput,
        };
        std::io::Error::new(kind, err)
    }
}

/// Resolve a `RangeBounds` against a length, or say why it does not fit.
pub(crate) fn check_range(
    operation: &'static str,
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

/// An error one side of a pipe completed with, shared by every later read or flush of the other
/// side. Equal only to itself (the same shared value).
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
    }
}

impl Eq for SharedError {}
