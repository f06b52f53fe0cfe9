//! `gpubuf bench mpi` (feature `mpi`, under `mpirun -n 6` or `-n 4`): halo updates across
//! ranks against a raw MPI exchange of the same bytes between the same ranks.
//!
//! Six ranks hold the faces of a cubed sphere, four a 2x2 periodic tile layout. Per case
//! (`c48`: 48x48x79 cells, `c96`: 96x96x79; f64, a 3-point halo, dims (x, y, z) with z
//! fastest) it times an update of four scalar fields at once and of one vector pair,
//! `--reps` times after two warm-ups, each rep starting together (a barrier), three ways:
//! an updater from `HaloUpdater::on_node` with the fields in node-shared memory
//! (`<kind>_update_us`: each halo copied once, straight from the neighbour's field, on the
//! CPU backend), the same updater with ordinary fields (`<kind>_window_us`: packed into the
//! receiver's shared-memory slot and unpacked from it), and one from `HaloUpdater::new`
//! (`<kind>_messages_us`: every message
//! through MPI, as the updater picks: MPI derived datatypes on host links, gathered from
//! the fields and scattered into the halos by MPI where a side has no negation, unless
//! `GPUBUF_MPI_DATATYPES=0`), and that one again with datatypes off (`<kind>_packed_us`:
//! every message packed and unpacked through the link's buffers). The figure is the slowest rank's mean; the baseline is the same for
//! `Irecv`/`Isend`/`Waitall` of the updater's message sizes with no pack or unpack;
//! `halo_gbps` is the bytes a rank receives per second in the scalar update.
//!
//! With `GPUBUF_BENCH_BREAKDOWN=1` in the environment it adds, per case, where an update's
//! time goes ([`gpubuf::mpi::Phases`]: post, pack, send, wait, unpack, complete) and the raw
//! exchange's (post: `Irecv`/`Isend`; wait: `Waitall`), in microseconds per update, as
//! `<case>/<kind>_<phase>_us` entries (`<kind>_messages_<phase>_us` for the message-passing
//! updater, `<kind>_packed_<phase>_us` with datatypes off, `<kind>_raw_<phase>_us` for the raw exchange) whose value is the slowest rank's and whose baseline
//! is the mean over ranks.

use super::{progress, Entry, Options, Report};
use gpubuf::halo::{CubedSpherePartitioner, Dim, Partitioner, QuantityHaloSpec, TilePartitioner};
use gpubuf::mpi::mpi::collective::SystemOperation;
use gpubuf::mpi::mpi::request::WaitGuard;
use gpubuf::mpi::mpi::topology::{Communicator, SimpleCommunicator};
use gpubuf::mpi::mpi::traits::{CommunicatorCollectives, Destination, Source};
use gpubuf::mpi::{node_buffer, HaloUpdater, Phases};
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

/// The environment variable that turns on the per-phase breakdown.
const BREAKDOWN_ENV: &str = "GPUBUF_BENCH_BREAKDOWN";

/// The mean over ranks of `mine`.
fn mean_rank(world: &SimpleCommunicator, mine: f64) -> f64 {
    let mut sum = 0.0f64;
    world.all_reduce_into(&mine, &mut sum, SystemOperation::sum());
    sum / f64::from(world.size().max(1))
}

