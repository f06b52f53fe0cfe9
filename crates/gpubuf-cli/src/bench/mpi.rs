//! `gpubuf bench mpi` (feature `mpi`, under `mpirun -n 6` or `-n 4`): halo updates across
//! ranks against a raw MPI exchange of the same bytes between the same ranks.
//!
//! Six ranks hold the faces of a cubed sphere, four a 2x2 periodic tile layout. Per case
//! (`c48`: 48x48x79 cells, `c96`: 96x96x79; f64, a 3-point halo, dims (x, y, z) with z
//! fastest) it times an update of four scalar fields at once and of one vector pair, six
//! ways, each with its own updater where it has one:
//! - `<kind>_update_us`: `HaloUpdater::on_node` with the fields in node-shared memory (each
//!   halo copied once, straight from the neighbour's field, on the CPU backend);
//! - `<kind>_window_us`: the same with ordinary fields (packed into the receiver's
//!   shared-memory slot and unpacked from it);
//! - `<kind>_messages_us`: `HaloUpdater::new`, every message through MPI, as the updater
//!   picks (MPI derived datatypes on host links, gathered from the fields and scattered into
//!   the halos by MPI, vector components across rotated edges negated by the receiver,
//!   unless `GPUBUF_MPI_DATATYPES=0`);
//! - `<kind>_packed_us`: the same with datatypes switched off after it was made (every
//!   message packed and unpacked through the link's buffers; vector messages across
//!   rotated edges still negated by their receiver, as settled when it was made);
//! - `<kind>_floor_us`: the raw exchange with one contiguous copy of each message on each
//!   side (into the send buffer before its send, out of the receive buffer after the
//!   receives): what any update of strided fields through MPI adds at least, where MPI moves
//!   only contiguous memory in one copy;
//! - the raw exchange itself, every entry's baseline: `Irecv`/`Isend`/`Waitall` of the
//!   updater's message sizes, no pack or unpack.
//!
//! The ways take turns: two warm-up rounds, then `--reps` rounds that each run every way
//! once, every run started together (a barrier), in an order that moves on every round, so
//! that all see the same period of the machine. The figure is the slowest rank's mean;
//! `halo_gbps` is the bytes a rank receives per second in the scalar `update` way (the
//! slowest rank's).
//!
//! With `GPUBUF_BENCH_BREAKDOWN=1` in the environment it adds, per case, where an update's
//! time goes ([`gpubuf::mpi::Phases`]: post, pack, send, wait, unpack, complete) and the raw
//! exchange's (post: `Irecv`/`Isend`; wait: `Waitall`), in microseconds per update, as
//! `<case>/<kind>_<phase>_us` entries (`<kind>_messages_<phase>_us` for the message-passing
//! updater, `<kind>_packed_<phase>_us` with datatypes off, `<kind>_raw_<phase>_us` for the
//! raw exchange) whose value is the slowest rank's and whose baseline is the mean over
//! ranks.

use super::{progress, Entry, Options, Report};
use gpubuf::halo::{CubedSpherePartitioner, Dim, Partitioner, QuantityHaloSpec, TilePartitioner};
use gpubuf::mpi::mpi::collective::SystemOperation;
use gpubuf::mpi::mpi::request::WaitGuard;
use gpubuf::mpi::mpi::topology::{Communicator, SimpleCommunicator};
use gpubuf::mpi::mpi::traits::{CommunicatorCollectives, Destination, Source};
use gpubuf::mpi::{node_buffer, HaloUpdater};
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

/// The ways an update is timed, as named in the entries (`<case>/<kind>_<way>_us`), the
/// raw exchange last.
const WAYS: [&str; 6] = ["update", "window", "messages", "packed", "floor", "raw"];
/// The index of the copied raw exchange in [`WAYS`].
const FLOOR: usize = 4;
/// The index of the raw exchange in [`WAYS`].
const RAW: usize = 5;

/// The way run `i`-th in `round`: every way once per round, the first one moving on by one
/// every round and the order reversed every other round, so that no way always follows
/// the same one (whose traffic and cache it would inherit).
fn round_way(round: usize, i: usize) -> usize {
    let n = WAYS.len();
    let i = if round % 2 == 1 { n - 1 - i } else { i };
    (i + round) % n
}

/// Contiguous copies of every message made around a raw exchange: `from[k]` into the send
/// buffer of link `k` before its send, and its receive buffer into `to[k]` once all arrived.
struct Copies<'a> {
    from: &'a [Vec<u8>],
    to: &'a mut [Vec<u8>],
}

