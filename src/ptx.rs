//! The one reader of PTX text: its `.target`, its kernels (`.entry`) with the parameter
//! layout the driver will use (each `.param` aligned to its size or `.align`) and the
//! launch bound (`.maxntid`), and its device globals (module-scope `.global` and `.const`
//! declarations, [`globals`]). The builder and the verifier both read PTX through here.

use crate::identity::{GlobalInfo, GlobalSpace, LaunchAbi, Param, is_user_global};

/// What PTX text says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtxInfo {
    /// The first word of the `.target` directive, e.g. `sm_90`, `sm_90a`, `sm_100f`.
    pub target: String,
    /// The kernels, in file order: symbol and launch ABI (no resource figures: the driver's
    /// JIT decides those).
    pub kernels: Vec<(String, LaunchAbi)>,
    /// The device globals it defines, in file order ([`globals`]).
    pub globals: Vec<GlobalInfo>,
}

/// Reads PTX. Refuses bytes that are not PTX text: binary images (ELF, fatbin), NUL bytes
/// (other than one at the very end), non-ASCII text, no `.version` or `.target` directive,
/// or a kernel whose parameter types are not understood.
pub fn inspect(bytes: &[u8]) -> Result<PtxInfo, String> {
    if bytes.starts_with(b"\x7fELF") || bytes.starts_with(&[0x50, 0xed, 0x55, 0xba]) {
        return Err("a binary image (ELF or fatbin), not PTX text".into());
    }
    let text = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    if let Some(at) = text.iter().position(|&b| b == 0) {
        return Err(format!("NUL byte at offset {at}: not PTX text"));
    }
    if let Some(at) = text
        .iter()
        .position(|&b| !(b.is_ascii_graphic() || b.is_ascii_whitespace()))
    {
        return Err(format!(
            "byte {:#04x} at offset {at}: PTX is printable ASCII text",
            text[at]
        ));
    }
    let text = std::str::from_utf8(text).map_err(|_| "not UTF-8".to_string())?;
    let directive = |name: &str| {
        text.lines().find_map(|l| {
            let l = l.trim_start();
            l.strip_prefix(name)
                .filter(|rest| rest.starts_with([' ', '\t']))
                .map(str::trim)
        })
    };
    if directive(".version").is_none() {
        return Err("no .version directive: not PTX".into());
    }
    let target = directive(".target")
        .ok_or("no .target directive: not PTX")?
        .split([',', ' ', '\t'])
        .next()
        .unwrap_or_default()
        .to_string();
    if target.is_empty() {
        return Err("empty .target directive: not PTX".into());
    }
    Ok(PtxInfo {
        target,
        kernels: entries(text)?,
        globals: globals(text)?,
    })
}

/// The device globals of PTX text: the module-scope (outside every function body)
/// declarations in the `.global` (`__device__`) or `.const` (`__constant__`) state space,
/// with or without `.visible` / `.weak`, never `.extern` ones (declared, not defined), named
/// as users name variables ([`is_user_global`]: the same rule as for cubins). The size is
/// the element size times every array dimension; a declaration is initialised when it has
/// an initialiser (`= ...`: nvcc writes none for zero values). `.attribute(.managed)` marks
/// a `__managed__` variable.
///
/// ```text
/// .visible .const .align 4 .b8 twiddles[1024];     // constant, 1024 bytes
/// .global .align 8 .u64 counter = 7;                // device, 8 bytes, initialised
/// ```
pub fn globals(text: &str) -> Result<Vec<GlobalInfo>, String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let line = strip_comment(line);
        let start = line.trim_start();
        // `.visible .global ...` is a variable; `.visible .entry k(` is not.
        let is_decl = start
            .split_whitespace()
            .find(|w| !matches!(*w, ".visible" | ".weak" | ".common" | ".extern"))
            .is_some_and(|w| w == ".global" || w == ".const");
        if depth > 0 || !is_decl {
            for c in line.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth = depth.saturating_sub(1),
                    _ => {}
                }
            }
            continue;
        }
        // One declaration, up to its `;` (long initialisers may span lines).
        let mut decl = start.to_string();
        while !decl.contains(';') {
            match lines.next() {
                Some(l) => {
                    decl.push(' ');
                    decl.push_str(strip_comment(l));
                }
                None => return Err(format!("unterminated declaration `{}`", short(&decl))),
            }
        }
        if let Some(g) = global_decl(&decl)? {
            out.push(g);
        }
    }
    Ok(out)
}

