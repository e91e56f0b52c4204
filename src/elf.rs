//! The one reader of cubins (CUDA ELF files): their structure, the SM they were built for,
//! and their kernels with the launch ABI each was compiled to (parameter layout, registers,
//! shared and local memory, launch bounds). The verifier, the builder and the loader's
//! pre-driver check ([`check_structure`]) all read cubins through this module.
//!
//! Headers, section and symbol tables are read with the `object` crate (bounds-checked,
//! no allocation per entry); the CUDA-specific attribute lists (`.nv.info`, `.nv.compat`)
//! are decoded here with checked arithmetic. Every lookup goes through a map built once,
//! so reading is linear in the file size: a file with 65 535 sections and 40 000 symbols
//! reads in milliseconds (`docs/build.md`). A malformed file is an error, never a panic.
//!
//! What counts as a kernel: a defined global function symbol marked as an entry
//! (`STO_CUDA_ENTRY` in `st_other`). Undefined imports such as `__assertfail` (from device
//! `assert()`), device functions and data symbols are never kernels.
//!
//! What counts as a device global ([`GlobalInfo`]): a symbol that is
//!
//! 1. a data object (`STT_OBJECT`) of any binding: whole-program builds (`nvcc -cubin`)
//!    make every variable `LOCAL`, relocatable device-linked ones (`-rdc=true`, then
//!    `-dlink`) make external ones `GLOBAL`, template variables are `WEAK`;
//! 2. defined in a section of this file (not `SHN_UNDEF` or a reserved index: the
//!    toolkit's `.nv.reservedSmem.offset0` is undefined);
//! 3. in one of the three sections of user variables: `.nv.constant3` (the user constant
//!    bank: `__constant__`), `.nv.global` (`__device__`, zero-initialised, `SHT_NOBITS`)
//!    or `.nv.global.init` (`__device__` with an initial value). Other constant banks hold
//!    compiler data (bank 0: parameters; bank 4 and others: literals, addresses);
//! 4. named as a user writes names ([`is_user_global`]): not starting with `$` (a name no
//!    C++ variable has: nvcc's string literals `$str`, `$str$1` for `printf` and
//!    `assert`) nor with `__` (reserved to the implementation in C and C++: `__unnamed_1`,
//!    the function name `assert` records; `__cudart_i2opi_f` and other math-library
//!    tables; `__nv_static_*`, the name `-rdc=true` gives `static` variables).
//!
//! A whole-program cubin cannot tell a `static __device__` variable from an external one
//! (both are `LOCAL`, with the same name), so both are listed; namespace-scope statics and
//! anonymous namespaces carry nvcc's `_INTERNAL_<hash>` prefix in their mangled name.
//! `__managed__` variables are read with [`GlobalInfo::managed`] set (`st_other` bit 0x04,
//! as nvcc 13.0 writes it): the builder and the content check refuse them.
//!
//! A `__device__` variable is initialised when it sits in `.nv.global.init`; a
//! `__constant__` one when its bytes in `.nv.constant3` are not all zero or a relocation
//! writes into them (an address initialiser). nvcc places a zero initialiser (`= 0`) like
//! none at all, so "initialised" means "has a non-zero initial value", in PTX too.

use std::collections::HashMap;

use object::LittleEndian as Le;
use object::elf;
use object::read::elf::{
    FileHeader as _, ProgramHeader as _, SectionHeader as _, SectionTable, Sym as _,
};

use crate::identity::{GlobalSpace, LaunchAbi, Param};
use crate::name::Target;

pub use crate::identity::{GlobalInfo, is_user_global};

/// `e_machine` of CUDA ELF files.
pub const EM_CUDA: u16 = 190;
/// `st_other` bit of a kernel entry symbol.
const STO_CUDA_ENTRY: u8 = 0x10;
/// `st_other` bit of a `__managed__` variable (what nvcc 13.0 writes; its PTX says
/// `.attribute(.managed)`).
const STO_CUDA_MANAGED: u8 = 0x04;
/// The section of `__constant__` variables: constant bank 3, the user bank.
pub const SECTION_CONSTANT: &str = ".nv.constant3";
/// The section of zero-initialised `__device__` variables (`SHT_NOBITS`).
pub const SECTION_GLOBAL: &str = ".nv.global";
/// The section of initialised `__device__` variables.
pub const SECTION_GLOBAL_INIT: &str = ".nv.global.init";
/// Section type of `.nv.info*` attribute lists (`SHT_LOPROC`).
const SHT_CUDA_INFO: u32 = 0x7000_0000;
/// First bytes of a fatbin (magic 0xBA55ED50, little-endian).
const FATBIN_MAGIC: &[u8; 4] = &[0x50, 0xed, 0x55, 0xba];

