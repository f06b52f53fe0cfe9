//! [`HaloDataTransformer`]: packs many halo regions into one buffer and unpacks one
//! buffer into many halo regions, each in one launch.

use crate::compile::{compile, Compiled};
use crate::spec::HaloExchangeSpec;
use gpubuf_buffer::{Buffer, NDBuffer};
use gpubuf_core::{Allocator, CopyPlan, DeviceMemory, Element, Error, Kernels, MemRef, Result, Segment};
use gpubuf_pool::MemoryPool;
use std::collections::HashMap;

/// The distinct arrays of a launch and the map from quantity to distinct array.
type Arrays<'q, M> = (Vec<MemRef<'q, M>>, Vec<usize>);

/// Pack/unpack for one exchange partner, after NDSL's `HaloDataTransformer`, on any
/// backend. The specs compile once into two copy plans (prepared on the device once per
/// pattern of aliased quantities); `async_pack` and `async_unpack` are each one launch on
/// OpenCL and CUDA and one parallel pass on the CPU, queued on the transformer's stream
/// (by default the backend's default stream, where `NDBuffer` operations also run).
pub struct HaloDataTransformer<B: Kernels, T: Element> {
    backend: B,
    stream: B::Stream,
    /// The stream the buffers were allocated on (the backend's default stream): a pool
    /// orders their reuse after the work queued there, so the work of `stream` is joined
    /// into it before pooled buffers are released.
    home: B::Stream,
    /// Whether the buffers come from a pool.
    pooled: bool,
    specs_x: Vec<HaloExchangeSpec>,
    specs_y: Option<Vec<HaloExchangeSpec>>,
    compiled: Compiled,
    /// Prepared (pack, unpack) plans by the map from quantity to distinct array.
    plans: HashMap<Vec<usize>, (B::Plan, B::Plan)>,
    pack_buffer: Option<Buffer<B>>,
    unpack_buffer: Option<Buffer<B>>,
    _t: std::marker::PhantomData<T>,
}

impl<B: Kernels, T: Element> std::fmt::Debug for HaloDataTransformer<B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HaloDataTransformer")
            .field("specs", &self.specs_x.len())
            .field("vector", &self.specs_y.is_some())
            .field("buffer_len", &self.compiled.buffer_len())
            .finish()
    }
}

/// The extents a spec packs, turned by its rotation (an odd number of quarter turns swaps
/// x and y), and the extents of the halo it unpacks into.
fn loopback_shapes(spec: &HaloExchangeSpec) -> (Vec<usize>, Vec<usize>) {
    let len = |s: &[std::ops::Range<usize>]| s.iter().map(|r| r.len()).collect::<Vec<_>>();
    let mut sent = len(&spec.pack_slices);
    // The rotation turns the last x and y dimensions, as `rotate::rotate_scalar` does.
    let dims = &spec.specification.dims;
    if spec.pack_clockwise_rotation.rem_euclid(2) == 1 {
        if let (Some(x), Some(y)) = (dims.iter().rposition(|d| d.is_x()), dims.iter().rposition(|d| d.is_y()))
        {
            if x < sent.len() && y < sent.len() {
                sent.swap(x, y);
            }
        }
    }
    (sent, len(&spec.unpack_slices))
}

fn check_dtypes<T: Element>(specs: &[&HaloExchangeSpec]) -> Result<()> {
    let first = specs.first().map(|s| s.specification.dtype);
    if let Some(d) = first {
        if specs.iter().any(|s| s.specification.dtype != d) {
            return Err(Error::invalid("halo exchange specs mix dtypes (mixed precision is not supported)"));
        }
        if d != T::DTYPE {
            return Err(Error::DTypeMismatch { expected: T::DTYPE, got: d });
        }
    }
    Ok(())
}

impl<B: Kernels, T: Element> HaloDataTransformer<B, T> {
    /// A transformer for scalar specs (`y = None`) or vector specs (x and y lists of equal
    /// length), with buffers allocated from the device; packs and unpacks queue on the
    /// backend's default stream (another with [`HaloDataTransformer::set_stream`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty list, lists of different lengths or mixed
    /// dtypes; [`Error::DTypeMismatch`] when the specs' dtype is not `T`;
    /// [`Error::OutOfBounds`] for slices outside their array; allocation errors.
    pub fn new(backend: &B, x: Vec<HaloExchangeSpec>, y: Option<Vec<HaloExchangeSpec>>) -> Result<Self> {
        Self::build(backend, x, y, false, |b, n| Buffer::zeros(b, n))
    }

