//! Launches of CUDA user kernels with [`Args`]: arrays ([`NDBuffer`](gpubuf_buffer::NDBuffer)s
//! of any element type) and scalars, expanded as [`gpubuf_buffer::args`] describes: each
//! array a `T*` (its allocation's base) and a `long long` element offset, and with
//! `.strided()` a `long long` stride per axis; a scalar one parameter of its C type.
//!
//! The work sizes are a [`Launch`] as on OpenCL: dimension 0 is `x`, and exactly
//! `global[d]` threads run along dimension `d` ([`crate::geometry`]; the block divides the
//! global size, chosen or given as the local size). A thread's index along `x` is
//! `blockIdx.x * blockDim.x + threadIdx.x`.
//!
//! The parameters are checked as [`UserKernel::launch`] checks them (count, 32/64-bit
//! sizes, floats, pointers as the source declares them). PTX does not record what a
//! pointer points to, so the element type of an array is not checked against its
//! parameter on CUDA (it is on OpenCL): keep one source's types in step with the other's.

use super::UserKernel;
use crate::{CudaBackend, CudaEvent, CudaMemory, CudaStream};
use gpubuf_buffer::args::{expand, Part};
use gpubuf_buffer::Args;
use gpubuf_core::kernel::Launch;
use gpubuf_core::Result;

impl UserKernel {
    /// Launches the kernel on `stream` with `args` expanded to its parameters as
    /// [`gpubuf_buffer::args`] describes: each array a `T*` (its allocation's base) and a
    /// `long long` element offset, and with `.strided()` a `long long` stride per axis;
    /// each scalar one parameter of its C type. Checked as [`UserKernel::launch`] checks
    /// (count, sizes, floats, pointers as the source declares them); PTX does not record
    /// what a pointer points to, so the arrays' element types are not checked on CUDA.
    /// The [`Launch`] is OpenCL's: dimension 0 is `x`, exactly `global[d]` threads
    /// ([`crate::geometry`]).
    ///
    /// # Errors
    /// As [`Args::lower_together`] (arrays of several devices, views that do not fit, a
    /// non-contiguous array without strides); as [`UserKernel::launch`] (the message of a
    /// signature mismatch lists how the arguments expanded), memory of another context
    /// included ([`gpubuf_core::Error::DeviceMismatch`]).
    pub fn launch_args(
        &self,
        stream: &CudaStream,
        launch: &Launch,
        args: &Args<'_, CudaBackend>,
    ) -> Result<CudaEvent> {
        let parts = args.lower_together(Some)?;
        self.launch_parts(stream, launch, &parts)
    }

    /// [`UserKernel::launch_args`] with arguments checked already ([`Args::lower`]).
    ///
    /// # Errors
    /// As [`UserKernel::launch_args`].
    pub fn launch_parts(
        &self,
        stream: &CudaStream,
        launch: &Launch,
        parts: &[Part<'_, CudaMemory>],
    ) -> Result<CudaEvent> {
        let e = expand(parts)?;
        self.launch(stream, launch, &e.args).map_err(|err| e.explain(err))
    }
}
