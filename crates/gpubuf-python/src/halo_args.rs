//! The quantities of one `async_pack`/`async_unpack` call as arrays on the transformer's
//! device, and the cache that spares a halo exchange, called again and again with the same
//! numpy arrays, their adoption on every call.
//!
//! A call names one array per spec, and the same array for several specs (pace: one
//! quantity, four edges), so the arrays are kept once each (`Quantities::arrays`) and the
//! specs refer to them by index. A numpy array adopted in place on the CPU is remembered
//! (`AdoptCache`) with what its adoption was checked against: its data pointer, shape,
//! byte strides, dtype object and writeable flag. The next call reuses the adoption when
//! the same array object comes back with all of them unchanged, and adopts it afresh
//! otherwise. The cache holds a reference to each array (so an object's address cannot be
//! taken by another object meanwhile) until a call without it, or `finalize()`.

use crate::dtype::{dispatch, AnyArray};
use crate::errors::invalid;
use crate::halo_source::{check_disjoint, numpy_quantity, source_on, Source};
use crate::numpy_mem::{data_ptr, writeable};
use gpubuf::halo::AdoptionCache;
use gpubuf::{DType, Device};
use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// What an adoption was checked against: the array object, its data pointer, dtype
/// object, shape, byte strides and `writeable` flag.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    obj: usize,
    data: usize,
    descr: usize,
    shape: Vec<usize>,
    strides: Vec<isize>,
    writeable: bool,
}

impl Fingerprint {
    fn of(arr: &Bound<'_, PyUntypedArray>) -> Self {
        Fingerprint {
            obj: arr.as_ptr() as usize,
            data: data_ptr(arr),
            descr: arr.dtype().as_ptr() as usize,
            shape: arr.shape().to_vec(),
            strides: arr.strides().to_vec(),
            writeable: writeable(arr),
        }
    }
}

/// An adopted array, with references to the numpy array and dtype objects its
/// [`Fingerprint`] names (so that no other object takes their addresses meanwhile).
pub(crate) struct Adopted {
    _obj: Py<PyUntypedArray>,
    _descr: Py<PyAny>,
    array: AnyArray,
}

/// The adopted numpy arrays of the last call (see the module docs): gpubuf-halo's
/// [`AdoptionCache`], keyed by [`Fingerprint`].
pub(crate) type AdoptCache = AdoptionCache<Fingerprint, Adopted>;

/// An uploaded numpy array's device copy has the strides of a contiguous array, which the
/// transformer checks against the spec: the numpy array itself must have them too (on
/// every axis longer than one), or the spec would be checked against strides it does not
/// describe.
///
/// # Errors
/// `InvalidArgumentError` when they differ.
fn same_strides(arr: &Bound<'_, PyUntypedArray>, copy: &AnyArray) -> PyResult<()> {
    let (elem, size) = dispatch!(copy, nd => (nd.strides().to_vec(), nd.dtype().size()));
    let bytes: Vec<isize> = elem.iter().map(|&s| s.saturating_mul(size as isize)).collect();
    let differ = arr.shape().iter().zip(arr.strides()).zip(&bytes).any(|((&n, &a), &c)| n > 1 && a != c);
    if differ {
        return Err(invalid(format!(
            "a numpy quantity with byte strides {:?} is copied to the device for the call, with byte strides {:?}: \
             pass the array with its spec's strides (contiguous), or an NDBuffer",
            arr.strides(),
            bytes
        )));
    }
    Ok(())
}

/// The quantities of one call: each distinct array once, the specs' arrays as indices
/// into them, and the numpy arrays that were uploaded (to write an unpack back into).
pub(crate) struct Quantities {
    /// The distinct arrays, on the transformer's device.
    pub(crate) arrays: Vec<AnyArray>,
    /// The array of each x spec.
    pub(crate) x: Vec<usize>,
    /// The array of each y spec.
    pub(crate) y: Option<Vec<usize>>,
    /// Uploaded numpy arrays and their device copies.
    pub(crate) uploaded: Vec<(Py<PyAny>, AnyArray)>,
}

