//! Kernel signatures read from PTX text, and [`KernelArg`] lists checked against them.
//!
//! The driver API launches a kernel with an array of untyped parameter pointers: a missing
//! argument or a 4-byte value for an 8-byte parameter makes the driver read past the
//! caller's values. NVRTC's PTX states every entry's parameters (`.entry name(.param .u64
//! name_param_0, .param .f64 name_param_1, ...)`), so gpubuf reads them from there, with no
//! GPU, and checks the count and each parameter's type before a launch.
//!
//! PTX keeps sizes, not C types: a pointer, a `long long` and an `unsigned long long` are all
//! `.u64` (unless declared `.ptr`), `int` and `unsigned int` are both `.u32`. Which 64-bit
//! parameters are pointers is read from the CUDA C source instead
//! ([`crate::nvrtc::declared_pointers`], applied with [`Signature::with_pointers`]): a
//! pointer ([`ParamKind::Pointer`]) takes a device buffer only, a 64-bit integer
//! ([`ParamKind::Int64`]) a `U64` or an `I64`. A 64-bit parameter whose C type is unknown
//! ([`ParamKind::Bits64`], PTX alone) takes a device buffer only in
//! [`Signature::check_args`]; [`Signature::check_args_raw`] (for the `unsafe`
//! [`crate::UserKernel::launch_raw`]) also takes integers there and for pointers.
//!
//! ```
//! use gpubuf_core::kernel::KernelArg;
//! use gpubuf_cuda::ptx::Signature;
//!
//! let ptx = ".visible .entry scale(\n .param .u64 scale_param_0,\n .param .u64 scale_param_1,\n \
//!            .param .f32 scale_param_2\n)\n{ ret; }";
//! // `scale(float* x, unsigned long long n, float a)`: the source says which is the pointer.
//! let sig = Signature::find(ptx, "scale")?.with_pointers(&[true, false, false])?;
//! assert_eq!(sig.params.len(), 3);
//! let memory = (); // any memory type: the check looks at the kinds only
//! assert!(sig.check_args(&[KernelArg::Memory(&memory), KernelArg::U64(8), KernelArg::F32(2.0)]).is_ok());
//! assert!(sig.check_args(&[KernelArg::Memory(&memory), KernelArg::U64(8), KernelArg::F64(2.0)]).is_err());
//! // An address given for the pointer is refused: only gpubuf memory is passed there.
//! assert!(sig.check_args(&[KernelArg::<()>::U64(0xdead_0000), KernelArg::U64(8), KernelArg::F32(2.0)]).is_err());
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

use gpubuf_core::kernel::KernelArg;
use gpubuf_core::{Error, Result};

/// What a kernel parameter takes, from its PTX declaration (and, for 64-bit parameters,
/// the CUDA C source's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamKind {
    /// A 64-bit pointer: declared a pointer in the CUDA C source, or `.ptr` in the PTX.
    /// Takes a device buffer ([`KernelArg::Memory`]) only; an address as `U64`/`I64` only
    /// through [`Signature::check_args_raw`].
    Pointer,
    /// A 64-bit integer (`long long`, `unsigned long long`, `size_t`, ...), as the CUDA C
    /// source declares it: takes `U64` or `I64`.
    Int64,
    /// `.u64`, `.s64` or `.b64` whose C type is unknown (read from PTX alone): a pointer or
    /// a 64-bit integer, PTX does not tell which. Takes a device buffer only; an integer
    /// only through [`Signature::check_args_raw`].
    Bits64,
    /// `.u32`, `.s32` or `.b32`: an `int` or `unsigned int`.
    Bits32,
    /// `.f32`: a `float`.
    F32,
    /// `.f64`: a `double`.
    F64,
    /// A byte array (`.b8 name[N]`): a struct or union passed by value, of `N` bytes. No
    /// [`KernelArg`] fills it; launch such kernels through cudarc.
    Bytes(usize),
    /// Any other PTX type (`.u8`, `.u16`, `.f16`, ...), by its PTX name: no [`KernelArg`]
    /// fills it.
    Other(String),
}