/// `line` without a trailing `//` comment.
fn strip_comment(line: &str) -> &str {
    line.find("//").map_or(line, |at| &line[..at])
}

/// The first 80 characters of `s`, for messages.
fn short(s: &str) -> String {
    s.chars().take(80).collect()
}

/// One module-scope declaration: `Some` for a `.global` / `.const` variable this module
/// defines under a user's name.
fn global_decl(decl: &str) -> Result<Option<GlobalInfo>, String> {
    let (head, initialised) = match decl.split_once('=') {
        Some((head, _)) => (head, true),
        None => (decl.split(';').next().unwrap_or_default(), false),
    };
    let words: Vec<&str> = head.split_whitespace().collect();
    let mut i = 0;
    let mut space = None;
    while let Some(w) = words.get(i) {
        match *w {
            ".extern" => return Ok(None),
            ".visible" | ".weak" | ".common" => i += 1,
            ".global" => {
                space = Some(GlobalSpace::Device);
                i += 1;
                break;
            }
            ".const" => {
                space = Some(GlobalSpace::Constant);
                i += 1;
                break;
            }
            _ => return Ok(None), // .shared, .tex, ... : not a device global
        }
    }
    let Some(space) = space else {
        return Ok(None);
    };
    let bad = |why: &str| format!("global declaration `{}`: {why}", short(decl.trim()));
    let (mut managed, mut elem, mut lanes) = (false, None, 1u64);
    let name = loop {
        let Some(w) = words.get(i) else {
            return Err(bad("no name"));
        };
        i += 1;
        match *w {
            ".align" => i += 1,
            ".v2" => lanes = 2,
            ".v4" => lanes = 4,
            ".v8" => lanes = 8,
            w if w.starts_with(".attribute(") => managed |= w.contains(".managed"),
            w if w.starts_with('.') => {
                elem = Some(match &w[1..] {
                    "b8" | "u8" | "s8" => 1u64,
                    "b16" | "u16" | "s16" | "f16" | "bf16" => 2,
                    "b32" | "u32" | "s32" | "f32" => 4,
                    "b64" | "u64" | "s64" | "f64" => 8,
                    "b128" => 16,
                    _ => return Err(bad("element type not understood")),
                });
            }
            w => break w,
        }
    };
    let elem = elem.ok_or_else(|| bad("no element type"))?;
    let (symbol, dims) = name.split_at(name.find('[').unwrap_or(name.len()));
    if !is_user_global(symbol) {
        return Ok(None);
    }
    let mut size = elem * lanes;
    for d in dims.split('[').skip(1) {
        let n: u64 = d
            .trim_end_matches(']')
            .trim()
            .parse()
            .map_err(|_| bad("array dimension not a number"))?;
        size = size.checked_mul(n).ok_or_else(|| bad("size overflows"))?;
    }
    Ok(Some(GlobalInfo {
        symbol: symbol.to_string(),
        size,
        space,
        initialised,
        managed,
    }))
}

