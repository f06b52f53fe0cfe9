//! pace-util's halo API over gpubuf's [`gpubuf::HaloDataTransformer`]: `QuantityHaloSpec`,
//! `HaloExchangeSpec` and `HaloDataTransformer.get(np, exchange_descriptors_x, ...)` with
//! pace's names, argument order and conventions (strides in bytes, slices as Python
//! slices, clockwise rotations), so that pace code switches by changing an import.
//!
//! Quantities are numpy arrays (a pace `Quantity`'s `.data`; an object with a `.data`
//! array is taken too), objects with `__dlpack__` in host memory, or `gpubuf.NDBuffer`s. On
//! the CPU backend numpy arrays are adopted without a copy (`adopt.rs`), so `async_pack`
//! reads and `async_unpack` writes the arrays' own memory; otherwise an array is uploaded,
//! and after an unpack downloaded and written back before `async_unpack` returns. On CUDA,
//! arrays with `__cuda_array_interface__` (CuPy's; a `Quantity` whose `.data` is one) are
//! used in place (what a quantity object stands for is read in `halo_source.rs`).
//!
//! pace's own spec objects are taken as they are: anything with the attributes of pace's
//! `HaloExchangeSpec` and `QuantityHaloSpec` dataclasses is read through them
//! (`quantity_spec`, `specs_of`). Which device a transformer builds on is `halo_device.rs`.

use crate::dtype::parse_dtype;
use crate::errors::{invalid, IntoPy};
use gpubuf::halo::NdslSpec;
use gpubuf::{DType, HaloExchangeSpec};
use pyo3::prelude::*;
use pyo3::types::{PySlice, PyTuple};
use std::ops::Range;

/// The name of `obj`'s type, for messages.
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// `obj.name`, or `InvalidArgumentError` saying what `obj` was expected to be.
fn attribute<'py>(obj: &Bound<'py, PyAny>, name: &str, what: &str) -> PyResult<Bound<'py, PyAny>> {
    obj.getattr(name).map_err(|_| invalid(format!("{what}; a {} has no `{name}`", type_name(obj))))
}

/// Memory layout of one quantity and its halo, pace-util's ``QuantityHaloSpec``:
/// ``QuantityHaloSpec(n_points, strides, itemsize, shape, origin, extent, dims,
/// numpy_module, dtype)``, strides in bytes, dims named as pace names them (``"x"``,
/// ``"x_interface"``, ``"y"``, ``"y_interface"``, ``"z"``, ``"z_interface"``; any other
/// name is a vertical axis).
#[pyclass(name = "QuantityHaloSpec", module = "gpubuf", frozen)]
pub struct PyQuantityHaloSpec {
    spec: gpubuf::QuantityHaloSpec,
    /// The constructor's arguments, returned by the getters as given.
    numpy_module: Py<PyAny>,
    dims: Vec<String>,
    strides: Vec<isize>,
}

