//! `gpubuf bench mpi` (feature `mpi`, under `mpirun -n 6` or `-n 4`): halo updates across
//! ranks against a raw MPI exchange of the same bytes between the same ranks.
//!
//! Six ranks hold the faces of a cubed sphere, four a 2x2 periodic tile layout. Per case
//! (`c48`: 48x48x79 cells, `c96`: 96x96x79; f64, a 3-point halo, dims (x, y, z) with z
//! fastest) it times an update of four scalar fields at once and of one vector pair,
//! `--reps` times after two warm-ups, each rep starting together (a barrier). The figure is
//! the slowest rank's mean; the baseline is the same for `Irecv`/`Isend`/`Waitall` of the
//! updater's message sizes with no pack or unpack; `halo_gbps` is the bytes a rank receives
//! per second in the scalar update.

use super::{progress, Entry, Options, Report};
use gpubuf::halo::{CubedSpherePartitioner, Dim, Partitioner, QuantityHaloSpec, TilePartitioner};
use gpubuf::mpi::mpi::collective::SystemOperation;
use gpubuf::mpi::mpi::request::WaitGuard;
use gpubuf::mpi::mpi::topology::{Communicator, SimpleCommunicator};
use gpubuf::mpi::mpi::traits::{CommunicatorCollectives, Destination, Source};
use gpubuf::mpi::HaloUpdater;
use gpubuf::{with_backend, BackendKind, BackendVisitor, DType, Error, Kernels, NDBuffer, Order, Result};
use std::time::Instant;

/// The cases: name, cells per side, levels.
const CASES: [(&str, usize, usize); 2] = [("c48", 48, 79), ("c96", 96, 79)];
/// Halo width.
const N_HALO: usize = 3;

/// The slowest rank's value of `mine`.
fn slowest(world: &SimpleCommunicator, mine: f64) -> f64 {
    let mut max = 0.0f64;
    world.all_reduce_into(&mine, &mut max, SystemOperation::max());
    max
}

/// Mean seconds of `reps` runs of `f` after two warm-ups, every run started together.
fn mean_secs(world: &SimpleCommunicator, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    f()?;
    let mut total = 0.0;
    for _ in 0..reps {
        world.barrier();
        let t = Instant::now();
        f()?;
        total += t.elapsed().as_secs_f64();
    }
    Ok(total / reps as f64)
}

/// One raw exchange: receive and send `bytes` with every neighbour, no pack or unpack.
fn raw_exchange(
    world: &SimpleCommunicator,
    links: &[(usize, usize)],
    send: &[Vec<u8>],
    recv: &mut [Vec<u8>],
) {
    gpubuf::mpi::mpi::request::scope(|scope| {
        let mut guards = Vec::with_capacity(2 * links.len());
        for ((&(rank, _), buf), _) in links.iter().zip(recv.iter_mut()).zip(0..) {
            let p = world.process_at_rank(rank as i32);
            guards.push(WaitGuard::from(p.immediate_receive_into_with_tag(scope, &mut buf[..], 77)));
        }
        for (&(rank, _), buf) in links.iter().zip(send) {
            let p = world.process_at_rank(rank as i32);
            guards.push(WaitGuard::from(p.immediate_send_with_tag(scope, &buf[..], 77)));
        }
        drop(guards);
    });
}

struct Run<'a> {
    world: &'a SimpleCommunicator,
    opts: &'a Options,
}

