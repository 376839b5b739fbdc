//! `ByteSegments` helpers across segment boundaries: lossy UTF-8 display, pattern search (from the
//! start and from an offset), integers peeked in place, hex dump, copy out. Every helper must give the same answer as the plain-slice computation over the
//! concatenated bytes, whatever the chunking.

use packetpipe::{ByteSegments, Packet, PacketChain, Pool};
use proptest::prelude::*;
use proptest::sample::Index;

/// Segments as given, empty ones included (`PacketChain` drops empty packets, this does not).
struct Chunks(Vec<Vec<u8>>);

impl ByteSegments for Chunks {
    fn segments(&self) -> impl Iterator<Item = &[u8]> + Clone {
        self.0.iter().map(Vec::as_slice)
    }
}

/// Cut `bytes` at the given offsets (sorted, may repeat: repeats make empty segments).
fn chunk(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut cuts = cuts.to_vec();
    cuts.sort_unstable();
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for cut in cuts {
        out.push(bytes[start..cut].to_vec());
        start = cut;
    }
    out.push(bytes[start..].to_vec());
    out
}

/// A chain over the chunks, alternating the kinds of packet.
fn chain_of(pool: &Pool, chunks: &[Vec<u8>]) -> PacketChain {
    chunks
        .iter()
        .enumerate()
        .map(|(i, c)| match i % 3 {
            0 => pool.copy_from_slice(c).unwrap(),
            1 => Packet::from(c.clone()),
            _ => Packet::from(bytes::Bytes::copy_from_slice(c)),
        })
        .collect()
}

/// Every way of cutting `bytes` into non-empty segments (2^(n-1) of them).
fn all_chunkings(bytes: &[u8]) -> impl Iterator<Item = Vec<Vec<u8>>> + '_ {
    let gaps = bytes.len().saturating_sub(1);
    assert!(gaps < 16, "too many chunkings");
    (0u32..1 << gaps).map(move |mask| {
        let cuts: Vec<usize> = (0..gaps)
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| i + 1)
            .collect();
        chunk(bytes, &cuts)
    })
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn display(chunks: &[Vec<u8>]) -> String {
    Chunks(chunks.to_vec()).display_lossy().to_string()
}

// ------------------------------------------------------------------------------------------------
// Lossy UTF-8

#[test]
fn two_byte_char_split_across_two_segments() {
    let chunks = vec![b"caf\xc3".to_vec(), b"\xa9!".to_vec()];
    assert_eq!(display(&chunks), "café!");
    let pool = Pool::new();
    assert_eq!(
        chain_of(&pool, &chunks).display_lossy().to_string(),
        "café!"
    );
}

#[test]
fn three_byte_char_split_across_two_and_three_segments() {
    let euro = "€".as_bytes(); // e2 82 ac
    assert_eq!(euro.len(), 3);
    for chunks in [
        vec![euro[..1].to_vec(), euro[1..].to_vec()],
        vec![euro[..2].to_vec(), euro[2..].to_vec()],
        vec![euro[..1].to_vec(), euro[1..2].to_vec(), euro[2..].to_vec()],
        vec![
            b"1".to_vec(),
            euro[..1].to_vec(),
            vec![],
            euro[1..2].to_vec(),
            euro[2..].to_vec(),
        ],
    ] {
        let expected = lossy(&chunks.concat());
        assert!(expected.ends_with('€'), "{expected}");
        assert_eq!(display(&chunks), expected, "{chunks:?}");
    }
}

#[test]
fn four_byte_char_split_across_two_three_and_four_segments() {
    let emoji = "😀".as_bytes(); // f0 9f 98 80
    let pool = Pool::new();
    for chunks in all_chunkings(emoji) {
        assert_eq!(display(&chunks), "😀", "{chunks:?}");
        assert_eq!(
            chain_of(&pool, &chunks).display_lossy().to_string(),
            "😀",
            "{chunks:?}"
        );
    }
    let chunks = vec![
        b"<".to_vec(),
        emoji[..1].to_vec(),
        emoji[1..].to_vec(),
        b">".to_vec(),
    ];
    assert_eq!(display(&chunks), "<😀>");
    // Four one-byte segments, each 2 chars after the last: no carry leaks into the next char.
    let mut chunks: Vec<Vec<u8>> = emoji.iter().map(|&b| vec![b]).collect();
    chunks.push("é€".as_bytes().to_vec());
    assert_eq!(display(&chunks), "😀é€");
}

