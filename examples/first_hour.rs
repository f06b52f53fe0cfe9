//! A first hour with gpubuf: the backend chosen on the command line, arrays from a memory
//! pool, a periodic halo exchange of a 48 x 48 x 10 field with itself, a bufferizer
//! batching z-levels, and a mirror that uploads only what changed. One concrete type,
//! `gpubuf::Device`, stands for whichever backend was chosen: no visitor trait, no
//! turbofish, no byte counts.
//!
//! Run: `cargo run -p gpubuf-examples --example first_hour -- cpu`, or
//! `cargo run -p gpubuf-examples --features opencl --example first_hour -- opencl`.

use gpubuf::ndarray::{Array2, ArrayD, ArrayViewD, IxDyn, Slice};
use gpubuf::{
    Backend, Boundary, Bufferizer, DType, Device, Dim, DirtyPolicy, Error, HaloField, HaloFields, MemoryPool,
    Mirror, NDBuffer, QuantityHaloSpec, Result,
};
use std::ops::Range;

/// The part of `a` inside `ranges` (one range per axis).
fn part<'a>(a: &'a ArrayD<f64>, ranges: &[Range<usize>]) -> ArrayViewD<'a, f64> {
    a.slice_each_axis(|ax| Slice::from(ranges[ax.axis.index()].clone()))
}

fn main() -> Result<()> {
    let name = std::env::args().nth(1).unwrap_or_else(|| "cpu".into());
    let device: Device = name.parse()?;
    let info = device.info();
    println!("device: {} ({}, {})", info.name, device.kind(), info.vendor);

    // Arrays from a pool: blocks come back to it when the arrays drop.
    let pool = MemoryPool::new(device.clone());
    let spec = QuantityHaloSpec::centered(&[Dim::X, Dim::Y, Dim::Z], &[48, 48, 10], 3, 0, DType::F64)?;
    let start = ArrayD::from_shape_fn(IxDyn(&spec.shape), |i| (i[0] * 10_000 + i[1] * 100 + i[2]) as f64);
    let mut u: NDBuffer<Device, f64> = pool.from_ndarray(&device, start.view())?;

    // One rank that is its own neighbour on every side: each edge's and corner's interior
    // goes to the opposite halo. The fields are described once; every step is one update.
    let mut halo: HaloFields<Device, f64> =
        HaloFields::periodic_with_pool(&device, &pool, vec![HaloField::Scalar(spec.clone())])?;
    halo.update(&mut [&mut u])?;
    halo.finalize()?;
    let after = u.to_ndarray()?;
    for b in Boundary::ALL {
        let sent = part(&start, &spec.boundary_slices(b, true)?);
        let received = part(&after, &spec.boundary_slices(b.opposite(), false)?);
        if sent != received {
            return Err(Error::invalid(format!("the {:?} halo does not hold the {b:?} edge", b.opposite())));
        }
    }
    println!(
        "halo: periodic exchange of a {:?} array ({} halo points per side): all {} halos hold the opposite edge ({} elements packed)",
        spec.shape,
        spec.n_halo,
        Boundary::ALL.len(),
        halo.buffer_len(),
    );

    // A bufferizer of 48 x 48 z-levels, its batch buffers from the same pool: the interior
    // of four levels of `u` arrive as one strided batch (one gather on the device).
    let mut levels: Bufferizer<Device, f64> =
        Bufferizer::builder(&device, &[48, 48], 4).pool(&pool).build()?;
    let by_level = u.transpose(Some(&[2, 0, 1]))?;
    levels.append(&by_level.slice(&[0..4, 3..51, 3..51])?)?;
    let batch = levels.take_batch()?.to_ndarray()?;
    let expected = part(&after, &[3..51, 3..51, 0..4]).permuted_axes(IxDyn(&[2, 0, 1]));
    if batch != expected {
        return Err(Error::invalid("the batch does not hold the four levels"));
    }
    println!("bufferizer: a batch of {:?} levels taken, capacity {}", batch.shape(), levels.capacity());

    // A mirror of a host coefficient field: change one row, upload only that row.
    let coefficients = Array2::from_elem((48, 48), 1.0).into_dyn();
    let mut mirror: Mirror<Device, f64> =
        Mirror::new(&device, coefficients.view(), DirtyPolicy::exact(), None)?;
    let row = mirror.view(&[7..8, 0..48])?;
    mirror.mul_assign(&row, 2.0)?;
    let sent = mirror.sync()?;
    if mirror.device().to_ndarray()? != mirror.host() {
        return Err(Error::invalid("the mirror's device copy differs from the host"));
    }
    println!("mirror: one row changed, {} bytes uploaded in {} command(s)", sent.bytes, sent.commands);

    drop((u, by_level, levels, mirror));
    device.synchronize(device.default_stream())?;
    let stats = pool.stats();
    println!(
        "pool: {} blocks in use, {} hits, {} misses, {} bytes managed",
        stats.active_blocks, stats.hits, stats.misses, stats.managed_bytes
    );
    Ok(())
}
