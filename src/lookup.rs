//! Looking kernels and globals up by name, as the runtime and the tools do: the exact symbol,
//! or exactly one item whose C++ name matches in canonical form (whitespace normalised,
//! template arguments spelt as c++filt spells them); and how they are listed in messages.
//!
//! A C++ item is found by the names its manifest records (cpp_demangle's spelling,
//! [`crate::demangle::cpp_demangle`]) and by c++filt's spelling of its symbol
//! ([`crate::demangle::cxxfilt_kernel`]), which cpp_demangle sometimes misprints: a query
//! in either spelling, with or without parameters, finds it, in manifests of any age.

pub use crate::demangle::cxxfilt_spelling;
use crate::demangle::{Demangled, cxxfilt_global, cxxfilt_kernel};
use crate::identity::{Function, Global};

// Matching a query against one kernel or global: how lookup reads a name, so it lives here.
impl Function {
    /// Whether `query` names this kernel: its exact symbol, its demangled name without
    /// parameters, or its full demangled signature (with or without a leading return type),
    /// as `cpp_demangle` or c++filt spell them ([`canonical_cpp`]: `a<4, true>` =
    /// `a<4,true>`, `stage<(unsigned int)10>` = `stage<10u>`).
    pub fn matches(&self, query: &str) -> bool {
        query == self.symbol.as_str() || self.matches_canonical(&canonical_cpp(query))
    }

    /// [`Function::matches`] for a query already in canonical form ([`canonical_cpp`]),
    /// without the symbol: what a resolver calls for every kernel, canonicalising once.
    /// The recorded names first; c++filt's, from the symbol, only when they do not match.
    pub(crate) fn matches_canonical(&self, q: &str) -> bool {
        let recorded = q == canonical_cpp(self.name.as_str())
            || self
                .signature
                .as_ref()
                .is_some_and(|sig| matches_signature(q, sig.as_str()));
        recorded
            || self.cxxfilt().is_some_and(|theirs| {
                q == canonical_cpp(&theirs.name) || matches_signature(q, &theirs.signature)
            })
    }

    /// This kernel's name and signature as c++filt and Nsight print them, from its symbol
    /// ([`cxxfilt_kernel`]); `None` for an `extern "C"` kernel.
    pub fn cxxfilt(&self) -> Option<Demangled> {
        cxxfilt_kernel(self.symbol.as_str())
    }
}

/// Whether canonical query `q` is signature `sig`, with or without a leading return type.
fn matches_signature(q: &str, sig: &str) -> bool {
    let sig = canonical_cpp(sig);
    q == sig || q.split_once(' ').is_some_and(|(_ret, rest)| rest == sig)
}

impl Global {
    /// Whether `query` names this global: its exact symbol or its demangled name, in either
    /// demangler's spelling (as for kernels, [`Function::matches`]).
    pub fn matches(&self, query: &str) -> bool {
        query == self.symbol.as_str() || self.matches_canonical(&canonical_cpp(query))
    }

    /// [`Global::matches`] for a query already in canonical form, without the symbol.
    pub(crate) fn matches_canonical(&self, q: &str) -> bool {
        q == canonical_cpp(self.name.as_str())
            || self
                .cxxfilt()
                .is_some_and(|theirs| q == canonical_cpp(&theirs))
    }

    /// This global's name as c++filt prints it, from its symbol ([`cxxfilt_global`]);
    /// `None` for an unmangled name.
    pub fn cxxfilt(&self) -> Option<String> {
        cxxfilt_global(self.symbol.as_str())
    }
}

/// Resolves `query` to exactly one of `functions` ([`Function::matches`]); an exact symbol
/// wins outright. `Err(candidates)`: every kernel that matched (empty when none did).
pub fn resolve_function<'a>(
    functions: &'a [Function],
    query: &str,
) -> Result<&'a Function, Vec<&'a Function>> {
    resolve(
        functions,
        query,
        |f| f.symbol.as_str(),
        Function::matches_canonical,
    )
}

