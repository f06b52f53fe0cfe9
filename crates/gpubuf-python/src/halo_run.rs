//! `gpubuf.HaloDataTransformer`: pace-util's transformer (`get`, `async_pack`,
//! `async_unpack`, `synchronize`, `get_pack_buffer`, `get_unpack_buffer`, `ready`,
//! `finalize`) over gpubuf's, one launch per pack and per unpack. The spec classes and
//! the conversion of quantities are in `halo.rs`, the buffers handed out
//! (`gpubuf.HaloBuffer`, pace's `Buffer` surface) in `halo_buffer.rs`.

use crate::backend::PyBackend;
use crate::dtype::{AnyArray, Wrap};
use crate::errors::{invalid, IntoPy};
use crate::halo::specs_of;
use crate::halo_args::{quantities, AdoptCache, Quantities};
use crate::halo_buffer::PyHaloBuffer;
use crate::halo_device::{backend_arg, default_backend, device_for, set_default_backend};
use crate::halo_source::{buffer_array, check_write_back};
use crate::ndbuffer::PyNDBuffer;
use gpubuf::{DType, Device, HaloDataTransformer, NDBuffer};
use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use parking_lot::Mutex;
use pyo3::prelude::*;

/// A transformer of any element type.
enum AnyTransformer {
    U8(HaloDataTransformer<Device, u8>),
    I32(HaloDataTransformer<Device, i32>),
    U32(HaloDataTransformer<Device, u32>),
    I64(HaloDataTransformer<Device, i64>),
    I8(HaloDataTransformer<Device, i8>),
    I16(HaloDataTransformer<Device, i16>),
    U16(HaloDataTransformer<Device, u16>),
    U64(HaloDataTransformer<Device, u64>),
    /// `bool`
    Bool(HaloDataTransformer<Device, gpubuf_core::Bool>),
    F16(HaloDataTransformer<Device, half::f16>),
    F32(HaloDataTransformer<Device, f32>),
    F64(HaloDataTransformer<Device, f64>),
    /// `complex64`
    C64(HaloDataTransformer<Device, gpubuf_core::Complex<f32>>),
    /// `complex128`
    C128(HaloDataTransformer<Device, gpubuf_core::Complex<f64>>),
}

macro_rules! tdispatch {
    ($t:expr, $x:ident => $body:expr) => {
        match $t {
            AnyTransformer::U8($x) => $body,
            AnyTransformer::I32($x) => $body,
            AnyTransformer::U32($x) => $body,
            AnyTransformer::I64($x) => $body,
            AnyTransformer::I8($x) => $body,
            AnyTransformer::I16($x) => $body,
            AnyTransformer::U16($x) => $body,
            AnyTransformer::U64($x) => $body,
            AnyTransformer::Bool($x) => $body,
            AnyTransformer::F16($x) => $body,
            AnyTransformer::F32($x) => $body,
            AnyTransformer::F64($x) => $body,
            AnyTransformer::C64($x) => $body,
            AnyTransformer::C128($x) => $body,
        }
    };
}

/// The typed array an [`AnyArray`] holds, when it is of type `Self`.
trait Typed: Wrap {
    fn typed(a: &AnyArray) -> Option<&NDBuffer<Device, Self>>;
}

macro_rules! typed {
    ($t:ty, $v:ident) => {
        impl Typed for $t {
            fn typed(a: &AnyArray) -> Option<&NDBuffer<Device, Self>> {
                match a {
                    AnyArray::$v(nd) => Some(nd),
                    _ => None,
                }
            }
        }
    };
}
typed!(u8, U8);
typed!(i32, I32);
typed!(u32, U32);
typed!(i64, I64);
typed!(i8, I8);
typed!(i16, I16);
typed!(u16, U16);
typed!(u64, U64);
typed!(gpubuf_core::Bool, Bool);
typed!(half::f16, F16);
typed!(f32, F32);
typed!(f64, F64);
typed!(gpubuf_core::Complex<f32>, C64);
typed!(gpubuf_core::Complex<f64>, C128);

/// The typed arrays at indices `idx` of `v`.
fn typed_list<'a, T: Typed>(v: &'a [AnyArray], idx: &[usize]) -> PyResult<Vec<&'a NDBuffer<Device, T>>> {
    idx.iter()
        .map(|&i| {
            let a = v.get(i).ok_or_else(|| invalid("a quantity index is out of range"))?;
            T::typed(a).ok_or_else(|| {
                crate::errors::to_py(gpubuf::Error::DTypeMismatch { expected: T::DTYPE, got: a.dtype() })
            })
        })
        .collect()
}

