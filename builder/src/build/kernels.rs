//! The kernels and device globals of a built blob, by C++ name: each symbol's cpp_demangle
//! spelling recorded once here ([`cuda_aot::demangle::cpp_demangle`]), and the spec's entry
//! points resolved against them by the runtime's rule (which also accepts c++filt's
//! spelling, derived from the symbol).

use anyhow::{Result, anyhow};
use cuda_aot::demangle::cpp_demangle;
use cuda_aot::lookup::{describe_functions, resolve_function};
use cuda_aot::{Function, FunctionName, Global, GlobalName, KernelName, Kind, LaunchAbi};

use super::fail;

/// The kernels of `blob` (a cubin or PTX): symbol, demangled name and signature, launch ABI.
pub fn read(kind: Kind, blob: &[u8]) -> Result<Vec<Function>> {
    let found: Vec<(String, LaunchAbi)> = match kind {
        Kind::Cubin => cuda_aot::elf::inspect(blob)
            .map_err(|e| anyhow!("nvcc wrote a cubin this tool cannot read: {e}"))?
            .kernels
            .into_iter()
            .map(|k| (k.symbol, k.abi))
            .collect(),
        Kind::Ptx => {
            cuda_aot::ptx::inspect(blob)
                .map_err(|e| anyhow!("nvcc wrote PTX this tool cannot read: {e}"))?
                .kernels
        }
    };
    found
        .into_iter()
        .map(|(symbol, abi)| function(&symbol, abi))
        .collect()
}

/// A symbol for messages: demangled with its parameters (`mulmod(unsigned int, unsigned
/// int)`) when it is a C++ symbol, else itself.
pub fn demangled(symbol: &str) -> String {
    demangle(symbol).map_or_else(|| symbol.to_string(), |(_, sig)| sig)
}

/// The device globals of `blob` (a cubin or PTX, `label` naming its module and target):
/// symbol, demangled name, size, memory space, initialised. A `__managed__` variable fails
/// the build: managed memory is not part of a signed module.
pub fn globals(label: &str, kind: Kind, blob: &[u8]) -> Result<Vec<Global>> {
    let found = match kind {
        Kind::Cubin => {
            cuda_aot::elf::inspect(blob)
                .map_err(|e| anyhow!("nvcc wrote a cubin this tool cannot read: {e}"))?
                .globals
        }
        Kind::Ptx => {
            cuda_aot::ptx::inspect(blob)
                .map_err(|e| anyhow!("nvcc wrote PTX this tool cannot read: {e}"))?
                .globals
        }
    };
    found
        .into_iter()
        .map(|g| {
            let name = demangle(&g.symbol).map_or_else(|| g.symbol.clone(), |(name, _)| name);
            if g.managed {
                return Err(fail(
                    format!(
                        "{label}: `{name}` is a __managed__ variable: managed (unified) memory is not supported in a signed module"
                    ),
                    format!(
                        "declare `{name}` __device__ (or __constant__) instead, and fill it from the host after preload with Module::global(\"{name}\").write(..) (docs/runtime.md)"
                    ),
                ));
            }
            Ok(Global {
                symbol: GlobalName::new(&g.symbol).map_err(anyhow::Error::new)?,
                name: KernelName::new(&name).map_err(anyhow::Error::new)?,
                size: g.size,
                space: g.space,
                initialised: g.initialised,
            })
        })
        .collect()
}

/// A mangled C++ symbol's demangled name (no parameters, no return type) and signature (no
/// return type), as the manifest records them; `None` for `extern "C"` names and what does
/// not demangle.
fn demangle(symbol: &str) -> Option<(String, String)> {
    cpp_demangle(symbol).map(|d| (d.name, d.signature))
}

/// One kernel: `extern "C"` symbols are their own name; mangled C++ symbols get their
/// demangled name (no parameters, no return type) and signature (no return type).
pub fn function(symbol: &str, abi: LaunchAbi) -> Result<Function> {
    let sym = FunctionName::new(symbol).map_err(anyhow::Error::new)?;
    let demangled = demangle(symbol);
    let (name, signature) = match demangled {
        Some((name, sig)) => (
            KernelName::new(&name).map_err(anyhow::Error::new)?,
            Some(KernelName::new(&sig).map_err(anyhow::Error::new)?),
        ),
        None => (KernelName::new(symbol).map_err(anyhow::Error::new)?, None),
    };
    Ok(Function {
        symbol: sym,
        name,
        signature,
        abi,
    })
}

