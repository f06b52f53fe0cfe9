//! Halo updates across MPI ranks, checked against values cut from a single-process global
//! field. Run by `cargo xtask test-all` under `mpirun -n 4` (2-D tiles: periodic 2x2,
//! non-periodic 2x2, and 1x2 periodic where one neighbour sits on two sides) and `-n 6`
//! (cubed sphere, one rank per face); alone it runs a 1x1 periodic tile (every neighbour is
//! the rank itself). Prints `N passed, M failed` on rank 0 and exits non-zero on failure.

use cube::cube_case;
use errors::{errors_case, expect_invalid};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{DType, Error, Kernels, Result};
use gpubuf_halo::{Dim, QuantityHaloSpec, TilePartitioner};
use gpubuf_mpi::mpi::topology::{Color, Communicator, SimpleCommunicator};
use gpubuf_mpi::mpi::traits::CommunicatorCollectives;
use gpubuf_mpi::HaloUpdater;
use ndarray::{ArrayD, IxDyn, SliceInfoElem};
use node::{expect_copied, Mode};
use typed::Dt;

#[path = "mpi_halo/cube.rs"]
mod cube;
#[path = "mpi_halo/errors.rs"]
mod errors;
#[path = "mpi_halo/held.rs"]
mod held;
#[path = "mpi_halo/mismatch.rs"]
mod mismatch;
#[path = "mpi_halo/node.rs"]
mod node;
#[path = "mpi_halo/one_rank.rs"]
mod one_rank;
#[path = "mpi_halo/typed.rs"]
mod typed;

const H: usize = 2;
/// 8 levels: runs of 64 bytes, long enough for the datatype path.
const NZ: usize = 8;

const SENTINEL: f64 = -1.0;

fn sl(r: &[std::ops::Range<usize>]) -> Vec<SliceInfoElem> {
    r.iter()
        .map(|r| SliceInfoElem::Slice { start: r.start as isize, end: Some(r.end as isize), step: 1 })
        .collect()
}

/// The global field of quantity `salt` at global cell (gi, gj, k) of face `face`.
fn global(salt: f64, face: usize, gi: usize, gj: usize, k: usize) -> f64 {
    salt + face as f64 * 1e6 + gi as f64 * 1000.0 + gj as f64 * 10.0 + k as f64
}

/// The local block of a 2-D tile decomposition, with the global field it is cut from.
struct Tile {
    part: TilePartitioner,
    me: usize,
    spec: QuantityHaloSpec,
    nxl: usize,
    nyl: usize,
}

impl Tile {
    fn new(comm: &SimpleCommunicator, layout: (usize, usize), periodic: bool) -> Result<Self> {
        let (nxl, nyl) = (5usize, 4usize);
        let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y, Dim::Z], &[nxl, nyl, NZ], H, 0, DType::F64)?;
        Ok(Tile { part: TilePartitioner::new(layout, periodic)?, me: comm.rank() as usize, spec, nxl, nyl })
    }

    /// The local array of quantity `salt`: the global field inside, the sentinel in the halo.
    fn array<B: Kernels>(&self, b: &B, salt: f64) -> Result<NDBuffer<B, f64>> {
        let (j, i) = self.part.subtile_index(self.me);
        let (nxl, nyl) = (self.nxl, self.nyl);
        let a = ArrayD::from_shape_fn(IxDyn(&self.spec.shape), |ix| {
            let (a, bb, k) = (ix[0], ix[1], ix[2]);
            if (H..H + nxl).contains(&a) && (H..H + nyl).contains(&bb) {
                global(salt, 0, i * nxl + a - H, j * nyl + bb - H, k)
            } else {
                SENTINEL
            }
        });
        NDBuffer::from_ndarray(b, a.view())
    }

    /// Checks every point of `array` (quantity `salt`) after halo updates.
    fn verify<B: Kernels>(&self, array: &NDBuffer<B, f64>, salt: f64) -> Result<()> {
        let (j, i) = self.part.subtile_index(self.me);
        let (layout, periodic) = (self.part.layout(), self.part.periodic());
        let (gx, gy) = (layout.1 * self.nxl, layout.0 * self.nyl);
        for (ix, &v) in array.to_ndarray()?.indexed_iter() {
            let (a, bb, k) = (ix[0] as isize, ix[1] as isize, ix[2]);
            let gi = (i * self.nxl) as isize + a - H as isize;
            let gj = (j * self.nyl) as isize + bb - H as isize;
            let inside = (0..gx as isize).contains(&gi) && (0..gy as isize).contains(&gj);
            let want = if periodic || inside {
                global(salt, 0, gi.rem_euclid(gx as isize) as usize, gj.rem_euclid(gy as isize) as usize, k)
            } else {
                SENTINEL
            };
            if v != want {
                return Err(Error::invalid(format!(
                    "rank {} salt {salt} cell {ix:?}: got {v}, want {want}",
                    self.me
                )));
            }
        }
        Ok(())
    }
}

