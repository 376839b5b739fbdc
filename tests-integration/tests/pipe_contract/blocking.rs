//! Blocking forms.

use super::*;

#[test]
fn blocking_forms_stream_length_prefixed_frames_across_threads() {
    const FRAMES: u32 = 3000;
    let pool = Pool::new();
    let (mut writer, mut reader) = pipe_on(
        &pool,
        PipeOptions {
            pause_threshold: 2048,
            resume_threshold: 512,
            min_segment_size: 1024,
            copy_threshold: 64,
            ..Default::default()
        },
    );
    let producer = thread::spawn(move || {
        let mut checksum = 0u64;
        for i in 0..FRAMES {
            let len = (i * 37 % 1500) as usize + 1;
            let frame: Vec<u8> = (0..len).map(|j| (i as usize + j) as u8).collect();
            checksum = frame.iter().fold(checksum, |c, &b| {
                c.wrapping_mul(31).wrapping_add(u64::from(b))
            });
            writer.write_slice(&(len as u32).to_be_bytes()).unwrap();
            if i % 2 == 0 {
                writer.write_slice(&frame).unwrap();
            } else {
                writer.append(frame).unwrap();
            }
            if i % 3 != 0 {
                assert!(!writer.flush_blocking().unwrap().is_completed);
            }
        }
        checksum
    });
    let (tx, rx) = mpsc::channel();
    let consumer = thread::spawn(move || {
        let mut checksum = 0u64;
        let mut frames = 0u32;
        loop {
            let result = reader.read_blocking().unwrap();
            let done = result.is_completed;
            loop {
                let buffer = reader.last_read().unwrap().buffer;
                if buffer.len() < 4 {
                    break;
                }
                let len = buffer.cursor().get_u32() as usize;
                if buffer.len() < 4 + len {
                    break;
                }
                reader.take_frame(4).unwrap();
                let frame = reader.take_frame(len).unwrap();
                checksum = frame.iter().fold(checksum, |c, &b| {
                    c.wrapping_mul(31).wrapping_add(u64::from(b))
                });
                frames += 1;
            }
            let left = reader.last_read().unwrap().buffer.len();
            reader.advance_to(0, left).unwrap();
            if done {
                assert_eq!(left, 0, "a partial frame at the end");
                break;
            }
        }
        tx.send(()).unwrap();
        (frames, checksum)
    });
    rx.recv_timeout(TIMEOUT).expect("the streaming test hung");
    let sent = producer.join().unwrap();
    let (frames, received) = consumer.join().unwrap();
    assert_eq!(frames, FRAMES);
    assert_eq!(received, sent);
    assert_eq!(pool.stats().outstanding, 0);
}

#[test]
fn flush_blocking_parks_until_the_reader_catches_up() {
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pause_threshold: 100,
        resume_threshold: 50,
        ..Default::default()
    });
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        writer.write_slice(&[1; 150]).unwrap();
        let result = writer.flush_blocking().unwrap(); // paused until the reader examines 101+
        tx.send(result).unwrap();
        writer
    });
    // Examine in small steps; the flush can only return once fewer than 50 are unexamined.
    let mut examined = 0;
    while examined < 150 {
        let result = reader.read_blocking().unwrap();
        let len = result.buffer.len();
        examined = (examined + 10).min(len);
        reader.advance_to(0, examined).unwrap();
        if examined <= 100 {
            assert!(
                rx.try_recv().is_err(),
                "the flush returned with {} bytes unexamined",
                150 - examined
            );
        }
    }
    let result = rx
        .recv_timeout(TIMEOUT)
        .expect("the paused flush was never released");
    assert_eq!(result, FlushResult::default());
    drop(t.join().unwrap());
}
