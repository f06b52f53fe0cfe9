//! The cubed sphere with one rank per face, through each kind of updater.

use super::expect_copied;
use super::{global, sl, Dt, Mode, NZ, SENTINEL};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{DType, Error, Kernels, Result};
use gpubuf_halo::{receiving_boundary, Boundary, CubedSpherePartitioner, Dim, Partitioner, QuantityHaloSpec};
use gpubuf_mpi::mpi::topology::{Communicator, SimpleCommunicator};
use gpubuf_mpi::HaloUpdater;
use gpubuf_testkit::reference::rotate;
use ndarray::{ArrayD, IxDyn};

/// The cubed sphere with one rank per face: every halo equals the neighbour face's edge,
/// rotated by an independent reference, with vector components swapped and negated.
pub fn cube_case<B: Kernels>(b: &B, comm: &SimpleCommunicator, mode: Mode, dt: Dt) -> Result<()> {
    let shared = mode.shared();
    let part = CubedSpherePartitioner::new(1)?;
    let me = comm.rank() as usize;
    let n = 4usize;
    let dims = [Dim::X, Dim::Y, Dim::Z];
    let spec = QuantityHaloSpec::centered(&dims, &[n, n, NZ], 1, 0, DType::F64)?;
    let face_field = |salt: f64, face: usize| -> ArrayD<f64> {
        ArrayD::from_shape_fn(IxDyn(&spec.shape), |ix| {
            let inside = (1..1 + n).contains(&ix[0]) && (1..1 + n).contains(&ix[1]);
            if inside {
                global(salt, face, ix[0] - 1, ix[1] - 1, ix[2])
            } else {
                SENTINEL
            }
        })
    };
    let (sx, sy, ss) = (0.0, 0.5, 0.25);
    let field = |salt: f64| mode.place(b, me, NDBuffer::from_ndarray(b, face_field(salt, me).view())?);
    let (mut ux, mut uy, mut s) = (field(sx)?, field(sy)?, field(ss)?);
    let one = std::slice::from_ref(&spec);
    let make = |y: Option<&[QuantityHaloSpec]>, name: &str| {
        if shared {
            HaloUpdater::<B, f64>::on_node(b, comm, &part, one, y, name)
        } else {
            HaloUpdater::<B, f64>::new(b, comm, &part, one, y, name)
        }
    };
    // With datatypes on ranks 0 and 3 only (`Dt::Mixed`), rank 5 also makes its updaters
    // with the datatype path off by default, so that it does not take part in negation
    // at the receiver. Of the rotated links (0-2, 0-4, 1-3, 1-5, 2-4, 3-5), 1-5 and 3-5
    // then keep negation at the sender, 0-2, 0-4 and 1-3 move raw vector messages
    // between a datatype side and a buffer side, and 2-4 between two buffer sides, all
    // in the same update.
    let creation_off = dt == Dt::Mixed && me == 5;
    let before = std::env::var_os(gpubuf_mpi::DATATYPES_ENV);
    if creation_off {
        std::env::set_var(gpubuf_mpi::DATATYPES_ENV, "0");
    }
    let made = make(Some(one), "uv").and_then(|v| Ok((v, make(None, "s")?)));
    if creation_off {
        match before {
            Some(v) => std::env::set_var(gpubuf_mpi::DATATYPES_ENV, v),
            None => std::env::remove_var(gpubuf_mpi::DATATYPES_ENV),
        }
    }
    let (mut vec_up, mut sc_up) = made?;
    dt.set(&mut vec_up, me);
    dt.set(&mut sc_up, me);
    for _ in 0..2 {
        vec_up.update(&mut [&mut ux], Some(&mut [&mut uy]))?;
        sc_up.update(&mut [&mut s], None)?;
    }
    expect_copied(&vec_up, me, mode, 2)?;
    expect_copied(&sc_up, me, mode, 2)?;
    // Scalars have no negation: datatypes both ways when on.
    dt.check(&sc_up, me, mode)?;
    // With datatypes on everywhere (and by default), the vector messages across rotated
    // edges go raw, so every vector message moves as a datatype too, both ways.
    let every = 2 * 2 * vec_up.message_bytes().iter().map(|l| l.1).sum::<usize>();
    let default_on = std::env::var(gpubuf_mpi::DATATYPES_ENV).map_or(true, |v| v == "1");
    let all_typed =
        dt == Dt::On && default_on && mode == Mode::Messages && B::KIND == gpubuf_core::BackendKind::Cpu;
    if all_typed && vec_up.typed_bytes() != every {
        return Err(Error::invalid(format!(
            "rank {me}: {} of {every} vector bytes moved as datatypes",
            vec_up.typed_bytes()
        )));
    }
    let (gx, gy, gs) = (ux.to_ndarray()?, uy.to_ndarray()?, s.to_ndarray()?);
    for br in Boundary::ALL {
        let recv = spec.boundary_slices(br, false)?;
        let Some(nb) = part.neighbor(me, br) else { continue };
        // The neighbour's boundary whose data lands here, and the turns it makes.
        let (bs, turns) = Boundary::ALL
            .iter()
            .filter_map(|&bs| part.neighbor(nb.rank, bs).filter(|x| x.rank == me).map(|x| (bs, x.rotation)))
            .find(|&(bs, r)| receiving_boundary(bs, r) == br)
            .ok_or_else(|| Error::invalid("no partner boundary"))?;
        let send = spec.boundary_slices(bs, true)?;
        let cut = |salt: f64| {
            rotate(&face_field(salt, nb.rank).slice(sl(&send).as_slice()).to_owned(), &dims, -turns)
        };
        let (rx, ry, rs) = (cut(sx), cut(sy), cut(ss));
        let neg = |a: &ArrayD<f64>| a.mapv(|v| -v);
        let (want_x, want_y) = match (-turns).rem_euclid(4) {
            1 => (ry.clone(), neg(&rx)),
            2 => (neg(&rx), neg(&ry)),
            3 => (neg(&ry), rx.clone()),
            _ => (rx.clone(), ry.clone()),
        };
        for (name, got, want) in [("x", &gx, &want_x), ("y", &gy, &want_y), ("scalar", &gs, &rs)] {
            let halo: Vec<f64> = got.slice(sl(&recv).as_slice()).iter().copied().collect();
            let want: Vec<f64> = want.iter().copied().collect();
            if halo != want {
                return Err(Error::invalid(format!("rank {me} {br:?} {name}: got {halo:?}, want {want:?}")));
            }
        }
    }
    Ok(())
}