impl BackendVisitor for Run<'_> {
    type Output = Report;
    fn visit<B: Kernels>(self, b: B) -> Result<Report> {
        let (world, opts) = (self.world, self.opts);
        let part: Box<dyn Partitioner> = match world.size() {
            6 => Box::new(CubedSpherePartitioner::new(1)?),
            4 => Box::new(TilePartitioner::new((2, 2), true)?),
            n => {
                return Err(Error::invalid(format!(
                    "gpubuf bench mpi runs on 6 ranks (cubed sphere) or 4 (2x2 tiles), not {n}: mpirun -n 6 gpubuf bench mpi"
                )))
            }
        };
        let root = world.rank() == 0;
        let pb = if root {
            progress((CASES.len() * 4 * opts.reps) as u64, "mpi")
        } else {
            indicatif::ProgressBar::hidden()
        };
        let mut results = Vec::new();
        for (name, n, nz) in CASES {
            let n = if opts.quick { n / 4 } else { n };
            let spec =
                QuantityHaloSpec::centered(&[Dim::X, Dim::Y, Dim::Z], &[n, n, nz], N_HALO, 0, DType::F64)?;
            let fields: Vec<NDBuffer<B, f64>> = (0..6)
                .map(|k| NDBuffer::create(&b, &spec.shape, Order::C, Some(k as f64 + 0.5)))
                .collect::<Result<_>>()?;
            let scalars4 = vec![spec.clone(); 4];
            let mut scalar =
                HaloUpdater::<B, f64>::new(&b, world, &*part, &scalars4, None, &format!("bench-{name}-s"))?;
            let one = std::slice::from_ref(&spec);
            let mut vector =
                HaloUpdater::<B, f64>::new(&b, world, &*part, one, Some(one), &format!("bench-{name}-v"))?;
            let xs: Vec<&NDBuffer<B, f64>> = fields[..4].iter().collect();
            let (ux, uy) = (&fields[4], &fields[5]);
            for (kind, up, count) in [("scalar", &mut scalar, 4usize), ("vector", &mut vector, 2)] {
                let links = up.message_bytes();
                let send: Vec<Vec<u8>> = links.iter().map(|&(_, bytes)| vec![1u8; bytes]).collect();
                let mut recv: Vec<Vec<u8>> = links.iter().map(|&(_, bytes)| vec![0u8; bytes]).collect();
                let secs = mean_secs(world, opts.reps, || {
                    pb.inc(1);
                    if count == 4 {
                        up.update(&xs, None)
                    } else {
                        up.update(&[ux], Some(&[uy]))
                    }
                })?;
                let raw = mean_secs(world, opts.reps, || {
                    pb.inc(1);
                    raw_exchange(world, &links, &send, &mut recv);
                    Ok(())
                })?;
                let (secs, raw) = (slowest(world, secs), slowest(world, raw));
                results.push(Entry::versus(format!("{name}/{kind}_update_us"), secs * 1e6, "us", raw * 1e6));
                if count == 4 {
                    let received: usize = links.iter().map(|l| l.1).sum();
                    let gbps = received as f64 / secs.max(1e-12) / 1e9;
                    results.push(Entry {
                        name: format!("{name}/halo_gbps"),
                        value: slowest_inverse(world, gbps),
                        unit: "GB/s".into(),
                        baseline: None,
                        ratio: None,
                    });
                }
            }
        }
        pb.finish_and_clear();
        Ok(Report { bench: "mpi".into(), backend: B::KIND.name().into(), device: b.info().name, results })
    }
}

/// The smallest rank's throughput (the slowest rank's).
fn slowest_inverse(world: &SimpleCommunicator, mine: f64) -> f64 {
    let mut min = 0.0f64;
    world.all_reduce_into(&mine, &mut min, SystemOperation::min());
    min
}

/// Runs the MPI benchmark on every rank; rank 0 prints the report.
///
/// # Errors
/// MPI initialisation, a world of the wrong size, backend and updater errors.
pub fn run(kind: BackendKind, opts: &Options) -> Result<()> {
    let universe =
        gpubuf::mpi::mpi::initialize().ok_or_else(|| Error::invalid("MPI could not be initialised"))?;
    let world = universe.world();
    let report = with_backend(kind, Run { world: &world, opts })?;
    if world.rank() == 0 {
        super::emit(&report, opts)?;
    }
    Ok(())
}
