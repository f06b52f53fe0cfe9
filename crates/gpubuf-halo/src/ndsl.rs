//! Specs as NDSL and pace-util write them: dimension names (`"x"`, `"y_interface"`, ...)
//! and strides in bytes with an item size, read into gpubuf's [`Dim`] and
//! [`QuantityHaloSpec`] (strides in elements). The Python bindings take pace-util's spec
//! objects through these.

use crate::spec::{Dim, QuantityHaloSpec};
use gpubuf_core::{DType, Error, Result};

impl Dim {
    /// NDSL's dimension name: `"x"`, `"x_interface"`, `"y"`, `"y_interface"`,
    /// `"z_interface"`; any other name (`"z"`, or a tracer or level axis of the model's own)
    /// is a vertical axis, [`Dim::Z`], never rotated or exchanged, as in NDSL.
    pub fn from_name(name: &str) -> Dim {
        match name {
            "x" => Dim::X,
            "x_interface" => Dim::XInterface,
            "y" => Dim::Y,
            "y_interface" => Dim::YInterface,
            "z_interface" => Dim::ZInterface,
            _ => Dim::Z,
        }
    }
}

/// The fields of NDSL's `QuantityHaloSpec` (strides in bytes), for
/// [`QuantityHaloSpec::from_ndsl`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NdslSpec<'a> {
    /// Halo width (`n_points`).
    pub n_points: usize,
    /// Strides in bytes.
    pub strides: &'a [isize],
    /// Bytes per element.
    pub itemsize: usize,
    /// Shape of the whole array, halo included.
    pub shape: &'a [usize],
    /// Start of the compute domain on each axis.
    pub origin: &'a [usize],
    /// Size of the compute domain on each axis.
    pub extent: &'a [usize],
    /// Dimension names ([`Dim::from_name`]).
    pub dims: &'a [String],
}

impl QuantityHaloSpec {
    /// The spec NDSL's fields describe, for elements of `dtype`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `itemsize` is not the size of `dtype` or a stride is
    /// not a positive multiple of it; the errors of [`QuantityHaloSpec::layout`] (lengths
    /// that differ, a compute domain outside the array, a span past `isize::MAX` bytes).
    pub fn from_ndsl(n: &NdslSpec<'_>, dtype: DType) -> Result<Self> {
        if n.itemsize != dtype.size() {
            return Err(Error::invalid(format!(
                "itemsize {} is not the size of {}",
                n.itemsize,
                dtype.name()
            )));
        }
        // Element sizes are 1 to 8: the cast is exact.
        let item = dtype.size() as isize;
        let strides = n
            .strides
            .iter()
            .map(|&s| {
                if s > 0 && s % item == 0 {
                    Ok(s / item)
                } else {
                    Err(Error::invalid(format!("stride {s} is not a positive multiple of itemsize {item}")))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let spec = QuantityHaloSpec {
            n_halo: n.n_points,
            shape: n.shape.to_vec(),
            strides,
            dtype,
            origin: n.origin.to_vec(),
            extent: n.extent.to_vec(),
            dims: n.dims.iter().map(|d| Dim::from_name(d)).collect(),
        };
        spec.layout()?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(d: &[&str]) -> Vec<String> {
        d.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn ndsl_fields_read_as_gpubuf_specs() {
        let dims = names(&["x", "y_interface", "z"]);
        let n = NdslSpec {
            n_points: 3,
            strides: &[8 * 11 * 5, 8 * 5, 8],
            itemsize: 8,
            shape: &[10, 11, 5],
            origin: &[3, 3, 0],
            extent: &[4, 5, 5],
            dims: &dims,
        };
        let s = QuantityHaloSpec::from_ndsl(&n, DType::F64).unwrap();
        assert_eq!(s.strides, vec![55, 5, 1]);
        assert_eq!(s.dims, vec![Dim::X, Dim::YInterface, Dim::Z]);
        assert_eq!(s.n_halo, 3);
        let e = QuantityHaloSpec::from_ndsl(&n, DType::F32).unwrap_err();
        assert!(e.to_string().contains("itemsize 8"), "{e}");
        let bad = NdslSpec { strides: &[8 * 55, 8 * 5, 4], ..n.clone() };
        assert!(QuantityHaloSpec::from_ndsl(&bad, DType::F64).unwrap_err().to_string().contains("stride 4"));
        let neg = NdslSpec { strides: &[-8, 8, 8], ..n.clone() };
        assert!(QuantityHaloSpec::from_ndsl(&neg, DType::F64).is_err());
        let outside = NdslSpec { origin: &[7, 3, 0], ..n.clone() };
        assert!(QuantityHaloSpec::from_ndsl(&outside, DType::F64).is_err());
        let huge = NdslSpec { shape: &[usize::MAX, 11, 5], ..n };
        assert!(QuantityHaloSpec::from_ndsl(&huge, DType::F64).is_err());
        assert_eq!(Dim::from_name("tracers"), Dim::Z);
        assert_eq!(Dim::from_name("x_interface"), Dim::XInterface);
    }
}
