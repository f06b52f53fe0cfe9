//! `gpubuf.ImmediateAllocator` and `gpubuf.DeferredAllocator`: pyopencl's allocator
//! classes, which only name a backend and when its memory is backed (`MemoryPool` reads
//! them).

use crate::backend::PyBackend;
use gpubuf::Device;
use pyo3::prelude::*;

/// pyopencl's ``ImmediateAllocator``: the pool's memory exists when ``allocate`` returns
/// (the default of a pool given a ``Backend``).
#[pyclass(name = "ImmediateAllocator", module = "gpubuf", frozen)]
pub struct PyImmediateAllocator {
    pub(crate) device: Device,
}

#[pymethods]
impl PyImmediateAllocator {
    #[new]
    fn new(backend: &PyBackend) -> Self {
        PyImmediateAllocator { device: backend.device.clone() }
    }
}

/// pyopencl's ``DeferredAllocator``: the backend may back the memory on first use.
#[pyclass(name = "DeferredAllocator", module = "gpubuf", frozen)]
pub struct PyDeferredAllocator {
    pub(crate) device: Device,
}

#[pymethods]
impl PyDeferredAllocator {
    #[new]
    fn new(backend: &PyBackend) -> Self {
        PyDeferredAllocator { device: backend.device.clone() }
    }
}
