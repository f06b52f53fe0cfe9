//! `gpubuf._gpubuf._strided_view`: an array of any layout over the memory of an existing
//! gpubuf array (numpy's `as_strided`, bounds-checked), for `gpubuf.pyopencl.to_gpubuf`
//! of pyopencl arrays whose memory is a block of gpubuf's own pool.

use crate::dtype::{dispatch, parse_dtype, with_dtype, AnyArray, Wrap};
use crate::errors::{invalid, IntoPy};
use crate::ndbuffer::PyNDBuffer;
use gpubuf::{Device, Layout, NDBuffer};
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
    let size = d.size();
    let whole = |b: isize| b.checked_rem(size as isize) == Some(0);
    if strides.len() != shape.len() || !strides.iter().all(|&s| whole(s)) || offset % size != 0 {
        return Err(invalid(format!(
            "strides {strides:?} and offset {offset} for shape {shape:?} are not whole {size}-byte elements"
        )));
    }
    let buffer = dispatch!(&base.array, nd => nd.buffer().clone());
    let elems: Vec<isize> = strides.iter().map(|s| s / size as isize).collect();
    let layout = Layout::new(shape, elems, offset / size).py()?;
    Ok(with_dtype!(d, T => NDBuffer::<Device, T>::from_buffer_layout(buffer, layout).map(T::wrap).py()?))
}
