//! Specs and partitioners as `gpubuf.mpi` hands them over: plain tuples, read into
//! gpubuf's [`QuantityHaloSpec`] (through [`QuantityHaloSpec::from_ndsl`]) and partitioners.

use crate::errors::{invalid, IntoPy};
use crate::node::dtype_of;
use gpubuf_core::DType;
use gpubuf_halo::{CubedSpherePartitioner, NdslSpec, Partitioner, QuantityHaloSpec, TilePartitioner};
use pyo3::prelude::*;

/// `("tile", ny, nx, periodic)` or `("cube", n)` as a partitioner.
///
/// # Errors
/// `InvalidArgumentError` for another tuple or a layout the partitioners refuse.
pub fn partitioner(obj: &Bound<'_, PyAny>) -> PyResult<Box<dyn Partitioner>> {
    if let Ok((kind, ny, nx, periodic)) = obj.extract::<(String, usize, usize, bool)>() {
        if kind == "tile" {
            return Ok(Box::new(TilePartitioner::new((ny, nx), periodic).py()?));
        }
    }
    if let Ok((kind, n)) = obj.extract::<(String, usize)>() {
        if kind == "cube" {
            return Ok(Box::new(CubedSpherePartitioner::new(n).py()?));
        }
    }
    Err(invalid("a partitioner is (\"tile\", ny, nx, periodic) or (\"cube\", n)"))
}

/// The spec tuple's fields: `(n_points, strides (bytes), itemsize, shape, origin, extent,
/// dims, dtype name)`.
type SpecTuple = (usize, Vec<isize>, usize, Vec<usize>, Vec<usize>, Vec<usize>, Vec<String>, String);

/// A sequence of spec tuples as specs, and their common element type.
///
/// # Errors
/// `InvalidArgumentError` for an empty sequence, a tuple of other fields, specs of several
/// element types; the errors of [`QuantityHaloSpec::from_ndsl`].
pub fn specs(obj: &Bound<'_, PyAny>) -> PyResult<(Vec<QuantityHaloSpec>, DType)> {
    let tuples: Vec<SpecTuple> = obj.extract().map_err(|_| {
        invalid("specs are (n_points, strides, itemsize, shape, origin, extent, dims, dtype) tuples of ints, lists and names")
    })?;
    let mut dtype = None;
    let mut out = Vec::with_capacity(tuples.len());
    for (k, (n_points, strides, itemsize, shape, origin, extent, dims, d)) in tuples.iter().enumerate() {
        let d = dtype_of(d)?;
        if dtype.is_some_and(|first| first != d) {
            return Err(invalid(format!("spec {k} is of {}, spec 0 of another element type", d.name())));
        }
        dtype = Some(d);
        let fields =
            NdslSpec { n_points: *n_points, strides, itemsize: *itemsize, shape, origin, extent, dims };
        out.push(QuantityHaloSpec::from_ndsl(&fields, d).py()?);
    }
    let dtype = dtype.ok_or_else(|| invalid("an updater needs at least one spec"))?;
    Ok((out, dtype))
}
