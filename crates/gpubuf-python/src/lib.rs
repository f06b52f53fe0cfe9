//! `import gpubuf`: Python bindings of the gpubuf toolkit (PyO3, abi3 for CPython >= 3.10,
//! built with maturin). A thin layer over the umbrella crate's [`gpubuf::Device`], the
//! backend chosen at run time, so nothing here is generic over a backend. This is the
//! native module `gpubuf._gpubuf`; the package `gpubuf` (`python/gpubuf`) re-exports it
//! and adds `gpubuf.bench`.
//!
//! A thin layer: it converts Python objects, and every rule, plan and cache lives in the
//! Rust crates (region writes and their plans in `NDBuffer::write_region_with`, reshape
//! rules in `Layout::infer_shape` and `NDBuffer::view_as`, the halo adoption cache in
//! `gpubuf::halo::AdoptionCache`). The modules form a DAG, never a ring (`xtask`'s
//! `rings` test checks it): helpers that name no class module, then one module per Python
//! class, each naming only modules below it. Arrays are returned as [`dtype::AnyArray`],
//! which converts into `gpubuf.NDBuffer` by the impl beside the class.
//!
//! Helpers: [`errors`] (gpubuf's errors as Python exception classes), [`ffi_guard`] (what
//! the functions C calls need: no unwinding, nothing of Python touched at exit),
//! [`numpy_mem`] (a numpy array's pointer, flags and byte span), [`dtype`] (one array type
//! for every element type), [`args`] (shapes and axes), [`adopt`] (numpy memory adopted by
//! the CPU backend without a copy, and uploads), [`interop`] (numpy's array interface),
//! [`gil`] (the pool's allocator, which releases the GIL only while the device
//! allocates), [`dlpack_tensor`] (DLPack's structs), [`cuda`] (the CUDA array interface),
//! [`dlpack_cuda`] and [`dlpack`] (DLPack without copies), [`region`] (basic indexing and
//! region writes), [`reshape`] (reshapes and dtype views), [`halo_source`] (what a halo quantity stands for), [`halo_args`] (a halo call's
//! quantities). Classes: [`backend`] (`Backend`, `backends()`), [`allocators`],
//! [`pooled_buffer`] and [`pool`] (`MemoryPool`), [`ndbuffer`] (`NDBuffer`), [`halo`],
//! [`halo_buffer`], [`halo_device`] and [`halo_run`] (pace-util's halo API), [`bufferizer`] (dolphin's `Bufferizer`, with
//! [`bufferizer_append`], its appends), [`mirror`] (glumpy's `GPUData` as `Mirror`),
//! [`mod@bench`] (the benchmark's Rust-side loops). Later components add a file and a line
//! to the module function (`gpubuf_module`) below.
//!
//! Every call that copies or allocates from a device releases the GIL (a pool hit keeps
//! it); no Rust panic is raised from this
//! code on user input (PyO3 turns one into `pyo3_runtime.PanicException` should it happen).
//! The Python-facing documentation is `docs/python.md` and the stub
//! `python/gpubuf/_gpubuf.pyi`.

pub mod adopt;
pub mod allocators;
pub mod args;
pub mod backend;
pub mod bench;
pub mod bufferizer;
pub mod bufferizer_append;
pub mod bufferizer_types;
pub mod cl_pooled;
pub mod cuda;
pub mod cuda_stream;
pub mod dlpack;
pub mod dlpack_cuda;
pub mod dlpack_tensor;
pub mod dtype;
pub mod errors;
pub mod fancy;
pub mod ffi_guard;
pub mod flags;
pub mod gil;
pub mod halo;
pub mod halo_args;
pub mod halo_buffer;
pub mod halo_device;
pub mod halo_fields;
pub mod halo_run;
pub mod halo_source;
pub mod interop;
pub mod mirror;
pub mod ndbuffer;
pub mod ndbuffer_ops;
pub mod numpy_mem;
pub mod pool;
pub mod pooled_buffer;
pub mod pyopencl;
pub mod region;
pub mod reshape;
pub mod strided;

use pyo3::prelude::*;

/// The `gpubuf._gpubuf` extension module.
#[pymodule]
#[pyo3(name = "_gpubuf")]
fn gpubuf_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    m.add_class::<backend::PyBackend>()?;
    m.add_function(wrap_pyfunction!(backend::backends, m)?)?;
    m.add_function(wrap_pyfunction!(backend::available_backends, m)?)?;
    m.add_class::<ndbuffer::PyNDBuffer>()?;
    m.add_class::<flags::PyFlags>()?;
    m.add_class::<bufferizer::PyBufferizer>()?;
    mirror::register(m)?;
    m.add_function(wrap_pyfunction!(dlpack::from_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(pyopencl::_adopt_pyopencl, m)?)?;
    m.add_function(wrap_pyfunction!(strided::_strided_view, m)?)?;
    m.add_function(wrap_pyfunction!(cl_pooled::_pyopencl_block_array, m)?)?;
    m.add_function(wrap_pyfunction!(cl_pooled::_pyopencl_release, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack::_read_dlpack_capsule, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack::_dlpack_consumer_stream, m)?)?;
    m.add_class::<pool::PyMemoryPool>()?;
    m.add_class::<pooled_buffer::PyPooledBuffer>()?;
    m.add_function(wrap_pyfunction!(pool::_pool_gil_releases, m)?)?;
    m.add_class::<allocators::PyImmediateAllocator>()?;
    m.add_class::<allocators::PyDeferredAllocator>()?;
    m.add_class::<halo::PyQuantityHaloSpec>()?;
    m.add_class::<halo::PyHaloExchangeSpec>()?;
    m.add_class::<halo_run::PyHaloDataTransformer>()?;
    m.add_class::<halo_buffer::PyHaloBuffer>()?;
    m.add_class::<halo_fields::PyHaloFields>()?;
    m.add_function(wrap_pyfunction!(cuda::_cuda_array_interface, m)?)?;
    m.add_function(wrap_pyfunction!(cuda::_parse_cuda_array_interface, m)?)?;
    m.add_class::<bench::PyEvictor>()?;
    m.add_function(wrap_pyfunction!(bench::_halo_times, m)?)?;
    m.add_function(wrap_pyfunction!(bench::_pool_hit_ns, m)?)?;
    Ok(())
}