/// One raw exchange: receive and send every link's bytes with its neighbour, no pack or
/// unpack unless `copies` asks for one contiguous copy of each message on each side; the
/// time of posting the messages and of waiting for them is added to `split`.
fn raw_exchange(
    world: &SimpleCommunicator,
    links: &[(usize, usize)],
    send: &mut [Vec<u8>],
    recv: &mut [Vec<u8>],
    split: &mut [f64; 2],
    mut copies: Option<Copies<'_>>,
) {
    let t0 = Instant::now();
    gpubuf::mpi::mpi::request::scope(|scope| {
        let mut guards = Vec::with_capacity(2 * links.len());
        for (&(rank, _), buf) in links.iter().zip(recv.iter_mut()) {
            let p = world.process_at_rank(rank as i32);
            guards.push(WaitGuard::from(p.immediate_receive_into_with_tag(scope, &mut buf[..], 77)));
        }
        for (k, (&(rank, _), buf)) in links.iter().zip(send.iter_mut()).enumerate() {
            if let Some(c) = &copies {
                buf.copy_from_slice(&c.from[k]);
            }
            let buf: &Vec<u8> = buf;
            let p = world.process_at_rank(rank as i32);
            guards.push(WaitGuard::from(p.immediate_send_with_tag(scope, &buf[..], 77)));
        }
        let t1 = Instant::now();
        split[0] += (t1 - t0).as_secs_f64();
        drop(guards);
        split[1] += t1.elapsed().as_secs_f64();
    });
    if let Some(c) = &mut copies {
        for (to, from) in c.to.iter_mut().zip(recv.iter()) {
            to.copy_from_slice(from);
        }
    }
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
            progress((CASES.len() * 2 * WAYS.len() * (opts.reps + 2)) as u64, "mpi")
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
            // Collective constructors (`on_node` and `new`), in the same order on every
            // rank and dropped in the same order too; one updater per way an update is
            // timed, so that each keeps its own phases.
            let scalars4 = vec![spec.clone(); 4];
            let one = std::slice::from_ref(&spec);
            let mut updaters = Vec::with_capacity(8);
            for (kind, vectors) in [("s", None), ("v", Some(one))] {
                let specs = if vectors.is_some() { one } else { &scalars4[..] };
                for way in ["u", "w"] {
                    let tag = format!("bench-{name}-{kind}{way}");
                    updaters.push(HaloUpdater::<B, f64>::on_node(&b, world, &*part, specs, vectors, &tag)?);
                }
                for way in ["m", "p"] {
                    let tag = format!("bench-{name}-{kind}{way}");
                    let mut up = HaloUpdater::<B, f64>::new(&b, world, &*part, specs, vectors, &tag)?;
                    // The packed way: every message packed and unpacked through the
                    // link's buffers.
                    up.set_datatypes(up.datatypes() && way == "m");
                    updaters.push(up);
                }
            }
            // Borrowed exclusively by the updates: `on_node` copies straight from the
            // node-shared fields only when nothing else can write them meanwhile.
            let mut plain: Vec<&mut NDBuffer<B, f64>> = fields.iter_mut().collect();
            let mut shared: Vec<&mut NDBuffer<B, f64>> = node.iter_mut().collect();
            let (scalar_ups, vector_ups) = updaters.split_at_mut(4);
            for (kind, ups, count) in [("scalar", scalar_ups, 4usize), ("vector", vector_ups, 2)] {
                let links = ups[0].message_bytes();
                let buffers =
                    |v: u8| -> Vec<Vec<u8>> { links.iter().map(|&(_, bytes)| vec![v; bytes]).collect() };
                let (mut send, mut recv, from, mut to) = (buffers(1), buffers(0), buffers(2), buffers(0));
                let (mut split, mut untimed) = ([0.0f64; 2], [0.0f64; 2]);
                let mut secs = [0.0f64; WAYS.len()];
                // Two warm-up rounds, then `reps` timed ones; each round runs every way
                // once, each started together, in an order that changes every round.
                for round in 0..opts.reps + 2 {
                    if round == 2 {
                        ups.iter_mut().for_each(|u| u.reset_phases());
                        split = [0.0; 2];
                    }
                    for i in 0..WAYS.len() {
                        let way = round_way(round, i);
                        pb.inc(1);
                        world.barrier();
                        let t = Instant::now();
                        if way == RAW {
                            raw_exchange(world, &links, &mut send, &mut recv, &mut split, None);
                        } else if way == FLOOR {
                            let copies = Copies { from: &from, to: &mut to };
                            raw_exchange(world, &links, &mut send, &mut recv, &mut untimed, Some(copies));
                        } else {
                            let f = if way == 0 { &mut shared } else { &mut plain };
                            let (scalars, vectors) = f.split_at_mut(4);
                            if count == 4 {
                                ups[way].update(scalars, None)?;
                            } else {
                                let (x, y) = vectors.split_at_mut(1);
                                ups[way].update(x, Some(y))?;
                            }
                        }
                        if round >= 2 {
                            secs[way] += t.elapsed().as_secs_f64();
                        }
                    }
                }
                let reps = opts.reps.max(1) as f64;
                let us: Vec<f64> = secs.iter().map(|s| slowest(world, s / reps) * 1e6).collect();
                for (way, &value) in WAYS.iter().zip(&us).take(RAW) {
                    results.push(Entry::versus(format!("{name}/{kind}_{way}_us"), value, "us", us[RAW]));
                }
                if breakdown {
                    let names = ["post", "pack", "send", "wait", "unpack", "complete"];
                    let labels = [
                        kind.to_string(),
                        String::new(),
                        format!("{kind}_messages"),
                        format!("{kind}_packed"),
                    ];
                    for (label, up) in labels.iter().zip(ups.iter()).filter(|(l, _)| !l.is_empty()) {
                        let mine: Vec<(&str, f64)> = names.into_iter().zip(up.phases().mean_us()).collect();
                        phase_entries(world, &format!("{name}/{label}"), &mine, &mut results);
                    }
                    let raw_phases = [("post", split[0] * 1e6 / reps), ("wait", split[1] * 1e6 / reps)];
                    phase_entries(world, &format!("{name}/{kind}_raw"), &raw_phases, &mut results);
                }
                if count == 4 {
                    let received: usize = links.iter().map(|l| l.1).sum();
                    let gbps = received as f64 / (secs[0] / reps).max(1e-12) / 1e9;
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
