//! `gpubuf._gpubuf._strided_view`: an array of any layout over the memory of an existing
//! gpubuf array (numpy's `as_strided`, bounds-checked), for `gpubuf.pyopencl.to_gpubuf`
//! of pyopencl arrays whose memory is a block of gpubuf's own pool.

use crate::dtype::{byte_layout, dispatch, parse_dtype, with_dtype, AnyArray, Wrap};
use crate::errors::IntoPy;
use crate::ndbuffer::PyNDBuffer;
use gpubuf::{Device, NDBuffer};
use pyo3::prelude::*;

/// An array of ``dtype`` and ``shape`` with byte ``strides``, starting ``offset`` bytes
/// into the memory of ``base``'s buffer, sharing it (no copy).
///
/// Raises ``InvalidArgumentError`` for strides or an offset that are not whole elements,
/// ``OutOfBoundsError`` for a layout that reaches outside the buffer.
///
/// # Errors
/// As the docstring says.
#[pyfunction]
pub fn _strided_view(
    base: &PyNDBuffer,
    shape: Vec<usize>,
    strides: Vec<isize>,
    dtype: &Bound<'_, PyAny>,
    offset: usize,
) -> PyResult<AnyArray> {
    let d = parse_dtype(dtype)?;
    let layout = byte_layout(shape, &strides, offset, d)?;
    let buffer = dispatch!(&base.array, nd => nd.buffer().clone());
    Ok(with_dtype!(d, T => NDBuffer::<Device, T>::from_buffer_layout(buffer, layout).map(T::wrap).py()?))
}
