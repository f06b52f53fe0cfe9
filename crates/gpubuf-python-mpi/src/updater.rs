//! `gpubuf._mpi.HaloUpdater`: gpubuf's [`HaloUpdater`] over a duplicate of an mpi4py
//! communicator, for host (numpy) quantities of one element type. `gpubuf.mpi.HaloUpdater`
//! wraps it (reading pace's or gpubuf's spec and partitioner objects, checking the
//! communicator on every call).

use crate::comm::{dup, handle_of, running};
use crate::errors::{invalid, IntoPy};
use crate::quantity::quantities;
use crate::spec::{partitioner, specs};
use gpubuf_core::{DType, Element};
use gpubuf_cpu::CpuBackend;
use gpubuf_halo::{Partitioner, QuantityHaloSpec, TilePartitioner};
use gpubuf_mpi::mpi::topology::SimpleCommunicator;
use gpubuf_mpi::HaloUpdater;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The updater of each element type.
enum Typed {
    U8(HaloUpdater<'static, CpuBackend, u8>),
    I32(HaloUpdater<'static, CpuBackend, i32>),
    U32(HaloUpdater<'static, CpuBackend, u32>),
    I64(HaloUpdater<'static, CpuBackend, i64>),
    F16(HaloUpdater<'static, CpuBackend, half::f16>),
    F32(HaloUpdater<'static, CpuBackend, f32>),
    F64(HaloUpdater<'static, CpuBackend, f64>),
}

/// Runs `$body` with `$u` bound to the updater of `$typed`, whatever its element type.
macro_rules! each {
    ($typed:expr, $u:ident => $body:expr) => {
        match $typed {
            Typed::U8($u) => $body,
            Typed::I32($u) => $body,
            Typed::U32($u) => $body,
            Typed::I64($u) => $body,
            Typed::F16($u) => $body,
            Typed::F32($u) => $body,
            Typed::F64($u) => $body,
        }
    };
}

/// What an updater is made of, read on this rank.
struct Parts {
    part: Box<dyn Partitioner>,
    x: Vec<QuantityHaloSpec>,
    y: Option<Vec<QuantityHaloSpec>>,
    dtype: DType,
}

/// A value handed to a closure run without the GIL.
struct Unbound<V>(V);
// SAFETY: the closures given an `Unbound` run on the calling thread (`Python::detach` runs
// its closure there, only without the GIL), so nothing crosses to another thread; what
// they reach (the updater, its quantities) holds no Python object.
unsafe impl<V> Send for Unbound<V> {}

impl<V> Unbound<V> {
    /// The value (taking the whole wrapper into the closure that calls it).
    fn get(self) -> V {
        self.0
    }
}

fn build<T: Element>(
    cpu: &CpuBackend,
    comm: SimpleCommunicator,
    p: &Parts,
    name: &str,
    on_node: bool,
) -> gpubuf_core::Result<HaloUpdater<'static, CpuBackend, T>> {
    let part = &*p.part;
    if on_node {
        HaloUpdater::on_node(cpu, comm, part, &p.x, p.y.as_deref(), name)
    } else {
        HaloUpdater::new(cpu, comm, part, &p.x, p.y.as_deref(), name)
    }
}

/// The updater, which Python threads may hand to each other.
struct Movable(Option<Typed>);

// SAFETY: the updater's MPI handles (its window among them) are used only through
// `&mut PyHaloUpdater`, which pyo3 lends to one thread at a time (its borrow flag, taken
// with the GIL held), or dropped with the object; MPI calls from whichever thread holds
// it are valid where mpi4py initialised MPI at `MPI_THREAD_SERIALIZED` or above
// (mpi4py's default is `MPI_THREAD_MULTIPLE`), which `gpubuf.mpi` checks before a call
// from another thread than the main one.
unsafe impl Send for Movable {}
// SAFETY: as for `Send`: shared references (`closed`) read only whether it is `None`,
// and no `&mut` exists meanwhile (pyo3's borrow flag).
unsafe impl Sync for Movable {}

impl std::ops::Deref for Movable {
    type Target = Option<Typed>;
    fn deref(&self) -> &Option<Typed> {
        &self.0
    }
}

impl std::ops::DerefMut for Movable {
    fn deref_mut(&mut self) -> &mut Option<Typed> {
        &mut self.0
    }
}

/// gpubuf's halo updater for host quantities (the native half of `gpubuf.mpi.HaloUpdater`).
#[pyclass(name = "HaloUpdater", module = "gpubuf._mpi")]
pub struct PyHaloUpdater {
    inner: Movable,
    cpu: CpuBackend,
    dtype: DType,
}

impl PyHaloUpdater {
    fn typed(&mut self) -> PyResult<&mut Typed> {
        if !running() {
            return Err(invalid("MPI is finalised: the updater cannot run"));
        }
        self.inner.as_mut().ok_or_else(|| invalid("the updater is closed"))
    }
}

fn read_parts(
    partitioner_obj: &Bound<'_, PyAny>,
    x: &Bound<'_, PyAny>,
    y: Option<&Bound<'_, PyAny>>,
) -> PyResult<Parts> {
    let part = partitioner(partitioner_obj)?;
    let (x, dtype) = specs(x)?;
    let y = match y {
        Some(y) => {
            let (y, dy) = specs(y)?;
            if dy != dtype {
                return Err(invalid(format!("y specs of {} for x specs of {}", dy.name(), dtype.name())));
            }
            Some(y)
        }
        None => None,
    };
    Ok(Parts { part, x, y, dtype })
}

#[pymethods]
impl PyHaloUpdater {
    /// Collective over `comm` (an mpi4py intra-communicator): a duplicate of it, then gpubuf's updater (`HaloUpdater::new`,
    /// or `on_node`). `partitioner` is a tuple `("tile", ny, nx, periodic)` or
    /// `("cube", n)`; `x` and `y` are sequences of spec tuples `(n_points, strides (bytes),
    /// itemsize, shape, origin, extent, dims, dtype name)`. A rank whose own arguments are
    /// wrong, or that brings `local_error` (a message from the Python side), still takes
    /// part in the creation, so every rank raises instead of one waiting for the others.
    #[new]
    #[pyo3(signature = (comm, partitioner, x, y, name, on_node, local_error=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        comm: &Bound<'_, PyAny>,
        partitioner: &Bound<'_, PyAny>,
        x: &Bound<'_, PyAny>,
        y: Option<&Bound<'_, PyAny>>,
        name: &str,
        on_node: bool,
        local_error: Option<String>,
    ) -> PyResult<Self> {
        let cpu = crate::node::cpu().clone();
        let parts = match local_error {
            Some(m) => Err(invalid(m)),
            None => read_parts(partitioner, x, y),
        };
        let comm = dup(handle_of(comm)?)?;
        let (parts, local) = match parts {
            Ok(p) => (p, None),
            Err(e) => {
                // No quantity: an error on this rank that still takes part in the agreement.
                let part = Box::new(TilePartitioner::new((1, 1), true).py()?);
                (Parts { part, x: Vec::new(), y: None, dtype: DType::F64 }, Some(e))
            }
        };
        let job = Unbound((&cpu, comm, &parts, name));
        let made = py.detach(move || {
            let (cpu, comm, p, name) = job.get();
            Unbound(match p.dtype {
                DType::U8 => build(cpu, comm, p, name, on_node).map(Typed::U8),
                DType::I32 => build(cpu, comm, p, name, on_node).map(Typed::I32),
                DType::U32 => build(cpu, comm, p, name, on_node).map(Typed::U32),
                DType::I64 => build(cpu, comm, p, name, on_node).map(Typed::I64),
                DType::F16 => build(cpu, comm, p, name, on_node).map(Typed::F16),
                DType::F32 => build(cpu, comm, p, name, on_node).map(Typed::F32),
                _ => build(cpu, comm, p, name, on_node).map(Typed::F64),
            })
        });
        if let Some(e) = local {
            return Err(e);
        }
        let inner = made.get().py()?;
        Ok(PyHaloUpdater { inner: Movable(Some(inner)), cpu, dtype: parts.dtype })
    }

    /// One halo update of `x` (and, for vectors, `y`): numpy arrays or node arrays of the
    /// updater's element type and its specs' shape. Collective over the neighbours. A
    /// quantity refused here (another type, read-only, shared memory) or by the updater
    /// (shape, strides, count) refuses the update on this rank: the neighbours' updates
    /// then raise naming this rank, and nobody waits.
    #[pyo3(signature = (x, y=None))]
    fn update(
        &mut self,
        py: Python<'_>,
        x: Vec<Bound<'_, PyAny>>,
        y: Option<Vec<Bound<'_, PyAny>>>,
    ) -> PyResult<()> {
        let cpu = self.cpu.clone();
        each!(self.typed()?, u => run(py, &cpu, u, &x, y.as_deref()))
    }

    /// Refuses this rank's part of one update, whose quantities could not even be read
    /// (an error of Python's converting them): the neighbours' updates raise naming this
    /// rank, and nobody waits. Collective as `update`.
    fn refuse(&mut self, py: Python<'_>) -> PyResult<()> {
        each!(self.typed()?, u => {
            let job = Unbound(&mut *u);
            let refused = py.detach(move || Unbound(job.get().refuse()));
            refused.get().py()
        })
    }

    /// Mean seconds of one update over `reps`, after `warmups` unmeasured, each started
    /// together (`MPI_Barrier` on `comm`, an mpi4py intra-communicator; none when
    /// `barrier` is false): gpubuf's updater with
    /// no Python in the loop (the quantities taken once), the baseline of
    /// `python -m gpubuf.bench mpi`. Collective as `update` (and the barrier).
    #[pyo3(signature = (comm, x, y=None, reps=10, warmups=2, barrier=true))]
    #[allow(clippy::too_many_arguments)]
    fn time_updates(
        &mut self,
        py: Python<'_>,
        comm: &Bound<'_, PyAny>,
        x: Vec<Bound<'_, PyAny>>,
        y: Option<Vec<Bound<'_, PyAny>>>,
        reps: usize,
        warmups: usize,
        barrier: bool,
    ) -> PyResult<f64> {
        if reps == 0 {
            return Err(invalid("time_updates needs at least one rep"));
        }
        let handle = handle_of(comm)?;
        let cpu = self.cpu.clone();
        each!(self.typed()?, u => timed(py, &cpu, u, (handle, barrier), &x, y.as_deref(), (reps, warmups)))
    }

    /// The element type's numpy name.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name()
    }

    /// The neighbour ranks, in link order.
    #[getter]
    fn neighbors(&mut self) -> PyResult<Vec<usize>> {
        Ok(each!(self.typed()?, u => u.neighbors()))
    }

    /// The neighbours reached through node-shared memory (`on_node` updaters).
    #[getter]
    fn shared_neighbors(&mut self) -> PyResult<Vec<usize>> {
        Ok(each!(self.typed()?, u => u.shared_neighbors()))
    }

    /// `(neighbour, bytes)` of each link's message, each way.
    #[getter]
    fn message_bytes(&mut self) -> PyResult<Vec<(usize, usize)>> {
        Ok(each!(self.typed()?, u => u.message_bytes()))
    }

    /// Bytes copied straight out of neighbours' node-shared arrays so far.
    #[getter]
    fn copied_bytes(&mut self) -> PyResult<usize> {
        Ok(each!(self.typed()?, u => u.copied_bytes()))
    }

    /// Mean microseconds per update of each phase (post, pack, send, wait, unpack,
    /// complete), over the updates since the last `reset_phases`.
    fn phases<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let us = each!(self.typed()?, u => u.phases().mean_us());
        let d = PyDict::new(py);
        for (name, v) in ["post", "pack", "send", "wait", "unpack", "complete"].iter().zip(us) {
            d.set_item(*name, v)?;
        }
        Ok(d)
    }

    /// Forgets the phase times so far.
    fn reset_phases(&mut self) -> PyResult<()> {
        each!(self.typed()?, u => u.reset_phases());
        Ok(())
    }

    /// Frees the updater (collective over the node's ranks for an `on_node` one); later
    /// calls raise. After MPI was finalised nothing is freed (the process is ending).
    fn close(&mut self) {
        close(self.inner.take());
    }

    /// Lets go of the updater without freeing what other ranks must free with it (its
    /// node window, communicator and requests are leaked): for a rank ending on an error
    /// that the others do not share, which must not wait for them in a collective free.
    /// Later calls raise, as after `close`.
    fn abandon(&mut self) {
        if let Some(t) = self.inner.take() {
            std::mem::forget(t);
        }
    }

    /// Whether `close` (or `abandon`) was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_none()
    }
}

impl Drop for PyHaloUpdater {
    fn drop(&mut self) {
        close(self.inner.take());
    }
}

/// Drops an updater while MPI runs; leaks it once MPI is finalised (its requests,
/// communicator and window can no longer be freed).
fn close(inner: Option<Typed>) {
    if let Some(t) = inner {
        if running() {
            drop(t);
        } else {
            std::mem::forget(t);
        }
    }
}

/// An array of an update.
type Array<T> = gpubuf_buffer::NDBuffer<CpuBackend, T>;

/// Takes the quantities of a call, then runs `f` over the updater and them without the
/// GIL. Quantities refused here refuse the update (so that no neighbour waits for this
/// rank) and raise.
fn over_quantities<T: Element + numpy::Element, R>(
    py: Python<'_>,
    cpu: &CpuBackend,
    u: &mut HaloUpdater<'static, CpuBackend, T>,
    (x, y): (&[Bound<'_, PyAny>], Option<&[Bound<'_, PyAny>]>),
    f: impl for<'q> FnOnce(
        &mut HaloUpdater<'static, CpuBackend, T>,
        &mut [&'q mut Array<T>],
        Option<&mut [&'q mut Array<T>]>,
    ) -> gpubuf_core::Result<R>,
) -> PyResult<R> {
    let (mut qx, mut qy) = match quantities::<T>(cpu, x, y) {
        Ok(q) => q,
        Err(e) => {
            let job = Unbound(&mut *u);
            let refused = py.detach(move || Unbound(job.get().refuse()));
            refused.get().py()?;
            return Err(e);
        }
    };
    let mut rx: Vec<&mut Array<T>> = qx.iter_mut().filter_map(|q| q.array.as_mut()).collect();
    let mut ry: Option<Vec<&mut Array<T>>> =
        qy.as_mut().map(|v| v.iter_mut().filter_map(|q| q.array.as_mut()).collect());
    let job = Unbound((&mut *u, &mut rx, &mut ry, f));
    let done = py.detach(move || {
        let (u, rx, ry, f) = job.get();
        Unbound(f(u, rx, ry.as_deref_mut()))
    });
    done.get().py()
}

fn run<T: Element + numpy::Element>(
    py: Python<'_>,
    cpu: &CpuBackend,
    u: &mut HaloUpdater<'static, CpuBackend, T>,
    x: &[Bound<'_, PyAny>],
    y: Option<&[Bound<'_, PyAny>]>,
) -> PyResult<()> {
    over_quantities(py, cpu, u, (x, y), |u, x, y| u.update(x, y))
}

/// The loop of `time_updates`.
fn timed<T: Element + numpy::Element>(
    py: Python<'_>,
    cpu: &CpuBackend,
    u: &mut HaloUpdater<'static, CpuBackend, T>,
    (handle, barrier): (usize, bool),
    x: &[Bound<'_, PyAny>],
    y: Option<&[Bound<'_, PyAny>]>,
    (reps, warmups): (usize, usize),
) -> PyResult<f64> {
    over_quantities(py, cpu, u, (x, y), |u, x, mut y| {
        let raw = gpubuf_mpi::mpi::ffi::MPI_Comm(handle as *mut _);
        let mut total = 0.0;
        for rep in 0..reps.saturating_add(warmups) {
            if barrier {
                // SAFETY: `raw` is the handle of the caller's mpi4py intra-communicator,
                // not COMM_NULL (`handle_of`), held by the caller for the call; a barrier
                // reads nothing else.
                unsafe { gpubuf_mpi::mpi::ffi::MPI_Barrier(raw) };
            }
            let t = std::time::Instant::now();
            u.update(x, y.as_deref_mut())?;
            if rep >= warmups {
                total += t.elapsed().as_secs_f64();
            }
        }
        Ok(total / reps as f64)
    })
}
