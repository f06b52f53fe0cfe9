//! numpy's `view(dtype)`: the bytes of a C-contiguous array seen as another element type.

use crate::NDBuffer;
use gpubuf_core::{Element, Error, Kernels, Order, Result};

impl<B: Kernels, T: Element> NDBuffer<B, T> {
    /// The bytes of this C-contiguous view seen as elements of `U` (numpy's
    /// `view(dtype)`): the last axis scales by the ratio of the element sizes; no copy.
    ///
    /// ```
    /// use gpubuf_buffer::NDBuffer;
    /// use gpubuf_cpu::CpuBackend;
    ///
    /// let cpu = CpuBackend::new();
    /// let a = NDBuffer::<_, u32>::from_slice(&cpu, &[2, 2], &[1, 2, 3, 4])?;
    /// let bytes = a.view_as::<u8>()?;
    /// assert_eq!(bytes.shape(), &[2, 8]);
    /// assert_eq!(bytes.to_vec()?[4..8], 2u32.to_ne_bytes());
    /// # Ok::<(), gpubuf_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the view is not C-contiguous (and not empty), the
    /// bytes of its last axis do not divide into elements of `U` (a 0-d view needs equal
    /// sizes), or its first byte is not a multiple of `U`'s size from its buffer's start.
    pub fn view_as<U: Element>(&self) -> Result<NDBuffer<B, U>> {
        let (from, to) = (T::DTYPE.size(), U::DTYPE.size());
        let mut shape = self.shape().to_vec();
        match shape.last_mut() {
            Some(last) => {
                let bytes =
                    last.checked_mul(from).ok_or_else(|| Error::invalid("the last axis is too long"))?;
                if bytes % to != 0 {
                    return Err(Error::invalid(format!(
                        "the last axis ({bytes} bytes) does not divide into {to}-byte elements"
                    )));
                }
                *last = bytes / to;
            }
            None if from != to => {
                return Err(Error::invalid("a 0-d array can only be viewed as a dtype of the same size"))
            }
            None => {}
        }
        let Some(range) = self.dense_bytes() else {
            return Err(Error::invalid("view(dtype) needs a C-contiguous array (copy() it first)"));
        };
        NDBuffer::from_buffer(self.buffer.slice(range)?, &shape, Order::C)
    }
}

#[cfg(test)]
mod tests {
    use crate::NDBuffer;
    use gpubuf_core::{Error, Order};
    use gpubuf_cpu::CpuBackend;

    #[test]
    fn views_share_bytes() {
        let cpu = CpuBackend::new();
        let a = NDBuffer::<_, u8>::from_slice(&cpu, &[2, 8], &(0..16).collect::<Vec<u8>>()).unwrap();
        let words = a.view_as::<u32>().unwrap();
        assert_eq!(words.shape(), &[2, 2]);
        let v = words.to_vec().unwrap();
        assert_eq!(v[3].to_ne_bytes(), [12, 13, 14, 15]);
        // A row of the byte array starts at byte 8: a whole u64.
        let row = a.slice(&[1..2, 0..8]).unwrap().view_as::<i64>().unwrap();
        assert_eq!(row.to_vec().unwrap()[0].to_ne_bytes(), [8, 9, 10, 11, 12, 13, 14, 15]);
        words.fill(0).unwrap();
        assert!(a.all_equal(0).unwrap(), "a view, not a copy");
        let empty = NDBuffer::<_, f64>::empty(&cpu, &[0, 3], Order::C).unwrap();
        assert_eq!(empty.view_as::<u8>().unwrap().shape(), &[0, 24]);
        let scalar = NDBuffer::<_, f32>::from_slice(&cpu, &[], &[1.5]).unwrap();
        assert_eq!(scalar.view_as::<u32>().unwrap().to_vec().unwrap(), vec![1.5f32.to_bits()]);
    }

    #[test]
    fn bad_views_are_errors() {
        let cpu = CpuBackend::new();
        let a = NDBuffer::<_, u8>::zeros(&cpu, &[4, 6]).unwrap();
        fn bad<U>(r: gpubuf_core::Result<U>) -> bool {
            matches!(r, Err(Error::InvalidArgument(_)))
        }
        assert!(bad(a.view_as::<u32>()), "6 bytes into 4-byte elements");
        assert!(bad(a.transpose(None).unwrap().view_as::<u8>()), "not C-contiguous");
        assert!(bad(a.slice(&[0..4, 1..3]).unwrap().view_as::<u8>()), "strided rows");
        assert!(bad(a.slice(&[1..2, 0..4]).unwrap().view_as::<i32>()), "first byte 6 is inside an i32");
        let scalar = NDBuffer::<_, f32>::from_slice(&cpu, &[], &[1.5]).unwrap();
        assert!(bad(scalar.view_as::<u8>()), "0-d views keep the element size");
    }
}