/// Resolves `query` to exactly one of `globals` ([`Global::matches`]), by the same rule as
/// kernels ([`resolve_function`]): an exact symbol wins outright; `Err(candidates)` holds
/// every global that matched (empty when none did).
pub fn resolve_global<'a>(
    globals: &'a [Global],
    query: &str,
) -> Result<&'a Global, Vec<&'a Global>> {
    resolve(
        globals,
        query,
        |g| g.symbol.as_str(),
        Global::matches_canonical,
    )
}

/// The one name-resolution rule of kernels and globals: the exact symbol, else exactly one
/// item whose names match the query in canonical form (computed once, here).
fn resolve<'a, T>(
    items: &'a [T],
    query: &str,
    symbol: impl Fn(&T) -> &str,
    matches_canonical: impl Fn(&T, &str) -> bool,
) -> Result<&'a T, Vec<&'a T>> {
    if let Some(item) = items.iter().find(|i| symbol(i) == query) {
        return Ok(item);
    }
    let q = canonical_cpp(query);
    let hits: Vec<&T> = items.iter().filter(|i| matches_canonical(i, &q)).collect();
    match hits.as_slice() {
        [one] => Ok(one),
        _ => Err(hits),
    }
}

/// How a kernel is listed in messages: `name` for C kernels, `signature` for C++ ones.
pub fn describe_functions<'a>(functions: impl IntoIterator<Item = &'a Function>) -> String {
    let v: Vec<&str> = functions
        .into_iter()
        .map(|f| f.signature.as_ref().unwrap_or(&f.name).as_str())
        .collect();
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}

/// The form names are compared in: whitespace normalised ([`normalise_cpp`]) and spelled
/// as c++filt does ([`cxxfilt_spelling`]), so a name copied from either demangler (or from
/// Nsight, which prints c++filt's) finds the kernel.
pub fn canonical_cpp(s: &str) -> String {
    normalise_cpp(&cxxfilt_spelling(&normalise_cpp(s)))
}

/// How globals are listed in messages: `name (size bytes, space)`, `(none)` when empty.
pub fn describe_globals<'a>(globals: impl IntoIterator<Item = &'a Global>) -> String {
    let v: Vec<String> = globals
        .into_iter()
        .map(|g| format!("{} ({} bytes, {})", g.name, g.size, g.space))
        .collect();
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}