/// One parameter of a kernel entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// Its PTX name (`kernel_param_3`).
    pub name: String,
    /// What it takes.
    pub kind: ParamKind,
}

/// A kernel entry of a PTX module: its name and parameters in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// The entry's name (the C name of an `extern "C"` kernel, else its mangled C++ name).
    pub name: String,
    /// Its parameters.
    pub params: Vec<Param>,
}

/// The PTX text without `//` and `/* */` comments (string literals do not occur in the
/// parts of PTX read here).
fn strip_comments(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len());
    let mut rest = ptx;
    while !rest.is_empty() {
        let line = rest.find("//");
        let block = rest.find("/*");
        match (line, block) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |n| &rest[l + n..]);
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                out.push(' ');
                rest = rest[b + 2..].find("*/").map_or("", |e| &rest[b + 2 + e + 2..]);
            }
            _ => {
                out.push_str(rest);
                rest = "";
            }
        }
    }
    out
}

fn malformed(what: impl std::fmt::Display) -> Error {
    Error::invalid(format!("malformed PTX: {what}"))
}

/// Whether `c` may be part of a PTX identifier.
fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%')
}

/// Every kernel entry (`.entry`) of a PTX module, in order.
///
/// # Errors
/// [`Error::InvalidArgument`] for an entry whose parameter list cannot be read.
pub fn entries(ptx: &str) -> Result<Vec<Signature>> {
    let text = strip_comments(ptx);
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(found) = text[at..].find(".entry") {
        let start = at + found;
        at = start + ".entry".len();
        let before_ok = text[..start].chars().next_back().is_none_or(char::is_whitespace);
        let after = &text[at..];
        if !before_ok || !after.starts_with(char::is_whitespace) {
            continue; // part of a longer word
        }
        let after = after.trim_start();
        let name_len = after.find(|c: char| !ident_char(c)).unwrap_or(after.len());
        if name_len == 0 {
            return Err(malformed("an .entry without a name"));
        }
        let name = after[..name_len].to_string();
        let rest = after[name_len..].trim_start();
        let params = if let Some(list) = rest.strip_prefix('(') {
            let close = list.find(')').ok_or_else(|| malformed(format!("entry {name}: no closing ')'")))?;
            parse_params(&name, &list[..close])?
        } else {
            Vec::new() // `.entry name { ... }` takes no parameters
        };
        out.push(Signature { name, params });
    }
    Ok(out)
}

fn parse_params(entry: &str, list: &str) -> Result<Vec<Param>> {
    if list.trim().is_empty() {
        return Ok(Vec::new());
    }
    list.split(',').enumerate().map(|(i, p)| parse_param(entry, i, p)).collect()
}

/// One declaration: `.param [.align N] .type [.ptr] [.space] [.align N] name[\[N\]]`.
fn parse_param(entry: &str, index: usize, decl: &str) -> Result<Param> {
    let bad = |why: &str| malformed(format!("parameter {index} of entry {entry} ({:?}): {why}", decl.trim()));
    // `name [16]` and `name[16]` alike: put spaces around the brackets.
    let spaced = decl.replace('[', " [ ").replace(']', " ] ");
    let mut tokens = spaced.split_whitespace();
    if tokens.next() != Some(".param") {
        return Err(bad("not a .param declaration"));
    }
    let (mut ty, mut pointer, mut name, mut array) = (None::<String>, false, None::<String>, None::<usize>);
    while let Some(t) = tokens.next() {
        match t {
            ".align" => {
                tokens
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .ok_or_else(|| bad(".align without a number"))?;
            }
            ".ptr" => pointer = true,
            ".global" | ".const" | ".local" | ".shared" => {}
            "[" => {
                let n =
                    tokens.next().and_then(|n| n.parse::<usize>().ok()).ok_or_else(|| bad("array size"))?;
                if tokens.next() != Some("]") {
                    return Err(bad("no closing ']'"));
                }
                array = Some(n);
            }
            t if t.starts_with('.') && ty.is_none() => ty = Some(t.to_string()),
            t if !t.starts_with('.') && name.is_none() && t.chars().all(ident_char) => name = Some(t.into()),
            _ => return Err(bad(&format!("unexpected {t:?}"))),
        }
    }
    let ty = ty.ok_or_else(|| bad("no type"))?;
    let name = name.ok_or_else(|| bad("no name"))?;
    let kind = match (ty.as_str(), array) {
        (_, Some(n)) => ParamKind::Bytes(n.checked_mul(type_bytes(&ty)).ok_or_else(|| bad("array size"))?),
        (".u64" | ".s64" | ".b64", None) if pointer => ParamKind::Pointer,
        (".u64" | ".s64" | ".b64", None) => ParamKind::Bits64,
        (".u32" | ".s32" | ".b32", None) => ParamKind::Bits32,
        (".f32", None) => ParamKind::F32,
        (".f64", None) => ParamKind::F64,
        (other, None) => ParamKind::Other(other.to_string()),
    };
    Ok(Param { name, kind })
}

