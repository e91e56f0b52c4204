//! The integer expressions of a parity spec (`"min(tile_log, log_n - s0)"`,
//! `"(1 << log_n) >> 1"`): unsigned 64-bit, checked (an overflow, a negative result or a
//! division by zero is an error naming the expression, never a wrapped value).
//!
//! Grammar, lowest precedence first: `<<`/`>>`, then `+`/`-`, then `*`/`/`/`%`; atoms are
//! decimal or `0x` numbers, variables (`[a-z_][a-z0-9_]*`), parentheses and the functions
//! `min(a, b)`, `max(a, b)` and `ceil_div(a, b)`.

use std::collections::BTreeMap;

/// Variables an expression may name.
pub type Vars = BTreeMap<String, u64>;

/// Evaluates `text` with `vars`.
pub fn eval(text: &str, vars: &Vars) -> Result<u64, String> {
    let tokens = lex(text)?;
    let mut p = Parser {
        tokens: &tokens,
        at: 0,
        vars,
    };
    let v = p.shift().map_err(|e| format!("`{text}`: {e}"))?;
    if p.at != tokens.len() {
        return Err(format!("`{text}`: unexpected {:?}", tokens[p.at]));
    }
    Ok(v)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Num(u64),
    Ident(String),
    Op(&'static str),
}

fn lex(text: &str) -> Result<Vec<Tok>, String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            let s = &text[start..i];
            let v = match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            }
            .map_err(|_| format!("`{text}`: bad number `{s}`"))?;
            out.push(Tok::Num(v));
        } else if c.is_ascii_lowercase() || c == b'_' {
            let start = i;
            while i < b.len()
                && (b[i].is_ascii_lowercase() || b[i].is_ascii_digit() || b[i] == b'_')
            {
                i += 1;
            }
            out.push(Tok::Ident(text[start..i].to_string()));
        } else {
            let two = text.get(i..i + 2);
            let op = match (two, c) {
                (Some("<<"), _) => "<<",
                (Some(">>"), _) => ">>",
                (_, b'+') => "+",
                (_, b'-') => "-",
                (_, b'*') => "*",
                (_, b'/') => "/",
                (_, b'%') => "%",
                (_, b'(') => "(",
                (_, b')') => ")",
                (_, b',') => ",",
                _ => {
                    return Err(format!(
                        "`{text}`: unexpected character {:?}",
                        text[i..].chars().next().unwrap_or('?')
                    ));
                }
            };
            i += op.len();
            out.push(Tok::Op(op));
        }
    }
    Ok(out)
}

struct Parser<'a> {
    tokens: &'a [Tok],
    at: usize,
    vars: &'a Vars,
}

