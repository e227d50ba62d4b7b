//! The allocation bitmap (Kubernetes' `allocator.AllocationBitmap`): bit `i` set means the
//! `i`th value of a range is taken. Pure: the random choice is the caller's.

/// Which values of a range of `max` values are taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bitmap {
    /// Bit `i % 64` of word `i / 64` is offset `i`; bits at `max` and above are always clear.
    words: Vec<u64>,
    max: usize,
    count: usize,
}

impl Bitmap {
    /// A bitmap of `max` values, none taken.
    pub fn new(max: usize) -> Bitmap {
        Bitmap {
            words: vec![0; max.div_ceil(64)],
            max,
            count: 0,
        }
    }

    /// How many values the range has.
    pub fn max(&self) -> usize {
        self.max
    }

    /// How many are taken.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Whether offset `i` is taken (an offset outside the range never is).
    pub fn has(&self, i: usize) -> bool {
        i < self.max && self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Takes offset `i`; false when it was taken already or is outside the range.
    pub fn set(&mut self, i: usize) -> bool {
        if i >= self.max || self.has(i) {
            return false;
        }
        self.words[i / 64] |= 1 << (i % 64);
        self.count += 1;
        true
    }

    /// Frees offset `i`; false when it was free.
    pub fn clear(&mut self, i: usize) -> bool {
        if !self.has(i) {
            return false;
        }
        self.words[i / 64] &= !(1 << (i % 64));
        self.count -= 1;
        true
    }

    /// The taken offsets, in order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &word)| {
            (0..64)
                .filter(move |b| word & (1 << b) != 0)
                .map(move |b| w * 64 + b)
        })
    }

    /// A free offset, chosen as Kubernetes' `randomScanStrategyWithOffset` does: from a random
    /// start in the upper part `[offset, max)`, scanning up with wrap-around; only when that
    /// part is full, from a random start in the lower part `[0, offset)`. The lower part is
    /// where static values are asked for (KEP-3070, KEP-3668), so that a value a client
    /// chooses is rarely taken by a random one. `random(n)` is a number in `[0, n)`. `None`:
    /// the range is full.
    pub fn next_free(
        &self,
        offset: usize,
        mut random: impl FnMut(usize) -> usize,
    ) -> Option<usize> {
        if self.count >= self.max {
            return None;
        }
        let offset = offset.min(self.max);
        let upper = self.max - offset;
        if upper > 0 {
            let start = random(upper) % upper;
            if let Some(i) = (0..upper)
                .map(|i| offset + (start + i) % upper)
                .find(|&i| !self.has(i))
            {
                return Some(i);
            }
        }
        if offset > 0 {
            let start = random(offset) % offset;
            return (0..offset)
                .map(|i| (start + i) % offset)
                .find(|&i| !self.has(i));
        }
        None
    }

    /// The bitmap as Kubernetes stores it (`big.Int.Bytes()`): big-endian, leading zero bytes
    /// left out, so offset 0 is the lowest bit of the last byte; empty when nothing is taken.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out: Vec<u8> = self
            .words
            .iter()
            .rev()
            .flat_map(|w| w.to_be_bytes())
            .skip_while(|b| *b == 0)
            .collect();
        out.shrink_to_fit();
        out
    }

    /// A bitmap of `max` values from [`Bitmap::to_bytes`]' form. Bits at `max` and above
    /// (which no value of the range has) are dropped, so whatever the input, the bitmap holds
    /// `max` bits.
    pub fn from_bytes(max: usize, bytes: &[u8]) -> Bitmap {
        let mut out = Bitmap::new(max);
        let needed = max.div_ceil(8);
        let bytes = &bytes[bytes.len().saturating_sub(needed)..];
        for (k, byte) in bytes.iter().rev().enumerate() {
            for b in 0..8 {
                if byte & (1 << b) != 0 {
                    out.set(k * 8 + b);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_clear_count_and_refuse_what_is_outside_the_range() {
        let mut b = Bitmap::new(100);
        assert!(b.set(0) && b.set(99) && b.set(64));
        assert!(!b.set(99), "taken already");
        assert!(!b.set(100), "outside the range");
        assert_eq!(b.count(), 3);
        assert_eq!(b.iter().collect::<Vec<_>>(), [0, 64, 99]);
        assert!(b.clear(64));
        assert!(!b.clear(64), "free already");
        assert!(!b.clear(1000));
        assert_eq!(b.count(), 2);
        assert!(b.has(0) && !b.has(64) && !b.has(100));
    }

    #[test]
    fn bytes_are_big_endian_with_offset_zero_in_the_last_byte_as_kubernetes_stores_them() {
        let mut b = Bitmap::new(1 << 20);
        assert_eq!(b.to_bytes(), Vec::<u8>::new());
        b.set(0);
        assert_eq!(b.to_bytes(), [0x01]);
        b.set(9);
        assert_eq!(b.to_bytes(), [0x02, 0x01]);
        b.set(63);
        b.set(64);
        let bytes = b.to_bytes();
        assert_eq!(bytes.len(), 9);
        assert_eq!(
            bytes[0], 0x01,
            "offset 64: the lowest bit of the ninth byte from the end"
        );
        assert_eq!(bytes[1], 0x80, "offset 63");
        assert_eq!(Bitmap::from_bytes(1 << 20, &bytes), b);
    }

    #[test]
    fn bytes_round_trip_for_every_fill() {
        for max in [1, 7, 8, 9, 63, 64, 65, 510, 2768] {
            let mut b = Bitmap::new(max);
            for i in (0..max).step_by(3) {
                b.set(i);
                assert_eq!(
                    Bitmap::from_bytes(max, &b.to_bytes()),
                    b,
                    "max {max}, up to {i}"
                );
            }
        }
    }

    #[test]
    fn bits_beyond_the_range_in_stored_bytes_are_dropped() {
        // 0xff00 0001: bits 0 and 24..31, of a range of 10.
        let b = Bitmap::from_bytes(10, &[0xff, 0x00, 0x00, 0x01]);
        assert_eq!(b.iter().collect::<Vec<_>>(), [0]);
        let b = Bitmap::from_bytes(10, &[0xff, 0x02]);
        assert_eq!(b.iter().collect::<Vec<_>>(), [1, 8, 9]);
        assert_eq!(b.count(), 3);
    }

    #[test]
    fn next_free_prefers_the_upper_part_from_a_random_start_with_wrap_around() {
        let mut b = Bitmap::new(10);
        // Upper part [4, 10): start 3 → offset 7.
        assert_eq!(b.next_free(4, |n| if n == 6 { 3 } else { 0 }), Some(7));
        for i in [7, 8, 9] {
            b.set(i);
        }
        // From 7, wrapping to 4.
        assert_eq!(b.next_free(4, |_| 3), Some(4));
        for i in 4..7 {
            b.set(i);
        }
        // The upper part full: the lower one, from its own random start.
        assert_eq!(b.next_free(4, |n| if n == 4 { 2 } else { 0 }), Some(2));
        for i in 0..4 {
            b.set(i);
        }
        assert_eq!(b.next_free(4, |_| 0), None, "full");
        b.clear(1);
        assert_eq!(b.next_free(4, |_| 0), Some(1));
    }

    #[test]
    fn next_free_without_a_lower_part_or_with_an_offset_past_the_range() {
        let mut b = Bitmap::new(3);
        assert_eq!(b.next_free(0, |_| 2), Some(2));
        assert_eq!(
            b.next_free(10, |_| 1),
            Some(1),
            "all of it is the lower part"
        );
        b.set(0);
        b.set(1);
        b.set(2);
        assert_eq!(b.next_free(0, |_| 0), None);
        assert_eq!(Bitmap::new(0).next_free(0, |_| 0), None);
    }

    #[test]
    fn next_free_finds_every_free_value_whatever_the_random_start() {
        let mut b = Bitmap::new(50);
        let mut seen = Vec::new();
        let mut n = 0usize;
        while let Some(i) = b.next_free(16, |m| {
            n = n.wrapping_mul(31).wrapping_add(7);
            n % m
        }) {
            assert!(b.set(i));
            seen.push(i);
        }
        assert_eq!(seen.len(), 50);
        assert!(
            seen[..34].iter().all(|&i| i >= 16),
            "the upper part is used up first: {seen:?}"
        );
    }
}
