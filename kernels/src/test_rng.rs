//! A deterministic xorshift64 generator for the tests: no dependency, same
//! sequence on every run.

/// xorshift64 (Marsaglia 2003).
pub(crate) struct XorShift(u64);

impl XorShift {
    /// A generator from a nonzero seed.
    pub(crate) fn new(seed: u64) -> Self {
        assert_ne!(seed, 0, "xorshift needs a nonzero seed");
        Self(seed)
    }

    /// The next 64-bit value.
    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// `len` values, uniformly over all of u64 (not only canonical ones).
    pub(crate) fn vec_u64(&mut self, len: usize) -> Vec<u64> {
        (0..len).map(|_| self.next_u64()).collect()
    }

    /// `len` bytes.
    pub(crate) fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}