/// Each declared entry point must name exactly one kernel of the blob, and every kernel
/// must be declared: no kernel is published that the spec does not list, and no entry
/// point is ambiguous.
pub fn check_entry_points(label: &str, declared: &[String], found: &[Function]) -> Result<()> {
    let mut named: Vec<&str> = Vec::new();
    for e in declared {
        match resolve_function(found, e) {
            Ok(f) => {
                if named.contains(&f.symbol.as_str()) {
                    return Err(fail(
                        format!(
                            "{label}: entry point `{e}` names {}, which another entry point already names",
                            f.display_name()
                        ),
                        "declare each kernel once in entry_points",
                    ));
                }
                named.push(f.symbol.as_str());
            }
            Err(candidates) if candidates.is_empty() => {
                return Err(fail(
                    format!(
                        "{label}: declared entry point `{e}` is not a kernel of the built blob (it has: {})",
                        describe_functions(found)
                    ),
                    "declare the module's kernels in entry_points by C++ name (ns::kernel<T>), full signature or symbol, as listed above; check the -D defines that select which kernels a variant instantiates",
                ));
            }
            Err(candidates) => {
                return Err(fail(
                    format!(
                        "{label}: entry point `{e}` is ambiguous: it matches {}",
                        describe_functions(candidates)
                    ),
                    "name one kernel per entry point: write its full signature or its symbol",
                ));
            }
        }
    }
    let extra: Vec<&Function> = found
        .iter()
        .filter(|f| !named.contains(&f.symbol.as_str()))
        .collect();
    if !extra.is_empty() {
        return Err(fail(
            format!(
                "{label}: the built blob has undeclared kernel(s) {}",
                describe_functions(extra)
            ),
            "add them to the module's entry_points in the release spec (or make them device functions, not __global__)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpp_symbols_get_demangled_names_and_c_symbols_keep_theirs() {
        let f = function("_ZN3ntt7bit_revI6gl64_tEEvPT_ji", LaunchAbi::default()).unwrap();
        assert_eq!(f.name.as_str(), "ntt::bit_rev<gl64_t>");
        assert_eq!(
            f.signature.as_ref().unwrap().as_str(),
            "ntt::bit_rev<gl64_t>(gl64_t*, unsigned int, int)"
        );
        let c = function("gl_add", LaunchAbi::default()).unwrap();
        assert_eq!((c.name.as_str(), c.signature.is_none()), ("gl_add", true));
    }

    /// Variables demangle to their qualified name; function-local statics to
    /// `function(params)::name` (the demangler keeps the enclosing function's parameters, which
    /// tells overloads apart); plain names stay as they are.
    #[test]
    fn global_symbols_get_demangled_names() {
        let name = |s: &str| demangle(s).map(|(n, _)| n);
        assert_eq!(
            name("_ZN8poseidon15ROUND_CONSTANTSE").as_deref(),
            Some("poseidon::ROUND_CONSTANTS")
        );
        assert_eq!(name("_ZZ4bumpvE5calls").as_deref(), Some("bump()::calls"));
        assert_eq!(name("_Z5per_nILi2EE").as_deref(), Some("per_n<2>"));
        assert_eq!(name("counter"), None);
    }

    #[test]
    fn entry_points_resolve_to_exactly_one_kernel_each() {
        let found = [
            function("_ZN3ntt7bit_revI6gl64_tEEvPT_ji", LaunchAbi::default()).unwrap(),
            function("_ZN3ntt7bit_revIjEEvPT_ji", LaunchAbi::default()).unwrap(),
            function("plain", LaunchAbi::default()).unwrap(),
        ];
        let ok = |d: &[&str]| {
            let d: Vec<String> = d.iter().map(|s| s.to_string()).collect();
            check_entry_points("m sm_90", &d, &found).map_err(|e| format!("{e:#}"))
        };
        ok(&[
            "ntt::bit_rev<gl64_t>",
            "ntt::bit_rev<unsigned int>",
            "plain",
        ])
        .unwrap();
        ok(&[
            "_ZN3ntt7bit_revI6gl64_tEEvPT_ji",
            "ntt::bit_rev<unsigned int>(unsigned int*, unsigned int, int)",
            "plain",
        ])
        .unwrap();
        let err = ok(&["ntt::bit_rev", "plain"]).unwrap_err();
        assert!(err.contains("is not a kernel"), "{err}");
        let err = ok(&["ntt::bit_rev<gl64_t>", "plain"]).unwrap_err();
        assert!(
            err.contains(
                "undeclared kernel(s) ntt::bit_rev<unsigned int>(unsigned int*, unsigned int, int)"
            ),
            "{err}"
        );
        let err = ok(&["plain", "plain"]).unwrap_err();
        assert!(err.contains("already names"), "{err}");
        // Two instances share a signature-less name only through overloads.
        let over = [
            function("_Z3sumPi", LaunchAbi::default()).unwrap(),
            function("_Z3sumPf", LaunchAbi::default()).unwrap(),
        ];
        let err = format!(
            "{:#}",
            check_entry_points("m", &["sum".into()], &over).unwrap_err()
        );
        assert!(
            err.contains("`sum` is ambiguous: it matches sum(int*), sum(float*)"),
            "{err}"
        );
    }
}
