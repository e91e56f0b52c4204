//! Reading a whole cubin ([`inspect`]): its SM and variant, its kernels with their launch
//! ABI, the functions it imports and the device globals it defines, in named steps over the
//! checked structure.

use std::collections::HashMap;

use object::LittleEndian as Le;
use object::elf;
use object::read::elf::{FileHeader as _, SectionHeader as _, Sym as _};

use super::attributes::{
    COMPAT_ARCH_SPECIFIC, EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE, EIATTR_REGCOUNT, STACK_UNKNOWN,
    attrs, kernel_attrs, le32,
};
use super::structure::{Parsed, SymbolTable, parse, symbol_name, symbol_tables};
use super::{
    CubinInfo, KernelInfo, SECTION_CONSTANT, SECTION_GLOBAL, SECTION_GLOBAL_INIT, SHT_CUDA_INFO,
    STO_CUDA_ENTRY, STO_CUDA_MANAGED,
};
use crate::identity::{GlobalInfo, GlobalSpace, LaunchAbi, is_user_global};

/// Parses a cubin: its structure ([`check_structure`]), SM, variant, kernels and their
/// launch ABI. Refuses anything that is not a complete 64-bit little-endian CUDA ELF.
///
/// [`check_structure`]: super::check_structure
pub fn inspect(data: &[u8]) -> Result<CubinInfo, String> {
    let p = parse(data)?;
    let abi_version = data[8];
    let e_flags = p.header.e_flags(Le);
    // Step 1: the SM, from `e_flags` (where it sits depends on the ABI version).
    let sm = sm_of(abi_version, e_flags)?;
    // Step 2: one pass over the sections: every name that is looked up later, in a map.
    let sections = index_sections(&p);
    // Step 3: the arch-specific variant (`sm_90a`), from `.nv.compat`.
    let arch_specific = arch_specific(&p, data, sections.compat)?;
    // Step 4: per-symbol attributes of the global `.nv.info` (keyed by symbol index).
    let per = symbol_attrs(&p, data, &sections.global_info)?;
    // Step 5: an address initialiser of a `__constant__` variable is a relocation into its
    // bytes.
    let constant_relocs = match sections.constant {
        Some(c) => relocation_offsets(&p, data, c)?,
        None => Vec::new(),
    };
    // Step 6: the symbol tables, in order: device globals, imports and kernels.
    let mut kernels = Vec::new();
    let mut imports = Vec::new();
    let mut globals = Vec::new();
    for symtab in symbol_tables(&p, data)? {
        for (index, sym) in symtab.symbols().iter().enumerate() {
            let bind = sym.st_bind();
            if sym.st_type() == elf::STT_OBJECT {
                let global = read_global(
                    &p,
                    data,
                    &sections.spaces,
                    &constant_relocs,
                    &symtab,
                    sym,
                    index,
                )?;
                globals.extend(global);
                continue;
            }
            if sym.st_type() != elf::STT_FUNC || !(bind == elf::STB_GLOBAL || bind == elf::STB_WEAK)
            {
                continue;
            }
            let name = symbol_name(&symtab, sym, index)?;
            if sym.st_shndx(Le) == elf::SHN_UNDEF {
                imports.push(name.to_string());
                continue;
            }
            if sym.st_other() & STO_CUDA_ENTRY == 0 {
                continue; // a device function with external linkage
            }
            let sym_index = u32::try_from(index).map_err(|_| "symbol index over 2^32")?;
            let mut abi = LaunchAbi {
                registers: per.regs.get(&sym_index).copied(),
                local_bytes: per.frame.get(&sym_index).copied(),
                stack_bytes: per
                    .stack
                    .get(&sym_index)
                    .copied()
                    .filter(|n| *n != STACK_UNKNOWN),
                ..LaunchAbi::default()
            };
            if abi.registers.is_none() {
                // Before sm_90 the register count also sits in the top byte of the
                // `.text.<fn>` section's sh_info.
                let text = symtab
                    .symbol_section(Le, sym, object::SymbolIndex(index))
                    .ok()
                    .flatten()
                    .and_then(|s| p.sections.get(s.0));
                abi.registers = text.map(|t| t.sh_info(Le) >> 24).filter(|n| *n > 0);
            }
            if let Some(&i) = sections.shared_of.get(name) {
                let size = p.sections[i].sh_size(Le);
                abi.shared_bytes = Some(u32::try_from(size).map_err(|_| {
                    format!("kernel {name}: shared memory section of {size} bytes")
                })?);
            }
            if let Some(&i) = sections.info_of.get(name) {
                kernel_attrs(name, attrs(section_data(&p, data, i)?)?, &mut abi)?;
            }
            kernels.push(KernelInfo {
                symbol: name.to_string(),
                abi,
            });
        }
    }
    Ok(CubinInfo {
        abi_version,
        e_flags,
        sm,
        arch_specific,
        kernels,
        imports,
        globals,
    })
}

