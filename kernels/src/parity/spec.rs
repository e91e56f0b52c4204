//! The parity spec of a module (`[module.parity]` in its spec file): which entry points run
//! in which order with which launch geometry, the seeded inputs, the outputs and the CPU
//! reference they must equal; and its expansion into concrete programs, one per case.
//!
//! ```toml
//! [module.parity]
//! outputs = ["data"]
//! reference = { cpu = "ntt::forward", args = ["data"] }
//! case = [{ name = "2^12", seed = 1, vars = { log_n = 12 } }]
//! [[module.parity.buffer]]
//! name = "data"
//! element = "u64"
//! elements = "1 << log_n"
//! generator = "goldilocks"
//! [[module.parity.launch]]
//! entry = "ntt_bit_reverse"
//! cpu = "ntt::bit_reverse"
//! grid = "min(ceil_div(1 << log_n, block), 65535)"
//! block = "block"
//! args = ["data", "u32 log_n"]
//! ```
//!
//! Expressions ([`super::expr`]) see the module's geometry (`block`, `tile_log`, ...), the
//! case's `vars` and, inside a `repeat`, its loop variable.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::expr::{Vars, eval};

/// Budgets of one case: what a spec may ask the GPU host for.
pub mod limits {
    /// Largest buffer, in bytes (1 GiB).
    pub const BUFFER_BYTES: u64 = 1 << 30;
    /// Most launches one case may expand to.
    pub const LAUNCHES: usize = 4096;
    /// Most cases of one spec.
    pub const CASES: usize = 64;
}

/// `[module.parity]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParitySpec {
    /// Buffers compared with the whole-program reference at the end of each case.
    pub outputs: Vec<String>,
    /// The whole-program CPU reference: run on a copy of the inputs, it must produce the
    /// outputs.
    pub reference: Call,
    /// The inputs: sizes and seeds.
    #[serde(rename = "case")]
    pub cases: Vec<Case>,
    /// Device buffers, in allocation order.
    #[serde(rename = "buffer")]
    pub buffers: Vec<BufferSpec>,
    /// Launches, in order.
    #[serde(rename = "launch")]
    pub launches: Vec<LaunchSpec>,
}

/// A CPU function of [`super::cpu`] and its arguments (buffer names or typed expressions).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    /// Its name in [`super::cpu::STEPS`], e.g. `ntt::forward`.
    pub cpu: String,
    /// Arguments, as for a launch.
    pub args: Vec<String>,
}

/// One set of inputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Shown in reports and differences.
    pub name: String,
    /// Seeds every generated buffer (each buffer gets its own stream, see
    /// [`super::cpu::generate`]).
    pub seed: u64,
    /// Variables of this case (`log_n = 12`).
    #[serde(default)]
    pub vars: BTreeMap<String, u64>,
}

/// Element type of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Element {
    /// Bytes.
    U8,
    /// 32-bit little-endian words.
    U32,
    /// 64-bit little-endian words.
    U64,
}

impl Element {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Element::U8 => 1,
            Element::U32 => 4,
            Element::U64 => 8,
        }
    }
    /// Element `i` of `bytes` (which must hold it).
    pub fn get(self, bytes: &[u8], i: usize) -> u64 {
        let s = self.size() as usize;
        let mut v = [0u8; 8];
        v[..s].copy_from_slice(&bytes[i * s..i * s + s]);
        u64::from_le_bytes(v)
    }
}

/// A device buffer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferSpec {
    /// Its name in launch arguments.
    pub name: String,
    /// Element type.
    pub element: Element,
    /// Element count (expression).
    pub elements: String,
    /// `name` or `name(expr, ...)` of [`super::cpu::generate`].
    pub generator: String,
}

/// A launch (or a loop of launches).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchSpec {
    /// The entry point (a symbol, or a name the module's manifest resolves).
    pub entry: String,
    /// The CPU step that does what the entry point does ([`super::cpu::STEPS`]).
    pub cpu: String,
    /// Blocks (1-D grid), expression.
    pub grid: String,
    /// Threads per block, expression.
    pub block: String,
    /// Arguments: a buffer name, or `u32 EXPR` / `u64 EXPR`.
    pub args: Vec<String>,
    /// Repeat with a loop variable: `var` from `from` while `< to`, by `step`.
    #[serde(default)]
    pub repeat: Option<Repeat>,
}