    /// As [`HaloDataTransformer::new`], with both buffers from `pool` (returned by
    /// [`HaloDataTransformer::finalize`] or on drop). The blocks are allocated on the
    /// backend's default stream (`MemoryPool::allocate_on`); when the transformer drops
    /// with packs or unpacks still queued on another stream (see
    /// [`HaloDataTransformer::set_stream`]), the default stream is first made to wait for
    /// them, so the pool hands the blocks to the host or another stream only once that work
    /// is done (dropping never blocks). Should that ordering fail (a driver error), the
    /// drop waits for the stream instead, and if that fails too the blocks are never
    /// reused.
    ///
    /// # Errors
    /// As [`HaloDataTransformer::new`].
    pub fn with_pool<A>(
        backend: &B,
        pool: &MemoryPool<A>,
        x: Vec<HaloExchangeSpec>,
        y: Option<Vec<HaloExchangeSpec>>,
    ) -> Result<Self>
    where
        A: Allocator<Memory = B::Memory>,
    {
        Self::build(backend, x, y, true, |b, n| {
            let buf = pool.allocate_on(n, b, b.default_stream())?.into_buffer(b)?;
            buf.fill(&[0])?;
            Ok(buf)
        })
    }

    fn build(
        backend: &B,
        x: Vec<HaloExchangeSpec>,
        y: Option<Vec<HaloExchangeSpec>>,
        pooled: bool,
        alloc: impl Fn(&B, usize) -> Result<Buffer<B>>,
    ) -> Result<Self> {
        let all: Vec<&HaloExchangeSpec> = x.iter().chain(y.iter().flatten()).collect();
        check_dtypes::<T>(&all)?;
        let compiled = compile(&x, y.as_deref())?;
        let bytes = compiled.buffer_len().checked_mul(T::DTYPE.size()).ok_or_else(|| {
            Error::invalid(format!(
                "a pack buffer of {} elements overflows usize bytes",
                compiled.buffer_len()
            ))
        })?;
        let mut t = HaloDataTransformer {
            backend: backend.clone(),
            stream: backend.default_stream().clone(),
            home: backend.default_stream().clone(),
            pooled,
            specs_x: x,
            specs_y: y,
            pack_buffer: Some(alloc(backend, bytes)?),
            unpack_buffer: Some(alloc(backend, bytes)?),
            compiled,
            plans: HashMap::new(),
            _t: std::marker::PhantomData,
        };
        let identity: Vec<usize> = (0..t.compiled.pack.source_lens().len()).collect();
        t.plans_for(&identity)?;
        Ok(t)
    }

    /// The compiled plans.
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    /// Elements in each buffer.
    pub fn buffer_len(&self) -> usize {
        self.compiled.buffer_len()
    }

    /// The stream packs and unpacks are queued on (the backend's default stream unless
    /// changed with [`HaloDataTransformer::set_stream`]).
    pub fn stream(&self) -> &B::Stream {
        &self.stream
    }

    /// Queues later packs and unpacks on `stream`, after the work already queued on the
    /// previous stream (an event of that stream which `stream` waits for: both write the
    /// same buffers). Work on other streams that writes the quantities (or reads the halos)
    /// must be ordered with events ([`gpubuf_core::Backend::stream_wait`]): streams are not
    /// ordered with each other.
    ///
    /// # Errors
    /// Driver errors from recording or waiting for the event; the stream is then unchanged.
    pub fn set_stream(&mut self, stream: &B::Stream) -> Result<()> {
        if self.backend.stream_id(stream) == self.backend.stream_id(&self.stream) {
            return Ok(());
        }
        if self.pack_buffer.is_some() || self.unpack_buffer.is_some() {
            let queued = self.backend.record_event(&self.stream)?;
            self.backend.stream_wait(stream, &queued)?;
        }
        self.stream = stream.clone();
        Ok(())
    }

    /// Whether both buffers exist (until [`HaloDataTransformer::finalize`]).
    pub fn ready(&self) -> bool {
        self.pack_buffer.is_some() && self.unpack_buffer.is_some()
    }

