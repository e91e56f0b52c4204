//! Looking kernels and globals up by name, as the runtime and the tools do: the exact symbol,
//! or exactly one item whose C++ name matches in canonical form (whitespace normalised,
//! template arguments spelt as c++filt spells them); and how they are listed in messages.

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
    pub(crate) fn matches_canonical(&self, q: &str) -> bool {
        if q == canonical_cpp(self.name.as_str()) {
            return true;
        }
        let Some(sig) = &self.signature else {
            return false;
        };
        let sig = canonical_cpp(sig.as_str());
        q == sig || q.split_once(' ').is_some_and(|(_ret, rest)| rest == sig)
    }
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

/// A C++ name as c++filt (binutils) and Nsight spell it, from the spelling `cpp_demangle`
/// gives (which the manifest records); a c++filt spelling is returned unchanged. The two
/// demanglers differ in template arguments:
/// - integer literals: `(unsigned int)10`, `(long)-3`, `(unsigned long long)5` are `10u`,
///   `-3l`, `5ull` (`int` literals are bare in both; `(char)97`, `(short)2` in both);
/// - pointers to member functions: `&S::f(int) const` is `&(S::f(int) const)`, and a
///   non-const one, `&S::g()`, is `&S::g`.
pub fn cxxfilt_spelling(name: &str) -> String {
    let b = name.as_bytes();
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    while i < b.len() {
        let at_arg = i > 0 && matches!(b[i - 1], b'<' | b',' | b' ') && arg_start(b, i);
        let rewritten = match b[i] {
            b'(' if at_arg => integer_literal(name, i),
            b'&' if at_arg && b.get(i + 1) != Some(&b'(') => member_function(name, i),
            _ => None,
        };
        if let Some((text, next)) = rewritten {
            out.push_str(&text);
            i = next;
            continue;
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

/// Whether `i` starts a template argument: after `<`, `,` or `, `.
fn arg_start(b: &[u8], i: usize) -> bool {
    match b[i - 1] {
        b'<' | b',' => true,
        b' ' => i >= 2 && b[i - 2] == b',',
        _ => false,
    }
}

/// The end of the template argument starting at `from`: the index of the `,` or `>` that
/// closes it (brackets balanced), if any.
fn arg_end(b: &[u8], from: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (j, &c) in b.iter().enumerate().skip(from) {
        match c {
            b'<' | b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b'>' if depth == 0 => return Some(j),
            b'>' => depth -= 1,
            b',' if depth == 0 => return Some(j),
            _ => {}
        }
    }
    None
}

/// `(unsigned int)10` at `i` (a whole template argument): `10u` and where it ends.
fn integer_literal(name: &str, i: usize) -> Option<(String, usize)> {
    const SUFFIX: [(&str, &str); 5] = [
        ("unsigned int", "u"),
        ("unsigned long", "ul"),
        ("long", "l"),
        ("unsigned long long", "ull"),
        ("long long", "ll"),
    ];
    let close = i + name[i..].find(')')?;
    let ty = name[i + 1..close].trim();
    let suffix = SUFFIX.iter().find(|(t, _)| *t == ty)?.1;
    let end = arg_end(name.as_bytes(), close + 1)?;
    let value = name[close + 1..end].trim();
    let digits = value.strip_prefix('-').unwrap_or(value);
    (!digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()))
        .then(|| (format!("{value}{suffix}"), end))
}

/// `&S::f(int) const` or `&S::g()` at `i` (a whole template argument): c++filt's
/// `&(S::f(int) const)` or `&S::g`, and where it ends.
fn member_function(name: &str, i: usize) -> Option<(String, usize)> {
    let b = name.as_bytes();
    let end = arg_end(b, i + 1)?;
    let arg = name[i + 1..end].trim_end();
    // The parameter list: the last top-level `(...)`.
    let mut depth = 0i32;
    let mut open = None;
    for (j, c) in arg.bytes().enumerate() {
        match c {
            b'<' => depth += 1,
            b'>' => depth -= 1,
            b'(' if depth == 0 && open.is_none() => open = Some(j),
            _ => {}
        }
    }
    let open = open?;
    let close = open + arg[open..].rfind(')')?;
    let qualifier = arg[close + 1..].trim();
    let target = &arg[..open];
    if !target.contains("::") {
        return None;
    }
    match qualifier {
        "" => Some((format!("&{target}"), end)),
        "const" => Some((format!("&({})", arg), end)),
        _ => None,
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