/// Step 1: the SM number `e_flags` records (bits 8-15 from ABI version 8 on, bits 0-7
/// before).
fn sm_of(abi_version: u8, e_flags: u32) -> Result<u32, String> {
    let sm = if abi_version >= 8 {
        (e_flags >> 8) & 0xff
    } else {
        e_flags & 0xff
    };
    if sm < 10 {
        return Err(format!("e_flags {e_flags:#010x} records no SM"));
    }
    Ok(sm)
}

/// Section `i`'s bytes; an error naming the section when they lie outside the file.
fn section_data<'d>(p: &Parsed<'d>, data: &'d [u8], i: usize) -> Result<&'d [u8], String> {
    p.sections[i]
        .data(Le, data)
        .map_err(|e| format!("section {i} ({}): {e}", p.names[i]))
}

/// The sections later steps look up, found in one pass (step 2 of [`inspect`]).
struct Sections<'d> {
    /// Each kernel's `.nv.info.<fn>` attribute list, by function name.
    info_of: HashMap<&'d str, usize>,
    /// Each kernel's `.nv.shared.<fn>` section, by function name.
    shared_of: HashMap<&'d str, usize>,
    /// The global `.nv.info` lists (per-symbol attributes).
    global_info: Vec<usize>,
    /// The `.nv.compat` list.
    compat: Option<usize>,
    /// The sections of user variables: their space, and whether they hold initialised ones.
    spaces: HashMap<usize, (GlobalSpace, bool)>,
    /// `.nv.constant3`, the user constant bank.
    constant: Option<usize>,
}

/// Step 2: one pass over the section names, every one that is looked up later in a map.
fn index_sections<'d>(p: &Parsed<'d>) -> Sections<'d> {
    let mut info_of: HashMap<&'d str, usize> = HashMap::new();
    let mut shared_of: HashMap<&'d str, usize> = HashMap::new();
    let mut global_info = Vec::new();
    let mut compat = None;
    let mut spaces: HashMap<usize, (GlobalSpace, bool)> = HashMap::new();
    let mut constant = None;
    for (i, name) in p.names.iter().enumerate() {
        match *name {
            SECTION_CONSTANT => {
                spaces.insert(i, (GlobalSpace::Constant, false));
                constant = Some(i);
            }
            SECTION_GLOBAL => {
                spaces.insert(i, (GlobalSpace::Device, false));
            }
            SECTION_GLOBAL_INIT => {
                spaces.insert(i, (GlobalSpace::Device, true));
            }
            _ => {}
        }
        if let Some(f) = name.strip_prefix(".nv.info.") {
            info_of.insert(f, i);
        } else if *name == ".nv.info" && p.sections[i].sh_type(Le) == SHT_CUDA_INFO {
            global_info.push(i);
        } else if let Some(f) = name.strip_prefix(".nv.shared.") {
            shared_of.insert(f, i);
        } else if *name == ".nv.compat" {
            compat = Some(i);
        }
    }
    Sections {
        info_of,
        shared_of,
        global_info,
        compat,
        spaces,
        constant,
    }
}

/// Step 3: whether `.nv.compat` (section `compat`) marks an arch-specific (`sm_90a`) build.
fn arch_specific(p: &Parsed<'_>, data: &[u8], compat: Option<usize>) -> Result<bool, String> {
    Ok(match compat {
        Some(i) => attrs(section_data(p, data, i)?)?
            .iter()
            .any(|a| a.attr == COMPAT_ARCH_SPECIFIC && a.value.first().is_some_and(|v| *v != 0)),
        None => false,
    })
}