/// `.nv.compat` attribute that is 1 in arch-specific (`sm_90a`) builds.
const COMPAT_ARCH_SPECIFIC: u8 = 0x09;
/// Per-kernel `.nv.info.<fn>`: `__launch_bounds__` block (x, y, z).
const EIATTR_MAX_THREADS: u8 = 0x05;
/// Per-kernel: the parameter constant bank (symbol, offset u16, size u16).
const EIATTR_PARAM_CBANK: u8 = 0x0a;
/// Global `.nv.info`: (symbol, stack frame bytes per thread).
const EIATTR_FRAME_SIZE: u8 = 0x11;
/// Per-kernel: one parameter (index, ordinal u16, offset u16, flags with the size in
/// bits 18-31: at most 16,383 bytes).
const EIATTR_KPARAM_INFO: u8 = 0x17;
/// Per-kernel: one parameter, the form nvcc uses once a kernel's parameters pass 4 KiB
/// (CUDA 12.1+ allows 32,764 bytes): index u32, ordinal u16, offset u16, then a word whose
/// low 24 bits are the size ([`KPARAM_V2_SIZE`]) and whose top byte is the parameter's kind
/// (0 up to sm_90; from sm_120 on, 5 for a pointer, as V1's bits 8-11 say).
const EIATTR_KPARAM_INFO_V2: u8 = 0x45;
/// The size bits of [`EIATTR_KPARAM_INFO_V2`]'s last word.
const KPARAM_V2_SIZE: u32 = 0x00ff_ffff;
/// Global `.nv.info`: (symbol, registers per thread).
const EIATTR_REGCOUNT: u8 = 0x2f;

/// One kernel of a cubin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelInfo {
    /// The symbol (mangled for C++ kernels).
    pub symbol: String,
    /// The launch ABI the cubin records.
    pub abi: LaunchAbi,
}

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
    /// The kernels, in symbol-table order.
    pub kernels: Vec<KernelInfo>,
    /// Undefined function symbols the cubin imports (e.g. `__assertfail`): never kernels.
    pub imports: Vec<String>,
    /// The device globals it defines, in symbol-table order.
    pub globals: Vec<GlobalInfo>,
}

impl CubinInfo {
    /// The exact target the header records (`sm_90`, `sm_90a`). A family build
    /// (`sm_100f`) reads as its plain SM: the header does not record the difference.
    pub fn target(&self) -> Target {
        Target {
            major: self.sm / 10,
            minor: self.sm % 10,
            arch_specific: self.arch_specific,
            family_specific: false,
            virtual_arch: false,
        }
    }
}

type Header = elf::FileHeader64<Le>;
type SectionHeader = elf::SectionHeader64<Le>;

type SymbolTable<'d> = object::read::elf::SymbolTable<'d, elf::FileHeader64<Le>, &'d [u8]>;

/// Every symbol table of a parsed file, with its section index.
fn symbol_tables<'d>(p: &Parsed<'d>, data: &'d [u8]) -> Result<Vec<SymbolTable<'d>>, String> {
    p.sections
        .iter()
        .enumerate()
        .filter(|(_, s)| s.sh_type(Le) == elf::SHT_SYMTAB)
        .map(|(ti, _)| {
            p.table
                .symbol_table_by_index(Le, data, object::SectionIndex(ti))
                .map_err(|e| format!("symbol table (section {ti}): {e}"))
        })
        .collect()
}

/// Symbol `index`'s name, as UTF-8.
fn symbol_name<'d>(
    symtab: &SymbolTable<'d>,
    sym: &elf::Sym64<Le>,
    index: usize,
) -> Result<&'d str, String> {
    let name = symtab
        .symbol_name(Le, sym)
        .map_err(|e| format!("symbol {index}: name: {e}"))?;
    std::str::from_utf8(name).map_err(|_| format!("symbol {index}: non-UTF-8 name"))
}

/// Whether `data` starts like a fatbin (a container nvcc writes; a module's files compiled
/// for link-time optimisation are fatbins of LTO IR until nvlink links them).
pub fn is_fatbin(data: &[u8]) -> bool {
    data.starts_with(FATBIN_MAGIC)
}

