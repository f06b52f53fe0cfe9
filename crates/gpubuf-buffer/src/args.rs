//! [`Args`]: the arguments of a user kernel as arrays ([`NDBuffer`]s of any element type)
//! and scalars, and how each becomes kernel parameters on every backend.
//!
//! # The convention
//!
//! Each argument becomes one or more parameters of the kernel, in order:
//!
//! | argument | OpenCL C parameters | CUDA C parameters |
//! |---|---|---|
//! | [`Arg::array`] / [`Arg::array_mut`] of `T` | `__global T* base, long off` | `T* base, long long off` |
//! | the same `.strided()` (`n` axes) | `__global T* base, long off, long s0, .., long s{n-1}` | `T* base, long long off, long long s0, ..` |
//! | a scalar ([`Scalar`]) | `int`, `uint`, `long`, `ulong`, `float`, `double` | `int`, `unsigned int`, `long long`, `unsigned long long`, `float`, `double` |
//!
//! * `base` is the whole allocation the array lives in (a pool segment, say), and `off` the
//!   element offset of the array's first element (index `[0, 0, ..]`) in it: the element at
//!   index `[i, j, k]` of a C-contiguous `(n0, n1, n2)` array is `base[off + (i*n1 + j)*n2 + k]`,
//!   and with strides `base[off + i*s0 + j*s1 + k*s2]` (strides in elements, possibly
//!   negative or zero).
//! * An array passed without strides must be C-contiguous; a transposed, sliced-across or
//!   flipped view is refused ([`Error::InvalidArgument`]) unless passed `.strided()`.
//! * Shapes are not passed: give the extents the kernel needs as scalars.
//! * An empty array is passed with offset `0`: its kernel must touch no element.
//! * On the CPU the kernel is a Rust closure and gets each array as an ndarray view
//!   (shape, strides and offset applied): read-only for [`Arg::array`], mutable for
//!   [`Arg::array_mut`]. There an array that is written may share no element with another
//!   argument (Rust's aliasing rules); OpenCL and CUDA kernels may update in place.
//!
//! Every launch checks, before any backend sees the arguments, that each array belongs to
//! the device of the kernel ([`Error::DeviceMismatch`]) and lies inside its allocation,
//! and the backends check the expanded list against the kernel's signature (count, kinds,
//! and on OpenCL the element type of pointer parameters, [`Error::DTypeMismatch`]).
//!
//! ```
//! use gpubuf_buffer::{Arg, Args, NDBuffer};
//! use gpubuf_core::Backend;
//! use gpubuf_cpu::CpuBackend;
//!
//! let cpu = CpuBackend::new();
//! let u = NDBuffer::<_, f64>::zeros(&cpu, &[4, 6])?;
//! let out = NDBuffer::<_, f32>::zeros(&cpu, &[4, 6])?;
//! let args = Args::new().array(&u).array_mut(&out).scalar(0.5f64);
//! assert_eq!(args.len(), 3);
//! // Expanded for OpenCL or CUDA: (base, off), (base, off), 0.5.
//! let parts = args.lower(&cpu, Some)?;
//! assert_eq!(gpubuf_buffer::args::expand(&parts)?.args.len(), 5);
//! // A transposed view needs its strides.
//! let t = u.transpose(None)?;
//! assert!(Args::new().array(&t).lower(&cpu, Some).is_err());
//! let parts = Args::from(vec![Arg::array(&t).strided()]).lower(&cpu, Some)?;
//! assert_eq!(gpubuf_buffer::args::expand(&parts)?.args.len(), 4); // base, off, s0, s1
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

use crate::{Buffer, NDBuffer};
use gpubuf_core::kernel::{KernelArg, Scalar};
use gpubuf_core::{Backend, DType, DeviceMemory, Element, Error, Layout, Result};

/// Whether a kernel writes an array argument (on the CPU: a mutable view, and no other
/// argument may share its elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read only.
    Read,
    /// Written (and possibly read).
    Write,
}

/// An array argument: an [`NDBuffer`] with its element type erased.
pub struct ArrayArg<'a, B: Backend> {
    buffer: &'a Buffer<B>,
    layout: &'a Layout,
    dtype: DType,
    access: Access,
    strided: bool,
}

impl<B: Backend> Clone for ArrayArg<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for ArrayArg<'_, B> {}

