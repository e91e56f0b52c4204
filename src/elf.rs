//! Reading a cubin's ELF header and tables: the SM it was built for, whether it is an
//! arch-specific (`a`) build, and its kernel entry points with their parameter sizes.
//!
//! Every offset is bounds-checked; a malformed file is an error, never a panic.

use crate::name::Target;

/// `e_machine` of CUDA ELF files.
const EM_CUDA: u16 = 190;
const SHT_SYMTAB: u32 = 2;
const STT_FUNC: u8 = 2;
const STB_GLOBAL: u8 = 1;
/// `.nv.compat` attribute that is 1 in arch-specific (`sm_90a`) builds.
const COMPAT_ARCH_SPECIFIC: u8 = 0x09;
/// `.nv.info.<fn>` attribute carrying the kernel parameter constant bank (offset, size).
const EIATTR_PARAM_CBANK: u8 = 0x0a;

/// What a cubin says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CubinInfo {
    /// `EI_ABIVERSION` (byte 8): 8 for CUDA 13.
    pub abi_version: u8,
    /// The raw `e_flags`.
    pub e_flags: u32,
    /// The SM number (90 for sm_90).
    pub sm: u32,
    /// Built for the arch-specific variant (`sm_90a`), read from `.nv.compat`.
    pub arch_specific: bool,
    /// Global kernel entry points, in symbol-table order, with parameter bytes where known.
    pub functions: Vec<(String, Option<u32>)>,
}

impl CubinInfo {
    /// The exact target the header records (`sm_90`, `sm_90a`).
    pub fn target(&self) -> Target {
        Target {
            major: self.sm / 10,
            minor: self.sm % 10,
            arch_specific: self.arch_specific,
            virtual_arch: false,
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&self, off: u64, len: u64) -> Result<&'a [u8], String> {
        let end = off.checked_add(len).ok_or("offset overflow")?;
        let (s, e) = (
            usize::try_from(off).map_err(|_| "offset")?,
            usize::try_from(end).map_err(|_| "offset")?,
        );
        self.0
            .get(s..e)
            .ok_or_else(|| format!("truncated: needs bytes {off}..{end} of {}", self.0.len()))
    }
    fn u8(&self, off: u64) -> Result<u8, String> {
        Ok(self.bytes(off, 1)?[0])
    }
    fn u16(&self, off: u64) -> Result<u16, String> {
        Ok(u16::from_le_bytes(
            self.bytes(off, 2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&self, off: u64) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.bytes(off, 4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&self, off: u64) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.bytes(off, 8)?.try_into().expect("8 bytes"),
        ))
    }
    fn cstr(&self, off: u64) -> Result<&'a str, String> {
        let s = usize::try_from(off).map_err(|_| "offset")?;
        let tail = self.0.get(s..).ok_or("string offset out of range")?;
        let n = tail
            .iter()
            .position(|&b| b == 0)
            .ok_or("unterminated string")?;
        std::str::from_utf8(&tail[..n]).map_err(|_| "non-UTF-8 name".to_string())
    }
}

struct Section {
    name: String,
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
    entsize: u64,
}

/// Parses a cubin. Refuses anything that is not a 64-bit little-endian CUDA ELF.
pub fn inspect(bytes: &[u8]) -> Result<CubinInfo, String> {
    let r = Reader(bytes);
    if r.bytes(0, 4)? != b"\x7fELF" {
        return Err("no ELF magic".into());
    }
    if r.u8(4)? != 2 || r.u8(5)? != 1 {
        return Err("not a 64-bit little-endian ELF".into());
    }
    let machine = r.u16(18)?;
    if machine != EM_CUDA {
        return Err(format!("e_machine {machine}, expected {EM_CUDA} (EM_CUDA)"));
    }
    let abi_version = r.u8(8)?;
    let e_flags = r.u32(48)?;
    let sm = if abi_version >= 8 {
        (e_flags >> 8) & 0xff
    } else {
        e_flags & 0xff
    };
    if sm < 10 {
        return Err(format!("e_flags {e_flags:#010x} records no SM"));
    }
    let sections = read_sections(&r)?;
    let arch_specific = match sections.iter().find(|s| s.name == ".nv.compat") {
        Some(s) => nv_attrs(&r, s)?
            .iter()
            .any(|(attr, v)| *attr == COMPAT_ARCH_SPECIFIC && v.first().copied().unwrap_or(0) != 0),
        None => false,
    };
    let mut functions = Vec::new();
    for symtab in sections.iter().filter(|s| s.kind == SHT_SYMTAB) {
        let strtab = sections
            .get(symtab.link as usize)
            .ok_or("symtab links to no string table")?;
        let entsize = if symtab.entsize == 0 {
            24
        } else {
            symtab.entsize
        };
        for i in 0..symtab.size / entsize {
            let at = symtab.offset + i * entsize;
            let info = r.u8(at + 4)?;
            if info & 0xf == STT_FUNC && info >> 4 == STB_GLOBAL {
                let name = r.cstr(strtab.offset + u64::from(r.u32(at)?))?.to_string();
                let params = match sections
                    .iter()
                    .find(|s| s.name == format!(".nv.info.{name}"))
                {
                    Some(s) => nv_attrs(&r, s)?
                        .iter()
                        .find(|(a, v)| *a == EIATTR_PARAM_CBANK && v.len() == 8)
                        .map(|(_, v)| {
                            u32::from_le_bytes(v[4..8].try_into().expect("4 bytes")) >> 16
                        }),
                    None => None,
                };
                functions.push((name, params));
            }
        }
    }
    Ok(CubinInfo {
        abi_version,
        e_flags,
        sm,
        arch_specific,
        functions,
    })
}

