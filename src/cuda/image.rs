//! Checks on image bytes before the driver sees them.
//!
//! The driver's load calls take a pointer without a length: for a cubin it trusts the ELF's
//! own offsets, for PTX it reads up to the first NUL. So the bytes are checked here to be a
//! complete CUDA ELF, or NUL-free PTX text that gets exactly one terminating NUL.

use super::CudaError;

const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// First bytes of a fatbin (magic 0xBA55ED50, little-endian).
const FATBIN_MAGIC: &[u8; 4] = &[0x50, 0xed, 0x55, 0xba];

/// PTX text as the driver wants it: a copy ending in exactly one NUL.
///
/// Refuses empty input, NUL bytes before the end (the driver would silently ignore what
/// follows them, so it would not compile the bytes that were verified) and binary images.
pub fn ptx_with_nul(ptx: &[u8]) -> Result<Box<[u8]>, CudaError> {
    let bad = |reason: String| CudaError::BadImage {
        what: "PTX",
        reason,
    };
    let text = ptx.strip_suffix(&[0]).unwrap_or(ptx);
    if text.is_empty() {
        return Err(bad("empty".into()));
    }
    if text.starts_with(ELF_MAGIC) || text.starts_with(FATBIN_MAGIC) {
        return Err(bad(
            "a binary image (ELF or fatbin), not PTX text; cubins go through load_cubin".into(),
        ));
    }
    if let Some(at) = text.iter().position(|&b| b == 0) {
        return Err(bad(format!(
            "NUL byte at offset {at} of {} bytes",
            ptx.len()
        )));
    }
    let mut out = Vec::with_capacity(text.len() + 1);
    out.extend_from_slice(text);
    out.push(0);
    Ok(out.into_boxed_slice())
}

