//! tokio-util's `tests/framed.rs`: `Framed::from_parts` with bytes already in its read buffer, as
//! `Frames` over a pipe that already holds them.
//!
//! `FramedParts::read_buf` (bytes read before the `Framed` existed, decoded before any read of the
//! I/O object) is, here, bytes flushed into the pipe before the `Frames` was made over its reader:
//! they are decoded at once, without waiting for the writer (which here writes nothing more, as
//! `DontReadIntoThis` may not be read).
//!
//! Not expressible here:
//! - `external_buf_grows_to_init` and `external_buf_does_not_shrink` check the capacity of the
//!   `BytesMut` read buffer handed back by tokio-util's `into_parts`. A `Frames` has no read buffer of its own:
//!   the bytes stay in the pipe's pooled segments, and `into_inner` hands back the reader with
//!   them (tested in `into_inner_hands_back_the_bytes_left`).
//!
//! No difference found.

use packetpipe::ByteSegments;
use std::task::Poll;

use packetpipe::frame::Frames;
use packetpipe::pipe::pipe;

use crate::wire::{U32Decoder, U64Decoder};

fn noop_cx() -> std::task::Context<'static> {
    std::task::Context::from_waker(futures::task::noop_waker_ref())
}

#[test]
fn can_read_from_existing_buf() {
    let (mut writer, reader) = pipe();
    writer.write_slice(&[0, 0, 0, 42]).unwrap();
    writer.flush_blocking().unwrap();
    let mut frames = Frames::new(reader, U32Decoder::default());
    let num = match futures::StreamExt::poll_next_unpin(&mut frames, &mut noop_cx()) {
        Poll::Ready(Some(Ok(num))) => num,
        other => panic!("{other:?}"),
    };
    assert_eq!(num, 42);
    assert_eq!(frames.decoder().read_bytes, 4);
    drop(writer);
}

#[test]
fn can_read_from_existing_buf_after_codec_changed() {
    let (mut writer, reader) = pipe();
    writer
        .write_slice(&[0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0, 84])
        .unwrap();
    writer.flush_blocking().unwrap();
    let mut frames = Frames::new(reader, U32Decoder::default());
    let next = |frames: &mut Frames<_>| match futures::StreamExt::poll_next_unpin(
        frames,
        &mut noop_cx(),
    ) {
        Poll::Ready(Some(Ok(num))) => num,
        other => panic!("{other:?}"),
    };
    assert_eq!(next(&mut frames), 42);
    assert_eq!(frames.decoder().read_bytes, 4);

    let mut frames = frames.map_decoder(|codec| U64Decoder {
        read_bytes: codec.read_bytes,
    });
    let num = match futures::StreamExt::poll_next_unpin(&mut frames, &mut noop_cx()) {
        Poll::Ready(Some(Ok(num))) => num,
        other => panic!("{other:?}"),
    };
    assert_eq!(num, 84);
    assert_eq!(frames.decoder().read_bytes, 12);
    drop(writer);
}

/// A `Frames` over an empty pipe decodes only once bytes arrive: one `decode`, for the frame.
#[test]
fn from_parts_empty_read_buf_does_not_spuriously_decode() {
    let (mut writer, reader) = pipe();
    let mut frames = Frames::new(reader, U32Decoder::default());
    assert!(futures::StreamExt::poll_next_unpin(&mut frames, &mut noop_cx()).is_pending());
    assert_eq!(
        frames.decoder().decode_count,
        0,
        "no decode before any byte"
    );
    writer.write_slice(&[0, 0, 0, 42]).unwrap();
    writer.complete();
    let num = frames.iter_blocking().next().unwrap().unwrap();
    assert_eq!(num, 42);
    assert_eq!(frames.decoder().decode_count, 1);
}

/// What `external_buf_*` are about, in this crate's terms: the bytes not decoded go back with the
/// reader, none lost.
#[test]
fn into_inner_hands_back_the_bytes_left() {
    let (mut writer, reader) = pipe();
    writer.write_slice(&[0, 0, 0, 42, 7, 7]).unwrap();
    writer.flush_blocking().unwrap();
    let mut frames = Frames::new(reader, U32Decoder::default());
    assert!(matches!(
        futures::StreamExt::poll_next_unpin(&mut frames, &mut noop_cx()),
        Poll::Ready(Some(Ok(42)))
    ));
    assert_eq!(frames.decoder().read_bytes, 4);
    let mut reader = frames.into_inner();
    assert_eq!(reader.read_blocking().unwrap().buffer.to_vec(), [7, 7]);
    drop(writer);
}