fn read_sections(r: &Reader) -> Result<Vec<Section>, String> {
    let shoff = r.u64(40)?;
    let shentsize = u64::from(r.u16(58)?);
    let shnum = u64::from(r.u16(60)?);
    let shstrndx = u64::from(r.u16(62)?);
    if shnum == 0 {
        return Ok(Vec::new());
    }
    if shentsize < 64 {
        return Err(format!("section header size {shentsize}"));
    }
    let mut raw = Vec::new();
    for i in 0..shnum {
        let at = shoff
            .checked_add(i * shentsize)
            .ok_or("section offset overflow")?;
        raw.push((
            r.u32(at)?,
            r.u32(at + 4)?,
            r.u64(at + 24)?,
            r.u64(at + 32)?,
            r.u32(at + 40)?,
            r.u64(at + 56)?,
        ));
    }
    let names = raw.get(shstrndx as usize).ok_or("no section name table")?.2;
    raw.into_iter()
        .map(|(name, kind, offset, size, link, entsize)| {
            r.bytes(offset, if kind == 8 { 0 } else { size })?; // NOBITS sections occupy no file bytes
            Ok(Section {
                name: r.cstr(names + u64::from(name))?.to_string(),
                kind,
                offset,
                size,
                link,
                entsize,
            })
        })
        .collect()
}

/// Decodes an `.nv.info`-style attribute list: `fmt u8, attr u8`, then a 2-byte value
/// (formats 1-3) or a u16 size and that many bytes (format 4).
fn nv_attrs<'a>(r: &Reader<'a>, s: &Section) -> Result<Vec<(u8, &'a [u8])>, String> {
    let data = r.bytes(s.offset, s.size)?;
    let d = Reader(data);
    let mut out = Vec::new();
    let mut at = 0u64;
    while at + 4 <= s.size {
        let (fmt, attr) = (d.u8(at)?, d.u8(at + 1)?);
        if fmt == 4 {
            let n = u64::from(d.u16(at + 2)?);
            out.push((attr, Reader(data).bytes(at + 4, n)?));
            at += 4 + n;
        } else {
            out.push((attr, Reader(data).bytes(at + 2, 2)?));
            at += 4;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal CUDA ELF: header only, no sections.
    fn header(abi: u8, flags: u32) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[8] = abi;
        b[18..20].copy_from_slice(&EM_CUDA.to_le_bytes());
        b[48..52].copy_from_slice(&flags.to_le_bytes());
        b[58..60].copy_from_slice(&64u16.to_le_bytes());
        b
    }

    #[test]
    fn sm_comes_from_e_flags_by_abi_version() {
        assert_eq!(inspect(&header(8, 0x0600_5a04)).unwrap().sm, 90);
        assert_eq!(inspect(&header(8, 0x0600_7802)).unwrap().sm, 120);
        assert_eq!(inspect(&header(7, 0x0050_0550)).unwrap().sm, 80);
    }

    #[test]
    fn real_cubins_report_sm_variant_and_entry_points() {
        let cases: [(&[u8], &str); 4] = [
            (include_bytes!("../tests/data/elf/add_sm_80.cubin"), "sm_80"),
            (include_bytes!("../tests/data/elf/add_sm_90.cubin"), "sm_90"),
            (
                include_bytes!("../tests/data/elf/add_sm_90a.cubin"),
                "sm_90a",
            ),
            (
                include_bytes!("../tests/data/elf/add_sm_120.cubin"),
                "sm_120",
            ),
        ];
        for (bytes, sm) in cases {
            let info = inspect(bytes).unwrap();
            assert_eq!(info.target().to_string(), sm);
            // add(const u64*, u64*, int): 8 + 8 + 4 parameter bytes.
            assert_eq!(info.functions, vec![("add".to_string(), Some(20))], "{sm}");
        }
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        assert!(inspect(b"").is_err());
        assert!(inspect(b"\x7fELF").is_err());
        let mut h = header(8, 0x0600_5a04);
        h[18] = 62; // x86-64
        assert!(inspect(&h).unwrap_err().contains("EM_CUDA"));
        let mut h = header(8, 0x0600_5a04);
        h[60..62].copy_from_slice(&3u16.to_le_bytes()); // 3 sections past the end
        h[40..48].copy_from_slice(&1_000_000u64.to_le_bytes());
        assert!(inspect(&h).unwrap_err().contains("truncated"));
        for cut in [10, 30, 50, 63] {
            assert!(inspect(&header(8, 0x0600_5a04)[..cut]).is_err());
        }
    }
}
