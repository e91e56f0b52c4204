//! The CUDA attribute lists of a cubin (`.nv.info`, `.nv.info.<fn>`, `.nv.compat`): their
//! encoding, decoded with checked arithmetic, and a kernel's parameter layout and launch
//! bounds read from them.

use crate::identity::{LaunchAbi, Param};

/// `.nv.compat` attribute that is 1 in arch-specific (`sm_90a`) builds.
pub(super) const COMPAT_ARCH_SPECIFIC: u8 = 0x09;
/// Per-kernel `.nv.info.<fn>`: `__launch_bounds__` block (x, y, z).
pub(super) const EIATTR_MAX_THREADS: u8 = 0x05;
/// Per-kernel: the parameter constant bank (symbol, offset u16, size u16).
pub(super) const EIATTR_PARAM_CBANK: u8 = 0x0a;
/// Global `.nv.info`: (symbol, stack frame bytes per thread).
pub(super) const EIATTR_FRAME_SIZE: u8 = 0x11;
/// Global `.nv.info`: (symbol, stack bytes per thread the kernel needs: its own frame plus
/// the deepest chain of device functions it calls, as ptxas or, for a device-linked module,
/// nvlink computed it over the call graph). What cuobjdump `-res-usage` prints as `STACK`.
pub(super) const EIATTR_MIN_STACK_SIZE: u8 = 0x12;
/// [`EIATTR_MIN_STACK_SIZE`]'s value when recursion or an indirect call leaves the stack
/// unknown (nvlink then warns "Stack size for entry function ... cannot be statically
/// determined").
pub(super) const STACK_UNKNOWN: u32 = u32::MAX;
/// Per-kernel: one parameter (index, ordinal u16, offset u16, flags with the size in
/// bits 18-31: at most 16,383 bytes).
pub(super) const EIATTR_KPARAM_INFO: u8 = 0x17;
/// Per-kernel: one parameter, the form nvcc uses once a kernel's parameters pass 4 KiB
/// (CUDA 12.1+ allows 32,764 bytes): index u32, ordinal u16, offset u16, then a word whose
/// low 24 bits are the size ([`KPARAM_V2_SIZE`]) and whose top byte is the parameter's kind
/// (0 up to sm_90; from sm_120 on, 5 for a pointer, as V1's bits 8-11 say).
pub(super) const EIATTR_KPARAM_INFO_V2: u8 = 0x45;
/// The size bits of [`EIATTR_KPARAM_INFO_V2`]'s last word.
pub(super) const KPARAM_V2_SIZE: u32 = 0x00ff_ffff;
/// Global `.nv.info`: (symbol, registers per thread).
pub(super) const EIATTR_REGCOUNT: u8 = 0x2f;

/// Fills the parameter layout and launch bounds from a kernel's `.nv.info.<fn>` list.
pub(super) fn kernel_attrs(
    name: &str,
    list: Vec<Attr<'_>>,
    abi: &mut LaunchAbi,
) -> Result<(), String> {
    let bad = |what: &str| format!("kernel {name}: malformed {what}");
    let mut params: Vec<(u16, Param)> = Vec::new();
    for a in list {
        match a.attr {
            EIATTR_KPARAM_INFO => {
                let v = a.value;
                let ordinal = le16(v, 4).ok_or_else(|| bad("EIATTR_KPARAM_INFO"))?;
                let offset = le16(v, 6).ok_or_else(|| bad("EIATTR_KPARAM_INFO"))?;
                let flags = le32(v, 8).ok_or_else(|| bad("EIATTR_KPARAM_INFO"))?;
                params.push((
                    ordinal,
                    Param {
                        offset: u32::from(offset),
                        size: (flags >> 18) & 0x3fff,
                    },
                ));
            }
            EIATTR_KPARAM_INFO_V2 => {
                let v = a.value;
                let ordinal = le16(v, 4).ok_or_else(|| bad("EIATTR_KPARAM_INFO_V2"))?;
                let offset = le16(v, 6).ok_or_else(|| bad("EIATTR_KPARAM_INFO_V2"))?;
                let size = le32(v, 8).ok_or_else(|| bad("EIATTR_KPARAM_INFO_V2"))? & KPARAM_V2_SIZE;
                params.push((
                    ordinal,
                    Param {
                        offset: u32::from(offset),
                        size,
                    },
                ));
            }
            EIATTR_PARAM_CBANK => {
                let word = le32(a.value, 4).ok_or_else(|| bad("EIATTR_PARAM_CBANK"))?;
                abi.param_bytes = word >> 16;
            }
            EIATTR_MAX_THREADS => {
                let dims = [le32(a.value, 0), le32(a.value, 4), le32(a.value, 8)];
                let [Some(x), Some(y), Some(z)] = dims else {
                    return Err(bad("EIATTR_MAX_THREADS"));
                };
                abi.max_threads = Some(
                    x.checked_mul(y)
                        .and_then(|n| n.checked_mul(z))
                        .ok_or_else(|| bad("EIATTR_MAX_THREADS"))?,
                );
            }
            _ => {}
        }
    }
    // Attributes list parameters last to first; the ABI is in declaration order.
    params.sort_by_key(|(ordinal, _)| *ordinal);
    for (want, (ordinal, _)) in params.iter().enumerate() {
        if usize::from(*ordinal) != want {
            return Err(format!(
                "kernel {name}: parameter ordinals are not 0..{} (found {ordinal} at {want})",
                params.len()
            ));
        }
    }
    abi.params = params.into_iter().map(|(_, p)| p).collect();
    // A layout that does not account for the parameter buffer is never signed: a buffer
    // with no parameter read (an attribute form this reader does not know), or one that
    // a parameter overruns, is an error naming the kernel.
    if abi.param_bytes > 0 && abi.params.is_empty() {
        return Err(format!(
            "kernel {name}: {} bytes of parameters but no parameter layout this reader understands (EIATTR_KPARAM_INFO or _V2): refusing to record an empty layout",
            abi.param_bytes
        ));
    }
    if let Some(p) = abi.params.iter().find(|p| {
        abi.param_bytes > 0 && u64::from(p.offset) + u64::from(p.size) > u64::from(abi.param_bytes)
    }) {
        return Err(format!(
            "kernel {name}: parameter at {}:{} overruns the {}-byte parameter buffer",
            p.offset, p.size, abi.param_bytes
        ));
    }
    Ok(())
}