/// A loop of launches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Repeat {
    /// Loop variable.
    pub var: String,
    /// First value.
    pub from: String,
    /// Exclusive end.
    pub to: String,
    /// Increment (must be positive).
    pub step: String,
}

/// A launch argument with its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgValue {
    /// A device buffer of the case.
    Buffer(String),
    /// `unsigned int`.
    U32(u32),
    /// `unsigned long long`.
    U64(u64),
}

/// A generator call: name and evaluated arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenCall {
    /// Generator name.
    pub name: String,
    /// Evaluated arguments.
    pub args: Vec<u64>,
}

/// A buffer of a concrete program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buffer {
    /// Name.
    pub name: String,
    /// Element type.
    pub element: Element,
    /// Element count.
    pub elements: u64,
    /// How its initial content is made.
    pub generator: GenCall,
}

impl Buffer {
    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.elements * self.element.size()
    }
}

/// A launch of a concrete program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// Entry point.
    pub entry: String,
    /// CPU step.
    pub cpu: String,
    /// Blocks.
    pub grid: u32,
    /// Threads per block.
    pub block: u32,
    /// Arguments.
    pub args: Vec<ArgValue>,
}

/// One case, expanded: every size, argument and launch evaluated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Program {
    /// Case name.
    pub case: String,
    /// Case seed.
    pub seed: u64,
    /// Geometry and case variables.
    pub vars: Vars,
    /// Buffers in allocation order.
    pub buffers: Vec<Buffer>,
    /// Launches in order.
    pub launches: Vec<Launch>,
    /// Buffers compared with the reference at the end.
    pub outputs: Vec<String>,
    /// Whole-program CPU reference.
    pub reference: String,
    /// Its arguments.
    pub reference_args: Vec<ArgValue>,
}