/// The kernels of PTX text (`.entry NAME(`), with their parameter layout and `.maxntid`.
pub fn entries(text: &str) -> Result<Vec<(String, LaunchAbi)>, String> {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(at) = line.find(".entry ") else {
            continue;
        };
        let rest = line[at + ".entry ".len()..].trim();
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$')
            .collect();
        if name.is_empty() {
            continue;
        }
        // Parameters follow until the closing `)`.
        let mut decls = Vec::new();
        let mut tail = rest[name.len()..].to_string();
        loop {
            let done = tail.contains(')');
            for p in tail.split(',') {
                let p = p
                    .trim()
                    .trim_start_matches('(')
                    .trim_end_matches(')')
                    .trim();
                if p.starts_with(".param") {
                    decls.push(p.to_string());
                }
            }
            if done {
                break;
            }
            match lines.next() {
                Some(l) => tail = l.to_string(),
                None => return Err(format!("kernel {name}: unterminated parameter list")),
            }
        }
        let mut abi = LaunchAbi::default();
        let mut offset = 0u32;
        for d in &decls {
            let (size, align) =
                param_layout(d).ok_or_else(|| format!("kernel {name}: parameter `{d}`"))?;
            offset = offset
                .checked_next_multiple_of(align)
                .ok_or_else(|| format!("kernel {name}: parameter `{d}` overflows"))?;
            abi.params.push(Param { offset, size });
            offset = offset
                .checked_add(size)
                .ok_or_else(|| format!("kernel {name}: parameter `{d}` overflows"))?;
        }
        abi.param_bytes = offset;
        // Performance directives sit between the parameter list and the body.
        while let Some(l) = lines.peek() {
            let l = l.trim();
            if l.starts_with('{') || l.contains(".entry ") {
                break;
            }
            if let Some(dims) = l.strip_prefix(".maxntid") {
                let n = dims
                    .split(',')
                    .map(|d| d.trim().parse::<u32>().ok())
                    .try_fold(1u32, |acc, d| acc.checked_mul(d?));
                abi.max_threads = Some(n.ok_or_else(|| format!("kernel {name}: `{l}`"))?);
            }
            lines.next();
        }
        out.push((name, abi));
    }
    Ok(out)
}