impl<'a, B: Backend> ArrayArg<'a, B> {
    /// The array's buffer.
    pub fn buffer(&self) -> &'a Buffer<B> {
        self.buffer
    }
    /// The array's layout, measured from its buffer's first element.
    pub fn layout(&self) -> &'a Layout {
        self.layout
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Whether the kernel writes it.
    pub fn access(&self) -> Access {
        self.access
    }
    /// Whether its strides are passed.
    pub fn strided(&self) -> bool {
        self.strided
    }
}

/// One argument of a user kernel: an array or a scalar.
pub enum Arg<'a, B: Backend> {
    /// An array (see the [module](self) for its parameters).
    Array(ArrayArg<'a, B>),
    /// A scalar (one parameter).
    Scalar(Scalar),
}

impl<B: Backend> Clone for Arg<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for Arg<'_, B> {}

impl<B: Backend> std::fmt::Debug for Arg<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl<'a, B: Backend> Arg<'a, B> {
    fn of<T: Element>(a: &'a NDBuffer<B, T>, access: Access) -> Self {
        Arg::Array(ArrayArg { buffer: &a.buffer, layout: &a.layout, dtype: T::DTYPE, access, strided: false })
    }

    /// An array the kernel reads: `(pointer, long offset)`.
    pub fn array<T: Element>(a: &'a NDBuffer<B, T>) -> Self {
        Self::of(a, Access::Read)
    }

    /// An array the kernel writes: `(pointer, long offset)`; on the CPU a mutable view.
    pub fn array_mut<T: Element>(a: &'a NDBuffer<B, T>) -> Self {
        Self::of(a, Access::Write)
    }

    /// The same array argument with its strides passed too: `(pointer, long offset, long
    /// stride per axis)`, and any layout (transposed, flipped, sliced) accepted. A scalar
    /// is returned unchanged.
    pub fn strided(self) -> Self {
        match self {
            Arg::Array(a) => Arg::Array(ArrayArg { strided: true, ..a }),
            s => s,
        }
    }

    /// A scalar argument.
    pub fn scalar(v: impl Into<Scalar>) -> Self {
        Arg::Scalar(v.into())
    }

    /// How many kernel parameters the argument becomes (OpenCL and CUDA).
    pub fn param_count(&self) -> usize {
        match self {
            Arg::Array(a) if a.strided => 2 + a.layout.ndim(),
            Arg::Array(_) => 2,
            Arg::Scalar(_) => 1,
        }
    }

    /// What the argument is and the parameters it becomes, for error messages.
    pub fn describe(&self) -> String {
        match self {
            Arg::Array(a) => format!(
                "{} {} array {:?} -> (pointer, long offset{})",
                if a.access == Access::Write { "written" } else { "read" },
                a.dtype.name(),
                a.layout.shape(),
                if a.strided { format!(", {} long strides", a.layout.ndim()) } else { String::new() }
            ),
            Arg::Scalar(s) => format!("scalar {} -> {}", s.c_type(), s.c_type()),
        }
    }
}

macro_rules! scalar_arg {
    ($($t:ty),*) => {$(
        impl<B: Backend> From<$t> for Arg<'_, B> {
            fn from(v: $t) -> Self {
                Arg::Scalar(v.into())
            }
        }
    )*};
}
scalar_arg!(i32, u32, i64, u64, f32, f64);

/// The arguments of a user kernel launch, in parameter order: built with the methods
/// below, from a `Vec<Arg>`, or collected.
pub struct Args<'a, B: Backend> {
    items: Vec<Arg<'a, B>>,
}

impl<B: Backend> Clone for Args<'_, B> {
    fn clone(&self) -> Self {
        Args { items: self.items.clone() }
    }
}

impl<B: Backend> std::fmt::Debug for Args<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.items).finish()
    }
}

impl<B: Backend> Default for Args<'_, B> {
    fn default() -> Self {
        Args { items: Vec::new() }
    }
}

impl<'a, B: Backend> From<Vec<Arg<'a, B>>> for Args<'a, B> {
    fn from(items: Vec<Arg<'a, B>>) -> Self {
        Args { items }
    }
}

impl<'a, B: Backend> FromIterator<Arg<'a, B>> for Args<'a, B> {
    fn from_iter<I: IntoIterator<Item = Arg<'a, B>>>(iter: I) -> Self {
        Args { items: iter.into_iter().collect() }
    }
}

impl<'a, B: Backend> Args<'a, B> {
    /// No arguments.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `arg`.
    pub fn push(mut self, arg: impl Into<Arg<'a, B>>) -> Self {
        self.items.push(arg.into());
        self
    }

    /// Appends an array the kernel reads ([`Arg::array`]).
    pub fn array<T: Element>(self, a: &'a NDBuffer<B, T>) -> Self {
        self.push(Arg::array(a))
    }

