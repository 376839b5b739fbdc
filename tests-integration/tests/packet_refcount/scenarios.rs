//! Fixed scenarios.

use super::*;

/// Many threads cloning, slicing and dropping views of the same blocks at once.
#[test]
fn shared_blocks_released_concurrently() {
    let pool = Pool::with_options(packetpipe::PoolOptions {
        thread_cache_depth: 2,
        ..packetpipe::PoolOptions::default()
    })
    .unwrap();
    let rounds = if cfg!(miri) { 2 } else { 50 };
    for round in 0..rounds {
        let packets: Vec<Packet> = (0..64u8)
            .map(|i| pool.copy_from_slice(&[round ^ i; 200]).unwrap())
            .collect();
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let packets: Vec<Packet> = packets.iter().map(|p| p.slice(t * 10..)).collect();
                thread::spawn(move || {
                    for (i, p) in packets.into_iter().enumerate() {
                        let mut copies = [p.clone(), p.slice(1..5), p.clone()];
                        assert!(copies
                            .iter()
                            .all(|c| c.iter().all(|&b| b == round ^ i as u8)));
                        drop(p);
                        assert!(copies[0].get_mut().is_none(), "shared by its copies");
                    }
                })
            })
            .collect();
        drop(packets);
        for h in handles {
            h.join().unwrap();
        }
        let stats = pool.stats();
        assert_eq!(
            (stats.rents, stats.returns, stats.outstanding),
            (64 * (round as u64 + 1), 64 * (round as u64 + 1), 0)
        );
    }
}

/// A sealed packet and the buffer it came from, used and dropped on different threads.
#[test]
fn seal_here_write_there() {
    let pool = Pool::new();
    let mut buf = pool.rent(4096).unwrap();
    let mut sealed = Vec::new();
    for i in 0..10u8 {
        buf.put_slice(&[i; 100]);
        sealed.push(buf.seal());
    }
    let writer = thread::spawn(move || {
        for i in 10..20u8 {
            buf.put_slice(&[i; 100]);
            let packet = buf.seal();
            assert!(packet.iter().all(|&b| b == i));
        }
        buf
    });
    let reader = thread::spawn(move || {
        for (i, p) in sealed.iter().enumerate() {
            assert!(p.iter().all(|&b| b == i as u8));
        }
    });
    reader.join().unwrap();
    let buf = writer.join().unwrap();
    assert_eq!(buf.remaining_mut(), 4096 - 2000);
    assert_eq!(pool.stats().outstanding, 1);
    drop(buf);
    let stats = pool.stats();
    assert_eq!((stats.rents, stats.returns, stats.outstanding), (1, 1, 0));
}

/// The display helpers read the same bytes as the model through a chain of mixed packets.
#[test]
fn chain_of_mixed_packets_reads_back() {
    let pool = Pool::new();
    let mut chain = PacketChain::new();
    let mut model = Vec::new();
    for i in 0..20u8 {
        let data = vec![b'a' + i; i as usize + 1];
        model.extend_from_slice(&data);
        match i % 4 {
            0 => chain.push(pool.copy_from_slice(&data).unwrap()),
            1 => chain.push(data),
            2 => chain.push(Bytes::from(data)),
            _ => chain.push(pool.copy_from_slice(&data).unwrap().into_bytes()),
        }
    }
    assert_eq!(chain.to_vec(), model);
    assert_eq!(
        chain.display_lossy().to_string(),
        String::from_utf8(model.clone()).unwrap()
    );
    let head = chain.split_to(100);
    assert_eq!(head.to_vec(), &model[..100]);
    drop(head);
    assert_eq!(&chain.to_packet().unwrap()[..], &model[100..]);
    drop(chain);
    assert_eq!(pool.stats().outstanding, 0);
}