fn usizes(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<usize>> {
    obj.extract::<Vec<i128>>()
        .map_err(|_| invalid(format!("{what} is a sequence of ints")))?
        .into_iter()
        .map(|v| usize::try_from(v).map_err(|_| invalid(format!("{what}: {v} is negative or too large"))))
        .collect()
}

#[pymethods]
impl PyQuantityHaloSpec {
    /// As pace's dataclass; ``numpy_module`` (default numpy) is kept for pace's sake,
    /// ``dtype`` (default float64) must have ``itemsize`` bytes.
    ///
    /// Raises ``InvalidArgumentError`` for strides that are not positive multiples of
    /// ``itemsize``, lengths that differ, or a compute domain outside the array;
    /// ``DTypeMismatchError`` for a dtype gpubuf has no type for or of another size.
    #[new]
    #[pyo3(signature = (n_points, strides, itemsize, shape, origin, extent, dims, numpy_module = None, dtype = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        n_points: i128,
        strides: &Bound<'_, PyAny>,
        itemsize: i128,
        shape: &Bound<'_, PyAny>,
        origin: &Bound<'_, PyAny>,
        extent: &Bound<'_, PyAny>,
        dims: Vec<String>,
        numpy_module: Option<Py<PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        // None (pace's default too): float64.
        let dtype = dtype.filter(|d| !d.is_none()).map_or(Ok(DType::F64), parse_dtype)?;
        let itemsize = usize::try_from(itemsize)
            .map_err(|_| invalid(format!("itemsize {itemsize} is negative or too large")))?;
        let n_points = usize::try_from(n_points)
            .map_err(|_| invalid(format!("n_points {n_points} is negative or too large")))?;
        let byte_strides: Vec<isize> =
            strides.extract().map_err(|_| invalid("strides is a sequence of ints (bytes)"))?;
        let (shape, origin, extent) =
            (usizes(shape, "shape")?, usizes(origin, "origin")?, usizes(extent, "extent")?);
        let fields = NdslSpec {
            n_points,
            strides: &byte_strides,
            itemsize,
            shape: &shape,
            origin: &origin,
            extent: &extent,
            dims: &dims,
        };
        let spec = gpubuf::QuantityHaloSpec::from_ndsl(&fields, dtype).py()?;
        let numpy_module = match numpy_module {
            Some(m) => m,
            None => py.import("numpy")?.into_any().unbind(),
        };
        Ok(PyQuantityHaloSpec { spec, numpy_module, dims, strides: byte_strides })
    }

    /// The halo width.
    #[getter]
    fn n_points(&self) -> usize {
        self.spec.n_halo
    }

    /// The strides in bytes.
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.strides)
    }

    /// The bytes of one element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.spec.dtype.size()
    }

    /// The array's shape, halo included.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.spec.shape)
    }

    /// The start of the compute domain.
    #[getter]
    fn origin<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.spec.origin)
    }

    /// The size of the compute domain.
    #[getter]
    fn extent<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.spec.extent)
    }

    /// The dimension names.
    #[getter]
    fn dims<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.dims)
    }

    /// The numpy-like module given (numpy by default).
    #[getter]
    fn numpy_module(&self, py: Python<'_>) -> Py<PyAny> {
        self.numpy_module.clone_ref(py)
    }

    /// The element type, as a ``numpy.dtype``.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> Bound<'py, numpy::PyArrayDescr> {
        crate::dtype::numpy_dtype(py, self.spec.dtype)
    }
}

/// gpubuf's `QuantityHaloSpec`, or one made from the attributes of an object with
/// pace-util's (`n_points`, `strides`, `itemsize`, `shape`, `origin`, `extent`, `dims`,
/// `numpy_module`, `dtype`: pace's dataclass), checked as the constructor checks them.
///
/// # Errors
/// `InvalidArgumentError` for an object without those attributes; as the constructor.
pub(crate) fn quantity_spec<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyQuantityHaloSpec>> {
    if let Ok(s) = obj.cast::<PyQuantityHaloSpec>() {
        return Ok(s.clone());
    }
    let py = obj.py();
    let what = "a specification is a QuantityHaloSpec (gpubuf's, or pace-util's: n_points, strides, \
                itemsize, shape, origin, extent, dims, numpy_module, dtype)";
    let attr = |name: &str| attribute(obj, name, what);
    let int = |name: &str| -> PyResult<i128> {
        attr(name)?.extract().map_err(|_| invalid(format!("a QuantityHaloSpec's {name} is an int")))
    };
    let dims: Vec<String> =
        attr("dims")?.extract().map_err(|_| invalid("a QuantityHaloSpec's dims are a sequence of str"))?;
    let numpy_module = obj.getattr("numpy_module").ok().filter(|m| !m.is_none()).map(Bound::unbind);
    let spec = PyQuantityHaloSpec::new(
        py,
        int("n_points")?,
        &attr("strides")?,
        int("itemsize")?,
        &attr("shape")?,
        &attr("origin")?,
        &attr("extent")?,
        dims,
        numpy_module,
        Some(&attr("dtype")?),
    )?;
    Bound::new(py, spec)
}

/// One slice per dimension as index ranges (Python's slicing rules over the spec's
/// shape; the step must be 1 or None).
fn ranges(slices: &Bound<'_, PyAny>, shape: &[usize], what: &str) -> PyResult<Vec<Range<usize>>> {
    let items: Vec<Bound<'_, PyAny>> =
        slices.extract().map_err(|_| invalid(format!("{what} is a tuple of slices, one per dimension")))?;
    if items.len() != shape.len() {
        return Err(invalid(format!("{what}: {} slices for {} dimensions", items.len(), shape.len())));
    }
    items
        .iter()
        .zip(shape)
        .map(|(s, &n)| {
            let s = s.cast::<PySlice>().map_err(|_| invalid(format!("{what} holds a non-slice")))?;
            let len = isize::try_from(n).map_err(|_| invalid("dimension too large"))?;
            let i = s.indices(len)?;
            if i.step != 1 {
                return Err(invalid(format!(
                    "{what}: step {} (only contiguous slices are exchanged)",
                    i.step
                )));
            }
            let (a, b) = (usize::try_from(i.start).unwrap_or(0), usize::try_from(i.stop).unwrap_or(0));
            Ok(a..b.max(a))
        })
        .collect()
}