    /// Appends an array the kernel writes ([`Arg::array_mut`]).
    pub fn array_mut<T: Element>(self, a: &'a NDBuffer<B, T>) -> Self {
        self.push(Arg::array_mut(a))
    }

    /// Appends an array the kernel reads, with its strides ([`Arg::strided`]).
    pub fn strided<T: Element>(self, a: &'a NDBuffer<B, T>) -> Self {
        self.push(Arg::array(a).strided())
    }

    /// Appends an array the kernel writes, with its strides.
    pub fn strided_mut<T: Element>(self, a: &'a NDBuffer<B, T>) -> Self {
        self.push(Arg::array_mut(a).strided())
    }

    /// Appends a scalar.
    pub fn scalar(self, v: impl Into<Scalar>) -> Self {
        self.push(Arg::Scalar(v.into()))
    }

    /// The arguments.
    pub fn as_slice(&self) -> &[Arg<'a, B>] {
        &self.items
    }

    /// How many arguments (not parameters: see [`Arg::param_count`]).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Checks the arguments for a kernel of `backend` and measures each array from its
    /// allocation's first byte; `memory` turns an allocation into the one the launching
    /// backend takes (`Some` for a backend's own type; the held backend's for a run-time
    /// device, `None` for another's).
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`] for an array of another device (or another backend);
    /// [`Error::InvalidArgument`] for an array passed without strides that is not
    /// C-contiguous, or whose buffer does not start at a whole element;
    /// [`Error::OutOfBounds`] for a view reaching past its buffer or allocation.
    pub fn lower<N>(
        &self,
        backend: &B,
        mut memory: impl FnMut(&'a B::Memory) -> Option<&'a N>,
    ) -> Result<Vec<Part<'a, N>>> {
        let mut out = Vec::with_capacity(self.items.len());
        for (i, item) in self.items.iter().enumerate() {
            let a = match item {
                Arg::Scalar(s) => {
                    out.push(Part::Scalar(*s));
                    continue;
                }
                Arg::Array(a) => a,
            };
            let own = a.buffer.backend();
            let mismatch = || {
                Error::DeviceMismatch(format!(
                    "argument {i} ({}) is an array of another device ({} backend)",
                    item.describe(),
                    own.kind()
                ))
            };
            if !own.same_device(backend) {
                return Err(mismatch());
            }
            let whole: &'a B::Memory = a.buffer.memory();
            let mem = memory(whole).ok_or_else(mismatch)?;
            let layout = measure(i, a, whole.len())?;
            out.push(Part::Array(ArrayParts {
                memory: mem,
                layout,
                dtype: a.dtype,
                access: a.access,
                strided: a.strided,
            }));
        }
        Ok(out)
    }
}

impl<'a, B: Backend> Args<'a, B> {
    /// [`Args::lower`] against the device of the first array (every array must be on it);
    /// for a backend whose launch checks the device of each allocation itself.
    ///
    /// # Errors
    /// As [`Args::lower`].
    pub fn lower_together<N>(
        &self,
        memory: impl FnMut(&'a B::Memory) -> Option<&'a N>,
    ) -> Result<Vec<Part<'a, N>>> {
        let first = self.items.iter().find_map(|a| match a {
            Arg::Array(a) => Some(a.buffer.backend()),
            Arg::Scalar(_) => None,
        });
        match first {
            Some(b) => self.lower(b, memory),
            None => Ok(self
                .items
                .iter()
                .filter_map(|a| if let Arg::Scalar(s) = a { Some(Part::Scalar(*s)) } else { None })
                .collect()),
        }
    }
}

/// The layout of array argument `i` measured from its allocation's first element, after
/// checking it against its buffer and the allocation (`alloc_len` bytes).
fn measure<B: Backend>(i: usize, a: &ArrayArg<'_, B>, alloc_len: usize) -> Result<Layout> {
    let size = a.dtype.size();
    let (start, len) = (a.buffer.offset(), a.buffer.len());
    if start % size != 0 {
        return Err(Error::invalid(format!(
            "argument {i}: its buffer starts at byte {start} of its allocation, not a whole \
             {size}-byte element"
        )));
    }
    if start.checked_add(len).is_none_or(|end| end > alloc_len) {
        return Err(Error::OutOfBounds {
            what: "kernel array buffer".into(),
            start,
            end: start.saturating_add(len),
            len: alloc_len,
        });
    }
    a.layout.check_fits(len / size)?;
    if a.layout.size() == 0 {
        return Ok(a.layout.clone().with_offset(0));
    }
    if !a.strided && !a.layout.is_c_contiguous() {
        return Err(Error::invalid(format!(
            "argument {i} is not C-contiguous (shape {:?}, strides {:?}): pass it with its \
             strides (Arg::strided, Args::strided) or make a dense copy (NDBuffer::copy)",
            a.layout.shape(),
            a.layout.strides()
        )));
    }
    // Inside the buffer, which lies inside the allocation: no overflow, at most isize::MAX.
    let offset = (start / size)
        .checked_add(a.layout.offset())
        .ok_or_else(|| Error::invalid(format!("argument {i}: offset overflows")))?;
    let layout = a.layout.clone().with_offset(offset);
    layout.check_fits(alloc_len / size)?;
    Ok(layout)
}

/// An array argument measured from its allocation's first element, ready for a backend.
#[derive(Debug, Clone)]
pub struct ArrayParts<'a, M> {
    /// The allocation (the backend's own memory type).
    pub memory: &'a M,
    /// The view: its offset is the element offset of index `[0, ..]` in the allocation
    /// (`0` for an empty view), checked to lie inside it.
    pub layout: Layout,
    /// The element type.
    pub dtype: DType,
    /// Whether the kernel writes it.
    pub access: Access,
    /// Whether its strides are passed.
    pub strided: bool,
}

/// A checked argument ([`Args::lower`]).
#[derive(Debug, Clone)]
pub enum Part<'a, M> {
    /// An array.
    Array(ArrayParts<'a, M>),
    /// A scalar.
    Scalar(Scalar),
}

/// The kernel parameters of a list of checked arguments ([`expand`]).
#[derive(Debug, Clone)]
pub struct Expanded<'a, M> {
    /// One value per parameter.
    pub args: Vec<KernelArg<'a, M>>,
    /// Per parameter: the element type of an array's pointer, `None` for the others.
    pub pointer_dtypes: Vec<Option<DType>>,
    /// Per parameter: the index of the argument it comes from.
    pub origin: Vec<usize>,
    /// What each argument became, for error messages.
    pub summary: String,
}

impl<M> Expanded<'_, M> {
    /// `e` with the expansion appended to its message when it is an
    /// [`Error::InvalidArgument`] (a signature mismatch names parameters, not arguments).
    pub fn explain(&self, e: Error) -> Error {
        match e {
            Error::InvalidArgument(m) => Error::InvalidArgument(format!(
                "{m} (the {} parameters come from the arguments: {})",
                self.args.len(),
                self.summary
            )),
            e => e,
        }
    }
}

/// The parameters of `parts` (see the [module](self)): per array its allocation, its
/// element offset as `I64` and, when strided, one `I64` stride per axis; per scalar its
/// value.
///
/// # Errors
/// [`Error::InvalidArgument`] when an offset or stride does not fit `i64` (not possible
/// for views that [`Args::lower`] accepted).
pub fn expand<'a, M>(parts: &[Part<'a, M>]) -> Result<Expanded<'a, M>> {
    let mut e =
        Expanded { args: Vec::new(), pointer_dtypes: Vec::new(), origin: Vec::new(), summary: String::new() };
    for (i, p) in parts.iter().enumerate() {
        let first = e.args.len();
        match p {
            Part::Scalar(s) => {
                e.args.push(s.arg());
                e.pointer_dtypes.push(None);
                e.summary.push_str(&format!("#{i} {} -> param {first}; ", s.c_type()));
            }
            Part::Array(a) => {
                let long = |v: i128| {
                    i64::try_from(v)
                        .map_err(|_| Error::invalid(format!("argument {i}: {v} does not fit a long")))
                };
                e.args.push(KernelArg::Memory(a.memory));
                e.pointer_dtypes.push(Some(a.dtype));
                e.args.push(KernelArg::I64(long(a.layout.offset() as i128)?));
                e.pointer_dtypes.push(None);
                if a.strided {
                    for &s in a.layout.strides() {
                        e.args.push(KernelArg::I64(long(s as i128)?));
                        e.pointer_dtypes.push(None);
                    }
                }
                e.summary.push_str(&format!(
                    "#{i} {} array -> params {first}..={} (pointer, long offset{}); ",
                    a.dtype.name(),
                    e.args.len() - 1,
                    if a.strided { ", long strides" } else { "" }
                ));
            }
        }
        e.origin.resize(e.args.len(), i);
    }
    let trimmed = e.summary.trim_end_matches("; ").len();
    e.summary.truncate(trimmed);
    Ok(e)
}
