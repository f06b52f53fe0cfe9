//! `gpubuf demo`: heat diffusion on a periodic square domain, decomposed over MPI ranks
//! (or one process), computed on the device and using every gpubuf component:
//! * a `Mirror` of the local field: one upload before the step loop, one download after;
//! * the 5-point stencil on the device (`stencil.rs`: rayon on the CPU backend, an OpenCL
//!   C kernel, a CUDA kernel) from one device array into another, swapped every step; the
//!   parameters (diffusivity, source strength, changed every 50 steps) are kernel scalars;
//! * halo updates every step on the device (`HaloUpdater` across ranks, staged through
//!   the host for MPI; a self-exchanging `HaloDataTransformer` in one process), their
//!   buffers, and the second field, from a `MemoryPool`;
//! * a `Bufferizer` batching field snapshots, device to device.
//!
//! The result (checksum of the global field in row-major order) is the same with any
//! number of ranks and on every backend: every cell is updated with the same arithmetic.

use crate::report::progress;
use crate::stencil::Stencil;
use gpubuf::bufferizer::Bufferizer;
use gpubuf::halo::{Boundary, Dim, HaloDataTransformer, HaloExchangeSpec, QuantityHaloSpec};
use gpubuf::mirror::{DirtyPolicy, Mirror};
use gpubuf::pool::MemoryPool;
use gpubuf::{
    with_backend, Allocator, BackendKind, BackendVisitor, Buffer, DType, Error, Kernels, NDBuffer, Order,
    Result,
};
use ndarray::{ArrayD, IxDyn};
use std::path::PathBuf;
use std::time::Instant;

/// Demo options.
pub struct DemoOptions {
    /// Global grid size (cells per side).
    pub size: usize,
    /// Time steps.
    pub steps: usize,
    /// Where to write the final field as an image (`.png`, or `.svg`).
    pub out: Option<PathBuf>,
    /// Snapshot every this many steps.
    pub snapshot_every: usize,
}

/// How the halo of the local field is refreshed: across ranks, or by exchanging with itself.
pub(crate) trait Exchange<B: Kernels> {
    /// Queues the refresh of the halo of `field` on the default stream (it may also wait
    /// for it, as an MPI exchange does).
    fn update(&mut self, field: &NDBuffer<B, f64>) -> Result<()>;
    /// Bytes one update moves between host and device on this rank.
    fn host_bytes(&self) -> u64;
    /// Gathers every rank's interior (row-major blocks) on rank 0.
    fn gather(&self, local: &[f64]) -> Result<Option<Vec<Vec<f64>>>>;
}

/// One process: the field's own interior edges fill its halo (periodic), all on the
/// device: pack, copy the pack buffer into the unpack buffer, unpack; nothing waits.
pub(crate) struct SelfExchange<B: Kernels> {
    t: HaloDataTransformer<B, f64>,
    /// The transformer's pack buffer (the same device memory), taken once.
    sent: Buffer<B>,
}

impl<B: Kernels> SelfExchange<B> {
    /// The exchange of a field of `spec` with itself, buffers from `pool`.
    ///
    /// # Errors
    /// Spec and allocation errors.
    pub(crate) fn new<A: Allocator<Memory = B::Memory>>(
        b: &B,
        pool: &MemoryPool<A>,
        spec: &QuantityHaloSpec,
    ) -> Result<Self> {
        let specs = Boundary::ALL
            .iter()
            .map(|&bd| HaloExchangeSpec::periodic(spec.clone(), bd))
            .collect::<Result<Vec<_>>>()?;
        let t = HaloDataTransformer::with_pool(b, pool, specs, None)?;
        let sent = t.pack_buffer()?.clone();
        Ok(SelfExchange { t, sent })
    }
}

impl<B: Kernels> Exchange<B> for SelfExchange<B> {
    fn update(&mut self, field: &NDBuffer<B, f64>) -> Result<()> {
        let q = [field; Boundary::ALL.len()];
        // All three on the transformer's stream (the default stream), in order.
        self.t.async_pack(&q, None)?;
        self.t.receive(&self.sent)?;
        self.t.async_unpack(&q, None)
    }
    fn host_bytes(&self) -> u64 {
        0
    }
    fn gather(&self, local: &[f64]) -> Result<Option<Vec<Vec<f64>>>> {
        Ok(Some(vec![local.to_vec()]))
    }
}