/// pace-util's ``HaloDataTransformer``: packs many halo regions (rotated, scalar or
/// vector) into one buffer and unpacks one buffer into many, one launch each. Build it
/// with ``HaloDataTransformer.get(numpy, exchange_descriptors_x,
/// exchange_descriptors_y=None, backend=None)``.
#[pyclass(name = "HaloDataTransformer", module = "gpubuf", frozen)]
pub struct PyHaloDataTransformer {
    inner: Mutex<AnyTransformer>,
    device: Device,
    dtype: DType,
    /// Arrays used by queued work, kept alive until `synchronize`.
    in_flight: Mutex<Vec<AnyArray>>,
    /// The numpy arrays the last call adopted (`halo_args.rs`).
    cache: Mutex<AdoptCache>,
    /// The pack and unpack buffers handed out, made at the first `get_*_buffer` (the same
    /// objects every time, until `finalize`).
    buffers: Mutex<[Option<Py<PyHaloBuffer>>; 2]>,
}

/// Index of the pack buffer in `buffers`.
const PACK: usize = 0;
/// Index of the unpack buffer in `buffers`.
const UNPACK: usize = 1;

impl PyHaloDataTransformer {
    /// The quantities of a call, reusing the last call's adoptions (`halo_args.rs`).
    fn quantities(&self, xs: &Bound<'_, PyAny>, ys: Option<&Bound<'_, PyAny>>) -> PyResult<Quantities> {
        let mut cache =
            self.cache.try_lock().ok_or_else(|| invalid("the transformer is in use on another thread"))?;
        quantities(xs, ys, &self.device, self.dtype, &mut cache)
    }

    /// Runs `f` on the transformer with the GIL released.
    fn run<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut AnyTransformer) -> PyResult<R> + Send,
    ) -> PyResult<R> {
        let mut t =
            self.inner.try_lock().ok_or_else(|| invalid("the transformer is in use on another thread"))?;
        let t = &mut *t;
        py.detach(move || f(t))
    }

    /// The buffer `which` handed out so far, if any.
    fn handed_out(&self, py: Python<'_>, which: usize) -> Option<Py<PyHaloBuffer>> {
        self.buffers.lock()[which].as_ref().map(|b| b.clone_ref(py))
    }

    /// Before the device reads buffer `which`: its host mirror uploaded (`halo_buffer.rs`).
    fn flush(&self, py: Python<'_>, which: usize) -> PyResult<()> {
        match self.handed_out(py, which) {
            Some(b) => b.get().flush(py),
            None => Ok(()),
        }
    }

    /// After the device wrote buffer `which`: its host mirror is stale.
    fn written(&self, py: Python<'_>, which: usize) -> PyResult<()> {
        match self.handed_out(py, which) {
            Some(b) => b.get().device_written(),
            None => Ok(()),
        }
    }

    /// Buffer `which` (after the queued work completed) as the `HaloBuffer` handed out.
    fn buffer(&self, py: Python<'_>, which: usize) -> PyResult<Py<PyHaloBuffer>> {
        let (buf, len) = self.run(py, |t| {
            tdispatch!(t, t => {
                let b = if which == PACK { t.pack_buffer() } else { t.unpack_buffer() };
                b.map(|b| (b.clone(), t.buffer_len())).py()
            })
        })?;
        self.in_flight.lock().clear();
        if let Some(b) = self.handed_out(py, which) {
            return Ok(b);
        }
        let made = PyHaloBuffer::new(py, buffer_array(buf, self.dtype, len)?)?;
        self.buffers.lock()[which] = Some(made.clone_ref(py));
        Ok(made)
    }

    fn launch(&self, py: Python<'_>, q: &Quantities, pack: bool) -> PyResult<()> {
        let (a, x, y) = (&q.arrays, &q.x, q.y.as_deref());
        self.run(py, |t| {
            tdispatch!(t, t => {
                let xs = typed_list(a, x)?;
                let ys = y.map(|y| typed_list(a, y)).transpose()?;
                let r = if pack { t.async_pack(&xs, ys.as_deref()) } else { t.async_unpack(&xs, ys.as_deref()) };
                r.py()
            })
        })?;
        self.in_flight.lock().extend(q.arrays.iter().cloned());
        Ok(())
    }

    /// Seconds of each of `reps` packs (or unpacks, `unpack`) of the quantities, each
    /// waited for, timed inside Rust with no Python in the loop (`gpubuf.bench`'s baseline
    /// for the binding's overhead). `before` runs untimed before each one (a cache
    /// eviction), and with `warm` an untimed run of the same operation follows it.
    ///
    /// # Errors
    /// As `async_pack`/`async_unpack`; `InvalidArgumentError` for a numpy array that is
    /// uploaded rather than used in place (the loop would time a stale copy).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn time_in_rust(
        &self,
        py: Python<'_>,
        xs: &Bound<'_, PyAny>,
        ys: Option<&Bound<'_, PyAny>>,
        unpack: bool,
        reps: usize,
        warm: bool,
        before: &mut (dyn FnMut() -> gpubuf::Result<()> + Send),
    ) -> PyResult<Vec<f64>> {
        let q = self.quantities(xs, ys)?;
        if !q.uploaded.is_empty() {
            return Err(invalid(
                "time arrays the transformer uses in place: NDBuffers, or numpy arrays on the CPU",
            ));
        }
        let (a, x, y) = (&q.arrays, &q.x, q.y.as_deref());
        self.run(py, |t| {
            tdispatch!(t, t => {
                let xs = typed_list(a, x)?;
                let ys = y.map(|y| typed_list(a, y)).transpose()?;
                let mut op = || -> gpubuf::Result<()> {
                    if unpack { t.async_unpack(&xs, ys.as_deref())? } else { t.async_pack(&xs, ys.as_deref())? }
                    t.synchronize()
                };
                // Grown as the timings come: `reps` is the caller's number, unbounded.
                let mut times = Vec::with_capacity(reps.min(1 << 16));
                for _ in 0..reps {
                    before().py()?;
                    if warm {
                        op().py()?;
                    }
                    let t0 = std::time::Instant::now();
                    op().py()?;
                    times.push(t0.elapsed().as_secs_f64());
                }
                Ok(times)
            })
        })
    }
}