/// Converts the quantities; one numpy array passed several times (the same object, or
/// objects with the same data pointer, shape and strides) becomes one array. Adoptions of
/// the last call are reused from `cache`, which then holds this call's.
///
/// # Errors
/// `InvalidArgumentError` for a list that is not a sequence of quantities or two handles of
/// overlapping memory; as [`numpy_quantity`] for each array.
pub(crate) fn quantities<'py>(
    xs: &Bound<'py, PyAny>,
    ys: Option<&Bound<'py, PyAny>>,
    device: &Device,
    dtype: DType,
    cache: &mut AdoptCache,
) -> PyResult<Quantities> {
    type Key = (usize, Vec<usize>, Vec<isize>);
    let mut arrays: Vec<AnyArray> = Vec::new();
    let mut seen: Vec<(Key, usize)> = Vec::new();
    // Every object met (items, and the numpy arrays they stand for) with its array: held
    // for the whole call, so that no address is reused by another object meanwhile.
    let mut objects: Vec<(Bound<'py, PyAny>, usize)> = Vec::new();
    let mut uploaded = Vec::new();
    // What this call adopts or reuses replaces the cache when `call` drops, also when the
    // call fails.
    let mut call = cache.call();
    let mut list = |l: &Bound<'py, PyAny>| -> PyResult<Vec<usize>> {
        let items: Vec<Bound<'py, PyAny>> =
            l.extract().map_err(|_| invalid("quantities are a sequence of arrays, one per spec"))?;
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let known = |p: *mut pyo3::ffi::PyObject, objects: &[(Bound<'py, PyAny>, usize)]| {
                objects.iter().find(|(o, _)| o.as_ptr() == p).map(|&(_, i)| i)
            };
            if let Some(i) = known(item.as_ptr(), &objects) {
                out.push(i);
                continue;
            }
            let arr = match source_on(&item, device)? {
                Source::Gpubuf(a) => {
                    objects.push((item, arrays.len()));
                    out.push(arrays.len());
                    arrays.push(a);
                    continue;
                }
                Source::Numpy(arr) => arr,
            };
            let i = match known(arr.as_ptr(), &objects) {
                Some(i) => i,
                None => {
                    let key = (data_ptr(&arr), arr.shape().to_vec(), arr.strides().to_vec());
                    let i = match seen.iter().find(|(k, _)| *k == key) {
                        Some(&(_, i)) => i,
                        None => {
                            let fingerprint = Fingerprint::of(&arr);
                            let array = match call.reuse(&fingerprint) {
                                Some(adopted) => adopted.array.clone(),
                                None => {
                                    let (array, back) = numpy_quantity(&arr, device, dtype)?;
                                    match back {
                                        Some(b) => {
                                            same_strides(&arr, &array)?;
                                            uploaded.push((b, array.clone()))
                                        }
                                        None => {
                                            let adopted = Adopted {
                                                _obj: arr.clone().unbind(),
                                                _descr: arr.dtype().into_any().unbind(),
                                                array: array.clone(),
                                            };
                                            call.keep(fingerprint, adopted);
                                        }
                                    }
                                    array
                                }
                            };
                            seen.push((key, arrays.len()));
                            arrays.push(array);
                            arrays.len() - 1
                        }
                    };
                    objects.push((arr.into_any(), i));
                    i
                }
            };
            objects.push((item, i));
            out.push(i);
        }
        Ok(out)
    };
    let x = list(xs);
    let y = match (&x, ys) {
        (Ok(_), Some(ys)) => Some(list(ys)).transpose(),
        _ => Ok(None),
    };
    drop(call);
    let (x, y) = (x?, y?);
    let all: Vec<&AnyArray> = arrays.iter().collect();
    check_disjoint(&all)?;
    Ok(Quantities { arrays, x, y, uploaded })
}