/// FNV-1a over the bytes of the values, in order.
pub fn checksum(values: &[f64]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in values {
        for byte in v.to_le_bytes() {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn initial(gi: usize, gj: usize, n: usize) -> f64 {
    let (x, y) = (gi as f64 / n as f64, gj as f64 / n as f64);
    let disc = (x - 0.3).powi(2) + (y - 0.5).powi(2) < 0.02;
    let square = (0.6..0.8).contains(&x) && (0.2..0.45).contains(&y);
    if disc {
        1.0
    } else if square {
        0.5
    } else {
        0.0
    }
}

/// The (ny, nx) layout closest to square for `ranks` ranks.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub fn layout_for(ranks: usize) -> (usize, usize) {
    let mut best = (1, ranks);
    for ny in 1..=ranks {
        if ranks % ny == 0 && ny <= ranks / ny {
            best = (ny, ranks / ny);
        }
    }
    best
}

/// Largest `--size` (cells per side): past it the field alone passes 8 TiB.
pub const MAX_SIZE: usize = 1 << 20;
/// Most `--steps`: a run that could not end in any reasonable time is refused up front.
pub const MAX_STEPS: usize = 1_000_000_000;
/// Snapshots the bufferizer batches before a flush.
const SNAPSHOT_BATCH: usize = 4;

/// Checks the options against the limits and the decomposition: the size splits evenly
/// over `layout` (every rank holds at least one cell per side).
///
/// # Errors
/// [`Error::InvalidArgument`] naming the option and the limit.
pub(crate) fn check_options(opts: &DemoOptions, layout: (usize, usize)) -> Result<()> {
    let (n, (ny, nx)) = (opts.size, layout);
    if !(1..=MAX_SIZE).contains(&n) {
        return Err(Error::invalid(format!("--size {n}: the grid needs 1 to {MAX_SIZE} cells per side")));
    }
    if opts.steps > MAX_STEPS {
        return Err(Error::invalid(format!("--steps {}: at most {MAX_STEPS}", opts.steps)));
    }
    if nx == 0 || ny == 0 || n % nx != 0 || n % ny != 0 {
        return Err(Error::invalid(format!("--size {n} does not split over a {ny}x{nx} layout of ranks")));
    }
    Ok(())
}

/// Bytes rank `rank` needs on the host and on the device (an estimate from above).
/// Host: the initial field, the mirror's host copy and the local result (counted as four
/// local fields with halo), plus on rank 0 the global field three times (gathered blocks,
/// their copies, the assembled field). Device: the mirrored field, the second field the
/// stencil writes into, and the snapshot batch.
fn memory_need(opts: &DemoOptions, layout: (usize, usize), rank: usize) -> Option<(u64, u64)> {
    let n = opts.size as u64;
    let (lx, ly) = (n / layout.1 as u64, n / layout.0 as u64);
    let local = (lx + 2).checked_mul(ly + 2)?.checked_mul(8)?;
    let global = if rank == 0 { n.checked_mul(n)?.checked_mul(8 * 3)? } else { 0 };
    let host = local.checked_mul(4)?.checked_add(global)?;
    let device = local.checked_mul(2 + SNAPSHOT_BATCH as u64)?;
    Some((host, device))
}

/// Checks that rank `rank` has the memory the run needs on the host and on `b`'s device
/// (on the CPU backend both come out of host memory), so a huge `--size` is a clear error
/// instead of an aborted allocation. Free memory that cannot be read is not checked.
///
/// # Errors
/// [`Error::OutOfMemory`] with the bytes needed and available.
pub(crate) fn check_memory<B: Kernels>(
    b: &B,
    opts: &DemoOptions,
    layout: (usize, usize),
    rank: usize,
) -> Result<()> {
    let too_much = |requested: u64, available: u64| Error::OutOfMemory {
        requested: usize::try_from(requested).unwrap_or(usize::MAX),
        available: Some(usize::try_from(available).unwrap_or(usize::MAX)),
        pool: None,
    };
    let (host, device) = memory_need(opts, layout, rank).ok_or_else(|| too_much(u64::MAX, 0))?;
    let host_free = gpubuf::cpu::CpuBackend::new().memory_info().map(|m| m.free);
    let device_free = b.memory_info().map(|m| m.free).or(Some(b.info().total_memory).filter(|&t| t > 0));
    let checks = if B::KIND == BackendKind::Cpu {
        [(host.saturating_add(device), host_free), (0, None)]
    } else {
        [(host, host_free), (device, device_free)]
    };
    for (need, free) in checks {
        if let Some(free) = free.filter(|&f| need > f) {
            return Err(too_much(need, free));
        }
    }
    Ok(())
}

/// What a run measured; the field only on rank 0.
pub(crate) struct Outcome {
    /// The global field (row-major, y outer) on rank 0, `None` on other ranks.
    pub global: Option<Vec<f64>>,
    /// Seconds of the timed step loop.
    pub secs: f64,
    /// Snapshot batches the bufferizer filled.
    pub batches: usize,
    /// Bytes that crossed between host and device on this rank in the timed loop.
    pub host_bytes: u64,
}

/// The parameters of step `step`: diffusivity and source strength, changed every 50 steps.
fn params(step: usize) -> (f64, f64) {
    let phase = step / 50;
    (0.2 - 0.02 * (phase % 5) as f64, if phase % 2 == 0 { 0.001 } else { 0.0 })
}

/// Runs the simulation on `b` for rank `rank` of a `layout` decomposition; `make_exchange`
/// builds the halo exchange for the local field. Before anything is allocated the options
/// and this rank's memory are checked and the outcome passed through `agree`, which
/// returns an error on every rank when any rank failed (MPI) so that none of them goes on
/// alone.
///
/// The field lives on the device for the whole loop: the mirror uploads it once and
/// downloads it once, outside the timed loop; each step refreshes the halo on the device,
/// runs the stencil from one device array into the other (the mirror's and one from the
/// pool) and swaps them; snapshots are device-to-device bufferizer appends. The only
/// host traffic in the loop is what the exchange stages (MPI messages).
pub(crate) fn simulate<B: Kernels, E: Exchange<B>>(
    b: &B,
    opts: &DemoOptions,
    rank: usize,
    layout: (usize, usize),
    agree: impl FnOnce(Result<()>) -> Result<()>,
    make_exchange: impl FnOnce(&B, &MemoryPool<B>, &QuantityHaloSpec) -> Result<E>,
) -> Result<Outcome> {
    agree(check_options(opts, layout).and_then(|()| check_memory(b, opts, layout, rank)))?;
    let n = opts.size;
    let (ny, nx) = layout;
    let (lx, ly) = (n / nx, n / ny);
    let (j, i) = (rank / nx, rank % nx);
    let pool = MemoryPool::new(b.clone());
    let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[lx, ly], 1, 0, DType::F64)?;
    let mut exchange = make_exchange(b, &pool, &spec)?;
    let stencil = Stencil::new(b)?;
    // The local field, halo included; dims (x, y): element [a, c] is cell (x, y).
    let init = ArrayD::from_shape_fn(IxDyn(&spec.shape), |ix| {
        let (a, c) = (ix[0], ix[1]);
        if (1..=lx).contains(&a) && (1..=ly).contains(&c) {
            initial(i * lx + a - 1, j * ly + c - 1, n)
        } else {
            0.0
        }
    });
    let mut field = Mirror::new(b, init.view(), DirtyPolicy::exact(), None)?;
    drop(init);
    let bytes = spec.shape.iter().product::<usize>() * std::mem::size_of::<f64>();
    let spare = pool.allocate_on(bytes, b, b.default_stream())?.into_buffer(b)?;
    let spare = NDBuffer::<B, f64>::from_buffer(spare, &spec.shape, Order::C)?;
    let mut snapshots = Bufferizer::<B, f64>::builder(b, &[lx, ly], SNAPSHOT_BATCH).pool(&pool).build()?;
    let mut batches = 0usize;
    let (mut cur, mut next) = (field.device().clone(), spare.clone());
    // Warm-up (kernel specialisation on first launch): both are idempotent, the halo
    // refresh of the initial field and its first stencil into the spare array.
    exchange.update(&cur)?;
    let (alpha, source) = params(0);
    stencil.step(b, &cur, &next, alpha, source)?;
    b.synchronize(b.default_stream())?;
    let pb =
        if rank == 0 { progress(opts.steps as u64, "diffusion") } else { indicatif::ProgressBar::hidden() };
    let mut host_bytes = 0u64;
    let t0 = Instant::now();
    for step in 0..opts.steps {
        let (alpha, source) = params(step);
        exchange.update(&cur)?;
        host_bytes = host_bytes.saturating_add(exchange.host_bytes());
        stencil.step(b, &cur, &next, alpha, source)?;
        std::mem::swap(&mut cur, &mut next);
        if opts.snapshot_every > 0 && step % opts.snapshot_every == 0 {
            snapshots.append(&cur.slice(&[1..lx + 1, 1..ly + 1])?)?;
            if snapshots.is_full() {
                drop(snapshots.take_batch()?);
                batches += 1;
            }
        }
        if step % 50 == 49 {
            // Keeps the queue a bounded number of steps ahead of the host.
            b.synchronize(b.default_stream())?;
        }
        pb.inc(1);
    }
    b.synchronize(b.default_stream())?;
    let secs = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    // The final field back into the mirror's array (after an odd number of steps it is in
    // the spare one), then down to the host.
    if cur.buffer().overlaps(spare.buffer()) {
        field.device().copy_from(&cur)?;
    }
    drop((cur, next, spare));
    let interior = field.view(&[1..lx + 1, 1..ly + 1])?;
    field.mark_device_dirty(&interior)?;
    field.download()?;
    // Row-major local interior (y outer, x inner), then the global field on rank 0.
    let u = field.host();
    let local: Vec<f64> =
        (0..ly).flat_map(|c| (0..lx).map(move |a| (a, c))).map(|(a, c)| u[[a + 1, c + 1]]).collect();
    let Some(blocks) = exchange.gather(&local)? else {
        return Ok(Outcome { global: None, secs, batches, host_bytes });
    };
    let mut global = vec![0.0; n * n];
    for (r, block) in blocks.iter().enumerate() {
        let (bj, bi) = (r / nx, r % nx);
        for c in 0..ly {
            for a in 0..lx {
                global[(bj * ly + c) * n + bi * lx + a] = block[c * lx + a];
            }
        }
    }
    Ok(Outcome { global: Some(global), secs, batches, host_bytes })
}

struct Single<'a>(&'a DemoOptions);

