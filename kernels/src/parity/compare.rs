//! Byte-for-byte comparison of parity results, and the first difference named the way a
//! reviewer needs it: case, launch and entry point, buffer, element index, both values and
//! who computed each.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::cpu::Buffers;
use super::spec::{Element, Program};

/// The first element where two results differ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Difference {
    /// The case.
    pub case: String,
    /// The launch after which the buffers were compared (index in the case's launches);
    /// `None` for the end-of-case comparison with the whole-program reference.
    pub launch: Option<usize>,
    /// The entry point of that launch, or `reference <cpu step>`.
    pub entry: String,
    /// The buffer.
    pub buffer: String,
    /// Element index in the buffer (the first element past the shorter one when the
    /// lengths differ).
    pub index: u64,
    /// The value expected.
    pub expected: u64,
    /// Who computed `expected` (`cpu`, `cpu reference ntt::forward`).
    pub expected_by: String,
    /// The value found.
    pub actual: u64,
    /// Who computed `actual` (`nvrtc sm_90`, `aot sm_90a`).
    pub actual_by: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = match self.launch {
            Some(i) => format!("after launch {i} ({})", self.entry),
            None => format!("at the end ({})", self.entry),
        };
        write!(
            f,
            "case `{}` {at}: buffer `{}` element {}: {} has {:#x} ({}), {} has {:#x} ({})",
            self.case,
            self.buffer,
            self.index,
            self.expected_by,
            self.expected,
            self.expected,
            self.actual_by,
            self.actual,
            self.actual
        )
    }
}

/// The first element index where `a` and `b` differ, with both values (0 for a missing
/// element when the lengths differ).
pub fn first_difference(element: Element, a: &[u8], b: &[u8]) -> Option<(u64, u64, u64)> {
    let s = element.size() as usize;
    let n = a.len().min(b.len()) / s;
    // Compare in chunks first (fast path), then find the element.
    let at = a[..n * s]
        .chunks(4096)
        .zip(b[..n * s].chunks(4096))
        .position(|(x, y)| x != y);
    if let Some(chunk) = at {
        let start = chunk * 4096 / s;
        for i in start..n {
            let (x, y) = (element.get(a, i), element.get(b, i));
            if x != y {
                return Some((i as u64, x, y));
            }
        }
    }
    if a.len() != b.len() {
        let get = |v: &[u8]| {
            if v.len() >= (n + 1) * s {
                element.get(v, n)
            } else {
                0
            }
        };
        return Some((n as u64, get(a), get(b)));
    }
    None
}

/// Compares `actual` with `expected` over `names` (in the program's buffer order) after
/// launch `launch` (`None`: the final comparison, entry `entry`); the first difference.
pub fn compare(
    p: &Program,
    launch: Option<usize>,
    names: &[&str],
    expected: (&str, &Buffers),
    actual: (&str, &Buffers),
) -> Option<Difference> {
    let entry = match launch {
        Some(i) => p.launches[i].entry.clone(),
        None => format!("reference {}", p.reference),
    };
    for b in p
        .buffers
        .iter()
        .filter(|b| names.contains(&b.name.as_str()))
    {
        let e = expected.1.get(&b.name).map_or(&[][..], Vec::as_slice);
        let a = actual.1.get(&b.name).map_or(&[][..], Vec::as_slice);
        if let Some((index, x, y)) = first_difference(b.element, e, a) {
            return Some(Difference {
                case: p.case.clone(),
                launch,
                entry,
                buffer: b.name.clone(),
                index,
                expected: x,
                expected_by: expected.0.to_string(),
                actual: y,
                actual_by: actual.0.to_string(),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parity::cpu;
    use crate::parity::spec::ArgValue;
    use crate::parity::spec::tests::spec;
    use std::collections::BTreeMap;

    #[test]
    fn the_first_difference_is_found_in_every_position() {
        let a: Vec<u8> = (0..1000u64).flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(first_difference(Element::U64, &a, &a), None);
        for i in [0usize, 1, 511, 512, 513, 999] {
            let mut b = a.clone();
            b[i * 8 + 3] ^= 0x10;
            assert_eq!(
                first_difference(Element::U64, &a, &b),
                Some((i as u64, i as u64, i as u64 ^ 0x1000_0000)),
                "{i}"
            );
        }
        assert_eq!(
            first_difference(Element::U64, &a, &a[..80]),
            Some((10, 10, 0))
        );
        assert_eq!(
            first_difference(Element::U8, &[1, 2, 3], &[1, 2, 4]),
            Some((2, 3, 4))
        );
    }

    /// Issue 7: a deliberately altered kernel stops parity at the first differing output,
    /// named by entry point, buffer, element and both values. Here the "GPU" is the CPU
    /// program with one altered step (a twiddle index off by one in `ntt_stages`): the
    /// comparison logic the runner uses on the GPU host, exercised in CI.
    #[test]
    fn issue_7_an_altered_kernel_is_named_at_its_first_differing_output() {
        let geometry = BTreeMap::from([("block".to_string(), 64), ("tile_log".to_string(), 2)]);
        let p = spec().programs(&geometry).unwrap().remove(0);
        let inputs = cpu::inputs(&p).unwrap();
        // The reference run, keeping the buffers after every launch.
        let mut expected = Vec::new();
        cpu::run::<String>(&p, inputs.clone(), |_, b| {
            expected.push(b.clone());
            Ok(())
        })
        .unwrap();
        // The altered run: the second ntt_stages launch uses the wrong stage offset.
        let mut altered = p.clone();
        let ArgValue::U32(s0) = altered.launches[2].args[3] else {
            panic!("s0 is a u32")
        };
        altered.launches[2].args[3] = ArgValue::U32(s0 + 1);
        let mut found = None;
        let _ = cpu::run::<String>(&altered, inputs, |i, b| {
            if let Some(d) = compare(
                &p,
                Some(i),
                &["data", "twiddles"],
                ("cpu", &expected[i]),
                ("nvrtc sm_90", b),
            ) {
                found = Some(d);
                return Err("stop".into());
            }
            Ok(())
        });
        let d = found.expect("the altered launch differs");
        assert_eq!(
            (d.launch, d.entry.as_str(), d.buffer.as_str()),
            (Some(2), "ntt_stages", "data")
        );
        let e = &expected[2]["data"];
        assert_eq!(d.expected, Element::U64.get(e, d.index as usize));
        assert_ne!(d.expected, d.actual);
        let text = d.to_string();
        assert!(
            text.contains("after launch 2 (ntt_stages): buffer `data` element")
                && text.contains("cpu has")
                && text.contains("nvrtc sm_90 has"),
            "{text}"
        );
    }
}
