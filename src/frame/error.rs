//! `FrameError`: what can go wrong while framing, with the numbers involved.

use std::fmt;

/// An error of the [`frame`](crate::frame) module: bad input (each message names the numbers), the
/// end of the stream inside a frame, a canceled read, or an error of the pipe underneath.
///
/// It is a type of its own rather than new variants of [`crate::Error`]: decoders and encoders are
/// generic over their error type (`From<FrameError>`, as tokio-util's codecs are over
/// `From<io::Error>`), and the pipe's error type stays about the pipe. A pipe error travels inside
/// ([`FrameError::Pipe`], `From<packetpipe::Error>`); both convert into [`std::io::Error`].
///
/// The [`std::io::ErrorKind`]s are those tokio-util's codecs give for the same failure, so code
/// that matches on them ports as it is: `InvalidData` for bad input (a length above the maximum,
/// no delimiter within the maximum, a line that is not UTF-8), `InvalidInput` for an item too long
/// to encode and for a length that overflows with the length adjustment (tokio-util reports both
/// so, decoding and encoding). One deliberate difference: the end of the stream inside a frame
/// ([`BytesRemaining`](FrameError::BytesRemaining)) is `UnexpectedEof`, the kind std's
/// `read_exact` gives for the same condition, where tokio-util says `Other`, which tells a caller
/// nothing.
///
/// ```
/// use packetpipe::frame::FrameError;
///
/// let err = FrameError::FrameTooLong { length: 70000, max: 65536 };
/// assert_eq!(err.to_string(), "frame of 70000 bytes exceeds the maximum frame length 65536");
/// let io: std::io::Error = err.into();
/// assert_eq!(io.kind(), std::io::ErrorKind::InvalidData);
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum FrameError {
    /// A length field announced a frame above the maximum frame length (the value is the field's,
    /// before the length adjustment, as tokio-util checks it).
    FrameTooLong {
        /// The length announced.
        length: u64,
        /// The maximum frame length.
        max: usize,
    },
    /// An item to encode is longer than the maximum frame length: the caller's input, not the
    /// stream's, so its `io::ErrorKind` is `InvalidInput` (as tokio-util's). Nothing was staged.
    ItemTooLong {
        /// The item's length.
        length: usize,
        /// The maximum frame length.
        max: usize,
    },
    /// A length field plus the length adjustment does not fit (below zero, above `usize::MAX`, or,
    /// when encoding, above what the length field can hold).
    LengthOverflow {
        /// The length field's value (or the item's length, when encoding).
        length: u64,
        /// The length adjustment.
        adjustment: isize,
    },
    /// No delimiter within the maximum frame length. The decoder discards up to the next
    /// delimiter if the stream is [resumed](crate::frame::Frames::resume).
    DelimiterNotFound {
        /// The maximum frame length (not counting the delimiter).
        max: usize,
        /// Bytes examined without finding a delimiter.
        examined: usize,
    },
    /// A line is not valid UTF-8 (the line is consumed).
    InvalidUtf8 {
        /// Length of the line, without its line ending.
        len: usize,
        /// Offset of the first byte that is not valid UTF-8.
        valid_up_to: usize,
    },
    /// The writer completed inside a frame: these bytes of an incomplete frame remain (tokio-util:
    /// "bytes remaining on stream").
    BytesRemaining {
        /// Bytes left in the pipe.
        len: usize,
    },
    /// The read was canceled with [`PipeCanceler::cancel`](crate::pipe::PipeCanceler::cancel)
    /// before a frame was complete. Not an end: the stream goes on when polled again, with every
    /// byte still there.
    Canceled,
    /// An error of the pipe underneath (for example the writer completed with an error).
    Pipe(crate::Error),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FrameError::FrameTooLong { length, max } => write!(
                f,
                "frame of {length} bytes exceeds the maximum frame length {max}"
            ),
            FrameError::ItemTooLong { length, max } => write!(
                f,
                "item of {length} bytes exceeds the maximum frame length {max}"
            ),
            FrameError::LengthOverflow { length, adjustment } => write!(
                f,
                "frame length {length} with length adjustment {adjustment} does not fit the length type"
            ),
            FrameError::DelimiterNotFound { max, examined } => write!(
                f,
                "no delimiter within the maximum frame length {max} ({examined} bytes examined)"
            ),
            FrameError::InvalidUtf8 { len, valid_up_to } => write!(
                f,
                "line of {len} bytes is not valid UTF-8 (first invalid byte at offset {valid_up_to})"
            ),
            FrameError::BytesRemaining { len } => write!(
                f,
                "{len} bytes remaining on stream: the writer completed inside a frame"
            ),
            FrameError::Canceled => f.write_str("the read was canceled before a frame was complete"),
            // Transparent: the pipe's error says what happened, and its source (if any) is
            // this error's source, so a chain prints each message once.
            FrameError::Pipe(ref e) => fmt::Display::fmt(e, f),
        }
    }
}

impl std::error::Error for FrameError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FrameError::Pipe(e) => std::error::Error::source(e),
            _ => None,
        }
    }
}

impl From<crate::Error> for FrameError {
    fn from(err: crate::Error) -> FrameError {
        FrameError::Pipe(err)
    }
}

impl From<FrameError> for std::io::Error {
    fn from(err: FrameError) -> std::io::Error {
        use std::io::ErrorKind;
        let kind = match err {
            FrameError::Pipe(e) => return e.into(),
            FrameError::FrameTooLong { .. }
            | FrameError::DelimiterNotFound { .. }
            | FrameError::InvalidUtf8 { .. } => ErrorKind::InvalidData,
            FrameError::ItemTooLong { .. } | FrameError::LengthOverflow { .. } => {
                ErrorKind::InvalidInput
            }
            FrameError::BytesRemaining { .. } => ErrorKind::UnexpectedEof,
            // Not `Interrupted`: std's helpers retry that kind (see the `io` module's errors).
            FrameError::Canceled => ErrorKind::Other,
        };
        std::io::Error::new(kind, err)
    }
}
