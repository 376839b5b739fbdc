//! Size classes: the settled configuration of a pool (`Config`) and the class arithmetic every
//! other file of the pool shares (the class of a request, the size of a class, the slot of a class
//! in a thread's magazine table). The lowest file of the module: it names none of the others.

use crate::block::UNPOOLED;

/// Settled configuration of a pool (see `PoolOptions` for the meaning of each field).
///
/// Classes: the powers of two from `1 << min_shift` to `1 << max_shift` and, between each two,
/// `(1 << SUB_CLASS_BITS) - 1` evenly spaced sizes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub(crate) min_shift: u32,
    pub(crate) max_shift: u32,
    /// `1 << min_shift`, `1 << max_shift` and `(63 - min_shift) * 4 - 3`: worked out once
    /// (`Config::new`) so `class_of` on the rent path does not.
    min_size: usize,
    max_size: usize,
    index_top: usize,
    /// The class of every request up to `table_max` bytes, one entry per `1 << TABLE_SHIFT`
    /// bytes: `class_of` reads it instead of computing (see there).
    table: [u8; CLASS_TABLE_LEN],
    table_max: usize,
    pub(crate) cache_depth: usize,
    pub(crate) magazine_bytes: usize,
    pub(crate) max_retained_bytes: usize,
    pub(crate) max_thread_cache_bytes: usize,
    pub(crate) clear_on_return: bool,
    /// Blocks of at least this many bytes (header included) are mapped on their own
    /// (`block::system`); `usize::MAX`: none.
    pub(crate) map_from: usize,
}

/// Size classes per doubling, as a power of two: 2 bits, four classes between one power of two and
/// the next (1, 1.25, 1.5 and 1.75 times it). A request gets a block at most 25% larger than
/// itself, so at most 20% of a block is left unused (a power-of-two class wastes up to half).
pub(crate) const SUB_CLASS_BITS: u32 = 2;

/// The smallest class size the pool accepts: the class arithmetic needs `SUB_CLASS_BITS` bits
/// below the top one, and smaller blocks are not worth a header (16 B is also the payload
/// alignment).
pub(crate) const MIN_CLASS_SIZE: usize = 16;

/// The class lookup table has one entry per 4 bytes of request size, up to 4 KiB (1 KiB per pool):
/// every class size is a multiple of a quarter of the smallest class, `(4 + j) << (k - 2)` with
/// k >= min_shift >= 4, so all requests in one 4-byte step share a class whatever the settings. A
/// fixed step (not one per pool) lets the compiler fold the index of a constant size.
const TABLE_SHIFT: u32 = 2;
const CLASS_TABLE_LEN: usize = 1024;

impl Config {
    pub(crate) fn new(
        min_shift: u32,
        max_shift: u32,
        cache_depth: usize,
        magazine_bytes: usize,
        max_retained_bytes: usize,
        max_thread_cache_bytes: usize,
        clear_on_return: bool,
    ) -> Config {
        // The builder clamps the shifts to 4..=30: at most 105 classes, whose numbers fit the
        // block header's u8 below `UNPOOLED`.
        assert!(
            (MIN_CLASS_SIZE.trailing_zeros()..usize::BITS).contains(&min_shift)
                && (min_shift..usize::BITS).contains(&max_shift)
                && ((max_shift - min_shift) << SUB_CLASS_BITS) < u32::from(crate::block::UNPOOLED),
            "class shifts {min_shift}..={max_shift}"
        );
        let mut config = Config {
            min_shift,
            max_shift,
            min_size: 1 << min_shift,
            max_size: 1 << max_shift,
            index_top: (((usize::BITS - 1 - min_shift) << SUB_CLASS_BITS) + 1
                - (1 << SUB_CLASS_BITS)) as usize,
            table: [0; CLASS_TABLE_LEN],
            table_max: 0,
            cache_depth,
            magazine_bytes,
            max_retained_bytes,
            max_thread_cache_bytes,
            clear_on_return,
            map_from: usize::MAX,
        };
        let table_max = (CLASS_TABLE_LEN << TABLE_SHIFT).min(config.max_size);
        for index in 0..CLASS_TABLE_LEN {
            // The last request of this step; all of the step's requests have its class.
            let n = ((index + 1) << TABLE_SHIFT).min(table_max);
            let class = config.compute_class(n).expect("at most the largest class");
            config.table[index] = u8::try_from(class).expect("class numbers fit a u8");
        }
        config.table_max = table_max;
        config
    }

    pub(crate) fn classes(&self) -> usize {
        (((self.max_shift - self.min_shift) << SUB_CLASS_BITS) + 1) as usize
    }

    /// The class serving a request of `n` bytes (n >= 1), or `None` above the largest class.
    ///
    /// Up to `table_max` (4 KiB, or the largest class if smaller) a table lookup: a compare, a
    /// shift and a byte load (just the compare and the load for a constant size), where the
    /// arithmetic below takes about 17 instructions on the rent path. Larger requests are
    /// computed.
    #[inline]
    pub(crate) fn class_of(&self, n: usize) -> Option<usize> {
        debug_assert!(n >= 1, "class_of(0)");
        if n <= self.table_max {
            // n - 1 < CLASS_TABLE_LEN << TABLE_SHIFT, so the index is in range; the mask only
            // tells the compiler so (no bounds check).
            let index = (n.wrapping_sub(1) >> TABLE_SHIFT) & (CLASS_TABLE_LEN - 1);
            return Some(usize::from(self.table[index]));
        }
        self.compute_class(n)
    }