/// The named global symbols a cubin uses but does not define (`SHN_UNDEF`), each once, in
/// symbol-table order: in a relocatable cubin (`nvcc -cubin -rdc=true`), the `extern`
/// device variables and functions another file must define. Names beginning `.nv.` (what
/// the driver provides at load, e.g. `.nv.reservedSmem.offset0`) are not listed.
pub fn undefined_symbols(data: &[u8]) -> Result<Vec<String>, String> {
    let p = parse(data)?;
    let mut out: Vec<String> = Vec::new();
    for symtab in symbol_tables(&p, data)? {
        for (index, sym) in symtab.symbols().iter().enumerate() {
            let bind = sym.st_bind();
            if sym.st_shndx(Le) != elf::SHN_UNDEF
                || !(bind == elf::STB_GLOBAL || bind == elf::STB_WEAK)
            {
                continue;
            }
            let name = symbol_name(&symtab, sym, index)?;
            if !name.is_empty() && !name.starts_with(".nv.") && !out.iter().any(|n| n == name) {
                out.push(name.to_string());
            }
        }
    }
    Ok(out)
}

/// Checks that `bytes` is a complete little-endian ELF64 for CUDA: header, every header
/// table, every section (except `SHT_NOBITS`) and every segment lie inside the buffer.
///
/// The driver's load calls take a pointer without a length and trust the ELF's offsets, so
/// this is what keeps a truncated or damaged blob from making it read past the buffer.
pub fn check_structure(bytes: &[u8]) -> Result<(), String> {
    parse(bytes).map(|_| ())
}

struct Parsed<'a> {
    header: &'a Header,
    table: SectionTable<'a, Header, &'a [u8]>,
    sections: &'a [SectionHeader],
    names: Vec<&'a str>,
}

fn parse(data: &[u8]) -> Result<Parsed<'_>, String> {
    if data.starts_with(FATBIN_MAGIC) {
        return Err("a fatbin, not a cubin: fatbins may carry PTX the driver would JIT; load the per-SM cubin".into());
    }
    if !data.starts_with(b"\x7fELF") {
        return Err("not an ELF file (no \\x7fELF magic)".into());
    }
    if data.len() < 64 {
        return Err(format!(
            "{} bytes: shorter than an ELF64 header (64)",
            data.len()
        ));
    }
    if data[4] != elf::ELFCLASS64 || data[5] != elf::ELFDATA2LSB {
        return Err(format!(
            "ELF class {} / data {}: not little-endian ELF64",
            data[4], data[5]
        ));
    }
    let header = Header::parse(data).map_err(|e| format!("ELF header: {e}"))?;
    let machine = header.e_machine(Le);
    if machine != EM_CUDA {
        return Err(format!(
            "ELF for machine {machine}, not CUDA ({EM_CUDA}, EM_CUDA)"
        ));
    }
    if header.e_ehsize(Le) < 64 {
        return Err(format!("ELF header size {} < 64", header.e_ehsize(Le)));
    }
    let len = data.len() as u64;
    let table = |what: &str, off: u64, entsize: u16, count: u64, want: u16| {
        if count == 0 || off == 0 {
            return Ok(());
        }
        if entsize != want {
            return Err(format!("{what} entry size {entsize}, expected {want}"));
        }
        let end = u64::from(entsize)
            .checked_mul(count)
            .and_then(|n| n.checked_add(off));
        match end {
            Some(end) if end <= len => Ok(()),
            end => Err(format!(
                "{what} table ends at byte {}, past the {len}-byte image",
                end.map_or("2^64+".into(), |e| e.to_string())
            )),
        }
    };
    // The section count may sit in section 0 (extended numbering); object reads it.
    let shnum = header
        .shnum(Le, data)
        .map_err(|e| format!("section header table: {e}"))?;
    table(
        "section header",
        header.e_shoff(Le),
        header.e_shentsize(Le),
        shnum as u64,
        64,
    )?;
    let phnum = header
        .phnum(Le, data)
        .map_err(|e| format!("program header table: {e}"))?;
    table(
        "program header",
        header.e_phoff(Le),
        header.e_phentsize(Le),
        phnum as u64,
        56,
    )?;
    let sections = header
        .section_headers(Le, data)
        .map_err(|e| format!("section header table: {e}"))?;
    for (i, s) in sections.iter().enumerate() {
        let kind = s.sh_type(Le);
        if kind != elf::SHT_NULL && kind != elf::SHT_NOBITS {
            let (off, size) = (s.sh_offset(Le), s.sh_size(Le));
            if off.checked_add(size).is_none_or(|end| end > len) {
                return Err(format!(
                    "section {i} ends at byte {}, past the {len}-byte image",
                    off.checked_add(size)
                        .map_or("2^64+".into(), |e| e.to_string())
                ));
            }
        }
    }
    let table = header
        .sections(Le, data)
        .map_err(|e| format!("section name table: {e}"))?;
    let mut names = Vec::with_capacity(sections.len());
    for (i, s) in sections.iter().enumerate() {
        let name = if s.sh_name(Le) == 0 && s.sh_type(Le) == elf::SHT_NULL {
            ""
        } else {
            let raw = table
                .section_name(Le, s)
                .map_err(|e| format!("section {i}: name: {e}"))?;
            std::str::from_utf8(raw).map_err(|_| format!("section {i}: non-UTF-8 name"))?
        };
        names.push(name);
    }
    let segments = header
        .program_headers(Le, data)
        .map_err(|e| format!("program header table: {e}"))?;
    for (i, p) in segments.iter().enumerate() {
        let (off, size) = (p.p_offset(Le), p.p_filesz(Le));
        if off.checked_add(size).is_none_or(|end| end > len) {
            return Err(format!(
                "segment {i} ends at byte {}, past the {len}-byte image",
                off.checked_add(size)
                    .map_or("2^64+".into(), |e| e.to_string())
            ));
        }
    }
    Ok(Parsed {
        header,
        table,
        sections,
        names,
    })
}