/// The per-symbol attributes of the global `.nv.info` lists, each by symbol index.
#[derive(Default)]
struct PerSymbol {
    /// Registers per thread (`EIATTR_REGCOUNT`).
    regs: HashMap<u32, u32>,
    /// The function's own stack frame bytes per thread (`EIATTR_FRAME_SIZE`).
    frame: HashMap<u32, u32>,
    /// A kernel's whole stack per thread, calls included (`EIATTR_MIN_STACK_SIZE`).
    stack: HashMap<u32, u32>,
}

/// Step 4: registers, stack frame and whole stack bytes per thread of each symbol, from the
/// global `.nv.info` lists.
fn symbol_attrs(p: &Parsed<'_>, data: &[u8], global_info: &[usize]) -> Result<PerSymbol, String> {
    let mut per = PerSymbol::default();
    for &i in global_info {
        for a in attrs(section_data(p, data, i)?)? {
            let (map, what) = match a.attr {
                EIATTR_REGCOUNT => (&mut per.regs, "EIATTR_REGCOUNT"),
                EIATTR_FRAME_SIZE => (&mut per.frame, "EIATTR_FRAME_SIZE"),
                EIATTR_MIN_STACK_SIZE => (&mut per.stack, "EIATTR_MIN_STACK_SIZE"),
                _ => continue,
            };
            let (sym, n) = le32(a.value, 0)
                .zip(le32(a.value, 4))
                .ok_or_else(|| format!("{what} shorter than 8 bytes"))?;
            map.insert(sym, n);
        }
    }
    Ok(per)
}

/// Step 6, for a data symbol: the device global it is, if the rule in [`super`]'s docs counts it
/// (`None` for any other data symbol).
fn read_global<'d>(
    p: &Parsed<'d>,
    data: &'d [u8],
    spaces: &HashMap<usize, (GlobalSpace, bool)>,
    constant_relocs: &[u64],
    symtab: &SymbolTable<'d>,
    sym: &elf::Sym64<Le>,
    index: usize,
) -> Result<Option<GlobalInfo>, String> {
    let section = symtab
        .symbol_section(Le, sym, object::SymbolIndex(index))
        .map_err(|e| format!("symbol {index}: section: {e}"))?;
    let Some(&(space, init_section)) = section.and_then(|s| spaces.get(&s.0)) else {
        return Ok(None);
    };
    let name = symbol_name(symtab, sym, index)?;
    if !is_user_global(name) {
        return Ok(None);
    }
    let s = section.map_or(0, |s| s.0);
    let (start, size) = (sym.st_value(Le), sym.st_size(Le));
    let end = start
        .checked_add(size)
        .filter(|end| *end <= p.sections[s].sh_size(Le))
        .ok_or_else(|| {
            format!(
                "global {name}: bytes {start}+{size} lie outside its section {} ({} bytes)",
                p.names[s],
                p.sections[s].sh_size(Le)
            )
        })?;
    let initialised = match space {
        GlobalSpace::Device => init_section,
        GlobalSpace::Constant => {
            let bytes = section_data(p, data, s)?;
            let own = &bytes[start as usize..end as usize];
            own.iter().any(|b| *b != 0) || constant_relocs.iter().any(|o| (start..end).contains(o))
        }
    };
    Ok(Some(GlobalInfo {
        symbol: name.to_string(),
        size,
        space,
        initialised,
        managed: sym.st_other() & STO_CUDA_MANAGED != 0,
    }))
}

