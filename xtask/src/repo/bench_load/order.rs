//! The order in which bench-load runs its interleaved arms: a Williams design, so that every
//! arm runs in every position and right after every other arm equally often.
//!
//! A plain rotation (0 1 2 … then 1 2 … 0) puts every arm in every position, but each arm
//! always follows the same neighbour. The driver keeps state from one load to the next (the
//! previous arm's unloads, what its heap and caches hold), so a fixed neighbour is a bias
//! that no number of repetitions averages out: it is why two identical arms could differ
//! by a few per cent. Effects that reach further back (the arm two before) are not
//! balanced by the design itself, so each cycle of it runs under a fresh random relabelling
//! of the arms (fixed seed): the balance of neighbours holds in every cycle, and what is
//! left is spread at random instead of always falling on the same arms.

/// How bench-load orders its interleaved arms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Order {
    /// [`williams`]: every arm right after every other equally often.
    Balanced,
    /// Repetition `i` runs arms `i, i+1, …` (mod n): each arm always after the same one.
    Rotation,
}

impl Order {
    /// The sequences for `n` arms; repetition `i` runs `sequences[i % len]`.
    pub fn sequences(self, n: usize) -> Vec<Vec<usize>> {
        match self {
            Order::Balanced => williams(n),
            Order::Rotation => (0..n)
                .map(|i| (0..n).map(|k| (k + i) % n).collect())
                .collect(),
        }
    }

    /// The arms of repetition `rep` (of `n` arms), in the order they run. Balanced: the
    /// Williams row `rep % len`, its arms relabelled by a random permutation drawn for the
    /// cycle `rep / len` (seeded, so a run can be repeated).
    pub fn run(self, n: usize, rep: usize) -> Vec<usize> {
        let rows = self.sequences(n);
        let row = &rows[rep % rows.len()];
        match self {
            Order::Rotation => row.clone(),
            Order::Balanced => {
                let cycle = (rep / rows.len()) as u64;
                let mut rng =
                    fastrand::Rng::with_seed(0x0dde_c0de ^ cycle.wrapping_mul(0x9e37_79b9));
                let mut label: Vec<usize> = (0..n).collect();
                rng.shuffle(&mut label);
                row.iter().map(|&a| label[a]).collect()
            }
        }
    }

    /// Its name in the CSV header.
    pub fn name(self) -> &'static str {
        match self {
            Order::Balanced => "balanced",
            Order::Rotation => "rotation",
        }
    }
}

/// The sequences of a Williams design for `n` arms: `n` of them for even `n`, `2n` for odd.
/// Repetition `i` runs `sequences[i % len]`. Over one full cycle every arm is in each
/// position equally often, and every ordered pair (a right before b, a ≠ b) occurs equally
/// often (once for even `n`, twice for odd).
pub fn williams(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return Vec::new();
    }
    // First row: 0, 1, n-1, 2, n-2, … (alternately up from the start and down from the end).
    let mut first = Vec::with_capacity(n);
    first.push(0);
    let (mut low, mut high) = (1, n - 1);
    for j in 1..n {
        if j % 2 == 1 {
            first.push(low);
            low += 1;
        } else {
            first.push(high);
            high -= 1;
        }
    }
    let mut rows: Vec<Vec<usize>> = (0..n)
        .map(|k| first.iter().map(|a| (a + k) % n).collect())
        .collect();
    if n % 2 == 1 {
        let reversed: Vec<Vec<usize>> = rows
            .iter()
            .map(|r| r.iter().rev().copied().collect())
            .collect();
        rows.extend(reversed);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts that `rows` (one cycle, `n` arms) are permutations with every arm equally
    /// often in each position and right after every other arm.
    fn assert_balanced(rows: &[Vec<usize>], n: usize) {
        let per_cell = rows.len() / n;
        let mut position = vec![vec![0; n]; n];
        let mut follows = vec![vec![0; n]; n];
        for r in rows {
            let mut sorted = r.clone();
            sorted.sort();
            assert_eq!(
                sorted,
                (0..n).collect::<Vec<_>>(),
                "{r:?} is not a permutation"
            );
            for (p, &a) in r.iter().enumerate() {
                position[a][p] += 1;
            }
            for w in r.windows(2) {
                follows[w[0]][w[1]] += 1;
            }
        }
        for (a, (pos, fol)) in position.iter().zip(&follows).enumerate() {
            assert!(pos.iter().all(|&c| c == per_cell), "n={n}: {position:?}");
            for (b, &count) in fol.iter().enumerate() {
                let want = if a == b { 0 } else { per_cell };
                assert_eq!(count, want, "n={n}: {a} before {b}: {follows:?}");
            }
        }
    }

    fn check(n: usize) {
        let rows = williams(n);
        assert_eq!(rows.len(), if n.is_multiple_of(2) { n } else { 2 * n });
        assert_balanced(&rows, n);
    }

    #[test]
    fn every_arm_follows_every_other_equally_often() {
        for n in 1..=9 {
            check(n);
        }
    }

    /// Every relabelled cycle keeps the balance, and the cycles differ.
    #[test]
    fn each_relabelled_cycle_is_still_balanced() {
        for n in [2, 4, 6, 7] {
            let len = williams(n).len();
            let mut cycles = Vec::new();
            for cycle in 0..5 {
                let rows: Vec<Vec<usize>> = (0..len)
                    .map(|k| Order::Balanced.run(n, cycle * len + k))
                    .collect();
                assert_balanced(&rows, n);
                cycles.push(rows);
            }
            if n > 2 {
                assert!(
                    cycles.windows(2).any(|w| w[0] != w[1]),
                    "n={n}: never relabelled"
                );
            }
            assert_eq!(Order::Balanced.run(n, 3), Order::Balanced.run(n, 3));
        }
    }

    /// The rotation it replaces fails the same check: arm 1 always followed arm 0.
    #[test]
    fn a_plain_rotation_is_not_balanced() {
        let n = 6;
        let rotation: Vec<Vec<usize>> = (0..n)
            .map(|i| (0..n).map(|k| (k + i) % n).collect())
            .collect();
        let after_0 = rotation
            .iter()
            .flat_map(|r| r.windows(2))
            .filter(|w| w[0] == 0)
            .map(|w| w[1])
            .collect::<Vec<_>>();
        assert!(after_0.iter().all(|&b| b == 1), "{after_0:?}");
        assert_eq!(williams(6)[0], vec![0, 1, 5, 2, 4, 3]);
    }
}