/// Bytes of one element of a PTX array type (`.b8` is 1); 1 for an unknown name.
fn type_bytes(ty: &str) -> usize {
    let digits: String = ty.chars().filter(char::is_ascii_digit).collect();
    digits.parse::<usize>().map_or(1, |bits| (bits / 8).max(1))
}

impl Signature {
    /// The entry `name` of a PTX module.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the module has no such entry (the message lists the
    /// entries there are; C++ kernels are found under their mangled names, so declare
    /// kernels `extern "C"`), or for a malformed parameter list.
    pub fn find(ptx: &str, name: &str) -> Result<Signature> {
        let all = entries(ptx)?;
        let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        match all.iter().find(|s| s.name == name) {
            Some(s) => Ok(s.clone()),
            None => Err(Error::invalid(format!(
                "the program has no kernel named {name:?} (kernels: {names:?}; declare kernels \
                 extern \"C\" so that their names are not mangled)"
            ))),
        }
    }

    /// The signature with the C types of its 64-bit parameters: `pointers[i]` says whether
    /// parameter `i` is declared a pointer ([`ParamKind::Pointer`]) or not
    /// ([`ParamKind::Int64`]); other parameters are unchanged, and a `.ptr` parameter stays
    /// a pointer. `pointers` comes from [`crate::nvrtc::declared_pointers`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `pointers` does not have one entry per parameter.
    pub fn with_pointers(&self, pointers: &[bool]) -> Result<Signature> {
        if pointers.len() != self.params.len() {
            return Err(Error::invalid(format!(
                "kernel {} has {} parameters, {} pointer flags were given",
                self.name,
                self.params.len(),
                pointers.len()
            )));
        }
        let params = self
            .params
            .iter()
            .zip(pointers)
            .map(|(p, &is_ptr)| {
                let kind = match p.kind {
                    ParamKind::Bits64 | ParamKind::Int64 if is_ptr => ParamKind::Pointer,
                    ParamKind::Bits64 => ParamKind::Int64,
                    ref k => k.clone(),
                };
                Param { name: p.name.clone(), kind }
            })
            .collect();
        Ok(Signature { name: self.name.clone(), params })
    }