/// (size, alignment) of a PTX `.param` declaration.
fn param_layout(decl: &str) -> Option<(u32, u32)> {
    let words: Vec<&str> = decl.split_whitespace().collect();
    let mut align = None;
    let mut ty = None;
    let mut i = 1;
    while i < words.len() {
        match words[i] {
            ".align" => {
                align = words.get(i + 1)?.parse().ok();
                i += 2;
            }
            ".ptr" | ".global" | ".const" | ".shared" | ".local" => i += 1,
            w if w.starts_with('.') => {
                ty = Some(w);
                i += 1;
            }
            _ => break,
        }
    }
    let elem: u32 = match ty?.get(2..)? {
        "8" => 1,
        "16" => 2,
        "32" => 4,
        "64" => 8,
        _ => return None,
    };
    let name = words.get(i)?;
    let count: u32 = match name.find('[') {
        Some(b) => name[b + 1..].trim_end_matches(']').parse().ok()?,
        None => 1,
    };
    let align = align.unwrap_or(elem);
    (align > 0 && align.is_power_of_two()).then_some((elem.checked_mul(count)?, align))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_param_layout_and_launch_bounds() {
        let ptx = ".visible .entry add(\n\t.param .u64 add_param_0,\n\t.param .u64 add_param_1,\n\t.param .u32 add_param_2\n)\n.maxntid 256, 1, 1\n{\n}\n\
                   .visible .entry tail(\n\t.param .u32 a,\n\t.param .u64 .ptr .global .align 8 b,\n\t.param .align 4 .b8 c[12]\n)\n{\n}\n\
                   .entry noargs()\n{\n}\n";
        let got = entries(ptx).unwrap();
        let show: Vec<(String, String, u32, Option<u32>)> = got
            .iter()
            .map(|(n, a)| (n.clone(), a.describe_params(), a.param_bytes, a.max_threads))
            .collect();
        assert_eq!(
            show,
            [
                ("add".into(), "0:8 8:8 16:4".into(), 20, Some(256)),
                ("tail".into(), "0:4 8:8 16:12".into(), 28, None),
                ("noargs".into(), "".into(), 0, None),
            ]
        );
    }

    /// Issue 19, item 4: module-scope `.global` / `.const` declarations, with sizes,
    /// spaces and initialisers (one spanning lines); not `.extern` ones, not the compiler's
    /// (`$str`, `__unnamed_1`, `__cudart_*`), not function-local `.shared`; `__managed__`
    /// marked.
    #[test]
    fn issue_19_globals_with_sizes_spaces_and_initialisers() {
        let ptx = ".version 9.0\n.target sm_90\n// .global .u32 in_a_comment;\n\
            .visible .const .align 4 .b8 twiddles[1024];\n\
            .global .align 8 .u64 counter = 7;\n\
            .const .align 4 .b8 _ZN8poseidon3MDSE[4][16] = {1, 0,\n  0, 2};\n\
            .extern .global .align 4 .u32 elsewhere;\n\
            .global .attribute(.managed) .align 4 .u32 managed_v;\n\
            .weak .global .align 4 .u32 _Z2tvILi2EE = 2;\n\
            .global .align 1 .b8 $str[9] = {105, 32, 60};\n\
            .global .align 1 .b8 __unnamed_1[28] = {118};\n\
            .global .align 16 .b8 __cudart_sin_cos_coeffs[128] = {70};\n\
            .global .align 8 .v2 .u32 pair;\n\
            .visible .entry k(\n.param .u64 p\n)\n{\n.shared .align 4 .b8 tile[64];\n\
            ld.global.u32 %r1, [counter];\n}\n";
        let got: Vec<(String, u64, GlobalSpace, bool, bool)> = inspect(ptx.as_bytes())
            .unwrap()
            .globals
            .into_iter()
            .map(|g| (g.symbol, g.size, g.space, g.initialised, g.managed))
            .collect();
        use GlobalSpace::{Constant, Device};
        let want = [
            ("twiddles", 1024, Constant, false, false),
            ("counter", 8, Device, true, false),
            ("_ZN8poseidon3MDSE", 64, Constant, true, false),
            ("managed_v", 4, Device, false, true),
            ("_Z2tvILi2EE", 4, Device, true, false),
            ("pair", 8, Device, false, false),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(s, n, sp, i, m)| (s.to_string(), *n, *sp, *i, *m))
            .collect();
        assert_eq!(got, want);
        let err = globals(".global .f32x9 odd;\n").unwrap_err();
        assert!(err.contains("odd") && err.contains("element type"), "{err}");
        assert!(globals(".const .b8 open[4] = {1,\n").is_err());
    }

    #[test]
    fn real_ptx_reads_and_non_ptx_is_refused() {
        let info = inspect(include_bytes!("../tests/data/elf/add_compute_90.ptx")).unwrap();
        assert_eq!(info.target, "sm_90");
        assert_eq!(info.kernels.len(), 1);
        assert_eq!(info.kernels[0].1.describe_params(), "0:8 8:8 16:4");
        let cubin = include_bytes!("../tests/data/elf/add_sm_80.cubin");
        assert!(inspect(cubin).unwrap_err().contains("binary image"));
        assert!(
            inspect(b".version 9.0\n.target sm_90\0.entry x()")
                .unwrap_err()
                .contains("NUL")
        );
        assert!(inspect(b"hello\n").unwrap_err().contains(".version"));
        assert!(inspect(b".version 9.0\n").unwrap_err().contains(".target"));
        // Found by fuzzing (fuzz/regressions/ptx/bad-empty-target): a `.target` directive
        // with nothing after it read as PTX for the empty target.
        assert!(
            inspect(b".version 9.0\n.target \n")
                .unwrap_err()
                .contains("empty .target")
        );
        assert!(
            inspect(b".version 9.0\n.target sm_90\x1b[31m\n")
                .unwrap_err()
                .contains("0x1b")
        );
        assert!(
            inspect(b".version 9.0\n.target sm_90\n.entry k(\n.param .f32x9 a\n)\n")
                .unwrap_err()
                .contains("kernel k")
        );
    }
}
