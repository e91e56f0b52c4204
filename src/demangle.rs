//! Demangling kernel and global symbols, the one place it is done: the spelling manifests
//! record ([`cpp_demangle()`]: the `cpp_demangle` crate's text, verbatim) and the one c++filt
//! (binutils) and Nsight print ([`cxxfilt_kernel`], [`cxxfilt_global`]), derived from the
//! symbol itself with cpp_demangle's misprints repaired and spelt the way c++filt spells
//! template arguments ([`cxxfilt_spelling`]).
//!
//! ```
//! use cuda_aot::demangle::{cpp_demangle, cxxfilt_kernel};
//!
//! // A kernel templated on <class F, class M, const M* P>, with P = nullptr.
//! let symbol = "_Z3tk3IN3b125fp2_tENS1_5mem_tELPKS2_0EEvPj";
//! // cpp_demangle 0.5.1 puts the `const` inside the name (what manifests record)...
//! assert_eq!(
//!     cpp_demangle(symbol).unwrap().name,
//!     "tk3<b12::fp2_t, b12::fp2_t::mem_t, (b12::fp2_t const::mem_t*)0>"
//! );
//! // ...c++filt prints it where it belongs.
//! assert_eq!(
//!     cxxfilt_kernel(symbol).unwrap().signature,
//!     "tk3<b12::fp2_t, b12::fp2_t::mem_t, (b12::fp2_t::mem_t const*)0>(unsigned int*)"
//! );
//! ```

use std::fmt;

use cpp_demangle::{DemangleNodeType, DemangleOptions, DemangleWrite, Symbol};

/// A C++ symbol's demangled name without parameters and its signature, neither with a
/// return type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demangled {
    /// The name without parameters: `ntt::bit_rev<gl64_t>`.
    pub name: String,
    /// The signature: `ntt::bit_rev<gl64_t>(gl64_t*, unsigned int)`.
    pub signature: String,
}

/// The `cpp_demangle` crate's spelling of a mangled C++ symbol, what the builder records in
/// manifests (`Function::name`, `Function::signature`, `Global::name`); `None` for
/// `extern "C"` names and what does not demangle.
///
/// Verbatim, misprints included: cpp_demangle 0.5.1 prints a qualifier, pointer or
/// parameter list that applies to a nested name reached through a substitution after the
/// first part of that name (`(b12::fp2_t const::mem_t*)0`, `&b12::fp2_t()::low const`).
/// Manifests keep exactly what earlier builds recorded, so a name copied from an earlier
/// listing still finds its kernel; c++filt's spelling is derived from the symbol
/// ([`cxxfilt_kernel`]) and finds it as well.
pub fn cpp_demangle(symbol: &str) -> Option<Demangled> {
    let s = symbol_of(symbol)?;
    let name = s
        .demangle_with_options(&DemangleOptions::new().no_params().no_return_type())
        .ok()?;
    let signature = s
        .demangle_with_options(&DemangleOptions::new().no_return_type())
        .ok()?;
    Some(Demangled { name, signature })
}

/// A kernel's symbol as c++filt (binutils 2.40) and Nsight spell it, without the `void`
/// c++filt prints before a template kernel's name: the name as `c++filt -p` prints it and
/// the signature. `None` for `extern "C"` names and what does not demangle.
///
/// cpp_demangle's output with its misprints repaired (`Repair`, from the structure it
/// reports while printing), nested return types kept (c++filt prints the address of a
/// function template as `&(int m::tf<int>(int))`), then spelt as c++filt spells template
/// arguments ([`cxxfilt_spelling`]).
pub fn cxxfilt_kernel(symbol: &str) -> Option<Demangled> {
    let s = symbol_of(symbol)?;
    let spell = |options: &DemangleOptions| {
        let text = repaired(&s, options)?;
        // A kernel returns void; c++filt prints it before a template's name only.
        let text = text.strip_prefix("void ").unwrap_or(&text);
        Some(cxxfilt_spelling(text))
    };
    Some(Demangled {
        name: spell(&DemangleOptions::new().no_params())?,
        signature: spell(&DemangleOptions::new())?,
    })
}

