//! The undefined-extern check (nvcc's #20044-D): an `extern` device variable no file of a
//! one-source module defines, which nvcc would compile as a private zero-filled copy. The
//! build makes the diagnostic an error ([`super::spec::EXTERN_CHECK`]), reads it from
//! nvcc's output, names the flags that tried to hide it, and refuses a source whose pragma
//! turns it off.

use std::path::Path;

use anyhow::{Context as _, Result};

use super::spec::{Job, ModuleSpec};
use crate::advice::fail;

/// An `extern` device variable nvcc compiled as a private definition because no file of
/// the compilation defines it (whole-program mode, #20044-D): its symbol and where it is
/// declared (`file(line)`), from each such diagnostic in nvcc's output. The build makes
/// it an error ([`super::spec::EXTERN_CHECK`]); its warning form is read too.
///
/// The module's cubin would carry a zero-filled copy of the table the source meant to
/// share with another file: kernels reading it compute garbage.
pub fn undefined_externs(output: &str) -> Vec<(String, String)> {
    output
        .lines()
        .filter_map(|l| {
            let (at, rest) = l.split_once("extern declaration of the entity")?;
            if !rest.contains("is treated as a static definition") {
                return None;
            }
            // `file(line): warning #20044-D: ` or `file(line): error: `.
            let at = at.split_once(": ").map_or(at, |(file, _)| file);
            let symbol = rest
                .split_whitespace()
                .next()?
                .trim_matches(|c| c == '"' || c == '\'' || c == '`');
            Some((symbol.to_string(), at.trim().to_string()))
        })
        .collect()
}

/// The flags of `flags` that would hide #20044-D from nvcc's output (`-w`,
/// `--disable-warnings`, and any diagnostic flag naming 20044, in any of its spellings:
/// `-diag-suppress=20044`, `--diag-suppress 20044`, `-Xcudafe --diag_suppress=20044`), as
/// the spec wrote them, for the error that says the build caught the extern regardless.
pub fn extern_check_hiders(flags: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, f) in flags.iter().enumerate() {
        let hides_all = matches!(f.as_str(), "-w" | "--disable-warnings");
        let names_it =
            f.contains("20044") && !f.contains("diag_error") && !f.contains("diag-error");
        if hides_all || names_it {
            // A value given as the next flag (`-Xcudafe`, `--diag_suppress=20044`) is shown
            // with the flag that takes it.
            match i.checked_sub(1).map(|p| flags[p].as_str()) {
                Some(
                    prev @ ("-Xcudafe" | "--compiler-options" | "-diag-suppress"
                    | "--diag-suppress"),
                ) if names_it => {
                    out.push(format!("{prev} {f}"));
                }
                _ => out.push(f.clone()),
            }
        }
    }
    out
}

/// A line of a source or header that turns #20044-D off for the code after it
/// (`#pragma nv_diag_suppress 20044`, `_Pragma("diag_suppress 20044")`, any pragma naming
/// the number other than one making it an error): its 1-based number and text. No flag
/// outranks a source's pragma, so the build refuses a project file that has one.
pub fn extern_check_pragma(text: &str) -> Option<(usize, String)> {
    text.lines().enumerate().find_map(|(i, l)| {
        let t = l.trim_start();
        let pragma = t
            .strip_prefix('#')
            .is_some_and(|d| d.trim_start().starts_with("pragma"))
            || t.contains("_Pragma(");
        let hides = pragma && l.contains("20044") && !l.contains("diag_error");
        hides.then(|| (i + 1, l.trim().to_string()))
    })
}

