//! The RESP parser of `examples/resp/` against a corpus of requests (multibulk, inline, empty,
//! binary, a value above the copy threshold, malformed ones), cut at every byte offset: the
//! packetpipe decoder (a `Decoder` over the pipe's segments) and the tokio-util codec (over a
//! `BytesMut`) give the same commands and the same errors as for the uncut stream, and as the
//! corpus says. The pipe is also fed one byte per segment, so every header and value crosses
//! segment boundaries.

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

/// A request as the commands see it: its arguments, or the protocol error it is answered with.
type Command = Result<Vec<Vec<u8>>, String>;

fn args(words: &[&[u8]]) -> Command {
    Ok(words.iter().map(|w| w.to_vec()).collect())
}

fn error(message: &str) -> Command {
    Err(message.to_string())
}

/// The corpus: each piece of the stream and the commands it holds.
fn corpus() -> Vec<(Vec<u8>, Vec<Command>)> {
    let big = vec![b'v'; 3000]; // above the 2 KiB copy threshold: taken as packets, not copied
    let mut set_big = b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$3000\r\n".to_vec();
    set_big.extend_from_slice(&big);
    set_big.extend_from_slice(b"\r\n");
    vec![
        (b"*1\r\n$4\r\nPING\r\n".to_vec(), vec![args(&[b"PING"])]),
        (
            b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n".to_vec(),
            vec![args(&[b"SET", b"key", b"value"])],
        ),
        (b"GET key\r\n".to_vec(), vec![args(&[b"GET", b"key"])]),
        (
            b"  ECHO \t hi  \r\n".to_vec(),
            vec![args(&[b"ECHO", b"hi"])],
        ),
        (b"PING\n".to_vec(), vec![args(&[b"PING"])]),
        (b"\r\n".to_vec(), vec![]),
        (b"*0\r\n".to_vec(), vec![]),
        (b"*-1\r\n".to_vec(), vec![]),
        (
            b"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n".to_vec(),
            vec![args(&[b"ECHO", b""])],
        ),
        (
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n".to_vec(),
            vec![args(&[b"SET", b"k", b"a\r\nb"])],
        ),
        (set_big, vec![args(&[b"SET", b"big", &big])]),
        (
            b"*x\r\n".to_vec(),
            vec![error("ERR Protocol error: invalid multibulk length")],
        ),
        (
            b"*2\r\n$3\r\nGET\r\nfoo\r\n".to_vec(),
            vec![error("ERR Protocol error: expected '$', got 'f'")],
        ),
        (
            b"*1\r\n$3\r\nfoobar\r\n".to_vec(),
            vec![error("ERR Protocol error: expected CRLF after bulk data")],
        ),
        (
            b"*1\r\n$x\r\n".to_vec(),
            vec![error("ERR Protocol error: invalid bulk length")],
        ),
        (
            b"*2\r\n$4\r\nMGET\r\n$1\r\na\r\n".to_vec(),
            vec![args(&[b"MGET", b"a"])],
        ),
    ]
}

fn stream_and_commands() -> (Vec<u8>, Vec<Command>) {
    let mut stream = Vec::new();
    let mut commands = Vec::new();
    for (bytes, expected) in corpus() {
        stream.extend_from_slice(&bytes);
        commands.extend(expected);
    }
    (stream, commands)
}

/// The commands of a batch, as the session executes them.
fn drain_batch<B: Batch>(batch: &mut B, out: &mut Vec<Command>) {
    for request in 0..batch.requests() {
        batch.select(request);
        out.push(match batch.protocol_error() {
            Some(message) => Err(message.to_string()),
            None => Ok((0..batch.argc()).map(|i| batch.arg(i).to_vec()).collect()),
        });
    }
}

/// Feed `pieces` through a pipe, each as its own segment and flush, decoding whatever is
/// complete after each (polled, so an incomplete request is `Pending`, as on a socket).
fn commands_pipe(pieces: &[&[u8]]) -> Vec<Command> {
    let (mut writer, reader) = pipe_with(PipeOptions {
        pause_threshold: 0,
        ..Default::default()
    });
    let mut frames = Frames::new(reader, RespDecoder::new(Config::default()));
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    let mut commands = Vec::new();
    let mut poll_all = |frames: &mut Frames<RespDecoder>, commands: &mut Vec<Command>| loop {
        match Pin::new(&mut *frames).poll_next(&mut cx) {
            Poll::Ready(Some(Ok(mut batch))) => {
                drain_batch(&mut batch, commands);
                frames.decoder_mut().recycle(batch);
            }
            Poll::Ready(Some(Err(e))) => panic!("decoder error: {e}"),
            Poll::Ready(None) | Poll::Pending => return,
        }
    };
    for piece in pieces {
        writer.append(Packet::from(piece.to_vec())).unwrap();
        writer.flush_blocking().unwrap();
        poll_all(&mut frames, &mut commands);
    }
    writer.complete();
    poll_all(&mut frames, &mut commands);
    commands
}

/// Feed `pieces` to the tokio-util codec as `Framed` would: decode after each read, then
/// `decode_eof` at the end.
fn commands_codec(pieces: &[&[u8]]) -> Vec<Command> {
    let mut codec = RespCodec::new(Config::default());
    let mut buffer = BytesMut::new();
    let mut commands = Vec::new();
    for piece in pieces {
        buffer.extend_from_slice(piece);
        while let Some(mut batch) = codec.decode(&mut buffer).unwrap() {
            drain_batch(&mut batch, &mut commands);
            codec.recycle(batch);
        }
    }
    while let Some(mut batch) = codec.decode_eof(&mut buffer).unwrap() {
        drain_batch(&mut batch, &mut commands);
        codec.recycle(batch);
    }
    commands
}

