//! `node_buffer`: arrays in node-shared memory ([`gpubuf_mpi::node_buffer`]) seen from
//! Python as numpy arrays. An updater made with `on_node` copies a neighbour's halo
//! straight out of such an array into this rank's (one copy in all) when the quantities
//! handed to `update` are these arrays themselves.

use crate::errors::{invalid, IntoPy};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{DType, Element, Order};
use gpubuf_cpu::CpuBackend;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::any::Any;
use std::sync::Mutex;

/// The CPU device of this module: node arrays and adopted quantities live on it, so an
/// update may mix them.
pub fn cpu() -> &'static CpuBackend {
    static CPU: std::sync::OnceLock<CpuBackend> = std::sync::OnceLock::new();
    CPU.get_or_init(CpuBackend::new)
}

/// The element types, by numpy's name.
pub const DTYPES: [DType; 7] =
    [DType::U8, DType::I32, DType::U32, DType::I64, DType::F16, DType::F32, DType::F64];

/// The element type numpy calls `name` (`numpy.dtype(x).name`).
///
/// # Errors
/// `DTypeMismatchError`-free: an `InvalidArgumentError` naming the types gpubuf has.
pub fn dtype_of(name: &str) -> PyResult<DType> {
    DTYPES.iter().copied().find(|d| d.name() == name).ok_or_else(|| {
        let names: Vec<&str> = DTYPES.iter().map(|d| d.name()).collect();
        invalid(format!("dtype {name} has no gpubuf element type ({})", names.join(", ")))
    })
}

/// An array in node-shared memory (C order), owning it; numpy sees it through
/// `__array_interface__` (`gpubuf.mpi.node_buffer` returns that numpy array, whose `base`
/// this object is).
#[pyclass(name = "NodeArray", module = "gpubuf._mpi", frozen)]
pub struct NodeArray {
    /// The `NDBuffer<CpuBackend, T>` of the array's element type; `None` while an update
    /// holds it (so that the update has its only handle, see [`NodeArray::take`]).
    array: Mutex<Option<Box<dyn Any + Send>>>,
    /// Address of the first element.
    ptr: usize,
    shape: Vec<usize>,
    dtype: DType,
    /// numpy's type string of the elements (`"<f8"`, ...).
    typestr: String,
}

impl NodeArray {
    /// The array, taken out for an update (which then holds its only handle: the one-copy
    /// path of `on_node` updaters needs that), when its elements are `T` and no update
    /// holds it already. [`NodeArray::put`] gives it back; the memory stays mapped
    /// meanwhile (the taken array owns it).
    pub fn take<T: Element>(&self) -> Option<NDBuffer<CpuBackend, T>> {
        let mut slot = self.array.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !slot.as_ref().is_some_and(|b| b.is::<NDBuffer<CpuBackend, T>>()) {
            return None;
        }
        slot.take().and_then(|b| b.downcast().ok()).map(|b| *b)
    }

    /// Gives back an array [`NodeArray::take`] took.
    pub fn put<T: Element>(&self, array: NDBuffer<CpuBackend, T>) {
        let mut slot = self.array.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = Some(Box::new(array));
    }

    /// Address, shape and element type.
    pub fn describe(&self) -> (usize, &[usize], DType) {
        (self.ptr, &self.shape, self.dtype)
    }
}

fn make<T: Element + numpy::Element>(
    py: Python<'_>,
    cpu: &CpuBackend,
    shape: &[usize],
) -> PyResult<NodeArray> {
    let array = gpubuf_mpi::node_buffer::<CpuBackend, T>(cpu, shape, Order::C, None).py()?;
    let ptr = array.buffer().memory().as_ptr() as usize + array.buffer().offset();
    let typestr: String = numpy::dtype::<T>(py).getattr("str")?.extract()?;
    Ok(NodeArray {
        array: Mutex::new(Some(Box::new(array))),
        ptr,
        shape: shape.to_vec(),
        dtype: T::DTYPE,
        typestr,
    })
}

/// A zeroed array of `shape` and element type `dtype` (numpy's name) in node-shared memory.
///
/// # Errors
/// `InvalidArgumentError` for an unknown dtype or a refused mapping; `OutOfMemoryError`
/// when the node's shared memory cannot hold it.
#[pyfunction]
pub fn node_array(py: Python<'_>, shape: Vec<usize>, dtype: &str) -> PyResult<NodeArray> {
    let cpu = cpu();
    match dtype_of(dtype)? {
        DType::U8 => make::<u8>(py, cpu, &shape),
        DType::I32 => make::<i32>(py, cpu, &shape),
        DType::U32 => make::<u32>(py, cpu, &shape),
        DType::I64 => make::<i64>(py, cpu, &shape),
        DType::F16 => make::<half::f16>(py, cpu, &shape),
        DType::F32 => make::<f32>(py, cpu, &shape),
        _ => make::<f64>(py, cpu, &shape),
    }
}

#[pymethods]
impl NodeArray {
    /// numpy's array interface (version 3): C order, writeable.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        d.set_item("typestr", &self.typestr)?;
        // An empty array has no memory: numpy wants a non-null address all the same.
        d.set_item("data", (self.ptr.max(self.dtype.size()), false))?;
        d.set_item("strides", py.None())?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("NodeArray(shape={:?}, dtype={})", self.shape, self.dtype.name())
    }
}