/// Per-phase entries `<prefix>_<phase>_us`: the slowest rank's microseconds per update,
/// against the mean rank's as the baseline.
fn phase_entries(world: &SimpleCommunicator, prefix: &str, phases: &[(&str, f64)], out: &mut Vec<Entry>) {
    for &(phase, us) in phases {
        let (max, mean) = (slowest(world, us), mean_rank(world, us));
        out.push(Entry::versus(format!("{prefix}_{phase}_us"), max, "us", mean));
    }
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

/// One raw exchange: receive and send `bytes` with every neighbour, no pack or unpack;
/// the time of posting the messages and of waiting for them is added to `split`.
fn raw_exchange(
    world: &SimpleCommunicator,
    links: &[(usize, usize)],
    send: &[Vec<u8>],
    recv: &mut [Vec<u8>],
    split: &mut [f64; 2],
) {
    let t0 = Instant::now();
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
        let t1 = Instant::now();
        split[0] += (t1 - t0).as_secs_f64();
        drop(guards);
        split[1] += t1.elapsed().as_secs_f64();
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
        let breakdown = std::env::var_os(BREAKDOWN_ENV).is_some_and(|v| !v.is_empty() && v != "0");
        let pb = if root {
            progress((CASES.len() * 10 * opts.reps) as u64, "mpi")
        } else {
            indicatif::ProgressBar::hidden()
        };
        let mut results = Vec::new();
        for (name, n, nz) in CASES {
            let n = if opts.quick { n / 4 } else { n };
            let spec =
                QuantityHaloSpec::centered(&[Dim::X, Dim::Y, Dim::Z], &[n, n, nz], N_HALO, 0, DType::F64)?;
            let mut fields: Vec<NDBuffer<B, f64>> = (0..6)
                .map(|k| NDBuffer::create(&b, &spec.shape, Order::C, Some(k as f64 + 0.5)))
                .collect::<Result<_>>()?;
            // The same fields in node-shared memory (on the CPU backend), which `on_node`
            // updaters copy halos straight out of.
            let mut node: Vec<NDBuffer<B, f64>> = (0..6)
                .map(|k| node_buffer(&b, &spec.shape, Order::C, Some(k as f64 + 0.5)))
                .collect::<Result<_>>()?;
            let scalars4 = vec![spec.clone(); 4];
            let one = std::slice::from_ref(&spec);
            // Collective constructors (`on_node` and `new`), in the same order on
            // every rank; dropped in the same order too.
            let mut scalar = HaloUpdater::<B, f64>::on_node(
                &b,
                world,
                &*part,
                &scalars4,
                None,
                &format!("bench-{name}-s"),
            )?;
            let mut vector = HaloUpdater::<B, f64>::on_node(
                &b,
                world,
                &*part,
                one,
                Some(one),
                &format!("bench-{name}-v"),
            )?;
            let mut scalar_mp =
                HaloUpdater::<B, f64>::new(&b, world, &*part, &scalars4, None, &format!("bench-{name}-sm"))?;
            let mut vector_mp =
                HaloUpdater::<B, f64>::new(&b, world, &*part, one, Some(one), &format!("bench-{name}-vm"))?;
            // Borrowed exclusively by the updates: `on_node` copies straight from the
            // node-shared fields only when nothing else can write them meanwhile.
            let mut plain: Vec<&mut NDBuffer<B, f64>> = fields.iter_mut().collect();
            let mut shared: Vec<&mut NDBuffer<B, f64>> = node.iter_mut().collect();
            let kinds =
                [("scalar", &mut scalar, &mut scalar_mp, 4usize), ("vector", &mut vector, &mut vector_mp, 2)];
            for (kind, up, up_mp, count) in kinds {
                let links = up.message_bytes();
                let send: Vec<Vec<u8>> = links.iter().map(|&(_, bytes)| vec![1u8; bytes]).collect();
                let mut recv: Vec<Vec<u8>> = links.iter().map(|&(_, bytes)| vec![0u8; bytes]).collect();
                let timed = |up: &mut HaloUpdater<'_, B, f64>,
                             f: &mut [&mut NDBuffer<B, f64>]|
                 -> Result<(f64, Phases)> {
                    let mut calls = 0usize;
                    let secs = mean_secs(world, opts.reps, || {
                        pb.inc(1);
                        if calls == 2 {
                            // The breakdown counts the timed updates, not the two warm-ups.
                            up.reset_phases();
                        }
                        calls += 1;
                        let (scalars, vectors) = f.split_at_mut(4);
                        if count == 4 {
                            up.update(scalars, None)
                        } else {
                            let (x, y) = vectors.split_at_mut(1);
                            up.update(x, Some(y))
                        }
                    })?;
                    Ok((slowest(world, secs), up.phases()))
                };
                let (secs, phases) = timed(up, &mut shared)?;
                let (secs_win, _) = timed(up, &mut plain)?;
                let (secs_mp, phases_mp) = timed(up_mp, &mut plain)?;
                // The same updater with MPI derived datatypes off: every message packed
                // and unpacked through the link's buffers.
                let picked = up_mp.datatypes();
                up_mp.set_datatypes(false);
                up_mp.reset_phases();
                let (secs_pk, phases_pk) = timed(up_mp, &mut plain)?;
                up_mp.set_datatypes(picked);
                let mut split = [0.0f64; 2];
                let mut runs = 0usize;
                let raw = mean_secs(world, opts.reps, || {
                    pb.inc(1);
                    if runs == 2 {
                        split = [0.0; 2];
                    }
                    runs += 1;
                    raw_exchange(world, &links, &send, &mut recv, &mut split);
                    Ok(())
                })?;
                let raw = slowest(world, raw);
                results.push(Entry::versus(format!("{name}/{kind}_update_us"), secs * 1e6, "us", raw * 1e6));
                results.push(Entry::versus(
                    format!("{name}/{kind}_window_us"),
                    secs_win * 1e6,
                    "us",
                    raw * 1e6,
                ));
                results.push(Entry::versus(
                    format!("{name}/{kind}_messages_us"),
                    secs_mp * 1e6,
                    "us",
                    raw * 1e6,
                ));
                results.push(Entry::versus(
                    format!("{name}/{kind}_packed_us"),
                    secs_pk * 1e6,
                    "us",
                    raw * 1e6,
                ));
                if breakdown {
                    let names = ["post", "pack", "send", "wait", "unpack", "complete"];
                    let labelled = [
                        (kind.to_string(), phases),
                        (format!("{kind}_messages"), phases_mp),
                        (format!("{kind}_packed"), phases_pk),
                    ];
                    for (label, p) in labelled {
                        let mine: Vec<(&str, f64)> = names.into_iter().zip(p.mean_us()).collect();
                        phase_entries(world, &format!("{name}/{label}"), &mine, &mut results);
                    }
                    let reps = opts.reps.max(1) as f64;
                    let raw_phases = [("post", split[0] * 1e6 / reps), ("wait", split[1] * 1e6 / reps)];
                    phase_entries(world, &format!("{name}/{kind}_raw"), &raw_phases, &mut results);
                }
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
