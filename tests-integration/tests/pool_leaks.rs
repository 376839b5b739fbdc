//! Leak reports with sites (`PoolBuilder::track_leaks`): a packet leaked with `mem::forget` is
//! found, with where it was rented and where it was last sealed, sliced or taken; blocks that
//! come back leave the report; untracked pools report nothing and keep their thread caches.

use std::panic::Location;

use packetpipe::frame::{Frames, LengthDelimited};
use packetpipe::pipe::{pipe_with, PipeOptions};
use packetpipe::BlockUse;
use packetpipe::{Pool, PoolProbe};

fn tracked() -> Pool {
    Pool::with_options(packetpipe::PoolOptions {
        track_leaks: true,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap()
}

/// The location of the next line of the caller (where the call under test is).
#[track_caller]
fn next_line() -> (&'static str, u32) {
    let here = Location::caller();
    (here.file(), here.line() + 1)
}

fn site(location: &'static Location<'static>) -> (&'static str, u32) {
    (location.file(), location.line())
}

#[test]
fn a_forgotten_packet_is_reported_with_its_rent_site() {
    let pool = tracked();
    let kept = pool.copy_from_slice(b"kept").unwrap();
    let rented = next_line();
    let leaked = pool.copy_from_slice(b"leaked").unwrap();
    std::mem::forget(leaked);
    drop(kept);
    let report = pool.leak_report();
    assert!(report.tracking);
    assert_eq!(report.blocks.len(), 1, "{report}");
    let block = &report.blocks[0];
    assert_eq!(site(block.rented_at), rented);
    assert_eq!(block.last_use, None);
    assert_eq!(block.capacity, 64);
    assert_eq!(pool.stats().outstanding, 1);
    let text = report.to_string();
    assert!(
        text.starts_with("1 block of the pool outstanding (64 bytes):\n  64 bytes, rented "),
        "{text}"
    );
    assert!(
        text.contains(&format!(" ago at {}:{}:", rented.0, rented.1)),
        "{text}"
    );
}

#[test]
fn the_last_seal_or_slice_is_reported_with_its_site() {
    let pool = tracked();
    let mut buf = pool.rent(100).unwrap();
    buf.extend_from_slice(b"header:body").unwrap();
    let sealed = next_line();
    let mut packet = buf.seal();
    drop(buf);
    let report = pool.leak_report();
    let (use_, at) = report.blocks[0].last_use.unwrap();
    assert_eq!((use_, site(at)), (BlockUse::Sealed, sealed));

    let sliced = next_line();
    let header = packet.split_to(7);
    drop(packet);
    let (use_, at) = pool.leak_report().blocks[0].last_use.unwrap();
    assert_eq!((use_, site(at)), (BlockUse::Sliced, sliced));
    assert!(pool
        .leak_report()
        .to_string()
        .contains(&format!("last sliced at {}:{}:", sliced.0, sliced.1)));

    // Through `Packet` too.
    let header = header;
    let sliced = next_line();
    let tag = header.slice(0..1);
    drop(header);
    std::mem::forget(tag);
    let (use_, at) = pool.leak_report().blocks[0].last_use.unwrap();
    assert_eq!((use_, site(at)), (BlockUse::Sliced, sliced));
}

#[test]
fn frames_taken_from_a_pipe_are_reported_at_the_take() {
    let pool = tracked();
    let options = PipeOptions {
        pool: Some(pool.clone()),
        copy_threshold: 64,
        ..Default::default()
    };
    let (mut writer, mut reader) = pipe_with(options);
    writer.write_slice(&[5u8; 50]).unwrap();
    writer.write_slice(&[7u8; 100]).unwrap();
    writer.flush_blocking().unwrap();
    reader.read_blocking().unwrap();
    // Copied out (at most the copy threshold, more than an inline packet holds): a block of its
    // own, rented at the take.
    let copied_at = next_line();
    let small = reader.take_frame(50).unwrap();
    // Shared (above it): the writer's block, last taken here.
    let shared_at = next_line();
    let large = reader.take_frame(100).unwrap();
    reader.advance_to(0, 0).unwrap();
    drop((writer, reader));
    std::mem::forget(small);
    std::mem::forget(large);

    let report = pool.leak_report();
    assert_eq!(report.blocks.len(), 2, "{report}");
    let copied = report
        .blocks
        .iter()
        .find(|b| site(b.rented_at) == copied_at)
        .unwrap_or_else(|| panic!("no block rented at the copying take: {report}"));
    assert_eq!(copied.last_use, None);
    let shared = report
        .blocks
        .iter()
        .find(|b| b.last_use.map(|(u, at)| (u, site(at))) == Some((BlockUse::Taken, shared_at)))
        .unwrap_or_else(|| panic!("no block last taken at the sharing take: {report}"));
    assert!(
        shared.rented_at.file().ends_with("writer.rs"),
        "the pipe writer rented it: {}",
        shared.rented_at
    );
    assert_eq!(pool.stats().outstanding, 2);
}

#[test]
fn a_chain_taken_out_is_reported_at_the_take() {
    let pool = tracked();
    let (mut writer, mut reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });
    let mut buf = pool.rent(64).unwrap();
    buf.extend_from_slice(b"abc").unwrap();
    writer.append(buf.freeze()).unwrap();
    writer.flush_blocking().unwrap();
    reader.read_blocking().unwrap();
    let taken = next_line();
    let chain = reader.take_frame_chain(3).unwrap();
    drop((writer, reader));
    std::mem::forget(chain);
    let report = pool.leak_report();
    let (use_, at) = report.blocks[0].last_use.unwrap();
    assert_eq!((use_, site(at)), (BlockUse::Taken, taken));
}

/// A frame a built-in decoder takes is reported at the decoder's take (in the library): which
/// decoder made the leaked frame.
#[test]
fn a_decoders_frames_are_reported_at_the_decoders_take() {
    let pool = tracked();
    let (mut writer, reader) = pipe_with(PipeOptions {
        pool: Some(pool.clone()),
        ..Default::default()
    });
    // A 40-byte payload: copied into a block (more than an inline packet holds).
    writer.write_slice(b"\0\0\0\x28").unwrap();
    writer.write_slice(&[b'x'; 40]).unwrap();
    writer.complete();
    let mut frames = Frames::new(reader, LengthDelimited::new());
    let frame = frames.iter_blocking().next().unwrap().unwrap();
    drop(frames);
    std::mem::forget(frame);
    let report = pool.leak_report();
    assert_eq!(report.blocks.len(), 1, "{report}");
    assert!(
        report.blocks[0]
            .rented_at
            .file()
            .ends_with("length_delimited.rs"),
        "{report}"
    );
}

#[test]
fn returned_blocks_leave_the_report_from_any_thread_and_the_oldest_comes_first() {
    let pool = tracked();
    let first = pool.copy_from_slice(b"first").unwrap();
    let second = pool.copy_from_slice(&[0; 5000]).unwrap();
    let third = pool.rent(2 << 20).unwrap(); // above the largest class: unpooled, tracked too
    let report = pool.leak_report();
    assert_eq!(report.blocks.len(), 3);
    let capacities: Vec<usize> = report.blocks.iter().map(|b| b.capacity).collect();
    assert_eq!(capacities, [64, 5120, 2 << 20], "oldest first");
    assert!(report.blocks[0].age >= report.blocks[2].age);
    std::thread::spawn(move || drop((first, second)))
        .join()
        .unwrap();
    drop(third);
    let report = pool.leak_report();
    assert!(report.blocks.is_empty(), "{report}");
    assert_eq!(
        report.to_string(),
        "0 blocks of the pool outstanding (0 bytes)\n"
    );
    let stats = pool.stats();
    assert_eq!((stats.outstanding, stats.rents, stats.returns), (0, 3, 3));
    // A tracked pool keeps no thread caches (their fast paths would not record).
    assert_eq!(pool.monitor().thread_caches(), 0);
}

#[test]
fn a_closed_pools_monitor_still_reports_what_was_never_dropped() {
    let pool = tracked();
    let monitor = pool.monitor();
    let rented = next_line();
    std::mem::forget(pool.copy_from_slice(b"x").unwrap());
    drop(pool.copy_from_slice(b"y").unwrap());
    drop(pool);
    let report = monitor.leak_report();
    assert_eq!(report.blocks.len(), 1);
    assert_eq!(site(report.blocks[0].rented_at), rented);
    assert!(monitor.stats().closed);
}

#[test]
fn an_untracked_pool_reports_nothing_and_keeps_its_caches() {
    let pool = Pool::new();
    std::mem::forget(pool.copy_from_slice(b"leaked, unseen").unwrap());
    let report = pool.leak_report();
    assert!(!report.tracking);
    assert!(report.blocks.is_empty());
    assert_eq!(
        report.to_string(),
        "leak tracking is off for this pool (PoolOptions::track_leaks turns it on)\n"
    );
    assert_eq!(
        pool.stats().outstanding,
        1,
        "the statistics still show the leak"
    );
    assert_eq!(pool.monitor().thread_caches(), 1);
}