/// A device global's symbol as c++filt spells it: a variable's qualified name
/// (`poseidon::MDS`) or a function-local static's (`bump()::calls`, `k<1>()::x`: without
/// the function's return type, as c++filt prints it; so a function template's address in a
/// variable template's arguments lacks its return type too). `None` for unmangled names and
/// what does not demangle.
pub fn cxxfilt_global(symbol: &str) -> Option<String> {
    let s = symbol_of(symbol)?;
    let text = repaired(&s, &DemangleOptions::new().no_return_type())?;
    Some(cxxfilt_spelling(&text))
}

/// The parsed symbol, if `symbol` is a mangled C++ name.
fn symbol_of(symbol: &str) -> Option<Symbol<&str>> {
    symbol
        .starts_with("_Z")
        .then(|| Symbol::new(symbol).ok())
        .flatten()
}

/// cpp_demangle's text of `s` with its misprints repaired ([`Repair`]).
fn repaired(s: &Symbol<&str>, options: &DemangleOptions) -> Option<String> {
    let mut w = Repair::default();
    s.structured_demangle(&mut w, options).ok()?;
    Some(w.finish())
}

/// A writer for cpp_demangle's structured output that puts back what it misplaces.
///
/// cpp_demangle prints a type's pending suffixes (a cv-qualifier, `*`, `&`, a member
/// function's parameter list) as soon as it has printed a nested name, which is right when
/// the nested name is the whole type (`b12::fp2_t::mem_t const*`). When a nested name that a
/// substitution or a template parameter stands for is only the *first part* of what is
/// being printed, the suffix comes out too early: `PKS2_`, where `S2_` is
/// `b12::fp2_t::mem_t` and its first part `S1_` the nested name `b12::fp2_t`, prints
/// `b12::fp2_t const::mem_t*`; `PT_IT0_E`, a template template parameter bound to
/// `b12::xyzz_t`, prints `b12::xyzz_t*<b12::fp_t>`.
///
/// The repair follows that mechanism, from the nodes cpp_demangle reports:
/// - when a first part (a nested name, prefix, template prefix or template parameter)
///   closes inside a name (a nested name, prefix, template prefix or template parameter),
///   what is written before that name goes on (its `::` or the `<` of its template
///   arguments) is held back and written when the name closes, after its last part;
///   held-back text that is held again at the next level moves up with it, in order
///   (`b12::fp2_t const::mem_t*::limb_t` becomes `b12::fp2_t::mem_t::limb_t const*`);
/// - a template parameter that closes elsewhere with text held back writes it before
///   whatever comes next, unless that is template arguments: then after their `>`.
#[derive(Default)]
struct Repair {
    out: String,
    open: Vec<Node>,
    /// Text a template parameter held back: written before whatever comes next, unless
    /// that is template arguments.
    pending: Option<String>,
    /// That text, from the `<` of template arguments until their node opens.
    carried: Option<String>,
    /// That text, from the close of the template arguments' node until their `>`.
    closing: Option<String>,
}

/// One open node of the structured output.
struct Node {
    kind: DemangleNodeType,
    /// Text to write when this node closes: suffixes a first part printed too early.
    held: String,
    /// Whether text written now belongs in `held` (until this name goes on).
    holding: bool,
    /// For template arguments: text to write after their `>`.
    after: Option<String>,
}

/// Whether a node of this kind prints a name that can go on (`::`, template arguments).
fn is_name(kind: DemangleNodeType) -> bool {
    matches!(
        kind,
        DemangleNodeType::NestedName
            | DemangleNodeType::Prefix
            | DemangleNodeType::TemplatePrefix
            | DemangleNodeType::TemplateParam
    )
}

impl Repair {
    /// Where text written now goes: the innermost node holding text back, else the output.
    fn sink(&mut self) -> &mut String {
        match self.open.iter_mut().rev().find(|n| n.holding) {
            Some(n) => &mut n.held,
            None => &mut self.out,
        }
    }