/// Tricky sequences, every chunking of each: each must decode as `String::from_utf8_lossy` does
/// (one U+FFFD per maximal invalid subpart).
#[test]
fn invalid_sequences_in_every_chunking() {
    let cases: &[&[u8]] = &[
        b"\xc3\xa9",                 // é
        b"\xe2\x82\xac",             // €
        b"\xf0\x9f\x98\x80",         // 😀
        b"\xf4\x8f\xbf\xbf",         // U+10FFFF
        b"\x80",                     // lone continuation
        b"\xbf\xbf\xbf",             // three continuations: three replacements
        b"\xc0\x80",                 // overlong NUL
        b"\xc1\xbf",                 // overlong
        b"\xe0\x80\x80",             // overlong 3-byte
        b"\xed\xa0\x80",             // surrogate
        b"\xf4\x90\x80\x80",         // above U+10FFFF
        b"\xf5\x80",                 // invalid lead
        b"\xff\xfe",                 // invalid bytes
        b"\xe2\x82A",                // truncated 3-byte, then ASCII
        b"\xf0\x9f\x98A",            // truncated 4-byte, then ASCII
        b"\xf0\x9f\x98",             // truncated at the end
        b"\xe2\x82",                 // truncated at the end
        b"\xc3",                     // truncated at the end
        b"\xf0\x9f\x98\xe2\x82\xac", // truncated 4-byte, then €
        b"\xe2\x82\xf0\x9f\x98\x80", // truncated 3-byte, then 😀
        b"\xc3\xc3\xa9",             // truncated 2-byte, then é
        b"\xf0\x80\x80\x80",         // overlong 4-byte
        b"a\xf0\x9f\x98\x80b\xe2\x82\xacc",
        b"\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac",
        b"\xc3\xa9\x80\xc3\xa9",
        b"\xf0\x9f\xf0\x9f\x98\x80\x80",
        b"\xed\x9f\xbf\xed\xa0", // U+D7FF, then truncated surrogate
        b"\xe0\xa0\x80\xe0\xa0", // U+0800, then truncated at the end
    ];
    for &bytes in cases {
        let expected = lossy(bytes);
        for chunks in all_chunkings(bytes) {
            assert_eq!(display(&chunks), expected, "{bytes:x?} as {chunks:x?}");
        }
        // Empty segments anywhere make no difference.
        let mut with_empties = vec![vec![]];
        for b in bytes {
            with_empties.push(vec![*b]);
            with_empties.push(vec![]);
        }
        assert_eq!(
            display(&with_empties),
            expected,
            "{bytes:x?} with empty segments"
        );
    }
    assert_eq!(display(&[]), "");
    assert_eq!(display(&[vec![], vec![]]), "");
}

#[test]
fn display_lossy_for_single_segment_types() {
    let pool = Pool::new();
    let bytes = b"ok \xe2\x82 \xf0\x9f\x98\x80 \xff";
    let expected = lossy(bytes);
    assert_eq!(bytes[..].display_lossy().to_string(), expected);
    assert_eq!(
        pool.copy_from_slice(bytes)
            .unwrap()
            .display_lossy()
            .to_string(),
        expected
    );
    assert_eq!(
        Packet::from(&bytes[..]).display_lossy().to_string(),
        expected
    );
    let mut buf = pool.rent(64).unwrap();
    buf.extend_from_slice(bytes).unwrap();
    assert_eq!(buf.display_lossy().to_string(), expected);
}

/// Bytes biased toward UTF-8 text with multi-byte characters, with some corruption mixed in.
fn text_like() -> impl Strategy<Value = Vec<u8>> {
    let chars = prop_oneof![
        4 => any::<char>(),
        2 => prop::sample::select(vec![
            'a', ' ', 'é', 'ß', '€', '\u{7ff}', '\u{800}', '\u{ffff}', '😀', '\u{10000}', '\u{10ffff}'
        ]),
    ];
    let text = prop::collection::vec(chars, 0..40)
        .prop_map(|cs| cs.into_iter().collect::<String>().into_bytes());
    let odd_byte = prop::sample::select(vec![
        0x80u8, 0x8f, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0, 0xf4, 0xf5,
        0xff,
    ]);
    let corrupted = (
        text.clone(),
        prop::collection::vec((any::<Index>(), odd_byte.clone(), any::<bool>()), 1..6),
    )
        .prop_map(|(mut bytes, edits)| {
            for (at, byte, insert) in edits {
                let i = at.index(bytes.len() + 1);
                if insert || i == bytes.len() {
                    bytes.insert(i, byte);
                } else {
                    bytes.remove(i); // may cut a character in half
                }
            }
            bytes
        });
    prop_oneof![
        3 => text,
        3 => corrupted,
        1 => prop::collection::vec(any::<u8>(), 0..64),
        1 => prop::collection::vec(odd_byte, 0..24),
    ]
}