/// Bytes the toolkit reserves at the start of each block's shared memory from sm_90 on:
/// a kernel's `.nv.shared.<kernel>` section counts them, the driver's
/// `CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES` does not (seen with nvcc and NVRTC 13.0 on an
/// H200, driver 580: a 8192-byte tile reads 9216 in the cubin; `docs/evidence/`).
pub const RESERVED_SHARED_SM90: u32 = 1024;

/// The static shared memory the driver reports for a kernel whose `.nv.shared` section in
/// a cubin for SM `sm` (90 for sm_90) is `section_bytes` long.
pub fn driver_shared_bytes(sm: u32, section_bytes: u32) -> u32 {
    if sm >= 90 && section_bytes >= RESERVED_SHARED_SM90 {
        section_bytes - RESERVED_SHARED_SM90
    } else {
        section_bytes
    }
}

/// Parses a cubin: its structure ([`check_structure`]), SM, variant, kernels and their
/// launch ABI. Refuses anything that is not a complete 64-bit little-endian CUDA ELF.
pub fn inspect(data: &[u8]) -> Result<CubinInfo, String> {
    let p = parse(data)?;
    let abi_version = data[8];
    let e_flags = p.header.e_flags(Le);
    let sm = if abi_version >= 8 {
        (e_flags >> 8) & 0xff
    } else {
        e_flags & 0xff
    };
    if sm < 10 {
        return Err(format!("e_flags {e_flags:#010x} records no SM"));
    }
    let section_data = |i: usize| -> Result<&[u8], String> {
        p.sections[i]
            .data(Le, data)
            .map_err(|e| format!("section {i} ({}): {e}", p.names[i]))
    };
    // One pass over the sections: every name that is looked up later, in a map.
    let mut info_of: HashMap<&str, usize> = HashMap::new();
    let mut shared_of: HashMap<&str, usize> = HashMap::new();
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
    let arch_specific = match compat {
        Some(i) => attrs(section_data(i)?)?
            .iter()
            .any(|a| a.attr == COMPAT_ARCH_SPECIFIC && a.value.first().is_some_and(|v| *v != 0)),
        None => false,
    };
    // Per-symbol attributes of the global `.nv.info` (keyed by symbol index).
    let mut regs: HashMap<u32, u32> = HashMap::new();
    let mut frame: HashMap<u32, u32> = HashMap::new();
    for i in global_info {
        for a in attrs(section_data(i)?)? {
            let pair = || -> Option<(u32, u32)> { Some((le32(a.value, 0)?, le32(a.value, 4)?)) };
            match a.attr {
                EIATTR_REGCOUNT => {
                    let (sym, n) = pair().ok_or("EIATTR_REGCOUNT shorter than 8 bytes")?;
                    regs.insert(sym, n);
                }
                EIATTR_FRAME_SIZE => {
                    let (sym, n) = pair().ok_or("EIATTR_FRAME_SIZE shorter than 8 bytes")?;
                    frame.insert(sym, n);
                }
                _ => {}
            }
        }
    }
    // An address initialiser of a `__constant__` variable is a relocation into its bytes.
    let constant_relocs = match constant {
        Some(c) => relocation_offsets(&p, data, c)?,
        None => Vec::new(),
    };
    let mut kernels = Vec::new();
    let mut imports = Vec::new();
    let mut globals = Vec::new();
    for symtab in symbol_tables(&p, data)? {
        for (index, sym) in symtab.symbols().iter().enumerate() {
            let bind = sym.st_bind();
            if sym.st_type() == elf::STT_OBJECT {
                let section = symtab
                    .symbol_section(Le, sym, object::SymbolIndex(index))
                    .map_err(|e| format!("symbol {index}: section: {e}"))?;
                let Some(&(space, init_section)) = section.and_then(|s| spaces.get(&s.0)) else {
                    continue;
                };
                let name = symbol_name(&symtab, sym, index)?;
                if !is_user_global(name) {
                    continue;
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
                        let bytes = section_data(s)?;
                        let own = &bytes[start as usize..end as usize];
                        own.iter().any(|b| *b != 0)
                            || constant_relocs.iter().any(|o| (start..end).contains(o))
                    }
                };
                globals.push(GlobalInfo {
                    symbol: name.to_string(),
                    size,
                    space,
                    initialised,
                    managed: sym.st_other() & STO_CUDA_MANAGED != 0,
                });
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
                registers: regs.get(&sym_index).copied(),
                local_bytes: frame.get(&sym_index).copied(),
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
            if let Some(&i) = shared_of.get(name) {
                let size = p.sections[i].sh_size(Le);
                abi.shared_bytes = Some(u32::try_from(size).map_err(|_| {
                    format!("kernel {name}: shared memory section of {size} bytes")
                })?);
            }
            if let Some(&i) = info_of.get(name) {
                kernel_attrs(name, attrs(section_data(i)?)?, &mut abi)?;
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

/// Fills the parameter layout and launch bounds from a kernel's `.nv.info.<fn>` list.
fn kernel_attrs(name: &str, list: Vec<Attr<'_>>, abi: &mut LaunchAbi) -> Result<(), String> {
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
struct Attr<'a> {
    attr: u8,
    value: &'a [u8],
}

/// Decodes an attribute list: `fmt u8, attr u8`, then a 2-byte value (formats 1-3) or a
/// u16 size and that many bytes (format 4).
fn attrs(data: &[u8]) -> Result<Vec<Attr<'_>>, String> {
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

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
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
        b[6] = 1;
        b[8] = abi;
        b[18..20].copy_from_slice(&EM_CUDA.to_le_bytes());
        b[48..52].copy_from_slice(&flags.to_le_bytes());
        b[52..54].copy_from_slice(&64u16.to_le_bytes());
        b[58..60].copy_from_slice(&64u16.to_le_bytes());
        b
    }

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
    fn sm_comes_from_e_flags_by_abi_version() {
        assert_eq!(inspect(&header(8, 0x0600_5a04)).unwrap().sm, 90);
        assert_eq!(inspect(&header(8, 0x0600_7802)).unwrap().sm, 120);
        assert_eq!(inspect(&header(7, 0x0050_0550)).unwrap().sm, 80);
    }

    #[test]
    fn real_cubins_report_sm_variant_kernels_and_their_abi() {
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
        let whole = inspect(include_bytes!("../tests/data/elf/globals_sm_90.cubin")).unwrap();
        assert_eq!(sorted(&whole.globals), globals_cu(true));
        let rdc = inspect(include_bytes!("../tests/data/elf/globals_rdc_sm_90.cubin")).unwrap();
        assert_eq!(sorted(&rdc.globals), globals_cu(false));
        let ptx = crate::ptx::inspect(include_bytes!("../tests/data/elf/globals_compute_90.ptx"))
            .unwrap();
        assert_eq!(sorted(&ptx.globals), globals_cu(true));
        let managed = inspect(include_bytes!("../tests/data/elf/managed_sm_90.cubin")).unwrap();
        let m: Vec<_> = managed
            .globals
            .iter()
            .map(|g| (g.symbol.as_str(), g.size, g.managed))
            .collect();
        assert_eq!(m, [("managed_total", 4, true)]);
        // The kernel-only fixtures define none.
        let add = inspect(include_bytes!("../tests/data/elf/add_sm_90.cubin")).unwrap();
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

    #[test]
    fn attribute_lists_are_bounds_checked() {
        assert!(attrs(&[4, 0x17, 0xff, 0xff, 1, 2]).is_err());
        let ok = attrs(&[3, 0x19, 0x10, 0x00, 4, 0x0a, 2, 0, 9, 9]).unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].value, &[9, 9]);
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