#[pymethods]
impl PyHaloDataTransformer {
    /// A transformer for ``exchange_descriptors_x`` (scalars, or the x components of
    /// vectors) and ``exchange_descriptors_y`` (the y components, same length), as pace's
    /// ``HaloDataTransformer.get``; the descriptors are gpubuf's ``HaloExchangeSpec``s or
    /// pace-util's (read by their attributes). The device is ``backend=`` (a
    /// ``gpubuf.Backend`` or a name), else the default (``set_default_backend``), else as
    /// pace chooses from ``np_module``: numpy (or None) a new CPU device, CuPy the CUDA
    /// device.
    ///
    /// Raises ``InvalidArgumentError`` for empty or unequal lists, mixed dtypes or objects
    /// that are no exchange descriptors, ``NotImplementedError`` for another numpy-like
    /// module without a backend.
    #[staticmethod]
    #[pyo3(signature = (np_module, exchange_descriptors_x, exchange_descriptors_y = None, backend = None))]
    fn get(
        py: Python<'_>,
        np_module: &Bound<'_, PyAny>,
        exchange_descriptors_x: &Bound<'_, PyAny>,
        exchange_descriptors_y: Option<&Bound<'_, PyAny>>,
        backend: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let device = device_for(np_module, backend_arg(backend)?)?;
        let x = specs_of(exchange_descriptors_x)?;
        let y = exchange_descriptors_y.map(specs_of).transpose()?;
        let dtype =
            x.first().map(|s| s.specification.dtype).ok_or_else(|| invalid("no exchange descriptors"))?;
        let dev = device.clone();
        let inner = py
            .detach(move || {
                Ok::<_, gpubuf::Error>(match dtype {
                    DType::U8 => AnyTransformer::U8(HaloDataTransformer::new(&dev, x, y)?),
                    DType::I32 => AnyTransformer::I32(HaloDataTransformer::new(&dev, x, y)?),
                    DType::U32 => AnyTransformer::U32(HaloDataTransformer::new(&dev, x, y)?),
                    DType::I64 => AnyTransformer::I64(HaloDataTransformer::new(&dev, x, y)?),
                    DType::I8 => AnyTransformer::I8(HaloDataTransformer::new(&dev, x, y)?),
                    DType::I16 => AnyTransformer::I16(HaloDataTransformer::new(&dev, x, y)?),
                    DType::U16 => AnyTransformer::U16(HaloDataTransformer::new(&dev, x, y)?),
                    DType::U64 => AnyTransformer::U64(HaloDataTransformer::new(&dev, x, y)?),
                    DType::Bool => AnyTransformer::Bool(HaloDataTransformer::new(&dev, x, y)?),
                    DType::F16 => AnyTransformer::F16(HaloDataTransformer::new(&dev, x, y)?),
                    DType::F32 => AnyTransformer::F32(HaloDataTransformer::new(&dev, x, y)?),
                    DType::F64 => AnyTransformer::F64(HaloDataTransformer::new(&dev, x, y)?),
                    DType::Complex64 => AnyTransformer::C64(HaloDataTransformer::new(&dev, x, y)?),
                    DType::Complex128 => AnyTransformer::C128(HaloDataTransformer::new(&dev, x, y)?),
                })
            })
            .py()?;
        Ok(PyHaloDataTransformer {
            inner: Mutex::new(inner),
            device,
            dtype,
            in_flight: Mutex::new(Vec::new()),
            cache: Mutex::new(AdoptCache::default()),
            buffers: Mutex::new([None, None]),
        })
    }