/// Checks that `image` is a complete little-endian ELF64 for CUDA: every header table,
/// section (except `SHT_NOBITS`) and segment lies inside the buffer. The same reader as
/// verification and the build ([`crate::elf::check_structure`]).
///
/// The driver takes a pointer without a length and trusts the ELF's own offsets, so this is
/// what keeps a truncated or damaged blob from making it read past the allocation.
pub fn check_cubin(image: &[u8]) -> Result<(), CudaError> {
    crate::elf::check_structure(image).map_err(|reason| CudaError::BadImage {
        what: "cubin",
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // ---- PTX NUL termination -------------------------------------------------------------

    #[test]
    fn ptx_gets_exactly_one_trailing_nul() {
        assert_eq!(&*ptx_with_nul(b".version 7.5").unwrap(), b".version 7.5\0");
        assert_eq!(
            &*ptx_with_nul(b".version 7.5\0").unwrap(),
            b".version 7.5\0",
            "present NUL kept, not doubled"
        );
    }

    #[test]
    fn ptx_with_inner_nul_is_refused_with_its_offset() {
        let err = ptx_with_nul(b".version 7.5\0.entry evil").unwrap_err();
        assert!(err.is_invalid_image());
        assert!(err.to_string().contains("offset 12"), "{err}");
        assert!(
            ptx_with_nul(b"abc\0\0").is_err(),
            "two trailing NULs: the first is inside"
        );
    }

    #[test]
    fn empty_or_binary_ptx_is_refused() {
        assert!(ptx_with_nul(b"").is_err());
        assert!(ptx_with_nul(b"\0").is_err());
        let err = ptx_with_nul(&minimal_cubin()).unwrap_err();
        assert!(err.to_string().contains("load_cubin"), "{err}");
        assert!(ptx_with_nul(&[0x50, 0xed, 0x55, 0xba, 1, 2]).is_err());
    }

    // ---- cubin structure -------------------------------------------------------------------

    /// A minimal valid CUDA ELF: header, one PROGBITS section with 8 bytes of data, a NOBITS
    /// section pointing nowhere, one segment, then the tables.
    fn minimal_cubin() -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(ELF_MAGIC);
        b[4] = 2; // ELFCLASS64
        b[5] = 1; // little-endian
        b[6] = 1;
        b[18..20].copy_from_slice(&crate::elf::EM_CUDA.to_le_bytes());
        b[52..54].copy_from_slice(&64u16.to_le_bytes());
        // section data at 64..72: also the section name table (every name is "")
        b.extend_from_slice(&[0; 8]);
        // section headers at 72: [NULL, PROGBITS(64, 8), NOBITS(huge offset)]
        let shoff = b.len() as u64;
        let mut sh = |kind: u32, offset: u64, size: u64| {
            let mut e = [0u8; 64];
            e[4..8].copy_from_slice(&kind.to_le_bytes());
            e[24..32].copy_from_slice(&offset.to_le_bytes());
            e[32..40].copy_from_slice(&size.to_le_bytes());
            b.extend_from_slice(&e);
        };
        sh(0, 0, 0);
        sh(1, 64, 8);
        sh(8, 1 << 40, 1 << 20);
        // program header at the end: LOAD(64, 8)
        let phoff = b.len() as u64;
        let mut ph = [0u8; 56];
        ph[0..4].copy_from_slice(&1u32.to_le_bytes());
        ph[8..16].copy_from_slice(&64u64.to_le_bytes());
        ph[32..40].copy_from_slice(&8u64.to_le_bytes());
        b.extend_from_slice(&ph);
        b[32..40].copy_from_slice(&phoff.to_le_bytes());
        b[40..48].copy_from_slice(&shoff.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&1u16.to_le_bytes());
        b[58..60].copy_from_slice(&64u16.to_le_bytes());
        b[60..62].copy_from_slice(&3u16.to_le_bytes());
        b[62..64].copy_from_slice(&1u16.to_le_bytes()); // e_shstrndx
        b
    }

    fn reason(image: &[u8]) -> String {
        match check_cubin(image) {
            Err(CudaError::BadImage {
                what: "cubin",
                reason,
            }) => reason,
            other => panic!("expected BadImage, got {other:?}"),
        }
    }

    #[test]
    fn minimal_cubin_passes() {
        check_cubin(&minimal_cubin()).unwrap();
    }

    #[test]
    fn every_truncation_of_a_cubin_is_refused() {
        let full = minimal_cubin();
        for cut in 0..full.len() {
            assert!(
                check_cubin(&full[..cut]).is_err(),
                "truncated to {cut} bytes passed"
            );
        }
    }

    #[test]
    fn non_cuda_or_non_elf_images_are_refused() {
        assert!(reason(b"garbage that is not an image").contains("not an ELF"));
        assert!(reason(&[0x50, 0xed, 0x55, 0xba, 0, 0, 0, 0]).contains("fatbin"));
        let mut x86 = minimal_cubin();
        x86[18..20].copy_from_slice(&62u16.to_le_bytes());
        assert!(reason(&x86).contains("machine 62"));
        let mut elf32 = minimal_cubin();
        elf32[4] = 1;
        assert!(reason(&elf32).contains("ELF64"));
        let ptx = b".version 7.5\n.target sm_75\n";
        assert!(reason(ptx).contains("not an ELF"), "PTX is not a cubin");
    }

    #[test]
    fn sections_segments_and_tables_past_the_end_are_refused() {
        let mut sec = minimal_cubin();
        let shoff = 72;
        sec[shoff + 64 + 32..shoff + 64 + 40].copy_from_slice(&4096u64.to_le_bytes());
        assert!(reason(&sec).contains("section 1"), "{}", reason(&sec));

        let mut overflow = minimal_cubin();
        overflow[shoff + 64 + 24..shoff + 64 + 32].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(reason(&overflow).contains("section 1"));

        let mut seg = minimal_cubin();
        let phoff = 72 + 3 * 64;
        seg[phoff + 32..phoff + 40].copy_from_slice(&4096u64.to_le_bytes());
        assert!(reason(&seg).contains("segment 0"));

        let mut table = minimal_cubin();
        table[60..62].copy_from_slice(&200u16.to_le_bytes());
        assert!(reason(&table).contains("section header table"));

        let mut entsize = minimal_cubin();
        entsize[58..60].copy_from_slice(&40u16.to_le_bytes());
        assert!(reason(&entsize).contains("entry size 40"));
    }
}