    /// Checks `args` against the parameters and returns the bytes of dynamic shared memory
    /// asked for (0 without a [`KernelArg::Local`]).
    ///
    /// `Local(bytes)` is no kernel parameter in CUDA: it sizes the kernel's
    /// `extern __shared__` array, may stand anywhere in the list and is not counted; at most
    /// one is taken. The other arguments fill the parameters in order: a pointer, or a
    /// 64-bit parameter of unknown C type, takes [`KernelArg::Memory`] only; a 64-bit
    /// integer `U64` or `I64`; a 32-bit one `U32` or `I32`; `.f32` `F32`; `.f64` `F64`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the parameter for a wrong count, a wrong kind (an
    /// integer given for a pointer included), a parameter no [`KernelArg`] fills (a struct
    /// passed by value, 8- or 16-bit types), more than one `Local` or a `Local(0)`.
    pub fn check_args<M>(&self, args: &[KernelArg<'_, M>]) -> Result<usize> {
        self.check(args, false)
    }

    /// [`Signature::check_args`], except that a pointer, or a 64-bit parameter of unknown C
    /// type, also takes `U64` and `I64`: raw device addresses, whose validity nothing
    /// checks. For [`crate::UserKernel::launch_raw`], whose caller vouches for them.
    ///
    /// # Errors
    /// As [`Signature::check_args`].
    pub fn check_args_raw<M>(&self, args: &[KernelArg<'_, M>]) -> Result<usize> {
        self.check(args, true)
    }

    fn check<M>(&self, args: &[KernelArg<'_, M>], raw: bool) -> Result<usize> {
        let name = &self.name;
        let mut shared = None;
        for a in args {
            if let KernelArg::Local(n) = a {
                if shared.is_some() {
                    return Err(Error::invalid(format!(
                        "kernel {name}: more than one Local argument (CUDA has one dynamic shared \
                         memory array per launch)"
                    )));
                }
                if *n == 0 {
                    return Err(Error::invalid(format!("kernel {name}: zero bytes of shared memory")));
                }
                shared = Some(*n);
            }
        }
        let values: Vec<&KernelArg<'_, M>> =
            args.iter().filter(|a| !matches!(a, KernelArg::Local(_))).collect();
        if values.len() != self.params.len() {
            return Err(Error::invalid(format!(
                "kernel {name} takes {} arguments, {} were given (Local arguments not counted)",
                self.params.len(),
                values.len()
            )));
        }
        for (i, (p, a)) in self.params.iter().zip(values).enumerate() {
            let integer = matches!(a, KernelArg::U64(_) | KernelArg::I64(_));
            let ok = match (&p.kind, a) {
                (ParamKind::Pointer | ParamKind::Bits64, KernelArg::Memory(_)) => true,
                (ParamKind::Pointer | ParamKind::Bits64, _) if integer => raw,
                (ParamKind::Int64, _) => integer,
                (ParamKind::Bits32, KernelArg::U32(_) | KernelArg::I32(_)) => true,
                (ParamKind::F32, KernelArg::F32(_)) | (ParamKind::F64, KernelArg::F64(_)) => true,
                (ParamKind::Bytes(n), _) => {
                    return Err(Error::invalid(format!(
                        "parameter {i} ({}) of {name} is a {n}-byte struct passed by value, which \
                         user kernels cannot take: pass its fields as separate parameters, or \
                         launch the kernel through cudarc's launch builder",
                        p.name
                    )));
                }
                (ParamKind::Other(t), _) => {
                    return Err(Error::invalid(format!(
                        "parameter {i} ({}) of {name} has PTX type {t}, which user kernels cannot \
                         take (they take pointers, 32- and 64-bit integers, float and double)",
                        p.name
                    )));
                }
                _ => false,
            };
            if !ok {
                let hint = match (&p.kind, integer) {
                    (ParamKind::Pointer, true) => {
                        "; a pointer parameter takes gpubuf memory, never an address (an address \
                         needs the unsafe UserKernel::launch_raw)"
                    }
                    (ParamKind::Bits64, true) => {
                        "; its C type is unknown (the kernel's declaration could not be read: \
                         declare kernels extern \"C\" at file scope), so only gpubuf memory is \
                         taken (an integer needs the unsafe UserKernel::launch_raw)"
                    }
                    _ => "",
                };
                return Err(Error::invalid(format!(
                    "parameter {i} ({}) of {name} takes {}, {} was given{hint}",
                    p.name,
                    p.kind.describe(),
                    a.describe()
                )));
            }
        }
        Ok(shared.unwrap_or(0))
    }
}

impl ParamKind {
    /// What the parameter takes, for error messages.
    pub fn describe(&self) -> String {
        match self {
            ParamKind::Pointer => "a device buffer (a pointer)".into(),
            ParamKind::Int64 => "a 64-bit integer, long or ulong (.u64)".into(),
            ParamKind::Bits64 => "a device buffer (.u64 of unknown C type)".into(),
            ParamKind::Bits32 => "a 32-bit integer, int or uint (.u32)".into(),
            ParamKind::F32 => "a scalar float (.f32)".into(),
            ParamKind::F64 => "a scalar double (.f64)".into(),
            ParamKind::Bytes(n) => format!("a {n}-byte struct"),
            ParamKind::Other(t) => format!("PTX type {t}"),
        }
    }
}
