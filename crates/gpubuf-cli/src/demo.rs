//! `gpubuf demo`: heat diffusion on a periodic square domain, decomposed over MPI ranks
//! (or one process), using every gpubuf component:
//! * halo updates every step (`HaloUpdater` across ranks, a self-exchanging
//!   `HaloDataTransformer` in one process), their buffers from a `MemoryPool`;
//! * a `Mirror` of the local field: the host computes the stencil, `sync` uploads the
//!   interior it changed, the device halo update is brought back with `download`;
//! * a `Mirror` of the parameters (diffusivity, source strength), changed every 50 steps;
//! * a `Bufferizer` batching field snapshots on the device.
//!
//! The result (checksum of the global field in row-major order) is the same with any
//! number of ranks and on every backend: every cell is updated with the same arithmetic.

use crate::bench::progress;
use gpubuf::bufferizer::Bufferizer;
use gpubuf::halo::{Boundary, Dim, HaloDataTransformer, HaloExchangeSpec, QuantityHaloSpec};
use gpubuf::mirror::{DirtyPolicy, Mirror};
use gpubuf::pool::MemoryPool;
use gpubuf::{with_backend, Allocator, BackendKind, BackendVisitor, DType, Error, Kernels, Result};
use ndarray::{Array2, ArrayD, IxDyn};
use std::path::PathBuf;
use std::time::Instant;

/// Demo options.
pub struct DemoOptions {
    /// Global grid size (cells per side).
    pub size: usize,
    /// Time steps.
    pub steps: usize,
    /// Where to write the final field (`.svg`).
    pub out: Option<PathBuf>,
    /// Snapshot every this many steps.
    pub snapshot_every: usize,
}

/// How the halo of the local field is refreshed: across ranks, or by exchanging with itself.
pub(crate) trait Exchange<B: Kernels> {
    /// Refreshes the halo of `field`.
    fn update(&mut self, field: &gpubuf::NDBuffer<B, f64>) -> Result<()>;
    /// Gathers every rank's interior (row-major blocks) on rank 0.
    fn gather(&self, local: &[f64]) -> Result<Option<Vec<Vec<f64>>>>;
}

/// One process: the field's own interior edges fill its halo (periodic).
#[cfg_attr(feature = "mpi", allow(dead_code))]
struct SelfExchange<B: Kernels> {
    t: HaloDataTransformer<B, f64>,
}