/// One `.nv.info`-style attribute.
pub(super) struct Attr<'a> {
    pub(super) attr: u8,
    pub(super) value: &'a [u8],
}

/// Decodes an attribute list: `fmt u8, attr u8`, then a 2-byte value (formats 1-3) or a
/// u16 size and that many bytes (format 4).
pub(super) fn attrs(data: &[u8]) -> Result<Vec<Attr<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = data;
    while rest.len() >= 4 {
        let (fmt, attr) = (rest[0], rest[1]);
        if fmt == 4 {
            let n = usize::from(u16::from_le_bytes([rest[2], rest[3]]));
            let value = rest.get(4..4 + n).ok_or_else(|| {
                format!(
                    "attribute {attr:#04x}: {n} value bytes, {} left",
                    rest.len() - 4
                )
            })?;
            out.push(Attr { attr, value });
            rest = &rest[4 + n..];
        } else {
            out.push(Attr {
                attr,
                value: &rest[2..4],
            });
            rest = &rest[4..];
        }
    }
    Ok(out)
}

/// The little-endian u16 at `at`, if `b` holds it.
fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

/// The little-endian u32 at `at`, if `b` holds it.
pub(super) fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 19, item 5: a parameter buffer whose layout this reader cannot read (no
    /// known parameter attribute), or a parameter past the buffer, is an error naming the
    /// kernel: never an empty or wrong layout to sign. The second attribute form (nvcc's
    /// past 4 KiB of parameters) is read.
    #[test]
    fn issue_19_an_unreadable_parameter_layout_is_an_error_naming_the_kernel() {
        let cbank = |bytes: u32| {
            let mut v = vec![0u8; 4];
            v.extend_from_slice(&(bytes << 16).to_le_bytes());
            v
        };
        let v2 = |ordinal: u16, offset: u16, size: u32| {
            let mut v = vec![0u8; 4];
            v.extend_from_slice(&ordinal.to_le_bytes());
            v.extend_from_slice(&offset.to_le_bytes());
            v.extend_from_slice(&size.to_le_bytes());
            v
        };
        let run = |values: &[(u8, Vec<u8>)]| {
            let list = values
                .iter()
                .map(|(attr, value)| Attr { attr: *attr, value })
                .collect();
            let mut abi = LaunchAbi::default();
            kernel_attrs("big_kernel", list, &mut abi).map(|()| abi)
        };
        let err = run(&[(EIATTR_PARAM_CBANK, cbank(5532))]).unwrap_err();
        assert!(
            err.contains("big_kernel") && err.contains("5532 bytes of parameters"),
            "{err}"
        );
        let err = run(&[
            (EIATTR_PARAM_CBANK, cbank(16)),
            (EIATTR_KPARAM_INFO_V2, v2(0, 8, 16)),
        ])
        .unwrap_err();
        assert!(err.contains("overruns the 16-byte"), "{err}");
        let abi = run(&[
            (EIATTR_KPARAM_INFO_V2, v2(1, 32000, 8)),
            (EIATTR_KPARAM_INFO_V2, v2(0, 0, 32000)),
            (EIATTR_PARAM_CBANK, cbank(32008)),
        ])
        .unwrap();
        assert_eq!(abi.describe_params(), "0:32000 32000:8");
        // sm_120 marks a pointer in the top byte of the size word (nvcc 13.0 writes
        // 0x05000008 for `uint32_t* out`): the size is the low 24 bits.
        let abi = run(&[
            (EIATTR_KPARAM_INFO_V2, v2(1, 32000, 0x0500_0008)),
            (EIATTR_KPARAM_INFO_V2, v2(0, 0, 32000)),
            (EIATTR_PARAM_CBANK, cbank(32008)),
        ])
        .unwrap();
        assert_eq!(abi.describe_params(), "0:32000 32000:8");
        // No parameters at all is an empty layout that is true.
        assert!(
            run(&[(EIATTR_PARAM_CBANK, cbank(0))])
                .unwrap()
                .params
                .is_empty()
        );
    }

    #[test]
    fn attribute_lists_are_bounds_checked() {
        assert!(attrs(&[4, 0x17, 0xff, 0xff, 1, 2]).is_err());
        let ok = attrs(&[3, 0x19, 0x10, 0x00, 4, 0x0a, 2, 0, 9, 9]).unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].value, &[9, 9]);
    }
}