impl BackendVisitor for Single<'_> {
    type Output = Outcome;
    fn visit<B: Kernels>(self, b: B) -> Result<Outcome> {
        simulate(&b, self.0, 0, (1, 1), |r| r, |b, pool, spec| SelfExchange::new(b, pool, spec))
    }
}

/// Runs the demo on `kind` in this process (one rank) and returns what it measured.
///
/// # Errors
/// Backend and component errors.
pub(crate) fn run_single(kind: BackendKind, opts: &DemoOptions) -> Result<Outcome> {
    with_backend(kind, Single(opts))
}

/// Prints the outcome of a run on rank 0 and writes the field image.
///
/// # Errors
/// Image errors.
pub(crate) fn report(kind: BackendKind, ranks: usize, opts: &DemoOptions, out: Outcome) -> Result<()> {
    let Some(global) = out.global else { return Ok(()) };
    let steps = opts.steps.max(1) as f64;
    // A closed stdout (`| head`) is not an error of the demo: the lines are dropped; a
    // full disk is (`write_stdout`).
    crate::output::write_stdout(&format!(
        "demo: {n}x{n} heat diffusion, {s} steps on {ranks} rank(s), backend {kind}: {:.1} steps/s, \
         {:.0} host bytes/step, {} snapshot batches\nchecksum {:016x} (sum {:.12e})\n",
        opts.steps as f64 / out.secs.max(1e-9),
        out.host_bytes as f64 / steps,
        out.batches,
        checksum(&global),
        global.iter().sum::<f64>(),
        n = opts.size,
        s = opts.steps
    ))?;
    if let Some(path) = &opts.out {
        let title = format!("heat, {} steps, backend {kind}, {ranks} rank(s)", opts.steps);
        crate::plot::write_field(path, &global, opts.size, &title)?;
        crate::output::write_stdout(&format!("field written to {}\n", path.display()))?;
    }
    Ok(())
}

/// Runs the demo in this process (one rank).
///
/// # Errors
/// Backend and component errors.
#[cfg_attr(feature = "mpi", allow(dead_code))]
pub fn run(kind: BackendKind, opts: &DemoOptions) -> Result<()> {
    report(kind, 1, opts, run_single(kind, opts)?)
}