#[cfg_attr(feature = "mpi", allow(dead_code))]
impl<B: Kernels> SelfExchange<B> {
    fn new<A: gpubuf::Allocator<Memory = B::Memory>>(
        b: &B,
        pool: &MemoryPool<A>,
        spec: &QuantityHaloSpec,
    ) -> Result<Self> {
        let specs = Boundary::ALL
            .iter()
            .map(|&bd| {
                Ok(HaloExchangeSpec {
                    specification: spec.clone(),
                    pack_slices: spec.boundary_slices(bd, true)?,
                    pack_clockwise_rotation: 0,
                    unpack_slices: spec.boundary_slices(bd.opposite(), false)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(SelfExchange { t: HaloDataTransformer::with_pool(b, pool, specs, None)? })
    }
}

impl<B: Kernels> Exchange<B> for SelfExchange<B> {
    fn update(&mut self, field: &gpubuf::NDBuffer<B, f64>) -> Result<()> {
        let q = vec![field; Boundary::ALL.len()];
        self.t.async_pack(&q, None)?;
        let sent = self.t.pack_buffer()?.clone();
        self.t.receive(&sent)?;
        self.t.async_unpack(&q, None)?;
        self.t.synchronize()
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
/// Host: the initial field and the mirror's host copy, the stencil's next field and the
/// local result (four local fields with halo), plus on rank 0 the global field three times
/// (gathered blocks, their copies, the assembled field). Device: the mirrored field, the
/// snapshot batch and one spare field.
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

/// Runs the simulation on `b` for rank `rank` of a `layout` decomposition; `make_exchange`
/// builds the halo exchange for the local field. Before anything is allocated the options
/// and this rank's memory are checked and the outcome passed through `agree`, which
/// returns an error on every rank when any rank failed (MPI) so that none of them goes on
/// alone. Returns, on rank 0, the global field (row-major, y outer), the elapsed seconds
/// and the snapshot batches taken.
pub(crate) fn simulate<B: Kernels, E: Exchange<B>>(
    b: &B,
    opts: &DemoOptions,
    rank: usize,
    layout: (usize, usize),
    agree: impl FnOnce(Result<()>) -> Result<()>,
    make_exchange: impl FnOnce(&B, &MemoryPool<B>, &QuantityHaloSpec) -> Result<E>,
) -> Result<Option<(Vec<f64>, f64, usize)>> {
    agree(check_options(opts, layout).and_then(|()| check_memory(b, opts, layout, rank)))?;
    let n = opts.size;
    let (ny, nx) = layout;
    let (lx, ly) = (n / nx, n / ny);
    let (j, i) = (rank / nx, rank % nx);
    let pool = MemoryPool::new(b.clone());
    let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y], &[lx, ly], 1, 0, DType::F64)?;
    let mut exchange = make_exchange(b, &pool, &spec)?;
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
    let mut params =
        Mirror::new(b, ndarray::arr1(&[0.2f64, 0.0]).into_dyn().view(), DirtyPolicy::exact(), None)?;
    let interior = field.view(&[1..lx + 1, 1..ly + 1])?;
    let halo_views: Vec<_> = Boundary::ALL
        .iter()
        .map(|&bd| spec.boundary_slices(bd, false).and_then(|r| field.view(&r)))
        .collect::<Result<_>>()?;
    let mut snapshots = Bufferizer::<B, f64>::builder(b, &[lx, ly], SNAPSHOT_BATCH).pool(&pool).build()?;
    let mut batches = 0usize;
    let pb =
        if rank == 0 { progress(opts.steps as u64, "diffusion") } else { indicatif::ProgressBar::hidden() };
    let t0 = Instant::now();
    for step in 0..opts.steps {
        if step % 50 == 0 {
            // The parameters change now and then: only the changed bytes go up.
            let p = params.full();
            params.write(&p, |mut v| {
                v[[0]] = 0.2 - 0.02 * ((step / 50) % 5) as f64;
                v[[1]] = if (step / 50) % 2 == 0 { 0.001 } else { 0.0 };
            })?;
            params.sync()?;
        }
        // Refresh the halo on the device, then bring exactly those bytes back.
        field.sync()?;
        exchange.update(field.device())?;
        for v in &halo_views {
            field.mark_device_dirty(v)?;
        }
        field.download()?;
        // The 5-point stencil on the host, written back through the mirror.
        let (alpha, source) = (params.host()[[0]], params.host()[[1]]);
        let u = field.host();
        let next = Array2::from_shape_fn((lx, ly), |(a, c)| {
            let (a, c) = (a + 1, c + 1);
            let centre = u[[a, c]];
            let lap = u[[a - 1, c]] + u[[a + 1, c]] + u[[a, c - 1]] + u[[a, c + 1]] - 4.0 * centre;
            centre + alpha * lap + source
        });
        field.copy_from(&interior, next.into_dyn().view())?;
        if opts.snapshot_every > 0 && step % opts.snapshot_every == 0 {
            field.sync()?;
            let snap = field.device().slice(&[1..lx + 1, 1..ly + 1])?;
            snapshots.append(&snap)?;
            if snapshots.is_full() {
                drop(snapshots.take_batch()?);
                batches += 1;
            }
        }
        pb.inc(1);
    }
    field.sync()?;
    let secs = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    // Row-major local interior (y outer, x inner), then the global field on rank 0.
    let u = field.host();
    let local: Vec<f64> =
        (0..ly).flat_map(|c| (0..lx).map(move |a| (a, c))).map(|(a, c)| u[[a + 1, c + 1]]).collect();
    let Some(blocks) = exchange.gather(&local)? else { return Ok(None) };
    let mut global = vec![0.0; n * n];
    for (r, block) in blocks.iter().enumerate() {
        let (bj, bi) = (r / nx, r % nx);
        for c in 0..ly {
            for a in 0..lx {
                global[(bj * ly + c) * n + bi * lx + a] = block[c * lx + a];
            }
        }
    }
    Ok(Some((global, secs, batches)))
}

/// Writes the field as an SVG heat map (at most 256 x 256 cells drawn).
///
/// # Errors
/// [`Error::ShapeMismatch`] when `field` does not hold `n * n` values; write errors.
pub fn write_svg(path: &std::path::Path, field: &[f64], n: usize) -> Result<()> {
    use std::fmt::Write as _;
    if n.checked_mul(n) != Some(field.len()) {
        return Err(Error::ShapeMismatch { expected: vec![n, n], got: vec![field.len()] });
    }
    let step = n.div_ceil(256).max(1);
    let cells = n.div_ceil(step);
    let px = 512.0 / cells as f64;
    let (lo, hi) = field.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| (l.min(v), h.max(v)));
    let span = (hi - lo).max(1e-12);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="512" height="512" shape-rendering="crispEdges">"#
    );
    for cy in 0..cells {
        for cx in 0..cells {
            let v = (field[(cy * step) * n + cx * step] - lo) / span;
            let (r, g, bl) =
                ((255.0 * v) as u8, (255.0 * (1.0 - (2.0 * v - 1.0).abs())) as u8, (255.0 * (1.0 - v)) as u8);
            let _ = write!(
                s,
                r#"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="rgb({r},{g},{bl})"/>"#,
                cx as f64 * px,
                (cells - 1 - cy) as f64 * px,
                px + 0.05,
                px + 0.05
            );
        }
    }
    s.push_str("</svg>\n");
    std::fs::write(path, s).map_err(|e| Error::invalid(format!("writing {}: {e}", path.display())))
}

#[cfg_attr(feature = "mpi", allow(dead_code))]
struct Single<'a>(&'a DemoOptions);

impl BackendVisitor for Single<'_> {
    type Output = Option<(Vec<f64>, f64, usize)>;
    fn visit<B: Kernels>(self, b: B) -> Result<Self::Output> {
        simulate(&b, self.0, 0, (1, 1), |r| r, |b, pool, spec| SelfExchange::new(b, pool, spec))
    }
}

/// Prints the outcome of a run on rank 0.
pub(crate) fn report(
    kind: BackendKind,
    ranks: usize,
    opts: &DemoOptions,
    out: Option<(Vec<f64>, f64, usize)>,
) -> Result<()> {
    let Some((global, secs, batches)) = out else { return Ok(()) };
    println!(
        "demo: {n}x{n} heat diffusion, {steps} steps on {ranks} rank(s), backend {kind}: {:.1} steps/s, {batches} snapshot batches",
        opts.steps as f64 / secs.max(1e-9),
        n = opts.size,
        steps = opts.steps
    );
    println!("checksum {:016x} (sum {:.12e})", checksum(&global), global.iter().sum::<f64>());
    if let Some(path) = &opts.out {
        write_svg(path, &global, opts.size)?;
        println!("field written to {}", path.display());
    }
    Ok(())
}

/// Runs the demo in this process (one rank).
///
/// # Errors
/// Backend and component errors.
#[cfg_attr(feature = "mpi", allow(dead_code))]
pub fn run(kind: BackendKind, opts: &DemoOptions) -> Result<()> {
    let out = with_backend(kind, Single(opts))?;
    report(kind, 1, opts, out)
}