/// One exchange, pace-util's ``HaloExchangeSpec(specification, pack_slices,
/// pack_clockwise_rotation, unpack_slices)``: the slices (one Python slice per dimension)
/// to pack, the clockwise quarter turns between this rank's axes and the receiver's, and
/// the slices to unpack into.
#[pyclass(name = "HaloExchangeSpec", module = "gpubuf", frozen)]
pub struct PyHaloExchangeSpec {
    spec: HaloExchangeSpec,
    specification: Py<PyQuantityHaloSpec>,
    pack_slices: Py<PyAny>,
    unpack_slices: Py<PyAny>,
}

#[pymethods]
impl PyHaloExchangeSpec {
    /// ``specification`` is gpubuf's ``QuantityHaloSpec`` or pace-util's (read by its
    /// attributes).
    ///
    /// Raises ``InvalidArgumentError`` for slices that are not one contiguous slice per
    /// dimension, or a rotation that is not an int.
    #[new]
    fn new(
        specification: &Bound<'_, PyAny>,
        pack_slices: Bound<'_, PyAny>,
        pack_clockwise_rotation: i128,
        unpack_slices: Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let specification = quantity_spec(specification)?;
        let q = specification.get().spec.clone();
        let pack = ranges(&pack_slices, &q.shape, "pack_slices")?;
        let unpack = ranges(&unpack_slices, &q.shape, "unpack_slices")?;
        // Taken modulo 4 as pace does, for any int.
        let rotation = i32::try_from(pack_clockwise_rotation.rem_euclid(4)).unwrap_or(0);
        let spec = HaloExchangeSpec {
            specification: q,
            pack_slices: pack,
            pack_clockwise_rotation: rotation,
            unpack_slices: unpack,
        };
        spec.check().py()?;
        Ok(PyHaloExchangeSpec {
            spec,
            specification: specification.unbind(),
            pack_slices: pack_slices.unbind(),
            unpack_slices: unpack_slices.unbind(),
        })
    }

    /// The quantity's layout.
    #[getter]
    fn specification(&self, py: Python<'_>) -> Py<PyQuantityHaloSpec> {
        self.specification.clone_ref(py)
    }

    /// The slices packed, as given.
    #[getter]
    fn pack_slices(&self, py: Python<'_>) -> Py<PyAny> {
        self.pack_slices.clone_ref(py)
    }

    /// The slices unpacked into, as given.
    #[getter]
    fn unpack_slices(&self, py: Python<'_>) -> Py<PyAny> {
        self.unpack_slices.clone_ref(py)
    }

    /// The clockwise quarter turns (modulo 4).
    #[getter]
    fn pack_clockwise_rotation(&self) -> i32 {
        self.spec.pack_clockwise_rotation
    }

    /// The elements packed.
    #[getter]
    fn pack_buffer_size(&self) -> PyResult<usize> {
        self.spec.pack_size().py()
    }
}

/// The Rust spec of one exchange descriptor: gpubuf's `HaloExchangeSpec`, or any object
/// with pace-util's attributes (`specification`, `pack_slices`, `pack_clockwise_rotation`,
/// `unpack_slices`), checked as gpubuf's constructor checks them.
fn exchange_spec(obj: &Bound<'_, PyAny>) -> PyResult<HaloExchangeSpec> {
    if let Ok(s) = obj.cast::<PyHaloExchangeSpec>() {
        return Ok(s.get().spec.clone());
    }
    let what = "exchange descriptors are HaloExchangeSpec objects (gpubuf's, or pace-util's: \
                specification, pack_slices, pack_clockwise_rotation, unpack_slices)";
    let specification = attribute(obj, "specification", what)?;
    let pack = attribute(obj, "pack_slices", what)?;
    let rotation: i128 = attribute(obj, "pack_clockwise_rotation", what)?
        .extract()
        .map_err(|_| invalid("pack_clockwise_rotation is an int"))?;
    let unpack = attribute(obj, "unpack_slices", what)?;
    Ok(PyHaloExchangeSpec::new(&specification, pack, rotation, unpack)?.spec)
}

/// The Rust specs of a list of exchange descriptors (gpubuf's or pace-util's).
pub(crate) fn specs_of(list: &Bound<'_, PyAny>) -> PyResult<Vec<HaloExchangeSpec>> {
    let items: Vec<Bound<'_, PyAny>> =
        list.extract().map_err(|_| invalid("exchange descriptors are a sequence of HaloExchangeSpec"))?;
    items.iter().map(exchange_spec).collect()
}