/// C++ names with whitespace normalised: a space is kept only between two identifier
/// characters (`unsigned int`), so `ns::k<4, true>` and `ns::k<4,true>` compare equal.
pub fn normalise_cpp(s: &str) -> String {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(s.len());
    let mut pending_space = false;
    for c in s.trim().chars() {
        if c.is_whitespace() {
            pending_space = true;
            continue;
        }
        if pending_space && ident(c) && out.chars().last().is_some_and(ident) {
            out.push(' ');
        }
        pending_space = false;
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::tests::global;
    use crate::identity::{GlobalSpace, LaunchAbi};
    use crate::name::{FunctionName, KernelName};

    fn cpp(symbol: &str, name: &str, signature: &str) -> Function {
        Function {
            symbol: FunctionName::new(symbol).unwrap(),
            name: KernelName::new(name).unwrap(),
            signature: Some(KernelName::new(signature).unwrap()),
            abi: LaunchAbi::default(),
        }
    }

    #[test]
    fn kernels_resolve_by_symbol_name_or_signature() {
        let fs = [
            cpp(
                "_ZN3ntt1kILi4ELb1EEEvPmi",
                "ntt::k<4, true>",
                "ntt::k<4, true>(unsigned long*, int)",
            ),
            cpp(
                "_ZN3ntt1kILi8ELb1EEEvPmi",
                "ntt::k<8, true>",
                "ntt::k<8, true>(unsigned long*, int)",
            ),
            cpp("_Z3sumPi", "sum", "sum(int*)"),
            cpp("_Z3sumPf", "sum", "sum(float*)"),
        ];
        let sym = |q: &str| {
            resolve_function(&fs, q)
                .map(|f| f.symbol.as_str())
                .map_err(|c| c.len())
        };
        assert_eq!(sym("ntt::k<4, true>"), Ok("_ZN3ntt1kILi4ELb1EEEvPmi"));
        assert_eq!(sym("ntt::k<4,true>"), Ok("_ZN3ntt1kILi4ELb1EEEvPmi"));
        assert_eq!(sym(" ntt::k< 8 , true >"), Ok("_ZN3ntt1kILi8ELb1EEEvPmi"));
        assert_eq!(
            sym("void ntt::k<8, true>(unsigned long*, int)"),
            Ok("_ZN3ntt1kILi8ELb1EEEvPmi")
        );
        assert_eq!(sym("_Z3sumPf"), Ok("_Z3sumPf"));
        assert_eq!(sym("sum(int*)"), Ok("_Z3sumPi"));
        // Overloads share a name: ambiguous, both candidates returned.
        assert_eq!(sym("sum"), Err(2));
        assert_eq!(sym("ntt::k"), Err(0));
        // `unsigned long` keeps its space; `unsignedlong` is another name.
        assert_eq!(sym("ntt::k<4, true>(unsignedlong*, int)"), Err(0));
        assert_eq!(describe_functions(&fs[2..]), "sum(int*), sum(float*)");
    }

    /// What cpp_demangle 0.5.1 and c++filt (binutils 2.40) print for kernels nvcc 13.0
    /// mangled (`_ZN3ntt5stageILj10ELb1EEEvPm`, `_Z4litsIL...`, `_Z5memfnIXadL_ZNK1S1fEiEEEvPS0_`,
    /// `_Z6memfn2IXadL_ZN1S1gEvEEEvPS0_`): both spellings find the kernel.
    #[test]
    fn names_resolve_as_cpp_demangle_and_cxxfilt_spell_them() {
        let cases = [
            (
                "ntt::stage<(unsigned int)10, true>(unsigned long*)",
                "void ntt::stage<10u, true>(unsigned long*)",
            ),
            (
                "lit<(unsigned int)7, -3, (unsigned long)9, (long)-11, (unsigned long long)5, (long long)-6, (short)2, (unsigned short)3, (unsigned char)4, (signed char)-5, (char)122, false>(int*)",
                "void lit<7u, -3, 9ul, -11l, 5ull, -6ll, (short)2, (unsigned short)3, (unsigned char)4, (signed char)-5, (char)122, false>(int*)",
            ),
            (
                "memfn<&S::f(int) const>(S*)",
                "void memfn<&(S::f(int) const)>(S*)",
            ),
            ("memfn2<&S::g()>(S*)", "void memfn2<&S::g>(S*)"),
            (
                "mul_by<(bls12_381::fp2_t::mem_t const*)0>(unsigned int*)",
                "void mul_by<(bls12_381::fp2_t::mem_t const*)0>(unsigned int*)",
            ),
        ];
        for (ours, theirs) in cases {
            // The listing's c++filt spelling is exactly what c++filt printed.
            assert_eq!(format!("void {}", cxxfilt_spelling(ours)), theirs, "{ours}");
            let f = cpp("_Zsym", &ours[..ours.rfind('(').unwrap()], ours);
            assert!(f.matches(theirs), "{theirs} should find {ours}");
            assert!(f.matches(ours));
            // And the name without parameters, in c++filt's spelling.
            let bare = &theirs["void ".len()..theirs.rfind('(').unwrap()];
            assert!(f.matches(bare), "{bare}");
        }
        // Another value or another type is another kernel.
        let f = cpp(
            "_Zs",
            "ntt::stage<(unsigned int)10, true>",
            "ntt::stage<(unsigned int)10, true>(unsigned long*)",
        );
        assert!(!f.matches("ntt::stage<11u, true>"));
        assert!(!f.matches("ntt::stage<10ul, true>"));
        assert!(!f.matches("ntt::stage<10, true>"));
        // Idempotent on c++filt's own spelling; casts it does not use are left alone.
        assert_eq!(cxxfilt_spelling("k<10u, (char)97>"), "k<10u, (char)97>");
        assert_eq!(cxxfilt_spelling("f(unsigned int)"), "f(unsigned int)");
    }

    /// Issue 44, item 3: the kernels of kernels/foreign/src/msm_templates.cu as nvcc 13.0
    /// mangled them, one per kind of template argument, each with what c++filt (binutils
    /// 2.40) prints for it. Every spelling (c++filt's with or without `void` and without
    /// parameters, cpp_demangle's as the manifest records it with and without parameters,
    /// the symbol) finds exactly that kernel among them all.
    #[test]
    fn issue_44_every_spelling_of_each_template_argument_kind_finds_its_kernel() {
        let kinds = [
            (
                "null pointer to a nested type reached by substitution",
                "_ZN3msm10load_basesIN3b125fp2_tENS2_5mem_tELPKS3_0EEEvPjPKT0_j",
                "void msm::load_bases<b12::fp2_t, b12::fp2_t::mem_t, (b12::fp2_t::mem_t const*)0>(unsigned int*, b12::fp2_t::mem_t const*, unsigned int)",
            ),
            (
                "address of a variable",
                "_ZN3msm10load_basesIN3b124fp_tENS2_5mem_tEXadL_ZNS1_4G1_XEEEEEvPjPKT0_j",
                "void msm::load_bases<b12::fp_t, b12::fp_t::mem_t, &b12::G1_X>(unsigned int*, b12::fp_t::mem_t const*, unsigned int)",
            ),
            (
                "pointer to a data member",
                "_ZN3msm10coordinateIN3b125fp2_tEXadL_ZNS2_2c1EEEEEvPjPKT_j",
                "void msm::coordinate<b12::fp2_t, &b12::fp2_t::c1>(unsigned int*, b12::fp2_t const*, unsigned int)",
            ),
            (
                "null pointer to a data member",
                "_ZN3msm10coordinateIN3b125fp2_tELMS2_NS1_4fp_tE0EEEvPjPKT_j",
                "void msm::coordinate<b12::fp2_t, (b12::fp_t b12::fp2_t::*)0>(unsigned int*, b12::fp2_t const*, unsigned int)",
            ),
            (
                "pointer to a const member function",
                "_ZN3msm9read_withIN3b125fp2_tEXadL_ZNKS2_3lowEvEEEEvPjPKT_j",
                "void msm::read_with<b12::fp2_t, &(b12::fp2_t::low() const)>(unsigned int*, b12::fp2_t const*, unsigned int)",
            ),
            (
                "enums, scoped and unscoped",
                "_ZN3msm8describeILN3b126form_tE2ELNS1_7group_tE2EEEvPjj",
                "void msm::describe<(b12::form_t)2, (b12::group_t)2>(unsigned int*, unsigned int)",
            ),
            (
                "nullptr",
                "_ZN3msm8finaliseILDnEEEvPjPKjj",
                "void msm::finalise<decltype(nullptr)>(unsigned int*, unsigned int const*, unsigned int)",
            ),
            (
                "address of a function template",
                "_ZN3msm8finaliseIXadL_ZN3b126reduceILj7EEEjjEEEEvPjPKjj",
                "void msm::finalise<&(unsigned int b12::reduce<7u>(unsigned int))>(unsigned int*, unsigned int const*, unsigned int)",
            ),
            (
                "negative and 64-bit literals",
                "_ZN3msm6recodeILin5ELln3ELm18446744069414584321ELxn6ELy18446744073709551615ELj4294967295EEEvPmPKmj",
                "void msm::recode<-5, -3l, 18446744069414584321ul, -6ll, 18446744073709551615ull, 4294967295u>(unsigned long*, unsigned long const*, unsigned int)",
            ),
            (
                "128-bit literals",
                "_ZN3msm9fold_wideILo18446744073709551617ELnn1180591620717411303424EEEvPmPKmj",
                "void msm::fold_wide<(unsigned __int128)18446744073709551617, (__int128)-1180591620717411303424>(unsigned long*, unsigned long const*, unsigned int)",
            ),
            (
                "bool and chars",
                "_ZN3msm9tag_lanesILb1ELc71ELan1ELh200EEEvPjj",
                "void msm::tag_lanes<true, (char)71, (signed char)-1, (unsigned char)200>(unsigned int*, unsigned int)",
            ),
            (
                "bool and chars, other values",
                "_ZN3msm9tag_lanesILb0ELc72ELa3ELh0EEEvPjj",
                "void msm::tag_lanes<false, (char)72, (signed char)3, (unsigned char)0>(unsigned int*, unsigned int)",
            ),
            (
                "nested templates",
                "_ZN3msm10accumulateIN3b128bucket_tINS1_6xyzz_tINS1_5fp2_tEEELj4EEEEEvPjPKjS9_j",
                "void msm::accumulate<b12::bucket_t<b12::xyzz_t<b12::fp2_t>, 4u> >(unsigned int*, unsigned int const*, unsigned int const*, unsigned int)",
            ),
            (
                "template template parameter",
                "_ZN3msm12clear_pointsIN3b126xyzz_tENS1_4fp_tEEEvPjPT_IT0_Ej",
                "void msm::clear_points<b12::xyzz_t, b12::fp_t>(unsigned int*, b12::xyzz_t<b12::fp_t>*, unsigned int)",
            ),
        ];
        // What the builder records: cpp_demangle's spelling.
        let fs: Vec<Function> = kinds
            .iter()
            .map(|(_, symbol, _)| {
                let d = crate::demangle::cpp_demangle(symbol).unwrap();
                cpp(symbol, &d.name, &d.signature)
            })
            .collect();
        let mut misprinted = 0;
        for (f, (kind, symbol, theirs)) in fs.iter().zip(kinds) {
            let ours = f.cxxfilt().unwrap();
            // The listing's c++filt spelling is exactly c++filt's text.
            assert_eq!(format!("void {}", ours.signature), theirs, "{kind}");
            let bare = &theirs["void ".len()..theirs.rfind('(').unwrap()];
            assert_eq!(ours.name, bare, "{kind}");
            let recorded = f.signature.as_ref().unwrap().as_str();
            misprinted += usize::from(
                normalise_cpp(&cxxfilt_spelling(recorded)) != normalise_cpp(&ours.signature),
            );
            for q in [
                theirs,
                &theirs["void ".len()..],
                bare,
                recorded,
                f.name.as_str(),
                symbol,
            ] {
                let found = resolve_function(&fs, q)
                    .unwrap_or_else(|c| panic!("{kind}: {q}: {} candidates", c.len()));
                assert_eq!(found.symbol.as_str(), symbol, "{kind}: {q}");
            }
        }
        // cpp_demangle misprints both load_bases (`b12::fp2_t const::mem_t*`, in the null
        // pointer and in the `const M*` parameter), the member function, the template
        // template parameter, and leaves out the function template's return type.
        assert_eq!(misprinted, 5);
    }

    #[test]
    fn globals_resolve_by_symbol_or_demangled_name() {
        let gs = [
            global(
                "_ZN8poseidon3MDSE",
                "poseidon::MDS",
                64,
                GlobalSpace::Constant,
            ),
            global("_ZZ4bumpiE1n", "bump::n", 4, GlobalSpace::Device),
            global("_ZZ4bumpfE1n", "bump::n", 4, GlobalSpace::Device),
            global("counter", "counter", 8, GlobalSpace::Device),
        ];
        let sym = |q: &str| {
            resolve_global(&gs, q)
                .map(|g| g.symbol.as_str())
                .map_err(|c| c.len())
        };
        assert_eq!(sym("poseidon::MDS"), Ok("_ZN8poseidon3MDSE"));
        assert_eq!(sym(" poseidon :: MDS "), Ok("_ZN8poseidon3MDSE"));
        assert_eq!(sym("_ZN8poseidon3MDSE"), Ok("_ZN8poseidon3MDSE"));
        assert_eq!(sym("counter"), Ok("counter"));
        assert_eq!(sym("bump::n"), Err(2));
        assert_eq!(sym("_ZZ4bumpfE1n"), Ok("_ZZ4bumpfE1n"));
        assert_eq!(sym("MDS"), Err(0));
        assert_eq!(
            describe_globals(&gs[..1]),
            "poseidon::MDS (64 bytes, constant)"
        );
        assert_eq!(describe_globals([]), "(none)");
    }
}
