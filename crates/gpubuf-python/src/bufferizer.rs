//! `gpubuf.Bufferizer`: dolphin's `Bufferizer` over [`gpubuf::Bufferizer`] on any backend.
//!
//! The Rust bufferizer's hooks only record which events fired; the Python hooks run after
//! the operation returned and the bufferizer was unlocked, in the recorded order, with the
//! GIL held. So a hook may call the bufferizer again (flush it when full, as dolphin's users
//! do), and an exception from a hook reaches the caller with the operation complete.

use crate::args::shape_arg;
use crate::backend::device_of;
use crate::backend::PyBackend;
use crate::bufferizer_types::{each, AnyBufferizer, Event, Events, Op, Typed, HOOK_NAMES};
use crate::dtype::{numpy_dtype, parse_dtype, with_dtype, Wrap};
use crate::errors::{invalid, IntoPy};
use crate::ndbuffer::PyNDBuffer;
use gpubuf::{Bufferizer, DType, Device, Error};
use parking_lot::{Mutex, MutexGuard};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

/// A batch buffer like dolphin's ``Bufferizer(shape, buffer_size, dtype, stream=None,
/// flush_hook=None, allocate_hook=None, append_one_hook=None, append_multiple_hook=None,
/// buffer_full_hook=None)``: ``buffer_size`` elements of ``shape`` and ``dtype``,
/// allocated once and zeroed, on the keyword-only ``backend`` (default: a new CPU device;
/// a ``gpubuf.Backend`` given in the fourth position is taken as the backend). ``stream``
/// is a CUDA stream (an int handle, CuPy's, pycuda's, numba's or one with
/// ``__cuda_stream__``) the buffer's copies and fills are queued on; with one the backend
/// is CUDA (``Backend("cuda")`` unless given). A stream object is kept alive with the
/// bufferizer; a stream given as an int handle must stay valid until the bufferizer and
/// every buffer it allocated are gone (their frees are ordered after the stream's work),
/// as with CuPy's ``ExternalStream``.
///
/// Appends take numpy arrays, objects with ``__dlpack__``, objects with
/// ``__cuda_array_interface__`` (on a CUDA bufferizer) and ``gpubuf.NDBuffer``s (on the
/// bufferizer's backend, or on the CPU backend, which any bufferizer reads), of the
/// bufferizer's dtype exactly (no casts); an input that shares memory with the buffer
/// (a view of it) is copied first, as numpy would. Every append is all-or-nothing: on an error
/// (``CapacityError``, ``ShapeMismatchError``, ``DTypeMismatchError``, ...) nothing changed
/// and no hook ran. Hooks are called with the bufferizer after the operation completed, in
/// dolphin's order (``allocate``: allocate_hook, flush_hook; an append: its append hook, then
/// buffer_full_hook when it filled the buffer). A hook may call the bufferizer; an exception
/// from a hook propagates (the hooks after it do not run) and the bufferizer stays usable.
#[pyclass(name = "Bufferizer", module = "gpubuf", frozen)]
pub struct PyBufferizer {
    pub(crate) inner: Mutex<AnyBufferizer>,
    events: Events,
    hooks: Mutex<[Option<Py<PyAny>>; 5]>,
    pub(crate) device: Device,
    pub(crate) dtype: DType,
    element_shape: Vec<usize>,
    capacity: usize,
    /// The foreign stream object the buffer's work runs on (kept alive with it).
    stream_owner: Option<Py<PyAny>>,
}

impl PyBufferizer {
    /// The bufferizer, locked for one operation.
    ///
    /// # Errors
    /// `InvalidArgumentError` when another thread is using it.
    pub(crate) fn lock(&self) -> PyResult<MutexGuard<'_, AnyBufferizer>> {
        self.inner.try_lock().ok_or_else(|| invalid("the bufferizer is in use on another thread"))
    }

    /// Runs `f` on the bufferizer with the GIL released, then the hooks it fired.
    fn run<R: Send>(
        slf: &Bound<'_, Self>,
        f: impl FnOnce(&mut AnyBufferizer) -> gpubuf::Result<R> + Send,
    ) -> PyResult<R> {
        let b = slf.get().lock()?;
        Self::run_locked(slf, b, f)
    }

    /// Runs `f` on the bufferizer `b` (locked by [`Self::lock`]) with the GIL released,
    /// unlocks it, then runs the hooks it fired.
    pub(crate) fn run_locked<R: Send>(
        slf: &Bound<'_, Self>,
        mut b: MutexGuard<'_, AnyBufferizer>,
        f: impl FnOnce(&mut AnyBufferizer) -> gpubuf::Result<R> + Send,
    ) -> PyResult<R> {
        let this = slf.get();
        let (r, fired) = {
            let b = &mut *b;
            let r = slf.py().detach(move || f(b));
            // Taken under the lock: only this operation's events (a failed one records none).
            (r, std::mem::take(&mut *this.events.lock()))
        };
        drop(b);
        let r = r.py()?;
        Self::fire(slf, fired)?;
        Ok(r)
    }

    /// Calls the Python hooks of `fired`, in order.
    fn fire(slf: &Bound<'_, Self>, fired: Vec<Event>) -> PyResult<()> {
        let py = slf.py();
        for e in fired {
            let hook = slf.get().hooks.lock()[e as usize].as_ref().map(|h| h.clone_ref(py));
            if let Some(hook) = hook {
                hook.call1(py, (slf,))?;
            }
        }
        Ok(())
    }
}

