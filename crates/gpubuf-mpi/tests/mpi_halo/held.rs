//! Quantities that the neighbours read during a one-copy update (`on_node` over
//! `node_buffer` fields) cannot be written meanwhile: a field reachable through another
//! handle goes the two-copy way (read only inside `start`), and a leaked update keeps the
//! field itself, leaving the caller an empty array. Even ranks write their fields during
//! the update while odd ranks lag before reading theirs, so a neighbour that copied from
//! a field being written would get the written values.

use super::node::Mode;
use super::{Tile, SENTINEL};
use gpubuf_core::{BackendKind, Error, Kernels, Result};
use gpubuf_mpi::mpi::topology::SimpleCommunicator;
use gpubuf_mpi::HaloUpdater;
use std::time::Duration;

const LAG: Duration = Duration::from_millis(100);

/// Every rank keeps a clone of its node-shared field and even ranks overwrite the field
/// through it between `start` and `wait`: the updates go the two-copy way (nothing is
/// copied straight from a field), and odd ranks' halos hold the values from `start`.
pub fn clone_case<B: Kernels>(b: &B, comm: &SimpleCommunicator, layout: (usize, usize)) -> Result<()> {
    let tile = Tile::new(comm, layout, true)?;
    let spec = std::slice::from_ref(&tile.spec);
    let mut up = HaloUpdater::<B, f64>::on_node(b, comm, &tile.part, spec, None, "held")?;
    let mut t = Mode::Node.place(b, tile.me, tile.array(b, 0.0)?)?;
    let writer = t.clone();
    let even = tile.me % 2 == 0;
    let mut wrong = None;
    for it in 0..3 {
        let salt = f64::from(it) * 0.25;
        t.copy_from(&tile.array(b, salt)?)?;
        let mut q = [&mut t];
        let update = up.start(&mut q, None)?;
        if even {
            writer.fill(SENTINEL)?;
        } else {
            std::thread::sleep(LAG);
        }
        update.wait()?;
        if !even {
            if let Err(e) = tile.verify(&t, salt) {
                wrong.get_or_insert(Error::invalid(format!("update {it}: {e}")));
            }
        }
    }
    if up.copied_bytes() != 0 {
        wrong.get_or_insert(Error::invalid(format!(
            "{} bytes copied straight from fields another handle could write",
            up.copied_bytes()
        )));
    }
    drop(up);
    wrong.map_or(Ok(()), Err)
}

/// Even ranks leak the guard of a one-copy update and write through their handle at once:
/// on host memory the updater holds the field itself and the handle is an empty array, so
/// the odd ranks, which lag before reading, get the values from `start`. Dropping the
/// updater completes the leaked update.
pub fn leak_case<B: Kernels>(b: &B, comm: &SimpleCommunicator, layout: (usize, usize)) -> Result<()> {
    let tile = Tile::new(comm, layout, true)?;
    let spec = std::slice::from_ref(&tile.spec);
    let mut up = HaloUpdater::<B, f64>::on_node(b, comm, &tile.part, spec, None, "leak")?;
    let mut t = Mode::Node.place(b, tile.me, tile.array(b, 0.5)?)?;
    let host = B::KIND == BackendKind::Cpu;
    let mut wrong = None;
    if tile.me % 2 == 0 {
        std::mem::forget(up.start(&mut [&mut t], None)?);
        if host && t.shape() != [0] {
            wrong = Some(Error::invalid(format!("a leaked update left the caller a {:?} field", t.shape())));
        }
        if !up.in_flight() {
            wrong = Some(Error::invalid("a leaked update is not in flight"));
        }
        t.fill(SENTINEL)?;
    } else {
        let mut q = [&mut t];
        let update = up.start(&mut q, None)?;
        std::thread::sleep(LAG);
        update.wait()?;
        wrong = tile.verify(&t, 0.5).err();
    }
    drop(up);
    wrong.map_or(Ok(()), Err)
}