/// Bytes and cut points into them.
fn chunked(bytes: impl Strategy<Value = Vec<u8>>) -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
    (bytes, prop::collection::vec(any::<Index>(), 0..12)).prop_map(|(bytes, cuts)| {
        let cuts = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        (bytes, cuts)
    })
}

/// A small alphabet, so that patterns match often and partially.
fn abc() -> impl Strategy<Value = u8> {
    prop::sample::select(vec![b'a', b'b', b'c'])
}

/// Cases per property: `PROPTEST_CASES`, or 1024.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn display_lossy_matches_from_utf8_lossy((bytes, cuts) in chunked(text_like())) {
        let expected = lossy(&bytes);
        let chunks = chunk(&bytes, &cuts);
        prop_assert_eq!(display(&chunks), expected.clone());
        let pool = Pool::new();
        let chain = chain_of(&pool, &chunks);
        prop_assert_eq!(chain.display_lossy().to_string(), expected);
    }

    #[test]
    fn find_matches_naive_search(
        (bytes, cuts) in chunked(prop::collection::vec(abc(), 0..48)),
        pattern in prop::collection::vec(abc(), 0..6),
    ) {
        let expected = naive_find(&bytes, &pattern);
        let chunks = chunk(&bytes, &cuts);
        prop_assert_eq!(Chunks(chunks.clone()).find(&pattern), expected);
        let pool = Pool::new();
        prop_assert_eq!(chain_of(&pool, &chunks).find(&pattern), expected);
    }

    #[test]
    fn find_locates_a_pattern_that_spans_a_boundary(
        (bytes, cuts) in chunked(prop::collection::vec(any::<u8>(), 1..64)),
        start in any::<Index>(),
        len in 1usize..12,
    ) {
        let start = start.index(bytes.len());
        let end = (start + len).min(bytes.len());
        let pattern = &bytes[start..end];
        let expected = naive_find(&bytes, pattern);
        prop_assert!(expected.is_some_and(|at| at <= start));
        prop_assert_eq!(Chunks(chunk(&bytes, &cuts)).find(pattern), expected);
    }

    #[test]
    fn hex_dump_and_copy_out_ignore_the_chunking(
        (bytes, cuts) in chunked(prop::collection::vec(any::<u8>(), 0..80)),
        limit in prop_oneof![0usize..100, Just(usize::MAX)],
        prefix in any::<Index>(),
    ) {
        let chunks = Chunks(chunk(&bytes, &cuts));
        prop_assert_eq!(chunks.hex_dump(limit).to_string(), reference_hex_dump(&bytes, limit));
        prop_assert_eq!(ByteSegments::len(&chunks), bytes.len());
        prop_assert_eq!(chunks.to_vec(), bytes.clone());
        let n = prefix.index(bytes.len() + 1);
        let mut dst = vec![0u8; n];
        chunks.copy_prefix_to(&mut dst).unwrap();
        prop_assert_eq!(&dst[..], &bytes[..n]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn find_from_matches_naive_search_from_the_offset(
        (bytes, cuts) in chunked(prop::collection::vec(abc(), 0..48)),
        pattern in prop::collection::vec(abc(), 0..6),
        offset in 0usize..52,
    ) {
        let expected = if offset > bytes.len() {
            None
        } else {
            naive_find(&bytes[offset..], &pattern).map(|at| offset + at)
        };
        let chunks = chunk(&bytes, &cuts);
        prop_assert_eq!(Chunks(chunks.clone()).find_from(offset, &pattern), expected);
        let pool = Pool::new();
        prop_assert_eq!(chain_of(&pool, &chunks).find_from(offset, &pattern), expected);
        if offset == 0 {
            prop_assert_eq!(Chunks(chunks).find(&pattern), expected);
        }
    }

    #[test]
    fn peeks_match_from_bytes_at_every_offset(
        (bytes, cuts) in chunked(prop::collection::vec(any::<u8>(), 0..24)),
    ) {
        let chunks = Chunks(chunk(&bytes, &cuts));
        for offset in 0..=bytes.len() + 1 {
            let at = |n: usize| bytes.get(offset..offset + n);
            prop_assert_eq!(chunks.peek_be::<u8>(offset), at(1).map(|b| b[0]));
            prop_assert_eq!(chunks.peek_le::<i8>(offset), at(1).map(|b| b[0] as i8));
            prop_assert_eq!(
                chunks.peek_be::<u16>(offset),
                at(2).map(|b| u16::from_be_bytes(b.try_into().unwrap()))
            );
            prop_assert_eq!(
                chunks.peek_le::<i16>(offset),
                at(2).map(|b| i16::from_le_bytes(b.try_into().unwrap()))
            );
            prop_assert_eq!(
                chunks.peek_be::<u32>(offset),
                at(4).map(|b| u32::from_be_bytes(b.try_into().unwrap()))
            );
            prop_assert_eq!(
                chunks.peek_le::<u32>(offset),
                at(4).map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            );
            prop_assert_eq!(
                chunks.peek_be::<i64>(offset),
                at(8).map(|b| i64::from_be_bytes(b.try_into().unwrap()))
            );
            prop_assert_eq!(
                chunks.peek_le::<u64>(offset),
                at(8).map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            );
        }
    }
}

/// The peeks and `find_from` on the pipe's views: a read buffer, a slice of it, and a cursor
/// (whose offsets count from where it stands), over segments of every kind.
#[test]
fn peeks_and_find_from_on_read_buffers_and_cursors() {
    use bytes::Buf;

    let (mut writer, mut reader) = packetpipe::pipe::pipe();
    writer.append(&b"\x00\x00"[..]).unwrap();
    writer.write_slice(b"\x00\x0cab\r").unwrap();
    writer.flush_blocking().unwrap();
    writer
        .append(bytes::Bytes::from_static(b"\ncd\r\nef"))
        .unwrap();
    writer.flush_blocking().unwrap();
    let result = reader.read_blocking().unwrap();
    let buffer = result.buffer;
    assert!(buffer.segments().count() >= 2);
    assert_eq!(buffer.peek_be::<u32>(0), Some(12));
    assert_eq!(buffer.peek_le::<u32>(0), Some(12 << 24));
    assert_eq!(buffer.peek_be::<u16>(3), Some(0x0c61)); // across the first boundary
    assert_eq!(buffer.find_from(4, b"\r\n"), Some(6)); // across the second one
    assert_eq!(buffer.find_from(7, b"\r\n"), Some(10));
    assert_eq!(buffer.find_from(11, b"\r\n"), None);
    assert_eq!(buffer.peek_be::<u64>(buffer.len() - 7), None);
    let tail = buffer.slice(4..);
    assert_eq!(tail.peek_be::<u16>(0), Some(u16::from_be_bytes(*b"ab")));
    assert_eq!(tail.find_from(1, b"\r\n"), Some(2));

    let mut cursor = buffer.cursor();
    cursor.advance(3);
    assert_eq!(cursor.peek_be::<u8>(0), Some(12));
    assert_eq!(cursor.find_from(0, b"\r\n"), Some(3));
    assert_eq!(
        cursor.remaining(),
        buffer.len() - 3,
        "peeking consumed nothing"
    );
    cursor.advance(cursor.remaining() - 1);
    assert_eq!(cursor.peek_be::<u8>(0), Some(b'f'));
    assert_eq!(cursor.peek_be::<u16>(0), None);
    cursor.advance(1);
    assert_eq!(cursor.peek_be::<u8>(0), None);
    assert_eq!(cursor.find_from(0, b""), Some(0));
}

fn naive_find(haystack: &[u8], pattern: &[u8]) -> Option<usize> {
    if pattern.is_empty() {
        return Some(0);
    }
    haystack.windows(pattern.len()).position(|w| w == pattern)
}

// ------------------------------------------------------------------------------------------------
// Pattern search

#[test]
fn find_across_boundaries() {
    let pool = Pool::new();
    let chain = chain_of(
        &pool,
        &[
            b"GET / HT".to_vec(),
            b"TP/1.1\r".to_vec(),
            b"\n\r\n".to_vec(),
        ],
    );
    assert_eq!(chain.find(b"HTTP"), Some(6));
    assert_eq!(chain.find(b"\r\n\r\n"), Some(14));
    assert_eq!(chain.find(b"\r\n"), Some(14));
    assert_eq!(chain.find(b"1.1\r\n"), Some(11));
    assert_eq!(chain.find(b"GET / HTTP/1.1\r\n\r\n"), Some(0));
    assert_eq!(chain.find(b"GET / HTTP/1.1\r\n\r\n!"), None);
    assert_eq!(chain.find(b"\n!"), None);
    assert_eq!(chain.find(b""), Some(0));
    assert_eq!(PacketChain::new().find(b""), Some(0));
    assert_eq!(PacketChain::new().find(b"x"), None);
    // A false start at a boundary must not hide a later match.
    let chunks = Chunks(vec![
        b"aa".to_vec(),
        vec![],
        b"ab".to_vec(),
        b"a".to_vec(),
        b"abb".to_vec(),
    ]);
    assert_eq!(chunks.find(b"aab"), Some(1));
    assert_eq!(chunks.find(b"baa"), Some(3));
    assert_eq!(chunks.find(b"aabb"), Some(4));
    // A pattern spanning three segments.
    let chunks = Chunks(vec![
        b"xx1".to_vec(),
        b"2".to_vec(),
        b"3".to_vec(),
        b"4yy".to_vec(),
    ]);
    assert_eq!(chunks.find(b"1234"), Some(2));
}

// ------------------------------------------------------------------------------------------------
// Hex dump

/// The expected dump, built a different way from the implementation: `hexdump -C`'s layout.
fn reference_hex_dump(bytes: &[u8], limit: usize) -> String {
    let shown = &bytes[..limit.min(bytes.len())];
    let mut out = String::new();
    for (n, line) in shown.chunks(16).enumerate() {
        let mut hex = String::new();
        for (i, b) in line.iter().enumerate() {
            if i == 8 {
                hex.push(' ');
            }
            hex.push_str(&format!(" {b:02x}"));
        }
        let ascii: String = line
            .iter()
            .map(|&b| {
                if (0x20..0x7f).contains(&b) {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        out.push_str(&format!("{:08x} {hex:<49}  |{ascii}|\n", n * 16));
    }
    if bytes.len() > shown.len() {
        out.push_str(&format!("... {} more bytes\n", bytes.len() - shown.len()));
    }
    out
}

#[test]
fn hex_dump_format() {
    let data: Vec<u8> = (0u8..=40).collect();
    assert_eq!(
        data[..16].hex_dump(16).to_string(),
        "00000000  00 01 02 03 04 05 06 07  08 09 0a 0b 0c 0d 0e 0f  |................|\n"
    );
    assert_eq!(
        b"hello, world\n".hex_dump(100).to_string(),
        "00000000  68 65 6c 6c 6f 2c 20 77  6f 72 6c 64 0a           |hello, world.|\n"
    );
    assert_eq!(
        b"Hi~\x7f\xff".hex_dump(64).to_string(),
        "00000000  48 69 7e 7f ff                                    |Hi~..|\n"
    );
    let pool = Pool::new();
    let chain = chain_of(
        &pool,
        &[
            data[..5].to_vec(),
            data[5..20].to_vec(),
            data[20..].to_vec(),
        ],
    );
    assert_eq!(
        chain.hex_dump(20).to_string(),
        "00000000  00 01 02 03 04 05 06 07  08 09 0a 0b 0c 0d 0e 0f  |................|\n\
         00000010  10 11 12 13                                       |....|\n\
         ... 21 more bytes\n"
    );
    assert_eq!(
        chain.hex_dump(usize::MAX).to_string(),
        reference_hex_dump(&data, usize::MAX)
    );
    assert!(chain
        .hex_dump(41)
        .to_string()
        .ends_with("00000020  20 21 22 23 24 25 26 27  28                       | !\"#$%&'(|\n"));
}

#[test]
fn hex_dump_limit() {
    let data = b"0123456789abcdefXYZ";
    assert_eq!(data.hex_dump(0).to_string(), "... 19 more bytes\n");
    assert_eq!(
        data.hex_dump(3).to_string(),
        "00000000  30 31 32                                          |012|\n... 16 more bytes\n"
    );
    assert_eq!(
        data.hex_dump(19).to_string(),
        data.hex_dump(1000).to_string()
    );
    assert!(!data.hex_dump(19).to_string().contains("more bytes"));
    assert_eq!(b"".hex_dump(0).to_string(), "");
    assert_eq!(b"".hex_dump(16).to_string(), "");
    // Exactly one full line at the limit, then the count.
    assert_eq!(data.hex_dump(16).to_string().lines().count(), 2);
    for limit in 0..=25 {
        assert_eq!(
            data.hex_dump(limit).to_string(),
            reference_hex_dump(data, limit),
            "{limit}"
        );
    }
}

#[test]
fn to_vec_and_copy_prefix_across_segments() {
    let pool = Pool::new();
    let chain = chain_of(&pool, &[b"ab".to_vec(), b"cde".to_vec(), b"f".to_vec()]);
    assert_eq!(chain.to_vec(), b"abcdef");
    assert_eq!(ByteSegments::len(&chain), 6);
    let mut dst = [0u8; 4];
    chain.copy_prefix_to(&mut dst).unwrap();
    assert_eq!(&dst, b"abcd");
    assert_eq!(chain.len(), 6, "copy_prefix_to consumes nothing");
}
