//! The appends of `gpubuf.Bufferizer`: each input converted (a numpy array of host memory,
//! or a device array), checked for its dtype, and handed to the Rust bufferizer as an
//! [`Input`] while the bufferizer is locked.
//!
//! An input may share memory with the buffer the append writes: a numpy view of
//! `b.buffer` (zero-copy on the CPU), memory the buffer adopted, or `b.buffer` itself. Such
//! an input is copied first, as numpy copies an assignment's overlapping value, under the
//! bufferizer's lock (so the buffer appends go to cannot change in between) and before any
//! Rust reference to its bytes is formed.

use crate::adopt::{aliases_other_allocation, unaliased};
use crate::backend::PyBackend;
use crate::bufferizer::PyBufferizer;
use crate::bufferizer_types::{each, AnyBufferizer, Held, Op, Typed};
use crate::dtype::{dispatch, with_dtype, AnyArray, Wrap};
use crate::errors::{invalid, to_py, IntoPy};
use crate::ndbuffer::PyNDBuffer;
use gpubuf::bufferizer::Input;
use gpubuf::{Backend, Buffer, Device, Error};
use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

impl PyBufferizer {
    /// One append input, converted: see the class docstring.
    fn held<'py>(&self, obj: &Bound<'py, PyAny>) -> PyResult<Held<'py>> {
        let py = obj.py();
        let np = py.import("numpy")?;
        if let Ok(nd) = obj.cast::<PyNDBuffer>() {
            let a = &nd.get().array;
            let foreign_host =
                crate::interop::host_address(a).is_some() && !self.device.same_device(a.device());
            if !foreign_host {
                return Ok(Held::Device(a.clone()));
            }
            return Ok(Held::Host(np.call_method1("asarray", (obj,))?.cast_into::<PyUntypedArray>()?));
        }
        if let Ok(a) = obj.cast::<PyUntypedArray>() {
            return Ok(Held::Host(a.clone()));
        }
        if obj.hasattr("__dlpack__")? && obj.hasattr("__dlpack_device__")? {
            let (kind, _): (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
            if kind != 1 {
                let backend = PyBackend::new(self.device.clone());
                let nd = crate::dlpack::from_dlpack(py, obj, Some(&backend))?;
                return Ok(Held::Device(nd));
            }
            let host = np.call_method1("from_dlpack", (obj,))?;
            return Ok(Held::Host(host.cast_into::<PyUntypedArray>()?));
        }
        if obj.hasattr("__cuda_array_interface__")? {
            // A CUDA array (numba, pycuda, CuPy without DLPack): adopted by a CUDA
            // bufferizer's backend, refused by any other without its pointer being used.
            let backend = PyBackend::new(self.device.clone());
            return Ok(Held::Device(crate::cuda::import(py, obj, Some(&backend))?));
        }
        Ok(Held::Host(np.call_method1("asarray", (obj,))?.cast_into::<PyUntypedArray>()?))
    }

    /// Checks an input's dtype against the bufferizer's.
    fn check_dtype(&self, h: &Held<'_>) -> PyResult<()> {
        let got = match h {
            Held::Device(a) => a.dtype(),
            Held::Host(a) => crate::dtype::from_numpy_dtype(&a.dtype())?,
        };
        if got != self.dtype {
            return Err(to_py(Error::DTypeMismatch { expected: self.dtype, got }));
        }
        Ok(())
    }

    /// Converts the inputs and runs one append.
    pub(crate) fn append_op(slf: &Bound<'_, Self>, objs: &[Bound<'_, PyAny>], op: Op) -> PyResult<()> {
        let this = slf.get();
        let held = objs.iter().map(|o| this.held(o)).collect::<PyResult<Vec<_>>>()?;
        for h in &held {
            this.check_dtype(h)?;
        }
        with_dtype!(this.dtype, T => Self::append_typed::<T>(slf, held, op))
    }

    fn append_typed<T: Typed>(slf: &Bound<'_, Self>, held: Vec<Held<'_>>, op: Op) -> PyResult<()> {
        let locked = slf.get().lock()?;
        let held = match target(&locked)? {
            Some(buffer) => held.into_iter().map(|h| unshared(h, &buffer)).collect::<PyResult<Vec<_>>>()?,
            None => held,
        };
        // Arrays rust-numpy cannot view as they are (strides that are not whole elements,
        // unaligned data) are copied by numpy first; past 32 axes they are refused.
        let held = held
            .into_iter()
            .map(|h| match h {
                Held::Host(a) => crate::dtype::viewable(a).map(Held::Host),
                device => Ok(device),
            })
            .collect::<PyResult<Vec<_>>>()?;
        let guards = held
            .iter()
            .map(|h| match h {
                Held::Host(a) => {
                    let typed = a.cast::<PyArrayDyn<T>>()?;
                    typed.try_readonly().map(Some).map_err(|e| invalid(e.to_string()))
                }
                Held::Device(_) => Ok(None),
            })
            .collect::<PyResult<Vec<_>>>()?;
        let mut inputs: Vec<Input<'_, Device, T>> = Vec::with_capacity(held.len());
        for (h, g) in held.iter().zip(&guards) {
            inputs.push(match (h, g) {
                (_, Some(g)) => Input::Host(g.as_array()),
                (Held::Device(a), None) => Input::Device(T::of(a).ok_or_else(|| invalid("dtype changed"))?),
                (Held::Host(_), None) => return Err(invalid("a host input was not borrowed")),
            });
        }
        Self::run_locked(slf, locked, move |any| {
            let b = T::unwrap_mut(any).ok_or_else(|| Error::invalid("bufferizer dtype changed"))?;
            match op {
                Op::List => b.append_list(&inputs),
                Op::One | Op::Multiple | Op::Auto => {
                    let input = inputs.pop().ok_or_else(|| Error::invalid("no input"))?;
                    match op {
                        Op::One => b.append_one(input),
                        Op::Multiple => b.append_multiple(input),
                        _ => b.append(input),
                    }
                }
            }
        })
    }
}

/// The buffer appends go to: a numpy input can share it on the CPU backend, a device
/// input (a view of the bufferizer's own buffer) on any.
///
/// # Errors
/// As `Bufferizer::view`.
fn target(b: &AnyBufferizer) -> PyResult<Option<Buffer<Device>>> {
    each!(b, b => b.view().map(|v| Some(v.buffer().clone()))).py()
}

/// An input that shares memory with `buffer` (the buffer appends go to) replaced by a copy
/// of it: a numpy array by a numpy copy, a device array by a device copy.
///
/// # Errors
/// numpy's or the device's errors making the copy.
fn unshared<'py>(h: Held<'py>, buffer: &Buffer<Device>) -> PyResult<Held<'py>> {
    Ok(match h {
        Held::Host(a) => Held::Host(unaliased(a, buffer.memory())?),
        Held::Device(a) if shares(&a, buffer) => {
            Held::Device(dispatch!(&a, nd => nd.copy().map(Wrap::wrap)).py()?)
        }
        device => device,
    })
}

/// Whether a device array shares bytes with `buffer`: a range of the same allocation that
/// overlaps it, or another allocation over some of its bytes.
fn shares(a: &AnyArray, buffer: &Buffer<Device>) -> bool {
    dispatch!(a, nd => nd.buffer().overlaps(buffer)) || aliases_other_allocation(a, buffer.memory())
}