/// The error for `extern` device variables no file of a one-source module defines
/// ([`undefined_externs`]): each symbol and its declaration, the flags of the spec that
/// would have hidden nvcc's diagnostic, and how to give the module the definition.
pub fn refusal(
    label: &str,
    job: &Job,
    m: &ModuleSpec,
    undefined: &[(String, String)],
    said: &str,
) -> anyhow::Error {
    let list: Vec<String> = undefined
        .iter()
        .map(|(symbol, at)| format!("`{symbol}` (declared extern at {at})"))
        .collect();
    let hiders = extern_check_hiders(&job.flags);
    let hidden = if hiders.is_empty() {
        String::new()
    } else {
        format!(
            " (nvcc_flags {} hide nvcc's warning for this; the build checks it regardless)",
            hiders
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    fail(
        format!(
            "{label}: {} no file of the module defines: nvcc would compile each as a private, zero-filled copy (#20044-D), so the kernels would read zeros; nothing was built{hidden}\nnvcc output:\n{}",
            list.join(", "),
            super::nvcc::indent(said)
        ),
        format!(
            "add the file that defines {} to the module: `source = [\"{}\", \"<defining file>.cu\"]` compiles both as relocatable device code and links them (docs/build.md, \"Modules of several files\"); or define it in {} itself, or remove `extern` from the declaration",
            undefined
                .iter()
                .map(|(s, _)| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", "),
            m.sources[0],
            m.sources[0]
        ),
    )
}

/// Refuses a project file of a one-source module that turns #20044-D off with a pragma
/// ([`extern_check_pragma`]): no flag outranks it, so the build could not tell a
/// zero-filled `extern` from a defined one.
pub fn refuse_pragma(label: &str, file: &Path) -> Result<()> {
    let text =
        std::fs::read(file).with_context(|| format!("{label}: reading {}", file.display()))?;
    match extern_check_pragma(&String::from_utf8_lossy(&text)) {
        None => Ok(()),
        Some((line, pragma)) => Err(fail(
            format!(
                "{label}: {}:{line} turns off nvcc's #20044-D (`{pragma}`), which reports an `extern` device variable no file of the module defines (compiled as a private, zero-filled copy); the build refuses to sign what it cannot check",
                file.display()
            ),
            "remove the pragma: a table declared `extern` must be defined by a file of the module (list that file in `source`, docs/build.md \"Modules of several files\"), and a defined one never triggers the warning",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undefined_externs_are_recognised_with_their_declaration() {
        let out = "field.cu(12): warning #20044-D: extern declaration of the entity twiddles is treated as a static definition\n\nRemark: The warnings can be suppressed with \"-diag-suppress <warning-number>\"\n";
        assert_eq!(
            undefined_externs(out),
            [("twiddles".to_string(), "field.cu(12)".to_string())]
        );
        // The error form the build's EXTERN_CHECK makes of it (nvcc 13.0 prints no number).
        let out = "two.cu(1): error: extern declaration of the entity tw is treated as a static definition\n\ntwo.cu(2): error: extern declaration of the entity cnt is treated as a static definition\n\n2 errors detected in the compilation of \"two.cu\".\n";
        assert_eq!(
            undefined_externs(out),
            [
                ("tw".to_string(), "two.cu(1)".to_string()),
                ("cnt".to_string(), "two.cu(2)".to_string())
            ]
        );
        assert!(
            undefined_externs(
                "a.cu(3): warning #177-D: variable \"x\" was declared but never referenced"
            )
            .is_empty()
        );
    }

    #[test]
    fn flags_and_pragmas_that_hide_the_extern_check_are_named() {
        let flags: Vec<String> = [
            "-O3",
            "-w",
            "--disable-warnings",
            "-diag-suppress=20044",
            "-Xcudafe",
            "--diag_suppress=20044",
            "--diag-suppress",
            "177,20044",
            "-Xcudafe=--diag_suppress=20044",
            "--diag-error=20044",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            extern_check_hiders(&flags),
            [
                "-w",
                "--disable-warnings",
                "-diag-suppress=20044",
                "-Xcudafe --diag_suppress=20044",
                "--diag-suppress 177,20044",
                "-Xcudafe=--diag_suppress=20044",
            ]
        );
        let src = "#include <x.h>\n#pragma nv_diag_suppress 20044\nextern __constant__ int t[4];\n";
        assert_eq!(
            extern_check_pragma(src),
            Some((2, "#pragma nv_diag_suppress 20044".to_string()))
        );
        assert_eq!(
            extern_check_pragma("_Pragma(\"diag_suppress 20044\")").map(|p| p.0),
            Some(1)
        );
        assert_eq!(
            extern_check_pragma("#pragma nv_diag_error 20044\nint x = 20044;"),
            None
        );
    }
}