#[test]
fn whole_stream_gives_the_corpus_commands() {
    let (stream, expected) = stream_and_commands();
    assert_eq!(commands_pipe(&[&stream]), expected);
    assert_eq!(commands_codec(&[&stream]), expected);
}

#[test]
fn every_split_point_gives_the_same_commands() {
    let (stream, expected) = stream_and_commands();
    for cut in 0..=stream.len() {
        let pieces = [&stream[..cut], &stream[cut..]];
        assert_eq!(commands_pipe(&pieces), expected, "pipe, cut at {cut}");
        assert_eq!(
            commands_codec(&pieces),
            expected,
            "tokio-util, cut at {cut}"
        );
    }
}

#[test]
fn each_request_cut_at_every_pair_of_offsets() {
    // Three pieces per request: every header, bulk and CRLF cut in two places.
    for (bytes, expected) in corpus() {
        let len = bytes.len().min(80); // the 3000-byte value: the cuts in its first 80 bytes
        for a in 0..=len {
            for b in a..=len {
                let pieces = [&bytes[..a], &bytes[a..b], &bytes[b..]];
                assert_eq!(commands_pipe(&pieces), expected, "pipe, cuts {a} {b}");
                assert_eq!(commands_codec(&pieces), expected, "codec, cuts {a} {b}");
            }
        }
    }
}

#[test]
fn one_byte_per_segment() {
    let (stream, expected) = stream_and_commands();
    let pieces: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(commands_pipe(&pieces), expected);
    assert_eq!(commands_codec(&pieces), expected);
}

#[test]
fn a_request_above_the_maximum_is_fatal_after_the_ones_before_it() {
    let config = Config {
        max_request: 1000,
        ..Config::default()
    };
    let stream = b"*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000\r\n";
    let (mut writer, reader) = pipe_with(PipeOptions::default());
    writer.write_slice(stream).unwrap();
    writer.flush_blocking().unwrap();
    let mut frames = Frames::new(reader, RespDecoder::new(config));
    let mut batch = frames.iter_blocking().next().unwrap().unwrap();
    let mut commands = Vec::new();
    drain_batch(&mut batch, &mut commands);
    assert_eq!(commands, [args(&[b"PING"])]);
    match frames.iter_blocking().next() {
        Some(Err(resp::RespError::Fatal(message))) => {
            assert_eq!(message, "ERR Protocol error: invalid bulk length")
        }
        other => panic!("expected the fatal error, got {other:?}"),
    }

    let mut codec = RespCodec::new(config);
    let mut buffer = BytesMut::from(&stream[..]);
    let mut batch = codec.decode(&mut buffer).unwrap().unwrap();
    let mut commands = Vec::new();
    drain_batch(&mut batch, &mut commands);
    assert_eq!(commands, [args(&[b"PING"])]);
    assert!(matches!(
        codec.decode(&mut buffer),
        Err(resp::RespError::Fatal(message)) if message == "ERR Protocol error: invalid bulk length"
    ));
}

/// `parse` over one contiguous slice with the default maximum (512 MiB).
fn parse_default(bytes: &[u8]) -> resp::parse::Parsed {
    let mut spans = Vec::new();
    resp::parse::parse(
        std::iter::once(bytes),
        0,
        bytes.len(),
        resp::parse::DEFAULT_MAX_REQUEST,
        &mut spans,
    )
}

/// The limits as Redis 7 has them (measured against `redis-server` 7.0 on the same inputs; the
/// module docs of `examples/resp/parse.rs` list them).
#[test]
fn limits_read_as_redis_7s() {
    use resp::parse::{Parsed, MAX_INLINE};
    let fatal = |message: &str| Parsed::Fatal {
        message: message.to_string(),
    };
    // A bulk of exactly 512 MiB is waited for (Redis accepts it); one byte more is refused.
    let exact = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870912\r\n";
    assert!(matches!(
        parse_default(exact),
        Parsed::Incomplete { need } if need >= exact.len() + 536_870_912 + 2
    ));
    assert_eq!(
        parse_default(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870913\r\n"),
        fatal("ERR Protocol error: invalid bulk length")
    );
    // An inline line of 64 KiB (then CRLF) is taken; one byte more without a line end is refused.
    let mut line = vec![b'a'; MAX_INLINE];
    line.extend_from_slice(b"\r\n");
    assert_eq!(
        parse_default(&line),
        Parsed::Request {
            end: MAX_INLINE + 2
        }
    );
    assert_eq!(
        parse_default(&vec![b'a'; MAX_INLINE + 1]),
        fatal("ERR Protocol error: too big inline request")
    );
    // `*2147483647` waits for its elements, asking for no more than the bytes ahead allow.
    match parse_default(b"*2147483647\r\n") {
        Parsed::Incomplete { need } => assert!(need <= 13 + 64 * 1024, "need {need}"),
        other => panic!("{other:?}"),
    }
    // Counts above i32::MAX close, however large (Redis: "invalid multibulk length").
    for count in ["2147483648", "9223372036854775807"] {
        assert_eq!(
            parse_default(format!("*{count}\r\n").as_bytes()),
            fatal("ERR Protocol error: invalid multibulk length"),
            "*{count}"
        );
    }
    // A count of i64::MIN is an empty request, as any count <= 0.
    assert_eq!(
        parse_default(b"*-9223372036854775808\r\n"),
        Parsed::Request { end: 23 }
    );
    // Out of the i64 range: not a number (a recoverable error here).
    assert!(matches!(
        parse_default(b"*9223372036854775808\r\n"),
        Parsed::Invalid { end: 22, .. }
    ));
}