    /// Makes ``backend`` (a ``gpubuf.Backend``, a backend's name, or None) the device of
    /// every ``get`` without ``backend=``, for the whole process; returns the previous one.
    ///
    /// Raises ``InvalidArgumentError`` for an unknown name, ``BackendUnavailableError``.
    #[staticmethod]
    #[pyo3(signature = (backend))]
    fn set_default_backend(backend: Option<&Bound<'_, PyAny>>) -> PyResult<Option<PyBackend>> {
        Ok(set_default_backend(backend_arg(backend)?).map(PyBackend::new))
    }

    /// The default device of ``get``, or None (chosen from ``np_module``).
    #[staticmethod]
    fn default_backend() -> Option<PyBackend> {
        default_backend().map(PyBackend::new)
    }

    /// Queues the packing of every spec's pack slices, rotated, into the pack buffer: one
    /// array per spec in ``quantities_x`` (and ``quantities_y`` for vectors), the same
    /// array allowed for several specs.
    ///
    /// Raises ``InvalidArgumentError`` for the wrong number of arrays or strides unlike
    /// the spec, ``ShapeMismatchError``, ``DTypeMismatchError``.
    #[pyo3(signature = (quantities_x, quantities_y = None))]
    fn async_pack(
        &self,
        py: Python<'_>,
        quantities_x: &Bound<'_, PyAny>,
        quantities_y: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let q = self.quantities(quantities_x, quantities_y)?;
        self.launch(py, &q, true)?;
        self.written(py, PACK)
    }

    /// Queues the unpacking of the unpack buffer into every spec's unpack slices (on
    /// OpenCL, what was written into the unpack buffer's ``array`` is uploaded first).
    /// Arrays that had to be uploaded (not adopted) are written back before this returns.
    ///
    /// Raises as ``async_pack``, and ``InvalidPlanError`` when two specs unpack into the
    /// same elements of one array.
    #[pyo3(signature = (quantities_x, quantities_y = None))]
    fn async_unpack(
        &self,
        py: Python<'_>,
        quantities_x: &Bound<'_, PyAny>,
        quantities_y: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let q = self.quantities(quantities_x, quantities_y)?;
        // Refused before anything runs: the other quantities would be written already.
        check_write_back(py, &q.uploaded.iter().map(|(t, _)| t).collect::<Vec<_>>())?;
        self.flush(py, UNPACK)?;
        self.launch(py, &q, false)?;
        if q.uploaded.is_empty() {
            return Ok(());
        }
        self.synchronize(py)?;
        let np = py.import("numpy")?;
        for (target, array) in &q.uploaded {
            let host = PyNDBuffer::to_numpy(&Bound::new(py, PyNDBuffer { array: array.clone() })?)?;
            np.call_method1("copyto", (target.bind(py), host))?;
        }
        Ok(())
    }