    /// Prepares (once) the plans for a map from source to distinct array.
    fn plans_for(&mut self, map: &[usize]) -> Result<()> {
        if !self.plans.contains_key(map) {
            let remap = |p: &CopyPlan| -> Result<CopyPlan> {
                let distinct = map.iter().max().map_or(0, |m| m + 1);
                let mut lens = vec![0usize; distinct];
                for (k, &u) in map.iter().enumerate() {
                    lens[u] = lens[u].max(p.source_lens()[k]);
                }
                let segs: Vec<Segment> =
                    p.segments().iter().map(|s| Segment { source: map[s.source], ..*s }).collect();
                CopyPlan::new(lens, p.buffer_len(), segs)
            };
            let pack = self.backend.prepare(&remap(&self.compiled.pack)?, T::DTYPE)?;
            let unpack_plan = remap(&self.compiled.unpack)?;
            unpack_plan.check_scatter()?;
            let unpack = self.backend.prepare(&unpack_plan, T::DTYPE)?;
            self.plans.insert(map.to_vec(), (pack, unpack));
        }
        Ok(())
    }

    fn plan(&self, map: &[usize]) -> Result<&(B::Plan, B::Plan)> {
        self.plans.get(map).ok_or_else(|| Error::invalid("plan cache"))
    }

    /// Checks the quantities against the specs; returns the byte ranges of the distinct
    /// arrays and the map from quantity to distinct array.
    fn arrays<'q>(
        &self,
        x: &[&'q NDBuffer<B, T>],
        y: Option<&[&'q NDBuffer<B, T>]>,
    ) -> Result<Arrays<'q, B::Memory>> {
        if x.len() != self.specs_x.len() {
            return Err(Error::invalid(format!(
                "{} x quantities for {} specs: pass one array per spec, in the order of the specs \
                 (the same array may be passed for several specs)",
                x.len(),
                self.specs_x.len()
            )));
        }
        let quantities: Vec<&NDBuffer<B, T>> = match (y, &self.specs_y) {
            (None, None) => x.to_vec(),
            (Some(y), Some(sy)) if y.len() == sy.len() => x.iter().chain(y.iter()).copied().collect(),
            (Some(y), Some(sy)) => {
                return Err(Error::invalid(format!(
                    "{} y quantities for {} specs: pass one array per y spec, in the order of the specs",
                    y.len(),
                    sy.len()
                )))
            }
            (None, Some(_)) => return Err(Error::invalid("a vector transformer needs y quantities")),
            (Some(_), None) => return Err(Error::invalid("a scalar transformer takes no y quantities")),
        };
        let specs: Vec<&HaloExchangeSpec> =
            self.specs_x.iter().chain(self.specs_y.iter().flatten()).collect();
        let size = T::DTYPE.size();
        let mut refs: Vec<MemRef<'q, B::Memory>> = Vec::new();
        let mut keys: Vec<(usize, usize)> = Vec::new();
        let mut map = Vec::with_capacity(quantities.len());
        for (k, (q, s)) in quantities.iter().zip(&specs).enumerate() {
            let spec = &s.specification;
            if q.shape() != spec.shape.as_slice() {
                return Err(Error::ShapeMismatch { expected: spec.shape.clone(), got: q.shape().to_vec() });
            }
            if q.strides() != spec.strides.as_slice() {
                let bytes = |s: &[isize]| -> Vec<isize> {
                    s.iter().map(|&e| e.saturating_mul(size as isize)).collect()
                };
                return Err(Error::invalid(format!(
                    "quantity {k} has strides {:?} (elements; {:?} bytes), its spec {:?} ({:?} bytes)",
                    q.strides(),
                    bytes(q.strides()),
                    spec.strides,
                    bytes(&spec.strides)
                )));
            }
            if !q.backend().same_device(&self.backend) {
                return Err(Error::DeviceMismatch(format!("quantity {k} lives on another device")));
            }
            // The array from its first element on. An empty view may carry any offset,
            // even past its storage (nothing of it is ever touched): it gets an empty range.
            // Non-empty views lie inside their storage (NDBuffer checks it), and the
            // backends check every range against the plan before a launch.
            let storage = q.storage();
            let skip = q.layout().offset().saturating_mul(size).min(storage.len);
            let start = storage
                .offset
                .checked_add(skip)
                .ok_or_else(|| Error::invalid("quantity offset overflows"))?;
            let r = MemRef { memory: storage.memory, offset: start, len: storage.len - skip };
            let key = (r.memory.id(), start);
            match keys.iter().position(|k| *k == key) {
                Some(u) => {
                    map.push(u);
                    refs[u].len = refs[u].len.max(r.len);
                }
                None => {
                    keys.push(key);
                    refs.push(r);
                    map.push(refs.len() - 1);
                }
            }
        }
        Ok((refs, map))
    }

