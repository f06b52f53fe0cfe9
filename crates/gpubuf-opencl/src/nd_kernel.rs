//! Launches of OpenCL user kernels with [`Args`]: arrays ([`NDBuffer`](gpubuf_buffer::NDBuffer)s
//! of any element type) and scalars, expanded as [`gpubuf_buffer::args`] describes (each
//! array a `__global T*` and a `long` element offset, and with `.strided()` a `long`
//! stride per axis).
//!
//! Beyond [`UserKernel::check_args`], the element type of each array is checked against
//! the type its pointer parameter points to, from the kernel's argument info: `uchar`
//! (`u8`), `int`, `uint`, `long`, `half`, `float`, `double`. A mismatch is
//! [`Error::DTypeMismatch`]; a pointer to another scalar type (`ulong`, `short`, ...) is
//! [`Error::InvalidArgument`]; a pointer to `void`, a vector, a struct or a typedef'd name
//! is not checked.
//!
//! ```
//! use gpubuf_buffer::{Args, NDBuffer};
//! use gpubuf_core::kernel::Launch;
//! use gpubuf_core::Backend;
//! use gpubuf_opencl::OpenClBackend;
//!
//! const SRC: &str = "__kernel void scale(__global const float* x, long xo, __global float* y, long yo, float a) {
//!     size_t i = get_global_id(0);
//!     y[yo + i] = a * x[xo + i];
//! }";
//! let Ok(cl) = OpenClBackend::new() else { return Ok(()) }; // no OpenCL here
//! let x = NDBuffer::<_, f32>::from_slice(&cl, &[4], &[1., 2., 3., 4.])?;
//! let y = NDBuffer::<_, f32>::zeros(&cl, &[8])?;
//! let tail = y.slice(&[4..8])?;
//! let k = cl.user_kernel(SRC, "", "scale")?;
//! k.launch_args(cl.default_stream(), &Launch::new(&[4])?, &Args::new().array(&x).array_mut(&tail).scalar(2f32))?;
//! assert_eq!(y.to_vec()?, [0., 0., 0., 0., 2., 4., 6., 8.]);
//! // An f64 array for the float* parameter: a typed error.
//! let z = NDBuffer::<_, f64>::zeros(&cl, &[4])?;
//! let bad = Args::new().array(&x).array_mut(&z).scalar(2f32);
//! assert!(matches!(k.launch_args(cl.default_stream(), &Launch::new(&[4])?, &bad), Err(gpubuf_core::Error::DTypeMismatch { .. })));
//! # Ok::<(), gpubuf_core::Error>(())
//! ```

use crate::{ClEvent, ClMemory, ClStream, OpenClBackend, UserKernel};
use gpubuf_buffer::args::{expand, Expanded, Part};
use gpubuf_buffer::Args;
use gpubuf_core::kernel::Launch;
use gpubuf_core::{DType, Error, Result};

/// The element type of an OpenCL C pointee name, `Ok(None)` for a name that is not
/// checked, `Err(name)` for a scalar with no gpubuf element type.
fn pointee_dtype(name: &str) -> std::result::Result<Option<DType>, &str> {
    Ok(Some(match name {
        "uchar" | "unsigned char" => DType::U8,
        "int" => DType::I32,
        "uint" | "unsigned int" => DType::U32,
        "long" => DType::I64,
        "char" => DType::I8,
        "short" => DType::I16,
        "ushort" | "unsigned short" => DType::U16,
        "ulong" | "unsigned long" => DType::U64,
        "half" => DType::F16,
        "float" => DType::F32,
        "double" => DType::F64,
        "bool" | "size_t" | "ptrdiff_t" | "intptr_t" | "uintptr_t" => return Err(name),
        _ => return Ok(None),
    }))
}

impl UserKernel {
    /// Launches the kernel on `stream` with `args` expanded to its parameters as
    /// [`gpubuf_buffer::args`] describes (each array a `__global T*` and a `long` element
    /// offset, and with `.strided()` a `long` stride per axis; each scalar its C type),
    /// after the checks of [`UserKernel::launch`] and of the arrays' element types.
    ///
    /// The element type of each array is checked against the type its pointer parameter
    /// points to, from the kernel's argument info: `uchar` (`u8`), `int`, `uint`, `long`,
    /// `half`, `float`, `double`. A mismatch is [`Error::DTypeMismatch`]; a pointer to
    /// another scalar type (`ulong`, `short`, ...) is [`Error::InvalidArgument`]; a
    /// pointer to `void`, a vector, a struct or a typedef'd name is not checked.
    ///
    /// # Errors
    /// As [`Args::lower_together`] (arrays of several devices, views that do not fit, a
    /// non-contiguous array without strides); [`Error::DTypeMismatch`] for an array whose
    /// element type is not the one its parameter points to; as [`UserKernel::launch`] (the
    /// message of a signature mismatch lists how the arguments expanded), a buffer of
    /// another context included ([`Error::DeviceMismatch`]).
    pub fn launch_args(
        &self,
        stream: &ClStream,
        launch: &Launch,
        args: &Args<'_, OpenClBackend>,
    ) -> Result<ClEvent> {
        let parts = args.lower_together(Some)?;
        self.launch_parts(stream, launch, &parts)
    }

    /// [`UserKernel::launch_args`] with arguments checked already ([`Args::lower`]).
    ///
    /// # Errors
    /// As [`UserKernel::launch_args`].
    pub fn launch_parts(
        &self,
        stream: &ClStream,
        launch: &Launch,
        parts: &[Part<'_, ClMemory>],
    ) -> Result<ClEvent> {
        let e = expand(parts)?;
        self.check_args(&e.args).map_err(|err| e.explain(err))?;
        self.check_pointees(&e)?;
        self.launch(stream, launch, &e.args).map_err(|err| e.explain(err))
    }

    /// Checks the element type of each array against its pointer parameter.
    fn check_pointees(&self, e: &Expanded<'_, ClMemory>) -> Result<()> {
        for (p, dtype) in e.pointer_dtypes.iter().enumerate() {
            let (Some(got), Some(declared)) = (dtype, self.pointee(p)) else { continue };
            match pointee_dtype(declared) {
                Ok(Some(expected)) if expected != *got => {
                    tracing::debug!(
                        kernel = self.name(),
                        param = p,
                        "pointer to {declared} given a {got:?} array"
                    );
                    return Err(Error::DTypeMismatch { expected, got: *got });
                }
                Err(name) => {
                    return Err(Error::invalid(format!(
                        "parameter {p} of {} (argument {}) points to {name}, which no gpubuf element \
                         type is; a {} array was given",
                        self.name(),
                        e.origin[p],
                        got.name()
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    }
}