/// The offsets every `SHT_REL` / `SHT_RELA` section patching section `target` writes at.
fn relocation_offsets(p: &Parsed<'_>, data: &[u8], target: usize) -> Result<Vec<u64>, String> {
    let mut out = Vec::new();
    for (i, s) in p.sections.iter().enumerate() {
        if s.sh_info(Le) as usize != target {
            continue;
        }
        let bad = |e: object::read::Error| format!("section {i} ({}): {e}", p.names[i]);
        if let Some((rel, _)) = s.rel(Le, data).map_err(bad)? {
            out.extend(rel.iter().map(|r| r.r_offset.get(Le)));
        } else if let Some((rela, _)) = s.rela(Le, data).map_err(bad)? {
            out.extend(rela.iter().map(|r| r.r_offset.get(Le)));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::attributes::EIATTR_KPARAM_INFO;
    use crate::elf::{EM_CUDA, check_structure};

    /// A minimal CUDA ELF: header only, no sections.
    fn header(abi: u8, flags: u32) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[6] = 1;
        b[8] = abi;
        b[18..20].copy_from_slice(&EM_CUDA.to_le_bytes());
        b[48..52].copy_from_slice(&flags.to_le_bytes());
        b[52..54].copy_from_slice(&64u16.to_le_bytes());
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
    fn real_cubins_report_sm_variant_kernels_and_their_abi() {
        let cases: [(&[u8], &str); 4] = [
            (
                include_bytes!("../../tests/data/elf/add_sm_80.cubin"),
                "sm_80",
            ),
            (
                include_bytes!("../../tests/data/elf/add_sm_90.cubin"),
                "sm_90",
            ),
            (
                include_bytes!("../../tests/data/elf/add_sm_90a.cubin"),
                "sm_90a",
            ),
            (
                include_bytes!("../../tests/data/elf/add_sm_120.cubin"),
                "sm_120",
            ),
        ];
        for (bytes, sm) in cases {
            let info = inspect(bytes).unwrap();
            assert_eq!(info.target().to_string(), sm);
            assert_eq!(info.kernels.len(), 1, "{sm}");
            let k = &info.kernels[0];
            assert_eq!(k.symbol, "add");
            // add(const u64*, u64*, int): 8 + 8 + 4 parameter bytes at 0, 8, 16.
            assert_eq!(k.abi.describe_params(), "0:8 8:8 16:4", "{sm}");
            assert_eq!(k.abi.param_bytes, 20, "{sm}");
            assert!(
                k.abi.registers.is_some_and(|r| r > 0 && r <= 255),
                "{sm}: {k:?}"
            );
            assert_eq!(k.abi.local_bytes, Some(0), "{sm}");
            check_structure(bytes).unwrap();
        }
    }

    /// The globals `tests/data/elf/globals.cu` defines, as (symbol, size, space,
    /// initialised), sorted; `hidden` is the namespace-scope static.
    pub(crate) fn globals_cu(with_static: bool) -> Vec<(String, u64, GlobalSpace, bool)> {
        use GlobalSpace::{Constant, Device};
        let mut v = vec![
            ("target_v", 16, Device, false),
            ("address_of", 8, Constant, true),
            ("_ZZ4bumpvE5calls", 4, Device, false),
            ("_Z5per_nILi1EE", 4, Device, true),
            ("_Z5per_nILi2EE", 4, Device, true),
            ("_ZN6tables15round_constantsE", 512, Constant, false),
            ("_ZN6tables6roundsE", 64, Constant, true),
            ("_ZN6tables4zeroE", 4, Constant, false),
            ("_ZN6tables7counterE", 8, Device, true),
            ("_ZN6tables7scratchE", 1024, Device, false),
        ];
        if with_static {
            v.push((
                "_ZN41_INTERNAL_10cba037_10_globals_cu_bb77dd186tables6hiddenE",
                12,
                Device,
                false,
            ));
        }
        let mut v: Vec<_> = v
            .into_iter()
            .map(|(s, n, sp, i)| (s.to_string(), n, sp, i))
            .collect();
        v.sort();
        v
    }

    pub(crate) fn sorted(globals: &[GlobalInfo]) -> Vec<(String, u64, GlobalSpace, bool)> {
        assert!(globals.iter().all(|g| !g.managed), "{globals:?}");
        let mut v: Vec<_> = globals
            .iter()
            .map(|g| (g.symbol.clone(), g.size, g.space, g.initialised))
            .collect();
        v.sort();
        v
    }

    /// Issue 19, item 4: the rule for which symbols are device globals (module docs), on
    /// real cubins: whole-program (LOCAL symbols, the static listed) and relocatable
    /// device-linked (GLOBAL and WEAK, the static renamed `__nv_static_*` and so not
    /// listed); never the compiler's `$str*`, `__unnamed_1`, `__cudart_i2opi_f` or the
    /// undefined `.nv.reservedSmem.offset0`. The PTX of the same source lists the same.
    /// A `__managed__` variable is read as managed.
    #[test]
    fn issue_19_device_globals_of_whole_program_and_relocatable_cubins() {
        let whole = inspect(include_bytes!("../../tests/data/elf/globals_sm_90.cubin")).unwrap();
        assert_eq!(sorted(&whole.globals), globals_cu(true));
        let rdc = inspect(include_bytes!(
            "../../tests/data/elf/globals_rdc_sm_90.cubin"
        ))
        .unwrap();
        assert_eq!(sorted(&rdc.globals), globals_cu(false));
        let ptx = crate::ptx::inspect(include_bytes!(
            "../../tests/data/elf/globals_compute_90.ptx"
        ))
        .unwrap();
        assert_eq!(sorted(&ptx.globals), globals_cu(true));
        let managed = inspect(include_bytes!("../../tests/data/elf/managed_sm_90.cubin")).unwrap();
        let m: Vec<_> = managed
            .globals
            .iter()
            .map(|g| (g.symbol.as_str(), g.size, g.managed))
            .collect();
        assert_eq!(m, [("managed_total", 4, true)]);
        // The kernel-only fixtures define none.
        let add = inspect(include_bytes!("../../tests/data/elf/add_sm_90.cubin")).unwrap();
        assert!(add.globals.is_empty(), "{:?}", add.globals);
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
        assert!(inspect(&h).unwrap_err().contains("past the"));
        for cut in [10, 30, 50, 63] {
            assert!(inspect(&header(8, 0x0600_5a04)[..cut]).is_err());
        }
    }

    /// A cubin-shaped file (sm_90) with `kernels` entry symbols, one `.nv.info.<k>` section
    /// each, and `.nv.shared.<k>` filler up to `sections` sections. Kernel `k<i>` takes
    /// `i % 5` parameters of 8 bytes and uses `i % 200 + 1` registers.
    pub(crate) fn synthetic_cubin(kernels: usize, sections: usize) -> Vec<u8> {
        struct Sec {
            name: u32,
            kind: u32,
            link: u32,
            data: Vec<u8>,
            nobits: u64,
        }
        let mut shstr = vec![0u8];
        let mut name = |n: &str| {
            let at = shstr.len() as u32;
            shstr.extend_from_slice(n.as_bytes());
            shstr.push(0);
            at
        };
        let mut strtab = vec![0u8];
        let mut symtab = vec![0u8; 24];
        let mut global = Vec::new();
        let mut secs = vec![
            Sec {
                name: 0,
                kind: 0,
                link: 0,
                data: vec![],
                nobits: 0,
            },
            Sec {
                name: name(".shstrtab"),
                kind: 3,
                link: 0,
                data: vec![],
                nobits: 0,
            },
            Sec {
                name: name(".strtab"),
                kind: 3,
                link: 0,
                data: vec![],
                nobits: 0,
            },
            Sec {
                name: name(".symtab"),
                kind: 2,
                link: 2,
                data: vec![],
                nobits: 0,
            },
            Sec {
                name: name(".nv.info"),
                kind: SHT_CUDA_INFO,
                link: 3,
                data: vec![],
                nobits: 0,
            },
        ];
        for i in 0..kernels {
            let sym = format!("k{i}");
            let st_name = strtab.len() as u32;
            strtab.extend_from_slice(sym.as_bytes());
            strtab.push(0);
            let mut e = [0u8; 24];
            e[0..4].copy_from_slice(&st_name.to_le_bytes());
            e[4] = (elf::STB_GLOBAL << 4) | elf::STT_FUNC;
            e[5] = STO_CUDA_ENTRY;
            e[6..8].copy_from_slice(&4u16.to_le_bytes());
            symtab.extend_from_slice(&e);
            global.extend_from_slice(&[4, EIATTR_REGCOUNT, 8, 0]);
            global.extend_from_slice(&((i + 1) as u32).to_le_bytes());
            global.extend_from_slice(&((i % 200 + 1) as u32).to_le_bytes());
            let mut info = Vec::new();
            for p in 0..i % 5 {
                info.extend_from_slice(&[4, EIATTR_KPARAM_INFO, 12, 0, 0, 0, 0, 0]);
                info.extend_from_slice(&(p as u16).to_le_bytes());
                info.extend_from_slice(&(8 * p as u16).to_le_bytes());
                info.extend_from_slice(&(0x0021_f000u32).to_le_bytes());
            }
            secs.push(Sec {
                name: name(&format!(".nv.info.{sym}")),
                kind: SHT_CUDA_INFO,
                link: 3,
                data: info,
                nobits: 0,
            });
        }
        let mut i = 0;
        while secs.len() < sections {
            secs.push(Sec {
                name: name(&format!(".nv.shared.k{i}")),
                kind: 8,
                link: 0,
                data: vec![],
                nobits: 256,
            });
            i += 1;
        }
        secs[1].data = shstr;
        secs[2].data = strtab;
        secs[3].data = symtab;
        secs[4].data = global;
        let mut b = header(8, 0x0600_5a04);
        let mut at = Vec::with_capacity(secs.len());
        for s in &secs {
            at.push(b.len() as u64);
            b.extend_from_slice(&s.data);
            while !b.len().is_multiple_of(8) {
                b.push(0);
            }
        }
        let shoff = b.len() as u64;
        for (s, off) in secs.iter().zip(at) {
            let mut e = [0u8; 64];
            e[0..4].copy_from_slice(&s.name.to_le_bytes());
            e[4..8].copy_from_slice(&s.kind.to_le_bytes());
            e[24..32].copy_from_slice(&off.to_le_bytes());
            let size = if s.kind == 8 {
                s.nobits
            } else {
                s.data.len() as u64
            };
            e[32..40].copy_from_slice(&size.to_le_bytes());
            e[40..44].copy_from_slice(&s.link.to_le_bytes());
            e[56..64].copy_from_slice(&(if s.kind == 2 { 24u64 } else { 0 }).to_le_bytes());
            b.extend_from_slice(&e);
        }
        b[40..48].copy_from_slice(&shoff.to_le_bytes());
        b[60..62].copy_from_slice(&(secs.len() as u16).to_le_bytes());
        b[62..64].copy_from_slice(&1u16.to_le_bytes());
        b
    }

    /// Issue 10 item 5: 65 535 sections and 40 000 symbols took 160 s with a lookup per
    /// kernel over every section; the reader is linear now. This asserts the result; the
    /// time is in docs/build.md (measured in a release build).
    #[test]
    fn a_cubin_with_65535_sections_and_40k_kernels_reads_completely() {
        let bytes = synthetic_cubin(40_000, 65_535);
        assert!(bytes.len() > 4 << 20, "{} bytes", bytes.len());
        let t = std::time::Instant::now();
        let info = inspect(&bytes).unwrap();
        eprintln!(
            "read {} bytes, 65535 sections, 40000 kernels in {:?}",
            bytes.len(),
            t.elapsed()
        );
        assert_eq!(info.kernels.len(), 40_000);
        let k = &info.kernels[39_999];
        assert_eq!(k.symbol, "k39999");
        assert_eq!(k.abi.describe_params(), "0:8 8:8 16:8 24:8");
        assert_eq!(k.abi.registers, Some(39_999 % 200 + 1));
        assert_eq!(info.kernels[25_529].abi.shared_bytes, Some(256));
        assert_eq!(info.kernels[25_530].abi.shared_bytes, None);
        assert!(info.imports.is_empty());
    }

    #[test]
    fn offsets_near_u64_max_are_errors_not_panics() {
        let good = synthetic_cubin(3, 10);
        inspect(&good).unwrap();
        let shoff = u64::from_le_bytes(good[40..48].try_into().unwrap()) as usize;
        for (field, value) in [
            (24usize, u64::MAX - 2), // sh_offset of the string table
            (32, u64::MAX),          // sh_size
        ] {
            let mut b = good.clone();
            let at = shoff + 2 * 64 + field;
            b[at..at + 8].copy_from_slice(&value.to_le_bytes());
            let err = inspect(&b).unwrap_err();
            assert!(err.contains("section 2"), "{err}");
        }
        // A symbol name offset past its table, and a section name offset near u32::MAX.
        let mut b = good.clone();
        let symtab_off = u64::from_le_bytes(
            b[shoff + 3 * 64 + 24..shoff + 3 * 64 + 32]
                .try_into()
                .unwrap(),
        ) as usize;
        b[symtab_off + 24..symtab_off + 28].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(inspect(&b).unwrap_err().contains("symbol 1"));
        let mut b = good;
        b[shoff + 4 * 64..shoff + 4 * 64 + 4].copy_from_slice(&(u32::MAX - 1).to_le_bytes());
        assert!(inspect(&b).unwrap_err().contains("section 4"));
    }
}