    /// Checks quantities as [`HaloDataTransformer::async_pack`] would, without queueing
    /// anything: their number, shapes, strides and device.
    ///
    /// # Errors
    /// As [`HaloDataTransformer::async_pack`], without driver errors.
    pub fn check_quantities(&self, x: &[&NDBuffer<B, T>], y: Option<&[&NDBuffer<B, T>]>) -> Result<()> {
        self.arrays(x, y).map(|_| ())
    }

    /// Queues the packing of every spec's pack slices (rotated) into the pack buffer.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for the wrong number of quantities or strides unlike the
    /// spec; [`Error::ShapeMismatch`]; [`Error::DeviceMismatch`]; driver errors.
    pub fn async_pack(&mut self, x: &[&NDBuffer<B, T>], y: Option<&[&NDBuffer<B, T>]>) -> Result<()> {
        let (refs, map) = self.arrays(x, y)?;
        let buf = self.pack_buffer.clone().ok_or_else(|| Error::invalid("transformer finalized"))?;
        let _span = tracing::debug_span!("halo.pack", elements = self.compiled.buffer_len()).entered();
        self.plans_for(&map)?;
        let (pack, _) = self.plan(&map)?;
        self.backend.gather(&self.stream, pack, &refs, buf.memref())
    }

    /// Queues the unpacking of the unpack buffer into every spec's unpack slices.
    ///
    /// # Errors
    /// As [`HaloDataTransformer::async_pack`]; [`Error::InvalidPlan`] when two specs
    /// unpack into the same elements of one array.
    pub fn async_unpack(&mut self, x: &[&NDBuffer<B, T>], y: Option<&[&NDBuffer<B, T>]>) -> Result<()> {
        let (refs, map) = self.arrays(x, y)?;
        let buf = self.unpack_buffer.clone().ok_or_else(|| Error::invalid("transformer finalized"))?;
        let _span = tracing::debug_span!("halo.unpack", elements = self.compiled.buffer_len()).entered();
        self.plans_for(&map)?;
        let (_, unpack) = self.plan(&map)?;
        self.backend.scatter(&self.stream, unpack, buf.memref(), &refs)
    }

    /// Waits for the queued packs and unpacks.
    ///
    /// # Errors
    /// Driver errors.
    pub fn synchronize(&self) -> Result<()> {
        self.backend.synchronize(&self.stream)
    }

    /// The pack buffer, after the queued work completed (what to send).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] after `finalize`; driver errors.
    pub fn pack_buffer(&self) -> Result<&Buffer<B>> {
        self.synchronize()?;
        self.pack_buffer.as_ref().ok_or_else(|| Error::invalid("transformer finalized"))
    }

    /// The unpack buffer, after the queued work completed (where to receive).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] after `finalize`; driver errors.
    pub fn unpack_buffer(&self) -> Result<&Buffer<B>> {
        self.synchronize()?;
        self.unpack_buffer.as_ref().ok_or_else(|| Error::invalid("transformer finalized"))
    }

