//! The structure of a cubin: the checks that every header table, section and segment lies
//! inside the buffer ([`check_structure`]), section names, and the symbol tables every other
//! reader of this module walks.

use object::LittleEndian as Le;
use object::elf;
use object::read::elf::{FileHeader as _, ProgramHeader as _, SectionHeader as _, SectionTable};

use super::{EM_CUDA, FATBIN_MAGIC};

pub(super) type Header = elf::FileHeader64<Le>;
pub(super) type SectionHeader = elf::SectionHeader64<Le>;

pub(super) type SymbolTable<'d> =
    object::read::elf::SymbolTable<'d, elf::FileHeader64<Le>, &'d [u8]>;

/// Every symbol table of a parsed file, with its section index.
pub(super) fn symbol_tables<'d>(
    p: &Parsed<'d>,
    data: &'d [u8],
) -> Result<Vec<SymbolTable<'d>>, String> {
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
pub(super) fn symbol_name<'d>(
    symtab: &SymbolTable<'d>,
    sym: &elf::Sym64<Le>,
    index: usize,
) -> Result<&'d str, String> {
    let name = symtab
        .symbol_name(Le, sym)
        .map_err(|e| format!("symbol {index}: name: {e}"))?;
    std::str::from_utf8(name).map_err(|_| format!("symbol {index}: non-UTF-8 name"))
}

/// Checks that `bytes` is a complete little-endian ELF64 for CUDA: header, every header
/// table, every section (except `SHT_NOBITS`) and every segment lie inside the buffer.
///
/// The driver's load calls take a pointer without a length and trust the ELF's offsets, so
/// this is what keeps a truncated or damaged blob from making it read past the buffer.
pub fn check_structure(bytes: &[u8]) -> Result<(), String> {
    parse(bytes).map(|_| ())
}

/// A cubin whose header, tables, sections and segments lie inside its buffer, with every
/// section's name.
pub(super) struct Parsed<'a> {
    pub(super) header: &'a Header,
    table: SectionTable<'a, Header, &'a [u8]>,
    pub(super) sections: &'a [SectionHeader],
    pub(super) names: Vec<&'a str>,
}

/// Reads the structure [`check_structure`] checks.
pub(super) fn parse(data: &[u8]) -> Result<Parsed<'_>, String> {
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