impl Parser<'_> {
    fn peek_op(&self) -> Option<&'static str> {
        match self.tokens.get(self.at) {
            Some(Tok::Op(o)) => Some(o),
            _ => None,
        }
    }

    fn expect(&mut self, op: &str) -> Result<(), String> {
        match self.peek_op() {
            Some(o) if o == op => {
                self.at += 1;
                Ok(())
            }
            _ => Err(format!("expected `{op}`")),
        }
    }

    fn shift(&mut self) -> Result<u64, String> {
        let mut v = self.sum()?;
        while let Some(op @ ("<<" | ">>")) = self.peek_op() {
            self.at += 1;
            let r = self.sum()?;
            let r32 = u32::try_from(r)
                .ok()
                .filter(|r| *r < 64)
                .ok_or_else(|| format!("shift by {r} (at most 63)"))?;
            v = match op {
                "<<" => v
                    .checked_shl(r32)
                    .filter(|x| x >> r32 == v)
                    .ok_or_else(|| format!("{v} << {r} overflows 64 bits"))?,
                _ => v >> r32,
            };
        }
        Ok(v)
    }

    fn sum(&mut self) -> Result<u64, String> {
        let mut v = self.product()?;
        while let Some(op @ ("+" | "-")) = self.peek_op() {
            self.at += 1;
            let r = self.product()?;
            v = match op {
                "+" => v
                    .checked_add(r)
                    .ok_or_else(|| format!("{v} + {r} overflows"))?,
                _ => v
                    .checked_sub(r)
                    .ok_or_else(|| format!("{v} - {r} is negative"))?,
            };
        }
        Ok(v)
    }

    fn product(&mut self) -> Result<u64, String> {
        let mut v = self.atom()?;
        while let Some(op @ ("*" | "/" | "%")) = self.peek_op() {
            self.at += 1;
            let r = self.atom()?;
            v = match op {
                "*" => v
                    .checked_mul(r)
                    .ok_or_else(|| format!("{v} * {r} overflows"))?,
                "/" => v.checked_div(r).ok_or("division by zero")?,
                _ => v.checked_rem(r).ok_or("remainder by zero")?,
            };
        }
        Ok(v)
    }

    fn atom(&mut self) -> Result<u64, String> {
        let tok = self.tokens.get(self.at).cloned();
        self.at += 1;
        match tok {
            Some(Tok::Num(v)) => Ok(v),
            Some(Tok::Op("(")) => {
                let v = self.shift()?;
                self.expect(")")?;
                Ok(v)
            }
            Some(Tok::Ident(name)) if self.peek_op() == Some("(") => {
                self.at += 1;
                let a = self.shift()?;
                self.expect(",")?;
                let b = self.shift()?;
                self.expect(")")?;
                match name.as_str() {
                    "min" => Ok(a.min(b)),
                    "max" => Ok(a.max(b)),
                    "ceil_div" => a
                        .checked_add(b.checked_sub(1).ok_or("ceil_div by zero")?)
                        .map(|x| x / b)
                        .ok_or_else(|| format!("ceil_div({a}, {b}) overflows")),
                    _ => Err(format!("unknown function `{name}` (min, max, ceil_div)")),
                }
            }
            Some(Tok::Ident(name)) => self.vars.get(&name).copied().ok_or_else(|| {
                let known: Vec<&str> = self.vars.keys().map(String::as_str).collect();
                format!("unknown variable `{name}` (known: {})", known.join(", "))
            }),
            Some(t) => Err(format!("unexpected {t:?}")),
            None => Err("unexpected end".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars {
        Vars::from([
            ("log_n".into(), 20),
            ("tile_log".into(), 8),
            ("s0".into(), 16),
        ])
    }

    #[test]
    fn evaluates_with_precedence_and_functions() {
        let v = vars();
        assert_eq!(eval("1 << log_n", &v), Ok(1 << 20));
        assert_eq!(
            eval("(1 << log_n) >> min(tile_log, log_n - s0)", &v),
            Ok(1 << 16)
        );
        assert_eq!(eval("1 + 2 * 3 - 4 / 2 % 3", &v), Ok(5));
        assert_eq!(eval("ceil_div(1 << log_n, 256)", &v), Ok(4096));
        assert_eq!(eval("ceil_div(5, 2)", &v), Ok(3));
        assert_eq!(eval("max(0x10, 3)", &v), Ok(16));
        assert_eq!(eval("1 << 2 + 1", &v), Ok(8));
    }

    #[test]
    fn errors_name_the_expression_and_never_wrap() {
        let v = vars();
        for (e, want) in [
            ("s0 - log_n", "negative"),
            ("1 << 64", "at most 63"),
            ("3 << 63", "overflows"),
            ("18446744073709551615 + 1", "overflows"),
            ("1 / 0", "division by zero"),
            ("n", "unknown variable `n`"),
            ("pow(2, 3)", "unknown function"),
            ("(1", "expected `)`"),
            ("1 2", "unexpected"),
            ("1 $ 2", "unexpected character"),
            ("", "unexpected end"),
        ] {
            let err = eval(e, &v).unwrap_err();
            assert!(err.contains(want), "{e}: {err}");
            assert!(err.contains(&format!("`{e}`")), "{e}: {err}");
        }
    }
}
