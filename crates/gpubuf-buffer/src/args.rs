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
//!   flipped view is refused ([`Error::InvalidArgument`](gpubuf_core::Error::InvalidArgument)) unless passed `.strided()`.
//! * Shapes are not passed: give the extents the kernel needs as scalars.
//! * An empty array is passed with offset `0`: its kernel must touch no element.
//! * On the CPU the kernel is a Rust closure and gets each array as an ndarray view
//!   (shape, strides and offset applied): read-only for [`Arg::array`], mutable for
//!   [`Arg::array_mut`]. There an array that is written may share no element with another
//!   argument (Rust's aliasing rules); OpenCL and CUDA kernels may update in place.
//!
//! Every launch checks, before any backend sees the arguments, that each array belongs to
//! the device of the kernel ([`Error::DeviceMismatch`](gpubuf_core::Error::DeviceMismatch)) and lies inside its allocation,
//! and the backends check the expanded list against the kernel's signature (count, kinds,
//! and on OpenCL the element type of pointer parameters, [`Error::DTypeMismatch`](gpubuf_core::Error::DTypeMismatch)).
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

mod lower;
use gpubuf_core::kernel::Scalar;
use gpubuf_core::{Backend, DType, Element, Layout};
pub use lower::{expand, ArrayParts, Expanded, Part};

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
}
