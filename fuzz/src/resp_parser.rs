//! The `resp_parser` fuzz target's checker, shared by the libFuzzer target
//! (`fuzz/fuzz_targets/resp_parser.rs`) and the replay test (`tests-integration/tests/fuzz_replay.rs`): the RESP
//! example's request parser (`examples/resp/`, included by path exactly as the servers and their
//! tests include it) on arbitrary bytes.
//!
//! The same stream goes through the packetpipe server's decoder (a `frame::Decoder` over the
//! pipe's segments) and the tokio-util server's codec (over a `BytesMut`), whole and cut at
//! pseudo-random points; all four must give the same commands (each request's arguments or its
//! protocol error), and a fatal error (a request over the maximum) at the same point. Nothing may
//! panic. The maximum request is set small (64 KiB), so inputs reach it.
//!
//! Input: byte 0 seeds the cut points (segments of 1 to 64 bytes); the rest is the stream.
#![allow(dead_code)]

#[path = "../../examples/resp/mod.rs"]
mod resp;

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use futures::Stream;
use packetpipe::frame::Frames;
use packetpipe::pipe::{pipe_with, PipeOptions};
use packetpipe::Packet;
use resp::pipe_server::RespDecoder;
use resp::session::Batch;
use resp::tokio_util_server::RespCodec;
use resp::Config;
use tokio_util::codec::Decoder;

/// A request as the commands see it: its arguments, or the protocol error it is answered with;
/// `Fatal` ends the stream (the server closes the connection).
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Command(Vec<Vec<u8>>),
    ProtocolError(String),
    Fatal(String),
}

/// A fatal error, by kind: the end of the stream inside a request is worded differently by the
/// two buffer layers (the pipe's message counts the bytes); anything else is compared whole.
fn fatal(message: String) -> Outcome {
    if message.contains("bytes remaining on stream") {
        Outcome::Fatal("bytes remaining on stream".to_string())
    } else {
        Outcome::Fatal(message)
    }
}

fn config() -> Config {
    Config {
        max_request: 64 * 1024,
        ..Config::default()
    }
}

fn drain_batch<B: Batch>(batch: &mut B, out: &mut Vec<Outcome>) {
    for request in 0..batch.requests() {
        batch.select(request);
        out.push(match batch.protocol_error() {
            Some(message) => Outcome::ProtocolError(message.to_string()),
            None => Outcome::Command((0..batch.argc()).map(|i| batch.arg(i).to_vec()).collect()),
        });
    }
}

/// The packetpipe decoder: each piece appended and flushed, then every complete request decoded.
fn through_pipe(pieces: &[&[u8]]) -> Vec<Outcome> {
    let (mut writer, reader) = pipe_with(PipeOptions {
        pause_threshold: 0,
        ..Default::default()
    });
    let mut frames = Frames::new(reader, RespDecoder::new(config()));
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    let mut out = Vec::new();
    let mut poll_all = |frames: &mut Frames<RespDecoder>, out: &mut Vec<Outcome>| loop {
        match Pin::new(&mut *frames).poll_next(&mut cx) {
            Poll::Ready(Some(Ok(mut batch))) => {
                drain_batch(&mut batch, out);
                frames.decoder_mut().recycle(batch);
            }
            Poll::Ready(Some(Err(e))) => {
                out.push(fatal(e.to_string()));
                return false;
            }
            Poll::Ready(None) | Poll::Pending => return true,
        }
    };
    for piece in pieces {
        writer.append(Packet::from(piece.to_vec())).unwrap();
        writer.flush_blocking().unwrap();
        if !poll_all(&mut frames, &mut out) {
            return out;
        }
    }
    writer.complete();
    poll_all(&mut frames, &mut out);
    out
}

/// The tokio-util codec, as `Framed` drives it: decode after each read, `decode_eof` at the end.
fn through_codec(pieces: &[&[u8]]) -> Vec<Outcome> {
    let mut codec = RespCodec::new(config());
    let mut buffer = BytesMut::new();
    let mut out = Vec::new();
    for piece in pieces {
        buffer.extend_from_slice(piece);
        loop {
            match codec.decode(&mut buffer) {
                Ok(Some(mut batch)) => {
                    drain_batch(&mut batch, &mut out);
                    codec.recycle(batch);
                }
                Ok(None) => break,
                Err(e) => {
                    out.push(fatal(e.to_string()));
                    return out;
                }
            }
        }
    }
    loop {
        match codec.decode_eof(&mut buffer) {
            Ok(Some(mut batch)) => {
                drain_batch(&mut batch, &mut out);
                codec.recycle(batch);
            }
            Ok(None) => return out,
            Err(e) => {
                out.push(fatal(e.to_string()));
                return out;
            }
        }
    }
}

/// Cut `stream` into pieces of 1 to 64 bytes chosen by `seed`.
fn cut(stream: &[u8], seed: u8) -> Vec<&[u8]> {
    let mut x = u32::from(seed).wrapping_mul(2_654_435_761) | 1;
    let mut pieces = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let n = (1 + x as usize % 64).min(rest.len());
        pieces.push(&rest[..n]);
        rest = &rest[n..];
    }
    pieces
}

pub fn run(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let pieces = cut(stream, seed);
    let whole = through_pipe(&[stream]);
    assert_eq!(through_pipe(&pieces), whole, "pipe: cut vs whole");
    assert_eq!(through_codec(&[stream]), whole, "codec vs pipe, whole");
    assert_eq!(through_codec(&pieces), whole, "codec vs pipe, cut");
}
