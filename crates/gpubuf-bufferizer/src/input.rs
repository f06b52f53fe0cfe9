//! What can be appended: device arrays, host arrays, raw host bytes with a declared dtype.

use gpubuf_buffer::NDBuffer;
use gpubuf_core::{DType, Element, Kernels};
use ndarray::ArrayViewD;

/// One input to a [`crate::Bufferizer`] append.
pub enum Input<'a, B: Kernels, T: Element> {
    /// An array on the bufferizer's backend: copied device to device (one copy when
    /// contiguous, one copy-plan gather when not).
    Device(&'a NDBuffer<B, T>),
    /// A host array view, contiguous or not: copied host to device.
    Host(ArrayViewD<'a, T>),
    /// Raw host bytes of `shape` and `dtype` (C order), for data that arrives untyped
    /// (decoded frames, network payloads); a dtype other than the bufferizer's is an error.
    Bytes {
        /// Shape of the data.
        shape: &'a [usize],
        /// Element type of the bytes.
        dtype: DType,
        /// The bytes, C order.
        bytes: &'a [u8],
    },
}

impl<B: Kernels, T: Element> Input<'_, B, T> {
    /// The input's shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            Input::Device(a) => a.shape(),
            Input::Host(v) => v.shape(),
            Input::Bytes { shape, .. } => shape,
        }
    }
}

impl<'a, B: Kernels, T: Element> From<&'a NDBuffer<B, T>> for Input<'a, B, T> {
    fn from(a: &'a NDBuffer<B, T>) -> Self {
        Input::Device(a)
    }
}

impl<'a, B: Kernels, T: Element, D: ndarray::Dimension> From<ndarray::ArrayView<'a, T, D>>
    for Input<'a, B, T>
{
    fn from(v: ndarray::ArrayView<'a, T, D>) -> Self {
        Input::Host(v.into_dyn())
    }
}