    /// Writes a template parameter's held-back text where it stands: what came next was not
    /// template arguments (or was, and their `>` is written).
    fn write_pending(&mut self) {
        let texts = [
            self.pending.take(),
            self.carried.take(),
            self.closing.take(),
        ];
        for text in texts.into_iter().flatten() {
            self.sink().push_str(&text);
        }
    }

    /// The innermost node's name goes on (`::`, template arguments): stop holding text
    /// back, unless the held text is an unfinished parameter list.
    fn name_goes_on(&mut self) {
        if let Some(n) = self.open.last_mut()
            && n.holding
            && n.held.matches('(').count() == n.held.matches(')').count()
        {
            n.holding = false;
        }
    }

    fn finish(mut self) -> String {
        while !self.open.is_empty() {
            self.pop_demangle_node();
        }
        self.write_pending();
        self.out
    }
}

impl DemangleWrite for Repair {
    fn push_demangle_node(&mut self, kind: DemangleNodeType) {
        let after = match kind {
            DemangleNodeType::TemplateArgs => self.carried.take(),
            _ => None,
        };
        self.write_pending();
        self.open.push(Node {
            kind,
            held: String::new(),
            holding: false,
            after,
        });
    }

    // cpp_demangle writes the `<` of template arguments alone, just before their node
    // opens, and their `>` alone, just after it closes.
    fn write_string(&mut self, s: &str) -> fmt::Result {
        let closing = if s == ">" { self.closing.take() } else { None };
        match s {
            "<" => {
                let pending = self.pending.take();
                self.write_pending();
                self.carried = pending;
                self.name_goes_on();
            }
            "::" => {
                self.write_pending();
                self.name_goes_on();
            }
            _ => self.write_pending(),
        }
        let sink = self.sink();
        sink.push_str(s);
        sink.push_str(closing.as_deref().unwrap_or_default());
        Ok(())
    }

    fn pop_demangle_node(&mut self) {
        self.write_pending();
        let Some(mut node) = self.open.pop() else {
            return;
        };
        self.closing = node.after.take();
        match self.open.last_mut() {
            Some(parent) if is_name(node.kind) && is_name(parent.kind) => {
                parent.held.push_str(&node.held);
                parent.holding = true;
            }
            _ if node.kind == DemangleNodeType::TemplateParam && !node.held.is_empty() => {
                self.pending = Some(node.held);
            }
            _ => self.sink().push_str(&node.held),
        }
    }
}