    /// Waits for the queued packs and unpacks.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |t| tdispatch!(t, t => t.synchronize().py()))?;
        self.in_flight.lock().clear();
        Ok(())
    }

    /// The pack buffer (what to send), a ``gpubuf.HaloBuffer`` (pace's ``Buffer``:
    /// ``.array`` to hand to MPI), after the queued work completed; the same object every
    /// time.
    ///
    /// Raises ``InvalidArgumentError`` after ``finalize()``.
    fn get_pack_buffer(&self, py: Python<'_>) -> PyResult<Py<PyHaloBuffer>> {
        self.buffer(py, PACK)
    }

    /// The unpack buffer (where received data goes), a ``gpubuf.HaloBuffer``, after the
    /// queued work completed: write into its ``.array`` (MPI's ``Irecv``), ``assign_from``
    /// or ``receive``.
    ///
    /// Raises ``InvalidArgumentError`` after ``finalize()``.
    fn get_unpack_buffer(&self, py: Python<'_>) -> PyResult<Py<PyHaloBuffer>> {
        self.buffer(py, UNPACK)
    }

    /// pace's attribute: the pack buffer, or None after ``finalize()``.
    #[getter(_pack_buffer)]
    fn pack_buffer_attr(&self, py: Python<'_>) -> PyResult<Option<Py<PyHaloBuffer>>> {
        if !self.ready()? {
            return Ok(None);
        }
        self.buffer(py, PACK).map(Some)
    }

    /// pace's attribute: the unpack buffer, or None after ``finalize()``.
    #[getter(_unpack_buffer)]
    fn unpack_buffer_attr(&self, py: Python<'_>) -> PyResult<Option<Py<PyHaloBuffer>>> {
        if !self.ready()? {
            return Ok(None);
        }
        self.buffer(py, UNPACK).map(Some)
    }

    /// Copies received data (a numpy array of the transformer's dtype and
    /// ``buffer_size`` elements, any shape) into the unpack buffer.
    ///
    /// Raises ``LengthMismatchError`` for another number of bytes, ``DTypeMismatchError``.
    fn receive(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let arr = py.import("numpy")?.call_method1("ascontiguousarray", (data,))?;
        let arr = arr.cast_into::<PyUntypedArray>()?;
        let got = crate::dtype::from_numpy_dtype(&arr.dtype())?;
        if got != self.dtype {
            return Err(crate::errors::to_py(gpubuf::Error::DTypeMismatch { expected: self.dtype, got }));
        }
        let bytes: Vec<u8> = arr.call_method0("tobytes")?.extract()?;
        self.run(py, move |t| tdispatch!(t, t => t.receive_host(&bytes).py()))?;
        self.written(py, UNPACK)
    }

    /// Copies the pack buffer into the unpack buffer on the device (a rank that is its
    /// own neighbour).
    ///
    /// Raises ``InvalidArgumentError`` when a spec unpacks another shape than it packs.
    fn loopback(&self, py: Python<'_>) -> PyResult<()> {
        self.flush(py, PACK)?;
        self.run(py, |t| tdispatch!(t, t => t.loopback().py()))?;
        self.written(py, UNPACK)
    }

    /// Whether the buffers are there (until ``finalize()``).
    fn ready(&self) -> PyResult<bool> {
        let t =
            self.inner.try_lock().ok_or_else(|| invalid("the transformer is in use on another thread"))?;
        Ok(tdispatch!(&*t, t => t.ready()))
    }

    /// Waits for queued work and releases both buffers, and the arrays of the last call.
    fn finalize(&self, py: Python<'_>) -> PyResult<()> {
        // Taken before the GIL is released and never waited for: another thread may hold
        // it with the GIL released (adopting its arrays), and would wait for the GIL.
        let mut cache =
            self.cache.try_lock().ok_or_else(|| invalid("the transformer is in use on another thread"))?;
        self.run(py, |t| tdispatch!(t, t => t.finalize().py()))?;
        self.in_flight.lock().clear();
        cache.clear();
        *self.buffers.lock() = [None, None];
        Ok(())
    }

    /// The elements of each buffer.
    #[getter]
    fn buffer_size(&self) -> PyResult<usize> {
        let t =
            self.inner.try_lock().ok_or_else(|| invalid("the transformer is in use on another thread"))?;
        Ok(tdispatch!(&*t, t => t.buffer_len()))
    }

    /// The element type, as a ``numpy.dtype``.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> Bound<'py, numpy::PyArrayDescr> {
        crate::dtype::numpy_dtype(py, self.dtype)
    }

    /// The backend the buffers live on.
    #[getter]
    fn backend(&self) -> PyBackend {
        PyBackend::new(self.device.clone())
    }

    fn __repr__(&self) -> String {
        format!(
            "gpubuf.HaloDataTransformer(dtype={}, backend={:?})",
            self.dtype.name(),
            self.device.kind().name()
        )
    }
}
