//! The quantities of a Python update: numpy arrays adopted by the CPU backend for the call
//! (no copy), or node arrays (`gpubuf.mpi.node_buffer`) lent whole to the update. Checked
//! before anything moves: element type, writeable host memory the CPU backend can adopt,
//! no two quantities sharing a byte.

use crate::errors::{invalid, IntoPy};
use crate::node::NodeArray;
use gpubuf_buffer::{Buffer, NDBuffer};
use gpubuf_core::{Element, Layout};
use gpubuf_cpu::span::{byte_extent, span};
use gpubuf_cpu::{CpuBackend, CpuMemory};
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use std::ptr::NonNull;

/// One quantity of an update.
pub struct Quantity<'py, T: Element> {
    /// The array the update works on (taken out only by `drop`, to give a node array
    /// back).
    pub array: Option<NDBuffer<CpuBackend, T>>,
    /// The node array it was taken from, given back on drop.
    node: Option<Bound<'py, NodeArray>>,
}

impl<T: Element> Drop for Quantity<'_, T> {
    fn drop(&mut self) {
        if let (Some(node), Some(array)) = (&self.node, self.array.take()) {
            node.get().put(array);
        }
    }
}

/// The address of a numpy array's element `[0, ..., 0]` and its `writeable` flag, read
/// from the array object.
fn data_and_writeable(arr: &Bound<'_, PyUntypedArray>) -> (usize, bool) {
    // SAFETY: `as_array_ptr` points to the live array object `arr` holds a reference to,
    // and `_PyArray_GET_ITEM_DATA` to its fields (as rust-numpy's own `data()` reads
    // them); both fields are plain values numpy keeps, read under the GIL.
    let fields = unsafe { &*numpy::npyffi::_PyArray_GET_ITEM_DATA(arr.as_array_ptr()) };
    (fields.data as usize, fields.flags & numpy::npyffi::NPY_ARRAY_WRITEABLE != 0)
}

/// `obj` as a quantity of element type `T`: the node array it is (or whose whole numpy
/// view it is), else a numpy array adopted without a copy.
fn quantity<'py, T: Element + numpy::Element>(
    cpu: &CpuBackend,
    obj: &Bound<'py, PyAny>,
    k: usize,
) -> PyResult<Quantity<'py, T>> {
    let py = obj.py();
    let what = "a quantity is a numpy array (or a gpubuf.mpi.node_buffer array, or a pace Quantity)";
    if let Ok(node) = obj.cast::<NodeArray>() {
        return from_node(node, k);
    }
    let arr = obj.cast::<PyUntypedArray>().map_err(|_| invalid(format!("quantity {k}: {what}")))?;
    if !arr.dtype().is_equiv_to(&numpy::dtype::<T>(py)) {
        return Err(invalid(format!(
            "quantity {k} has dtype {} for an updater of {}",
            arr.dtype(),
            T::DTYPE.name()
        )));
    }
    let (data, writeable) = data_and_writeable(arr);
    if !writeable {
        return Err(invalid(format!("quantity {k} is a read-only array")));
    }
    if let Ok(node) = arr.getattr("base").and_then(|b| b.cast_into::<NodeArray>().map_err(Into::into)) {
        let (ptr, shape, _) = node.get().describe();
        if ptr == data && shape == arr.shape() && arr.is_c_contiguous() {
            return from_node(&node, k);
        }
    }
    let item = T::DTYPE.size();
    let s = span(data, arr.shape(), arr.strides(), item).ok_or_else(|| {
        invalid(format!(
            "quantity {k} cannot be updated in place (empty, not on an 8-byte boundary, or strides of \
             part of an element)"
        ))
    })?;
    let ptr =
        NonNull::new(s.base as *mut u8).ok_or_else(|| invalid(format!("quantity {k} has no memory")))?;
    let owner: Box<dyn std::any::Any + Send + Sync> = Box::new(arr.clone().into_any().unbind());
    // SAFETY: `ptr..ptr + s.len` is the span of a live, writeable numpy array's elements
    // (computed from its own data pointer, shape and strides), inside the memory its base
    // object owns; `owner` holds a reference to the array, and through it to that base, so
    // the memory is not freed while the adopted memory lives (for one update). numpy's
    // elements are initialised. The quantities of an update share no byte (`quantities`
    // checks), and while the update runs the caller's Python code does not touch them
    // (the GIL is released, but the rule stated to users is the one of any MPI buffer:
    // not touched from another thread while its message is in flight).
    let memory = unsafe { CpuMemory::adopt_raw(ptr, s.len, owner) }.py()?;
    let layout = Layout::new(arr.shape().to_vec(), s.strides, s.offset).py()?;
    let array = NDBuffer::from_buffer_layout(Buffer::from_memory(cpu, memory), layout).py()?;
    Ok(Quantity { array: Some(array), node: None })
}

fn from_node<'py, T: Element>(node: &Bound<'py, NodeArray>, k: usize) -> PyResult<Quantity<'py, T>> {
    let array = node.get().take::<T>().ok_or_else(|| {
        let (_, _, d) = node.get().describe();
        if d == T::DTYPE {
            invalid(format!("quantity {k} is a node array already given to this update"))
        } else {
            invalid(format!("quantity {k} has dtype {} for an updater of {}", d.name(), T::DTYPE.name()))
        }
    })?;
    Ok(Quantity { array: Some(array), node: Some(node.clone()) })
}

/// The bytes a quantity's elements lie in.
fn extent<T: Element>(q: &Quantity<'_, T>) -> Option<(usize, usize)> {
    let array = q.array.as_ref()?;
    let b = array.buffer();
    let base = b.memory().as_ptr() as usize + b.offset();
    let item = T::DTYPE.size() as isize;
    let layout = array.layout();
    let strides: Vec<isize> = layout.strides().iter().map(|&s| s.saturating_mul(item)).collect();
    let data = base.checked_add(layout.offset().checked_mul(T::DTYPE.size())?)?;
    byte_extent(data, layout.shape(), &strides, T::DTYPE.size())
}

/// The x quantities of an update and its y quantities, if any.
pub type Lists<'py, T> = (Vec<Quantity<'py, T>>, Option<Vec<Quantity<'py, T>>>);

/// The quantities `x` (and `y`), in order.
///
/// # Errors
/// `InvalidArgumentError` for an object that is not a quantity, another element type, a
/// read-only or unadoptable array, the same node array twice, or two quantities that
/// share memory.
pub fn quantities<'py, T: Element + numpy::Element>(
    cpu: &CpuBackend,
    x: &[Bound<'py, PyAny>],
    y: Option<&[Bound<'py, PyAny>]>,
) -> PyResult<Lists<'py, T>> {
    let qx: Vec<Quantity<'py, T>> =
        x.iter().enumerate().map(|(k, o)| quantity(cpu, o, k)).collect::<PyResult<_>>()?;
    let qy: Option<Vec<Quantity<'py, T>>> = match y {
        Some(y) => {
            Some(y.iter().enumerate().map(|(k, o)| quantity(cpu, o, x.len() + k)).collect::<PyResult<_>>()?)
        }
        None => None,
    };
    let mut spans: Vec<(usize, usize, usize)> = qx
        .iter()
        .chain(qy.iter().flatten())
        .enumerate()
        .filter_map(|(k, q)| extent(q).map(|(s, l)| (s, l, k)))
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        let ((s0, l0, k0), (s1, _, k1)) = (w[0], w[1]);
        if s0.saturating_add(l0) > s1 {
            return Err(invalid(format!("quantities {} and {} share memory", k0.min(k1), k0.max(k1))));
        }
    }
    Ok((qx, qy))
}