/// A C++ name as c++filt (binutils) and Nsight spell it, from the spelling `cpp_demangle`
/// gives (which the manifest records); a c++filt spelling is returned unchanged. The two
/// demanglers differ in template arguments:
/// - integer literals: `(unsigned int)10`, `(long)-3`, `(unsigned long long)5` are `10u`,
///   `-3l`, `5ull` (`int` literals are bare in both; `(char)97`, `(short)2`,
///   `(__int128)-7` in both);
/// - `nullptr`: the value (`k<nullptr>`) and the type (`std::nullptr_t`) are both
///   `decltype(nullptr)`;
/// - addresses (`address_of`): a qualified function followed only by its parameters loses
///   them (`&m::vf(int)` is `&m::vf`, `&S::g()` is `&S::g`); any other function is
///   parenthesised (`&(S::f(int) const)`, `&(gf(int))`, `&(int m::tf<int>(int))`), and so
///   is a function-local static (`&(loc()::x)`).
///
/// It reads correct C++: the misprints cpp_demangle makes in some nested names are
/// repaired from the symbol ([`cxxfilt_kernel`]), not here. Lookup applies it to names and
/// queries alike (`lookup::canonical_cpp`).
pub fn cxxfilt_spelling(name: &str) -> String {
    let b = name.as_bytes();
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    while i < b.len() {
        let at_arg = i > 0 && matches!(b[i - 1], b'<' | b',' | b' ') && arg_start(b, i);
        let rewritten = match b[i] {
            b'(' if at_arg => integer_literal(name, i),
            b'&' if at_arg && b.get(i + 1) != Some(&b'(') => address_of(name, i),
            b'n' if at_arg => null_pointer(name, i),
            b's' if i == 0 || !(is_ident(b[i - 1]) || b[..i].ends_with(b"::")) => name[i..]
                .strip_prefix(NULLPTR_T)
                .filter(|rest| !rest.bytes().next().is_some_and(is_ident))
                .map(|_| (DECLTYPE_NULLPTR.to_string(), i + NULLPTR_T.len())),
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

/// How c++filt spells `nullptr` and its type.
const DECLTYPE_NULLPTR: &str = "decltype(nullptr)";
/// How cpp_demangle spells the type of `nullptr`.
const NULLPTR_T: &str = "std::nullptr_t";

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
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

/// `nullptr` at `i` (a whole template argument): `decltype(nullptr)` and where it ends.
fn null_pointer(name: &str, i: usize) -> Option<(String, usize)> {
    let end = arg_end(name.as_bytes(), i)?;
    (name[i..end].trim_end() == "nullptr").then(|| (DECLTYPE_NULLPTR.to_string(), end))
}

/// `&X` at `i` (a whole template argument) as c++filt prints it, by libiberty's rule for the
/// address of an entity: a qualified function name followed only by its parameters is
/// printed without them (`&m::vf(int)` is `&m::vf`, `&S::g()` is `&S::g`); anything else
/// with a parameter list (a member function with qualifiers, `&S::f(int) const`; an
/// unqualified function, `&gf(int)`; a template with its return type, `&int m::tf<int>(int)`;
/// a function-local static, `&loc()::x`) is parenthesised; a variable or data member
/// (`&b12::GEN_X`, `&S::im`) stays as it is. Returns the text and where the argument ends.
fn address_of(name: &str, i: usize) -> Option<(String, usize)> {
    let end = arg_end(name.as_bytes(), i + 1)?;
    // Its own template arguments spelt as c++filt spells them (`&(unsigned int
    // b12::reduce<7u>(unsigned int))`).
    let arg = cxxfilt_spelling(name[i + 1..end].trim_end());
    let arg = arg.as_str();
    // The parameter list: the first top-level `(...)`; a top-level space before it ends a
    // return type.
    let (mut depth, mut open, mut close, mut spaced) = (0i32, None, None, false);
    for (j, c) in arg.bytes().enumerate() {
        match c {
            b' ' if depth == 0 && open.is_none() => spaced = true,
            b'<' => depth += 1,
            b'>' => depth -= 1,
            b'(' if depth == 0 => {
                open = open.or(Some(j));
                depth += 1;
            }
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 && close.is_none() {
                    close = Some(j);
                }
            }
            _ => {}
        }
    }
    let (open, close) = (open?, close?);
    let callee = &arg[..open];
    let qualified_name = callee.contains("::") && !callee.ends_with('>') && !spaced;
    let text = if qualified_name && close + 1 == arg.len() {
        format!("&{callee}")
    } else {
        format!("&({arg})")
    };
    Some((text, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What c++filt (binutils 2.40) prints for symbols nvcc 13.0 and g++ 12 mangled, less
    /// the leading `void ` of templates, for each misprint of cpp_demangle 0.5.1 and each
    /// spelling of a template argument that differs (kernels/foreign/src/msm_templates.cu
    /// has one kernel per kind; xtask's foreign_kernels test runs c++filt on them).
    const CXXFILT: [(&str, &str); 17] = [
        // A const pointer to a substituted nested name: `(b12::fp2_t const::mem_t*)0`.
        (
            "_Z3tk3IN3b125fp2_tENS1_5mem_tELPKS2_0EEvPj",
            "tk3<b12::fp2_t, b12::fp2_t::mem_t, (b12::fp2_t::mem_t const*)0>(unsigned int*)",
        ),
        // The same in a namespace, and in the parameter list: `b12::fp2_t const::mem_t*`.
        (
            "_ZN3msm10load_basesIN3b125fp2_tENS2_5mem_tELPKS3_0EEEvPjPKT0_j",
            "msm::load_bases<b12::fp2_t, b12::fp2_t::mem_t, (b12::fp2_t::mem_t const*)0>(unsigned int*, b12::fp2_t::mem_t const*, unsigned int)",
        ),
        (
            "_Z3tk4IN3b125fp2_tENS1_5mem_tELPS2_0EEvPj",
            "tk4<b12::fp2_t, b12::fp2_t::mem_t, (b12::fp2_t::mem_t*)0>(unsigned int*)",
        ),
        (
            "_Z3tk5IN3b125fp2_tENS1_5mem_tELPVKS2_0EEvPj",
            "tk5<b12::fp2_t, b12::fp2_t::mem_t, (b12::fp2_t::mem_t const volatile*)0>(unsigned int*)",
        ),
        (
            "_Z3tk6IN3b125fp2_tENS1_5mem_tELPKPKS2_0EEvPj",
            "tk6<b12::fp2_t, b12::fp2_t::mem_t, (b12::fp2_t::mem_t const* const*)0>(unsigned int*)",
        ),
        // Two levels: `(b12::fp2_t const::mem_t*::limb_t)0`.
        (
            "_Z3tk7IN3b125fp2_tENS1_5mem_tENS2_6limb_tELPKS3_0EEvPj",
            "tk7<b12::fp2_t, b12::fp2_t::mem_t, b12::fp2_t::mem_t::limb_t, (b12::fp2_t::mem_t::limb_t const*)0>(unsigned int*)",
        ),
        // Parameters: `b12::fp2_t const::mem_t*`, `b12::fp2_t&::mem_t`, `b12::fp2_t*::mem_t`.
        (
            "_Z2paN3b125fp2_tEPKNS0_5mem_tERS2_PS1_",
            "pa(b12::fp2_t, b12::fp2_t::mem_t const*, b12::fp2_t::mem_t const&, b12::fp2_t::mem_t*)",
        ),
        (
            "_Z1kIN3b125fp2_tEEvPKNT_5mem_tERS3_",
            "k<b12::fp2_t>(b12::fp2_t::mem_t const*, b12::fp2_t::mem_t&)",
        ),
        (
            "_Z2pcN3b126xyzz_tINS_5fp2_tEEEPKNS2_5mem_tE",
            "pc(b12::xyzz_t<b12::fp2_t>, b12::xyzz_t<b12::fp2_t>::mem_t const*)",
        ),
        // A template template parameter: `b12::xyzz_t*<b12::fp_t>`.
        (
            "_ZN3msm12clear_pointsIN3b126xyzz_tENS1_4fp_tEEEvPjPT_IT0_Ej",
            "msm::clear_points<b12::xyzz_t, b12::fp_t>(unsigned int*, b12::xyzz_t<b12::fp_t>*, unsigned int)",
        ),
        (
            "_Z1qIN3b126xyzz_tENS0_5fp2_tEEvPKT_IT0_EPNS5_5aff_tERS5_",
            "q<b12::xyzz_t, b12::fp2_t>(b12::xyzz_t<b12::fp2_t> const*, b12::xyzz_t<b12::fp2_t>::aff_t*, b12::xyzz_t<b12::fp2_t>&)",
        ),
        // Member functions of a substituted class: `&b12::fp2_t(int, char)::h const volatile`.
        (
            "_Z2cvIN3b125fp2_tEXadL_ZNVKS1_1hEicEEEvPj",
            "cv<b12::fp2_t, &(b12::fp2_t::h(int, char) const volatile)>(unsigned int*)",
        ),
        (
            "_Z2wrIN3b125fp2_tEXadL_ZNS1_1gEiEEEvPj",
            "wr<b12::fp2_t, &b12::fp2_t::g>(unsigned int*)",
        ),
        (
            "_Z2rrIN3b125fp2_tEXadL_ZNOS1_1rEvEEEvPj",
            "rr<b12::fp2_t, &(b12::fp2_t::r() &&)>(unsigned int*)",
        ),
        // Addresses of a function template (with its return type), an unqualified function
        // and a function-local static.
        (
            "_ZN3msm8finaliseIXadL_ZN3b126reduceILj7EEEjjEEEEvPjPKjj",
            "msm::finalise<&(unsigned int b12::reduce<7u>(unsigned int))>(unsigned int*, unsigned int const*, unsigned int)",
        ),
        ("_Z2fpIXadL_Z2gfiEEEvPj", "fp<&(gf(int))>(unsigned int*)"),
        (
            "_Z1kIXadL_ZZ3locvE1xEEEvPj",
            "k<&(loc()::x)>(unsigned int*)",
        ),
    ];

    #[test]
    fn kernels_are_spelt_as_cxxfilt_prints_them() {
        for (symbol, theirs) in CXXFILT {
            let ours = cxxfilt_kernel(symbol).unwrap();
            assert_eq!(ours.signature, theirs, "{symbol}");
            // `c++filt -p`: the same without the parameter list.
            assert_eq!(ours.name, theirs[..theirs.rfind('(').unwrap()], "{symbol}");
        }
        assert_eq!(cxxfilt_kernel("ntt_scale"), None);
        assert_eq!(cxxfilt_kernel("_Znot a symbol"), None);
    }

    /// The manifest keeps cpp_demangle's text, misprint and all.
    #[test]
    fn manifests_record_cpp_demangle_verbatim() {
        let d = cpp_demangle("_Z2rdIN3b124fp_tEXadL_ZNKS1_3lowEvEEEvPj").unwrap();
        assert_eq!(d.name, "rd<b12::fp_t, &b12::fp_t()::low const>");
        assert_eq!(
            d.signature,
            "rd<b12::fp_t, &b12::fp_t()::low const>(unsigned int*)"
        );
        assert_eq!(
            cxxfilt_kernel("_Z2rdIN3b124fp_tEXadL_ZNKS1_3lowEvEEEvPj")
                .unwrap()
                .name,
            "rd<b12::fp_t, &(b12::fp_t::low() const)>"
        );
    }

    /// Globals: variables, function-local statics (whose function keeps its parameters
    /// and, in a const member function, its qualifier) and a template's local static.
    #[test]
    fn globals_are_spelt_as_cxxfilt_prints_them() {
        for (symbol, theirs) in [
            ("_ZN8poseidon3MDSE", "poseidon::MDS"),
            ("_ZZ4bumpvE5calls", "bump()::calls"),
            ("_ZZNK1S1fEvE1n", "S::f() const::n"),
            ("_ZZ1kILi1EEvvE1x", "k<1>()::x"),
        ] {
            assert_eq!(cxxfilt_global(symbol).as_deref(), Some(theirs), "{symbol}");
        }
        assert_eq!(cxxfilt_global("counter"), None);
    }

    /// c++filt's spellings of template arguments, from correct C++ text.
    #[test]
    fn template_arguments_are_spelt_as_cxxfilt_spells_them() {
        for (ours, theirs) in [
            ("k<nullptr>", "k<decltype(nullptr)>"),
            (
                "k<nullptr, 1>(std::nullptr_t)",
                "k<decltype(nullptr), 1>(decltype(nullptr))",
            ),
            ("k<std::nullptr_t>", "k<decltype(nullptr)>"),
            (
                "k<my::std::nullptr_t, nullptr_tag>",
                "k<my::std::nullptr_t, nullptr_tag>",
            ),
            ("fp<&gf(int)>", "fp<&(gf(int))>"),
            ("fp<&m::vf(int)>", "fp<&m::vf>"),
            ("fp<&int m::tf<int>(int)>", "fp<&(int m::tf<int>(int))>"),
            ("fp<&b12::fp2_t::r() &&>", "fp<&(b12::fp2_t::r() &&)>"),
            ("fp<&loc()::x>", "fp<&(loc()::x)>"),
            ("fp<&b12::G1_X, &S::dm>", "fp<&b12::G1_X, &S::dm>"),
            (
                "fp<&unsigned int r<(unsigned int)7>(unsigned int)>",
                "fp<&(unsigned int r<7u>(unsigned int))>",
            ),
        ] {
            assert_eq!(cxxfilt_spelling(ours), theirs, "{ours}");
            // c++filt's own spelling is left as it is.
            assert_eq!(cxxfilt_spelling(theirs), theirs, "{theirs}");
        }
    }
}
