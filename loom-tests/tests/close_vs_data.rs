#![cfg(packetpipe_loom)]
//! Close vs data: the writer completes (or is dropped, or fails) while the reader reads.

use loom::thread;
use packetpipe::pipe::{PipeOptions, PipeReader, PipeWriter};
use packetpipe::ByteSegments;
use packetpipe_loom_tests::Hold;
use packetpipe_loom_tests::{block_on, pipe};

/// How the writer ends.
#[derive(Clone, Copy)]
enum End {
    Complete,
    Drop,
    Error,
}

/// The writer flushes "ab", stages "c" and ends while the reader reads. The reader sees every byte
/// ("abc", the staged "c" included) before it sees the end: completion (or, for
/// `complete_with_error`, the error) never arrives while flushed or staged bytes are missing, and a
/// reader waiting for data is woken by the end.
fn end_after_data_model(end: End) {
    loom::model(move || {
        let (mut writer, mut reader) = pipe(PipeOptions {
            pause_threshold: 0,
            ..Default::default()
        });
        let producer = thread::spawn(move || {
            writer.append(&b"ab"[..]).unwrap();
            block_on(writer.flush_pipe()).unwrap();
            writer.append(&b"c"[..]).unwrap();
            finish(writer, end);
        });
        let (got, error) = read_until_end(&mut reader);
        assert_eq!(got, b"abc", "the end was seen before every byte");
        match end {
            End::Complete | End::Drop => assert_eq!(error, None),
            End::Error => assert!(error.expect("the writer's error").contains("boom")),
        }
        producer.join().unwrap();
    });
}

fn finish(mut writer: Hold<PipeWriter>, end: End) {
    match end {
        End::Complete => writer.complete(),
        End::Drop => drop(writer),
        End::Error => writer.complete_with_error("boom"),
    }
}

/// Read until completion or an error; returns the bytes and the error's (source's) message.
fn read_until_end(reader: &mut PipeReader) -> (Vec<u8>, Option<String>) {
    let mut got = Vec::new();
    loop {
        let result = match block_on(reader.read_buffer()) {
            Ok(result) => result,
            // The peer's own message is the error's source.
            Err(e) => {
                let source = std::error::Error::source(&e).map(|s| s.to_string());
                return (got, Some(source.unwrap_or_else(|| e.to_string())));
            }
        };
        let bytes = result.buffer.to_vec();
        let completed = result.is_completed;
        got.extend_from_slice(&bytes);
        reader.advance_to(bytes.len(), bytes.len()).unwrap();
        if completed {
            return (got, None);
        }
    }
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn complete_after_data() {
    end_after_data_model(End::Complete);
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn drop_after_data() {
    end_after_data_model(End::Drop);
}

#[test]
#[cfg(not(packetpipe_mutant))]
fn complete_with_error_after_data() {
    end_after_data_model(End::Error);
}

/// Mutant `done_before_data`: completion that publishes DONE before the staged bytes lets the
/// reader see the end with "c" missing.
#[test]
#[cfg(packetpipe_mutant)]
#[should_panic(expected = "the end was seen before every byte")]
fn mutant_done_before_data() {
    end_after_data_model(End::Complete);
}