impl ParitySpec {
    /// Parses `[module.parity]` from its TOML value and checks it against the CPU steps
    /// and generators this crate has.
    pub fn from_toml(v: &toml::Value) -> Result<ParitySpec, String> {
        let spec: ParitySpec = v
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| e.message().to_string())?;
        spec.check()?;
        Ok(spec)
    }

    fn check(&self) -> Result<(), String> {
        if self.cases.is_empty() || self.cases.len() > limits::CASES {
            return Err(format!("1 to {} cases are required", limits::CASES));
        }
        if self.launches.is_empty() {
            return Err("no launch".into());
        }
        let mut names = BTreeSet::new();
        for b in &self.buffers {
            if !names.insert(b.name.as_str()) {
                return Err(format!("buffer `{}` defined twice", b.name));
            }
            super::cpu::check_generator(&parse_call(&b.generator)?.0)?;
        }
        for o in &self.outputs {
            if !names.contains(o.as_str()) {
                return Err(format!("output `{o}` is not a buffer"));
            }
        }
        if self.outputs.is_empty() {
            return Err("no outputs: name the buffers the reference must equal".into());
        }
        let mut case_names = BTreeSet::new();
        for c in &self.cases {
            if !case_names.insert(c.name.as_str()) {
                return Err(format!("case `{}` defined twice", c.name));
            }
        }
        for (cpu, args) in self
            .launches
            .iter()
            .map(|l| (&l.cpu, &l.args))
            .chain([(&self.reference.cpu, &self.reference.args)])
        {
            super::cpu::step(cpu)?;
            for a in args {
                if !a.contains(' ') && !names.contains(a.as_str()) {
                    return Err(format!(
                        "argument `{a}` of {cpu}: not a buffer (scalars are written `u32 EXPR` or `u64 EXPR`)"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Expands every case with the module's `geometry`.
    pub fn programs(&self, geometry: &BTreeMap<String, u64>) -> Result<Vec<Program>, String> {
        self.cases
            .iter()
            .map(|c| self.program(c, geometry))
            .collect()
    }

    /// Expands one case.
    pub fn program(
        &self,
        case: &Case,
        geometry: &BTreeMap<String, u64>,
    ) -> Result<Program, String> {
        let here = |e: String| format!("case `{}`: {e}", case.name);
        let mut vars: Vars = geometry.clone();
        for (k, v) in &case.vars {
            if vars.insert(k.clone(), *v).is_some() {
                return Err(here(format!(
                    "variable `{k}` shadows the module's geometry value"
                )));
            }
        }
        let mut buffers = Vec::new();
        for b in &self.buffers {
            let elements = eval(&b.elements, &vars).map_err(&here)?;
            let (name, args) = parse_call(&b.generator).map_err(&here)?;
            let args = args
                .iter()
                .map(|a| eval(a, &vars))
                .collect::<Result<Vec<_>, _>>()
                .map_err(&here)?;
            let buf = Buffer {
                name: b.name.clone(),
                element: b.element,
                elements,
                generator: GenCall { name, args },
            };
            if elements
                .checked_mul(b.element.size())
                .is_none_or(|n| n > limits::BUFFER_BYTES)
            {
                return Err(here(format!(
                    "buffer `{}` of {elements} elements exceeds {} bytes",
                    b.name,
                    limits::BUFFER_BYTES
                )));
            }
            buffers.push(buf);
        }
        let mut launches = Vec::new();
        for l in &self.launches {
            let values: Vec<Option<(String, u64)>> = match &l.repeat {
                None => vec![None],
                Some(r) => {
                    let from = eval(&r.from, &vars).map_err(&here)?;
                    let to = eval(&r.to, &vars).map_err(&here)?;
                    let step = eval(&r.step, &vars).map_err(&here)?;
                    if step == 0 {
                        return Err(here(format!("{}: repeat step is 0", l.entry)));
                    }
                    let mut out = Vec::new();
                    let mut v = from;
                    while v < to {
                        out.push(Some((r.var.clone(), v)));
                        if out.len() > limits::LAUNCHES {
                            break;
                        }
                        v = v.saturating_add(step);
                    }
                    out
                }
            };
            for value in values {
                let mut vars = vars.clone();
                if let Some((k, v)) = value
                    && vars.insert(k.clone(), v).is_some()
                {
                    return Err(here(format!(
                        "loop variable `{k}` shadows another variable"
                    )));
                }
                let at = |e: String| here(format!("launch of {}: {e}", l.entry));
                let u32_of = |what: &str, e: &str| -> Result<u32, String> {
                    let v = eval(e, &vars)?;
                    u32::try_from(v)
                        .ok()
                        .filter(|v| *v > 0)
                        .ok_or_else(|| format!("{what} `{e}` = {v}: must be 1 ..= 2^32 - 1"))
                };
                launches.push(Launch {
                    entry: l.entry.clone(),
                    cpu: l.cpu.clone(),
                    grid: u32_of("grid", &l.grid).map_err(at)?,
                    block: u32_of("block", &l.block).map_err(at)?,
                    args: args(&l.args, &vars).map_err(at)?,
                });
                if launches.len() > limits::LAUNCHES {
                    return Err(here(format!("more than {} launches", limits::LAUNCHES)));
                }
            }
        }
        Ok(Program {
            case: case.name.clone(),
            seed: case.seed,
            reference: self.reference.cpu.clone(),
            reference_args: args(&self.reference.args, &vars).map_err(&here)?,
            vars,
            buffers,
            launches,
            outputs: self.outputs.clone(),
        })
    }
}

/// Evaluates launch or reference arguments.
fn args(list: &[String], vars: &Vars) -> Result<Vec<ArgValue>, String> {
    list.iter()
        .map(|a| match a.split_once(' ') {
            Some(("u32", e)) => {
                let v = eval(e, vars)?;
                u32::try_from(v)
                    .map(ArgValue::U32)
                    .map_err(|_| format!("`{a}` = {v} does not fit 32 bits"))
            }
            Some(("u64", e)) => eval(e, vars).map(ArgValue::U64),
            Some((t, _)) => Err(format!("`{a}`: type `{t}` is not u32 or u64")),
            None => Ok(ArgValue::Buffer(a.clone())),
        })
        .collect()
}

/// `name` or `name(a, b)` → (name, argument texts).
fn parse_call(s: &str) -> Result<(String, Vec<String>), String> {
    let s = s.trim();
    match s.split_once('(') {
        None => Ok((s.to_string(), Vec::new())),
        Some((name, rest)) => {
            let inner = rest
                .strip_suffix(')')
                .ok_or_else(|| format!("`{s}`: missing `)`"))?;
            let mut out = Vec::new();
            let (mut depth, mut cur) = (0, String::new());
            for c in inner.chars() {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(std::mem::take(&mut cur));
                        continue;
                    }
                    _ => {}
                }
                cur.push(c);
            }
            if !cur.trim().is_empty() {
                out.push(cur);
            }
            Ok((name.trim().to_string(), out))
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const SPEC: &str = r#"
        outputs = ["data"]
        reference = { cpu = "ntt::forward", args = ["data"] }
        case = [{ name = "small", seed = 3, vars = { log_n = 5 } }]
        [[buffer]]
        name = "data"
        element = "u64"
        elements = "1 << log_n"
        generator = "goldilocks"
        [[buffer]]
        name = "twiddles"
        element = "u64"
        elements = "1 << (log_n - 1)"
        generator = "ntt_twiddles(log_n)"
        [[launch]]
        entry = "ntt_bit_reverse"
        cpu = "ntt::bit_reverse"
        grid = "ceil_div(1 << log_n, block)"
        block = "block"
        args = ["data", "u32 log_n"]
        [[launch]]
        entry = "ntt_stages"
        cpu = "research::ntt_stages"
        repeat = { var = "s0", from = "0", to = "log_n", step = "tile_log" }
        grid = "(1 << log_n) >> min(tile_log, log_n - s0)"
        block = "block"
        args = ["data", "twiddles", "u32 log_n", "u32 s0", "u32 min(tile_log, log_n - s0)"]
    "#;

    pub(crate) fn spec() -> ParitySpec {
        ParitySpec::from_toml(&toml::from_str::<toml::Value>(SPEC).unwrap()).unwrap()
    }

    #[test]
    fn a_case_expands_into_its_launches() {
        let geometry = BTreeMap::from([("block".to_string(), 128), ("tile_log".to_string(), 2)]);
        let p = spec().programs(&geometry).unwrap().remove(0);
        let entries: Vec<&str> = p.launches.iter().map(|l| l.entry.as_str()).collect();
        assert_eq!(
            entries,
            ["ntt_bit_reverse", "ntt_stages", "ntt_stages", "ntt_stages"]
        );
        assert_eq!(p.launches[0].grid, 1);
        assert_eq!(
            p.launches[3].args,
            [
                ArgValue::Buffer("data".into()),
                ArgValue::Buffer("twiddles".into()),
                ArgValue::U32(5),
                ArgValue::U32(4),
                ArgValue::U32(1)
            ]
        );
        assert_eq!(p.launches[3].grid, 16);
        assert_eq!(p.buffers[1].generator.args, [5]);
        assert_eq!(p.buffers[1].bytes(), 128);
    }

    #[test]
    fn bad_specs_name_the_problem() {
        let cases = [
            (
                SPEC.replace("\"ntt::bit_reverse\"", "\"ntt::nope\""),
                "unknown CPU step",
            ),
            (
                SPEC.replace("outputs = [\"data\"]", "outputs = [\"out\"]"),
                "not a buffer",
            ),
            (
                SPEC.replace("\"goldilocks\"", "\"gaussian\""),
                "unknown generator",
            ),
            (
                SPEC.replace("\"data\", \"u32 log_n\"", "\"data\", \"log_n\""),
                "not a buffer",
            ),
            (
                SPEC.replace("seed = 3", "seed = 3, extra = 1"),
                "unknown field",
            ),
        ];
        for (text, want) in cases {
            let v: toml::Value = toml::from_str(&text).unwrap();
            let err = ParitySpec::from_toml(&v).unwrap_err();
            assert!(err.contains(want), "want {want:?} in {err}");
        }
        let geometry = BTreeMap::from([("block".to_string(), 128), ("tile_log".to_string(), 0)]);
        let err = spec().programs(&geometry).unwrap_err();
        assert!(err.contains("repeat step is 0"), "{err}");
        let geometry = BTreeMap::from([("block".to_string(), 128), ("log_n".to_string(), 3)]);
        let err = spec().programs(&geometry).unwrap_err();
        assert!(err.contains("shadows"), "{err}");
        let big = SPEC.replace("log_n = 5", "log_n = 40");
        let err = ParitySpec::from_toml(&toml::from_str(&big).unwrap())
            .unwrap()
            .programs(&BTreeMap::from([
                ("block".to_string(), 1),
                ("tile_log".to_string(), 8),
            ]))
            .unwrap_err();
        assert!(err.contains("exceeds"), "{err}");
    }
}
