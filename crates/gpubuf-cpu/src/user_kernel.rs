//! User kernels on the CPU: a Rust closure that gets the arrays of an [`Args`] list as
//! ndarray views (read-only for [`Arg::array`](gpubuf_buffer::Arg::array), mutable for
//! [`Arg::array_mut`](gpubuf_buffer::Arg::array_mut)) and its scalars, with the same
//! argument checks as the OpenCL and CUDA launches (see [`gpubuf_buffer::args`]).
//!
//! The bytes each array spans are borrowed while the closure runs, shared for
//! [`Arg::array`](gpubuf_buffer::Arg::array) and exclusive for
//! [`Arg::array_mut`](gpubuf_buffer::Arg::array_mut) (as [`with_array`] and
//! [`with_array_mut`] do), so other arrays of the same pool segment stay free to use; an
//! array that is written may share no bytes with another argument (the same array as input
//! and output is an error, not two aliasing views).
//! The closure runs once per launch, at submission, on the calling thread: it is the
//! closure's work to loop over the elements (ndarray's `Zip`, or rayon), and the
//! [`Launch`] is only handed to it ([`CpuKernelArgs::launch`]).
//!
//! ```
//! use gpubuf_buffer::{Args, NDBuffer};
//! use gpubuf_core::kernel::Launch;
//! use gpubuf_core::Backend;
//! use gpubuf_cpu::CpuBackend;
//!
//! let cpu = CpuBackend::new();
//! let axpy = cpu.user_kernel("axpy", |a| {
//!     let x = a.array::<f64>(0)?;
//!     let mut y = a.array_mut::<f64>(1)?;
//!     let alpha: f64 = a.scalar(2)?;
//!     y.zip_mut_with(&x, |y, &x| *y += alpha * x);
//!     Ok(())
//! });
//! let x = NDBuffer::<_, f64>::from_slice(&cpu, &[3], &[1.0, 2.0, 3.0])?;
//! let y = NDBuffer::<_, f64>::zeros(&cpu, &[3])?;
//! axpy.launch(cpu.default_stream(), &Launch::new(&[3])?, &Args::new().array(&x).array_mut(&y).scalar(0.5))?;
//! assert_eq!(y.to_vec()?, [0.5, 1.0, 1.5]);
//! // The same array read and written: an error, and the kernel still works after it.
//! assert!(axpy.launch(cpu.default_stream(), &Launch::new(&[3])?, &Args::new().array(&y).array_mut(&y).scalar(0.5)).is_err());
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

use crate::{with_array, with_array_mut, CpuBackend, CpuEvent, CpuMemory, CpuStream};
use gpubuf_buffer::args::{Access, ArrayParts, Part};
use gpubuf_buffer::Args;
use gpubuf_core::kernel::{Launch, Scalar, ScalarValue};
use gpubuf_core::{f16, Backend, Bool, Complex, DType, DeviceMemory, Element, Error, Result};
use ndarray::{ArrayViewD, ArrayViewMutD};
use std::sync::Arc;

