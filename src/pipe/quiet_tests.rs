//! `PipeReader::is_quiet`: a caller that skips reads while it holds must find every later
//! publication through its wake, so it holds only while the reader's registration stands.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

use bytes::Bytes;

use super::pipe;

struct CountWakes(AtomicUsize);

impl Wake for CountWakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn quiet_holds_only_while_the_readers_wake_stands() {
    let (mut writer, mut reader) = pipe();
    let wakes = Arc::new(CountWakes(AtomicUsize::new(0)));
    let waker = Waker::from(wakes.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(!reader.is_quiet(), "no read has registered yet");
    assert!(reader.poll_read_buffer(&mut cx).is_pending());
    assert!(
        reader.is_quiet(),
        "a read found nothing and its wake stands"
    );

    // A publication uses the wake up; the reader reads the bytes and consumes them.
    writer.append(Bytes::from_static(b"first")).unwrap();
    let _ = writer.flush_blocking().unwrap();
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    assert!(!reader.is_quiet(), "bytes were published");
    assert!(reader.poll_read_buffer(&mut cx).is_ready());
    reader.advance_to(5, 5).unwrap();
    // Nothing new, but nothing registered either: a skipped read would miss the next
    // publication's wake.
    assert!(
        !reader.is_quiet(),
        "quiet with no registration standing: the next publication would wake nobody"
    );
    assert!(reader.poll_read_buffer(&mut cx).is_pending());
    assert!(reader.is_quiet());
    writer.append(Bytes::from_static(b"second")).unwrap();
    let _ = writer.flush_blocking().unwrap();
    assert_eq!(
        wakes.0.load(Ordering::SeqCst),
        2,
        "the standing wake is woken"
    );
}