    /// Copies the pack buffer into the unpack buffer on the device, queued on the
    /// transformer's stream after the pack (no host round trip, nothing waited for): what a
    /// rank that is its own neighbour (a periodic domain, see
    /// [`HaloExchangeSpec::periodic`](crate::HaloExchangeSpec::periodic)) does between
    /// [`HaloDataTransformer::async_pack`] and [`HaloDataTransformer::async_unpack`].
    ///
    /// ```
    /// use gpubuf_buffer::NDBuffer;
    /// use gpubuf_core::DType;
    /// use gpubuf_cpu::CpuBackend;
    /// use gpubuf_halo::{Boundary, Dim, HaloDataTransformer, HaloExchangeSpec, QuantityHaloSpec};
    ///
    /// let cpu = CpuBackend::new();
    /// // A 4-point line with a 1-point halo on each side: [h, 1, 2, 3, 4, h].
    /// let q = QuantityHaloSpec::centered(&[Dim::X], &[4], 1, 0, DType::F64)?;
    /// let specs = [Boundary::West, Boundary::East]
    ///     .map(|b| HaloExchangeSpec::periodic(q.clone(), b))
    ///     .into_iter()
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// let mut t = HaloDataTransformer::<_, f64>::new(&cpu, specs, None)?;
    /// let line = NDBuffer::from_slice(&cpu, &[6], &[0., 1., 2., 3., 4., 0.])?;
    /// t.async_pack(&[&line, &line], None)?; // one array per spec
    /// t.loopback()?;
    /// t.async_unpack(&[&line, &line], None)?;
    /// assert_eq!(line.to_vec()?, vec![4., 1., 2., 3., 4., 1.]);
    /// # Ok::<(), gpubuf_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] after `finalize`, or when a spec unpacks a halo of another
    /// shape than the block it packs (turned by its rotation): the bytes would land
    /// scrambled; driver errors.
    pub fn loopback(&mut self) -> Result<()> {
        let (Some(pack), Some(unpack)) = (&self.pack_buffer, &self.unpack_buffer) else {
            return Err(Error::invalid("transformer finalized"));
        };
        for (k, spec) in self.specs_x.iter().chain(self.specs_y.iter().flatten()).enumerate() {
            let (sent, halo) = loopback_shapes(spec);
            if sent != halo {
                return Err(Error::invalid(format!(
                    "loopback: spec {k} packs a {sent:?} block (after its rotation) into a {halo:?} halo; \
                     each spec must unpack the shape it packs"
                )));
            }
        }
        self.backend.copy(&self.stream, pack.memref(), unpack.memory(), unpack.offset())
    }

    /// Copies received data (on the same device) into the unpack buffer. For a rank that
    /// receives its own pack buffer, [`HaloDataTransformer::loopback`] does this without
    /// borrowing the transformer twice.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] in bytes when `data` is not exactly the unpack buffer's
    /// size (`expected: buffer_len() * element size`, `got: data.len()`, with the element
    /// count); [`Error::DeviceMismatch`] when it lives on another device; driver errors.
    pub fn receive(&mut self, data: &Buffer<B>) -> Result<()> {
        let buf = self.unpack_buffer.as_ref().ok_or_else(|| Error::invalid("transformer finalized"))?;
        if data.len() != buf.len() {
            return Err(Error::byte_length("received halo data", buf.len(), data.len(), Some(T::DTYPE)));
        }
        if !data.backend().same_device(&self.backend) {
            return Err(Error::DeviceMismatch("received data lives on another device".into()));
        }
        self.backend.copy(&self.stream, data.memref(), buf.memory(), buf.offset())
    }

    /// Copies received host data (the bytes of `buffer_len()` elements) into the unpack
    /// buffer.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] in bytes when `data` does not hold exactly `buffer_len()`
    /// elements (`expected: buffer_len() * element size`, `got: data.len()`, with the
    /// element count): pass `bytemuck::cast_slice(&values)` of `buffer_len()` values.
    pub fn receive_host(&mut self, data: &[u8]) -> Result<()> {
        let buf = self.unpack_buffer.as_ref().ok_or_else(|| Error::invalid("transformer finalized"))?;
        if data.len() != buf.len() {
            return Err(Error::byte_length("received halo data", buf.len(), data.len(), Some(T::DTYPE)));
        }
        self.backend.write(&self.stream, buf.memory(), buf.offset(), data)
    }

    /// Waits for queued work and releases both buffers (to their pool, if any).
    ///
    /// # Errors
    /// Driver errors.
    pub fn finalize(&mut self) -> Result<()> {
        self.synchronize()?;
        self.pack_buffer = None;
        self.unpack_buffer = None;
        Ok(())
    }
}

impl<B: Kernels, T: Element> Drop for HaloDataTransformer<B, T> {
    /// Pooled buffers go back ordered after the work queued on the transformer's stream:
    /// the stream they were allocated on waits for it (the pool records its event there).
    fn drop(&mut self) {
        let held = self.pack_buffer.is_some() || self.unpack_buffer.is_some();
        if !self.pooled || !held || self.backend.stream_id(&self.stream) == self.backend.stream_id(&self.home)
        {
            return;
        }
        let joined =
            self.backend.record_event(&self.stream).and_then(|e| self.backend.stream_wait(&self.home, &e));
        if let Err(e) = joined {
            if let Err(e2) = self.backend.synchronize(&self.stream) {
                // Nothing tells when the queued work is done: the blocks must never be
                // handed out again.
                tracing::warn!("halo transformer dropped with unordered work ({e}; {e2}); its pool blocks are not reused");
                std::mem::forget(self.pack_buffer.take());
                std::mem::forget(self.unpack_buffer.take());
            }
        }
    }
}