/// A 2-D tile case: scalars and a vector pair, several updates of new values each time.
/// With a shared `mode` the updaters move messages between ranks of the node through shared
/// memory ([`HaloUpdater::on_node`]), and odd ranks wait before completing each update, so
/// their neighbours start the next update (and would overwrite a slot not yet unpacked,
/// without the credits) while they lag.
fn tile_case<B: Kernels>(
    b: &B,
    comm: &SimpleCommunicator,
    layout: (usize, usize),
    periodic: bool,
    mode: Mode,
    dt: Dt,
) -> Result<()> {
    let shared = mode.shared();
    let tile = Tile::new(comm, layout, periodic)?;
    let specs = [tile.spec.clone(), tile.spec.clone()];
    let make = |name: &str, y: bool| {
        let y = y.then_some(&specs[..1]);
        let x = if y.is_some() { &specs[..1] } else { &specs[..] };
        if shared {
            HaloUpdater::<B, f64>::on_node(b, comm, &tile.part, x, y, name)
        } else {
            HaloUpdater::<B, f64>::new(b, comm, &tile.part, x, y, name)
        }
    };
    let mut scalars = make("scalars", false)?;
    let mut vectors = make("wind", true)?;
    dt.set(&mut scalars, tile.me);
    dt.set(&mut vectors, tile.me);
    let mut wrong = None;
    let mut kept = Vec::new();
    // The same quantities every update, rewritten as soon as `wait` returns: a neighbour
    // still copying from them then (node memory, a sender that did not wait for its
    // credits) would get the next update's values.
    let mut arrays: [NDBuffer<B, f64>; 4] = (0..4)
        .map(|_| mode.place(b, tile.me, tile.array(b, 0.0)?))
        .collect::<Result<Vec<_>>>()?
        .try_into()
        .map_err(|_| Error::invalid("four arrays"))?;
    for it in 0..4 {
        if it == 2 {
            // New arrays at new addresses (the old ones kept alive): the datatypes are
            // remade for them.
            let fresh: Vec<NDBuffer<B, f64>> =
                (0..4).map(|_| mode.place(b, tile.me, tile.array(b, 0.0)?)).collect::<Result<_>>()?;
            let fresh: [NDBuffer<B, f64>; 4] = fresh.try_into().map_err(|_| Error::invalid("four arrays"))?;
            kept.push(std::mem::replace(&mut arrays, fresh));
        }
        let salts = [0.0, 0.25, 0.5, 0.75].map(|s| s + f64::from(it) * 0.0625);
        for (a, &salt) in arrays.iter().zip(&salts) {
            a.copy_from(&tile.array(b, salt)?)?;
        }
        let [a0, a1, a2, a3] = &mut arrays;
        let (mut s, mut vx, mut vy) = ([a0, a1], [a2], [a3]);
        // Start both before waiting on either: their messages must not mix.
        let scalar_update = scalars.start(&mut s, None)?;
        let vector_update = vectors.start(&mut vx, Some(&mut vy))?;
        if shared && tile.me % 2 == 1 {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        vector_update.wait()?;
        scalar_update.wait()?;
        // A wrong halo is recorded, not returned at once: every rank goes through the same
        // updates (a rank leaving early would leave its neighbours waiting).
        for (q, &salt) in salts.iter().enumerate() {
            if let Err(e) = tile.verify(&arrays[q], salt) {
                wrong.get_or_insert(Error::invalid(format!("update {it}: {e}")));
            }
        }
    }
    if let Some(e) = wrong {
        return Err(e);
    }
    // Every neighbour of a host-memory rank shares its node here: all go through the
    // window with `on_node`, none without it (and none for device memory).
    let host = B::KIND == gpubuf_core::BackendKind::Cpu;
    for up in [&scalars, &vectors] {
        let want = if shared && host { up.neighbors() } else { Vec::new() };
        if up.shared_neighbors() != want {
            return Err(Error::invalid(format!(
                "{} backend: {:?} through shared memory, want {want:?}",
                B::KIND.name(),
                up.shared_neighbors()
            )));
        }
    }
    // Host memory goes to MPI in place; device memory through host staging, both ways.
    for up in [&scalars, &vectors] {
        dt.check(up, tile.me, mode)?;
        expect_copied(up, tile.me, mode, 4)?;
        let staged = up.staged_bytes();
        let host = B::KIND == gpubuf_core::BackendKind::Cpu;
        if host != (staged == 0) {
            return Err(Error::invalid(format!("{} backend: {staged} bytes staged", B::KIND.name())));
        }
    }
    Ok(())
}

/// Two updaters with messages of equal sizes, started in opposite orders on neighbouring
/// ranks and in flight at once, each completed in the other order: every message reaches
/// its own updater (tags depend on the name, not on the order of the calls). A second
/// updater of a name alive on the communicator is refused (on every rank: `new` is
/// collective); once the first is dropped it is not.
fn tags_case<B: Kernels>(b: &B, comm: &SimpleCommunicator, layout: (usize, usize)) -> Result<()> {
    let tile = Tile::new(comm, layout, true)?;
    let (mut u, mut v) = (tile.array(b, 0.0)?, tile.array(b, 0.5)?);
    let spec = std::slice::from_ref(&tile.spec);
    let make = |name: &str| HaloUpdater::<B, f64>::new(b, comm, &tile.part, spec, None, name);
    let (mut first, mut second) = (make("first")?, make("second")?);
    if first.tags().iter().any(|t| second.tags().iter().any(|o| o.1 == t.1 && o.0 == t.0)) {
        return Err(Error::invalid("two updaters share a tag"));
    }
    expect_invalid("a second live updater named first", make("first").map(drop))?;
    // Started in opposite orders: with one tag for both, MPI would pair one rank's first
    // message with its neighbour's second receive.
    let (mut qu, mut qv) = ([&mut u], [&mut v]);
    let (first_update, second_update) = if tile.me % 2 == 0 {
        let f = first.start(&mut qu, None)?;
        (f, second.start(&mut qv, None)?)
    } else {
        let s = second.start(&mut qv, None)?;
        (first.start(&mut qu, None)?, s)
    };
    second_update.wait()?;
    first_update.wait()?;
    tile.verify(&u, 0.0)?;
    tile.verify(&v, 0.5)?;
    drop(first);
    let mut w = tile.array(b, 0.75)?;
    make("first")?.update(&mut [&mut w], None)?;
    tile.verify(&w, 0.75)
}

/// Tags are claimed per communicator: the same name on a duplicate communicator is
/// allowed (same tags, kept apart by the communicator) while the first is alive and in
/// flight; an updater owning its communicator works, and dropping it releases its claim.
fn comms_case<B: Kernels>(b: &B, comm: &SimpleCommunicator, layout: (usize, usize)) -> Result<()> {
    let tile = Tile::new(comm, layout, true)?;
    let (mut u, mut v, mut w) = (tile.array(b, 0.0)?, tile.array(b, 0.5)?, tile.array(b, 0.75)?);
    let spec = std::slice::from_ref(&tile.spec);
    let mut first = HaloUpdater::<B, f64>::new(b, comm, &tile.part, spec, None, "same")?;
    let dup = comm.duplicate();
    let mut other = HaloUpdater::<B, f64>::new(b, &dup, &tile.part, spec, None, "same")?;
    if first.tags() != other.tags() {
        return Err(Error::invalid("one name gave different tags"));
    }
    expect_invalid("a second updater named same on the duplicate", {
        HaloUpdater::<B, f64>::new(b, &dup, &tile.part, spec, None, "same").map(drop)
    })?;
    let (mut qu, mut qv) = ([&mut u], [&mut v]);
    let first_update = first.start(&mut qu, None)?;
    other.start(&mut qv, None)?.wait()?;
    first_update.wait()?;
    tile.verify(&u, 0.0)?;
    tile.verify(&v, 0.5)?;
    drop(other);
    let mut owned: HaloUpdater<'static, B, f64> =
        HaloUpdater::new(b, comm.duplicate(), &tile.part, spec, None, "same")?;
    owned.update(&mut [&mut w], None)?;
    tile.verify(&w, 0.75)?;
    drop(owned);
    let again = comm.duplicate();
    let mut z = tile.array(b, 0.125)?;
    HaloUpdater::<B, f64>::new(b, &again, &tile.part, spec, None, "same")?.update(&mut [&mut z], None)?;
    tile.verify(&z, 0.125)
}

/// Specs that disagree between ranks (both constructors), and writes to node-shared
/// fields during one-copy updates.
fn shared_memory_cases<B: Kernels>(
    b: &B,
    world: &SimpleCommunicator,
    layout: (usize, usize),
    results: &mut Vec<(String, Result<()>)>,
) {
    let (tag, name) = (B::KIND.name(), format!("tile {}x{}", layout.0, layout.1));
    for (how, shared) in [("", false), (" on node", true)] {
        let r = mismatch::mismatch_case(b, world, layout, shared);
        results.push((format!("{tag} {name} mismatched specs{how}"), r));
    }
    results.push((format!("{tag} {name} node field with a clone"), held::clone_case(b, world, layout)));
    results.push((format!("{tag} {name} node field leaked update"), held::leak_case(b, world, layout)));
    results.push((format!("{tag} {name} one rank fails"), one_rank::one_rank_case(b, world, layout)));
}

fn run_all<B: Kernels>(b: &B, world: &SimpleCommunicator, results: &mut Vec<(String, Result<()>)>) {
    let tag = B::KIND.name();
    match world.size() {
        1 => {
            results.push((
                format!("{tag} tile 1x1 periodic"),
                tile_case(b, world, (1, 1), true, Mode::Messages, Dt::Off),
            ));
            results.push((
                format!("{tag} tile 1x1 periodic on node"),
                tile_case(b, world, (1, 1), true, Mode::Window, Dt::On),
            ));
            let r = tile_case(b, world, (1, 1), true, Mode::Messages, Dt::On);
            results.push((format!("{tag} tile 1x1 periodic datatypes"), r));
            results.push((format!("{tag} tile 1x1 errors"), errors_case(b, world, (1, 1))));
            results.push((format!("{tag} tile 1x1 tags"), tags_case(b, world, (1, 1))));
            results.push((format!("{tag} tile 1x1 communicators"), comms_case(b, world, (1, 1))));
            results
                .push((format!("{tag} tile 1x1 one rank fails"), one_rank::one_rank_case(b, world, (1, 1))));
        }
        4 => {
            for dt in [Dt::Off, Dt::On, Dt::Even] {
                let r = tile_case(b, world, (2, 2), true, Mode::Messages, dt);
                results.push((format!("{tag} tile 2x2 periodic datatypes {dt:?}"), r));
                let r = tile_case(b, world, (2, 2), false, Mode::Messages, dt);
                results.push((format!("{tag} tile 2x2 open datatypes {dt:?}"), r));
            }
            results.push((
                format!("{tag} tile 2x2 periodic on node"),
                tile_case(b, world, (2, 2), true, Mode::Window, Dt::On),
            ));
            results.push((
                format!("{tag} tile 2x2 open on node"),
                tile_case(b, world, (2, 2), false, Mode::Window, Dt::On),
            ));
            for mode in [Mode::Node, Mode::Mixed] {
                let r = tile_case(b, world, (2, 2), true, mode, Dt::On);
                results.push((format!("{tag} tile 2x2 periodic {mode:?} memory"), r));
            }
            results.push((format!("{tag} tile 2x2 errors"), errors_case(b, world, (2, 2))));
            shared_memory_cases(b, world, (2, 2), results);
            results.push((format!("{tag} tile 2x2 tags"), tags_case(b, world, (2, 2))));
            results.push((format!("{tag} tile 2x2 communicators"), comms_case(b, world, (2, 2))));
            // Two independent 1x2 periodic decompositions: each rank's west and east
            // neighbour is the same rank.
            let pair = world.split_by_color(Color::with_value(world.rank() / 2));
            if let Some(pair) = pair {
                for dt in [Dt::Off, Dt::On, Dt::Even] {
                    let r = tile_case(b, &pair, (1, 2), true, Mode::Messages, dt);
                    results.push((format!("{tag} tile 1x2 periodic datatypes {dt:?}"), r));
                }
                let on_node = tile_case(b, &pair, (1, 2), true, Mode::Window, Dt::On);
                results.push((format!("{tag} tile 1x2 periodic on node"), on_node));
                let node = tile_case(b, &pair, (1, 2), true, Mode::Mixed, Dt::On);
                results.push((format!("{tag} tile 1x2 periodic mixed memory"), node));
                let r = one_rank::one_rank_case(b, &pair, (1, 2));
                results.push((format!("{tag} tile 1x2 periodic one rank fails"), r));
            }
        }
        6 => {
            for dt in [Dt::Off, Dt::On, Dt::Even, Dt::Mixed] {
                let r = cube_case(b, world, Mode::Messages, dt);
                results.push((format!("{tag} cubed sphere 1x1 datatypes {dt:?}"), r));
            }
            results
                .push((format!("{tag} cubed sphere 1x1 on node"), cube_case(b, world, Mode::Window, Dt::On)));
            results.push((
                format!("{tag} cubed sphere 1x1 node memory"),
                cube_case(b, world, Mode::Node, Dt::On),
            ));
            results.push((
                format!("{tag} cubed sphere 1x1 mixed memory"),
                cube_case(b, world, Mode::Mixed, Dt::On),
            ));
            results.push((format!("{tag} tile 2x3 errors"), errors_case(b, world, (2, 3))));
            shared_memory_cases(b, world, (2, 3), results);
            results.push((format!("{tag} tile 2x3 tags"), tags_case(b, world, (2, 3))));
            results.push((format!("{tag} tile 2x3 communicators"), comms_case(b, world, (2, 3))));
        }
        n => results.push((format!("{tag} world of {n}"), Err(Error::invalid("run with 1, 4 or 6 ranks")))),
    }
}

fn main() {
    let Some(universe) = gpubuf_mpi::mpi::initialize() else {
        eprintln!("MPI could not be initialised");
        std::process::exit(1);
    };
    let world = universe.world();
    let mut results = Vec::new();
    run_all(&gpubuf_testkit::cpu(), &world, &mut results);
    if let Some(cl) = gpubuf_testkit::opencl() {
        run_all(&cl, &world, &mut results);
    }
    let failed_here = results.iter().filter(|r| r.1.is_err()).count() as u64;
    for (name, r) in &results {
        match r {
            Ok(()) => println!("rank {}: {name} ... ok", world.rank()),
            Err(e) => println!("rank {}: {name} ... FAILED: {e}", world.rank()),
        }
    }
    let mut failed = 0u64;
    world.all_reduce_into(&failed_here, &mut failed, gpubuf_mpi::mpi::collective::SystemOperation::sum());
    if world.rank() == 0 {
        let total = results.len() as u64;
        println!("{} passed, {} failed", total.saturating_sub(failed.min(total)), failed);
    }
    drop(universe);
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
