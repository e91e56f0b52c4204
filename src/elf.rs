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
//! 4. named as a user's declaration names it ([`is_user_global`]): a C identifier (letters,
//!    digits, `_`; mangled C++ names are such identifiers) not starting with `__`. That
//!    leaves out every object the compiler makes: nvcc's string literals `$str`, `$str$1`
//!    for `printf` and `assert`; the constant aggregates cicc makes under `-rdc=true` when
//!    an inline or template `__device__` function assigns a `constexpr`-built struct
//!    (`_ZN2hx4initEv$0`, `$1`, ...); and the names C and C++ reserve to the implementation
//!    (`__unnamed_1`, the function name `assert` records; `__cudart_i2opi_f` and other
//!    math-library tables; `__nv_static_*`, the name `-rdc=true` gives `static`
//!    variables). cicc's aggregates are WEAK `.nv.global.init` objects with default
//!    visibility and the same `st_other` as a function-local `static` of an inline
//!    function (`_ZZ5tableiE1K`, which the user declared): section, binding and
//!    visibility cannot tell them apart (checked with the pinned nvcc 13.0.88), the `$`
//!    that no declaration can produce does.
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

use object::LittleEndian as Le;
use object::elf;
use object::read::elf::Sym as _;

use crate::identity::LaunchAbi;
use crate::name::Target;

// The CUDA attribute lists (`.nv.info*`, `.nv.compat`) and a kernel's ABI read from them.
mod attributes;
// The whole-cubin reader, `inspect`, in named steps.
mod cubin;
// The bounds-checked structure: headers, tables, section names, symbol tables.
mod structure;

pub use crate::identity::{GlobalInfo, is_user_global};
pub use cubin::inspect;
pub use structure::check_structure;
use structure::{parse, symbol_name, symbol_tables};

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