    /// `class_of` by arithmetic, for any size.
    ///
    /// Class sizes are `(4 + j) << (k - 2)` for `j` in 0..4, numbered `4k + j` from 0 (then less
    /// the smallest class's number). With `m = n - 1` and `e` its top bit, `m >> (e - 2)` is in
    /// 4..8 and says which quarter of `[2^e, 2^(e+1))` `m` lies in; the class just above is number
    /// `4e + (m >> (e - 2)) - 3`. A power of two `2^k` maps to `4k`, one byte more to `4k + 1`.
    /// No loop, no table: a leading-zero count and a few shifts and adds.
    #[inline]
    fn compute_class(&self, n: usize) -> Option<usize> {
        if n > self.max_size {
            return None;
        }
        // Requests up to the smallest class get it; min_shift >= 4, so m >= 15 here.
        let m = n.max(self.min_size) - 1;
        // `| 1` changes neither the top bit nor the two below it (m >= 15), and tells the
        // compiler m != 0, so the count needs no zero check.
        let zeros = (m | 1).leading_zeros();
        // m shifted up to bit 63: its top three bits, 0b1qq, are 4 + the quarter.
        let quarter = (m << zeros) >> (usize::BITS - 1 - SUB_CLASS_BITS);
        // The class number 4e + quarter - 3 with e = 63 - zeros, less the smallest class's.
        Some(quarter + self.index_top - ((zeros as usize) << SUB_CLASS_BITS))
    }

    #[inline]
    pub(crate) fn class_size(&self, class: usize) -> usize {
        let index = class + ((self.min_shift as usize) << SUB_CLASS_BITS);
        let (shift, step) = (index >> SUB_CLASS_BITS, index & ((1 << SUB_CLASS_BITS) - 1));
        ((1 << SUB_CLASS_BITS) + step) << (shift - SUB_CLASS_BITS as usize)
    }

    /// Blocks per thread-cache magazine for a class: as many as fit in `magazine_bytes`, at least
    /// one, at most `cache_depth`.
    pub(crate) fn magazine_len(&self, class: usize) -> usize {
        (self.magazine_bytes / self.class_size(class)).clamp(1, self.cache_depth.max(1))
    }
}

/// Entries of a cache's magazine table: a fixed number, more than any configuration's classes
/// (at most 105), so that the fast paths index it with a mask instead of a bounds check. The last
/// entry is never a class: an unpooled block's class, `UNPOOLED`, masks to it, and its capacity
/// of 0 sends the block to the slow path.
pub(crate) const CLASS_SLOTS: usize = 128;

/// A class number (or a block's `UNPOOLED`) as an index into the magazine table.
#[inline(always)]
pub(crate) const fn class_slot(class: usize) -> usize {
    class & (CLASS_SLOTS - 1)
}

const _: () = assert!(class_slot(UNPOOLED as usize) == CLASS_SLOTS - 1);

#[cfg(test)]
mod tests {
    use super::*;

    fn config(min_shift: u32, max_shift: u32) -> Config {
        Config::new(min_shift, max_shift, 32, 256 * 1024, 0, 4 << 20, false)
    }

    /// `class_of` against the definition: the smallest class size at least `n`, by a scan.
    #[test]
    fn class_of_is_the_smallest_class_that_fits() {
        for (min_shift, max_shift) in [(4, 4), (4, 12), (6, 20), (10, 11)] {
            let c = config(min_shift, max_shift);
            let sizes: Vec<usize> = (0..c.classes()).map(|k| c.class_size(k)).collect();
            assert_eq!(sizes[0], 1 << min_shift);
            assert_eq!(*sizes.last().unwrap(), 1 << max_shift);
            assert!(sizes.windows(2).all(|w| w[0] < w[1]), "{sizes:?}");
            let mut probes: Vec<usize> = (1..5000).collect();
            for &s in &sizes {
                probes.extend([s - 1, s, s + 1]);
            }
            for n in probes {
                let expected = sizes.iter().position(|&s| s >= n);
                assert_eq!(
                    c.class_of(n),
                    expected,
                    "n = {n}, classes {min_shift}..={max_shift}"
                );
                if let Some(class) = expected {
                    // At most 25% more than asked once above the smallest class.
                    assert!(
                        n <= 1 << min_shift || sizes[class] * 4 <= n * 5 + 3,
                        "n = {n}"
                    );
                }
            }
        }
        let c = config(6, 20);
        assert_eq!(c.classes(), 57);
        let first: Vec<usize> = (0..6).map(|k| c.class_size(k)).collect();
        assert_eq!(first, [64, 80, 96, 112, 128, 160]);
        assert_eq!(c.class_of(usize::MAX), None);
        assert_eq!(c.class_of((1 << 20) + 1), None);
    }
}