/// A bufferizer of `T` whose Rust hooks record their events in `events`.
fn build<T: Typed>(
    device: &Device,
    shape: &[usize],
    capacity: usize,
    events: &Events,
    stream: Option<&gpubuf::device::Stream>,
) -> gpubuf::Result<AnyBufferizer> {
    let rec = |e: Event| {
        let events = events.clone();
        move |_: &Bufferizer<Device, T>| events.lock().push(e)
    };
    let mut builder = Bufferizer::<Device, T>::builder(device, shape, capacity);
    if let Some(s) = stream {
        builder = builder.stream(s);
    }
    let b = builder
        .on_flush(rec(Event::Flush))
        .on_allocate(rec(Event::Allocate))
        .on_append_one(rec(Event::AppendOne))
        .on_append_multiple(rec(Event::AppendMultiple))
        .on_full(rec(Event::Full))
        .build()?;
    Ok(T::wrap_b(b))
}

/// A hook argument: None or a callable.
fn hook_arg(name: &str, hook: Option<Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
    match hook {
        Some(h) if h.is_none() => Ok(None),
        Some(h) if h.is_callable() => Ok(Some(h.unbind())),
        Some(_) => Err(invalid(format!("{name} must be a callable or None"))),
        None => Ok(None),
    }
}

#[pymethods]
impl PyBufferizer {
    /// A bufferizer of ``buffer_size`` elements of ``shape`` (an int or a tuple) and
    /// ``dtype`` on ``backend`` (default: a new CPU device; CUDA with a ``stream``), zeroed;
    /// the arguments and hooks as dolphin's (none fires for this first allocation).
    ///
    /// Raises ``InvalidArgumentError`` for a zero or negative ``buffer_size``, a negative
    /// extent, a size that overflows, a hook that is not callable, a stream that is not
    /// one or a backend given twice; ``DTypeMismatchError`` for a dtype gpubuf has no type
    /// for; ``DeviceMismatchError`` for a stream off CUDA or of another context;
    /// ``BackendUnavailableError`` for a stream where CUDA cannot run; ``OutOfMemoryError``.
    #[new]
    #[pyo3(signature = (shape, buffer_size, dtype, stream = None, flush_hook = None, allocate_hook = None,
        append_one_hook = None, append_multiple_hook = None, buffer_full_hook = None, *, backend = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        buffer_size: &Bound<'_, PyAny>,
        dtype: &Bound<'_, PyAny>,
        stream: Option<Bound<'_, PyAny>>,
        flush_hook: Option<Bound<'_, PyAny>>,
        allocate_hook: Option<Bound<'_, PyAny>>,
        append_one_hook: Option<Bound<'_, PyAny>>,
        append_multiple_hook: Option<Bound<'_, PyAny>>,
        buffer_full_hook: Option<Bound<'_, PyAny>>,
        backend: Option<&PyBackend>,
    ) -> PyResult<Self> {
        let element_shape = shape_arg(shape)?;
        let capacity =
            buffer_size.extract::<i128>().ok().and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
                invalid(format!("buffer_size {buffer_size} is not a non-negative int that fits in memory"))
            })?;
        let dtype = parse_dtype(dtype)?;
        let hooks = [
            hook_arg(HOOK_NAMES[0], flush_hook)?,
            hook_arg(HOOK_NAMES[1], allocate_hook)?,
            hook_arg(HOOK_NAMES[2], append_one_hook)?,
            hook_arg(HOOK_NAMES[3], append_multiple_hook)?,
            hook_arg(HOOK_NAMES[4], buffer_full_hook)?,
        ];
        // A gpubuf.Backend in dolphin's stream position names the backend.
        let stream = stream.filter(|s| !s.is_none());
        let (device, stream) = match stream {
            Some(s) if s.cast::<PyBackend>().is_ok() => {
                if backend.is_some() {
                    return Err(invalid("the backend is given twice (as the fourth argument and backend=)"));
                }
                (s.cast::<PyBackend>()?.get().device.clone(), None)
            }
            Some(s) => {
                let device = match backend {
                    Some(b) => b.device.clone(),
                    None => py.detach(|| Device::new(gpubuf::BackendKind::Cuda)).py()?,
                };
                let gs = crate::cuda_stream::foreign(&device, &s)?;
                (device, Some((gs, s.unbind())))
            }
            None => (device_of(backend), None),
        };
        let events = Events::default();
        let (d, sh, e, st) = (&device, &element_shape, &events, stream.as_ref().map(|(g, _)| g));
        let inner = py.detach(move || with_dtype!(dtype, T => build::<T>(d, sh, capacity, e, st))).py()?;
        Ok(PyBufferizer {
            inner: Mutex::new(inner),
            events,
            hooks: Mutex::new(hooks),
            device,
            dtype,
            element_shape,
            capacity,
            stream_owner: stream.map(|(_, o)| o),
        })
    }

    /// Appends one element of ``element_shape``; then append_one_hook, and
    /// buffer_full_hook if the buffer became full.
    ///
    /// Raises ``CapacityError`` when full, ``ShapeMismatchError``, ``DTypeMismatchError``,
    /// ``DeviceMismatchError``; nothing changes then.
    fn append_one(slf: &Bound<'_, Self>, element: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::append_op(slf, std::slice::from_ref(element), Op::One)
    }

    /// Appends a batch ``(n, *element_shape)``, or a list of elements (all or nothing,
    /// where dolphin appends a list one by one); then append_multiple_hook, and
    /// buffer_full_hook if the buffer became full. An empty batch or list changes nothing
    /// and runs no hook.
    ///
    /// Raises as ``append_one``; ``CapacityError`` when the elements do not all fit.
    fn append_multiple(slf: &Bound<'_, Self>, elements: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Ok(list) = elements.cast::<PyList>() {
            let items: Vec<_> = list.iter().collect();
            return Self::append_op(slf, &items, Op::List);
        }
        Self::append_op(slf, std::slice::from_ref(elements), Op::Multiple)
    }

    /// dolphin's ``append``: an array of ``element_shape`` is ``append_one``, one of
    /// ``(n, *element_shape)`` is ``append_multiple``, a list is ``append_multiple``.
    ///
    /// Raises ``ShapeMismatchError`` for any other shape; otherwise as the method it calls.
    fn append(slf: &Bound<'_, Self>, element: &Bound<'_, PyAny>) -> PyResult<()> {
        if element.cast::<PyList>().is_ok() {
            return Self::append_multiple(slf, element);
        }
        Self::append_op(slf, std::slice::from_ref(element), Op::Auto)
    }

    /// Sets every element of the whole buffer to ``value`` (default 0), empties it, then
    /// runs flush_hook.
    ///
    /// Raises ``InvalidArgumentError`` for a value the dtype cannot hold (nothing changes).
    #[pyo3(signature = (value = None))]
    fn flush(slf: &Bound<'_, Self>, value: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let zero = 0_i64.into_pyobject(slf.py())?.into_any();
        let value = value.unwrap_or(&zero);
        with_dtype!(slf.get().dtype, T => {
            let v = T::value(value)?;
            Self::run(slf, move |any| {
                T::unwrap_mut(any).ok_or_else(|| Error::invalid("bufferizer dtype changed"))?.flush(v)
            })
        })
    }

    /// Allocates a new zeroed buffer and empties the bufferizer; then allocate_hook and
    /// flush_hook (dolphin's ``allocate`` ends with ``flush(0)``). Arrays handed out before
    /// keep the old memory.
    ///
    /// Raises ``OutOfMemoryError`` (nothing changes then).
    fn allocate(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::run(slf, |any| each!(any, b => b.allocate()))
    }

    /// Empties the bufferizer without touching its memory; runs no hook.
    fn clear(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::run(slf, |any| {
            each!(any, b => b.clear());
            Ok(())
        })
    }

    /// The whole buffer ``(buffer_size, *element_shape)`` as an ``NDBuffer`` sharing its
    /// memory (dolphin's ``darray``): later appends show in it.
    #[getter]
    fn buffer(slf: &Bound<'_, Self>) -> PyResult<PyNDBuffer> {
        let array = Self::run(slf, |any| each!(any, b => b.view().map(Wrap::wrap)))?;
        Ok(PyNDBuffer { array })
    }

    /// The appended elements ``(len(self), *element_shape)`` as an ``NDBuffer`` sharing the
    /// buffer's memory.
    #[getter]
    fn filled(slf: &Bound<'_, Self>) -> PyResult<PyNDBuffer> {
        let array = Self::run(slf, |any| each!(any, b => b.filled().map(Wrap::wrap)))?;
        Ok(PyNDBuffer { array })
    }

    /// Hands the appended elements to the caller (double buffering): the returned
    /// ``NDBuffer`` (the first ``len()`` elements) keeps the buffer's memory, and appends go
    /// to another buffer (reused once every view of the
    /// old one is gone). The bufferizer is empty afterwards; no hook runs.
    ///
    /// Raises ``OutOfMemoryError`` when a second buffer cannot be allocated (nothing changes).
    fn take_batch(slf: &Bound<'_, Self>) -> PyResult<PyNDBuffer> {
        let array = Self::run(slf, |any| each!(any, b => b.take_batch().map(Wrap::wrap)))?;
        Ok(PyNDBuffer { array })
    }

    /// Elements appended since the last flush (as ``len(b)``).
    fn len(slf: &Bound<'_, Self>) -> PyResult<usize> {
        Self::run(slf, |any| Ok(each!(any, b => b.len())))
    }

    fn __len__(slf: &Bound<'_, Self>) -> PyResult<usize> {
        Self::len(slf)
    }

    /// Whether the buffer holds ``buffer_size`` elements.
    #[getter]
    fn full(slf: &Bound<'_, Self>) -> PyResult<bool> {
        Self::run(slf, |any| Ok(each!(any, b => b.is_full())))
    }

    /// The capacity in elements.
    #[getter]
    fn buffer_size(&self) -> usize {
        self.capacity
    }

    /// The shape of the whole buffer, ``(buffer_size, *element_shape)``.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let mut shape = vec![self.capacity];
        shape.extend_from_slice(&self.element_shape);
        PyTuple::new(py, shape)
    }

    /// The shape of one element.
    #[getter]
    fn element_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.element_shape)
    }

    /// The element type, as a ``numpy.dtype``.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> Bound<'py, numpy::PyArrayDescr> {
        numpy_dtype(py, self.dtype)
    }

    /// The bytes of one element (dolphin's ``element_nbytes`` counts items; this is bytes).
    #[getter]
    fn element_nbytes(slf: &Bound<'_, Self>) -> PyResult<usize> {
        Self::run(slf, |any| Ok(each!(any, b => b.element_nbytes())))
    }

    /// The bytes of the whole buffer.
    #[getter]
    fn nbytes(slf: &Bound<'_, Self>) -> PyResult<usize> {
        Self::run(slf, |any| Ok(each!(any, b => b.nbytes())))
    }

    /// The backend the buffer lives on.
    #[getter]
    fn backend(&self) -> PyBackend {
        PyBackend::new(self.device.clone())
    }

    /// Sets (or, with None, removes) the hook run after every flush (and ``allocate``).
    fn flush_hook(&self, hook: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        self.set_hook(Event::Flush, hook)
    }

    /// Sets (or removes) the hook run after ``allocate`` (not the first allocation).
    fn allocate_hook(&self, hook: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        self.set_hook(Event::Allocate, hook)
    }

    /// Sets (or removes) the hook run after each ``append_one``.
    fn append_one_hook(&self, hook: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        self.set_hook(Event::AppendOne, hook)
    }

    /// Sets (or removes) the hook run after each batch or list append.
    fn append_multiple_hook(&self, hook: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        self.set_hook(Event::AppendMultiple, hook)
    }

    /// Sets (or removes) the hook run when an append fills the buffer.
    fn buffer_full_hook(&self, hook: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        self.set_hook(Event::Full, hook)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(s) = &self.stream_owner {
            visit.call(s)?;
        }
        if let Some(hooks) = self.hooks.try_lock() {
            for h in hooks.iter().flatten() {
                visit.call(h)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        if let Some(mut hooks) = self.hooks.try_lock() {
            *hooks = Default::default();
        }
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let this = slf.get();
        let len = this.inner.try_lock().map(|b| each!(&*b, b => b.len()));
        format!(
            "gpubuf.Bufferizer(element_shape={:?}, buffer_size={}, dtype={}, len={}, backend={:?})",
            this.element_shape,
            this.capacity,
            this.dtype.name(),
            len.map_or_else(|| "?".into(), |n| n.to_string()),
            this.device.kind().name()
        )
    }
}

impl PyBufferizer {
    fn set_hook(&self, e: Event, hook: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        let hook = hook_arg(HOOK_NAMES[e as usize], hook)?;
        self.hooks.lock()[e as usize] = hook;
        Ok(())
    }
}