/// The closure type of a CPU user kernel.
pub type CpuKernelFn = dyn Fn(&mut CpuKernelArgs<'_>) -> Result<()> + Send + Sync;

mod erased {
    use super::*;

    /// A view of any element type, or a scalar, handed to the closure.
    pub enum Slot<'v> {
        Read(DType, AnyRead<'v>),
        /// `None` once the closure took it.
        Write(DType, Option<AnyWrite<'v>>),
        Scalar(Scalar),
    }

    impl<'v> Slot<'v> {
        /// The same slot for a shorter lifetime (views are invariant in theirs).
        pub fn reborrow<'b>(self) -> Slot<'b>
        where
            'v: 'b,
        {
            match self {
                Slot::Read(d, v) => Slot::Read(d, v.reborrow()),
                Slot::Write(d, v) => Slot::Write(d, v.map(AnyWrite::reborrow)),
                Slot::Scalar(s) => Slot::Scalar(s),
            }
        }
    }

    macro_rules! any {
        ($($v:ident: $t:ty),*) => {
            pub enum AnyRead<'v> { $($v(ArrayViewD<'v, $t>)),* }
            pub enum AnyWrite<'v> { $($v(ArrayViewMutD<'v, $t>)),* }

            impl<'v> AnyRead<'v> {
                fn reborrow<'b>(self) -> AnyRead<'b> where 'v: 'b {
                    match self { $(AnyRead::$v(x) => AnyRead::$v(x.reborrow())),* }
                }
            }
            impl<'v> AnyWrite<'v> {
                fn reborrow<'b>(self) -> AnyWrite<'b> where 'v: 'b {
                    match self { $(AnyWrite::$v(x) => AnyWrite::$v(x.reborrow())),* }
                }
            }

            /// Moves typed views in and out of [`AnyRead`] and [`AnyWrite`].
            pub trait Sealed: Element + Sized {
                fn wrap_read(v: ArrayViewD<'_, Self>) -> AnyRead<'_>;
                fn wrap_write(v: ArrayViewMutD<'_, Self>) -> AnyWrite<'_>;
                fn read<'v>(v: &AnyRead<'v>) -> Option<ArrayViewD<'v, Self>>;
                fn take(v: AnyWrite<'_>) -> std::result::Result<ArrayViewMutD<'_, Self>, AnyWrite<'_>>;
            }
            $(
                impl Sealed for $t {
                    fn wrap_read(v: ArrayViewD<'_, Self>) -> AnyRead<'_> { AnyRead::$v(v) }
                    fn wrap_write(v: ArrayViewMutD<'_, Self>) -> AnyWrite<'_> { AnyWrite::$v(v) }
                    fn read<'v>(v: &AnyRead<'v>) -> Option<ArrayViewD<'v, Self>> {
                        match v { AnyRead::$v(x) => Some(x.clone()), #[allow(unreachable_patterns)] _ => None }
                    }
                    fn take(v: AnyWrite<'_>) -> std::result::Result<ArrayViewMutD<'_, Self>, AnyWrite<'_>> {
                        match v { AnyWrite::$v(x) => Ok(x), #[allow(unreachable_patterns)] other => Err(other) }
                    }
                }
                impl CpuElement for $t {}
            )*

            /// Lends the array `a` and the rest, then runs `f`.
            pub fn lend_any<'v, R>(
                a: &ArrayParts<'_, CpuMemory>,
                rest: &[&Part<'_, CpuMemory>],
                slots: Vec<Slot<'v>>,
                f: &mut dyn FnMut(Vec<Slot<'_>>) -> Result<R>,
            ) -> Result<R> {
                match a.dtype { $(DType::$v => lend::<$t, R>(a, rest, slots, f)),* }
            }
        };
    }
    any!(U8: u8, I32: i32, U32: u32, I64: i64, I8: i8, I16: i16, U16: u16, U64: u64, F16: f16, F32: f32, F64: f64, Bool: Bool,
        Complex64: Complex<f32>, Complex128: Complex<f64>);
}

use erased::{AnyWrite, Sealed, Slot};

/// An element type a CPU kernel can view: the [`Element`]s (`u8`, `i32`, `u32`, `i64`, `i8`,
/// `i16`, `u16`, `u64`,
/// `f16`, `f32`, `f64`, [`Bool`], `Complex<f32>`, `Complex<f64>`). Sealed.
pub trait CpuElement: Sealed {}

/// Borrows and views the arrays of `parts` one inside the other, then runs `f` on them all.
fn nest<'v, R>(
    parts: &[&Part<'_, CpuMemory>],
    mut slots: Vec<Slot<'v>>,
    f: &mut dyn FnMut(Vec<Slot<'_>>) -> Result<R>,
) -> Result<R> {
    match parts.split_first() {
        None => f(slots),
        Some((&Part::Scalar(s), rest)) => {
            slots.push(Slot::Scalar(*s));
            nest(rest, slots, f)
        }
        Some((&Part::Array(a), rest)) => erased::lend_any(a, rest, slots, f),
    }
}

fn lend<'v, T: CpuElement, R>(
    a: &ArrayParts<'_, CpuMemory>,
    rest: &[&Part<'_, CpuMemory>],
    slots: Vec<Slot<'v>>,
    f: &mut dyn FnMut(Vec<Slot<'_>>) -> Result<R>,
) -> Result<R> {
    match a.access {
        Access::Read => with_array::<T, _>(a.memory, &a.layout, |v| {
            let mut s: Vec<Slot<'_>> = slots.into_iter().map(Slot::reborrow).collect();
            s.push(Slot::Read(T::DTYPE, T::wrap_read(v)));
            nest(rest, s, f)
        })?,
        Access::Write => with_array_mut::<T, _>(a.memory, &a.layout, |v| {
            let mut s: Vec<Slot<'_>> = slots.into_iter().map(Slot::reborrow).collect();
            s.push(Slot::Write(T::DTYPE, Some(T::wrap_write(v))));
            nest(rest, s, f)
        })?,
    }
}

/// Where an argument's borrow comes in the borrow order: arrays by (allocation, first byte),
/// scalars last (they borrow nothing).
fn borrow_key(p: &Part<'_, CpuMemory>) -> (bool, usize, usize) {
    match p {
        Part::Array(a) => {
            let first = a.layout.span().ok().flatten().map_or(0, |s| s.start.saturating_mul(a.dtype.size()));
            (false, a.memory.id(), first)
        }
        Part::Scalar(_) => (true, 0, 0),
    }
}

/// The host byte range of a non-empty array argument.
fn host_bytes(a: &ArrayParts<'_, CpuMemory>) -> Result<Option<(usize, usize)>> {
    let Some(span) = a.layout.span()? else { return Ok(None) };
    let size = a.dtype.size();
    // Inside the allocation (checked by Args::lower): no overflow.
    Ok(Some((a.memory.as_ptr() as usize + span.start * size, (span.end - span.start) * size)))
}

/// Refuses a written array that shares bytes with another argument.
fn check_aliasing(name: &str, parts: &[Part<'_, CpuMemory>]) -> Result<()> {
    let arrays: Vec<(usize, &ArrayParts<'_, CpuMemory>)> = parts
        .iter()
        .enumerate()
        .filter_map(|(i, p)| if let Part::Array(a) = p { Some((i, a)) } else { None })
        .collect();
    for &(i, w) in arrays.iter().filter(|(_, a)| a.access == Access::Write) {
        let Some((start, len)) = host_bytes(w)? else { continue };
        for &(j, o) in &arrays {
            if j == i {
                continue;
            }
            let Some((o_start, o_len)) = host_bytes(o)? else { continue };
            if start < o_start + o_len && o_start < start + len {
                return Err(Error::invalid(format!(
                    "kernel {name}: argument {i} is written and shares memory with argument {j} \
                     (the same array as input and output, or overlapping views): on the CPU a \
                     written array is a mutable view and may alias nothing; write into another \
                     array"
                )));
            }
        }
    }
    Ok(())
}

/// A CPU user kernel: a named closure ([`CpuBackend::user_kernel`]). Clones share it.
#[derive(Clone)]
pub struct CpuKernel {
    backend: CpuBackend,
    name: Arc<str>,
    f: Arc<CpuKernelFn>,
}

impl std::fmt::Debug for CpuKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuKernel").field("name", &self.name).finish()
    }
}

impl CpuBackend {
    /// A user kernel named `name` (for error messages) that runs `f` at each launch.
    pub fn user_kernel(
        &self,
        name: &str,
        f: impl Fn(&mut CpuKernelArgs<'_>) -> Result<()> + Send + Sync + 'static,
    ) -> CpuKernel {
        self.user_kernel_arc(name, Arc::new(f))
    }

    /// [`CpuBackend::user_kernel`] with a closure shared already.
    pub fn user_kernel_arc(&self, name: &str, f: Arc<CpuKernelFn>) -> CpuKernel {
        CpuKernel { backend: self.clone(), name: name.into(), f }
    }
}

impl CpuKernel {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs the closure on `args` now (CPU streams run work at submission); the returned
    /// event is complete.
    ///
    /// # Errors
    /// As [`Args::lower`] (an array of another CPU device is [`Error::DeviceMismatch`]);
    /// as [`CpuKernel::launch_parts`].
    pub fn launch(
        &self,
        stream: &CpuStream,
        launch: &Launch,
        args: &Args<'_, CpuBackend>,
    ) -> Result<CpuEvent> {
        let parts = args.lower(&self.backend, Some)?;
        self.launch_parts(launch, &parts)?;
        self.backend.record_event(stream)
    }

    /// Runs the closure on checked arguments ([`Args::lower`]), with the bytes of every
    /// array borrowed (shared to read, exclusive to write), taken in the order
    /// (allocation, first byte).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a written array shares bytes with another argument,
    /// or when a borrow cannot be taken (a launch from inside a view that conflicts with one
    /// of its arrays; see [`with_array`]); what the closure returns (a view asked for with the wrong
    /// element type is [`Error::DTypeMismatch`]).
    pub fn launch_parts(&self, launch: &Launch, parts: &[Part<'_, CpuMemory>]) -> Result<()> {
        check_aliasing(&self.name, parts)?;
        let _span = tracing::trace_span!("cpu.user_launch", kernel = %self.name).entered();
        // Borrowed in the order (allocation, first byte), the order in which a borrow may
        // wait for another thread's (crate::borrow): a launch from outside any view then
        // waits for a conflicting borrow instead of failing, whatever the argument order.
        let mut order: Vec<usize> = (0..parts.len()).collect();
        order.sort_by_key(|&i| borrow_key(&parts[i]));
        let sorted: Vec<&Part<'_, CpuMemory>> = order.iter().map(|&i| &parts[i]).collect();
        nest(&sorted, Vec::with_capacity(parts.len()), &mut |slots| {
            let mut placed: Vec<Option<Slot<'_>>> = (0..slots.len()).map(|_| None).collect();
            for (&at, slot) in order.iter().zip(slots) {
                placed[at] = Some(slot);
            }
            let slots = placed.into_iter().flatten().collect();
            let mut args = CpuKernelArgs { name: self.name.clone(), launch: launch.clone(), slots };
            (self.f)(&mut args)
        })
    }
}

/// The arguments a CPU kernel's closure gets, by index in the [`Args`] list.
pub struct CpuKernelArgs<'v> {
    name: Arc<str>,
    launch: Launch,
    slots: Vec<Slot<'v>>,
}

impl<'v> CpuKernelArgs<'v> {
    /// The launch's work sizes.
    pub fn launch(&self) -> &Launch {
        &self.launch
    }

    /// How many arguments were given.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether none were.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn slot(&mut self, i: usize) -> Result<&mut Slot<'v>> {
        let n = self.slots.len();
        self.slots.get_mut(i).ok_or_else(|| {
            Error::invalid(format!("kernel {} asks for argument {i}, {n} arguments were given", self.name))
        })
    }

    /// A read-only view of array argument `i` (given with `Arg::array`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when there is no argument `i`, or it is a scalar or a
    /// written array; [`Error::DTypeMismatch`] when its elements are not `T`.
    pub fn array<T: CpuElement>(&mut self, i: usize) -> Result<ArrayViewD<'v, T>> {
        let name = self.name.clone();
        match self.slot(i)? {
            Slot::Read(dtype, v) => {
                T::read(v).ok_or(Error::DTypeMismatch { expected: T::DTYPE, got: *dtype })
            }
            Slot::Write(..) => Err(Error::invalid(format!(
                "kernel {name}: argument {i} is written (Arg::array_mut): take it with array_mut"
            ))),
            Slot::Scalar(s) => {
                Err(Error::invalid(format!("kernel {name}: argument {i} is a scalar {}", s.c_type())))
            }
        }
    }

    /// A mutable view of array argument `i` (given with `Arg::array_mut`), taken once.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when there is no argument `i`, it is a scalar or a
    /// read-only array, or its view was taken before; [`Error::DTypeMismatch`] when its
    /// elements are not `T`.
    pub fn array_mut<T: CpuElement>(&mut self, i: usize) -> Result<ArrayViewMutD<'v, T>> {
        let name = self.name.clone();
        match self.slot(i)? {
            Slot::Write(dtype, v) => {
                let any: AnyWrite<'v> = v.take().ok_or_else(|| {
                    Error::invalid(format!("kernel {name}: the view of argument {i} was taken already"))
                })?;
                T::take(any).map_err(|back| {
                    *v = Some(back);
                    Error::DTypeMismatch { expected: T::DTYPE, got: *dtype }
                })
            }
            Slot::Read(..) => Err(Error::invalid(format!(
                "kernel {name}: argument {i} is read-only: pass it with Arg::array_mut to write it"
            ))),
            Slot::Scalar(s) => {
                Err(Error::invalid(format!("kernel {name}: argument {i} is a scalar {}", s.c_type())))
            }
        }
    }

    /// Scalar argument `i` as a `T` (`i32`, `u32`, `i64`, `u64`, `f32`, `f64`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when there is no argument `i`, it is an array, or it holds
    /// another scalar type (no conversion is made).
    pub fn scalar<T: ScalarValue>(&mut self, i: usize) -> Result<T> {
        let name = self.name.clone();
        match self.slot(i)? {
            Slot::Scalar(s) => s.get::<T>().ok_or_else(|| {
                Error::invalid(format!(
                    "kernel {name}: argument {i} is a scalar {}, another type was asked for",
                    s.c_type()
                ))
            }),
            _ => Err(Error::invalid(format!("kernel {name}: argument {i} is an array, not a scalar"))),
        }
    }
}
